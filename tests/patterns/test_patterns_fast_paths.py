"""The batch fast paths the connector's receivers and write tasks use (``send_many``,
``recv_values``), on each wire a production path runs them on: the sink's ``push`` sends
with ``ReroutingPush`` and the source's ``pull`` receives with ``ZmtpPull`` (the engine)
over plain tcp/ipc, with libzmq's ``Pull`` under CURVE or over inproc
(``spark_zmq.patterns.wires``); ``scatter``/``gather`` are the engine's only. The
``recv_block`` path is tested on both wires in ``test_zmtp_pull.py``."""

from __future__ import annotations

import sys

import pytest
import zmq

from spark_zmq.patterns import Gather, Pull, Push, ReroutingPush, Scatter, ZmtpPull
from spark_zmq.patterns.rcvmore import rcvmore_check

pytestmark = pytest.mark.timeout(30)

#: (PUSH class, PULL class) of each wire
wires = pytest.mark.parametrize("wire", [(Push, Pull), (ReroutingPush, ZmtpPull)], ids=["libzmq", "engine"])


@wires
def test_send_many_then_recv_values_round_trip_in_order(wire):
    push_cls, pull_cls = wire
    with (
        pull_cls(f"@inproc://fast-order-{pull_cls.__name__}", hwm=10_000) as pull,
        push_cls(f">inproc://fast-order-{pull_cls.__name__}", hwm=10_000) as push,
    ):
        messages = [b"m-%d" % i for i in range(5000)]
        assert push.send_many(messages, timeout=5) == 5000
        got = []
        while len(got) < 5000:
            values, topics = pull.recv_values(1000, timeout=5)
            assert topics is None
            got += values
        assert got == messages


def test_recv_values_splits_topic_frames_and_keeps_single_frame_topics_null():
    with Pull("@inproc://fast-topics") as pull, Push("inproc://fast-topics") as push:
        push.send(b"plain", timeout=5)
        push.send([b"t1", b"payload"], timeout=5)
        push.send([b"t2", b"a", b"b"], timeout=5)
        values, topics = [], []
        while len(values) < 3:
            v, t = pull.recv_values(10, timeout=5)
            values += v
            topics += t if t is not None else [None] * len(v)
        assert values == [b"plain", b"payload", b"ab"]
        assert topics == [None, b"t1", b"t2"]


def test_recv_values_on_gather_discards_multipart_whole():
    # a plain pyzmq PUSH cannot reach our Gather's inproc (a socketpair of our own): tcp
    with Gather("@tcp://127.0.0.1:*") as gather:
        raw = zmq.Context.instance().socket(zmq.PUSH)
        raw.connect(gather.last_endpoint)
        raw.send_multipart([b"x", b"y"])
        raw.send(b"ok")
        values = []
        while not values:
            values, topics = gather.recv_values(10, timeout=5)
        assert values == [b"ok"] and topics is None and gather.discarded_multipart == 1
        raw.close(0)


@wires
def test_send_many_rejects_non_bytes_before_sending_anything(wire):
    push_cls, pull_cls = wire
    with (
        pull_cls(f"@inproc://fast-bad-{pull_cls.__name__}") as pull,
        push_cls(f">inproc://fast-bad-{pull_cls.__name__}") as push,
    ):
        with pytest.raises(TypeError, match="not str"):
            push.send_many([b"fine", "text"], timeout=1)
        with pytest.raises(TimeoutError):
            pull.recv(timeout=0.2)


@pytest.mark.parametrize("push_cls", [Push, ReroutingPush], ids=["libzmq", "engine"])
def test_send_many_times_out_with_no_peer_and_says_how_many_went(push_cls):
    with push_cls(">tcp://127.0.0.1:1", immediate=True) as push:
        with pytest.raises(TimeoutError) as info:
            push.send_many([b"a", b"b"], timeout=0.2)
        assert info.value.sent == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "sender, receiver",
    [(Push, Pull), (ReroutingPush, ZmtpPull), (Scatter, Gather)],
    ids=["libzmq", "engine", "engine-scatter"],
)
def test_send_many_timing_out_midway_says_how_many_were_queued_on_either_wire(sender, receiver):
    """A peer that stops reading: ``send_many`` gives up after ``timeout`` with a
    ``SendTimeoutError`` whose ``sent`` is what was queued, so the caller resumes from there."""
    from spark_zmq.patterns import SendTimeoutError

    with receiver("@tcp://127.0.0.1:*", hwm=2) as stalled:
        with sender(stalled.last_endpoint, hwm=2, linger=0) as push:
            push.send(b"first", timeout=10)  # connected: the rest waits only for room
            assert stalled.recv(timeout=10) == b"first"
            messages = [bytes(4096)] * 100_000
            with pytest.raises(SendTimeoutError) as info:
                push.send_many(messages, timeout=0.5)
            assert 0 < info.value.sent < len(messages)
            assert isinstance(info.value, TimeoutError)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the libzmq lookup reads /proc/self/maps")
def test_rcvmore_check_asks_libzmq_directly_and_agrees_with_pyzmq():
    """The receivers' RCVMORE check bypasses pyzmq's Socket.get (2.5 us a call); on Linux it
    must actually be the direct libzmq call, and give pyzmq's answer frame by frame."""
    with Pull("@inproc://fast-rcvmore") as pull, Push("inproc://fast-rcvmore") as push:
        check = rcvmore_check(pull._socket)
        assert check.__name__ == "rcvmore", "fell back to pyzmq's Socket.get"
        push.send([b"a", b"b", b"c"], timeout=5)
        push.send(b"single", timeout=5)
        sock = pull._socket
        seen = []
        for _ in range(4):
            assert sock.poll(5000)
            sock.recv()
            seen.append((bool(check()), bool(sock.get(zmq.RCVMORE))))
        assert seen == [(True, True), (True, True), (False, False), (False, False)]
