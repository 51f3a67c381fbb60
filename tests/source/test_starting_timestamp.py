"""startingTimestamp through Spark: a new query starts at the first message received at or
after it that the spool holds (its own spool with receivers=threads; a receiver process's,
asked over the relay protocol, with receivers=processes), taking precedence over
startingOffsets; messages received after it that were already freed are data loss."""

from __future__ import annotations

import os

import pytest
from zmqtest import run_available_now

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.spool import Spool

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

T0_MS = 1_767_225_600_000  # wave 1 was received then, wave 2 five seconds later
BETWEEN_MS = T0_MS + 2_500


def _prefill(spool_dir: str, receivers: str, *, free_first: bool = False) -> None:
    """The spool a query finds: wave 1 (``a0``..``a9``) and wave 2 (``b0``..``b19``), each in
    a segment of its own; ``free_first``: wave 1 and 2 freed (as after a commit), a wave 3 held."""
    where = os.path.join(spool_dir, "receiver-0") if receivers == "processes" else spool_dir
    spool = Spool(where, 1)
    log = spool.channels[0]
    waves = [(b"a", 10, T0_MS), (b"b", 20, T0_MS + 5_000)] + ([(b"c", 5, T0_MS + 9_000)] if free_first else [])
    for prefix, count, at_ms in waves:
        log.append(messages_to_batch([prefix + b"%d" % i for i in range(count)], None, "raw", at_ms * 1000))
        log.roll()
    if free_first:
        log.release_before(30)
    spool.close()


def _reader(spark, free_port, spool_dir, receivers, **options):
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{free_port}")
        .option("spoolDir", spool_dir)
        .option("receivers", receivers)
        .option("timeout", "1")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load().selectExpr("cast(value as string) as value")


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_starting_timestamp_between_two_waves_reads_only_the_second(spark, free_port, spool_dir, tmp_path, receivers):
    _prefill(spool_dir, receivers)
    df = _reader(spark, free_port, spool_dir, receivers, startingOffsets="earliest", startingTimestamp=BETWEEN_MS)
    rows, error = run_available_now(spark, df, tmp_path, f"since_{receivers}")
    assert error is None, error
    assert sorted(r.value for r in rows) == sorted("b%d" % i for i in range(20))


def test_freed_messages_after_the_timestamp_are_data_loss_per_fail_on_data_loss(spark, free_port, spool_dir, tmp_path):
    _prefill(spool_dir, "processes", free_first=True)
    df = _reader(spark, free_port, spool_dir, "processes", startingTimestamp=BETWEEN_MS)
    rows, error = run_available_now(spark, df, tmp_path, "since_freed")
    assert rows is None and "startingTimestamp" in error and "failOnDataLoss" in error and "10..30" in error, error
    df = _reader(spark, free_port, spool_dir, "processes", startingTimestamp=BETWEEN_MS, failOnDataLoss="false")
    rows, error = run_available_now(spark, df, tmp_path, "since_freed_skip")
    assert error is None, error
    assert sorted(r.value for r in rows) == sorted("c%d" % i for i in range(5))  # the oldest held on
