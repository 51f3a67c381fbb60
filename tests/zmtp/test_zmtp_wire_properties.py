"""Hypothesis properties of the ZMTP engine's parsers (``zmtp.wire``, ``zmtp.codec``,
``NullMechanism``) and of its framing over a real TCP connection.

Every parser sees a stranger's bytes first, so for each one: what the encoder makes parses
back to what it was made from, and arbitrary bytes either parse or raise ``ZmtpError``
(never another exception). The stream property sends the NULL frames of any list of
messages, cut at arbitrary boundaries, over TCP to one shared ``Gather``, mixed with
frames it must not deliver (multipart messages, PINGs, unknown commands), and checks it
delivers exactly those messages, in order.
"""

from __future__ import annotations

import socket
import string
import struct

import pytest
import zmq
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from zmqtest import examples

from spark_zmq.patterns import Gather
from spark_zmq.patterns.message_block import MessageRun
from spark_zmq.patterns.wires.zmtp import codec, wire
from spark_zmq.patterns.wires.zmtp.null import NullMechanism
from spark_zmq.patterns.wires.zmtp.wire import COMMAND, MORE, ZmtpError

pytestmark = pytest.mark.timeout(120)

FAST = settings(max_examples=examples(300), deadline=None)

MECHANISMS = (b"NULL", b"PLAIN", b"CURVE")
# what a GATHER accepts, and how it answers (Gather.peer_types)
PEER_TYPES = {b"SCATTER": b"GATHER", b"PUSH": b"PULL"}

names = st.text(string.ascii_letters + string.digits + "-_.+", min_size=1, max_size=255)
command_names = st.binary(min_size=1, max_size=255)


# -- greeting ---------------------------------------------------------------------------------


@FAST
@given(st.sampled_from(MECHANISMS), st.booleans())
def test_parse_greeting_reads_back_our_greeting(mechanism, as_server):
    assert wire.parse_greeting(wire.greeting(mechanism, as_server)) == ((3, 1), mechanism, as_server)


@FAST
@given(st.binary(max_size=100))
def test_parse_greeting_of_arbitrary_bytes_returns_a_zmtp3_greeting_or_raises_zmtp_error(data):
    try:
        version, mechanism, as_server = wire.parse_greeting(data)
    except ZmtpError as exc:
        assert exc.event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        return
    assert len(data) == wire.GREETING_SIZE and data[0] == 0xFF and data[9] & 1
    assert version[0] >= 3 and mechanism in MECHANISMS and isinstance(as_server, bool)


@FAST
@given(st.sampled_from(MECHANISMS), st.integers(0, wire.GREETING_SIZE - 1), st.integers(0, 255))
def test_parse_greeting_with_one_byte_changed(mechanism, at, value):
    data = bytearray(wire.greeting(mechanism, False))
    data[at] = value
    try:
        version, parsed, _ = wire.parse_greeting(bytes(data))
    except ZmtpError:
        # only the signature, the major version and the mechanism can make it invalid
        assert at == 0 or at == 9 or at == 10 or 12 <= at < 32
        return
    assert version[0] >= 3 and parsed in MECHANISMS


# -- commands ---------------------------------------------------------------------------------


@FAST
@given(command_names, st.binary(max_size=300))
def test_parse_command_reads_back_a_command(name, data):
    assert wire.parse_command(wire.command(name, data)) == (name, data)


@FAST
@given(st.binary(max_size=300))
def test_parse_command_of_arbitrary_bytes_is_exact_or_raises_zmtp_error(body):
    try:
        name, data = wire.parse_command(body)
    except ZmtpError:
        assert not body or body[0] == 0 or len(body) < 1 + body[0]
        return
    assert 1 <= len(name) <= 255 and wire.command(name, data) == body


# -- metadata ---------------------------------------------------------------------------------

metadata_dicts = st.dictionaries(names, st.binary(max_size=300), max_size=8).filter(
    lambda d: len({k.lower() for k in d}) == len(d)
)


@FAST
@given(metadata_dicts)
def test_parse_metadata_reads_back_encode_metadata(properties):
    assert wire.parse_metadata(wire.encode_metadata(properties)) == {k.lower(): v for k, v in properties.items()}


@FAST
@given(st.binary(max_size=400))
def test_parse_metadata_of_arbitrary_bytes_returns_at_most_its_input_or_raises_zmtp_error(data):
    try:
        properties = wire.parse_metadata(data)
    except ZmtpError as exc:
        assert exc.value == zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA
        return
    # nothing made up: every name and value came from the input
    assert sum(len(k) + len(v) for k, v in properties.items()) <= len(data)


@FAST
@given(metadata_dicts.filter(bool), st.data())
def test_parse_metadata_refuses_truncated_metadata(properties, data):
    encoded = wire.encode_metadata(properties)
    boundaries = {0}
    at = 0
    for name, value in properties.items():
        at += 1 + len(name) + 4 + len(value)
        boundaries.add(at)
    cut = data.draw(st.integers(1, len(encoded) - 1).filter(lambda n: n not in boundaries)) if len(encoded) > 1 else 0
    assume(cut not in boundaries)
    with pytest.raises(ZmtpError):
        wire.parse_metadata(encoded[:cut])


@FAST
@given(names, st.integers(1, (1 << 32) - 1), st.binary(max_size=50))
def test_parse_metadata_refuses_a_value_longer_than_what_follows(name, length, value):
    assume(length > len(value))
    with pytest.raises(ZmtpError):
        wire.parse_metadata(bytes((len(name),)) + name.encode() + struct.pack(">I", length) + value)


# -- ERROR ----------------------------------------------------------------------------------


@FAST
@given(st.binary(max_size=300), st.booleans())
def test_error_from_command_never_raises(data, is_server):
    error = wire.error_from_command(data, is_server)
    assert isinstance(error, ZmtpError)
    reason = data[1 : 1 + data[0]] if data and len(data) >= 1 + data[0] else b""
    if reason in (b"300", b"400", b"500"):
        assert (error.event, error.value) == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, int(reason))
    else:
        assert error.event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL


@FAST
@given(st.text(string.printable, max_size=255))
def test_error_command_reads_back(reason):
    name, data = wire.parse_command(wire.error_command(reason))
    assert name == b"ERROR"
    error = wire.error_from_command(data, is_server=False)
    assert repr(reason[:80])[1:-1] in str(error) or reason in ("300", "400", "500")


# -- the NULL mechanism ---------------------------------------------------------------------


def null_mechanism(initiator: bool = False) -> NullMechanism:
    """A NullMechanism with a GATHER's declare/accept rules (as StreamEngine.declare_metadata/accept_metadata)."""

    def declare(peer):
        kind = ((peer or {}).get("socket-type") or b"").upper()
        return {"Socket-Type": PEER_TYPES.get(kind, b"GATHER")}

    def accept(metadata):
        if wire.socket_type_of(metadata) not in PEER_TYPES:
            raise ZmtpError(
                "socket type mismatch", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA
            )

    return NullMechanism(initiator, declare, accept)


@FAST
@given(st.binary(max_size=300), st.booleans())
def test_null_on_command_of_arbitrary_bytes_is_ready_or_raises_zmtp_error(body, initiator):
    mech = null_mechanism(initiator)
    mech.start()
    try:
        out = mech.on_command(body)
    except ZmtpError:
        assert not mech.ready
        return
    assert mech.ready and mech.peer_metadata["socket-type"].upper() in PEER_TYPES
    assert len(out) == (0 if initiator else 1)
    with pytest.raises(ZmtpError):  # nothing after READY belongs to the handshake
        mech.on_command(body)


@FAST
@given(
    st.sampled_from([b"SCATTER", b"PUSH", b"push", b"PULL", b"GATHER", b"PUB", b"SUB", b"DEALER", b""]), metadata_dicts
)
def test_null_on_command_accepts_a_ready_exactly_from_a_peer_type_and_answers_in_its_type(socket_type, extra):
    mech = null_mechanism(initiator=False)
    assert mech.start() == []
    properties = {k: v for k, v in extra.items() if k.lower() != "socket-type"}
    properties["Socket-Type"] = socket_type
    body = wire.command(b"READY", wire.encode_metadata(properties))
    if socket_type.upper() not in PEER_TYPES:
        with pytest.raises(ZmtpError):
            mech.on_command(body)
        assert not mech.ready
        return
    (reply,) = mech.on_command(body)
    name, data = wire.parse_command(reply)
    assert name == b"READY"
    assert wire.parse_metadata(data) == {"socket-type": PEER_TYPES[socket_type.upper()]}
    assert mech.ready


# -- frames (codec) -----------------------------------------------------------------------------

frame_flags = st.sampled_from([0, MORE, COMMAND, MORE | COMMAND])
frame_bodies = st.one_of(st.binary(max_size=300), st.builds(lambda n: b"\xab" * n, st.integers(250, 5000)))
frame_lists = st.lists(st.tuples(frame_flags, frame_bodies), max_size=20)


def parsed(flags: int, body: bytes):
    """What ``parse_frames`` appends for a frame: the body alone when it has no MORE or
    COMMAND flag, else ``(flags as on the wire, body)``."""
    if not flags & (MORE | COMMAND):
        return body
    return (flags | (codec.LONG if len(body) >= 256 else 0), body)


@FAST
@given(frame_lists, st.binary(max_size=8))
def test_parse_frames_reads_back_what_frame_header_encodes(frames, prefix):
    stream = prefix + b"".join(codec.frame_header(len(body), flags) + body for flags, body in frames)
    out: list = []
    i, need, flagged = codec.parse_frames(stream, len(prefix), codec.HARD_FRAME_LIMIT, out)
    assert out == [parsed(flags, body) for flags, body in frames]
    assert (i, need) == (len(stream), 2)
    assert flagged == sum(1 for flags, _ in frames if flags)


@FAST
@given(frame_lists.filter(bool))
def test_parse_frames_one_at_a_time_reads_the_same_frames(frames):
    stream = b"".join(codec.frame_header(len(body), flags) + body for flags, body in frames)
    out: list = []
    i = 0
    for _ in frames:
        before = len(out)
        i, _, _ = codec.parse_frames(stream, i, codec.HANDSHAKE_FRAME_LIMIT, out, one=True)
        assert len(out) == before + 1
    assert out == [parsed(flags, body) for flags, body in frames] and i == len(stream)


@FAST
@given(frame_lists.filter(bool), st.data())
def test_parse_frames_of_a_truncated_stream_stops_at_the_cut_and_says_what_it_needs(frames, data):
    stream = b"".join(codec.frame_header(len(body), flags) + body for flags, body in frames)
    cut = data.draw(st.integers(0, len(stream) - 1), label="cut")
    out: list = []
    i, need, _ = codec.parse_frames(stream[:cut], 0, codec.HARD_FRAME_LIMIT, out)
    whole = [parsed(flags, body) for flags, body in frames]
    assert out == whole[: len(out)] and len(out) < len(frames)
    assert i <= cut and i + need > cut  # nothing parsed past the cut, and more is needed
    # given what it asks for (the header first, then the body), the next frame comes whole
    more: list = []
    for _ in range(3):
        end, need_next, _ = codec.parse_frames(stream[i : i + need], 0, codec.HARD_FRAME_LIMIT, more)
        if more:
            break
        assert end == 0 and need_next > need
        need = need_next
    assert more == [whole[len(out)]] and end == need


@FAST
@given(st.lists(frame_bodies, max_size=5), st.integers(0, 2**64 - 1), st.integers(0, 300))
def test_parse_frames_refuses_a_size_above_the_limit_before_its_body_arrives(before, size, limit):
    assume(size > limit)
    stream = b"".join(codec.frame_header(len(body)) + body for body in before if len(body) <= limit)
    kept = [body for body in before if len(body) <= limit]
    out: list = []
    with pytest.raises(codec.FrameTooLarge) as raised:
        codec.parse_frames(stream + codec.frame_header(size) + b"x", 0, limit, out)
    assert (raised.value.size, raised.value.limit) == (size, limit)
    assert isinstance(raised.value, ZmtpError) and out == kept


@FAST
@given(st.binary(max_size=200), st.integers(0, 1 << 20))
def test_parse_frames_of_arbitrary_bytes_splits_within_them_or_raises_frame_too_large(data, limit):
    out: list = []
    try:
        i, need, flagged = codec.parse_frames(data, 0, limit, out)
    except codec.FrameTooLarge:
        return
    assert 0 <= i <= len(data) and need >= 2 and i + need > len(data)
    assert sum(len(f[1] if type(f) is tuple else f) for f in out) <= len(data)


@FAST
@given(
    st.lists(
        st.one_of(frame_bodies, st.lists(frame_bodies, min_size=2, max_size=3).map(tuple)), min_size=1, max_size=20
    ),
    st.integers(0, 100),
    st.booleans(),
)
def test_encode_messages_writes_frames_parse_frames_reads_back(batch, offset, sealed):
    chunks: list = []
    encode = (lambda payload, more: (0, b"<" + payload + (b"+" if more else b"."))) if sealed else None
    ends = codec.encode_messages(batch, chunks, offset, encode)
    stream = b"".join(chunks)
    assert len(ends) == len(batch) and ends[-1] == offset + len(stream)
    out: list = []
    codec.parse_frames(stream, 0, codec.HARD_FRAME_LIMIT, out)
    expected = []
    for message in batch:
        frames = message if type(message) is tuple else (message,)
        for index, frame in enumerate(frames):
            more = index < len(frames) - 1
            if sealed:
                expected.append(b"<" + frame + (b"+" if more else b"."))
            else:
                expected.append(parsed(MORE if more else 0, frame))
    assert out == expected
    # each message ends where the frames parsed so far end
    position, k = 0, 0
    for message, end in zip(batch, ends):
        for _ in message if type(message) is tuple else (message,):
            position = codec.parse_frames(stream, position, codec.HARD_FRAME_LIMIT, [], one=True)[0]
            k += 1
        assert offset + position == end


@FAST
@given(st.integers(0, 2**64 - 1), st.integers(0, 255))
def test_frame_header_is_the_rfc37_layout(size, flags):
    header = codec.frame_header(size, flags)
    if size < 256:
        assert header == bytes((flags, size))
    else:
        assert header == bytes((flags | codec.LONG,)) + struct.pack(">Q", size)


# -- the frame stream over TCP ------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_gather():
    gather = Gather("tcp://127.0.0.1:*", hwm=0)
    yield gather
    gather.close(linger=0)


def frame(body: bytes, flags: int = 0) -> bytes:
    return wire.frame_header(len(body), flags) + body


long_bodies = st.builds(lambda n, b: bytes((b,)) * n, st.integers(256, 70_000), st.integers(0, 255))
bodies = st.one_of(st.binary(max_size=300), long_bodies)
items = st.one_of(
    bodies.map(lambda b: ("message", b)),
    bodies.map(lambda b: ("message", b)),
    st.lists(st.binary(max_size=300), min_size=2, max_size=4).map(lambda parts: ("multipart", parts)),
    st.binary(max_size=16).map(lambda context: ("ping", context)),
    st.tuples(command_names, st.binary(max_size=100)).map(lambda c: ("command", c)),
)


def encode(item) -> bytes:
    kind, value = item
    if kind == "message":
        return frame(value)
    if kind == "multipart":
        return b"".join(frame(part, MORE) for part in value[:-1]) + frame(value[-1])
    if kind == "ping":
        return frame(wire.command(b"PING", b"\x00\x01" + value), COMMAND)
    name, data = value
    if name in (b"ERROR", b"PING"):
        name = b"X-" + name  # ERROR closes the connection; PING is answered above
    return frame(wire.command(name, data), COMMAND)


@settings(
    max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(items, max_size=30), st.booleans(), st.data())
def test_chunked_null_frame_stream_over_tcp_delivers_exactly_the_messages_in_order(
    shared_gather, stream_items, with_handshake, data
):
    gather = shared_gather
    try:  # what an earlier, failed example left
        while True:
            gather.recv_batch(10_000, timeout=0)
    except TimeoutError:
        pass
    handshake = wire.greeting(b"NULL", False) + frame(
        wire.command(b"READY", wire.encode_metadata({"Socket-Type": b"PUSH"})), COMMAND
    )
    sentinel = b"end of example %d" % id(stream_items)
    stream = b"".join(encode(item) for item in stream_items) + frame(sentinel)
    expected = [value for kind, value in stream_items if kind == "message"] + [sentinel]
    multiparts = sum(kind == "multipart" for kind, _ in stream_items)
    discarded = gather.discarded_multipart

    host, port = gather.last_endpoint[len("tcp://") :].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if with_handshake:  # the handshake is cut at arbitrary boundaries too
            stream = handshake + stream
        else:
            sock.sendall(handshake)
        cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(stream) - 1)), max_size=40), label="cuts")))
        for start, end in zip([0] + cuts, cuts + [len(stream)]):
            sock.sendall(stream[start:end])
        received: list = []
        while not received or received[-1] != sentinel:
            received += [m[0] for m in gather.recv_batch(10_000, timeout=10)]
        assert received == expected
        assert gather.discarded_multipart - discarded == multiparts
    finally:
        sock.close()


def _expanded(items: list) -> list:
    """``parse_frames``' output shape of what ``plain_run`` and ``parse_frames`` gave together."""
    out: list = []
    for item in items:
        out.extend(item.messages() if isinstance(item, MessageRun) else [item])
    return out


# a stream as producers send it: runs of same-size plain frames, and frames of any kind between
uniform_runs = st.tuples(st.sampled_from([0, 1, 7, 100, 255, 256, 1000]), st.integers(0, 40)).map(
    lambda run: [(0, bytes([run[0] % 251]) * run[0])] * run[1]
)
# ... and runs of plain short frames of many sizes (one-row messages of varying length)
varied_runs = st.lists(st.integers(0, 300), max_size=40).map(
    lambda sizes: [(0, bytes([size % 251]) * size) for size in sizes]
)
mixed_streams = st.lists(st.one_of(uniform_runs, varied_runs, frame_lists), max_size=6).map(
    lambda parts: sum(parts, [])
)


@FAST
@given(mixed_streams, st.binary(max_size=8), st.integers(0, 2000))
def test_plain_run_then_parse_frames_read_what_parse_frames_alone_reads(frames, prefix, limit):
    """What the engine does with a read (``plain_run`` from where it is, ``parse_frames``
    for the rest) is exactly what ``parse_frames`` does on its own, frame for frame,
    including where it stops, what it needs next and a size above ``limit`` raising."""
    stream = prefix + b"".join(codec.frame_header(len(body), flags) + body for flags, body in frames)
    alone: list = []
    try:
        expected = codec.parse_frames(stream, len(prefix), limit, alone)
    except codec.FrameTooLarge:
        expected = None
    run, i = codec.plain_run(stream, len(prefix), limit)
    together: list = [run] if run is not None else []
    if run is not None:
        assert run.count >= codec.RUN_MIN
    try:
        got = codec.parse_frames(stream, i, limit, together)
    except codec.FrameTooLarge:
        got = None
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got[:2] == expected[:2]
    assert _expanded(together) == alone


@FAST
@given(st.binary(max_size=3000), st.integers(0, 300))
def test_plain_run_of_arbitrary_bytes_takes_only_whole_plain_frames(data, limit):
    """Hostile bytes: a run is whole frames that ``parse_frames`` reads the same way."""
    run, i = codec.plain_run(data, 0, limit)
    if run is None:
        assert i == 0
        return
    alone: list = []
    codec.parse_frames(data[:i], 0, limit, alone)
    assert alone == run.messages() and run.nbytes == sum(map(len, alone))


def test_plain_run_splits_a_run_of_long_frames_and_stops_at_the_first_other_frame():
    body = b"k" * 1024
    frames = [codec.frame_header(1024) + body] * 20 + [codec.frame_header(3, MORE) + b"top", codec.frame_header(0)]
    stream = b"".join(frames)
    run, i = codec.plain_run(stream, 0, 4096)
    assert run.count == 20 and run.messages() == [body] * 20 and i == 20 * (9 + 1024)
    assert codec.plain_run(stream, 0, 1023) == (None, 0)  # too large for the limit: parse_frames raises


def test_short_frames_of_many_sizes_are_one_run_up_to_the_first_long_or_flagged_frame():
    bodies = [bytes([n % 251]) * n for n in (0, 1, 255, 17, 100, 3, 250, 64, 9, 200, 1, 0, 30, 31, 32, 33, 99)]
    tail = [codec.frame_header(256) + b"L" * 256, codec.frame_header(3, MORE) + b"top"]
    stream = b"".join(codec.frame_header(len(b)) + b for b in bodies) + b"".join(tail)
    run, i = codec.plain_run(stream, 0, 4096)
    assert run.messages() == bodies and i == sum(2 + len(b) for b in bodies)
    assert run.split(5)[1].messages() == bodies[5:]
    # a body above the limit ends the run before it (parse_frames raises for it)
    run, i = codec.plain_run(stream, 0, 200)
    assert run is None and i == 0  # the third frame is 255 bytes: only two frames would fit
