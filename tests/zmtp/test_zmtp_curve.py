"""The CURVE mechanism of our ZMTP engine (``spark_zmq.patterns.wires.zmtp.curve``).

1. Against libzmq itself: pyzmq sockets are real libzmq 4.3.5 peers, driven on our side by a
   tiny blocking ZMTP driver over a plain ``socket.socket``.
2. Ours against ours, in memory: handshake, traffic both ways, commands, replays, refusals.
3. Hypothesis: any bytes (arbitrary, or a valid command with one byte changed, truncated or
   extended) given to ``on_command``/``decode`` succeed only when unmodified, else raise
   ``ZmtpError`` and nothing else.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.bindings import crypto_box, crypto_box_afternm, crypto_box_beforenm, crypto_box_keypair, crypto_box_open
from zmq.utils import z85
from zmqtest import SocketEvents, examples

from spark_zmq.patterns.wires.zmtp import curve_batch, wire
from spark_zmq.patterns.wires.zmtp.codec import frame_header, parse_frames
from spark_zmq.patterns.wires.zmtp.curve import CurveClient, CurveServer
from spark_zmq.patterns.wires.zmtp.curve_message import CurveSequenceError
from spark_zmq.patterns.wires.zmtp.wire import COMMAND, MORE, ZmtpError

PROTOCOL, AUTH = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_AUTH
INVALID_SEQUENCE = zmq.PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE


# -- helpers ------------------------------------------------------------------------------------


def declaring(socket_type: bytes, seen: list | None = None) -> Callable[[dict | None], dict]:
    """A ``declare`` callback that records the peer metadata it is given."""

    def declare(peer: dict | None) -> dict:
        if seen is not None:
            seen.append(peer)
        return {"Socket-Type": socket_type}

    return declare


def accepting(*types: bytes) -> Callable[[dict], None]:
    def accept(metadata: dict) -> None:
        if wire.socket_type_of(metadata) not in types:
            raise ZmtpError(
                f"peer is a {metadata.get('socket-type')!r}", PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA
            )

    return accept


class Driver:
    """A minimal blocking ZMTP 3.1 peer: greeting, then frames (flags, 1- or 8-byte size)."""

    def __init__(self, sock: socket.socket, mechanism) -> None:
        self.sock, self.mech = sock, mechanism
        sock.settimeout(10)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("peer closed")
            buf += chunk
        return bytes(buf)

    def send_frame(self, flags: int, body: bytes) -> None:
        self.sock.sendall(wire.frame_header(len(body), flags) + body)

    def recv_frame(self) -> tuple[int, bytes]:
        flags = self._exact(1)[0]
        size = struct.unpack(">Q", self._exact(8))[0] if flags & wire.LONG else self._exact(1)[0]
        return flags, self._exact(size)

    def handshake(self) -> None:
        self.sock.sendall(wire.greeting(self.mech.name, self.mech.as_server))
        _, mechanism, _ = wire.parse_greeting(self._exact(wire.GREETING_SIZE))
        assert mechanism == self.mech.name
        for body in self.mech.start():
            self.send_frame(COMMAND, body)
        while not self.mech.ready:
            flags, body = self.recv_frame()
            assert flags & COMMAND
            try:
                out = self.mech.on_command(body)
            except ZmtpError as exc:
                if exc.reply is not None:
                    self.send_frame(COMMAND, exc.reply)
                self.close()
                raise
            for reply in out:
                self.send_frame(COMMAND, reply)

    def send(self, payload: bytes, more: bool = False) -> None:
        self.send_frame(*self.mech.encode(payload, more))

    def send_command(self, body: bytes) -> None:
        self.send_frame(*self.mech.encode_command(body))

    def recv(self) -> tuple[int, bytes]:
        return self.mech.decode(*self.recv_frame())

    def close(self) -> None:
        """Close after the peer has read what we sent (FIN, then wait for its close)."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
            self.sock.settimeout(2)
            while self.sock.recv(65536):
                pass
        except OSError:
            pass
        self.sock.close()


def raw(keypair: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    return z85.decode(keypair[0]), z85.decode(keypair[1])


def listener() -> tuple[socket.socket, int]:
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    lsock.settimeout(10)
    return lsock, lsock.getsockname()[1]


def payload(i: int, size: int) -> bytes:
    return (struct.pack(">I", i) * (size // 4 + 1))[:size]


SIZES = (0, 1, 255, 256, 70_000)


# -- 1. against libzmq --------------------------------------------------------------------------


def pull_server(ctx, server_keys, **options) -> tuple[zmq.Socket, int]:
    pull = ctx.socket(zmq.PULL)
    pull.curve_server = True
    pull.curve_secretkey = server_keys[1]
    pull.linger = 0
    pull.rcvtimeo = 10_000
    for name, value in options.items():
        setattr(pull, name, value)
    return pull, pull.bind_to_random_port("tcp://127.0.0.1")


def our_client(server_public: bytes, socket_type: bytes = b"PUSH", accept=None, seen=None) -> CurveClient:
    cpub, csec = crypto_box_keypair()
    return CurveClient(cpub, csec, server_public, declaring(socket_type, seen), accept or accepting(b"PULL"))


@pytest.mark.timeout(60)
def test_our_client_sends_1000_messages_to_libzmq_pull(ctx):
    keys = zmq.curve_keypair()
    pull, port = pull_server(ctx, keys)
    seen: list = []
    mech = our_client(z85.decode(keys[0]), seen=seen)
    driver = Driver(socket.create_connection(("127.0.0.1", port)), mech)
    driver.handshake()
    assert seen == [None]  # the client declares before it knows the server's metadata
    assert mech.peer_metadata["socket-type"] == b"PULL"
    sent = [payload(i, SIZES[i % len(SIZES)]) for i in range(1000)]
    errors: list = []

    def send_all() -> None:
        try:
            for body in sent:
                driver.send(body)
            driver.send(b"part-1", more=True)
            driver.send(b"", more=True)
            driver.send(b"part-3")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    sender = threading.Thread(target=send_all)
    sender.start()
    received = [pull.recv() for _ in range(len(sent))]
    multipart = pull.recv_multipart()
    sender.join(10)
    assert not errors
    assert received == sent
    assert multipart == [b"part-1", b"", b"part-3"]
    driver.sock.close()


@pytest.mark.timeout(30)
def test_libzmq_answers_our_ping_and_we_decode_its_pong(ctx):
    keys = zmq.curve_keypair()
    pull, port = pull_server(ctx, keys)
    driver = Driver(socket.create_connection(("127.0.0.1", port)), our_client(z85.decode(keys[0])))
    driver.handshake()
    driver.send_command(b"\x04PING\x00\x00context")  # TTL 0, context "context"
    flags, body = driver.recv()
    assert (flags, body) == (COMMAND, b"\x04PONGcontext")
    driver.send(b"after pong")  # libzmq still decodes our MESSAGEs: nonces stayed in step
    assert pull.recv() == b"after pong"
    driver.sock.close()


@pytest.mark.timeout(30)
def test_libzmq_push_client_to_our_server(ctx):
    server_pub, server_sec = crypto_box_keypair()
    client_keys = zmq.curve_keypair()
    lsock, port = listener()
    push = ctx.socket(zmq.PUSH)
    push.curve_serverkey = z85.encode(server_pub)
    push.curve_publickey, push.curve_secretkey = client_keys
    push.linger = 0
    push.sndhwm = 0
    push.sndtimeo = 10_000
    push.connect(f"tcp://127.0.0.1:{port}")
    sent = [payload(i, SIZES[i % len(SIZES)]) for i in range(500)]
    for body in sent:
        push.send(body)
    push.send_multipart([b"a", b"b", b"c"])

    authorized: list = []
    seen: list = []
    mech = CurveServer(
        server_pub, server_sec, lambda key: authorized.append(key) or True, declaring(b"PULL", seen), accepting(b"PUSH")
    )
    conn, _ = lsock.accept()
    driver = Driver(conn, mech)
    driver.handshake()
    # the server declares knowing the client's metadata (names lower-cased)
    assert seen == [{"socket-type": b"PUSH"}]
    assert authorized == [z85.decode(client_keys[0])] == [mech.peer_key]
    received = [driver.recv() for _ in range(len(sent))]
    assert received == [(0, body) for body in sent]
    assert [driver.recv() for _ in range(3)] == [(MORE, b"a"), (MORE, b"b"), (0, b"c")]
    conn.close()
    lsock.close()


@pytest.mark.timeout(30)
def test_libzmq_client_with_another_server_key_is_refused(ctx):
    server_pub, server_sec = crypto_box_keypair()
    lsock, port = listener()
    push = ctx.socket(zmq.PUSH)
    push.curve_serverkey = zmq.curve_keypair()[0]  # not our server's key
    push.curve_publickey, push.curve_secretkey = zmq.curve_keypair()
    push.linger = 0
    push.connect(f"tcp://127.0.0.1:{port}")
    mech = CurveServer(server_pub, server_sec, lambda key: True, declaring(b"PULL"), accepting(b"PUSH"))
    conn, _ = lsock.accept()
    with pytest.raises(ZmtpError) as err:
        Driver(conn, mech).handshake()
    assert err.value.event == PROTOCOL
    assert err.value.value in (zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE, zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
    assert not mech.ready
    lsock.close()


def readable(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


@pytest.mark.timeout(60)
def test_libzmq_server_pings_decode_in_strict_sequence(ctx):
    """A libzmq CURVE server numbers its MESSAGEs READY 1, then 2, 3, ... whatever it sends:
    its PINGs (every 10 ms) interleaved with our 2,000 messages and our PONGs all decode
    under the strict rule, and our PONGs keep libzmq's decoder in step."""
    keys = zmq.curve_keypair()
    pull, port = pull_server(ctx, keys, heartbeat_ivl=10, heartbeat_timeout=10_000)
    mech = our_client(z85.decode(keys[0]))
    driver = Driver(socket.create_connection(("127.0.0.1", port)), mech)
    driver.handshake()
    sent, received, pings = [], [], 0
    for _ in range(40):
        for _ in range(50):
            sent.append(payload(len(sent), SIZES[len(sent) % 4]))
            driver.send(sent[-1])
        received += [pull.recv() for _ in range(50)]
        time.sleep(0.015)
        while readable(driver.sock):
            flags, body = driver.recv()
            assert flags == COMMAND and body.startswith(b"\x04PING"), body[:10]
            pings += 1
            driver.send_command(b"\x04PONG" + body[7:])
    driver.send(b"last")
    assert pull.recv() == b"last"
    assert received == sent
    assert pings >= 3
    assert mech._rx_nonce == 1 + pings and mech.sequence_gaps == mech.replays == 0
    driver.sock.close()


@pytest.mark.timeout(60)
def test_libzmq_client_messages_and_pings_decode_in_strict_sequence(ctx):
    """A libzmq CURVE client numbers HELLO 1, INITIATE 2, then every MESSAGE, data or PING,
    3, 4, ...: 2,000 messages with PINGs every 10 ms between them all decode in sequence at
    our server, and libzmq decodes our PONGs."""
    server_pub, server_sec = crypto_box_keypair()
    lsock, port = listener()
    push = ctx.socket(zmq.PUSH)
    push.curve_serverkey = z85.encode(server_pub)
    push.curve_publickey, push.curve_secretkey = zmq.curve_keypair()
    push.linger = 0
    push.sndtimeo = 10_000
    push.heartbeat_ivl = 10
    push.heartbeat_timeout = 10_000
    monitor = SocketEvents(push, zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    push.connect(f"tcp://127.0.0.1:{port}")
    mech = CurveServer(server_pub, server_sec, lambda key: True, declaring(b"PULL"), accepting(b"PUSH"))
    conn, _ = lsock.accept()
    driver = Driver(conn, mech)
    driver.handshake()
    sent, received, pings = [], [], 0
    for _ in range(40):
        for _ in range(50):
            sent.append(payload(len(sent), SIZES[len(sent) % 4]))
            push.send(sent[-1])
        while len(received) < len(sent):
            flags, body = driver.recv()
            if flags & COMMAND:
                assert body.startswith(b"\x04PING"), body[:10]
                pings += 1
                driver.send_command(b"\x04PONG" + body[7:])
            else:
                received.append(body)
        time.sleep(0.015)
    assert received == sent
    assert pings >= 3
    assert mech._rx_nonce == 2 + len(sent) + pings and mech.sequence_gaps == mech.replays == 0
    # libzmq took our PONGs (the nonces of our side stayed in step): still one connection
    events = monitor.quiet(0.2)
    assert events == [zmq.EVENT_HANDSHAKE_SUCCEEDED]
    monitor.close()
    conn.close()
    lsock.close()


@pytest.mark.timeout(30)
def test_our_refusal_is_reported_by_libzmq_as_zap_400(ctx):
    server_pub, server_sec = crypto_box_keypair()
    lsock, port = listener()
    push = ctx.socket(zmq.PUSH)
    push.curve_serverkey = z85.encode(server_pub)
    push.curve_publickey, push.curve_secretkey = zmq.curve_keypair()
    push.linger = 0
    monitor = SocketEvents(
        push,
        zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
    )
    push.connect(f"tcp://127.0.0.1:{port}")
    asked: list = []
    mech = CurveServer(
        server_pub, server_sec, lambda key: asked.append(key) and False, declaring(b"PULL"), accepting(b"PUSH")
    )
    conn, _ = lsock.accept()
    with pytest.raises(ZmtpError) as err:
        Driver(conn, mech).handshake()
    assert (err.value.event, err.value.value, err.value.reply) == (AUTH, 400, b"\x05ERROR\x03400")
    assert len(asked) == 1
    event = monitor.wait_for(zmq.EVENT_HANDSHAKE_FAILED_AUTH)
    assert event["value"] == 400
    monitor.close()
    lsock.close()


@pytest.mark.timeout(30)
def test_libzmq_zap_refusal_reaches_our_client_as_auth_400(tmp_path):
    from zmq.auth.thread import ThreadAuthenticator

    context = zmq.Context()
    auth = ThreadAuthenticator(context)
    auth.start()
    try:
        auth.configure_curve(domain="*", location=str(tmp_path))  # no certificate: refuse all
        keys = zmq.curve_keypair()
        push = context.socket(zmq.PUSH)
        push.curve_server = True
        push.curve_secretkey = keys[1]
        push.linger = 0
        port = push.bind_to_random_port("tcp://127.0.0.1")
        mech = our_client(z85.decode(keys[0]), socket_type=b"PULL", accept=accepting(b"PUSH"))
        driver = Driver(socket.create_connection(("127.0.0.1", port)), mech)
        with pytest.raises(ZmtpError) as err:
            driver.handshake()
        assert (err.value.event, err.value.value) == (AUTH, 400)
        assert not mech.ready
        push.close()
    finally:
        auth.stop()
        context.destroy(linger=0)


@pytest.mark.timeout(30)
def test_socket_type_refused_by_our_accept_propagates(ctx):
    keys = zmq.curve_keypair()
    pull, port = pull_server(ctx, keys)
    mech = our_client(z85.decode(keys[0]), accept=accepting(b"SUB"))  # the server is a PULL
    driver = Driver(socket.create_connection(("127.0.0.1", port)), mech)
    with pytest.raises(ZmtpError) as err:
        driver.handshake()
    assert (err.value.event, err.value.value) == (PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
    assert not mech.ready and mech.peer_metadata == {"socket-type": b"PULL"}


@pytest.mark.timeout(30)
def test_our_server_sees_client_metadata_before_declaring(ctx):
    server_pub, server_sec = crypto_box_keypair()
    lsock, port = listener()
    dealer = ctx.socket(zmq.DEALER)
    dealer.curve_serverkey = z85.encode(server_pub)
    dealer.curve_publickey, dealer.curve_secretkey = zmq.curve_keypair()
    dealer.routing_id = b"dealer-7"
    dealer.linger = 0
    dealer.connect(f"tcp://127.0.0.1:{port}")
    seen: list = []
    mech = CurveServer(server_pub, server_sec, lambda key: True, declaring(b"PULL", seen), accepting(b"PUSH"))
    conn, _ = lsock.accept()
    with pytest.raises(ZmtpError) as err:
        Driver(conn, mech).handshake()
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA
    assert seen == []  # refused before declaring
    assert mech.peer_metadata == {"socket-type": b"DEALER", "identity": b"dealer-7"}
    lsock.close()


# -- 2. ours against ours -----------------------------------------------------------------------


class Pair:
    def __init__(self, authorize=lambda key: True, server_key: bytes | None = None) -> None:
        self.client_pub, self.client_sec = crypto_box_keypair()
        self.server_pub, self.server_sec = crypto_box_keypair()
        self.client_seen: list = []
        self.server_seen: list = []
        self.client = CurveClient(
            self.client_pub,
            self.client_sec,
            server_key or self.server_pub,
            declaring(b"SCATTER", self.client_seen),
            accepting(b"GATHER"),
        )
        self.server = CurveServer(
            self.server_pub, self.server_sec, authorize, declaring(b"GATHER", self.server_seen), accepting(b"SCATTER")
        )

    def hello(self) -> bytes:
        [hello] = self.client.start()
        assert self.server.start() == []
        return hello

    def welcome(self) -> bytes:
        [welcome] = self.server.on_command(self.hello())
        return welcome

    def initiate(self) -> bytes:
        [initiate] = self.client.on_command(self.welcome())
        return initiate

    def ready(self) -> bytes:
        [ready] = self.server.on_command(self.initiate())
        return ready

    def connect(self) -> Pair:
        assert self.client.on_command(self.ready()) == []
        assert self.client.ready and self.server.ready
        return self


@pytest.mark.timeout(30)
def test_handshake_and_10000_messages_both_ways():
    pair = Pair().connect()
    assert pair.client_seen == [None]
    assert pair.server_seen == [{"socket-type": b"SCATTER"}]
    assert pair.client.peer_metadata == {"socket-type": b"GATHER"}
    assert pair.server.peer_key == pair.client_pub
    for i in range(10_000):
        body = payload(i, i % 300)
        more = i % 3 == 0
        flags, frame = pair.client.encode(body, more)
        assert flags == 0 and frame.startswith(b"\x07MESSAGE") and len(frame) == 33 + len(body)
        assert pair.server.decode(flags, frame) == ((MORE if more else 0), body)
        flags, frame = pair.server.encode(body[::-1], not more)
        assert pair.client.decode(flags, memoryview(frame)) == ((0 if more else MORE), body[::-1])


def _bodies(frames: bytes, ends: list[int]) -> list[bytes]:
    """The frame bodies in ``encode_batch``'s joined frames, checked against its ends."""
    out: list = []
    assert parse_frames(frames, 0, 1 << 40, out) == (len(frames), 2, 0)
    assert ends == list(itertools.accumulate(len(frame_header(len(b))) + len(b) for b in out))
    return out


@pytest.mark.timeout(30)
def test_a_batch_encodes_to_the_same_frames_as_one_message_at_a_time():
    """``encode_batch`` (the engine's batched send path) and ``encode`` per message give the
    same frames on the same nonce sequence, and a command between batches keeps it; sizes
    on both sides of the short/long frame header (a body is the payload + 33 bytes)."""
    pair = Pair().connect()
    bodies = [payload(i, i % 300) for i in range(500)] + [b"", b"x" * 222, b"y" * 223, b"z" * 70_000]
    frames = _bodies(*pair.client.encode_batch(bodies[:250])) + [pair.client.encode(b)[1] for b in bodies[250:400]]
    ping = pair.client.encode_command(b"\x04PING\x00\x0aabc")[1]
    frames += _bodies(*pair.client.encode_batch(bodies[400:]))
    assert [pair.server.decode(0, f) for f in frames[:400]] == [(0, b) for b in bodies[:400]]
    assert pair.server.decode(0, ping) == (COMMAND, b"\x04PING\x00\x0aabc")
    assert [pair.server.decode(0, f) for f in frames[400:]] == [(0, b) for b in bodies[400:]]


@pytest.mark.timeout(30)
def test_the_batched_seal_and_its_fallback_give_the_same_bytes(monkeypatch):
    """Without libsodium's box at hand (another PyNaCl layout) the batch is sealed one
    message at a time: the same bytes, the same nonces after it."""
    batched, fallback = Pair().connect(), Pair().connect()
    fallback.client._key, fallback.client._tx_prefix = batched.client._key, batched.client._tx_prefix
    bodies = [payload(i, (i * 37) % 400) for i in range(300)]
    monkeypatch.setattr(curve_batch, "_seal", None)
    expected = fallback.client.encode_batch(bodies)
    monkeypatch.undo()
    assert curve_batch.available()
    assert batched.client.encode_batch(bodies) == expected
    assert batched.client.encode(b"next") == fallback.client.encode(b"next")


@pytest.mark.timeout(30)
def test_commands_after_the_handshake():
    pair = Pair().connect()
    flags, frame = pair.client.encode_command(b"\x04PING\x00\x0aabc")
    assert flags == 0
    assert pair.server.decode(flags, frame) == (COMMAND, b"\x04PING\x00\x0aabc")
    assert pair.client.decode(*pair.server.encode_command(b"\x04PONGabc")) == (COMMAND, b"\x04PONGabc")
    # data and commands share one nonce sequence per direction
    assert pair.server.decode(*pair.client.encode(b"data")) == (0, b"data")


@pytest.mark.timeout(30)
def test_replayed_reordered_and_misdirected_messages():
    pair = Pair().connect()
    first = pair.client.encode(b"one")[1]
    second = pair.client.encode(b"two")[1]
    # reordered: the second arrives first, one message short of the sequence
    with pytest.raises(CurveSequenceError) as err:
        pair.server.decode(0, second)
    assert (err.value.value, err.value.missing, err.value.replay) == (INVALID_SEQUENCE, 1, False)
    # a refused MESSAGE does not move the counter
    assert pair.server.decode(0, first) == (0, b"one")
    assert pair.server.decode(0, second) == (0, b"two")
    for old in (first, second):
        with pytest.raises(CurveSequenceError) as err:
            pair.server.decode(0, old)
        assert err.value.value == INVALID_SEQUENCE and err.value.replay and err.value.missing == 0
        assert "replayed or reordered" in str(err.value)
    assert (pair.server.replays, pair.server.sequence_gaps, pair.server.missing_messages) == (2, 1, 1)
    # a client's MESSAGE cannot be reflected back to it (other nonce prefix)
    reflected = pair.client.encode(b"x")[1]
    with pytest.raises(ZmtpError) as err:
        pair.client.decode(0, reflected)
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
    assert pair.server.decode(0, reflected) == (0, b"x")
    # a forged nonce fails the box (it is no gap) and does not move the counter: the next
    # genuine message still decodes
    genuine = pair.client.encode(b"three")[1]
    forged = genuine[:8] + struct.pack(">Q", 2**64 - 1) + genuine[16:]
    with pytest.raises(ZmtpError) as err:
        pair.server.decode(0, forged)
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC and not isinstance(err.value, CurveSequenceError)
    assert pair.server.sequence_gaps == 1
    assert pair.server.decode(0, genuine) == (0, b"three")


def short_nonce(frame: bytes) -> int:
    return struct.unpack_from(">Q", frame, 8)[0]


@pytest.mark.timeout(30)
def test_short_nonces_continue_the_handshakes_as_libzmq_numbers_them():
    """Client: HELLO 1, INITIATE 2, MESSAGEs from 3; server: READY 1, MESSAGEs from 2 (data
    and commands alike), so the first MESSAGE each side expects is the last handshake
    nonce plus one."""
    pair = Pair()
    hello = pair.hello()
    initiate = pair.client.on_command(pair.server.on_command(hello)[0])[0]
    [ready] = pair.server.on_command(initiate)
    pair.client.on_command(ready)
    assert (struct.unpack_from(">Q", hello, 112)[0], struct.unpack_from(">Q", initiate, 105)[0]) == (1, 2)
    assert struct.unpack_from(">Q", ready, 6)[0] == 1
    client_frames = [
        pair.client.encode(b"a")[1],
        pair.client.encode_command(b"\x04PING\x00\x00")[1],
        pair.client.encode(b"b", True)[1],
    ]
    server_frames = [pair.server.encode_command(b"\x04PONG")[1], pair.server.encode(b"c")[1]]
    assert [short_nonce(f) for f in client_frames] == [3, 4, 5]
    assert [short_nonce(f) for f in server_frames] == [2, 3]
    assert [pair.server.decode(0, f) for f in client_frames] == [
        (0, b"a"),
        (COMMAND, b"\x04PING\x00\x00"),
        (MORE, b"b"),
    ]
    assert [pair.client.decode(0, f) for f in server_frames] == [(COMMAND, b"\x04PONG"), (0, b"c")]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("direction", ["client-to-server", "server-to-client"])
def test_a_deleted_message_closes_the_connection_naming_the_gap(direction):
    pair = Pair().connect()
    sender, receiver = (pair.client, pair.server) if direction == "client-to-server" else (pair.server, pair.client)
    m1, m2, m3 = (sender.encode(b"message %d" % i)[1] for i in (1, 2, 3))
    assert receiver.decode(0, m1) == (0, b"message 1")
    with pytest.raises(CurveSequenceError) as err:  # m2 deleted in transit
        receiver.decode(0, m3)
    first = short_nonce(m1)
    assert (err.value.event, err.value.value) == (PROTOCOL, INVALID_SEQUENCE)
    assert (err.value.expected, err.value.received, err.value.missing) == (first + 1, first + 2, 1)
    assert str(err.value) == (
        f"MESSAGE short nonce {first + 2}, expected {first + 1}: 1 message missing: deleted in transit or tampered with"
    )
    assert (receiver.sequence_gaps, receiver.missing_messages, receiver.replays) == (1, 1, 0)
    # replay: MESSAGE 1 again
    with pytest.raises(CurveSequenceError) as err:
        receiver.decode(0, m1)
    assert (err.value.value, err.value.replay, err.value.missing) == (INVALID_SEQUENCE, True, 0)
    assert f"MESSAGE short nonce {first}, expected {first + 1}: replayed or reordered" in str(err.value)
    assert receiver.replays == 1
    # a larger gap (right after the handshake: the very first MESSAGEs deleted) is counted whole
    pair = Pair().connect()
    sender, receiver = (pair.client, pair.server) if direction == "client-to-server" else (pair.server, pair.client)
    frames = [sender.encode_command(b"\x04PING\x00\x00")[1]] + [sender.encode(b"x")[1] for _ in range(3)]
    with pytest.raises(CurveSequenceError, match=r": 3 messages missing: deleted in transit or tampered with$"):
        receiver.decode(0, frames[3])
    assert (receiver.sequence_gaps, receiver.missing_messages) == (1, 3)
    assert [receiver.decode(0, f)[0] for f in frames] == [COMMAND, 0, 0, 0]  # in order, all pass


@pytest.mark.timeout(60)
@settings(
    max_examples=examples(150),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    data=st.data(),
    messages=st.lists(
        st.tuples(st.sampled_from(["data", "more", "command"]), st.binary(max_size=64)), min_size=1, max_size=30
    ),
    from_client=st.booleans(),
)
def test_deleting_any_one_message_is_caught_at_the_next(data, messages, from_client):
    """For any messages and any single deleted one, the receiver accepts every message
    before the deletion and refuses exactly the first one after it (none if it was the last)."""
    pair = Pair().connect()
    sender, receiver = (pair.client, pair.server) if from_client else (pair.server, pair.client)
    frames, expected = [], []
    for kind, body in messages:
        if kind == "command":
            body = b"\x04PING\x00\x00" + body[:16]
            frames.append(sender.encode_command(body)[1])
            expected.append((COMMAND, body))
        else:
            frames.append(sender.encode(body, kind == "more")[1])
            expected.append((MORE if kind == "more" else 0, body))
    deleted = data.draw(st.integers(0, len(frames) - 1), label="deleted")
    for index, frame in enumerate(frames):
        if index == deleted:
            continue
        if index == deleted + 1:
            with pytest.raises(CurveSequenceError) as err:
                receiver.decode(0, frame)
            assert err.value.missing == 1 and "1 message missing" in str(err.value)
            assert receiver.sequence_gaps == 1
            return
        assert receiver.decode(0, frame) == expected[index]
    assert deleted == len(frames) - 1 and receiver.sequence_gaps == 0


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "body, value",
    [
        (b"", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED),
        (b"\x07MESS", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED),
        (b"\x04PING\x00\x00", zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND),
        (b"\x07MESSAGE" + bytes(24), zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_MESSAGE),
        (b"\x07MESSAGE" + struct.pack(">Q", 99) + bytes(17), zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC),
        (b"\x07MESSAGE" + bytes(25), zmq.PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE),
    ],
    ids=["empty", "name-past-end", "plain-ping", "short-message", "bad-box", "nonce-zero"],
)
def test_bad_messages_report_libzmq_codes(body, value):
    pair = Pair().connect()
    with pytest.raises(ZmtpError) as err:
        pair.server.decode(0, body)
    assert (err.value.event, err.value.value) == (PROTOCOL, value)


@pytest.mark.timeout(30)
def test_refusal_is_an_error_400_the_client_understands():
    asked: list = []
    pair = Pair(authorize=lambda key: asked.append(key) and False)
    initiate = pair.initiate()
    with pytest.raises(ZmtpError) as err:
        pair.server.on_command(initiate)
    assert (err.value.event, err.value.value, err.value.reply) == (AUTH, 400, wire.error_command("400"))
    assert asked == [pair.client_pub] and not pair.server.ready and pair.server_seen == []
    reply = err.value.reply
    with pytest.raises(ZmtpError) as err:
        pair.client.on_command(reply)
    assert (err.value.event, err.value.value) == (AUTH, 400)
    with pytest.raises(ZmtpError):  # a failed mechanism stays failed
        pair.server.on_command(initiate)


@pytest.mark.timeout(30)
def test_wrong_server_key_and_unexpected_commands():
    pair = Pair(server_key=crypto_box_keypair()[0])
    with pytest.raises(ZmtpError) as err:
        pair.server.on_command(pair.hello())
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC

    pair = Pair()
    hello = pair.hello()
    for mech, body in (
        (pair.server, wire.command(b"READY")),
        (pair.server, wire.error_command("400")),
        (pair.client, hello),
        (pair.client, wire.command(b"INITIATE", bytes(300))),
    ):
        with pytest.raises(ZmtpError) as err:
            mech.on_command(body)
        assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND, body[:10]

    pair = Pair()
    ready = pair.ready()
    welcome_again = Pair().welcome()
    with pytest.raises(ZmtpError) as err:  # WELCOME while expecting READY
        pair.client.on_command(welcome_again)
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND
    with pytest.raises(ZmtpError) as err:  # a command after the handshake
        pair.server.on_command(ready)
    assert err.value.value == zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND
    with pytest.raises(ZmtpError):  # nothing to encode with before READY
        pair.client.encode(b"early")


def forge_initiate(
    pair: Pair, welcome: bytes, *, vouch_short: bytes | None = None, vouch_server: bytes | None = None, nonce: int = 2
) -> bytes:
    """An INITIATE as a client would make it, with one part replaced (uses the client's
    short-term secret, which only a test can reach)."""
    client = pair.client
    cn_secret = client._cn_secret
    plain = crypto_box_open(welcome[24:], b"WELCOME-" + welcome[8:24], pair.server_pub, cn_secret)
    server_cn, cookie = plain[:32], plain[32:128]
    vouch_nonce = bytes(range(16))
    vouch = crypto_box(
        (vouch_short or client._cn_public) + (vouch_server or pair.server_pub),
        b"VOUCH---" + vouch_nonce,
        server_cn,
        pair.client_sec,
    )
    metadata = wire.encode_metadata({"Socket-Type": b"SCATTER"})
    short = struct.pack(">Q", nonce)
    box = crypto_box_afternm(
        pair.client_pub + vouch_nonce + vouch + metadata,
        b"CurveZMQINITIATE" + short,
        crypto_box_beforenm(server_cn, cn_secret),
    )
    return b"\x08INITIATE" + cookie + short + box


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "change, value",
    [
        ({}, None),
        ({"nonce": 1}, zmq.PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE),  # not above HELLO's
        ({"vouch_short": bytes(32)}, zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE),  # vouches for another C'
        ({"vouch_server": bytes(32)}, zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE),  # vouch made for another server
    ],
    ids=["genuine", "nonce-not-above-hello", "vouch-other-client-key", "vouch-other-server"],
)
def test_forged_initiate(change, value):
    pair = Pair()
    welcome = pair.welcome()
    pair.client.on_command(welcome)  # keeps its short-term secret until READY
    initiate = forge_initiate(pair, welcome, **change)
    if value is None:
        assert len(pair.server.on_command(initiate)) == 1 and pair.server.ready
        return
    with pytest.raises(ZmtpError) as err:
        pair.server.on_command(initiate)
    assert (err.value.event, err.value.value) == (PROTOCOL, value)


@pytest.mark.timeout(30)
def test_keys_never_in_repr_or_errors():
    pair = Pair()
    texts = []
    for mech in (pair.client, pair.server):
        texts.append(repr(mech))
    try:
        pair.server.on_command(pair.hello()[:-1] + b"\x00")
    except ZmtpError as exc:
        texts.append(str(exc))
    pair = Pair().connect()
    texts += [repr(pair.client), repr(pair.server)]
    for key in (pair.client_pub, pair.client_sec, pair.server_pub, pair.server_sec):
        for text in texts:
            for form in (repr(key), key.hex(), z85.encode(key).decode()):
                assert form not in text
    assert texts[-2:] == ["<CurveClient ready>", "<CurveServer ready>"]
    with pytest.raises(ValueError):
        CurveClient(b"short", bytes(32), bytes(32), declaring(b"PUSH"), accepting(b"PULL"))


# -- 3. hypothesis: any bytes are a result or a ZmtpError -----------------------------------------

STAGES = ("HELLO", "WELCOME", "INITIATE", "READY", "MESSAGE-C", "MESSAGE-S")


def stage(name: str) -> tuple[Callable[[bytes], object], bytes]:
    """``(feed, valid body)``: the call a peer's bytes reach at this stage, and the bytes a
    genuine peer would send there."""
    pair = Pair()
    if name == "HELLO":
        return pair.server.on_command, pair.hello()
    if name == "WELCOME":
        return pair.client.on_command, pair.welcome()
    if name == "INITIATE":
        return pair.server.on_command, pair.initiate()
    if name == "READY":
        return pair.client.on_command, pair.ready()
    pair.connect()
    if name == "MESSAGE-C":
        return (lambda body: pair.server.decode(0, body)), pair.client.encode(b"payload", True)[1]
    return (lambda body: pair.client.decode(0, body)), pair.server.encode_command(b"\x04PONG")[1]


HYPOTHESIS = settings(
    max_examples=examples(200),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
NAMES = (b"\x05HELLO", b"\x07WELCOME", b"\x08INITIATE", b"\x05READY", b"\x05ERROR", b"\x07MESSAGE")
EXPECTED_SIZE = {"HELLO": 200, "WELCOME": 168, "INITIATE": 257, "READY": 30, "MESSAGE-C": 33, "MESSAGE-S": 33}


@pytest.mark.timeout(60)
@HYPOTHESIS
@given(name=st.sampled_from(STAGES), data=st.data())
def test_any_bytes_are_a_zmtp_error(name, data):
    feed, valid = stage(name)
    kind = data.draw(st.sampled_from(["any", "named", "named-exact-size"]))
    if kind == "any":
        body = data.draw(st.binary(max_size=300))
    else:
        prefix = data.draw(st.sampled_from(NAMES))
        size = EXPECTED_SIZE[name] + data.draw(st.integers(0, 40)) - len(prefix)
        body = prefix + data.draw(
            st.binary(min_size=size, max_size=size) if kind == "named-exact-size" else st.binary(max_size=300)
        )
    try:
        feed(body)
    except ZmtpError as exc:
        assert exc.event in (PROTOCOL, AUTH)
    else:
        assert body == valid


@pytest.mark.timeout(60)
@HYPOTHESIS
@given(name=st.sampled_from(STAGES), data=st.data())
def test_changed_valid_commands_are_a_zmtp_error(name, data):
    feed, valid = stage(name)
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend"]))
    if kind == "flip":
        index = data.draw(st.integers(0, len(valid) - 1))
        body = bytearray(valid)
        body[index] ^= data.draw(st.integers(1, 255))
        body = bytes(body)
    elif kind == "truncate":
        body = valid[: data.draw(st.integers(0, len(valid) - 1))]
    else:
        body = valid + data.draw(st.binary(min_size=1, max_size=20))
    with pytest.raises(ZmtpError):
        feed(body)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", STAGES)
def test_valid_commands_succeed_once(name):
    feed, valid = stage(name)
    feed(valid)
    with pytest.raises(ZmtpError):  # the same bytes again: replay or unexpected
        feed(valid)
