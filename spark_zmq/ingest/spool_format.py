"""The spool's on-disk format, shared by the driver-side log and the executor-side reader.

Why a format of our own around Arrow: the spool is the only copy of a received message
until Spark commits past it, so a reader must be able to tell a complete batch from a
torn or corrupted one, and must never have to *infer* a message's offset from how many
readable batches precede it (one unreadable batch would renumber everything after it).
Kafka's log answers both with a record-batch header carrying the base offset, the length
and a CRC; this is the same idea, with the batch itself an Arrow IPC message so that
readers map it zero-copy.

A channel's spool is a directory of segment files ``<first offset:020d>-<seq:010d>.seg``.
``seq`` grows by one for every segment a channel ever creates, so a name is never reused,
even for two segments that start at the same offset (an empty segment left by a roll or a
crash, then the segment written after the restart). A segment is::

    segment header (64 bytes): magic "ZMQSPOOL", version, channel, first offset, seq,
                               spool id (16 bytes), CRC-32 of the header
    record*:  record header (40 bytes): magic "ZSPB", version, first offset, message count,
                                        body length, checksum of the body, CRC-32 of the header
              body: one Arrow IPC record batch message (8-byte aligned) of SPOOL_SCHEMA

The body's checksum is XXH3-64 in version 2 (what this version writes) and was CRC-32 in
version 1 (still read, so a spool left by an older version drains after an upgrade). Why
the change: the body checksum is computed by the receiver and again by every read task,
over every byte received; zlib's CRC-32 runs at about 5 GB/s here and took a sixth of
a receiving thread's samples at 1 KB messages, XXH3 runs at about 25 GB/s. Headers keep
CRC-32: they are 36 bytes, and the spool-seeded header checksum is what recovery trusts
when it resynchronises after damage.

Every record names its own offsets, so a record that cannot be read (torn tail, flipped
bits) is a *gap* between its neighbours' offsets, never a shift. The spool id in every
segment header lets a reader check that it reads the spool a batch was planned on, not a
recreated directory of the same name.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
import xxhash

from ..errors import SparkZmqError

__all__ = [
    "SPOOL_SCHEMA",
    "SpoolFormatError",
    "SegmentHeader",
    "Record",
    "encode_segment_header",
    "decode_segment_header",
    "encode_record_header",
    "RecordEncoder",
    "scan_records",
    "map_segment",
    "SEGMENT_HEADER_SIZE",
    "RECORD_HEADER_SIZE",
    "checksum",
    "body_checksum",
    "open_private",
    "header_seed",
    "read_body",
]

#: what pyarrow's IPC writer hands ``_Pieces``: a ``pa.Buffer`` view of a batch's memory, or bytes
Piece: TypeAlias = bytes | pa.Buffer

SPOOL_SCHEMA = pa.schema(
    [
        ("value", pa.large_binary()),
        ("topic", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("rows", pa.int32()),
    ]
)


_SEGMENT_MAGIC = b"ZMQSPOOL"
_RECORD_MAGIC = b"ZSPB"
#: the format this version writes (segment headers and records)
_VERSION = 2
#: the formats it reads: 1 differs only in the body's checksum (CRC-32, 4 bytes)
_READABLE_VERSIONS = (1, 2)
# magic, version, channel, first offset, seq, spool id, header crc (+ padding to 64)
_SEGMENT_HEADER = struct.Struct("<8sIIqQ16sI")
SEGMENT_HEADER_SIZE = 64
# magic and version, then by version: flags, first offset, count, body length, body
# checksum, header crc (version 1: + 4 bytes of padding to 40)
_RECORD_PREFIX = struct.Struct("<4sH")
_RECORD_HEADERS = {1: struct.Struct("<4sHHqIQII"), 2: struct.Struct("<4sHHqIQQI")}
_RECORD_HEADER = _RECORD_HEADERS[_VERSION]
RECORD_HEADER_SIZE = 40

#: the checksum of segment and record headers (zlib's CRC-32, seeded per spool for records)
checksum = zlib.crc32
#: the checksum of a record's body, by record version
_BODY_CHECKSUMS = {1: zlib.crc32, 2: xxhash.xxh3_64_intdigest}
body_checksum = _BODY_CHECKSUMS[_VERSION]


class SpoolFormatError(SparkZmqError, ValueError):
    """A segment file is not a spool segment (wrong magic, version or header checksum)."""


@dataclass(frozen=True)
class SegmentHeader:
    channel: int
    first: int
    seq: int
    spool_id: bytes  # 16 bytes


def encode_segment_header(header: SegmentHeader) -> bytes:
    body = _SEGMENT_HEADER.pack(_SEGMENT_MAGIC, _VERSION, header.channel, header.first, header.seq, header.spool_id, 0)
    crc = checksum(body[: _SEGMENT_HEADER.size - 4])
    packed = body[: _SEGMENT_HEADER.size - 4] + struct.pack("<I", crc)
    return packed.ljust(SEGMENT_HEADER_SIZE, b"\0")


def decode_segment_header(data: bytes | memoryview) -> SegmentHeader:
    if len(data) < SEGMENT_HEADER_SIZE:
        raise SpoolFormatError("the segment is shorter than its header")
    magic, version, channel, first, seq, spool_id, crc = _SEGMENT_HEADER.unpack_from(data, 0)
    if magic != _SEGMENT_MAGIC:
        raise SpoolFormatError("not a spool segment (bad magic)")
    if checksum(bytes(data[: _SEGMENT_HEADER.size - 4])) != crc:
        raise SpoolFormatError("the segment header's checksum does not match")
    if version not in _READABLE_VERSIONS:
        raise SpoolFormatError(
            f"segment format version {version} is not supported (this version reads "
            f"{' and '.join(map(str, _READABLE_VERSIONS))})"
        )
    return SegmentHeader(channel, first, seq, spool_id)


def header_seed(spool_id: bytes) -> int:
    """The starting value of record-header checksums: derived from the spool id, which no
    network peer knows, so bytes inside a message that imitate a record header never pass
    for one when recovery resynchronises after damage."""
    return checksum(b"spark-zmq record header " + spool_id)


def encode_record_header(first: int, count: int, body: pa.Buffer, seed: int = 0) -> bytes:
    """The header of a record whose body is ``body`` (a batch's serialised IPC message)."""
    return _record_header(first, count, body.size, body_checksum(body), seed)


def _record_header(first: int, count: int, size: int, body_sum: int, seed: int) -> bytes:
    head = _RECORD_HEADER.pack(_RECORD_MAGIC, _VERSION, 0, first, count, size, body_sum, 0)
    crc = checksum(head[: _RECORD_HEADER.size - 4], seed)
    return (head[: _RECORD_HEADER.size - 4] + struct.pack("<I", crc)).ljust(RECORD_HEADER_SIZE, b"\0")


class _Pieces:
    """A write-only file for pyarrow's IPC writer that keeps what it is given. pyarrow
    hands a batch's buffers to a Python file as ``pa.Buffer`` views of the batch's own
    memory (no copy) and the framing (marker, length, metadata, padding) as bytes."""

    closed = False

    def __init__(self) -> None:
        self.pieces: list[Piece] = []

    def write(self, data: Piece) -> int:
        self.pieces.append(data)
        return len(data)

    def flush(self) -> None:
        pass


class RecordEncoder:
    """A spool batch as a record, ``[header, *body pieces]``, for one ``writev``: the body
    is the bytes ``RecordBatch.serialize()`` returns, but left in place as pyarrow's IPC
    writer produces them instead of copied into one buffer.

    Why: ``serialize`` copies every byte of the batch once more, after ``recv`` and the
    column's join and before the write's own copy into the page cache: 12% of a
    receiving thread's samples with 370 KB Arrow messages. One stream writer is kept for
    the log's life: it writes the schema once (on the first batch, here at construction)
    and then nothing but each batch's message, since the spool schema has no
    dictionaries."""

    def __init__(self) -> None:
        self._sink = _Pieces()
        self._writer = pa.ipc.new_stream(pa.PythonFile(self._sink, mode="w"), SPOOL_SCHEMA)
        # the schema, once (an empty batch of nulls: ``from_pylist`` would import pandas)
        self._writer.write_batch(
            pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in SPOOL_SCHEMA], schema=SPOOL_SCHEMA)
        )
        self._sink.pieces.clear()

    def encode(self, first: int, batch: pa.RecordBatch, seed: int) -> tuple[list[Piece], int]:
        """``([header, *pieces], total bytes)`` of the record holding ``batch`` at ``first``."""
        sink = self._sink
        pieces: list[Piece] = []
        sink.pieces = pieces
        self._writer.write_batch(batch)
        sink.pieces = []  # the caller's list holds the batch's buffers, until its write
        hasher = xxhash.xxh3_64()  # ``body_checksum``, over the pieces
        size = 0
        for piece in pieces:
            hasher.update(piece)
            size += len(piece)
        if size % 8 or bytes(pieces[0][:4]) != b"\xff\xff\xff\xff":
            raise AssertionError(f"pyarrow's IPC writer produced an unexpected message ({size} bytes)")
        return [
            _record_header(first, batch.num_rows, size, hasher.intdigest(), seed),
            *pieces,
        ], RECORD_HEADER_SIZE + size


@dataclass
class Record:
    """One spooled batch as found in a segment: where it is and what it claims."""

    position: int  # byte position of its header in the segment
    first: int
    count: int
    body_position: int
    body_size: int
    #: ``None`` for a readable record; else why it is unreadable (its offsets are then
    #: known only when its header was intact)
    damage: str | None = None

    @property
    def end(self) -> int:
        return self.first + self.count

    @property
    def next_position(self) -> int:
        return self.body_position + self.body_size


def _header_at(view: memoryview, position: int, seed: int) -> tuple[int, int, int, int, int] | None:
    """``(first, count, body size, body checksum, version)`` of a valid record header at
    ``position``."""
    if position + RECORD_HEADER_SIZE > len(view):
        return None
    magic, version = _RECORD_PREFIX.unpack_from(view, position)
    layout = _RECORD_HEADERS.get(version)
    if magic != _RECORD_MAGIC or layout is None:
        return None
    _magic, _version, _flags, first, count, size, body_sum, crc = layout.unpack_from(view, position)
    if checksum(view[position : position + layout.size - 4], seed) != crc:
        return None
    if first < 0 or size % 8:
        return None
    return first, count, size, body_sum, version


def scan_records(
    view: memoryview, position: int = SEGMENT_HEADER_SIZE, *, seed: int = 0, verify: bool = True
) -> Iterator[Record]:
    """The records of a mapped segment from byte ``position`` on (``seed``: ``header_seed``
    of the segment's spool).

    Yields a record with ``damage`` set for a body whose checksum fails (its header, and
    so its offsets, are intact) and, after bytes that are no record header, resumes at the
    next valid header. Bytes after the last complete record (a record torn by a crash, or
    damage nothing follows) end the scan with one record of ``first == -1`` and ``damage``
    saying where: for the newest segment that is an unfinished write, for an older one the
    offsets up to the next segment are lost.
    """
    size = len(view)
    while position < size:
        header = _header_at(view, position, seed)
        if header is None:
            # Not a record here: a corrupted header, or a torn one. Look for the next intact one.
            found = _resync(view, position + 1, seed)
            if found is None:
                yield Record(position, -1, 0, size, 0, damage=f"unreadable bytes {position}..{size} at the end")
                return
            yield Record(position, -1, 0, found, 0, damage=f"unreadable bytes {position}..{found}")
            position = found
            continue
        first, count, body_size, body_sum, version = header
        body_position = position + RECORD_HEADER_SIZE
        if body_position + body_size > size:
            # torn: the write of this record never completed
            yield Record(position, -1, 0, size, 0, damage=f"a record cut short at byte {position} (offsets {first}..)")
            return
        damage = None
        if verify and _BODY_CHECKSUMS[version](view[body_position : body_position + body_size]) != body_sum:
            damage = "checksum mismatch"
        yield Record(position, first, count, body_position, body_size, damage)
        position = body_position + body_size


def _resync(view: memoryview, start: int, seed: int) -> int | None:
    data = view.obj if isinstance(view.obj, (bytes, mmap.mmap)) else bytes(view)
    position = start
    while True:
        found = data.find(_RECORD_MAGIC, position)
        if found < 0 or found + RECORD_HEADER_SIZE > len(view):
            return None
        if found % 8 == 0 and _header_at(view, found, seed) is not None:
            return found
        position = found + 1


def open_private(path: str, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symlink planted at ``path``."""
    return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)


def map_segment(path: str) -> memoryview | None:
    """The segment file mapped read-only (``None`` if it is gone or empty)."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return memoryview(b"")
        return memoryview(mmap.mmap(fd, size, prot=mmap.PROT_READ))
    finally:
        os.close(fd)


def read_body(view: memoryview, record: Record) -> pa.RecordBatch:
    """The Arrow batch of a readable record, zero-copy from the mapping."""
    body = pa.py_buffer(view[record.body_position : record.body_position + record.body_size])
    batch = pa.ipc.read_record_batch(body, SPOOL_SCHEMA)
    if batch.num_rows != record.count:
        raise pa.ArrowInvalid(f"record claims {record.count} messages, its batch holds {batch.num_rows}")
    return batch
