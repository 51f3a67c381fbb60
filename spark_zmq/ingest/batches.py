"""Received messages as spool batches: the conversion a receiver runs on every batch it
appends (and the bounded read, ``source.batch``, on the messages it holds).

Why apart from ``spool_format``: that module is the bytes on disk, shared with the read
tasks; this is the receiver's hot path, and it builds a batch of ``SPOOL_SCHEMA`` columns
over the received buffers with no step per message (an Arrow message's row count aside).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TypeAlias, cast

import numpy as np
import pyarrow as pa

from ..arrow import guard as arrow_guard
from ..patterns.message_block import MessageBlock
from .spool_format import SPOOL_SCHEMA

__all__ = ["messages_to_batch", "block_to_batch"]

#: a message payload or topic as the receiver has it
BytesLike: TypeAlias = bytes | bytearray | memoryview


def _binary_array(values: Sequence[BytesLike | None], arrow_type: pa.DataType) -> pa.Array:
    """``values`` (bytes-like, or ``None`` for null) as one array of ``arrow_type`` (a
    binary or string type): their bytes joined once, the offsets summed from their lengths.

    Why not ``pa.array``: the first time it runs in a process it imports pandas, to check
    whether its argument is a pandas object: a third of a second of CPU at a receiving
    process's first batch (relay children included), and 38 MiB of memory for the life of
    each. It also copies value by value, where this copies the bytes once: slower by about
    10 ns a message at 100 B, faster from about 1 KB (3.5x at the Arrow scenario's 370 KB).
    """
    n = len(values)
    validity = None
    if None in values:
        valid = np.fromiter((v is not None for v in values), np.bool_, n)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
        values = [b"" if v is None else v for v in values]
    filled = cast("Sequence[BytesLike]", values)  # no None left
    wide = arrow_type in (pa.large_binary(), pa.large_string())
    offsets = np.zeros(n + 1, np.int64 if wide else np.int32)
    np.cumsum(np.fromiter(map(len, filled), offsets.dtype, n), out=offsets[1:])
    return pa.Array.from_buffers(arrow_type, n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(filled))])


def _decode_topics(topics: list[bytes | None]) -> pa.Array:
    array = _binary_array(topics, pa.binary())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return _binary_array(
            [None if t is None else t.decode("utf-8", "replace").encode("utf-8") for t in topics], pa.string()
        )


def _arrow_rows(value: bytes) -> int:
    # metadata only, never raises: a corrupt message counts 1 row; the decoder reports it
    return arrow_guard.count_rows(value)


def messages_to_batch(
    values: list[bytes], topics: list[bytes | None] | None, fmt: str, received_us: int
) -> pa.RecordBatch:
    """Turn received messages (as ``PatternSocket.recv_values`` returns them) into one
    spool batch. ``topics`` is ``None`` when every message had a single frame."""
    return block_to_batch(MessageBlock.from_values(values, topics), fmt, received_us)


def block_to_batch(block: MessageBlock, fmt: str, received_us: int) -> pa.RecordBatch:
    """One spool batch of received messages (``recv_block``): the value column is the
    block's buffer and offsets as they are, with no step per message (``raw``, ``text``,
    ``json``); an Arrow message's row count is read from its metadata, one by one."""
    n = block.count
    topics = block.topics
    topic_array = pa.nulls(n, pa.string()) if topics is None else _decode_topics(topics)
    values = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(block.offsets), pa.py_buffer(block.data)])
    if fmt == "arrow":
        counts = np.fromiter(map(_arrow_rows, block.values()), np.int32, n)
        rows = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(counts)])
    else:
        rows = pa.Array.from_buffers(pa.int32(), n, [None, _ones(n)])
    # every message of a batch has the same receive time: one 8-byte value repeated
    timestamps = pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(_INT64.pack(received_us) * n)])
    return pa.RecordBatch.from_arrays([values, topic_array, timestamps, rows], schema=SPOOL_SCHEMA)


_TIMESTAMP = SPOOL_SCHEMA.field("timestamp").type
_INT64 = struct.Struct("<q")
_ONES = pa.py_buffer(np.ones(1 << 14, dtype=np.int32))


def _ones(n: int) -> pa.Buffer:
    """An int32 buffer of at least ``n`` ones (the rows column of one-row messages). Why
    shared: at a modest rate a receiver writes small batches often, and building the
    constant columns cost it more than the messages (Arrow arrays over it are immutable)."""
    global _ONES
    ones = _ONES  # (receivers on several threads: each returns the buffer it checked)
    if n > len(ones) // 4:
        ones = _ONES = pa.py_buffer(np.ones(max(n, len(ones) // 2), dtype=np.int32))
    return ones
