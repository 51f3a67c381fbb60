"""Each way a connection of the engine ends reaches its owner as one call with the right
reason (``owner.ConnectionOwner.ended``, ``owner.EndReason``), over real sockets.

Every test drives one real connection of a ``Gather`` into one ending (a peer that closes,
one that resets, garbage, a silent handshake, an unanswered PING, a peer that wants the
other socket type, a refused connect, an exception of ours) and checks the first reason
the session manager got, the ``ZmtpError`` that came with it, and what the owner did for
that reason that can be seen from outside (a counter, the next connection). The reason is
recorded after the owner acted, so the counters read here are settled.
"""

from __future__ import annotations

import errno
import queue
import socket
import struct

import pytest

from spark_zmq.patterns import Gather
from spark_zmq.patterns.heartbeat import Heartbeat
from spark_zmq.patterns.wires.zmtp import sessions as sessions_module
from spark_zmq.patterns.wires.zmtp import wire
from spark_zmq.patterns.wires.zmtp.owner import EndReason
from spark_zmq.patterns.wires.zmtp.wire import COMMAND, LONG, ZmtpError


@pytest.fixture
def ended(monkeypatch) -> queue.Queue:
    """The reasons (with their ``ZmtpError``) every session manager is told, in order."""
    got: queue.Queue = queue.Queue()
    original = sessions_module.Sessions.ended

    def recording(self, conn, reason, exc=None):
        original(self, conn, reason, exc)
        got.put((reason, exc))

    monkeypatch.setattr(sessions_module.Sessions, "ended", recording)
    return got


@pytest.fixture
def make_gather():
    made: list[Gather] = []

    def make(endpoint: str = "tcp://127.0.0.1:*", **options) -> Gather:
        gather = Gather(endpoint, **options)
        made.append(gather)
        return gather

    yield make
    for sock in made:
        sock.close(linger=0)


def first(ended: queue.Queue, within: float = 10.0) -> tuple[EndReason, ZmtpError | None]:
    return ended.get(timeout=within)


# -- a bare ZMTP peer --------------------------------------------------------------------------


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def _command(name: bytes, data: bytes = b"") -> bytes:
    body = wire.command(name, data)
    return wire.frame_header(len(body), COMMAND) + body


def _recv_command(sock: socket.socket) -> tuple[bytes, bytes]:
    flags = _exact(sock, 1)[0]
    size = struct.unpack(">Q", _exact(sock, 8))[0] if flags & LONG else _exact(sock, 1)[0]
    body = _exact(sock, size)
    assert flags & COMMAND
    return wire.parse_command(body)


def _ready(socket_type: bytes) -> bytes:
    return _command(b"READY", wire.encode_metadata({"Socket-Type": socket_type}))


def connect(gather: Gather, *, handshake: bool = True) -> socket.socket:
    """A TCP client of ``gather``, through a NULL handshake as a PUSH when ``handshake``;
    what the Gather sent it has been read whole (a close is then a FIN, not a reset)."""
    host, port = gather.last_endpoint[len("tcp://") :].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    if handshake:
        sock.sendall(wire.greeting(b"NULL", False) + _ready(b"PUSH"))
        _exact(sock, wire.GREETING_SIZE)
        assert _recv_command(sock)[0] == b"READY"
    return sock


# -- the reasons -------------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_a_peer_that_closes_is_peer_closed(make_gather, ended):
    gather = make_gather()
    connect(gather).close()
    assert first(ended) == (EndReason.PEER_CLOSED, None)
    assert gather._engine.broken_connections == 0  # an orderly close breaks nothing


@pytest.mark.timeout(30)
def test_a_peer_that_resets_is_connection_broken_with_its_errno(make_gather, ended):
    gather = make_gather()
    sock = connect(gather)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, not a close
    reason, exc = first(ended)
    assert reason is EndReason.CONNECTION_BROKEN
    assert exc is not None and exc.value == errno.ECONNRESET
    assert gather._engine.broken_connections == 1


@pytest.mark.timeout(30)
def test_a_peer_that_sends_garbage_is_a_protocol_error(make_gather, ended):
    gather = make_gather()
    sock = connect(gather, handshake=False)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".ljust(wire.GREETING_SIZE, b" "))
    reason, exc = first(ended)
    assert reason is EndReason.PROTOCOL_ERROR
    assert exc is not None and exc.value != errno.ETIMEDOUT
    sock.close()


@pytest.mark.timeout(30)
def test_a_handshake_that_never_comes_is_a_handshake_timeout(make_gather, ended):
    gather = make_gather(handshake_ivl=300)
    sock = connect(gather, handshake=False)  # connected, and silent
    reason, exc = first(ended)
    assert reason is EndReason.HANDSHAKE_TIMEOUT
    assert exc is not None and exc.value == errno.ETIMEDOUT
    assert gather._engine.heartbeat_timeouts == 0  # a handshake is no heartbeat
    sock.close()


@pytest.mark.timeout(30)
def test_a_peer_that_never_answers_a_ping_is_a_heartbeat_timeout(make_gather, ended):
    gather = make_gather(heartbeat=Heartbeat(interval=0.1, timeout=0.5, ttl=0.0))
    sock = connect(gather)  # then silent: no PONG, nothing
    reason, exc = first(ended)
    assert reason is EndReason.HEARTBEAT_TIMEOUT
    assert exc is not None and exc.value == errno.ETIMEDOUT
    assert gather._engine.heartbeat_timeouts == 1
    sock.close()


@pytest.mark.timeout(30)
def test_a_peer_that_wants_the_other_socket_type_is_renegotiated_at_once(make_gather, ended):
    """A connecting Gather announces GATHER first; a PUSH server wants a PULL: the
    connection ends as RENEGOTIATE and the next one, opened at once, announces PULL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    make_gather(f">tcp://127.0.0.1:{listener.getsockname()[1]}", reconnect_ivl=60_000)
    declared = []
    try:
        for _ in range(2):
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                conn.sendall(wire.greeting(b"NULL", False))
                _exact(conn, wire.GREETING_SIZE)
                name, data = _recv_command(conn)
                declared.append(wire.parse_metadata(data)["socket-type"])
                conn.sendall(_ready(b"PUSH"))
                if len(declared) == 1:
                    reason, exc = first(ended)
                    assert reason is EndReason.RENEGOTIATE
                    assert exc is not None
    finally:
        listener.close()
    # the second came at once, not after reconnect_ivl's minute: the renegotiation's retry
    assert declared == [b"GATHER", b"PULL"]


@pytest.mark.timeout(30)
def test_a_refused_connect_is_connect_failed(make_gather, ended):
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    make_gather(f">tcp://127.0.0.1:{port}")
    assert first(ended) == (EndReason.CONNECT_FAILED, None)


@pytest.mark.timeout(30)
def test_an_exception_of_ours_is_an_internal_error(make_gather, ended, monkeypatch):
    original = sessions_module.Sessions._on_command

    def failing(self, conn, body):
        if wire.parse_command(body)[0] == b"PING":
            raise RuntimeError("simulated bug in a command handler")
        return original(self, conn, body)

    monkeypatch.setattr(sessions_module.Sessions, "_on_command", failing)
    gather = make_gather()
    sock = connect(gather)
    sock.sendall(_command(b"PING", b"\x00\x00"))
    assert first(ended) == (EndReason.INTERNAL_ERROR, None)
    assert gather._engine.broken_connections == 0  # counted by none of the peer's failures
    sock.close()
