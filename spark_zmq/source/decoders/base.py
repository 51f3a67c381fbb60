"""What every format's decoder shares: the errors, the output batch size, the
includeMetadata columns and the vectorised helpers over a spool batch's messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from ...errors import SparkZmqError
from ..schema_contract import read_layout

__all__ = ["Decoder", "DecodeError", "MalformedMessageError", "SchemaMismatchError"]

# Spark hands Arrow batches to the JVM; keep each under this many payload bytes.
_MAX_OUTPUT_BATCH_BYTES = 64 << 20


class DecodeError(SparkZmqError, ValueError):
    """A read task cannot turn its messages into rows (raised on executors, never for an
    option: those fail on the driver as ``OptionError``)."""


class MalformedMessageError(DecodeError):
    """A message does not parse in the declared format/schema (mode FAILFAST; arrow
    PERMISSIVE too). ``channel`` and ``offset`` locate the message."""

    def __init__(self, message: str, channel: int | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.channel = channel
        self.offset = offset

    def __reduce__(self) -> tuple:  # keeps channel and offset across pickling
        return type(self), (str(self), self.channel, self.offset)


class SchemaMismatchError(DecodeError):
    """The declared schema names a column the format does not produce (raw, text)."""


def _preview(value: bytes, limit: int = 120) -> str:
    text = bytes(value[:limit]).decode("utf-8", "replace")
    return text + ("..." if len(value) > limit else "")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _offsets_and_data(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The n+1 offsets (int64) and the data bytes of a binary/large_binary array."""
    buffers = values.buffers()
    dtype = np.int64 if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(buffers[1], dtype=dtype, count=values.offset + len(values) + 1)[values.offset :]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets.astype(np.int64, copy=False), data


def _slices(values: pa.Array, limit: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) whose payload is at most ``limit`` bytes (one row at least)."""
    n = len(values)
    offsets, _ = _offsets_and_data(values)
    if offsets[-1] - offsets[0] <= limit:
        return [(0, n)]
    ranges = []
    start = 0
    while start < n:
        stop = int(np.searchsorted(offsets, offsets[start] + limit, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        ranges.append((start, stop))
        start = stop
    return ranges


def _invalid_utf8(values: pa.Array) -> list[int]:
    """Indices of the messages that are not valid UTF-8, by bisecting Arrow's validation:
    O(k log n) C++ validations for k invalid messages, no Python per valid message."""
    text = pa.Array.from_buffers(
        pa.large_string() if pa.types.is_large_binary(values.type) else pa.string(),
        len(values),
        values.buffers(),
        offset=values.offset,
    )
    bad: list[int] = []
    stack = [(0, len(values))]
    while stack:
        lo, hi = stack.pop()
        try:
            text.slice(lo, hi - lo).validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        if hi - lo == 1:
            bad.append(lo)
        else:
            mid = (lo + hi) // 2
            stack.append((mid, hi))
            stack.append((lo, mid))
    return bad


#: which message of the piece each output row came from: one index for all, or one per row
RowsFrom = int | np.ndarray


class Decoder:
    """Decode spool batches of one channel in one format into the output schema.

    Spool batches (``ingest.spool_format.SPOOL_SCHEMA``: message, topic, timestamp) go
    in; Arrow batches of exactly ``target`` (or ``output`` with includeMetadata) come
    out. ``malformed`` counts the malformed messages met so far. A format's decoder
    implements ``_messages``, the rows of each piece with the message each came from;
    one whose rows are one per message in order (raw, text) may override
    ``_decode_piece`` instead.
    """

    fmt: ClassVar[str]

    def __init__(
        self,
        schema: StructType,
        *,
        mode: str = "PERMISSIVE",
        corrupt_column: str | None = None,
        max_message_bytes: int = 64 << 20,
        include_headers: bool = False,
        include_metadata: bool = False,
    ) -> None:
        layout = read_layout(
            self.fmt,
            schema,
            include_headers=include_headers,
            include_metadata=include_metadata,
            corrupt_column=corrupt_column,
        )
        self.layout = layout
        #: includeMetadata: the output schema (data columns + metadata); ``target`` and
        #: ``schema`` are then the data columns only, what the messages hold
        self.output: pa.Schema | None = layout.output
        self.schema: StructType = layout.schema
        self.target: pa.Schema = layout.target
        self.corrupt_column: str | None = layout.corrupt_column
        self.mode = mode
        self.max_message_bytes = max_message_bytes
        self.malformed = 0

    def decode(self, batch: pa.RecordBatch, channel: int, first_offset: int) -> Iterator[pa.RecordBatch]:
        """The output batches of one spool batch of ``channel`` whose first message is at
        ``first_offset``; each carries at most about ``_MAX_OUTPUT_BATCH_BYTES`` of
        message payload."""
        if batch.num_rows == 0:
            return
        for start, stop in _slices(batch.column(0), _MAX_OUTPUT_BATCH_BYTES):
            piece = batch if (start, stop) == (0, batch.num_rows) else batch.slice(start, stop - start)
            yield from self._decode_piece(piece, channel, first_offset + start)

    def _decode_piece(self, piece: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        decoded = self._messages(piece, channel, first)
        if self.output is None:
            for out, _ in decoded:
                yield out
        else:
            for out, rows_from in decoded:
                yield self._with_metadata(out, rows_from, piece, channel, first)

    def _messages(self, piece: pa.RecordBatch, channel: int, first: int) -> Iterator[tuple[pa.RecordBatch, RowsFrom]]:
        raise NotImplementedError

    def _with_metadata(
        self, out: pa.RecordBatch, rows_from: RowsFrom, piece: pa.RecordBatch, channel: int, first: int
    ) -> pa.RecordBatch:
        """``out`` with the includeMetadata columns appended: each row's message is
        ``rows_from`` (one message index for all rows, or one per row) within ``piece``."""
        n = out.num_rows
        index = np.full(n, rows_from, dtype=np.int64) if isinstance(rows_from, int) else rows_from
        taken = pa.array(index)
        columns = [
            piece.column(1).take(taken),
            pa.array(np.full(n, channel, dtype=np.int32)),
            pa.array(index + first),
            piece.column(2).take(taken),
        ]
        assert self.output is not None
        tail = self.output.types[-len(columns) :]
        arrays = out.columns + [column.cast(kind) for column, kind in zip(columns, tail)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.output)
