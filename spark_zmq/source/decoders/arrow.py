"""Format ``arrow``: each message one Arrow IPC stream of one or more batches, read as
the declared columns.

Every message goes through ``arrow_guard.read_batches`` (caps checked from the metadata
before decompression, full validation, bounded casts). Arrow has no corrupt-record
column, so PERMISSIVE fails like FAILFAST: a schema mismatch is never silently nulled.
With ``includeHeaders`` the declared ``headers map<string,string>`` column is not read
from the message but built from its schema's custom metadata (``headers.py``); since the
metadata repeats on every row, rows x its bytes are capped like decompressed buffers, at
``max_body_bytes`` per message, and a message over the cap is malformed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from ...arrow import guard as arrow_guard
from . import base
from .base import Decoder, MalformedMessageError
from .headers import Headers, headers_column, headers_template

__all__ = ["ArrowDecoder"]


class ArrowDecoder(Decoder):
    """``arrow``: the declared columns, each message's batches cast to them (bounded)."""

    fmt = "arrow"

    def __init__(self, schema: StructType, **settings: Any) -> None:
        super().__init__(schema, **settings)
        # includeHeaders: where the headers column goes, and the columns read from messages
        self.headers_at: int | None = self.layout.headers_at
        self.headers_type: pa.DataType | None = self.layout.headers_type
        self.message_target: pa.Schema | None = self.layout.message_target
        # decompressed bytes one message may take (and its casts may allocate)
        self.max_body_bytes = min(arrow_guard.MAX_DECOMPRESSED_BYTES, 16 * self.max_message_bytes)

    def _messages(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[tuple[pa.RecordBatch, int]]:
        """Each message's output batches, with the message's index in ``batch``."""
        values = batch.column(0)
        # each message as a zero-copy slice of the column's data: ``values[i].as_buffer()``
        # copies the message into a scalar first (7% of a read task's samples at 370 KB)
        offsets, _ = base._offsets_and_data(values)
        data = values.buffers()[2]
        valid = None if values.null_count == 0 else values.is_valid().to_numpy(zero_copy_only=False)
        for i in range(len(values)):
            headers: Headers | None = None
            try:
                if valid is not None and not valid[i]:
                    raise arrow_guard.MalformedArrowError("null message")
                start = int(offsets[i])
                message = data.slice(start, int(offsets[i + 1]) - start) if data is not None else pa.py_buffer(b"")
                if self.headers_at is None:
                    decoded = arrow_guard.read_batches(message, schema=self.target, max_body_bytes=self.max_body_bytes)
                else:
                    decoded, headers = self._read_with_headers(message)
            except arrow_guard.MalformedArrowError as exc:
                # Arrow has no corrupt-record column to fall back on: anything but
                # DROPMALFORMED fails, so a schema mismatch is never silently nulled.
                self.malformed += 1
                if self.mode == "DROPMALFORMED":
                    continue
                raise MalformedMessageError(
                    f"arrow message at channel {channel}, offset {first + i} cannot be read as the "
                    f"declared schema ({self.target.to_string(show_schema_metadata=False).replace(chr(10), ', ')}): "
                    f"{exc}. Set mode=DROPMALFORMED to skip such messages.",
                    channel,
                    first + i,
                ) from None
            if headers is not None:
                for out in self._with_headers(decoded, headers):
                    yield out, i
                continue
            for out in decoded:
                if not out.num_rows:
                    continue
                size = out.nbytes
                if size <= base._MAX_OUTPUT_BATCH_BYTES:
                    yield out, i
                    continue
                step = max(1, out.num_rows * base._MAX_OUTPUT_BATCH_BYTES // size)
                for start in range(0, out.num_rows, step):
                    yield out.slice(start, step), i

    def _read_with_headers(self, buffer: pa.Buffer) -> tuple[list[pa.RecordBatch], Headers]:
        """The message's batches (the declared columns but ``headers``) and its headers,
        checked: the metadata copied onto every row (rows x its bytes) is capped like the
        message's decompressed buffers. The row key's part is not counted: rows are
        capped already (``arrow_guard.MAX_ROWS``), and a message without metadata never
        becomes malformed because of includeHeaders."""
        message = arrow_guard.read_message(buffer, schema=self.message_target, max_body_bytes=self.max_body_bytes)
        headers = headers_template(message.metadata)
        rows = sum(b.num_rows for b in message.batches)
        total = rows * headers.metadata_bytes
        if total > self.max_body_bytes:
            raise arrow_guard.MalformedArrowError(
                f"its headers column would copy about {total:,} bytes of metadata ({len(headers.keys):,} entries, "
                f"{headers.metadata_bytes:,} bytes, onto each of {rows:,} rows), more than the "
                f"{self.max_body_bytes:,} bytes a message may (includeHeaders)"
            )
        return message.batches, headers

    def _with_headers(self, decoded: list[pa.RecordBatch], headers: Headers) -> Iterator[pa.RecordBatch]:
        """Output batches of one message with its headers column inserted, each at most
        about ``_MAX_OUTPUT_BATCH_BYTES``; ``spark_zmq.row`` counts across its batches."""
        headers_at = self.headers_at
        assert headers_at is not None  # only a reader with a headers column reads headers
        position = 0
        for out in decoded:
            rows = out.num_rows
            if not rows:
                continue
            data = [] if self.message_target is None else out.columns
            size = (out.nbytes if data else 0) + rows * headers.row_bytes
            step = rows if size <= base._MAX_OUTPUT_BATCH_BYTES else max(1, rows * base._MAX_OUTPUT_BATCH_BYTES // size)
            for start in range(0, rows, step):
                n = min(step, rows - start)
                arrays = [column.slice(start, n) for column in data]
                arrays.insert(headers_at, headers_column(headers, position + start, n, self.headers_type))
                yield pa.RecordBatch.from_arrays(arrays, schema=self.target)
            position += rows
