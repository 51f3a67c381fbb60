"""The structure of an Arrow IPC stream, read from its bytes before pyarrow decodes it.

Step 1 of ``guard``: a bounds-checked reader of the Message/RecordBatch flatbuffers
(pyarrow exposes none of their fields), the checks of that metadata made before anything
is decompressed, the rows a stream claims, and ``message_layout`` for fuzzers and tests.
"""

from __future__ import annotations

import struct
from typing import Any, TypeAlias, cast

import numpy as np
import pyarrow as pa

from ..errors import SparkZmqError

__all__ = [
    "MAX_ROWS",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_IPC_MESSAGES",
    "BytesLike",
    "MalformedArrowError",
    "CorruptMetadataError",
    "error_reason",
    "check_stream",
    "rows_claimed",
    "message_layout",
]

#: rows one message may hold, over all its record batches (also each dictionary's size)
MAX_ROWS = 10_000_000
#: bytes all buffers of one message may take once decompressed
MAX_DECOMPRESSED_BYTES = 1 << 30
#: IPC messages (schema + dictionaries + record batches) in one ZeroMQ message
MAX_IPC_MESSAGES = 10_000

BytesLike: TypeAlias = bytes | bytearray | memoryview | pa.Buffer
#: int64 values read from the metadata: a tuple for the usual few, an array for many
Ints: TypeAlias = tuple[int, ...] | np.ndarray

# Message.fbs / Schema.fbs: union tags of Message.header, compression enums
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
_CODECS = {0: "LZ4_FRAME", 1: "ZSTD"}
_CONTINUATION = 0xFFFFFFFF


class MalformedArrowError(SparkZmqError, ValueError):
    """An Arrow message that must not be decoded (the reason says why)."""


class CorruptMetadataError(SparkZmqError):
    """The flatbuffer reader found an out-of-bounds or inconsistent field (``guard``
    reports it as a ``MalformedArrowError``)."""


def error_reason(exc: BaseException) -> str:
    """``exc`` as the reason of a ``MalformedArrowError``: its class and first line."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# -- a minimal, bounds-checked flatbuffer reader (only what Message/RecordBatch need) ------

_U8 = struct.Struct("<B")
_I16 = struct.Struct("<h")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


def _read(fmt: struct.Struct, buf: BytesLike, end: int, pos: int) -> int:
    if pos < 0 or pos + fmt.size > end:
        raise CorruptMetadataError(f"field at byte {pos} is outside the {end}-byte metadata")
    value: int = fmt.unpack_from(buf, pos)[0]
    return value


def _table(buf: BytesLike, end: int, pos: int) -> tuple[int, int, int]:
    """(table position, vtable position, vtable size) of the table at ``pos``."""
    vtable = pos - _read(_I32, buf, end, pos)
    size = _read(_U16, buf, end, vtable)
    if size < 4 or size % 2 or vtable + size > end:
        raise CorruptMetadataError("corrupt flatbuffer vtable")
    return pos, vtable, size


def _field(buf: BytesLike, end: int, table: tuple[int, int, int], slot: int) -> int:
    """Absolute position of a table field's data; 0 when the field is absent (default)."""
    pos, vtable, size = table
    entry = 4 + 2 * slot
    if entry + 2 > size:
        return 0
    offset = _read(_U16, buf, end, vtable + entry)
    return pos + offset if offset else 0


def _scalar(
    buf: BytesLike, end: int, table: tuple[int, int, int], slot: int, fmt: struct.Struct, default: int = 0
) -> int:
    pos = _field(buf, end, table, slot)
    return _read(fmt, buf, end, pos) if pos else default


def _target(buf: BytesLike, end: int, table: tuple[int, int, int], slot: int) -> int:
    """Position an offset field points to (a table or a vector); 0 when absent."""
    pos = _field(buf, end, table, slot)
    return pos + _read(_U32, buf, end, pos) if pos else 0


def _struct_vector(buf: BytesLike, end: int, pos: int, width: int) -> tuple[int, int]:
    """(count, first element position) of a vector of fixed-size structs."""
    if not pos:
        return 0, 0
    count = _read(_U32, buf, end, pos)
    if pos + 4 + count * width > end:
        raise CorruptMetadataError("vector runs past the end of the metadata")
    return count, pos + 4


def _message_header(buf: BytesLike, end: int) -> tuple[int, tuple[int, int, int], int]:
    """(header type, header table, bodyLength) of a Message flatbuffer."""
    message = _table(buf, end, _read(_U32, buf, end, 0))
    header_type = _scalar(buf, end, message, 1, _U8)
    header_pos = _target(buf, end, message, 2)
    body_length = _scalar(buf, end, message, 3, _I64)
    if not header_pos:
        raise CorruptMetadataError("message has no header")
    return header_type, _table(buf, end, header_pos), body_length


def rows_claimed(buf: BytesLike) -> int:
    """``count_rows`` without its catch-all: the rows the stream's record batches claim, 1
    when it cannot be framed or claims too many; may raise on unreadable metadata."""
    end = len(buf)
    pos = 0
    rows = 0
    messages = 0
    while pos + 4 <= end:
        length = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if length == _CONTINUATION:
            if pos + 4 > end:
                return 1
            length = _U32.unpack_from(buf, pos)[0]
            pos += 4
        if length == 0:  # end-of-stream marker
            break
        if length > 0x7FFFFFFF or pos + length > end:
            return 1
        metadata = memoryview(buf)[pos : pos + length]
        header_type, header, body_length = _message_header(metadata, length)
        if body_length < 0 or (messages == 0 and header_type != _SCHEMA):
            return 1
        if header_type == _RECORD_BATCH:
            batch_rows = _scalar(metadata, length, header, 0, _I64)
            if batch_rows < 0:
                return 1
            rows += batch_rows
            if rows > MAX_ROWS:
                return 1
        messages += 1
        if messages > MAX_IPC_MESSAGES:
            return 1
        pos += length + body_length
        if pos > end:
            return 1
    if messages == 0:
        return 1
    return max(1, rows)


def check_stream(buffer: pa.Buffer, max_rows: int, max_body_bytes: int) -> None:
    """Step 1: every IPC message's metadata checked (see ``guard``), nothing
    decompressed; ``MalformedArrowError`` or ``CorruptMetadataError`` for a bad one."""
    reader = pa.ipc.MessageReader.open_stream(buffer)
    rows = 0
    body_bytes = 0
    count = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        count += 1
        if count > MAX_IPC_MESSAGES:
            raise MalformedArrowError(f"more than {MAX_IPC_MESSAGES} IPC messages in one message")
        metadata = message.metadata
        end = metadata.size
        header_type, header, _ = _message_header(metadata, end)
        if count == 1:
            if header_type != _SCHEMA:
                raise MalformedArrowError("the IPC stream does not start with a schema")
            if _scalar(metadata, end, header, 0, _I16) != 0:
                raise MalformedArrowError("big-endian Arrow data is not accepted; send little-endian")
            continue
        if header_type == _RECORD_BATCH:
            batch_rows, decompressed = _check_batch(metadata, end, header, message.body, max_rows, max_body_bytes)
            rows += batch_rows
            if rows > max_rows:
                raise MalformedArrowError(f"the message holds more than {max_rows:,} rows (the limit per message)")
        elif header_type == _DICTIONARY_BATCH:
            data = _target(metadata, end, header, 1)
            if not data:
                raise MalformedArrowError("dictionary batch without data")
            _, decompressed = _check_batch(
                metadata, end, _table(metadata, end, data), message.body, max_rows, max_body_bytes
            )
        else:
            raise MalformedArrowError(f"unexpected IPC message type {message.type!r} after the schema")
        body_bytes += decompressed
        if body_bytes > max_body_bytes:
            raise MalformedArrowError(
                f"the message's buffers take more than {max_body_bytes:,} bytes decompressed (the limit per message)"
            )
    if count == 0:
        raise MalformedArrowError("empty IPC stream")


def _check_batch(
    metadata: pa.Buffer,
    end: int,
    batch: tuple[int, int, int],
    body: pa.Buffer | None,
    max_rows: int,
    max_body_bytes: int,
) -> tuple[int, int]:
    """(rows, decompressed bytes) of one RecordBatch table, after checking it."""
    length = _scalar(metadata, end, batch, 0, _I64)
    if length < 0 or length > max_rows:
        raise MalformedArrowError(f"a batch claims {length:,} rows (at most {max_rows:,} per message)")
    body_size = 0 if body is None else body.size
    n_nodes, nodes_at = _struct_vector(metadata, end, _target(metadata, end, batch, 1), 16)
    if n_nodes:
        lengths, null_counts = _int64_pairs(metadata, nodes_at, n_nodes)
        if _smallest(lengths) < 0 or _smallest(null_counts) < 0:
            raise MalformedArrowError("negative length or null count in the field metadata")
    n_buffers, buffers_at = _struct_vector(metadata, end, _target(metadata, end, batch, 2), 16)
    if not n_buffers:
        return length, 0
    offsets, lengths = _int64_pairs(metadata, buffers_at, n_buffers)
    if _smallest(offsets) < 0 or _smallest(lengths) < 0 or _exceeds(offsets, lengths, body_size):
        raise MalformedArrowError(f"a buffer lies outside the {body_size:,}-byte message body")
    compression_at = _target(metadata, end, batch, 3)
    if not compression_at:
        return length, _total(lengths)
    compression = _table(metadata, end, compression_at)
    codec = _scalar(metadata, end, compression, 0, _U8)
    method = _scalar(metadata, end, compression, 1, _U8)
    if codec not in _CODECS or method != 0:
        raise MalformedArrowError(f"unsupported body compression (codec {codec}, method {method})")
    sizes: np.ndarray | list[int]
    if isinstance(lengths, np.ndarray):
        sizes = _compressed_sizes_np(body, cast(np.ndarray, offsets), lengths)
    else:
        sizes = []
        # a buffer with a size lies within the body (``_exceeds`` above): there is a body then
        data = body if body is not None else b""
        for offset, size in zip(offsets, lengths):
            if size:
                if size < 8:
                    raise MalformedArrowError("a compressed buffer is shorter than its 8-byte length prefix")
                claimed = _I64.unpack_from(data, offset)[0]
                sizes.append(size - 8 if claimed == -1 else claimed)
    if not len(sizes):
        return length, 0
    if _smallest(sizes) < 0:
        raise MalformedArrowError("a compressed buffer claims a negative uncompressed length")
    largest = int(sizes.max()) if isinstance(sizes, np.ndarray) else max(sizes)
    if largest > max_body_bytes:
        raise MalformedArrowError(
            f"a compressed buffer claims {largest:,} bytes decompressed (at most {max_body_bytes:,} per message)"
        )
    return length, _total(sizes)  # no overflow: each <= max_body_bytes, fewer than 2**28 of them


def _int64_pairs(buf: BytesLike, at: int, count: int) -> tuple[Ints, Ints]:
    """The ``count`` (first, second) int64 pairs at ``at`` (bounds already checked): tuples
    for the usual few (numpy costs microseconds per call), numpy arrays for many."""
    if count <= 64:
        values = struct.unpack_from(f"<{2 * count}q", buf, at)
        return values[0::2], values[1::2]
    array = np.frombuffer(buf, dtype="<i8", count=2 * count, offset=at)
    return array[0::2], array[1::2]


def _smallest(values: Ints | list[int]) -> int:
    return int(values.min()) if isinstance(values, np.ndarray) else min(values)


def _total(values: Ints | list[int]) -> int:
    return int(values.sum()) if isinstance(values, np.ndarray) else sum(values)


def _exceeds(offsets: Ints, lengths: Ints, size: int) -> bool:
    """Whether any span (offsets >= 0, lengths >= 0) ends past ``size``."""
    if isinstance(offsets, np.ndarray):  # (both arrays, or both tuples: ``_int64_pairs``)
        return bool((lengths > size - offsets).any())
    return any(n > size - o for o, n in zip(offsets, lengths))


def _compressed_sizes_np(body: pa.Buffer, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    used = lengths > 0
    if (lengths[used] < 8).any():
        raise MalformedArrowError("a compressed buffer is shorter than its 8-byte length prefix")
    starts = offsets[used]
    if not starts.size:
        return starts
    raw = np.frombuffer(body, dtype=np.uint8)
    prefixes = raw[starts[:, None] + np.arange(8)].copy().view("<i8").ravel()
    prefixes[prefixes == -1] = lengths[used][prefixes == -1] - 8
    return cast(np.ndarray, prefixes)


def message_layout(message: bytes) -> list[dict[str, Any]]:
    """Where the metadata fields of each IPC message of ``message`` (an Arrow stream) are,
    for fuzzers and tests that rewrite them: per message ``type`` (1 schema, 2 dictionary
    batch, 3 record batch), ``meta`` and ``body`` (positions), and for batches
    ``length_at`` (the row count), ``nodes`` and ``buffers`` (positions of the field nodes
    and ``(position, offset, length)`` of the buffer entries) and ``compressed``; for a
    schema, ``table`` (its flatbuffer table: position, vtable, size, relative to ``meta``)
    and ``fields_at`` (its ``fields`` vector, relative to ``meta``). It stops at the first
    message it cannot walk; it validates nothing (``check_stream`` does)."""
    out: list[dict[str, Any]] = []
    pos = 0
    end = len(message)
    while pos + 8 <= end:
        length = struct.unpack_from("<I", message, pos)[0]
        pos += 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from("<I", message, pos)[0]
            pos += 4
        if length == 0 or pos + length > end:
            break
        meta = memoryview(message)[pos : pos + length]
        header_type, header, body_length = _message_header(meta, length)
        body = pos + length
        entry: dict[str, Any] = {"type": header_type, "body": body, "meta": pos}
        batch: tuple[int, int, int] | None = header
        if header_type == 1:
            entry["table"] = header
            entry["fields_at"] = _target(meta, length, header, 1)
        if header_type == 2:
            data = _target(meta, length, header, 1)
            batch = _table(meta, length, data) if data else None
        if header_type in (2, 3) and batch:
            entry["length_at"] = _field(meta, length, batch, 0)
            count, at = _struct_vector(meta, length, _target(meta, length, batch, 1), 16)
            entry["nodes"] = [pos + at + 16 * i for i in range(count)]
            count, at = _struct_vector(meta, length, _target(meta, length, batch, 2), 16)
            entry["buffers"] = [
                (pos + at + 16 * i, *struct.unpack_from("<qq", meta, at + 16 * i)) for i in range(count)
            ]
            entry["compressed"] = bool(_target(meta, length, batch, 3))
        out.append(entry)
        pos = body + body_length
    return out
