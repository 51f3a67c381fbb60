"""Turn spooled messages into the Arrow record batches Spark receives (executor side).

Decoding happens in the read tasks, not in the receivers, so it runs in parallel on the
executors and the receivers only move bytes. Every output batch has exactly the Arrow
schema Spark derives from the DataFrame's schema (``to_arrow_schema``), which pyspark
checks before it accepts batches from ``read()``.

Malformed input follows Spark's JSON reader conventions (``mode``):
PERMISSIVE keeps the row (fields null, the raw text in ``columnNameOfCorruptRecord`` when
the schema has that column), DROPMALFORMED drops it, FAILFAST fails the query with the
message's channel, offset and a prefix of its content.
"""

from __future__ import annotations

import io
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from pyspark.sql.types import StructType

from ..schemas import arrow_schema

__all__ = ["Decoder", "MalformedMessageError"]

# Spark hands Arrow batches to the JVM; keep each under this many payload bytes.
_MAX_OUTPUT_BATCH_BYTES = 64 << 20


class MalformedMessageError(ValueError):
    """A message does not parse in the declared format/schema (mode FAILFAST)."""


def _preview(value: bytes, limit: int = 120) -> str:
    text = bytes(value[:limit]).decode("utf-8", "replace")
    return text + ("..." if len(value) > limit else "")


class Decoder:
    """Decode spool batches of one channel in one format into the output schema."""

    def __init__(self, fmt: str, schema: StructType, *, mode: str = "PERMISSIVE", corrupt_column: Optional[str] = None,
                 max_message_bytes: int = 64 << 20) -> None:
        self.max_message_bytes = max_message_bytes
        self.fmt = fmt
        self.schema = schema
        self.target = arrow_schema(schema)
        self.mode = mode
        self.corrupt_column = corrupt_column if corrupt_column and corrupt_column in schema.fieldNames() else None
        if fmt == "json":
            data_fields = [f for f in self.target if f.name != self.corrupt_column]
            self._json_schema = pa.schema(data_fields)
            self._json_options = pa_json.ParseOptions(
                explicit_schema=self._json_schema, unexpected_field_behavior="ignore", newlines_in_values=True
            )
        self.malformed = 0

    def decode(self, batch: pa.RecordBatch, channel: int, first_offset: int) -> Iterator[pa.RecordBatch]:
        if batch.num_rows == 0:
            return
        if self.fmt in ("raw", "text"):
            yield from self._decode_columns(batch, channel, first_offset)
        elif self.fmt == "json":
            yield from self._decode_json(batch, channel, first_offset)
        else:
            yield from self._decode_arrow(batch, channel, first_offset)

    # -- raw / text ----------------------------------------------------------------------

    def _decode_columns(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        n = batch.num_rows
        values = batch.column(0)
        if self.fmt == "text":
            try:
                value = values.cast(pa.large_string())
            except pa.ArrowInvalid:  # invalid UTF-8: replace, as Spark's decode does
                value = pa.array([None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()], pa.large_string())
        else:
            value = values
        columns = {
            "value": value,
            "topic": batch.column(1),
            "partition": pa.array(np.full(n, channel, dtype=np.int32)),
            "offset": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "timestamp": batch.column(2),
        }
        arrays = []
        for field in self.target:
            if field.name not in columns:
                raise ValueError(
                    f"column {field.name!r} is not produced by format {self.fmt!r}; "
                    f"its columns are {', '.join(columns)}"
                )
            arrays.append(columns[field.name].cast(field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=self.target)

    # -- json ------------------------------------------------------------------------------

    def _malformed(self, channel: int, offset: int, value: bytes, reason: str) -> None:
        self.malformed += 1
        if self.mode == "FAILFAST":
            raise MalformedMessageError(
                f"malformed {self.fmt} message at channel {channel}, offset {offset} "
                f"(mode=FAILFAST): {reason}; message starts {_preview(value)!r}"
            )

    def _finish_json(self, table: pa.Table, corrupt: Optional[list]) -> pa.RecordBatch:
        arrays = []
        for field in self.target:
            if field.name == self.corrupt_column:
                arrays.append(pa.array(corrupt if corrupt is not None else [None] * table.num_rows, field.type))
            else:
                arrays.append(table.column(field.name).combine_chunks().cast(field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    def _decode_json(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        values = batch.column(0).to_pylist()
        try:
            # Fast path: the whole batch as newline-delimited JSON, parsed in C++.
            if any(b"\n" in v or not v.strip() for v in values):
                raise pa.ArrowInvalid("needs per-message parsing")
            table = pa_json.read_json(io.BytesIO(b"\n".join(values)), parse_options=self._json_options)
            if table.num_rows != len(values):
                raise pa.ArrowInvalid("row count differs from message count")
        except pa.ArrowInvalid:
            yield from self._decode_json_slowly(values, channel, first)
            return
        yield self._finish_json(table, None)

    def _decode_json_slowly(self, values: list, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        """One message at a time, to tell the malformed ones apart."""
        tables: list[pa.Table] = []
        corrupt: list = []
        null_row = pa.table({f.name: pa.nulls(1, f.type) for f in self._json_schema}, schema=self._json_schema)
        for i, value in enumerate(values):
            try:
                if not value.strip().startswith(b"{"):
                    raise pa.ArrowInvalid("not a JSON object")
                table = pa_json.read_json(io.BytesIO(value), parse_options=self._json_options)
                if table.num_rows != 1:
                    raise pa.ArrowInvalid(f"{table.num_rows} JSON values in one message, expected 1")
                tables.append(table.select(self._json_schema.names).cast(self._json_schema))
                corrupt.append(None)
            except pa.ArrowInvalid as exc:
                self._malformed(channel, first + i, value, str(exc).splitlines()[0])
                if self.mode == "PERMISSIVE":
                    tables.append(null_row)
                    corrupt.append(value.decode("utf-8", "replace"))
        if tables:
            yield self._finish_json(pa.concat_tables(tables), corrupt)

    # -- arrow -----------------------------------------------------------------------------

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        missing = [name for name in self.target.names if name not in batch.schema.names]
        if missing:
            raise pa.ArrowInvalid(
                f"columns {missing} of the declared schema are missing (message has {batch.schema.names})"
            )
        arrays = [batch.column(name).cast(field.type) for name, field in zip(self.target.names, self.target)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.target)

    def _decode_arrow(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        values = batch.column(0)
        for i in range(len(values)):
            buffer = values[i].as_buffer()
            try:
                reader = pa.ipc.open_stream(buffer)
                decoded = [self._conform(b) for b in reader]
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError) as exc:
                # Arrow has no corrupt-record column to fall back on: anything but
                # DROPMALFORMED fails, so a schema mismatch is never silently nulled.
                self.malformed += 1
                if self.mode == "DROPMALFORMED":
                    continue
                raise MalformedMessageError(
                    f"arrow message at channel {channel}, offset {first + i} cannot be read as the "
                    f"declared schema ({self.target.to_string(show_schema_metadata=False).replace(chr(10), ', ')}): "
                    f"{str(exc).splitlines()[0]}. Set mode=DROPMALFORMED to skip such messages."
                ) from None
            for out in decoded:
                if out.num_rows:
                    yield out
