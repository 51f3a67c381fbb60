"""Exactly-once across failure, and backpressure with bounded memory.

What "exactly once" can mean without broker acknowledgements (docs/architecture.md, "Guarantees"): every
message the connector received (numbered by ``offset`` in its channel, on receipt) reaches
the output exactly once across a stop/restart or the death of the driver-side reader
process. Messages still in the producer's or the network's buffers when the receiver dies
are outside its reach; the tests measure that loss and only require it to be small.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from zmqtest import Producer, dir_bytes, reader_pid, rss_bytes, stop_all, wait_until

from spark_zmq import procstat
from spark_zmq.ingest.spool_layout import LOCK_FILE

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _offsets(value):
    return json.loads(value) if isinstance(value, str) else value


def _parquet_query(spark, endpoint, spool_dir, tmp_path, **options):
    reader = spark.readStream.format("zmq").option("endpoints", "@" + endpoint).option("spoolDir", spool_dir)
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .selectExpr("offset", "cast(value as string) as value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _processed(query) -> int:
    """Rows the query has processed so far, from its progress (no Spark job needed)."""
    return sum(p["numInputRows"] for p in query.recentProgress)


def _written(spark, tmp_path) -> int:
    path = tmp_path / "out"
    if not (path / "_spark_metadata").exists():
        return 0
    return spark.read.schema("offset long, value string").parquet(str(path)).count()


def _assert_exactly_once_and_caught_up(spark, query, tmp_path, sent, min_fraction=0.9):
    """Wait until the restarted query is quiescent (everything received is processed and
    nothing new arrived for two seconds), then check that the output holds offsets
    0..end-1 each exactly once, with distinct payloads."""
    seen = {"end": None, "since": 0.0}

    def quiescent():
        progress = query.lastProgress
        if not progress or not progress["sources"][0]["latestOffset"]:
            return None
        source = progress["sources"][0]
        latest, end = _offsets(source["latestOffset"]), _offsets(source["endOffset"])
        if not latest or not end:  # a trigger before the reader's first offset call
            return None
        if latest.pop("lag")["records"] or latest != end:  # "lag": what is in no planned batch
            return None
        if end != seen["end"]:
            seen.update(end=end, since=time.monotonic())
            return None
        if time.monotonic() - seen["since"] < 2.0 or _written(spark, tmp_path) != int(end["0"]):
            return None
        return end

    end = int(wait_until(quiescent, 120, "the restarted query to catch up", interval=0.5)["0"])
    out = spark.read.schema("offset long, value string").parquet(str(tmp_path / "out"))
    stats = out.selectExpr(
        "count(*)", "count(distinct offset)", "min(offset)", "max(offset)", "count(distinct value)"
    ).first()
    assert tuple(stats) == (end, end, 0, end - 1, end), f"not exactly once: {stats} for end offset {end}"
    # ZeroMQ loses what sat in buffers when the receiver died: small, but measured.
    print(f"received {end} of {sent} messages across the failure ({sent - end} lost in ZeroMQ buffers)")
    assert end >= min_fraction * sent, f"received only {end} of {sent} messages"
    return end


def test_stop_and_restart_from_checkpoint_while_producer_keeps_sending(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total = 40_000
    producer = Producer(endpoint, [b"m-%d" % i for i in range(total)], rate=4_000)
    first = _parquet_query(spark, endpoint, spool_dir, tmp_path)
    try:
        wait_until(lambda: first.recentProgress, 60, "the first query's first trigger")
        producer.start()
        wait_until(lambda: _processed(first) > 2_000, 120, "some output before the stop")
        assert producer.is_alive(), "the producer should still be sending when the query stops"
        first.stop()
        second = _parquet_query(spark, endpoint, spool_dir, tmp_path)
        producer.finish()
        _assert_exactly_once_and_caught_up(spark, second, tmp_path, total)
    finally:
        stop_all(spark.streams.active)


def _reader_of(spool_dir: str, receivers: str) -> int:
    """The driver-side process that hosts the stream reader: it owns the spool (threads),
    or it is the parent of the receiver process (processes)."""
    if receivers == "threads":
        return reader_pid(spool_dir)
    with open(os.path.join(spool_dir, "receiver-0.state")) as f:
        child = json.load(f)["pid"]
    parent = procstat.parent_of(child)
    assert parent is not None, f"receiver process {child} is gone"
    return parent


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_kill_driver_side_reader_process_and_restart(spark, free_port, spool_dir, tmp_path, receivers):
    """``kill -9`` of the reader's process while a producer sends: with receivers in it
    (threads) what its socket queues held is lost; with receiver processes nothing is
    (they keep receiving, and the restarted query attaches once the dead reader's lease
    lapses)."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total = 40_000
    producer = Producer(endpoint, [b"k-%d" % i for i in range(total)], rate=4_000)
    first = _parquet_query(spark, endpoint, spool_dir, tmp_path, receivers=receivers)
    try:
        wait_until(lambda: first.recentProgress, 60, "the first query's first trigger")
        producer.start()
        wait_until(lambda: _processed(first) > 2_000, 120, "some output before the kill")
        assert producer.is_alive()
        os.kill(_reader_of(spool_dir, receivers), signal.SIGKILL)
        wait_until(lambda: not first.isActive, 120, "the query to fail after its reader died")
        second = _parquet_query(spark, endpoint, spool_dir, tmp_path, receivers=receivers)
        producer.finish()
        _assert_exactly_once_and_caught_up(
            spark, second, tmp_path, total, min_fraction=0.9 if receivers == "threads" else 1.0
        )
    finally:
        stop_all(spark.streams.active)


def test_backpressure_blocks_producer_bounds_memory_and_loses_nothing(spark, free_port, spool_dir, tmp_path):
    """A producer far faster than a throttled query: the spool stays within maxSpoolBytes,
    the receiving process's memory stays flat, the producer blocks, nothing is lost."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total, size = 100_000, 1024
    max_spool = 2 << 20
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("maxSpoolBytes", max_spool)
        .option("maxRowsPerTrigger", 10_000)
        .option("hwm", 100)
        .option("receivers", "threads")
        .load()
    )  # the receiving process measured is the reader's
    query = (
        df.selectExpr("offset", "length(value) as n")
        .writeStream.format("memory")
        .queryName("pressure")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    producer = Producer(endpoint, [b"%08d" % i + b"x" * (size - 8) for i in range(total)], hwm=100)
    try:
        wait_until(
            lambda: os.path.exists(os.path.join(spool_dir, LOCK_FILE)) and query.recentProgress, 60, "the receiver"
        )
        pid = reader_pid(spool_dir)
        rss_start = rss_bytes(pid)
        producer.start()
        peak_rss, peak_spool = rss_start, 0

        def done():
            nonlocal peak_rss, peak_spool
            peak_rss = max(peak_rss, rss_bytes(pid))
            peak_spool = max(peak_spool, dir_bytes(spool_dir))
            return spark.table("pressure").count() >= total

        wait_until(done, 240, f"{total} rows through a {max_spool}-byte spool", interval=0.2)
        producer.finish()
        stats = (
            spark.table("pressure").selectExpr("count(*)", "count(distinct offset)", "max(offset)", "min(n)").first()
        )
        assert tuple(stats) == (total, total, total - 1, size), "messages were lost or duplicated"
        assert producer.blocked > 0, "the producer never blocked: no backpressure happened"
        # Bound: the budget plus one segment being written and one receive batch.
        assert peak_spool <= max_spool + (1 << 20) + (8 << 20), f"spool grew to {peak_spool} bytes"
        growth = peak_rss - rss_start
        print(
            f"receiver RSS start {rss_start >> 20} MiB, peak {peak_rss >> 20} MiB; spool peak {peak_spool >> 10} KiB; "
            f"{total * size >> 20} MiB streamed; producer blocked {producer.blocked} times"
        )
        # Measured here: ~58 MiB of growth (allocator pools) whether 39 or 97 MiB are streamed:
        # flat in the volume, so the bound below is well under what was streamed.
        assert growth < 96 << 20 < total * size, (
            f"receiver memory grew by {growth >> 20} MiB while streaming {total * size >> 20} MiB"
        )
    finally:
        stop_all([query])


def test_full_spool_stop_while_the_receiver_waits_and_restart_twice(spark, free_port, spool_dir, tmp_path):
    """The reported loss: the spool fills (backpressure), the query is stopped while its
    receiver waits for room, and restarted from its checkpoint, twice. Every message the
    connector received reaches the output exactly once, with no 'not in the spool' error
    (recovery once indexed the empty segment left by the roll twice, and the next commit
    deleted the file being written)."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    total, size = 12_000, 1024
    producer = Producer(endpoint, [b"%08d" % i + b"f" * (size - 8) for i in range(total)], hwm=100)
    options = {"maxSpoolBytes": 1 << 20, "maxRowsPerTrigger": 400, "hwm": 100}
    query = _parquet_query(spark, endpoint, spool_dir, tmp_path, **options)
    try:
        wait_until(lambda: query.recentProgress, 60, "the first query's first trigger")
        producer.start()
        for round_ in range(2):
            seen = _processed(query)
            # the spool is full and the receiver waits: the producer is being held back
            wait_until(
                lambda query=query, seen=seen: producer.blocked > 0 and _processed(query) > seen + 800,
                120,
                f"backpressure and progress in round {round_}",
            )
            assert producer.is_alive(), "the producer should still be sending when the query stops"
            query.stop()
            query = _parquet_query(spark, endpoint, spool_dir, tmp_path, **options)
        producer.finish(180)
        # Under backpressure the producer blocks only once its queue *and* the loopback TCP
        # buffers (several MiB: thousands of 1 KiB messages) are full; what the kernel holds
        # when a stop closes the socket is beyond the connector's reach (measured here:
        # 5,766 of 12,000 over two stops). The guarantee under test is exactly-once.
        _assert_exactly_once_and_caught_up(spark, query, tmp_path, total, min_fraction=0.25)
        assert query.exception() is None
    finally:
        stop_all(spark.streams.active)


def _wait_for_failure(query, timeout=120) -> str:
    wait_until(lambda: not query.isActive, timeout, "the query to fail")
    error = query.exception()
    assert error is not None, "the query should have failed"
    return str(error)


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_a_recreated_spool_is_detected_and_never_renumbers(spark, free_port, spool_dir, tmp_path, receivers):
    """The spool directory is deleted between two runs of a query. By default the restart
    fails naming both spools; with failOnDataLoss=false it continues, numbering new
    messages after the checkpoint's offsets (an offset never names two messages), with
    receiver threads and with receiver processes. New messages are queued before the
    query binds; whether they reach its socket before the checkpoint check is up to timing
    (test_relay_protocol checks that ordering deterministically for receiver processes)."""
    import shutil

    endpoint = f"tcp://127.0.0.1:{free_port}"
    first_batch = Producer(endpoint, [b"a-%d" % i for i in range(500)])
    query = _parquet_query(spark, endpoint, spool_dir, tmp_path, receivers=receivers)
    try:
        wait_until(lambda: query.recentProgress, 60, "the first trigger")
        first_batch.start()
        wait_until(lambda: _processed(query) >= 500, 120, "the first 500 messages")
        query.stop()
        first_batch.finish()
        shutil.rmtree(spool_dir)

        strict = _parquet_query(spark, endpoint, spool_dir, tmp_path, receivers=receivers)
        message = _wait_for_failure(strict)
        assert "refer to spool" in message and "failOnDataLoss" in message, message

        waiting = Producer(endpoint, [b"b-%d" % i for i in range(300)])  # queued before the query binds
        waiting.start()
        relaxed = _parquet_query(spark, endpoint, spool_dir, tmp_path, failOnDataLoss="false", receivers=receivers)
        wait_until(lambda: relaxed.recentProgress, 60, "the relaxed query's first trigger")
        wait_until(lambda: _written(spark, tmp_path) >= 800, 120, "the new messages in the output")
        out = spark.read.schema("offset long, value string").parquet(str(tmp_path / "out"))
        stats = out.selectExpr("count(*)", "count(distinct offset)", "count(distinct value)").first()
        assert tuple(stats) == (800, 800, 800), f"an offset was reused for a different message: {stats}"
        new_offsets = [r.offset for r in out.where("value like 'b-%'").collect()]
        assert min(new_offsets) >= 500, "the recreated spool must number after the checkpoint"
        assert relaxed.exception() is None
    finally:
        stop_all(spark.streams.active)


def test_a_checkpoint_behind_the_spool_follows_fail_on_data_loss(spark, free_port, spool_dir, tmp_path):
    """An old copy of a checkpoint, after the spool released what it points at: an error
    naming the offsets by default; with failOnDataLoss=false the query continues from the
    spool and the skipped messages are counted in its progress."""
    import shutil

    endpoint = f"tcp://127.0.0.1:{free_port}"
    size = 1024
    query = _parquet_query(spark, endpoint, spool_dir, tmp_path, maxSpoolBytes=1 << 20)
    try:
        wait_until(lambda: query.recentProgress, 60, "the first trigger")
        Producer(endpoint, [b"%08d" % i + b"o" * (size - 8) for i in range(300)]).start()
        wait_until(lambda: _processed(query) >= 300, 120, "the first 300 messages")
        query.stop()
        shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt-old")
        query = _parquet_query(spark, endpoint, spool_dir, tmp_path, maxSpoolBytes=1 << 20)
        wait_until(lambda: query.recentProgress, 60, "the second run's first trigger")
        # 1 MiB segments: 3,000 more 1 KiB messages fill and release a few of them
        Producer(endpoint, [b"%08d" % i + b"n" * (size - 8) for i in range(300, 3300)]).start()
        wait_until(lambda: _processed(query) >= 3000, 120, "the next 3,000 messages")
        query.stop()
        shutil.rmtree(tmp_path / "ckpt")
        shutil.copytree(tmp_path / "ckpt-old", tmp_path / "ckpt")

        strict = _parquet_query(spark, endpoint, spool_dir, tmp_path, maxSpoolBytes=1 << 20)
        Producer(endpoint, [b"late"]).start()
        message = _wait_for_failure(strict)
        assert "spool" in message and "starts at" in message and "failOnDataLoss" in message, message

        relaxed = _parquet_query(spark, endpoint, spool_dir, tmp_path, maxSpoolBytes=1 << 20, failOnDataLoss="false")
        Producer(endpoint, [b"later"]).start()

        def lost_records():
            for progress in relaxed.recentProgress:
                latest = _offsets(progress["sources"][0]["latestOffset"] or "{}")
                if latest.get("dataLoss"):
                    return latest["dataLoss"]["records"]
            return None

        lost = wait_until(lost_records, 120, "the progress to report the skipped messages")
        assert 0 < lost < 3300
        assert relaxed.exception() is None
    finally:
        stop_all(spark.streams.active)
