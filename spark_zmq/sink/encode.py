"""Turn Arrow record batches into ZeroMQ messages: raw, text, json or arrow.

Validation of the DataFrame's schema happens in ``check_schema`` on the driver, before
any task runs, so a missing ``value`` column or a non-string ``topic`` column fails the
query with a clear message before any data moves.
"""

from __future__ import annotations

import json
from typing import Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, StringType, StructType

from ..options import SinkOptions

__all__ = ["check_schema", "arrow_pieces", "arrow_message", "row_messages", "row_payloads", "Message"]

#: (topic frame or None, payload)
Message = tuple[Optional[bytes], bytes]


def check_schema(options: SinkOptions, schema: StructType) -> None:
    """Fail early, naming the column and what is valid."""
    fields = {f.name: f.dataType for f in schema.fields}
    if options.format in ("raw", "text"):
        if "value" not in fields:
            raise ValueError(
                f"format {options.format!r} sends the 'value' column, but the DataFrame has none "
                f"(columns: {', '.join(fields) or 'none'}); select or alias one, e.g. df.selectExpr('to_json(struct(*)) AS value')"
            )
        if not isinstance(fields["value"], (BinaryType, StringType)):
            raise ValueError(
                f"column 'value' must be binary or string for format {options.format!r}, not {fields['value'].simpleString()}; "
                "cast it, e.g. .selectExpr('CAST(value AS STRING) AS value')"
            )
    if options.pattern == "pub" and options.topic is None:
        if "topic" not in fields:
            raise ValueError(
                "pattern 'pub' needs a topic: set option 'topic' or give the DataFrame a string 'topic' column"
            )
        if not isinstance(fields["topic"], StringType):
            raise ValueError(f"column 'topic' must be a string for pattern 'pub', not {fields['topic'].simpleString()}")


def _payload_columns(batch: pa.RecordBatch, drop_topic: bool) -> pa.RecordBatch:
    if drop_topic and "topic" in batch.schema.names:
        return batch.drop_columns(["topic"])
    return batch


def _json_default(value: object) -> object:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    return str(value)


def arrow_message(piece: pa.RecordBatch, metadata: Mapping[str, object]) -> bytes:
    """One Arrow IPC stream holding ``piece``, with ``metadata`` (keys without their
    ``spark_zmq.`` prefix) added to its schema's custom metadata."""
    extra = {f"spark_zmq.{k}".encode(): str(v).encode() for k, v in metadata.items()}
    piece = piece.replace_schema_metadata({**(piece.schema.metadata or {}), **extra})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, piece.schema) as writer:
        writer.write_batch(piece)
    return sink.getvalue().to_pybytes()


def arrow_pieces(batch: pa.RecordBatch, options: SinkOptions) -> Iterator[tuple[Optional[bytes], pa.RecordBatch]]:
    """``(topic frame or None, rows)`` of the Arrow messages one batch makes: at most
    ``rowsPerMessage`` rows each, one topic per message for ``pub`` with a topic column.
    The writer numbers and encodes them (``arrow_message``), so that the task's last
    message can say it is the last."""
    drop_topic = options.pattern == "pub" and options.topic is None and "topic" in batch.schema.names
    payload = _payload_columns(batch, drop_topic)
    groups: list[tuple[Optional[bytes], pa.RecordBatch]]
    if drop_topic:
        column = batch.column("topic")
        groups = []
        for topic in dict.fromkeys(column.to_pylist()):
            mask = pc.is_null(column) if topic is None else pc.equal(column, topic)
            groups.append(((topic or "").encode(), payload.filter(mask)))
    else:
        groups = [(options.topic.encode() if options.topic is not None else None, payload)]
    step = options.rows_per_message
    for topic, rows in groups:
        for lo in range(0, rows.num_rows, step):
            yield topic, rows.slice(lo, step)


def _value_payloads(batch: pa.RecordBatch, fmt: str) -> list:
    values = batch.column("value")
    if fmt == "text" or pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        values = values.cast(pa.large_string()).cast(pa.large_binary())
    if values.null_count:
        values = pc.fill_null(values, b"")
    return values.to_pylist()


def row_payloads(batch: pa.RecordBatch, options: SinkOptions) -> Optional[list[bytes]]:
    """The payloads of ``raw``/``text`` rows without topics (``push``, ``scatter``), one
    message each, a null value as an empty message; ``None`` for everything else, which
    goes through ``row_messages``. No tuple or topic per message: the common egress path
    costs one list of ``bytes``."""
    if options.format not in ("raw", "text") or options.pattern == "pub":
        return None
    return _value_payloads(batch, options.format)


def row_messages(batch: pa.RecordBatch, options: SinkOptions) -> Iterator[Message]:
    """One message per row: formats ``raw``, ``text`` and ``json`` (no metadata: a consumer
    cannot tell a retried task's copy of a row from the first one)."""
    drop_topic = options.pattern == "pub" and options.topic is None and "topic" in batch.schema.names
    fixed_topic = options.topic.encode() if options.topic is not None else None
    topics: Optional[list] = batch.column("topic").to_pylist() if drop_topic else None
    if options.format in ("raw", "text"):
        payloads = _value_payloads(batch, options.format)
    else:  # json: every row one object, without the topic column that routes it
        payloads = [
            json.dumps(row, default=_json_default, ensure_ascii=False).encode()
            for row in _payload_columns(batch, drop_topic).to_pylist()
        ]
    for i, payload in enumerate(payloads):
        if payload is None:
            payload = b""
        topic = fixed_topic if topics is None else (topics[i] or "").encode()
        yield topic, payload
