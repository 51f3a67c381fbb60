"""Hostile network clients against a bound ``Gather`` (our ZMTP 3.1 engine).

A ``Gather`` binds a TCP port any network client can reach, so its engine parses bytes
from strangers. Each test here connects a plain ``socket.socket`` over real TCP on
127.0.0.1, sends something a ZeroMQ peer would not (or would, one byte at a time), checks
how the Gather answered (closed at once, closed by ``handshake_ivl``, ignored, PONG), and
ends by proving the Gather still works: nothing from the hostile client was delivered,
and a well-behaved ``Scatter`` (or a libzmq PUSH) connected afterwards delivers.

No ``time.sleep`` synchronises anything: the tests wait for EOF on the raw socket (a
socket timeout bounds the wait) or for a message (``recv(timeout=...)``); "nothing was
delivered" is ``recv(timeout=0.3)`` raising ``TimeoutError``. "Closed at once" means EOF
within a few seconds on a Gather whose ``handshake_ivl`` is the default 30 s, so the
handshake timer cannot be what closed it.

At the end, three engine failures that are not one client's bytes: a send racing a
connect (found by ``tools/fuzz.py --target zmtp``), what the I/O thread does with an
unexpected exception, and a Gather out of file descriptors (in a subprocess with a low
``RLIMIT_NOFILE``). Each was an engine bug found here, and is fixed.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pytest
import zmq
from nacl.bindings import crypto_box_keypair
from zmq.utils import z85

from spark_zmq.patterns import Gather, Scatter
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.patterns.wires.zmtp import security as security_module
from spark_zmq.patterns.wires.zmtp import sessions as sessions_module
from spark_zmq.patterns.wires.zmtp import wire
from spark_zmq.patterns.wires.zmtp.curve import CurveClient
from spark_zmq.patterns.wires.zmtp.engine import HANDSHAKE_FRAME_LIMIT
from spark_zmq.patterns.wires.zmtp.wire import COMMAND, LONG, MORE, ZmtpError

AT_ONCE_S = 3.0  # "closed at once": far below the default handshake_ivl of 30 s
MB = 1 << 20


# -- a raw ZMTP client ----------------------------------------------------------------------


class Raw:
    """A bare TCP client that speaks as much ZMTP as each test wants, and no more."""

    def __init__(self, gather: Gather, timeout: float = 5.0) -> None:
        host, port = gather.last_endpoint[len("tcp://") :].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self, body: bytes, flags: int = 0) -> bytes:
        return wire.frame_header(len(body), flags) + body

    def command(self, name: bytes, data: bytes = b"") -> bytes:
        return self.frame(wire.command(name, data), COMMAND)

    def ready(self, **metadata: bytes) -> bytes:
        return self.command(b"READY", wire.encode_metadata({k.replace("_", "-"): v for k, v in metadata.items()}))

    def exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError(f"closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> tuple[int, bytes]:
        flags = self.exact(1)[0]
        size = struct.unpack(">Q", self.exact(8))[0] if flags & LONG else self.exact(1)[0]
        return flags, self.exact(size)

    def greet(self, mechanism: bytes = b"NULL") -> tuple:
        self.send(wire.greeting(mechanism, False))
        return wire.parse_greeting(self.exact(wire.GREETING_SIZE))

    def handshake(self, socket_type: bytes = b"PUSH") -> dict:
        """A valid NULL handshake; returns the Gather's READY metadata."""
        self.greet()
        self.send(self.ready(Socket_Type=socket_type))
        flags, body = self.recv_frame()
        name, data = wire.parse_command(body)
        assert flags & COMMAND and name == b"READY"
        return wire.parse_metadata(data)

    def closed_by_peer(self, within: float = AT_ONCE_S) -> bool:
        """Whether the Gather closes the connection within ``within`` seconds (what it sent
        meanwhile is kept in ``self.tail``)."""
        self.sock.settimeout(within)
        self.tail = b""
        deadline = time.monotonic() + within
        try:
            while time.monotonic() < deadline:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.tail += chunk
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self.sock.close()


def try_send(raw: Raw, data: bytes) -> bool:
    """Send what the Gather may refuse half-way; whether it all went."""
    try:
        raw.send(data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


# -- fixtures and checks ---------------------------------------------------------------------


@pytest.fixture
def make_gather():
    made: list = []

    def make(**options) -> Gather:
        gather = Gather("tcp://127.0.0.1:*", **options)
        made.append(gather)
        return gather

    yield make
    for sock in made:
        sock.close(linger=0)


def nothing_delivered(gather: Gather) -> None:
    with pytest.raises(TimeoutError):
        gather.recv(timeout=0.3)


def nothing_queued(gather: Gather) -> None:
    """Nothing waits in the Gather (a delivery of anything the engine had read: queued at once)."""
    with pytest.raises(TimeoutError):
        gather.recv(timeout=0.05)


def still_works(gather: Gather, *, curve: Curve | None = None, libzmq: bool = False) -> None:
    """Nothing (more) was delivered, and a well-behaved peer connected now delivers.

    The well-behaved peer is the probe for both: it connects and hands shakes after the
    hostile bytes were sent (round trips the engine serves after reading them), so what
    the engine took from them is queued before the token comes. The token must be the only
    message, the first received and nothing queued beside it; a fixed quiet wait before
    it would check nothing more, and cost 0.3 s in each of some 40 tests."""
    token = b"well-behaved %d" % random.randrange(1 << 30)
    if libzmq:
        push = zmq.Context.instance().socket(zmq.PUSH)
        push.linger = 0
        push.sndtimeo = 5000
        push.connect(gather.last_endpoint)
        try:
            push.send(token)
            assert gather.recv(timeout=10) == token
            nothing_queued(gather)
        finally:
            push.close(linger=0)
    else:
        scatter = Scatter(">" + gather.last_endpoint, **({"curve": curve} if curve else {}))
        try:
            scatter.send(token, timeout=10)
            assert gather.recv(timeout=10) == token
            nothing_queued(gather)
        finally:
            scatter.close(linger=0)


def rejections(gather: Gather, at_least: int, within: float = 5.0) -> int:
    """``handshakes.rejected`` once it reached ``at_least`` (or the deadline passed)."""
    watch = gather.handshakes
    deadline = time.monotonic() + within
    while watch.rejected < at_least and time.monotonic() < deadline:
        watch.poll(0.1)
    watch.poll(0)
    return watch.rejected


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc/self/status")


MONITOR = {"monitor": zmq.EVENT_HANDSHAKE_SUCCEEDED}


# -- before the handshake ----------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seed", range(4))
def test_random_garbage_is_closed_and_counted(make_gather, seed):
    gather = make_gather(handshake_ivl=500, **MONITOR)
    rng = random.Random(seed)
    raw = Raw(gather)
    try_send(raw, rng.randbytes(rng.choice((10, 64, 1000, 100_000))))
    assert raw.closed_by_peer(within=5)
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather, libzmq=True)


@pytest.mark.timeout(30)
def test_an_http_request_is_closed_at_once_and_answered_only_with_the_greeting(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    raw.send(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n")
    assert raw.closed_by_peer()
    assert raw.tail == wire.greeting(b"NULL", False)  # what every peer gets first; nothing else
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x05hello",  # a message frame before READY
        b"\x01\x00" * 40,  # MORE frames before READY
        b"\x04\x06\x05HELLO",  # a command that is not READY
        b"\x04\x00",  # an empty command frame
        b"\x04\x01\x00",  # a command with an empty name
        b"\x04\x03\x09REA",  # a command name longer than the frame
        b"\x05\x06\x05READY",  # READY with the MORE flag
        bytes(range(256)) * 4,
    ],
    ids=["message", "more", "hello", "empty", "empty-name", "name-overrun", "ready-more", "bytes"],
)
def test_a_valid_greeting_then_garbage_is_closed_at_once(make_gather, garbage):
    gather = make_gather(**MONITOR)
    raw = Raw(gather)
    raw.greet()
    try_send(raw, garbage)
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


def _zmtp2_greeting(socket_type: int = 8) -> bytes:
    """RFC 15 (ZMTP 2.0): signature, revision 0x01, socket type, then an empty identity."""
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x01" + bytes((socket_type,)) + b"\x00\x00"


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "hello",
    [
        _zmtp2_greeting() + b"\x00\x05hello" * 10,  # ZMTP 2.0 peer, then messages
        b"\xff"
        + b"\x00" * 8
        + b"\x7f"
        + b"\x02\x00"
        + b"NULL".ljust(20, b"\x00")
        + b"\x00" * 32,  # "2.0" in a 3.x layout
        b"\x01\x00" + b"\x06\x00hello" * 12,  # ZMTP 1.0: identity, then messages
        b"\xff"
        + b"\x00" * 8
        + b"\x7e"
        + b"\x03\x01"
        + b"NULL".ljust(20, b"\x00")
        + b"\x00" * 32,  # signature bit 0 clear
    ],
    ids=["zmtp2", "zmtp2-long", "zmtp1", "bad-signature"],
)
def test_an_older_zmtp_greeting_is_closed_at_once(make_gather, hello):
    gather = make_gather(**MONITOR)
    raw = Raw(gather)
    try_send(raw, hello)
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "hello", [_zmtp2_greeting(), b"\x01\x00", b"\xff\x00\x00\x00"], ids=["zmtp2-waits", "zmtp1-waits", "partial"]
)
def test_a_short_older_greeting_that_waits_is_closed_by_handshake_ivl(make_gather, hello):
    """An old peer sends its short greeting and waits for ours in its version: a ZMTP
    3-only socket cannot tell before 64 bytes, so ``handshake_ivl`` closes it."""
    gather = make_gather(handshake_ivl=300, **MONITOR)
    raw = Raw(gather)
    raw.send(hello)
    assert raw.closed_by_peer(within=5)
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mechanism", [b"GSSAPI", b"PLAIN", b"CURVE", b"FOO\x00BAR", b"\xff" * 20, b""])
def test_an_unknown_or_foreign_mechanism_is_closed_at_once(make_gather, mechanism):
    gather = make_gather(**MONITOR)
    raw = Raw(gather)
    greeting = bytearray(wire.greeting(b"NULL", False))
    greeting[12:32] = mechanism.ljust(20, b"\x00")[:20]
    raw.send(bytes(greeting) + raw.ready(Socket_Type=b"PUSH") + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    assert "mechanism" in gather.handshakes.last_rejection
    still_works(gather)


def _ready_body(metadata: bytes) -> bytes:
    return wire.command(b"READY", metadata)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "metadata",
    [
        wire.encode_metadata({"Socket-Type": b"PUSH"})[:-2],  # value cut short
        wire.encode_metadata({"Socket-Type": b"PUSH"})[:5],  # name cut short
        b"\x0bSocket-Type" + struct.pack(">I", 0xFFFFFFFF) + b"PUSH",  # a 4 GiB value
        b"\x0bSocket-Type" + struct.pack(">I", 1 << 31) + b"PUSH",
        b"\x00\x00\x00\x00\x00",  # an empty name
        wire.encode_metadata({"Identity": b"x"}),  # no Socket-Type
        b"",  # no metadata at all
        wire.encode_metadata({"Socket-Type": b""}),
        wire.encode_metadata({"Socket-Type": b"PUB"}),
        wire.encode_metadata({"Socket-Type": b"GATHER"}),
        wire.encode_metadata({"Socket-Type": b"PUSH\x00"}),
        b"\x0bSocket-Type\x00\x00\x00\x04PUSH" + b"\x01",  # trailing garbage
    ],
    ids=[
        "value-cut",
        "name-cut",
        "4GiB-value",
        "2GiB-value",
        "empty-name",
        "no-socket-type",
        "empty",
        "empty-type",
        "pub",
        "gather",
        "push-nul",
        "trailing",
    ],
)
def test_a_bad_ready_is_refused_at_once_and_its_messages_dropped(make_gather, metadata):
    gather = make_gather(**MONITOR)
    raw = Raw(gather)
    raw.greet()
    try_send(raw, raw.frame(_ready_body(metadata), COMMAND) + raw.frame(b"smuggled") + raw.frame(b"smuggled-2"))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_70_kib_command_before_the_handshake_is_closed_at_once(make_gather):
    gather = make_gather(**MONITOR)
    raw = Raw(gather)
    raw.greet()
    body = wire.command(b"READY", wire.encode_metadata({"Socket-Type": b"PUSH", "X-Pad": b"p" * (70 << 10)}))
    assert len(body) > HANDSHAKE_FRAME_LIMIT
    try_send(raw, raw.frame(body, COMMAND) + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_huge_command_header_before_the_handshake_is_closed_without_its_body(make_gather):
    """Only the 9-byte header of a 2**63-byte command: refused on the header alone."""
    gather = make_gather()
    raw = Raw(gather)
    raw.greet()
    raw.send(bytes((COMMAND | LONG,)) + struct.pack(">Q", 1 << 63))
    assert raw.closed_by_peer()
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_client_that_sends_nothing_is_closed_after_handshake_ivl_and_counted(make_gather):
    gather = make_gather(handshake_ivl=300, **MONITOR)
    started = time.monotonic()
    raw = Raw(gather)
    assert raw.closed_by_peer(within=5)
    assert time.monotonic() - started >= 0.25
    assert raw.tail == wire.greeting(b"NULL", False)
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_client_stalling_after_its_greeting_is_closed_after_handshake_ivl(make_gather):
    gather = make_gather(handshake_ivl=300, **MONITOR)
    raw = Raw(gather)
    raw.greet()
    raw.send(raw.ready(Socket_Type=b"PUSH")[:7])  # half a READY, then nothing
    assert raw.closed_by_peer(within=5)
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_greeting_ready_and_message_sent_one_byte_per_write_are_delivered(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    stream = wire.greeting(b"NULL", False) + raw.ready(Socket_Type=b"PUSH") + raw.frame(b"one byte at a time")
    for i in range(len(stream)):
        raw.send(stream[i : i + 1])
    assert wire.parse_greeting(raw.exact(wire.GREETING_SIZE))[1] == b"NULL"
    assert gather.recv(timeout=10) == b"one byte at a time"
    long = bytes(range(256)) * 2
    for byte in raw.frame(long):
        raw.send(bytes((byte,)))
    assert gather.recv(timeout=10) == long
    raw.close()
    still_works(gather)


@pytest.mark.timeout(120)
def test_300_idle_connections_do_not_stop_a_scatter_delivering_10000_messages(make_gather):
    gather = make_gather()
    idle = [Raw(gather) for _ in range(300)]
    half = [raw for i, raw in enumerate(idle) if i % 2]
    for raw in half:
        raw.greet()  # half of them got as far as the greeting
    scatter = Scatter(">" + gather.last_endpoint)
    try:
        sent = [b"m%05d" % i for i in range(10_000)]
        assert scatter.send_many(sent, timeout=30) == len(sent)
        received: list = []
        while len(received) < len(sent):
            received += [m[0] for m in gather.recv_batch(1000, timeout=30)]
        assert received == sent
    finally:
        scatter.close(linger=0)
    for i, raw in enumerate(idle):  # still open (handshake_ivl is 30 s), and none got more than a greeting
        raw.sock.settimeout(0)
        waiting = b""
        try:
            while True:
                chunk = raw.sock.recv(4096)
                assert chunk, "an idle connection was closed"
                waiting += chunk
        except BlockingIOError:
            pass
        assert waiting == (b"" if i % 2 else wire.greeting(b"NULL", False))
        raw.close()
    still_works(gather)


# -- after a valid NULL handshake as PUSH ------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [1 << 63, (1 << 64) - 1])
def test_a_2_63_byte_frame_header_with_a_size_limit_closes_at_once_without_allocating(make_gather, size):
    gather = make_gather(max_message_bytes=MB)
    raw = Raw(gather)
    assert raw.handshake()["socket-type"] == b"PULL"
    before = rss()
    raw.send(bytes((LONG,)) + struct.pack(">Q", size))
    assert raw.closed_by_peer()
    assert rss() - before < 50 * MB
    raw.close()
    still_works(gather)


@pytest.mark.timeout(90)
def test_a_2_63_byte_frame_header_closes_at_once_without_allocating(make_gather):
    gather = make_gather()  # max_message_bytes: None, the default
    raw = Raw(gather)
    raw.handshake()
    before = rss()
    raw.send(bytes((LONG,)) + struct.pack(">Q", 1 << 63))
    closed = raw.closed_by_peer()
    pushed = 0
    if not closed:  # show what waiting for the body costs: 96 MiB of it
        raw.sock.settimeout(5)
        chunk = b"\xa5" * MB
        while pushed < 96 * MB and try_send(raw, chunk):
            pushed += len(chunk)
    growth = rss() - before
    raw.close()
    assert closed, f"still open after the header; then {pushed >> 20} MiB more grew the Gather by {growth >> 20} MiB"
    assert growth < 50 * MB
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_frame_above_max_message_bytes_closes_the_connection(make_gather):
    gather = make_gather(max_message_bytes=1000)
    raw = Raw(gather)
    raw.handshake()
    raw.send(raw.frame(b"a" * 1000))  # at the limit: delivered
    assert gather.recv(timeout=10) == b"a" * 1000
    try_send(raw, raw.frame(b"b" * 1001) + raw.frame(b"after"))
    assert raw.closed_by_peer()
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_long_frame_with_a_small_size_is_delivered_as_libzmq_does(make_gather):
    """RFC 23 sends sizes below 256 in a short frame, but libzmq 4.3.5 accepts an 8-byte
    size of any value (checked: a libzmq PULL delivers it); so does this engine."""
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    raw.send(bytes((LONG,)) + struct.pack(">Q", 5) + b"hello" + bytes((LONG,)) + struct.pack(">Q", 0))
    assert gather.recv(timeout=10) == b"hello"
    assert gather.recv(timeout=10) == b""
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
def test_an_unknown_command_is_ignored_and_never_delivered(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    raw.send(
        raw.command(b"SUBSCRIBE", b"topic")
        + raw.command(b"X" * 255, b"x" * 3000)
        + raw.command(b"PONG")
        + raw.command(b"READY", wire.encode_metadata({"Socket-Type": b"PUB"}))
        + raw.frame(b"after commands")
    )
    assert gather.recv(timeout=10) == b"after commands"  # nothing before it: the commands were not messages
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "body",
    [b"", b"\x00", b"\x00PING", b"\x09PING", b"\xff"],
    ids=["empty", "empty-name", "empty-name-data", "name-overrun", "name-size-only"],
)
def test_a_malformed_command_after_the_handshake_closes_the_connection(make_gather, body):
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    try_send(raw, raw.frame(body, COMMAND) + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("data", [b"\x05fatal", b"\x03400", b"", b"\xff"], ids=["reason", "zap", "empty", "overrun"])
def test_an_error_command_closes_the_connection(make_gather, data):
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    try_send(raw, raw.command(b"ERROR", data) + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    still_works(gather)


@pytest.mark.timeout(30)
def test_a_ping_is_answered_with_a_pong_echoing_its_context(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    context = bytes(range(0xA0, 0xB0))
    raw.send(raw.command(b"PING", b"\x00\x64" + context))
    flags, body = raw.recv_frame()
    assert flags & COMMAND
    assert wire.parse_command(body) == (b"PONG", context)
    raw.send(raw.command(b"PING", b"\x00\x00"))  # no context: an empty PONG
    assert wire.parse_command(raw.recv_frame()[1]) == (b"PONG", b"")
    raw.send(raw.frame(b"after ping"))
    assert gather.recv(timeout=10) == b"after ping"
    raw.close()
    still_works(gather)


@pytest.mark.timeout(120)
def test_a_ping_flood_whose_pongs_are_never_read_does_not_grow_the_gather(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    raw.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.handshake()
    ping = raw.command(b"PING", b"\x00\x64" + b"C" * 16)
    chunk = ping * (MB // len(ping))
    before = rss()
    raw.sock.settimeout(5)
    sent = 0
    flood_read = False
    try:
        while sent < 40 * MB:
            raw.send(chunk)
            sent += len(chunk)
        raw.send(raw.frame(b"after the flood"))
        flood_read = gather.recv(timeout=15) == b"after the flood"  # every PING before it was read
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass  # a Gather that stops reading (or closes) while its PONGs wait holds the flood back
    growth = rss() - before
    raw.close()
    assert growth < 50 * MB, f"{sent >> 20} MiB of PINGs (all read: {flood_read}) grew the Gather by {growth >> 20} MiB"
    still_works(gather)


@pytest.mark.timeout(30)
def test_multipart_messages_are_discarded_whole_and_counted(make_gather):
    gather = make_gather()
    raw = Raw(gather)
    raw.handshake()
    raw.send(
        raw.frame(b"single-1")
        + raw.frame(b"a", MORE)
        + raw.frame(b"b", MORE)
        + raw.frame(b"c")
        + raw.frame(b"single-2")
        + raw.frame(b"x" * 300, MORE)
        + raw.frame(b"", MORE)
    )
    raw.send(raw.command(b"PING", b"\x00\x00"))  # a command inside a multipart message
    raw.send(raw.frame(b"end"))
    raw.send(raw.frame(b"", MORE) + raw.frame(b""))
    raw.send(raw.frame(b"single-3"))
    assert [gather.recv(timeout=10) for _ in range(3)] == [b"single-1", b"single-2", b"single-3"]
    assert gather.discarded_multipart == 3
    raw.close()
    still_works(gather)
    assert gather.discarded_multipart == 3


# -- CURVE ------------------------------------------------------------------------------------


@pytest.fixture
def curve_gather(make_gather):
    server, client = KeyPair.generate(), KeyPair.generate()
    gather = make_gather(curve=Curve.server(server, frozenset({client.public_key})), **MONITOR)
    return gather, server, client


def curve_client(server: KeyPair, client: KeyPair | None = None) -> CurveClient:
    if client is None:
        public, secret = crypto_box_keypair()
    else:
        public, secret = z85.decode(client.public_key), z85.decode(client.secret_key)
    return CurveClient(
        public, secret, z85.decode(server.public_key), lambda peer: {"Socket-Type": b"PUSH"}, lambda metadata: None
    )


def curve_handshake(raw: Raw, mech: CurveClient, sent: list | None = None) -> None:
    """Drive ``mech`` to the end of its handshake over ``raw`` (``sent``: the command bodies)."""
    assert raw.greet(b"CURVE")[1] == b"CURVE"
    out = mech.start()
    while True:
        for body in out:
            if sent is not None:
                sent.append(body)
            raw.send(raw.frame(body, COMMAND))
        if mech.ready:
            return
        flags, body = raw.recv_frame()
        out = mech.on_command(body)


@pytest.mark.timeout(30)
def test_curve_gather_refuses_a_null_client(curve_gather):
    gather, server, client = curve_gather
    raw = Raw(gather)
    assert raw.greet(b"NULL")[1] == b"CURVE"
    try_send(raw, raw.ready(Socket_Type=b"PUSH") + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    assert "mechanism" in gather.handshakes.last_rejection
    still_works(gather, curve=Curve.client(client, server.public_key))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seed", range(3))
def test_curve_gather_refuses_a_hello_with_a_garbage_box(curve_gather, seed):
    gather, server, client = curve_gather
    rng = random.Random(seed)
    raw = Raw(gather)
    raw.greet(b"CURVE")
    hello = b"\x05HELLO\x01\x00" + bytes(72) + rng.randbytes(32) + struct.pack(">Q", 1) + rng.randbytes(80)
    try_send(raw, raw.frame(hello, COMMAND) + raw.frame(b"smuggled"))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    still_works(gather, curve=Curve.client(client, server.public_key))


@pytest.mark.timeout(30)
def test_curve_gather_refuses_a_replayed_initiate(curve_gather):
    """A listener who recorded an authorized client's HELLO and INITIATE replays them on a
    new connection: the server's new WELCOME has a new cookie key, so the old INITIATE's
    cookie cannot be opened. Replaying INITIATE inside the authorized connection after its
    handshake is refused too (after CURVE's handshake only MESSAGE commands are valid)."""
    gather, server, client = curve_gather
    original = Raw(gather)
    recorded: list = []
    mech = curve_client(server, client)
    curve_handshake(original, mech, recorded)
    hello, initiate = recorded
    assert rejections(gather, 0) == 0

    replay = Raw(gather)
    replay.greet(b"CURVE")
    replay.send(replay.frame(hello, COMMAND))
    flags, welcome = replay.recv_frame()
    assert welcome.startswith(b"\x07WELCOME")
    try_send(replay, replay.frame(initiate, COMMAND) + replay.frame(b"smuggled"))
    assert replay.closed_by_peer()
    replay.close()
    assert rejections(gather, 1) == 1

    try_send(original, original.frame(initiate, COMMAND))
    assert original.closed_by_peer()
    original.close()
    still_works(gather, curve=Curve.client(client, server.public_key))
    assert rejections(gather, 1) == 1


@pytest.mark.timeout(30)
def test_curve_gather_refuses_an_unauthorized_key_with_error_400(curve_gather):
    gather, server, client = curve_gather
    raw = Raw(gather)
    mech = curve_client(server, KeyPair.generate())
    with pytest.raises(ZmtpError) as info:
        curve_handshake(raw, mech)
    assert info.value.event == zmq.EVENT_HANDSHAKE_FAILED_AUTH and info.value.value == 400  # the server's ERROR 400
    try_send(raw, raw.frame(b"smuggled") + raw.frame(b"\x07MESSAGE" + bytes(40)))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 1) == 1
    assert "refused" in gather.handshakes.last_rejection
    still_works(gather, curve=Curve.client(client, server.public_key))


@pytest.mark.timeout(30)
def test_curve_gather_delivers_from_an_authorized_raw_client_and_refuses_a_forged_message(curve_gather):
    """The raw CURVE client itself is correct (it delivers), so the refusals above are the
    server's doing; then a MESSAGE sealed with the wrong key closes the connection."""
    gather, server, client = curve_gather
    raw = Raw(gather)
    mech = curve_client(server, client)
    curve_handshake(raw, mech)
    raw.send(raw.frame(*reversed(mech.encode(b"sealed"))))
    assert gather.recv(timeout=10) == b"sealed"
    flags, body = mech.encode(b"forged")
    forged = body[:-1] + bytes((body[-1] ^ 1,))
    try_send(raw, raw.frame(forged, flags))
    assert raw.closed_by_peer()
    raw.close()
    assert rejections(gather, 0) == 0  # a failure after the handshake is not a rejected handshake
    still_works(gather, curve=Curve.client(client, server.public_key))


@pytest.mark.timeout(30)
def test_curve_gather_closes_on_a_message_above_max_message_bytes(make_gather):
    server, client = KeyPair.generate(), KeyPair.generate()
    gather = make_gather(max_message_bytes=1000, curve=Curve.server(server, frozenset({client.public_key})))
    raw = Raw(gather)
    mech = curve_client(server, client)
    curve_handshake(raw, mech)
    raw.send(raw.frame(*reversed(mech.encode(b"a" * 1000))))  # at the limit: delivered
    assert gather.recv(timeout=10) == b"a" * 1000
    try_send(raw, raw.frame(*reversed(mech.encode(b"b" * 1001))) + raw.frame(*reversed(mech.encode(b"after"))))
    nothing_delivered(gather)
    assert raw.closed_by_peer()
    raw.close()
    still_works(gather, curve=Curve.client(client, server.public_key))


# -- found by tools/fuzz.py --target zmtp, and what the engine does with its own bugs -------------


@pytest.mark.timeout(30)
def test_a_send_while_the_scatter_connects_does_not_raise(make_gather, monkeypatch):
    gather = make_gather()
    in_window, go = threading.Event(), threading.Event()
    original = security_module.Security.new_mechanism

    def held(self, conn):
        if conn.initiator and not in_window.is_set():
            in_window.set()
            go.wait(5)
        return original(self, conn)

    monkeypatch.setattr(security_module.Security, "new_mechanism", held)
    scatter = Scatter(">" + gather.last_endpoint)
    try:
        assert in_window.wait(5)
        try:
            scatter.send(b"sent while connecting", timeout=5)
        finally:
            go.set()
        assert gather.recv(timeout=10) == b"sent while connecting"
        nothing_delivered(gather)
    finally:
        scatter.close(linger=0)


@pytest.mark.timeout(30)
def test_an_unexpected_error_on_one_connection_closes_that_connection(make_gather, monkeypatch):
    gather = make_gather()
    original = sessions_module.Sessions._on_command

    def failing(self, conn, body):
        if wire.parse_command(body)[0] == b"PING":
            raise RuntimeError("simulated bug in a command handler")
        return original(self, conn, body)

    monkeypatch.setattr(sessions_module.Sessions, "_on_command", failing)
    raw = Raw(gather)
    raw.handshake()
    raw.send(
        raw.frame(b"before") + raw.command(b"PING", b"\x00\x00") + raw.frame(b"dropped?") + raw.frame(b"x" * 300)[:5]
    )
    assert gather.recv(timeout=10) == b"before"
    closed = raw.closed_by_peer()
    if not closed:  # show the desynchronised stream: the rest of the long frame is read as frames
        try_send(raw, (b"\x00\x05" + b"y" * 5) * 60)
    monkeypatch.undo()
    assert closed
    raw.close()
    still_works(gather)


# -- out of file descriptors ------------------------------------------------------------------

_LOW_FD_GATHER = r"""
import json, logging, resource, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
warnings = []
class Count(logging.Handler):
    def emit(self, record):
        warnings.append(record.levelno)
logging.getLogger("spark_zmq").addHandler(Count())
logging.getLogger("spark_zmq").propagate = False
from spark_zmq.patterns import Gather
gather = Gather("tcp://127.0.0.1:*")
print(gather.last_endpoint, flush=True)
sys.stdin.readline()  # the test has opened its connections
cpu, seen = time.process_time(), len(warnings)
try:
    gather.recv(timeout=1.0)
except TimeoutError:
    pass
print(json.dumps({"cpu": time.process_time() - cpu, "warnings": len(warnings) - seen}), flush=True)
sys.stdin.readline()  # the test closed them and sent a message
print(gather.recv(timeout=10).decode(), flush=True)
gather.close(linger=0)
"""


@pytest.mark.timeout(60)
def test_running_out_of_file_descriptors_neither_spins_nor_floods_the_log():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", _LOW_FD_GATHER], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    clients: list = []
    try:
        endpoint = child.stdout.readline().strip()
        host, port = endpoint[len("tcp://") :].rsplit(":", 1)
        clients = [socket.create_connection((host, int(port)), timeout=5) for _ in range(110)]
        child.stdin.write("measure\n")
        child.stdin.flush()
        measured = json.loads(child.stdout.readline())
        for sock in clients:
            sock.close()
        scatter = Scatter(">" + endpoint)
        try:
            scatter.send(b"after the descriptors came back", timeout=10)
            child.stdin.write("check\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "after the descriptors came back"
        finally:
            scatter.close(linger=0)
        assert measured["cpu"] < 0.3 and measured["warnings"] < 20, measured
    finally:
        for sock in clients:
            sock.close()
        child.kill()
        child.wait(10)
