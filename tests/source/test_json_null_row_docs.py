"""What troubleshooting.md says of a JSON value whose type does not fit its column is what
the decoder does: with ``mode=PERMISSIVE`` the whole row is null, every column of it, not
only the column that did not fit (the page said "a JSON column is null", #43)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.source.decoders import JsonDecoder

pytestmark = pytest.mark.timeout(60)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
SCHEMA = StructType(
    [StructField("ts", TimestampType()), StructField("sensor", StringType()), StructField("bad", StringType())]
)


def test_a_value_that_does_not_fit_nulls_the_whole_row_as_the_page_says():
    message = json.dumps({"ts": 1767225600.5, "sensor": "s1"}).encode()
    fits = json.dumps({"ts": "2026-01-01T00:00:00Z", "sensor": "s2"}).encode()
    decoder = JsonDecoder(SCHEMA, mode="PERMISSIVE", corrupt_column="bad")
    rows = [
        row
        for out in decoder.decode(messages_to_batch([message, fits], None, "json", 0), 0, 0)
        for row in out.to_pylist()
    ]
    assert rows[0] == {"ts": None, "sensor": None, "bad": message.decode()}  # "sensor" fit, and is null too
    assert rows[1]["sensor"] == "s2" and rows[1]["bad"] is None
    page = PAGE.read_text()
    assert "A JSON column is null" not in page
    assert "null in every column" in page and "`columnNameOfCorruptRecord`" in page
