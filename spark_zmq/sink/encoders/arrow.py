"""Format ``arrow``: many rows per message, each message one Arrow IPC stream whose
schema metadata says which run of which task sent it.

Every message carries the task's header (``spark_zmq.query_id``, ``batch_id``,
``partition``, ``attempt``, ``attempt_id``), its ``sequence`` within the task (0, 1, ...
across all the task's batches) and ``last`` (``"true"`` on exactly the task's final
message). Those are the keys a consumer drops a retried task's copies by, and ``last``
tells it a run is complete; so the encoder holds its latest message back until the next
one exists or the task ends (``finish``), and numbers messages in the order they are
sent. A message has at most ``rowsPerMessage`` rows; with ``pub`` and a ``topic`` column
the rows of one batch are grouped by topic first, one topic per message, the column left
out of the payload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc

from ...arrow import run_metadata
from ...options import SinkOptions
from .base import Message, PayloadEncoder, TopicEncoder, payload_columns, routes_by_column

__all__ = ["ArrowEncoder", "ArrowTopicEncoder", "ArrowMessages", "TaskHeader", "arrow_message"]


class TaskHeader(TypedDict):
    """The keys of a write task that every Arrow message of it carries (``writer.task_header``)."""

    query_id: str
    batch_id: int
    partition: int
    attempt: int
    attempt_id: str


def arrow_message(piece: pa.RecordBatch, metadata: Mapping[str, object]) -> bytes:
    """One Arrow IPC stream holding ``piece``, with ``metadata`` (keys without their
    ``spark_zmq.`` prefix) added to its schema's custom metadata."""
    piece = piece.replace_schema_metadata({**(piece.schema.metadata or {}), **run_metadata.encode(metadata)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, piece.schema) as writer:
        writer.write_batch(piece)
    return sink.getvalue().to_pybytes()


class ArrowMessages:
    """One task's Arrow messages with their topic frames (``None`` but for ``pub``):
    the pieces of each batch, numbered, each encoded once the next exists."""

    def __init__(self, options: SinkOptions, header: TaskHeader) -> None:
        self.header = header
        self.rows_per_message = options.rows_per_message
        self.by_column = routes_by_column(options.pattern, options.topic)
        self.fixed = options.topic.encode() if options.topic is not None else None
        #: the number the next encoded message gets
        self.sequence = 0
        self._held: tuple[bytes | None, pa.RecordBatch] | None = None

    def pieces(self, batch: pa.RecordBatch) -> Iterator[tuple[bytes | None, pa.RecordBatch]]:
        """``(topic frame or None, rows)`` of the messages ``batch`` makes."""
        groups: list[tuple[bytes | None, pa.RecordBatch]]
        if self.by_column and "topic" in batch.schema.names:
            column = batch.column("topic")
            payload = payload_columns(batch, drop_topic=True)
            groups = []
            for topic in dict.fromkeys(column.to_pylist()):
                mask = pc.is_null(column) if topic is None else pc.equal(column, topic)
                groups.append(((topic or "").encode(), payload.filter(mask)))
        else:
            groups = [(self.fixed, batch)]
        step = self.rows_per_message
        for topic, rows in groups:
            for lo in range(0, rows.num_rows, step):
                yield topic, rows.slice(lo, step)

    def encode(self, batch: pa.RecordBatch) -> list[Message]:
        out = []
        for piece in self.pieces(batch):
            if self._held is not None:
                out.append(self._message(self._held, last=False))
            self._held = piece
        return out

    def finish(self) -> list[Message]:
        held, self._held = self._held, None
        return [] if held is None else [self._message(held, last=True)]

    def _message(self, held: tuple[bytes | None, pa.RecordBatch], last: bool) -> Message:
        topic, piece = held
        sequence, self.sequence = self.sequence, self.sequence + 1
        return topic, arrow_message(
            piece, {**self.header, run_metadata.SEQUENCE: sequence, run_metadata.LAST: "true" if last else "false"}
        )


class ArrowEncoder(PayloadEncoder):
    """``arrow`` for ``push`` and ``scatter``: the messages' bytes."""

    fmt = "arrow"

    def __init__(self, options: SinkOptions, header: TaskHeader) -> None:
        self.messages = ArrowMessages(options, header)

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        return [payload for _, payload in self.messages.encode(batch)]

    def finish(self) -> list[bytes]:
        return [payload for _, payload in self.messages.finish()]


class ArrowTopicEncoder(TopicEncoder):
    """``arrow`` for ``pub``: each message with its topic frame."""

    fmt = "arrow"

    def __init__(self, options: SinkOptions, header: TaskHeader) -> None:
        self.messages = ArrowMessages(options, header)

    def encode(self, batch: pa.RecordBatch) -> list[Message]:
        return self.messages.encode(batch)

    def finish(self) -> list[Message]:
        return self.messages.finish()
