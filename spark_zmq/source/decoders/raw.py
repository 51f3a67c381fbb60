"""Formats ``raw`` and ``text``: one row per message, the message as it came (``raw``)
or as a string (``text``), with its topic, channel, offset and receive time.

Nothing in a message can be malformed here: invalid UTF-8 is replaced (U+FFFD) as Spark
does, and only the invalid messages, found by bisecting Arrow's UTF-8 validation, are
decoded in Python.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .base import Decoder, SchemaMismatchError, _invalid_utf8

__all__ = ["RawDecoder", "TextDecoder"]


class RawDecoder(Decoder):
    """``raw``: the fixed schema of ``sparkglue.schemas.fixed_schema('raw')``, ``value`` binary."""

    fmt = "raw"

    def _value(self, values: pa.Array) -> pa.Array:
        return values

    def _decode_piece(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        n = batch.num_rows
        columns = {
            "value": self._value(batch.column(0)),
            "topic": batch.column(1),
            "partition": pa.array(np.full(n, channel, dtype=np.int32)),
            "offset": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "timestamp": batch.column(2),
        }
        arrays = []
        for field in self.target:
            if field.name not in columns:
                raise SchemaMismatchError(
                    f"column {field.name!r} is not produced by format {self.fmt!r}; "
                    f"its columns are {', '.join(columns)}"
                )
            arrays.append(columns[field.name].cast(field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=self.target)


class TextDecoder(RawDecoder):
    """``text``: as ``raw``, ``value`` a string (``sparkglue.schemas.fixed_schema('text')``)."""

    fmt = "text"

    def _value(self, values: pa.Array) -> pa.Array:
        """Messages as strings; invalid UTF-8 replaced (U+FFFD) as Spark's decode does."""
        try:
            return values.cast(pa.large_string())
        except pa.ArrowInvalid:
            pass
        bad = _invalid_utf8(values)
        pieces = []
        start = 0
        for i in bad:
            if i > start:
                pieces.append(values.slice(start, i - start).cast(pa.large_string()))
            value = values[i].as_py()
            pieces.append(pa.array([None if value is None else value.decode("utf-8", "replace")], pa.large_string()))
            start = i + 1
        if start < len(values):
            pieces.append(values.slice(start).cast(pa.large_string()))
        return pa.concat_arrays(pieces)
