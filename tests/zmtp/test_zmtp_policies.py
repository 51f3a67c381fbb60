"""Properties of the ZMTP engine's policies (``zmtp.policies``): round-robin over peers with
room, fair queueing of what peers sent. They are plain data structures, so they are
checked here without sockets; the RFC 49 tests check them through real peers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples

from spark_zmq.patterns.message_block import MessageRun
from spark_zmq.patterns.wires.zmtp.connection import Peer
from spark_zmq.patterns.wires.zmtp.policies import FairQueue, RoundRobin

pytestmark = pytest.mark.timeout(120)

FAST = settings(max_examples=examples(200), deadline=None)


@FAST
@given(st.integers(1, 6), st.integers(0, 3), st.lists(st.integers(0, 5), max_size=6), st.integers(1, 30))
def test_round_robin_takes_the_peers_with_room_in_turn(n, hwm, backlog, sends):
    lb = RoundRobin()
    peers = [Peer() for _ in range(n)]
    for peer, queued in zip(peers, backlog):
        peer.outbox.extend([b"x"] * queued)
    for peer in peers:
        lb.add(peer)
        lb.add(peer)  # a second add changes nothing
    assert lb.peers == peers
    order = []
    for _ in range(sends):
        peer = lb.next_with_room(hwm)
        with_room = [p for p in peers if hwm == 0 or len(p.outbox) < hwm]
        if not with_room:
            assert peer is None
            break
        assert peer in with_room
        order.append(peers.index(peer))
    # peers with room take turns in order: consecutive picks go forward around the ring
    rooms = [i for i, p in enumerate(peers) if hwm == 0 or len(p.outbox) < hwm]
    if rooms:
        assert order == [rooms[k % len(rooms)] for k in range(len(order))]


@FAST
@given(st.integers(2, 6), st.data())
def test_round_robin_keeps_the_turn_when_a_peer_is_removed(n, data):
    lb = RoundRobin()
    peers = [Peer() for _ in range(n)]
    for peer in peers:
        lb.add(peer)
    picks = data.draw(st.integers(0, 2 * n), label="picks")
    for _ in range(picks):
        lb.next_with_room(0)
    victim = data.draw(st.sampled_from(peers), label="victim")
    lb.remove(victim)
    lb.remove(victim)  # a second remove changes nothing
    ring = [peers[(picks + k) % n] for k in range(n)]  # whose turn it was, then the others in order
    assert [lb.next_with_room(0) for _ in range(n - 1)] == [p for p in ring if p is not victim]


@FAST
@given(
    st.lists(st.lists(st.integers(0, 30), max_size=8), min_size=1, max_size=5),
    st.integers(1, 20),
    st.one_of(st.none(), st.integers(0, 100)),
    st.integers(0, 10),
)
def test_fair_queue_hands_out_each_peers_messages_in_order_within_the_limits(sizes, max_messages, max_bytes, hwm):
    fq = FairQueue(hwm)
    peers = [Peer() for _ in sizes]
    sent = [[b"%d:%d:" % (p, i) + b"x" * size for i, size in enumerate(lengths)] for p, lengths in enumerate(sizes)]
    for peer, messages in zip(peers, sent):
        if messages:
            assert fq.deliver(peer, list(messages)) == bool(hwm and len(messages) >= hwm)
    paused = {id(p) for p in peers if p.paused}
    resumed: list = []
    received: list = []
    for _ in range(sum(map(len, sent)) + 1):
        out = fq.take(max_messages, max_bytes, resumed.append)
        assert len(out) <= max_messages
        if max_bytes is not None and len(out) > 1:
            assert sum(map(len, out[:-1])) < max_bytes  # about max_bytes: the last may pass it
        if not out:
            break
        received += out
    if max_bytes == 0:
        assert received == [] and not resumed
        return
    for p, messages in enumerate(sent):  # each peer's messages, in the order it sent them
        assert [m for m in received if m.startswith(b"%d:" % p)] == messages
    assert len(received) == sum(map(len, sent)) and not fq
    assert all(not p.inbox and p.inbox_bytes == 0 for p in peers)
    # each paused peer was asked to be resumed, once
    assert sorted(map(id, resumed)) == sorted(paused)


def test_fair_queue_gives_each_peer_a_share():
    """Ten messages asked of two peers holding ten each: the first in turn gives its half
    at once, then shares shrink as they alternate; neither is drained while the other waits."""
    fq = FairQueue(0)
    a, b = Peer(), Peer()
    fq.deliver(a, [b"a%d" % i for i in range(10)])
    fq.deliver(b, [b"b%d" % i for i in range(10)])
    out = fq.take(10, None, lambda peer: None)
    assert out[:5] == [b"a%d" % i for i in range(5)]
    from_a = [m for m in out if m.startswith(b"a")]
    from_b = [m for m in out if m.startswith(b"b")]
    assert len(out) == 10 and from_b and len(from_a) < 10
    rest = fq.take(100, None, lambda peer: None)
    assert from_a + [m for m in rest if m.startswith(b"a")] == [b"a%d" % i for i in range(10)]
    assert from_b + [m for m in rest if m.startswith(b"b")] == [b"b%d" % i for i in range(10)]


@FAST
@given(
    st.integers(1, 5), st.integers(0, 6), st.lists(st.integers(0, 6), max_size=5), st.integers(0, 40), st.integers(0, 4)
)
def test_taking_whole_turns_queues_what_one_message_at_a_time_would(n, hwm, backlog, count, turn):
    """``take_turns`` (the send path's batch step), then one ``next_with_room`` per message
    for what it left, gives every peer the same messages in the same order, and leaves the
    turn in the same place, as one ``next_with_room`` per message from the start."""

    def ring():
        lb = RoundRobin()
        peers = [Peer() for _ in range(n)]
        for peer, queued in zip(peers, backlog):
            peer.outbox.extend([b"old"] * queued)
        for peer in peers:
            lb.add(peer)
        for _ in range(turn):  # start mid-ring
            lb._next = (lb._next + 1) % n
        return lb, peers

    messages = [b"m%d" % i for i in range(count)]
    one_by_one, peers_a = ring()
    for message in messages:
        peer = one_by_one.next_with_room(hwm)
        if peer is None:
            break
        peer.outbox.append(message)
    batched, peers_b = ring()
    queued, touched = batched.take_turns(messages, 0, hwm)
    assert all(p in peers_b for p in touched) and queued <= count
    for message in messages[queued:]:
        peer = batched.next_with_room(hwm)
        if peer is None:
            break
        peer.outbox.append(message)
    assert [list(p.outbox) for p in peers_b] == [list(p.outbox) for p in peers_a]
    assert batched._next == one_by_one._next


def _run(messages: list[bytes]) -> MessageRun:
    offsets = np.zeros(len(messages) + 1, np.int64)
    np.cumsum([len(m) for m in messages], out=offsets[1:])
    return MessageRun(b"".join(messages), offsets)


@FAST
@given(
    st.lists(st.lists(st.tuples(st.booleans(), st.integers(1, 12)), max_size=5), min_size=1, max_size=4),
    st.integers(1, 20),
    st.one_of(st.none(), st.integers(1, 100)),
    st.integers(0, 30),
)
def test_fair_queue_with_runs_hands_out_what_it_would_one_message_at_a_time(deliveries, max_messages, max_bytes, hwm):
    """Runs of messages split in bulk (``MessageRun``) are messages like any other: counted
    against ``max_messages`` and the high-water mark one by one, split where a take ends
    inside one, each peer's order kept, nothing lost or repeated."""
    fq = FairQueue(hwm)
    peers = [Peer() for _ in deliveries]
    sent: list[list[bytes]] = [[] for _ in peers]
    for p, (peer, batches) in enumerate(zip(peers, deliveries)):
        for as_run, n in batches:
            messages = [b"%d:%d;" % (p, len(sent[p]) + i) for i in range(n)]
            sent[p] += messages
            paused = fq.deliver_run(peer, _run(messages)) if as_run else fq.deliver(peer, messages)
            assert paused == bool(hwm and len(sent[p]) >= hwm)
    received: list[bytes] = []
    for _ in range(sum(map(len, sent)) + 1):
        out = fq.take(max_messages, max_bytes, lambda peer: None)
        if not out:
            break
        messages = [m for item in out for m in (item.messages() if isinstance(item, MessageRun) else [item])]
        assert 1 <= len(messages) <= max_messages
        if max_bytes is not None and len(messages) > 1:
            assert sum(map(len, messages[:-1])) < max_bytes
        received += messages
    for p, messages in enumerate(sent):
        assert [m for m in received if m.startswith(b"%d:" % p)] == messages
    assert len(received) == sum(map(len, sent)) and not fq
    assert all(p.inbox_count == 0 and p.inbox_bytes == 0 for p in peers)
