"""Bad input to the source: a clear error naming the option or message, never a hang or
silent loss. Malformed messages follow ``mode`` (Spark's JSON reader conventions)."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest
from zmqtest import Producer, arrow_message, free_ports, run_available_now, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _run_available_now(spark, df, tmp_path, name):
    return run_available_now(spark, df, tmp_path, name, timeout=150)


def _json_source(spark, endpoint, spool_dir, schema, **options):
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "json")
        .option("spoolDir", spool_dir)
        .option("timeout", 1)
        .schema(schema)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


MIXED = [
    b'{"id": 1, "name": "one"}',
    b"{not json",
    b'{"id": "two", "name": "x"}',
    b"[1, 2]",
    b'{"id": 3, "name": "three"}',
]


def test_malformed_json_permissive_keeps_raw_text_in_corrupt_record_column(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, MIXED).start()
    df = _json_source(
        spark,
        endpoint,
        spool_dir,
        "id long, name string, _corrupt_record string",
        columnNameOfCorruptRecord="_corrupt_record",
    )
    rows, error = _run_available_now(spark, df, tmp_path, "permissive")
    assert error is None
    good = sorted((r.id, r.name) for r in rows if r._corrupt_record is None)
    bad = sorted(r._corrupt_record for r in rows if r._corrupt_record is not None)
    assert good == [(1, "one"), (3, "three")]
    assert bad == sorted(m.decode() for m in MIXED[1:4])
    assert all(r.id is None for r in rows if r._corrupt_record is not None)


def test_malformed_json_dropmalformed_drops_only_bad_messages(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, MIXED).start()
    rows, error = _run_available_now(
        spark,
        _json_source(spark, endpoint, spool_dir, "id long, name string", mode="DROPMALFORMED"),
        tmp_path,
        "dropmal",
    )
    assert error is None
    assert sorted((r.id, r.name) for r in rows) == [(1, "one"), (3, "three")]


def test_malformed_json_failfast_fails_naming_the_offset_and_content(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, MIXED).start()
    _, error = _run_available_now(
        spark, _json_source(spark, endpoint, spool_dir, "id long, name string", mode="FAILFAST"), tmp_path, "failfast"
    )
    assert error and "malformed json message at channel 0, offset 1" in error and "{not json" in error


def test_arrow_message_with_mismatched_schema_is_a_clear_error(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    wrong = pa.record_batch({"id": pa.array(["not", "a", "number"])})
    Producer(endpoint, [arrow_message(wrong)]).start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("spoolDir", spool_dir)
        .option("timeout", 1)
        .schema("id long")
        .load()
    )
    _, error = _run_available_now(spark, df, tmp_path, "arrowbad")
    assert error and "arrow message at channel 0, offset 0 cannot be read as the declared schema" in error
    assert "id: int64" in error and "DROPMALFORMED" in error


def test_arrow_dropmalformed_skips_unreadable_messages(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    good = pa.record_batch({"id": pa.array([1, 2], pa.int64())})
    Producer(endpoint, [b"garbage", arrow_message(good)]).start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("spoolDir", spool_dir)
        .option("timeout", 1)
        .option("mode", "DROPMALFORMED")
        .schema("id long")
        .load()
    )
    rows, error = _run_available_now(spark, df, tmp_path, "arrowdrop")
    assert error is None and sorted(r.id for r in rows) == [1, 2]


@pytest.mark.parametrize(
    "options, expected",
    [
        ({}, "option 'endpoints' is required"),
        ({"endpoints": "tcp//nowhere"}, "invalid ZeroMQ endpoint 'tcp//nowhere'"),
        (
            {"endpoints": "@tcp://127.0.0.1:5999", "pattern": "req"},
            "option 'pattern' = 'req' is not valid; valid values: pull, gather, sub",
        ),
        ({"endpoints": "@tcp://127.0.0.1:5999", "format": "xml"}, "option 'format' = 'xml' is not valid"),
        (
            {"endpoints": "@tcp://127.0.0.1:5999", "maxRowsPerTrigger": "-5"},
            "option 'maxRowsPerTrigger' = '-5' is out of range",
        ),
        ({"endpoints": "@tcp://127.0.0.1:5999", "endpionts": "x"}, "unknown source option(s) 'endpionts'"),
        ({"endpoints": "@tcp://127.0.0.1:5999", "topics": "a"}, "option 'topics' only applies to pattern 'sub'"),
    ],
)
def test_bad_options_fail_with_the_option_named(spark, tmp_path, options, expected):
    reader = spark.readStream.format("zmq")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception) as info:
        query = (
            reader.load()
            .writeStream.format("memory")
            .queryName("badopt")
            .option("checkpointLocation", str(tmp_path / "c"))
            .start()
        )
        try:
            query.awaitTermination(60)
            raise AssertionError("the query ran despite the bad option")
        finally:
            stop_all([query])
    assert expected in str(info.value)


def test_json_without_schema_says_how_to_give_one(spark):
    with pytest.raises(Exception) as info:
        spark.readStream.format("zmq").option("endpoints", "@tcp://127.0.0.1:5999").option("format", "json").load()
    assert "format 'json' needs the schema of the messages" in str(info.value)


def test_bind_to_a_port_in_use_fails_the_query_with_the_address(spark, spool_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        df = (
            spark.readStream.format("zmq")
            .option("endpoints", f"@tcp://127.0.0.1:{port}")
            .option("spoolDir", spool_dir)
            .load()
        )
        _, error = _run_available_now(spark, df, tmp_path, "inuse")
    assert error and f"Pull to 'tcp://127.0.0.1:{port}'" in error and "already bound" in error


def test_sub_to_an_endpoint_that_never_answers_finishes_empty(spark, free_port, spool_dir, tmp_path):
    df = (
        spark.readStream.format("zmq")
        .option("pattern", "sub")
        .option("endpoints", f"tcp://127.0.0.1:{free_port}")
        .option("spoolDir", spool_dir)
        .option("timeout", 1)
        .load()
    )
    rows, error = _run_available_now(spark, df, tmp_path, "silent")
    assert error is None and rows == []


def test_two_queries_on_one_spool_directory_are_refused(spark, free_port, spool_dir, tmp_path):
    first = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{free_port}")
        .option("spoolDir", spool_dir)
        .load()
        .writeStream.format("memory")
        .queryName("owner")
        .option("checkpointLocation", str(tmp_path / "c1"))
        .start()
    )
    try:
        wait_until(lambda: first.recentProgress, 60, "the first query to own the spool")
        (other_port,) = free_ports(1)
        df = (
            spark.readStream.format("zmq")
            .option("endpoints", f"@tcp://127.0.0.1:{other_port}")
            .option("spoolDir", spool_dir)
            .load()
        )
        _, error = _run_available_now(spark, df, tmp_path, "intruder")
        assert error and "is in use by another running query" in error and "spoolDir" in error
    finally:
        stop_all([first])
