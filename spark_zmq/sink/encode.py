"""Turn Arrow record batches into ZeroMQ messages: raw, text, json or arrow.

Validation of the DataFrame's schema happens in ``check_schema`` on the driver, before
any task runs, so a missing ``value`` column or a non-string ``topic`` column fails the
query with a clear message before any data moves.
"""

from __future__ import annotations

import json
from typing import Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, StringType, StructType

from ..options import SinkOptions

__all__ = ["check_schema", "encode_batch", "Message"]

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


def _arrow_message(batch: pa.RecordBatch, metadata: dict[bytes, bytes]) -> bytes:
    batch = batch.replace_schema_metadata({**(batch.schema.metadata or {}), **metadata})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def encode_batch(
    batch: pa.RecordBatch, options: SinkOptions, *, metadata: dict[str, str], sequence_start: int
) -> Iterator[Message]:
    """Messages for one batch. ``metadata`` (query id, batch id, partition) goes into each
    Arrow message with its ``sequence`` number, so consumers can deduplicate retries."""
    # For pub, the topic column routes the message (frame one) and is not payload.
    drop_topic = options.pattern == "pub" and options.topic is None and "topic" in batch.schema.names
    fixed_topic = options.topic.encode() if options.topic is not None else None
    topics: Optional[list] = batch.column("topic").to_pylist() if drop_topic else None

    if options.format == "arrow":
        groups: list[tuple[Optional[bytes], pa.RecordBatch]]
        payload = _payload_columns(batch, drop_topic)
        if topics is None:
            groups = [(fixed_topic, payload)]
        else:
            groups = []
            column = batch.column("topic")
            for topic in dict.fromkeys(topics):
                mask = pc.is_null(column) if topic is None else pc.equal(column, topic)
                groups.append(((topic or "").encode(), payload.filter(mask)))
        sequence = sequence_start
        meta = {f"spark_zmq.{k}".encode(): str(v).encode() for k, v in metadata.items()}
        for topic, rows in groups:
            step = options.rows_per_message
            for lo in range(0, max(rows.num_rows, 1), step):
                piece = rows.slice(lo, step)
                if piece.num_rows == 0:
                    continue
                yield topic, _arrow_message(piece, {**meta, b"spark_zmq.sequence": str(sequence).encode()})
                sequence += 1
        return

    if options.format in ("raw", "text"):
        values = batch.column("value")
        if options.format == "text" or pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            values = values.cast(pa.large_string()).cast(pa.large_binary())
        payloads = values.to_pylist()
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
