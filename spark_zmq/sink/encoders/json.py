"""Format ``json``: one message per row, the row as one JSON object.

Every column but the one that routes the row (``pub``'s ``topic`` column) goes into the
object. Values JSON has no type for are written as text: binary as UTF-8 (invalid bytes
replaced), dates, timestamps and decimals by ``str``. No metadata travels with a row, so
a consumer cannot tell a retried task's copy from the first one (``arrow`` can).
"""

from __future__ import annotations

import json

import pyarrow as pa

from ...options import SinkOptions
from .base import PayloadEncoder, payload_columns, routes_by_column

__all__ = ["JsonEncoder"]


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return str(value)


class JsonEncoder(PayloadEncoder):
    """``json``: ``json.dumps`` of each row (``ensure_ascii=False``, UTF-8)."""

    fmt = "json"

    def __init__(self, options: SinkOptions) -> None:
        self.drop_topic = routes_by_column(options.pattern, options.topic)

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        return [
            json.dumps(row, default=_json_default, ensure_ascii=False).encode()
            for row in payload_columns(batch, self.drop_topic).to_pylist()
        ]
