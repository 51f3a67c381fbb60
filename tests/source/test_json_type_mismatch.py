"""Format ``json``: a value whose JSON type does not fit its declared column (an epoch
number in a ``timestamp`` column, ``spark-zmq produce``'s ``ts``) is told in the schema's
terms: FAILFAST's error and PERMISSIVE's warning name the column, the declared type and
the JSON type, and the warning counts the messages that became null rows."""

from __future__ import annotations

import json
import logging

import pytest
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.source.decoders import JsonDecoder, MalformedMessageError

pytestmark = pytest.mark.timeout(60)

READINGS = StructType(
    [
        StructField("seq", LongType()),
        StructField("sensor", StringType()),
        StructField("ts", TimestampType()),
        StructField("reading", DoubleType()),
    ]
)
LOGGER = "spark_zmq.source.decoders.json"


def batch(*messages: dict | bytes):
    values = [m if isinstance(m, bytes) else json.dumps(m).encode() for m in messages]
    return messages_to_batch(values, None, "json", 0)


def epoch_readings(n: int) -> list[dict]:
    # what spark-zmq produce --format json sends: ts in epoch seconds
    return [{"seq": i, "sensor": f"sensor-{i % 4}", "ts": 1767225600.0 + i, "reading": i / 10} for i in range(n)]


def test_failfast_names_the_column_the_declared_type_and_the_json_type():
    decoder = JsonDecoder(READINGS, mode="FAILFAST")
    with pytest.raises(MalformedMessageError) as info:
        list(decoder.decode(batch(*epoch_readings(3)), 0, 40))
    message = str(info.value)
    assert "channel 0, offset 40" in message
    assert "column 'ts' is declared timestamp but the JSON value is a number" in message
    assert "changed from" not in message


def test_a_nested_column_is_named_by_its_path():
    schema = StructType([StructField("inner", StructType([StructField("a", IntegerType())]))])
    with pytest.raises(MalformedMessageError, match="column 'inner.a' is declared int but the JSON value is a string"):
        list(JsonDecoder(schema, mode="FAILFAST").decode(batch({"inner": {"a": "x"}}), 0, 0))


def test_permissive_counts_the_null_rows_and_warns_once_per_batch_naming_both_types(caplog):
    decoder = JsonDecoder(READINGS)
    good = {"seq": 99, "sensor": "s", "ts": "2026-01-01T00:00:00", "reading": 1.5}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows = [
            row
            for out in decoder.decode(batch(*epoch_readings(5), good, {"seq": 7, "reading": "high"}), 2, 0)
            for row in out.to_pylist()
        ]
    assert len(rows) == 7 and rows[5]["seq"] == 99 and rows[5]["ts"] is not None
    assert all(row["seq"] is None for i, row in enumerate(rows) if i != 5)
    assert decoder.malformed == 6
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert "6 of 7 messages of channel 2 (offsets 0 to 6) became null rows" in text
    assert "column 'ts' is declared timestamp but the JSON value is a number (5 messages)" in text
    assert "column 'reading' is declared double but the JSON value is a string (1 message)" in text


def test_dropmalformed_warns_that_the_messages_were_dropped(caplog):
    decoder = JsonDecoder(READINGS, mode="DROPMALFORMED")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows = sum(out.num_rows for out in decoder.decode(batch(*epoch_readings(4)), 0, 0))
    assert rows == 0 and decoder.malformed == 4
    assert any("4 of 4 messages of channel 0 (offsets 0 to 3) were dropped" in r.getMessage() for r in caplog.records)


def test_a_batch_that_fits_logs_nothing(caplog):
    schema = StructType([StructField("seq", LongType()), StructField("ts", DoubleType())])
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        rows = sum(out.num_rows for out in JsonDecoder(schema).decode(batch(*epoch_readings(10)), 0, 0))
    assert rows == 10 and not [r for r in caplog.records if r.name == LOGGER]
