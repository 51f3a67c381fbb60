"""A two-stage pipeline through Spark: an upstream query writes format=arrow with the zmq
sink (push) into a downstream query's source with committedOnly=true, and the downstream
table holds every upstream row exactly once, through:

* upstream task failures: a UDF fails the first run of a task in the middle of a batch,
  after the batch's other tasks and part of the failing one sent their rows (with a local
  master Spark does not retry a task, so the query fails and is restarted from its
  checkpoint, which runs the batch again with new runs);
* an upstream restart that commits a batch again: its last commit is removed from the
  upstream checkpoint (as a crash between the sink's commit and Spark's commit log leaves
  it), so Spark runs the batch once more and the sink sends its rows and a second commit
  record (the first stands);
* a stop and restart of the downstream query from its checkpoint while runs it had
  received were still waiting for their commit record (its receiver keeps spooling).

Without committedOnly the same pipeline delivers the failed runs' rows and the re-committed
batch's rows too (the test checks that copies were sent, so the option is what made it
exactly once).

The other tests: batch writes (``df.write``, batch -1 of its own write: alone, beside a
plain Arrow message, failed then retried, inside ``foreachBatch``) and a streaming stage
whose first commit record is lost and first data message sent twice on the way.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from zmqtest import stop_all, wait_until

FILES = 3
ROWS_PER_FILE = 3000
ROWS = FILES * ROWS_PER_FILE
FAIL_AT = ROWS_PER_FILE + 1700  # a row of the second file: the first run of its task fails there


@pytest.fixture
def small_arrow_batches(spark):
    """Rows reach the writer in Arrow batches of 500, so a failing run has sent part of its rows."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "500")
    yield
    spark.conf.set(key, before)


def upstream(spark, source: Path, endpoint: str, checkpoint: str, marker: str):
    """The writing query: files -> (UDF that fails once) -> 3 partitions -> zmq sink, arrow."""

    @F.udf("long")
    def fail_first_run(i):
        from pyspark import TaskContext

        # the task's first run fails at one row; Spark's attempt number says which run this is
        # within a job, the marker across the restart that runs the batch again
        if i == FAIL_AT and TaskContext.get().attemptNumber() == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure of an upstream task")
        return i

    return (
        spark.readStream.schema("id long, label string")
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(3)
        .select(fail_first_run("id").alias("id"), "label")
        .writeStream.format("zmq")
        .option("endpoints", endpoint)
        .option("format", "arrow")
        .option("rowsPerMessage", 200)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def downstream(spark, endpoint: str, spool_dir: str, out: str, checkpoint: str):
    return (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("committedOnly", "true")
        .option("spoolDir", spool_dir)
        .option("receiverLingerSeconds", 60)
        .schema("id long, label string")
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def offsets(value) -> dict:
    """A source's offsets in the progress (JSON text or already decoded): channel -> offset."""
    if isinstance(value, str):
        value = json.loads(value)
    return {k: v for k, v in (value or {}).items() if k.isdigit()}


def messages_spooled(query) -> int:
    progress = query.lastProgress
    if not progress:
        return 0
    return sum(offsets(progress["sources"][0].get("latestOffset")).values())


@pytest.mark.timeout(600)
def test_downstream_gets_every_upstream_row_once(spark, free_port, spool_dir, tmp_path, small_arrow_batches):
    source = tmp_path / "in"
    source.mkdir()
    for f in range(FILES):
        rows = (
            json.dumps({"id": f * ROWS_PER_FILE + i, "label": f"r{f * ROWS_PER_FILE + i}"})
            for i in range(ROWS_PER_FILE)
        )
        path = source / f"part-{f}.json"
        path.write_text("\n".join(rows))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # one file per batch, in this order
    endpoint = f"tcp://127.0.0.1:{free_port}"
    out, down_ckpt, up_ckpt = str(tmp_path / "out"), str(tmp_path / "down"), str(tmp_path / "up")
    marker = str(tmp_path / "failed-once")

    def table():
        try:
            return spark.read.parquet(out)
        except Exception:  # nothing written yet
            return None

    def count() -> int:
        t = table()
        return 0 if t is None else t.count()

    reader = downstream(spark, endpoint, spool_dir, out, down_ckpt)
    writers = []
    try:
        # upstream run 1: batch 0 commits, batch 1's first run fails part-way
        writers.append(upstream(spark, source, endpoint, up_ckpt, marker))
        with pytest.raises(Exception, match="injected failure"):
            writers[-1].awaitTermination(240)
        assert os.path.exists(marker), "the injected failure did not happen"
        wait_until(lambda: count() == ROWS_PER_FILE, 120, "batch 0's rows downstream")
        # the failed batch's runs are spooled and held: nothing of them reached the table
        wait_until(lambda: messages_spooled(reader) > ROWS_PER_FILE // 200 + 1, 60, "the failed runs spooled")
        assert count() == ROWS_PER_FILE

        # the downstream query stops and restarts from its checkpoint, holding those runs
        stop_all([reader])
        reader = downstream(spark, endpoint, spool_dir, out, down_ckpt)

        # upstream run 2, from its checkpoint: batch 1 again (new runs), then batch 2
        writers.append(upstream(spark, source, endpoint, up_ckpt, marker))
        assert writers[-1].awaitTermination(240)
        assert writers[-1].exception() is None
        wait_until(lambda: count() >= ROWS, 180, f"{ROWS} rows downstream")

        # upstream run 3: its last batch commits again, with new runs and a second record
        commits = Path(up_ckpt) / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        for name in (str(last), f".{last}.crc"):  # the entry and its checksum file
            if (commits / name).exists():
                (commits / name).unlink()
        spooled_before = messages_spooled(reader)
        writers.append(upstream(spark, source, endpoint, up_ckpt, marker))
        assert writers[-1].awaitTermination(240)
        assert writers[-1].exception() is None
        # the copies and their record reached the downstream spool, and were planned past
        spooled = [0]

        def planned_past_the_copies() -> bool:
            progress = reader.lastProgress or {}
            sources = progress.get("sources") or [{}]
            latest, end = offsets(sources[0].get("latestOffset")), offsets(sources[0].get("endOffset"))
            spooled[0] = messages_spooled(reader)
            return spooled[0] >= spooled_before + ROWS_PER_FILE // 200 + 1 and latest and end == latest

        wait_until(planned_past_the_copies, 120, "the re-committed batch's messages planned downstream")
        result = table()
        assert result.count() == ROWS
        assert result.select("id").distinct().count() == ROWS
        assert result.where(F.col("label") != F.concat(F.lit("r"), F.col("id").cast("string"))).count() == 0
        # copies were sent: the failed runs and the re-committed batch, beyond the rows kept
        assert spooled[0] > ROWS // 200 + 2 * FILES, f"only {spooled[0]} messages spooled: nothing was dropped"
    finally:
        stop_all(writers + [reader])


BATCH_WRITE_ROWS = 3000


@pytest.mark.timeout(300)
def test_a_batch_write_reaches_a_committed_only_query_once(spark, free_port, spool_dir, tmp_path, ctx):
    """``df.write`` is one writing micro-batch (-1) of its own ``write-<uuid>`` query: its
    committed runs reach the downstream query, each row once (they were all dropped when
    batch -1 counted as decided and forgotten), beside a plain Arrow message that
    ``DROPMALFORMED`` skips."""
    import pyarrow as pa
    import zmq

    endpoint = f"tcp://127.0.0.1:{free_port}"
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("committedOnly", "true")
        .option("mode", "DROPMALFORMED")
        .option("spoolDir", spool_dir)
        .schema("id long")
        .load()
        .writeStream.format("memory")
        .queryName("committed_batch_write")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        plain = pa.BufferOutputStream()
        with pa.ipc.new_stream(plain, pa.schema([("id", pa.int64())])) as stream:
            stream.write_batch(pa.record_batch([pa.array([-1], pa.int64())], names=["id"]))
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.SNDTIMEO, 30_000)
        push.connect(endpoint)
        push.send(plain.getvalue().to_pybytes())  # no spark_zmq metadata: malformed, skipped
        (
            spark.range(0, BATCH_WRITE_ROWS, numPartitions=2)
            .write.format("zmq")
            .mode("append")
            .option("endpoints", endpoint)
            .option("format", "arrow")
            .option("rowsPerMessage", 500)
            .save()
        )

        def count() -> int:
            return spark.sql("select count(*) from committed_batch_write").first()[0]

        wait_until(lambda: count() >= BATCH_WRITE_ROWS, 120, f"{BATCH_WRITE_ROWS} rows of the batch write downstream")
        # planned past the record: nothing more is coming, and nothing came twice
        wait_until(lambda: messages_spooled(reader) >= BATCH_WRITE_ROWS // 500 + 2, 60, "the record spooled")
        rows = spark.sql("select count(*), count(distinct id), min(id), max(id) from committed_batch_write").first()
        assert tuple(rows) == (BATCH_WRITE_ROWS, BATCH_WRITE_ROWS, 0, BATCH_WRITE_ROWS - 1)
    finally:
        stop_all([reader])


class Forwarder:
    """Between the stages: passes every message on, but loses the first commit record and
    sends the first data message twice (as the sink's resend after a broken connection can)."""

    def __init__(self, ctx, listen: str, downstream: str) -> None:
        import threading

        import zmq

        self.pull = ctx.socket(zmq.PULL)
        self.pull.bind(listen)
        self.push = ctx.socket(zmq.PUSH)
        self.push.setsockopt(zmq.SNDTIMEO, 30_000)
        self.push.connect(downstream)
        self.forwarded = self.lost_records = self.copies = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        from spark_zmq.source.committed import read_tag

        while not self.stop.is_set():
            if not self.pull.poll(100):
                continue
            message = self.pull.recv()
            kind = read_tag(message).kind
            if kind == "record" and not self.lost_records:
                self.lost_records += 1
                continue
            copies = 2 if kind == "data" and not self.copies else 1
            self.copies += copies - 1
            for _ in range(copies):
                self.push.send(message)
                self.forwarded += 1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.mark.timeout(300)
def test_a_lost_record_and_a_resent_message_between_streaming_stages(spark, spool_dir, tmp_path, ctx):
    """Through Spark: the upstream's first commit record is lost on the way and its first data
    message arrives twice; the next record (naming the batch before among its recent ones)
    decides the first batch, and the copy is delivered once."""
    from zmqtest import free_ports

    source = tmp_path / "in"
    source.mkdir()
    for f in range(2):
        path = source / f"part-{f}.json"
        path.write_text("\n".join(json.dumps({"id": f * 1000 + i}) for i in range(1000)))
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # one file per batch, in this order
    relay_port, down_port = free_ports(2)
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{down_port}")
        .option("format", "arrow")
        .option("committedOnly", "true")
        .option("spoolDir", spool_dir)
        .schema("id long")
        .load()
        .writeStream.format("memory")
        .queryName("committed_repair")
        .option("checkpointLocation", str(tmp_path / "down"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    forwarder = Forwarder(ctx, f"tcp://127.0.0.1:{relay_port}", f"tcp://127.0.0.1:{down_port}")
    writer = None
    try:
        writer = (
            spark.readStream.schema("id long")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .writeStream.format("zmq")
            .option("endpoints", f"tcp://127.0.0.1:{relay_port}")
            .option("format", "arrow")
            .option("rowsPerMessage", 250)
            .option("checkpointLocation", str(tmp_path / "up"))
            .trigger(availableNow=True)
            .start()
        )
        assert writer.awaitTermination(120)
        assert writer.exception() is None

        def count() -> int:
            return spark.sql("select count(*) from committed_repair").first()[0]

        wait_until(lambda: forwarder.lost_records == 1 and forwarder.copies == 1, 30, "a record lost, a copy sent")
        wait_until(lambda: messages_spooled(reader) >= forwarder.forwarded, 60, "every forwarded message spooled")
        wait_until(lambda: count() >= 2000, 120, "2000 rows downstream")

        def planned_everything() -> bool:
            sources = (reader.lastProgress or {}).get("sources") or [{}]
            latest, end = offsets(sources[0].get("latestOffset")), offsets(sources[0].get("endOffset"))
            return sum(end.values()) >= forwarder.forwarded and end == latest

        wait_until(planned_everything, 60, "every forwarded message planned")
        rows = spark.sql("select count(*), count(distinct id) from committed_repair").first()
        assert tuple(rows) == (2000, 2000)
    finally:
        forwarder.close()
        stop_all([q for q in (writer, reader) if q is not None])


@pytest.mark.timeout(300)
def test_a_failed_batch_write_then_its_retry_reach_a_committed_only_query_once(
    spark, free_port, spool_dir, tmp_path, small_arrow_batches
):
    """A ``df.write`` that fails part-way is aborted by Spark: its empty commit record tells
    the reading query that none of its messages counts, so the retry (a new write) is
    delivered at once, each row once, instead of waiting behind the failed write's messages."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    # a query held by an undecided write plans no batch, so its progress (what the test reads
    # of its spool) is refreshed only at this interval (10 s by default)
    idle_progress = "spark.sql.streaming.noDataProgressEventInterval"
    before = spark.conf.get(idle_progress)
    spark.conf.set(idle_progress, "200ms")
    try:
        reader = (
            spark.readStream.format("zmq")
            .option("endpoints", "@" + endpoint)
            .option("format", "arrow")
            .option("committedOnly", "true")
            .option("spoolDir", spool_dir)
            .schema("id long")
            .load()
            .writeStream.format("memory")
            .queryName("committed_retried_write")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
    finally:
        spark.conf.set(idle_progress, before)

    # The failed write's messages must reach the reading query before its task fails (an
    # abort drops what a task still has queued): they are what would hold the query were the
    # aborted write's empty record missing. The failing row waits for a thread here to see
    # three of them spooled (the other task's 1,500 rows, 500 a message, run on meanwhile).
    spooled = str(tmp_path / "failed-write-spooled")
    stop = threading.Event()

    def mark_when_spooled() -> None:
        while not stop.is_set():
            if messages_spooled(reader) >= 3:
                open(spooled, "w").close()
                return
            stop.wait(0.05)

    @F.udf("long")
    def fail_late(i):
        if i == BATCH_WRITE_ROWS - 10:
            import time

            deadline = time.monotonic() + 60
            while not os.path.exists(spooled) and time.monotonic() < deadline:
                time.sleep(0.02)
            raise RuntimeError("injected failure of a batch write's task")
        return i

    def write(df):
        (
            df.write.format("zmq")
            .mode("append")
            .option("endpoints", endpoint)
            .option("format", "arrow")
            .option("rowsPerMessage", 500)
            .save()
        )

    watcher = threading.Thread(target=mark_when_spooled, daemon=True)
    watcher.start()
    try:
        rows = spark.range(0, BATCH_WRITE_ROWS, numPartitions=2)
        with pytest.raises(Exception, match="injected failure"):
            write(rows.select(fail_late("id").alias("id")))
        assert os.path.exists(spooled), "the failed write's messages had not reached the reading query when it failed"
        # its messages and its empty record reached the reading query
        wait_until(lambda: messages_spooled(reader) >= 4, 60, "the failed write's record spooled")
        write(rows)

        def count() -> int:
            return spark.sql("select count(*) from committed_retried_write").first()[0]

        wait_until(lambda: count() >= BATCH_WRITE_ROWS, 90, f"the retried write's {BATCH_WRITE_ROWS} rows")
        result = spark.sql("select count(*), count(distinct id) from committed_retried_write").first()
        assert tuple(result) == (BATCH_WRITE_ROWS, BATCH_WRITE_ROWS)
    finally:
        stop.set()
        stop_all([reader])


@pytest.mark.timeout(300)
def test_a_batch_write_inside_foreach_batch_reaches_a_committed_only_query(spark, free_port, spool_dir, tmp_path):
    """Inside ``foreachBatch`` a ``df.write`` runs with the streaming query's id and batch in
    its tasks' properties: its messages still name its own write (as its record does)."""
    source = tmp_path / "in"
    source.mkdir()
    (source / "part-0.json").write_text("\n".join(json.dumps({"id": i}) for i in range(1000)))
    endpoint = f"tcp://127.0.0.1:{free_port}"
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("committedOnly", "true")
        .option("spoolDir", spool_dir)
        .schema("id long")
        .load()
        .writeStream.format("memory")
        .queryName("committed_foreach_batch")
        .option("checkpointLocation", str(tmp_path / "down"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def write(df, batch_id):
        (
            df.write.format("zmq")
            .mode("append")
            .option("endpoints", endpoint)
            .option("format", "arrow")
            .option("rowsPerMessage", 250)
            .save()
        )

    writer = None
    try:
        writer = (
            spark.readStream.schema("id long")
            .json(str(source))
            .writeStream.foreachBatch(write)
            .option("checkpointLocation", str(tmp_path / "up"))
            .trigger(availableNow=True)
            .start()
        )
        assert writer.awaitTermination(120)
        assert writer.exception() is None
        wait_until(
            lambda: spark.sql("select count(*) from committed_foreach_batch").first()[0] >= 1000,
            60,
            "1000 rows downstream",
        )
        result = spark.sql("select count(*), count(distinct id) from committed_foreach_batch").first()
        assert tuple(result) == (1000, 1000)
    finally:
        stop_all([q for q in (writer, reader) if q is not None])
