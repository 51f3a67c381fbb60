"""ZMTP 3.1 frames (RFC 37) as bytes: the one frame parser and the one frame encoder.

Every frame a peer sends after its greeting, in the handshake and after it, is split by
``parse_frames``; every frame header this package writes comes from ``frame_header``
(``encode_messages`` is the write path's batch form of it). One place decides what a size
field means and which sizes are refused, so the handshake and the message stream cannot
disagree about it.

Both sit on the engine's hot path, where Python work per frame bounds the throughput: the
parser makes no object per frame beyond the body slice it must hand out (a frame with
flags is the exception, see ``parse_frames``), and headers of short frames come from
tables built once instead of being packed per frame.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, MutableSequence, Sequence
from itertools import accumulate
from typing import Any, cast

import numpy as np
import zmq

from ....errors import SparkZmqError
from ...message_block import MessageRun

__all__ = [
    "ZmtpError",
    "FrameTooLarge",
    "MORE",
    "LONG",
    "COMMAND",
    "HANDSHAKE_FRAME_LIMIT",
    "HARD_FRAME_LIMIT",
    "frame_header",
    "parse_frames",
    "plain_run",
    "encode_messages",
]

MORE, LONG, COMMAND = 0x01, 0x02, 0x04
#: a message as the queues hold it: its one frame, or a tuple of its frames (multipart)
EngineMessage = bytes | tuple[bytes, ...]
#: what ``parse_frames`` appends: a plain frame's body, or ``(flags, body)``
ParsedFrame = bytes | tuple[int, bytes]
#: a buffer waiting to be written: a whole one, or what a partial write left of it
Chunk = bytes | memoryview

#: nothing a handshake needs is larger; before authentication, keep what a peer can make us
#: buffer small
HANDSHAKE_FRAME_LIMIT = 64 * 1024
#: frames above this close the connection even without ``max_message_bytes``: a size field of
#: 2**63 must not make a connection buffer forever (libzmq fails to allocate it and closes)
HARD_FRAME_LIMIT = 1 << 31

_U64 = struct.Struct(">Q")
_pack = _U64.pack
_unpack_from = _U64.unpack_from
#: headers of frames below 256 bytes, by flags (0..7) and size
_SHORT_HEADERS = [[bytes((flags, size)) for size in range(256)] for flags in range(8)]
#: the flags byte of a long frame, by flags (0..7)
_LONG_FLAGS = [bytes((flags | LONG,)) for flags in range(8)]
_PLAIN_SHORT = _SHORT_HEADERS[0]
_PLAIN_LONG = _LONG_FLAGS[0]
#: messages below this size are joined into one buffer with their neighbours; larger ones
#: go to the kernel as they are (no copy)
_JOIN_BELOW = 4096


class ZmtpError(SparkZmqError):
    """A peer broke ZMTP (or was refused): its connection is closed.

    ``event`` and ``value`` are what libzmq's socket monitor would report for the same
    failure (``zmq.EVENT_HANDSHAKE_FAILED_*`` and a ``zmq.PROTOCOL_ERROR_*`` or ZAP
    status code), so one set of texts explains failures of both kinds of sockets.
    ``reply`` is a command body to send before closing (an ERROR), or ``None``.
    """

    def __init__(
        self, text: str, event: int = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, value: int = 0, reply: bytes | None = None
    ) -> None:
        super().__init__(text)
        self.event = event
        self.value = value
        self.reply = reply


class FrameTooLarge(ZmtpError):
    """A frame's size field is above the limit it was parsed with (``size``, ``limit``)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"a frame of {size} bytes exceeds the limit of {limit} bytes",
            zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
            zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED,
        )
        self.size = size
        self.limit = limit


def frame_header(size: int, flags: int = 0) -> bytes:
    """The flags and size bytes before a frame body of ``size`` bytes (``LONG`` is added
    for 256 bytes and more)."""
    if not flags:  # a single-part message: the write path's case, first
        if 0 <= size < 256:
            return _PLAIN_SHORT[size]
        if size >= 256:
            return _PLAIN_LONG + _pack(size)
    elif 0 < flags < 8:
        if 0 <= size < 256:
            return _SHORT_HEADERS[flags][size]
        if size >= 256:
            return _LONG_FLAGS[flags] + _pack(size)
    if size < 256:
        return bytes((flags, size))  # raises for what is not a byte
    return bytes((flags | LONG,)) + _pack(size)


def parse_frames(data: bytes, i: int, limit: int, out: list[ParsedFrame], one: bool = False) -> tuple[int, int, int]:
    """Split the whole frames of ``data`` from offset ``i`` into ``out``, in order.

    A frame without MORE or COMMAND (a single-part message: nearly all of them) is
    appended as its body alone; any other as ``(flags, body)`` (flags as on the wire,
    ``LONG`` included), so the common case costs no tuple. With ``one``, stops after one
    frame (the handshake, whose next frame may need another limit).

    Returns ``(offset after the last whole frame, bytes needed from there for the next
    frame to be whole, frames appended with flags)``. A size field above ``limit`` raises
    ``FrameTooLarge`` before its body is awaited; the frames before it are in ``out``.
    """
    append = out.append
    n = len(data)
    flagged = 0
    while n - i >= 2:
        flags = data[i]
        if flags & LONG:
            if n - i < 9:
                return i, 9, flagged
            size = _unpack_from(data, i + 1)[0]
            start = i + 9
        else:
            size = data[i + 1]
            start = i + 2
        if size > limit:
            raise FrameTooLarge(size, limit)
        end = start + size
        if end > n:
            return i, end - i, flagged
        if flags & 5:  # MORE | COMMAND
            flagged += 1
            append((flags, data[start:end]))
        else:
            append(data[start:end])
        i = end
        if one:
            break
    return i, 2, flagged


#: the fewest frames ``plain_run`` splits in bulk: below it numpy's fixed cost is more than
#: ``parse_frames``'s per frame
RUN_MIN = 16


def plain_run(data: bytes | memoryview, i: int, limit: int) -> tuple[MessageRun | None, int]:
    """The whole frames of ``data`` from offset ``i`` that are plain (no MORE, no COMMAND)
    and of one size, split in bulk: ``(their bodies as a MessageRun, offset after them)``,
    or ``(None, i)`` when fewer than ``RUN_MIN`` such frames start at ``i``.

    Why: a producer of one-row messages sends frames of one size back to back, and
    ``parse_frames`` spends a Python step and a ``bytes`` object on each. Here their
    headers are checked and their bodies gathered by numpy over the read as a table of
    ``header + size`` bytes a row, with no object per frame. Any frame that differs (another
    size, flags, a command) ends the run; ``parse_frames`` takes over from there, so what
    this accepts is exactly what it would. A size above ``limit`` is never taken here, so
    ``parse_frames`` raises ``FrameTooLarge`` for it as before.
    """
    n = len(data)
    if n - i < 2:
        return None, i
    flags = data[i]
    if flags == 0:
        size, head = data[i + 1], 2
    elif flags == LONG and n - i >= 9:
        size, head = _unpack_from(data, i + 1)[0], 9
    else:
        return None, i
    stride = head + size
    count = (n - i) // stride
    if size > limit or count < RUN_MIN or data[i + stride : i + stride + head] != data[i : i + head]:
        # (the second frame's header compared first: a cheap no for mixed sizes)
        return short_run(data, i, limit) if head == 2 else (None, i)
    rows = np.frombuffer(data, np.uint8, count * stride, i).reshape(count, stride)
    same = rows[:, :head] == rows[0, :head]
    if not same.all():  # (two passes when every header is the same: the stream's usual case)
        count = int(np.argmin(same.all(axis=1)))
        if count < RUN_MIN:
            return None, i
    bodies = rows[:count, head:].tobytes()
    return MessageRun(bodies, np.arange(count + 1, dtype=np.int64) * size), i + count * stride


def short_run(data: bytes | memoryview, i: int, limit: int) -> tuple[MessageRun | None, int]:
    """``plain_run`` for frames of many sizes: the plain short frames (no flags, bodies up
    to 255 bytes, none above ``limit``) from ``i``, ``(their bodies as a MessageRun,
    offset after them)``, or ``(None, i)`` when fewer than ``RUN_MIN`` start there.

    Why: one-row messages of varying size (JSON events, log lines) would otherwise cost
    ``parse_frames``' ``bytes`` object per frame and a join after it. Here one Python step
    a frame only finds where each header is (each frame's place depends on the sizes
    before it); numpy then drops the headers from the span in one pass, leaving the bodies
    joined, and the offsets are the headers' places. What it takes is exactly what
    ``parse_frames`` would read; it stops at the first other frame."""
    n = len(data)
    first = i
    heads: list[int] = []
    mark = heads.append
    cap = min(limit, 255)
    while n - i >= 2 and not data[i]:
        size = data[i + 1]
        end = i + 2 + size
        if size > cap or end > n:
            break
        mark(i)
        i = end
    if len(heads) < RUN_MIN:
        return None, first
    places = np.array(heads, np.int64) - first
    span = np.frombuffer(data, np.uint8, i - first, first)
    keep = np.ones(i - first, bool)
    keep[places] = False
    keep[places + 1] = False
    offsets = np.empty(len(heads) + 1, np.int64)
    offsets[0] = 0
    # each frame's body ends where the next header starts (the last one's at ``i``)
    np.subtract(np.append(places[1:], i - first), places + 2, out=offsets[1:])
    np.cumsum(offsets[1:], out=offsets[1:])
    return MessageRun(span[keep].tobytes(), offsets), i


def encode_messages(
    batch: Sequence[EngineMessage],
    chunks: MutableSequence[Chunk],
    offset: int,
    encode: Callable[[bytes, bool], tuple[int, bytes]] | None = None,
    encode_batch: Callable[[Sequence[bytes]], tuple[bytes, list[int]]] | None = None,
) -> list[int]:
    """Append the frames of ``batch`` (each a ``bytes`` message or a tuple of frames, MORE
    on every frame but the last) to ``chunks``, the buffers to write; returns, per
    message, ``offset`` plus the bytes written up to its end.

    ``encode`` is a security mechanism's frame encoder (``CurveClient.encode``); ``None``
    sends the payloads as they are (NULL). Small messages are joined into one buffer, so a
    batch of many costs few ``sendmsg`` entries; a large one is sent from its own buffer.
    ``encode_batch`` (``CurveMechanism.encode_batch``): ``encode`` over a whole batch of
    single-frame messages at once, giving the frames joined and each message's end.
    """
    if encode_batch is not None and batch and tuple not in set(map(type, batch)):
        joined, batch_ends = encode_batch(cast("Sequence[bytes]", batch))
        chunks.append(joined)
        return list(map(offset.__add__, batch_ends))
    if encode is None and batch:
        lengths = list(map(len, batch))
        if max(lengths) < 256 and tuple not in set(map(type, batch)):
            # every message one short plain frame (the one-row-per-message egress): the
            # headers looked up, headers and bodies interleaved and joined, the ends summed,
            # each in one pass that runs in C, not one Python step per message
            parts: list[bytes | None] = [None] * (2 * len(batch))
            parts[0::2] = map(_PLAIN_SHORT.__getitem__, lengths)
            parts[1::2] = cast("Sequence[bytes]", batch)
            chunks.append(b"".join(cast("list[bytes]", parts)))
            short_ends = list(accumulate(map((2).__add__, lengths), initial=offset))
            del short_ends[0]
            return short_ends
    ends: list[int] = []
    small: list[bytes] = []
    join = small.append
    header = frame_header
    plain_short, plain_long, pack = _PLAIN_SHORT, _PLAIN_LONG, _pack
    # a message is exactly bytes or a tuple of them: the loops test ``type(m) is tuple``,
    # which mypy does not take as narrowing the other case to bytes
    messages = cast("Sequence[Any]", batch)
    if encode is None:
        for message in messages:
            if type(message) is tuple:
                last = len(message) - 1
                for index, frame in enumerate(message):
                    head = header(len(frame), MORE if index < last else 0)
                    join(head)
                    join(frame)
                    offset += len(head) + len(frame)
                ends.append(offset)
                continue
            size = len(message)
            # frame_header(size, 0) without the call: a third of this loop's time otherwise
            head = plain_short[size] if size < 256 else plain_long + pack(size)
            if size < _JOIN_BELOW:
                join(head)
                join(message)
            else:
                if small:
                    chunks.append(b"".join(small))
                    small.clear()
                chunks.append(head)
                chunks.append(message)
            offset += len(head) + size
            ends.append(offset)
    else:
        for message in messages:
            frames = message if type(message) is tuple else (message,)
            last = len(frames) - 1
            for index, frame in enumerate(frames):
                flags, body = encode(frame, index < last)
                head = header(len(body), flags)
                join(head)
                join(body)
                offset += len(head) + len(body)
            ends.append(offset)
    if small:
        chunks.append(b"".join(small))
    return ends
