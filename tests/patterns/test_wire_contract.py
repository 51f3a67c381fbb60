"""The wire contract (``patterns.wires.contract``) and the factories that choose a wire per
pattern (``patterns.wires``), on real sockets against plain pyzmq peers (no draft API:
``Gather`` takes PUSH peers, ``Scatter`` PULL peers).

mypy proves statically that every class the factories return satisfies the contract; these
tests check the same at run time, and that each pattern's socket keeps the contract end to
end: receive with limits and a timeout, send with a timeout, the monitor, the counters,
close.
"""

from __future__ import annotations

import time

import pytest
import zmq

from spark_zmq.options.table import SINK_PATTERNS, SOURCE_PATTERNS
from spark_zmq.patterns import ReceivingWire, SendingWire, SocketClosedError, receiving_wire, sending_wire
from spark_zmq.patterns.wires import RECEIVING_PATTERNS, SENDING_PATTERNS

pytestmark = pytest.mark.timeout(60)


def members(protocol: type) -> set[str]:
    """The public members a Protocol declares, its bases' included."""
    declaring = [
        k for k in protocol.__mro__ if getattr(k, "_is_protocol", False) and k.__module__.endswith("wires.contract")
    ]
    return {name for klass in declaring for name in vars(klass) if not name.startswith("_")}


def keeps_the_contract(wire: object, protocol: type) -> None:
    missing = [name for name in sorted(members(protocol)) if not hasattr(wire, name)]
    assert not missing, f"{type(wire).__name__} lacks {missing} of {protocol.__name__}"


def receive(wire, count: int) -> tuple[list[bytes], list]:
    values: list[bytes] = []
    topics: list = []
    while len(values) < count:
        got, got_topics = wire.recv_values(count - len(values), timeout=10.0, max_bytes=1 << 20)
        values += got
        topics += got_topics if got_topics is not None else [None] * len(got)
    return values, topics


def test_the_factories_serve_every_pattern_the_options_accept_and_refuse_others():
    for pattern in SOURCE_PATTERNS:  # one list of names for the options and the wires
        assert pattern in RECEIVING_PATTERNS
    for pattern in SINK_PATTERNS:
        assert pattern in SENDING_PATTERNS
    assert {"recv_values", "poll_recv", "close", "handshakes", "broken_connections"} <= members(ReceivingWire)
    assert {"send", "send_many", "recv", "close", "lost_peers", "resent", "unsent", "unconfirmed"} <= members(
        SendingWire
    )
    with pytest.raises(ValueError, match="not a receiving data pattern"):
        receiving_wire("push", "@tcp://127.0.0.1:*")
    with pytest.raises(ValueError, match="not a sending data pattern"):
        sending_wire("pull", ">tcp://127.0.0.1:1")


@pytest.mark.parametrize(
    "pattern, endpoint, expected",
    [
        ("pull", "@tcp://127.0.0.1:*", "ZmtpPull"),
        ("pull", "@inproc://wire-contract-pull", "Pull"),
        ("gather", "@tcp://127.0.0.1:*", "Gather"),
        ("sub", None, "Sub"),
    ],
)
def test_each_receiving_pattern_keeps_the_contract_with_a_pyzmq_peer(ctx, pattern, endpoint, expected):
    # inproc reaches only sockets of the same context: the wire's default one
    peer_ctx = zmq.Context.instance() if endpoint and endpoint.startswith("@inproc://") else ctx
    peer = peer_ctx.socket(zmq.PUB if pattern == "sub" else zmq.PUSH)
    peer.setsockopt(zmq.LINGER, 0)
    if pattern == "sub":
        peer.bind("tcp://127.0.0.1:*")
        endpoint = ">" + peer.getsockopt_string(zmq.LAST_ENDPOINT)
    wire = receiving_wire(pattern, endpoint, hwm=100, linger=0)
    try:
        assert type(wire).__name__ == expected
        keeps_the_contract(wire, ReceivingWire)
        assert wire.poll_recv(0) is False
        with pytest.raises(TimeoutError):
            wire.recv_values(1, timeout=0)
        if pattern == "sub":  # a subscription reaches the publisher after a while: publish until one came
            deadline = time.monotonic() + 10
            while not wire.poll_recv(0.05):
                assert time.monotonic() < deadline, "the subscriber never received"
                peer.send_multipart([b"t", b"v"])
            while wire.poll_recv(0.2):  # the extra copies
                wire.recv_values(1000, timeout=0)
            peer.send_multipart([b"t", b"v"])
            assert receive(wire, 1) == ([b"v"], [b"t"])
        else:
            peer.connect(wire.bound_addresses[0])
            peer.send(b"one")
            if pattern == "gather":  # single-part only
                peer.send(b"two")
                assert receive(wire, 2) == ([b"one", b"two"], [None, None])
            else:
                peer.send_multipart([b"t", b"v"])
                assert receive(wire, 2) == ([b"one", b"v"], [None, b"t"])
        assert wire.broken_connections == 0
        assert wire.handshakes is None  # neither curve nor monitor
    finally:
        wire.close(linger=0)
        peer.close(0)
    assert wire.closed
    wire.close()  # again: nothing
    with pytest.raises(SocketClosedError):
        wire.recv_values(1, timeout=0)


@pytest.mark.parametrize("pattern, expected", [("push", "ReroutingPush"), ("scatter", "Scatter")])
def test_each_engine_sending_pattern_keeps_the_contract_with_a_pyzmq_pull(ctx, pattern, expected):
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    pull.setsockopt(zmq.RCVTIMEO, 10_000)
    pull.bind("tcp://127.0.0.1:*")
    wire = sending_wire(
        pattern,
        ">" + pull.getsockopt_string(zmq.LAST_ENDPOINT),
        hwm=100,
        immediate=True,
        confirm=True,
        monitor=zmq.EVENT_HANDSHAKE_SUCCEEDED,
    )
    try:
        assert type(wire).__name__ == expected
        keeps_the_contract(wire, SendingWire)
        assert wire.handshakes is not None
        events: list = []
        deadline = time.monotonic() + 10
        while not events and time.monotonic() < deadline:
            events = wire.handshakes.poll(0.5)
        assert [event for event, _, _ in events] == [zmq.EVENT_HANDSHAKE_SUCCEEDED]
        assert wire.send_many([b"a", b"b"], timeout=10) == 2
        if pattern == "scatter":
            with pytest.raises(ValueError):
                wire.send([b"t", b"v"], timeout=10)
            wire.send(b"c", timeout=10)
            expected_messages = [[b"a"], [b"b"], [b"c"]]
        else:
            wire.send([b"t", b"v"], timeout=10)
            expected_messages = [[b"a"], [b"b"], [b"t", b"v"]]
        assert [pull.recv_multipart() for _ in expected_messages] == expected_messages
        with pytest.raises(TypeError):
            wire.recv(timeout=0)
        wire.close()  # the socket's linger (1 s): every message acknowledged
        assert (wire.unsent, wire.unconfirmed, wire.lost_peers, wire.resent, wire.broken_connections) == (0, 0, 0, 0, 0)
    finally:
        wire.close(linger=0)
        pull.close(0)
    assert wire.closed
    with pytest.raises(SocketClosedError):
        wire.send_many([b"late"], timeout=0)


def test_pub_keeps_the_contract_on_libzmq_with_a_pyzmq_sub(ctx):
    wire = sending_wire("pub", "@tcp://127.0.0.1:*", hwm=100, nodrop=True)
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVTIMEO, 10_000)
    try:
        assert type(wire).__name__ == "XPub"
        keeps_the_contract(wire, SendingWire)
        with pytest.raises(TimeoutError):
            wire.recv(timeout=0)
        sub.connect(wire.bound_addresses[0])
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        assert wire.recv(timeout=10) == b"\x01"  # the subscription, upstream
        wire.send([b"t", b"v"], timeout=0)
        assert wire.send_many([b"x", b"y"], timeout=10) == 2
        assert [sub.recv_multipart() for _ in range(3)] == [[b"t", b"v"], [b"x"], [b"y"]]
        wire.close()
        assert (wire.unsent, wire.unconfirmed, wire.lost_peers, wire.resent, wire.broken_connections) == (0, 0, 0, 0, 0)
    finally:
        wire.close(linger=0)
        sub.close(0)
    with pytest.raises(SocketClosedError):
        wire.send(b"late", timeout=0)
