"""spark.readStream.format("zmq"): delivery, formats, admission control, AvailableNow, SUB, GATHER.

Every test drives a real Spark query against real ZeroMQ sockets fed by plain pyzmq
producers (which also proves wire compatibility with any ZeroMQ PUSH/PUB application).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import zmq
from chispa import assert_df_equality
from zmqtest import Producer, arrow_message, free_ports, numbered, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

N = 100_000


def _start(spark, name, df, tmp_path, **trigger):
    return (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"ckpt-{name}"))
        .trigger(**(trigger or {"processingTime": "0 seconds"}))
        .start()
    )


def _count(spark, name):
    return spark.table(name).count()


def _batch_sizes(query, total: int) -> list[int]:
    """Input rows per micro-batch, once the progress reports account for ``total`` rows:
    a memory sink shows a batch's rows before Spark publishes that batch's progress."""

    def sizes():
        found = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        return found if sum(found) >= total else None

    return wait_until(sizes, 60, f"progress reports covering {total} rows")


def _messages(fmt: str):
    """(messages, schema, rows): N rows in the given wire format, each row carrying id i."""
    if fmt == "raw":
        return numbered(N), None, N
    if fmt == "text":
        return [("row-%d-ü" % i).encode() for i in range(N)], None, N
    if fmt == "json":
        return (
            [json.dumps({"id": i, "name": f"n{i}", "reading": i / 2}).encode() for i in range(N)],
            "id long, name string, reading double",
            N,
        )
    rows_per = 1000
    batches = [
        pa.record_batch(
            {
                "id": pa.array(range(s, s + rows_per), pa.int64()),
                "name": [f"n{i}" for i in range(s, s + rows_per)],
                "reading": [i / 2 for i in range(s, s + rows_per)],
            }
        )
        for s in range(0, N, rows_per)
    ]
    return [arrow_message(b) for b in batches], "id long, name string, reading double", N


@pytest.mark.parametrize("fmt", ["raw", "text", "json", "arrow"])
def test_each_format_delivers_every_message_exactly_once(spark, free_port, spool_dir, tmp_path, fmt):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    messages, schema, rows = _messages(fmt)
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", fmt)
        .option("spoolDir", spool_dir)
    )
    if schema:
        reader = reader.schema(schema)
    name = f"fmt_{fmt}"
    query = _start(spark, name, reader.load(), tmp_path)
    producer = Producer(endpoint, messages)
    producer.start()
    try:
        producer.finish()
        wait_until(lambda: _count(spark, name) >= rows, 180, f"{rows} rows in {name}")
        out = spark.table(name)
        assert out.count() == rows
        if fmt in ("raw", "text"):
            assert out.select("value").distinct().count() == rows
            stats = out.selectExpr(
                "min(offset)", "max(offset)", "count(distinct offset)", "min(partition)", "max(partition)"
            ).first()
            assert tuple(stats) == (0, rows - 1, rows, 0, 0)
            if fmt == "text":
                assert out.where("value = 'row-7-ü'").count() == 1
        else:
            stats = out.selectExpr("min(id)", "max(id)", "count(distinct id)", "sum(reading)").first()
            assert tuple(stats) == (0, rows - 1, rows, sum(i / 2 for i in range(rows)))
    finally:
        stop_all([query])


def test_small_stream_matches_expected_dataframe(spark, free_port, spool_dir, tmp_path):
    """chispa: the exact rows, columns and types of the json format."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "json")
        .option("spoolDir", spool_dir)
        .schema("sensor string, reading double")
        .load()
    )
    query = _start(spark, "small_json", df, tmp_path)
    data = [("s1", 1.5), ("s2", -2.0), ("s3", 0.25)]
    producer = Producer(endpoint, [json.dumps({"sensor": s, "reading": r}).encode() for s, r in data])
    producer.start()
    try:
        producer.finish()
        wait_until(lambda: _count(spark, "small_json") >= 3, 60, f"3 rows {query.lastProgress} {query.exception()}")
        expected = spark.createDataFrame(data, "sensor string, reading double")
        assert_df_equality(spark.table("small_json"), expected, ignore_row_order=True)
    finally:
        stop_all([query])


def test_no_message_lost_at_micro_batch_boundaries(spark, free_port, spool_dir, tmp_path):
    """A steady producer across many short triggers: counts add up, offsets are gapless."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = spark.readStream.format("zmq").option("endpoints", "@" + endpoint).option("spoolDir", spool_dir).load()
    query = _start(spark, "boundaries", df.select("offset", "value"), tmp_path, processingTime="100 milliseconds")
    total = 30_000
    wait_until(lambda: query.recentProgress, 60, "the query's first trigger")
    producer = Producer(endpoint, numbered(total), rate=5_000)  # spans many triggers
    producer.start()
    try:
        producer.finish()
        wait_until(lambda: _count(spark, "boundaries") >= total, 120, f"{total} rows")
        batches = _batch_sizes(query, total)
        assert len(batches) >= 3, f"expected many micro-batches, got {len(batches)}"
        assert sum(batches) == total
        stats = (
            spark.table("boundaries")
            .selectExpr("count(*)", "count(distinct offset)", "max(offset)", "count(distinct value)")
            .first()
        )
        assert tuple(stats) == (total, total, total - 1, total)
    finally:
        stop_all([query])


def test_max_rows_per_trigger_caps_every_micro_batch(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("maxRowsPerTrigger", 1000)
        .load()
    )
    total = 8000
    producer = Producer(endpoint, numbered(total))
    producer.start()
    producer.finish()
    query = _start(spark, "capped", df.select("offset"), tmp_path)
    try:
        wait_until(lambda: _count(spark, "capped") >= total, 120, f"{total} rows")
        sizes = _batch_sizes(query, total)
        assert max(sizes) <= 1000 and sum(sizes) == total and len(sizes) >= 8
    finally:
        stop_all([query])


def test_max_bytes_per_trigger_caps_every_micro_batch(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    payload = 1000
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("maxBytesPerTrigger", 50 * payload)
        .load()
    )
    total = 600
    producer = Producer(endpoint, [b"%06d" % i + b"x" * (payload - 6) for i in range(total)])
    producer.start()
    producer.finish()
    query = _start(spark, "bytecapped", df.select("offset"), tmp_path)
    try:
        wait_until(lambda: _count(spark, "bytecapped") >= total, 120, f"{total} rows")
        sizes = _batch_sizes(query, total)
        assert max(sizes) <= 50 and sum(sizes) == total
    finally:
        stop_all([query])


def test_trigger_available_now_processes_what_was_there_and_stops(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total = 5000
    producer = Producer(endpoint, numbered(total))  # queued at the producer before the query binds
    producer.start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("maxRowsPerTrigger", 1000)
        .option("timeout", "1")
        .load()
    )
    query = _start(spark, "availnow", df.select("offset", "value"), tmp_path, availableNow=True)
    try:
        assert query.awaitTermination(120), "AvailableNow query did not stop by itself"
        assert query.exception() is None
        producer.finish()
        assert _count(spark, "availnow") == total
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert max(sizes) <= 1000 and len(sizes) >= 5
    finally:
        stop_all([query])


def test_progress_reports_latest_offset_so_lag_is_visible(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total = 3000
    producer = Producer(endpoint, numbered(total))
    producer.start()
    producer.finish()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("maxRowsPerTrigger", 500)
        .load()
    )
    query = _start(spark, "lag", df.select("offset"), tmp_path)
    try:
        wait_until(lambda: _count(spark, "lag") >= total, 120, f"{total} rows")
        _batch_sizes(query, total)  # the last batch's progress is published after its rows

        def offsets(value):
            return json.loads(value) if isinstance(value, str) else value

        reports = [
            (offsets(p["sources"][0]["latestOffset"]), int(offsets(p["sources"][0]["endOffset"])["0"]))
            for p in query.recentProgress
            if p["sources"][0]["latestOffset"]
        ]
        lags = [int(latest["0"]) - end for latest, end in reports]
        assert max(lags) > 0, f"no progress showed the source behind what was received: {lags}"
        assert lags[-1] == 0, "the last progress should show the query caught up"
        # the "lag" entry says the same in records, and in payload bytes ("msg-N" messages)
        sizes = [len(m) for m in numbered(total)]
        for latest, end in reports:
            assert latest["lag"] == {"records": int(latest["0"]) - end, "bytes": sum(sizes[end : int(latest["0"])])}
    finally:
        stop_all([query])


def test_sub_with_two_topics_gets_only_matching_messages_and_fills_topic(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    publisher = zmq.Context.instance().socket(zmq.XPUB)  # XPUB: we can see the query subscribe
    publisher.bind(endpoint)
    df = (
        spark.readStream.format("zmq")
        .option("pattern", "sub")
        .option("endpoints", endpoint)
        .option("topics", "alpha,beta")
        .option("format", "text")
        .option("spoolDir", spool_dir)
        .load()
    )
    query = _start(spark, "subtopics", df.select("topic", "value"), tmp_path)
    try:
        seen = set()
        wait_until(
            lambda: (publisher.poll(100) and seen.add(publisher.recv())) or seen >= {b"\x01alpha", b"\x01beta"},
            60,
            "the query's subscriptions",
        )
        for i in range(300):
            topic = (b"alpha", b"beta", b"gamma")[i % 3]
            publisher.send_multipart([topic, b"%s-%d" % (topic, i)])
        wait_until(lambda: _count(spark, "subtopics") >= 200, 60, "200 matching messages")
        rows = spark.table("subtopics").collect()
        assert len(rows) == 200
        assert {r.topic for r in rows} == {"alpha", "beta"}
        assert all(r.value.startswith(r.topic + "-") for r in rows)
    finally:
        stop_all([query])
        publisher.close(0)


def test_gather_fair_queues_several_producers(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("pattern", "gather")
        .option("endpoints", "@" + endpoint)
        .option("format", "text")
        .option("spoolDir", spool_dir)
        .load()
    )
    query = _start(spark, "gathered", df.select("offset", "value"), tmp_path)
    per_producer = 5000
    try:
        # Every producer has a full backlog waiting when the receiver drains them.
        producers = [
            Producer(endpoint, [b"p%d-%d" % (p, i) for i in range(per_producer)], hwm=per_producer) for p in range(3)
        ]
        for p in producers:
            p.start()
        for p in producers:
            p.finish()
        wait_until(lambda: _count(spark, "gathered") >= 3 * per_producer, 120, "all messages")
        out = spark.table("gathered")
        assert out.select("value").distinct().count() == 3 * per_producer
        by_producer = {r[0]: r[1] for r in out.selectExpr("substring(value, 1, 2) p").groupBy("p").count().collect()}
        assert by_producer == {"p0": per_producer, "p1": per_producer, "p2": per_producer}
    finally:
        stop_all([query])


def test_several_endpoints_are_several_channels_read_in_parallel(spark, spool_dir, tmp_path):
    ports = free_ports(2)
    endpoints = ",".join(f"@tcp://127.0.0.1:{p}" for p in ports)
    df = spark.readStream.format("zmq").option("endpoints", endpoints).option("spoolDir", spool_dir).load()
    query = _start(spark, "channels", df.select("partition", "offset", "value"), tmp_path)
    try:
        producers = [Producer(f"tcp://127.0.0.1:{p}", numbered(2000, fmt=b"c%d-%%d" % i)) for i, p in enumerate(ports)]
        for p in producers:
            p.start()
        for p in producers:
            p.finish()
        wait_until(lambda: _count(spark, "channels") >= 4000, 120, "4000 rows")
        per_channel = {
            r[0]: (r[1], r[2])
            for r in spark.table("channels")
            .groupBy("partition")
            .agg({"offset": "max", "value": "count"})
            .select("partition", "max(offset)", "count(value)")
            .collect()
        }
        assert per_channel == {0: (1999, 2000), 1: (1999, 2000)}
    finally:
        stop_all([query])


@pytest.mark.parametrize("fmt", ["raw", "arrow"])
def test_read_tasks_fetch_from_the_driver_when_they_cannot_use_the_spool_directly(
    spark, free_port, spool_dir, tmp_path, fmt
):
    """spoolAccess=fetch: read tasks ask the driver's ROUTER for their ranges over
    DEALER/ROUTER, as executors on other hosts do."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    if fmt == "arrow":
        messages = [
            arrow_message(pa.record_batch({"id": pa.array(range(s, s + 500), pa.int64())}))
            for s in range(0, 20_000, 500)
        ]
        reader = spark.readStream.format("zmq").schema("id long")
        column = "id"
    else:
        messages, reader, column = numbered(20_000), spark.readStream.format("zmq"), "offset"
    df = (
        reader.option("endpoints", "@" + endpoint)
        .option("format", fmt)
        .option("spoolDir", spool_dir)
        .option("spoolAccess", "fetch")
        .option("spoolServerHost", "127.0.0.1")
        .option("minPartitions", 3)
        .load()
    )
    name = f"fetched_{fmt}"
    query = _start(spark, name, df.select(column), tmp_path)
    Producer(endpoint, messages).start()
    try:
        wait_until(lambda: _count(spark, name) >= 20_000, 120, "20000 rows")
        stats = spark.table(name).selectExpr("count(*)", f"count(distinct {column})", f"max({column})").first()
        assert tuple(stats) == (20_000, 20_000, 19_999)
    finally:
        stop_all([query])


def test_starting_a_query_does_not_grow_the_shared_worker_environment(spark, free_port, spool_dir, tmp_path):
    """Spark shares one env map among every function of a registered Python data source and
    adds keys to it in place when a streaming query starts; racing a task's serialization,
    that failed a task with OptionalDataException (two queries started together in CI).
    ``register`` seeds those keys, so a query start only replaces values."""
    import spark_zmq

    spark_zmq.register(spark)  # a fresh registration: a fresh map, as in a new session

    def env_keys():
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return set(manager.lookupDataSource("zmq").dataSourceCls().envVars().keySet())

    before = env_keys()
    endpoint = f"tcp://127.0.0.1:{free_port}"
    producer = Producer(endpoint, numbered(10))
    producer.start()
    producer.finish()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("timeout", "1")
        .load()
    )
    query = _start(spark, "envseed", df.select("value"), tmp_path, availableNow=True)
    try:
        assert query.awaitTermination(120), "AvailableNow query did not stop by itself"
        assert query.exception() is None
        assert _count(spark, "envseed") == 10
    finally:
        stop_all([query])
    assert env_keys() == before, f"a query start added {env_keys() - before} to the shared map"
