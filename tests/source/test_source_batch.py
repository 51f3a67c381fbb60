"""spark.read.format("zmq"): a bounded read of what arrives, by count or by idle timeout."""

from __future__ import annotations

import json
import time

import pytest
from chispa import assert_df_equality
from zmqtest import Producer, numbered

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def test_batch_read_stops_at_max_messages(spark, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, numbered(800)).start()
    df = (
        spark.read.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("maxMessages", 500)
        .option("format", "text")
        .option("timeout", 30)
        .load()
    )
    rows = df.select("offset", "value", "partition").collect()
    assert len(rows) == 500
    assert sorted(r.offset for r in rows) == list(range(500))
    assert {r.value for r in rows} == {f"msg-{i}" for i in range(500)}
    assert {r.partition for r in rows} == {0}


def test_batch_read_returns_what_arrived_after_idle_timeout(spark, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    data = [("a", 1), ("b", 2), ("c", 3)]
    Producer(endpoint, [json.dumps({"k": k, "v": v}).encode() for k, v in data]).start()
    started = time.monotonic()
    df = (
        spark.read.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "json")
        .option("timeout", 2)
        .schema("k string, v int")
        .load()
    )
    assert_df_equality(df, spark.createDataFrame(data, "k string, v int"), ignore_row_order=True)
    assert time.monotonic() - started < 60


def test_batch_read_with_nothing_arriving_is_empty_not_a_hang(spark, free_port):
    df = spark.read.format("zmq").option("endpoints", f"@tcp://127.0.0.1:{free_port}").option("timeout", 1).load()
    assert df.count() == 0
    assert df.columns == ["value", "topic", "partition", "offset", "timestamp"]


def test_batch_read_of_arrow_messages(spark, free_port):
    import pyarrow as pa
    from zmqtest import arrow_message

    endpoint = f"tcp://127.0.0.1:{free_port}"
    batches = [pa.record_batch({"id": pa.array(range(i * 100, i * 100 + 100), pa.int64())}) for i in range(5)]
    Producer(endpoint, [arrow_message(b) for b in batches]).start()
    df = (
        spark.read.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("maxMessages", 5)
        .option("timeout", 30)
        .schema("id long")
        .load()
    )
    assert sorted(r.id for r in df.collect()) == list(range(500))
