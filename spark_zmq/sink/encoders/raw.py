"""Formats ``raw`` and ``text``: one message per row, the ``value`` column's bytes.

This is the sink's hot path, so the whole batch becomes one Python list of ``bytes`` in
Arrow's C++ (a cast when the column is a string, a fill when it has nulls, one
``to_pylist``) and nothing runs in Python per row. A null value is an empty message;
``text`` and a string column are sent as their UTF-8 bytes.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .base import PayloadEncoder

__all__ = ["RawEncoder", "TextEncoder", "value_payloads"]


def value_payloads(batch: pa.RecordBatch, fmt: str) -> list[bytes]:
    """The ``value`` column of ``batch`` as one ``bytes`` per row, a null as ``b""``."""
    values = batch.column("value")
    if fmt == "text" or pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(pa.large_string()).cast(pa.large_binary())
    if values.null_count:
        values = pc.fill_null(values, b"")
    payloads: list[bytes] = values.to_pylist()
    return payloads


class RawEncoder(PayloadEncoder):
    """``raw``: each row's ``value``, binary or string, as it is."""

    fmt = "raw"

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        return value_payloads(batch, self.fmt)


class TextEncoder(RawEncoder):
    """``text``: as ``raw`` (the column's UTF-8 bytes); ``check_schema`` admits the same
    columns, the format names what a consumer reads."""

    fmt = "text"
