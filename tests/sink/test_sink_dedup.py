"""A write that fails halfway and runs again: its Arrow messages let the reader keep each row once.

The writing query (a streaming file source through the sink, push + arrow) fails on an
injected error in the middle of its first batch, after part of the batch was sent; run
again from its checkpoint, it sends the whole batch again. The reader deduplicates by
the metadata every Arrow message carries: a second Spark query (source pull + arrow with
``includeHeaders``, streaming ``dropDuplicates``), and the Python consumer the README
shows (``docs/examples/dedup_consumer.py``, which keeps the runs the driver's commit
record names). Both end with every row exactly once, and both saw copies (so the
deduplication is what made it exactly once). The first run's writer sees the injected
failure as a normal end of its input (Spark's Python writer cannot tell them apart): its
messages end with ``last=true`` after fewer rows than the run Spark keeps, which is why
the consumer trusts the commit record and not the flag.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import threading
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from zmqtest import stop_all, wait_until

from spark_zmq.patterns import Pull

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "dedup_consumer.py"
ROWS_PER_FILE = 6000
FILES = 2
ROWS = ROWS_PER_FILE * FILES
FAIL_AT = 4500  # a row of the first file: the first run fails there, after sending part of the batch
KEY_FIELDS = ("spark_zmq.query_id", "spark_zmq.batch_id", "spark_zmq.partition", "spark_zmq.sequence", "spark_zmq.row")


def load_example():
    spec = importlib.util.spec_from_file_location("dedup_consumer", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_failing_once_then_again(spark, tmp_path: Path, endpoint: str) -> None:
    """Run the writing query until its injected failure, then again from its checkpoint
    until it has written everything."""
    source = tmp_path / "in"
    source.mkdir()
    for f in range(FILES):
        rows = (
            json.dumps({"id": f * ROWS_PER_FILE + i, "label": f"r{f * ROWS_PER_FILE + i}"})
            for i in range(ROWS_PER_FILE)
        )
        (source / f"part-{f}.json").write_text("\n".join(rows))
    marker = str(tmp_path / "failed-once")

    @F.udf("long")
    def fail_once(i):
        if i == FAIL_AT and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("injected failure of the writing task")
        return i

    checkpoint = str(tmp_path / "writer")

    def start():
        return (
            spark.readStream.schema("id long, label string")
            .json(str(source))
            .select(fail_once("id").alias("id"), "label")
            .writeStream.format("zmq")
            .option("endpoints", endpoint)
            .option("format", "arrow")
            .option("rowsPerMessage", 100)
            .option("checkpointLocation", checkpoint)
            .start()
        )

    first = start()
    try:
        with pytest.raises(Exception, match="injected failure"):
            first.awaitTermination(180)
    finally:
        stop_all([first])
    assert os.path.exists(marker), "the injected failure did not happen"
    second = start()
    try:
        second.processAllAvailable()
    finally:
        stop_all([second])


@pytest.fixture
def small_arrow_batches(spark):
    """Rows reach the writer in Arrow batches of 500, so the first run has sent several
    messages when it fails."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "500")
    yield
    spark.conf.set(key, before)


@pytest.mark.timeout(400)
def test_spark_reader_drops_a_rerun_batchs_copies_by_the_message_headers(
    spark, free_port, spool_dir, tmp_path, small_arrow_batches
):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    rows = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("includeHeaders", "true")
        .option("spoolDir", spool_dir)
        .schema("id long, label string, headers map<string,string>")
        .load()
    )
    write_key = F.concat_ws("/", *[F.col("headers")[k] for k in KEY_FIELDS])
    deduplicated = rows.withColumn("write_key", write_key).dropDuplicates(["write_key"]).select("id", "label")
    reader = (
        deduplicated.writeStream.format("memory")
        .queryName("deduplicated")
        .option("checkpointLocation", str(tmp_path / "reader"))
        .start()
    )
    try:
        write_failing_once_then_again(spark, tmp_path, endpoint)
        wait_until(lambda: spark.table("deduplicated").count() >= ROWS, 180, f"{ROWS} rows deduplicated")
        reader.processAllAvailable()
        received = sum(p["numInputRows"] for p in reader.recentProgress)
        assert received > ROWS, "the failed first run sent nothing: nothing to deduplicate"
        table = spark.table("deduplicated")
        assert table.count() == ROWS
        assert table.select("id").distinct().count() == ROWS
        assert table.where(F.col("label") != F.concat(F.lit("r"), F.col("id").cast("string"))).count() == 0
    finally:
        stop_all([reader])


@pytest.mark.timeout(400)
def test_the_readmes_python_consumer_delivers_each_row_once(spark, free_port, tmp_path, small_arrow_batches):
    example = load_example()
    outputs = example.TaskOutputs()
    endpoint = f"tcp://127.0.0.1:{free_port}"
    delivered: list[int] = []
    messages = [0]
    stop = threading.Event()

    def receive() -> None:
        with Pull("@" + endpoint) as pull:
            while not stop.is_set():
                try:
                    message = pull.recv(timeout=0.2)
                except TimeoutError:
                    continue
                messages[0] += 1
                for table in outputs.add(message):
                    delivered.extend(table.column("id").to_pylist())

    thread = threading.Thread(target=receive, daemon=True)
    thread.start()
    try:
        write_failing_once_then_again(spark, tmp_path, endpoint)
        try:
            wait_until(lambda: len(delivered) >= ROWS, 120, f"{ROWS} rows delivered")
        except AssertionError:
            runs = {run: sum(t.num_rows for t in tables) for run, tables in outputs.waiting.items()}
            raise AssertionError(
                f"{len(delivered)} rows delivered; runs kept {outputs.kept}; "
                f"runs waiting for their commit record: {runs}"
            ) from None
    finally:
        stop.set()
        thread.join(30)
    assert sorted(delivered) == list(range(ROWS))
    assert messages[0] > ROWS // 100, "the failed first run sent nothing: nothing to deduplicate"


def test_the_docs_show_the_example_consumer_as_it_is():
    """The guarantees page's consumer is the tested file's class, word for word."""
    page = (ROOT / "docs" / "guarantees.md").read_text()
    source = EXAMPLE.read_text()
    block = source[source.index("class TaskOutputs") : source.index("\n\n\ndef consume")]
    blocks = re.findall(r"```python[^\n]*\n(.*?)```", page, re.S)
    assert any(block.strip() in b for b in blocks), (
        "docs/guarantees.md does not show TaskOutputs as docs/examples has it"
    )
