"""df.write / df.writeStream .format("zmq"): every format, round-robin, pub topics,
Spark to Spark, no peer, bad input. Peers are plain pyzmq sockets or the connector's source."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pyarrow as pa
import pytest
import zmq
from chispa import assert_df_equality
from zmqtest import free_ports, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _bound(socket_type, **options):
    sock = zmq.Context.instance().socket(socket_type)
    for key, value in options.items():
        sock.setsockopt(key, value)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return sock, f"tcp://127.0.0.1:{port}"


def _drain(sock, idle_ms=1000, multipart=False):
    out = []
    while sock.poll(idle_ms):
        out.append(sock.recv_multipart() if multipart else sock.recv())
    return out


def _write(df, endpoint, **options):
    writer = df.write.format("zmq").mode("append").option("endpoints", endpoint)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


@pytest.fixture
def rows(spark):
    return spark.createDataFrame(
        [(i, f"v-{i}-é", i * 0.5) for i in range(500)], "id long, value string, reading double"
    ).repartition(2)


@pytest.mark.parametrize("fmt", ["raw", "text", "json", "arrow"])
def test_batch_write_delivers_the_whole_dataframe_in_each_format(spark, rows, fmt):
    pull, endpoint = _bound(zmq.PULL)
    try:
        _write(rows, endpoint, format=fmt, rowsPerMessage=64)
        messages = _drain(pull)
    finally:
        pull.close(0)
    if fmt in ("raw", "text"):
        assert sorted(messages) == sorted(f"v-{i}-é".encode() for i in range(500))
    elif fmt == "json":
        assert sorted((m["id"], m["value"], m["reading"]) for m in map(json.loads, messages)) == [
            (i, f"v-{i}-é", i * 0.5) for i in range(500)
        ]
    else:
        tables = [pa.ipc.open_stream(m).read_all() for m in messages]
        records = [t for t in tables if b"spark_zmq.commit" in t.schema.metadata]
        tables = [t for t in tables if b"spark_zmq.commit" not in t.schema.metadata]
        assert all(t.num_rows <= 64 for t in tables)
        table = pa.concat_tables(tables)
        assert sorted(table.column("id").to_pylist()) == list(range(500))
        meta = tables[0].schema.metadata
        assert {b"spark_zmq.partition", b"spark_zmq.batch_id", b"spark_zmq.sequence", b"spark_zmq.query_id"} <= set(
            meta
        )
        keys = {(t.schema.metadata[b"spark_zmq.partition"], t.schema.metadata[b"spark_zmq.sequence"]) for t in tables}
        assert len(keys) == len(tables), "every message has a distinct (partition, sequence)"
        write_ids = {t.schema.metadata[b"spark_zmq.query_id"] for t in tables}
        assert len(write_ids) == 1 and next(iter(write_ids)).startswith(b"write-")  # one id per batch write
        # the driver's commit record: no rows, the data's schema, and the run Spark kept per partition
        assert len(records) == 1 and records[0].num_rows == 0 and records[0].schema.names == table.schema.names
        committed = json.loads(records[0].schema.metadata[b"spark_zmq.commit"])
        runs = {
            (t.schema.metadata[b"spark_zmq.partition"].decode(), t.schema.metadata[b"spark_zmq.attempt_id"].decode())
            for t in tables
        }
        assert {(p, r["attempt_id"]) for p, r in committed.items()} == runs
        assert sum(r["messages"] for r in committed.values()) == len(tables)
        assert records[0].schema.metadata[b"spark_zmq.query_id"] in write_ids


def test_round_robin_four_partitions_three_pull_peers(spark):
    peers = [_bound(zmq.PULL) for _ in range(3)]
    try:
        df = spark.range(6000).selectExpr("cast(id as string) as value").repartition(4)
        _write(df, ",".join(e for _, e in peers))
        received = [_drain(p) for p, _ in peers]
    finally:
        for p, _ in peers:
            p.close(0)
    everything = [m for r in received for m in r]
    assert sorted(everything) == sorted(str(i).encode() for i in range(6000)), "each row exactly once"
    assert all(len(r) > 0 for r in received), f"not spread: {[len(r) for r in received]}"


def test_pub_topic_column_reaches_only_matching_subscribers(spark):
    sub_a, endpoint_a = _bound(zmq.SUB)
    sub_a.setsockopt(zmq.SUBSCRIBE, b"alpha")
    sub_b, endpoint_b = _bound(zmq.SUB)
    sub_b.setsockopt(zmq.SUBSCRIBE, b"beta")
    # A binding SUB sends its subscriptions only while the application reads it (libzmq
    # #2267), as a real subscriber does: read both on threads during the write.
    got = {}

    def take(key, sock, n=100, timeout_s=90):
        deadline, out = time.monotonic() + timeout_s, []
        while len(out) < n and time.monotonic() < deadline:
            if sock.poll(100):
                out.append(sock.recv_multipart())
        got[key] = out + _drain(sock, idle_ms=300, multipart=True)  # and nothing beyond

    readers = [threading.Thread(target=take, args=(k, s)) for k, s in (("a", sub_a), ("b", sub_b))]
    try:
        for r in readers:
            r.start()
        df = spark.createDataFrame(
            [("alpha" if i % 2 else "beta", f"m{i}") for i in range(200)], "topic string, value string"
        )
        _write(df.coalesce(1), f"{endpoint_a},{endpoint_b}", pattern="pub")
        for r in readers:
            r.join(60)
        got_a, got_b = got["a"], got["b"]
    finally:
        sub_a.close(0)
        sub_b.close(0)
    assert len(got_a) == 100 and all(t == b"alpha" for t, _ in got_a)
    assert len(got_b) == 100 and all(t == b"beta" for t, _ in got_b)
    assert {p for _, p in got_a} == {f"m{i}".encode() for i in range(1, 200, 2)}


def test_no_peer_fails_the_task_naming_endpoint_and_timeout(spark):
    (port,) = free_ports(1)  # nothing listens here
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        _write(spark.range(3).selectExpr("cast(id as string) value"), f"tcp://127.0.0.1:{port}", sendTimeoutMs=2000)
    assert f"tcp://127.0.0.1:{port}" in str(info.value) and "sendTimeoutMs=2000" in str(info.value)
    assert time.monotonic() - started < 90


@pytest.mark.parametrize(
    "df_sql, options, expected",
    [
        ("select id from range(3)", {}, "format 'raw' sends the 'value' column, but the DataFrame has none"),
        ("select id as value, 1 as topic from range(3)", {"format": "text"}, "column 'value' must be binary or string"),
        (
            "select 'x' as value, 1 as topic from range(3)",
            {"pattern": "pub"},
            "column 'topic' must be a string for pattern 'pub'",
        ),
        ("select 'x' as value from range(3)", {"pattern": "pub"}, "pattern 'pub' needs a topic"),
        ("select 'x' as value from range(3)", {"format": "xml"}, "option 'format' = 'xml' is not valid"),
        (
            "select 'x' as value from range(3)",
            {"pattern": "pull"},
            "option 'pattern' = 'pull' is not valid; valid values: push, scatter, pub",
        ),
        (
            "select 'x' as value from range(3)",
            {"pattern": "scatter", "topic": "t"},
            "option 'topic' only applies to pattern 'pub'",
        ),
    ],
)
def test_bad_input_fails_before_any_data_moves(spark, df_sql, options, expected):
    pull, endpoint = _bound(zmq.PULL)
    try:
        with pytest.raises(Exception) as info:
            _write(spark.sql(df_sql), endpoint, sendTimeoutMs=2000, **options)
        assert expected in str(info.value)
        assert not pull.poll(200), "a message moved despite the bad input"
    finally:
        pull.close(0)


def test_spark_to_spark_streaming_push_arrow_into_pull_arrow(spark, free_port, spool_dir, tmp_path):
    """A streaming query writes push+arrow; a second query reads pull+arrow: the second
    query's output equals the first's input, across several micro-batches."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("spoolDir", spool_dir)
        .schema("id long, label string")
        .load()
    )
    downstream = (
        reader.writeStream.format("memory")
        .queryName("downstream")
        .option("checkpointLocation", str(tmp_path / "down"))
        .start()
    )
    source_dir = tmp_path / "in"
    source_dir.mkdir()
    schema = "id long, label string"
    upstream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", 1)
        .json(str(source_dir))
        .writeStream.format("zmq")
        .option("endpoints", endpoint)
        .option("format", "arrow")
        .option("rowsPerMessage", 50)
        .option("checkpointLocation", str(tmp_path / "up"))
        .start()
    )
    try:
        expected = []
        for part in range(3):
            lines = [{"id": part * 100 + i, "label": f"p{part}"} for i in range(100)]
            expected += [(r["id"], r["label"]) for r in lines]
            (source_dir / f"part-{part}.json").write_text("\n".join(json.dumps(r) for r in lines))
        wait_until(lambda: spark.table("downstream").count() >= 300, 120, "300 rows downstream")
        wait_until(
            lambda: sum(p["numInputRows"] for p in upstream.recentProgress) >= 300, 60, "the upstream progress reports"
        )  # published after the batch's rows
        assert len([p for p in upstream.recentProgress if p["numInputRows"]]) >= 3
        assert_df_equality(spark.table("downstream"), spark.createDataFrame(expected, schema), ignore_row_order=True)
    finally:
        stop_all([upstream, downstream])


@pytest.mark.parametrize("fmt", ["text", "arrow"])
def test_pub_counts_and_reports_what_a_slow_subscriber_could_not_take(free_port, fmt):
    """PUB drops at the high-water mark by specification; the sink counts each drop and the
    driver logs the count, so received + dropped = rows written. Arrow messages are
    numbered before they are sent: what arrives has unique sequence numbers, and the
    numbers missing are exactly the drops (a dedup key is never carried by two rows)."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "pub_drops.py")
    result = subprocess.run(
        [sys.executable, script, str(free_port), "20000", fmt], capture_output=True, text=True, timeout=280
    )
    assert result.returncode == 0, result.stderr[-3000:]
    received = int(result.stdout.split("RESULT received ")[1].split()[0])
    match = re.search(r"pub dropped (\d+) of (\d+) messages", result.stderr)
    assert match, f"no drop report on the driver's stderr:\n{result.stderr[-3000:]}"
    dropped, total = int(match.group(1)), int(match.group(2))
    assert total == 20000 and dropped > 0
    assert received + dropped == 20000
    if fmt == "arrow":
        numbers = re.search(r"RESULT sequences (\d+) unique (\d+) max (\d+)", result.stdout)
        assert numbers, result.stdout
        count, unique, highest = map(int, numbers.groups())
        assert count == unique == received
        assert highest < 20000
