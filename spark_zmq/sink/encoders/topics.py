"""``pub``'s topic frames for the one-row-per-message formats (``raw``, ``text``, ``json``).

A row's topic is the ``topic`` option when set, else the row's ``topic`` column (a null
topic is the empty topic, which every subscriber of ``""`` receives). The payload comes
from the format's own encoder, unchanged, so a row's bytes are the same whatever the
pattern; only the frame in front of it is added here.
"""

from __future__ import annotations

import pyarrow as pa

from ...options import SinkOptions
from .base import Message, PayloadEncoder, TopicEncoder, routes_by_column

__all__ = ["RowTopics"]


class RowTopics(TopicEncoder):
    """``rows``' payloads, each with its row's topic frame."""

    def __init__(self, rows: PayloadEncoder, options: SinkOptions) -> None:
        self.rows = rows
        self.fmt = rows.fmt  # type: ignore[misc]  # the wrapped format's name, per instance
        self.by_column = routes_by_column(options.pattern, options.topic)
        self.fixed = options.topic.encode() if options.topic is not None else None

    def encode(self, batch: pa.RecordBatch) -> list[Message]:
        payloads = self.rows.encode(batch)
        if self.by_column and "topic" in batch.schema.names:
            topics = batch.column("topic").to_pylist()
            return [((topic or "").encode(), payload) for topic, payload in zip(topics, payloads)]
        fixed = self.fixed
        return [(fixed, payload) for payload in payloads]
