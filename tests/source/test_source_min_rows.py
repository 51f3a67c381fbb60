"""minRowsPerTrigger and maxTriggerDelay through Spark: a micro-batch waits for enough rows
or for the delay, whichever comes first, with maxRowsPerTrigger still capping it, and
Trigger.AvailableNow is never held back (the rule itself: ``planner.holds_back``)."""

from __future__ import annotations

from datetime import datetime

import pytest
from zmqtest import Producer, numbered, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

MIN_ROWS = 500
DELAY_S = 3.0


def _when(progress) -> float:
    """A progress report's trigger time, in seconds since the epoch."""
    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _data_batches(query, total: int) -> list[tuple[float, int]]:
    """(trigger time, input rows) of every batch with rows, once they account for ``total``."""

    def found():
        batches = [(_when(p), p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]
        return batches if sum(rows for _, rows in batches) >= total else None

    return wait_until(found, 60, f"progress reports covering {total} rows")


def test_a_batch_below_min_rows_waits_for_max_trigger_delay_and_max_rows_still_caps(
    spark, free_port, spool_dir, tmp_path
):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("minRowsPerTrigger", MIN_ROWS)
        .option("maxTriggerDelay", f"{DELAY_S:g}s")
        .option("maxRowsPerTrigger", 1000)
        .load()
    )
    query = (
        df.select("offset")
        .writeStream.format("memory")
        .queryName("minrows")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:

        def visible():
            return spark.table("minrows").count()

        # wave A: 100 rows, fewer than the minimum: they wait for the delay
        Producer(endpoint, numbered(100)).start()
        wait_until(lambda: visible() >= 100, 60, "wave A")
        # wave B, sent right after wave A's batch: it waits for the delay again
        sent_b = Producer(endpoint, numbered(100, start=100))
        sent_b.start()
        sent_b.finish()
        wait_until(lambda: visible() >= 200, 60, "wave B")
        # wave C: enough rows at once, so batches go without waiting, each capped at 1000 rows
        sent_c = Producer(endpoint, numbered(2500, start=200))
        sent_c.start()
        sent_c.finish()
        wait_until(lambda: visible() >= 2700, 60, "wave C")
        batches = _data_batches(query, 2700)
        assert sum(rows for _, rows in batches) == 2700 and visible() == 2700
        assert max(rows for _, rows in batches) <= 1000, batches
        small = [(i, batch) for i, batch in enumerate(batches) if batch[1] < MIN_ROWS]
        assert len(small) >= 2, f"waves A and B should each be a batch below {MIN_ROWS} rows: {batches}"
        for i, (when, rows) in small[1:]:
            waited = when - batches[i - 1][0]
            # the trigger that planned it began at most a polling interval before the delay passed
            assert waited >= DELAY_S - 0.2, f"a batch of {rows} rows came {waited:.2f} s after the last: {batches}"
        before, wave_c = 0, []
        for _, rows in batches:
            if before >= 200:
                wave_c.append(rows)
            before += rows
        assert sum(wave_c) == 2500 and len(wave_c) >= 3, batches
    finally:
        stop_all([query])


def test_trigger_available_now_is_never_held_back_by_min_rows(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    producer = Producer(endpoint, numbered(300))  # queued at the producer before the query binds
    producer.start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("minRowsPerTrigger", MIN_ROWS)
        .option("timeout", "1")
        .load()
    )  # maxTriggerDelay: 15min
    query = (
        df.select("offset")
        .writeStream.format("memory")
        .queryName("minrows_now")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(90), "AvailableNow waited for minRowsPerTrigger"
        assert query.exception() is None
        producer.finish()
        assert spark.table("minrows_now").count() == 300
    finally:
        stop_all([query])
