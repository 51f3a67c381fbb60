"""Heartbeats (RFC 37 PING/PONG, TTL) on the pattern layer: a silent peer is noticed.

Each test puts a peer behind ``faultproxy.FaultProxy`` and turns the connection into a
black hole (no FIN, no RST: only a heartbeat can tell), then checks that the socket
notices within its timeout and does what a broken connection calls for: a connecting
receiver reconnects, a sender re-routes what the silent peer had not acknowledged. The
peers are libzmq (pyzmq) where the peer is not ours.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import zmq
from faultproxy import FaultProxy
from zmqtest import Trickle, wait_until

from spark_zmq.patterns import NO_HEARTBEAT, Gather, Heartbeat, Pull, Scatter, Sub, ZmtpPull
from spark_zmq.patterns.wires.zmtp.wire import command, frame_header, greeting

FAST = Heartbeat(interval=0.1, timeout=0.6, ttl=0.6)

pytestmark = pytest.mark.timeout(60)


def _bound_port(sock: zmq.Socket) -> int:
    return int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])


def _libzmq_push(ctx: zmq.Context) -> zmq.Socket:
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.setsockopt(zmq.SNDHWM, 1000)
    # as a producer configured per the README: heartbeats of its own, so it drops the dead
    # connection too (its TTL comes from our PINGs either way)
    push.setsockopt(zmq.HEARTBEAT_IVL, 100)
    push.setsockopt(zmq.HEARTBEAT_TIMEOUT, 600)
    push.bind("tcp://127.0.0.1:*")
    return push


def _blackhole_the_live_connection(proxy: FaultProxy) -> int:
    """Black-hole the one connection in use (a GATHER may have renegotiated its socket
    type on an earlier one); returns how many connections the proxy has seen."""
    live = proxy.active_connections
    assert len(live) == 1, live
    live[0].blackhole()
    return len(proxy.connections)


@pytest.mark.parametrize("cls", [Gather, ZmtpPull, Sub], ids=["gather", "zmtp-pull", "sub"])
def test_a_connecting_receiver_reconnects_after_its_producer_goes_silent(cls):
    """A producer behind a black hole: the receiver notices within its heartbeat timeout,
    reconnects, and messages flow again (without heartbeats it would wait forever)."""
    ctx = zmq.Context()
    if cls is Sub:
        producer = ctx.socket(zmq.PUB)
        producer.setsockopt(zmq.LINGER, 0)
        producer.setsockopt(zmq.HEARTBEAT_IVL, 100)
        producer.setsockopt(zmq.HEARTBEAT_TIMEOUT, 600)
        producer.bind("tcp://127.0.0.1:*")
    else:
        producer = _libzmq_push(ctx)
    feeder = Trickle(producer)
    try:
        with FaultProxy("127.0.0.1", _bound_port(producer)) as proxy:
            receiver = cls(f">{proxy.endpoint}", heartbeat=FAST, **({"topics": [""]} if cls is Sub else {}))
            try:
                receiver.recv(timeout=10)
                before = _blackhole_the_live_connection(proxy)
                started = time.monotonic()
                # a new connection through the proxy: the receiver gave up on the silent one
                proxy.wait_for_connections(before + 1, timeout=10)
                noticed = time.monotonic() - started
                assert noticed < FAST.timeout + FAST.interval + 3.0
                # and messages come again, sent after the black hole
                mark = feeder.sent

                def fresh():
                    try:
                        return int(receiver.recv(timeout=0.5)) > mark
                    except TimeoutError:
                        return False

                wait_until(fresh, 15, "a message sent after the black hole")
            finally:
                receiver.close()
    finally:
        feeder.stop()
        producer.close(0)
        ctx.term()


def test_without_heartbeats_a_black_hole_strands_the_receiver():
    """The control case: the same black hole with heartbeats off is never noticed."""
    ctx = zmq.Context()
    producer = ctx.socket(zmq.PUSH)
    producer.setsockopt(zmq.LINGER, 0)
    producer.bind("tcp://127.0.0.1:*")
    feeder = Trickle(producer)
    try:
        with FaultProxy("127.0.0.1", _bound_port(producer)) as proxy:
            with Gather(f">{proxy.endpoint}", heartbeat=NO_HEARTBEAT) as gather:
                gather.recv(timeout=10)
                before = _blackhole_the_live_connection(proxy)
                with pytest.raises((AssertionError, TimeoutError)):
                    proxy.wait_for_connections(before + 1, timeout=2 * (FAST.timeout + FAST.interval))
    finally:
        feeder.stop()
        producer.close(0)
        ctx.term()


def test_a_sender_reroutes_what_a_silent_consumer_had_not_acknowledged():
    """Two consumers, one behind a black hole mid-stream: the scatter drops it within
    the timeout, its unacknowledged messages go to the other consumer, and a close that
    waits for every acknowledgement ends (without heartbeats it waits for the silent one)."""
    ctx = zmq.Context()
    pulls = []
    for _ in range(2):
        pull = ctx.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.RCVHWM, 100)
        pull.setsockopt(zmq.RCVBUF, 65536)
        pull.bind("tcp://127.0.0.1:*")
        pulls.append(pull)
    received: list[set] = [set(), set()]
    stop = threading.Event()

    def drain(i: int) -> None:
        while not stop.is_set():
            if pulls[i].poll(50):
                received[i].add(pulls[i].recv())

    threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        with FaultProxy("127.0.0.1", _bound_port(pulls[1]), buffer_bytes=65536) as proxy:
            scatter = Scatter(
                [f">tcp://127.0.0.1:{_bound_port(pulls[0])}", f">{proxy.endpoint}"],
                hwm=100,
                immediate=True,
                confirm=True,
                heartbeat=FAST,
                sndbuf=65536,
                monitor=zmq.EVENT_HANDSHAKE_SUCCEEDED,
            )
            try:
                handshakes = []
                wait_until(
                    lambda: handshakes.extend(scatter.handshakes.poll()) or len(handshakes) >= 2,
                    10,
                    "both consumers' handshakes",
                )
                payload = b"x" * 4000
                for i in range(200):
                    scatter.send(b"%06d" % i + payload, timeout=10)
                wait_until(lambda: received[1], 10, "the proxied consumer to receive")
                _blackhole_the_live_connection(proxy)
                # more than the proxy can take in (its kernel acknowledges what it buffers,
                # its loop holds up to 8 MiB read before the hole)
                for i in range(200, 8000):
                    scatter.send(b"%06d" % i + payload, timeout=10)
                started = time.monotonic()
                scatter.close(linger=15_000)
                assert time.monotonic() - started < 10
                # dropped by the heartbeat timeout or, with a full window, by the kernel's
                # TCP_USER_TIMEOUT (set to the same timeout): a connection broken while it held
                # messages of ours (the proxy holds the FIN back, so only the engine can tell)
                assert scatter._engine.heartbeat_timeouts + scatter._engine.lost_peers >= 1
                assert scatter.unconfirmed == 0 and scatter.unsent == 0
            finally:
                if not scatter.closed:
                    scatter.close(linger=0)
        # what the first consumer got covers everything the silent one never acknowledged;
        # the proxy's own kernel buffer took some (acknowledged, never forwarded): that is
        # what a userspace proxy can hide and a dead host cannot
        wait_until(lambda: len(received[0]) + len(received[1]) >= 6000, 10, "most messages")
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        for pull in pulls:
            pull.close(0)
        ctx.term()


def test_the_pull_socket_keeps_live_peers_under_backpressure():
    """A libzmq PULL that stops reading (its queue full) must not drop a live producer:
    libzmq would take the unread PONGs for silence and lose what the kernel buffers hold.
    ``Pull`` sends PINGs with a TTL but sets no ZMTP timeout (heartbeat.py)."""
    ctx = zmq.Context()
    pull = Pull("@tcp://127.0.0.1:*", hwm=10, heartbeat=FAST, monitor=zmq.EVENT_DISCONNECTED, rcvbuf=65536)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 10)
    push.setsockopt(zmq.SNDBUF, 65536)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(pull.last_endpoint)
    total = 5000
    done = threading.Event()

    def send() -> None:
        for i in range(total):
            push.send(b"%d" % i + b"y" * 1000)
        done.set()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        # not reading for several heartbeat timeouts: the producer is blocked, not dead
        assert not done.wait(4 * FAST.timeout)
        got = set()
        while len(got) < total:
            got.add(int(pull.recv(timeout=10)[:-1000]))
        assert got == set(range(total))
        assert not pull.handshakes.poll()  # no disconnect at all
    finally:
        sender.join(5)
        push.close(0)
        pull.close()
        ctx.term()


def _raw_peer(endpoint: str) -> socket.socket:
    """A hand-written ZMTP 3.1 PUSH peer (NULL mechanism) connected to ``endpoint``."""
    host, port = endpoint.rsplit("/", 1)[1].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.sendall(greeting(b"NULL", False))
    sock.sendall(frame_header(len(ready := command(b"READY", b"\x0bSocket-Type\x00\x00\x00\x04PUSH")), 0x04) + ready)
    data = b""
    while len(data) < 64:
        data += sock.recv(64 - len(data))
    return sock


def test_a_peer_ttl_is_honoured_and_absurd_pings_are_bounded():
    """A peer's PING TTL closes a connection it then stays silent on; PINGs with absurd
    contexts, floods and PONG floods get bounded memory and the connection stays usable."""
    with Gather("@tcp://127.0.0.1:*", heartbeat=Heartbeat(interval=30.0, timeout=30.0, ttl=0.0)) as gather:
        endpoint = gather.bound_addresses[0]
        peer = _raw_peer(endpoint)
        wait_until(lambda: gather._engine.ready_peers, 5, "the handshake")
        # a flood of PONGs and PINGs with oversized contexts: answered (or not) within bounds
        flood = b"".join(
            frame_header(len(c), 0x04) + c
            for c in [command(b"PONG", b"z" * 200)] * 500 + [command(b"PING", b"\x00\x00" + b"c" * 100)] * 500
        )
        peer.sendall(flood)
        # data still flows on the same connection
        peer.sendall(frame_header(5, 0) + b"hello")
        assert gather.recv(timeout=5) == b"hello"
        # TTL of 0.5 s, then silence: the engine closes the connection (the peer sees EOF)
        ping = command(b"PING", (5).to_bytes(2, "big"))
        peer.sendall(frame_header(len(ping), 0x04) + ping)
        peer.settimeout(5)
        started = time.monotonic()
        try:
            while peer.recv(65536):
                pass
        except ConnectionResetError:
            pass
        assert time.monotonic() - started < 4
        assert gather._engine.heartbeat_timeouts == 1
        peer.close()


def test_renegotiation_backs_off_against_a_peer_whose_type_depends_on_ours():
    """A peer that always announces the type ours cannot keep: one immediate retry, then
    the reconnect interval (measured before: thousands of connections per second)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    accepted = 0
    stop = threading.Event()

    def serve() -> None:
        nonlocal accepted
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted += 1
            try:
                conn.settimeout(2)
                conn.sendall(greeting(b"NULL", False))
                data = b""
                while len(data) < 64 + 2:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                # answer as the type that makes a GATHER announce itself again (a PUSH)
                ready = command(b"READY", b"\x0bSocket-Type\x00\x00\x00\x04PUSH")
                conn.sendall(frame_header(len(ready), 0x04) + ready)
            except OSError:
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with Gather(f">tcp://127.0.0.1:{port}", reconnect_ivl=200, heartbeat=NO_HEARTBEAT):
            stop.wait(2.0)  # the measurement window itself (what is measured is a rate)
        assert accepted <= 2.0 / 0.2 * 2 + 4, accepted
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_the_source_receive_buffer_option_reaches_the_receiving_socket():
    """``receiveBufferBytes`` is ZMQ_RCVBUF on the channel's socket (the bound on what the
    kernel holds for a receiver that stops or dies); both run on our own engine."""
    from spark_zmq.ingest.receiver import open_channel_socket
    from spark_zmq.options import SourceOptions

    for pattern in ("pull", "gather"):
        options = SourceOptions.parse(
            {"endpoints": "@tcp://127.0.0.1:*", "pattern": pattern, "receiveBufferBytes": "64 KiB"}
        )
        assert options.receive_buffer_bytes == 65536
        sock = open_channel_socket(
            pattern,
            options.endpoints[0],
            hwm=10,
            topics=[],
            rcvbuf=options.receive_buffer_bytes,
            heartbeat=options.heartbeat,
        )
        try:
            assert type(sock).__name__ == {"pull": "ZmtpPull", "gather": "Gather"}[pattern]
            assert sock._engine.rcvbuf == 65536
        finally:
            sock.close()
