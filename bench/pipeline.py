"""Pipelines and relay readers: Spark at two stages of a ZeroMQ pipeline, and several
queries reading one relay.

* ``two_stage``: an upstream query reads Arrow messages and writes them with the zmq sink
  (``format=arrow``, push) to a downstream query that reads them, with or without
  ``committedOnly``; rows/s from the producer's first message to the downstream's last
  row. Its baseline is the one-stage ingest of the same messages (``ingest.connector``).
* ``stage_latency``: per-row latency from the upstream's write to the downstream's Spark
  batch: the upstream stamps each row in its write task, just before the sink sends it;
  the downstream passes the stamp on to a collector (``latency.Collector``) through a zmq
  ``text`` sink. With and without ``committedOnly``: the cost of holding a batch's rows
  until its commit record has arrived.
* ``relay_readers``: one ``spark-zmq relay`` and ``readers`` queries reading it under their
  own ``relayReader``, concurrently in the one session; each query's rows/s.

Every query here runs in the bench's one SparkSession, concurrently where the scenario has
two (a pipeline's stages, two readers), as a user's deployment would run them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import latency
import pandas as pd
import payloads
from common import Producer, Relay, free_ports, wait_for_rows, wait_started, warm_up
from ingest import WARM_UP_MESSAGES

#: the columns the latency pipeline carries: the producer's text and the upstream's stamp
STAMPED_DDL = "value string, written double"


def _spool_options(reader, work: str, name: str):
    """A query's own spool, its receiver processes stopping with it (lingering ones would
    spin beside every contender that runs after)."""
    return reader.option("spoolDir", os.path.join(work, name)).option("receiverLingerSeconds", "0")


def _stop(*queries) -> None:
    """Each query once no trigger of it is running (``latency._settle``): stopping one in
    the middle of a write aborts it, which only adds errors to the log."""
    for query in queries:
        if query is not None:
            latency._settle(query)
            query.stop()


def two_stage(spark, count: int, rows: int, committed_only: bool) -> float:
    """Rows/s through two queries: the upstream reads ``count`` Arrow messages of ``rows``
    rows (the producer of ``ingest.connector``) and writes them with the zmq sink
    (``format=arrow``) to the downstream, which reads them (``committedOnly`` as given)
    into ``noop``. Timed from the producer's start to the micro-batch of the downstream
    that had every row, after a warm-up through both stages."""
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    in_port, mid_port = free_ports(2)
    downstream = upstream = None
    try:
        reader = (
            _spool_options(spark.readStream.format("zmq"), work, "down-spool")
            .option("endpoints", f"@tcp://127.0.0.1:{mid_port}")
            .option("format", "arrow")
            .schema(payloads.ARROW_DDL)
        )
        if committed_only:
            reader = reader.option("committedOnly", "true")
        downstream = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(work, "down"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_started(downstream)
        upstream = (
            _spool_options(spark.readStream.format("zmq"), work, "up-spool")
            .option("endpoints", f"@tcp://127.0.0.1:{in_port}")
            .option("format", "arrow")
            .schema(payloads.ARROW_DDL)
            .load()
            .writeStream.format("zmq")
            .option("endpoints", f"tcp://127.0.0.1:{mid_port}")
            .option("format", "arrow")
            .option("checkpointLocation", os.path.join(work, "up"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_started(upstream)
        endpoint = f"tcp://127.0.0.1:{in_port}"
        warm = warm_up(upstream, [endpoint], "arrow", rows, messages=WARM_UP_MESSAGES["arrow"])
        wait_for_rows(downstream, warm)
        producer = Producer(endpoint, count, "arrow", rows)
        producer.ready()
        started = producer.go()
        finished = wait_for_rows(downstream, warm + count * rows)
        producer.wait(60)
    finally:
        _stop(upstream, downstream)
    return count * rows / (finished - started)


def _stamp_udf():
    """A vectorised UDF giving each row the wall-clock time at which the upstream's write
    task evaluated it: what the sink sends next. Defined here and pickled by value, since
    bench/ is not on the Python workers' path."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("double")  # type: ignore[call-overload]
    def written(values: pd.Series) -> pd.Series:
        return pd.Series(time.time(), index=values.index)

    return written


def stage_latency(spark, rate: float, seconds: float, committed_only: bool) -> dict:
    """p50/p95/p99 (ms) of each row's time from the upstream's write to its arrival at a
    collector behind the downstream's micro-batch, at ``rate`` msgs/s of one-row ``text``
    messages for ``seconds`` after ``latency.WARM`` warm-up messages (not measured). The
    upstream stamps each row (``_stamp_udf``) and writes ``STAMPED_DDL`` as Arrow; the
    downstream (``committedOnly`` as given) sends the stamp on as text."""
    from pyspark import cloudpickle
    from pyspark.sql.functions import col

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    count = int(rate * seconds)
    collector = latency.Collector(latency.WARM + count)
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    in_port, mid_port = free_ports(2)
    downstream = upstream = None
    try:
        reader = (
            _spool_options(spark.readStream.format("zmq"), work, "down-spool")
            .option("endpoints", f"@tcp://127.0.0.1:{mid_port}")
            .option("format", "arrow")
            .schema(STAMPED_DDL)
        )
        if committed_only:
            reader = reader.option("committedOnly", "true")
        downstream = (
            reader.load()
            .select(col("written").cast("string").alias("value"))
            .writeStream.format("zmq")
            .option("endpoints", collector.endpoint)
            .option("format", "text")
            .option("checkpointLocation", os.path.join(work, "down"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_started(downstream)
        upstream = (
            _spool_options(spark.readStream.format("zmq"), work, "up-spool")
            .option("endpoints", f"@tcp://127.0.0.1:{in_port}")
            .option("format", "text")
            .load()
            .select("value", _stamp_udf()(col("value")).alias("written"))
            .writeStream.format("zmq")
            .option("endpoints", f"tcp://127.0.0.1:{mid_port}")
            .option("format", "arrow")
            .option("checkpointLocation", os.path.join(work, "up"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        wait_started(upstream)
        endpoint = f"tcp://127.0.0.1:{in_port}"
        warm_up(upstream, [endpoint], "stamped", rate, messages=latency.WARM)
        producer = Producer(endpoint, count, "stamped", rate)
        producer.go()
        collector.thread.join(seconds + 120)
        producer.wait(60)
        batches = [p for p in downstream.recentProgress if p["numInputRows"]]
    finally:
        _stop(upstream, downstream)
    what = f"pipeline latency run ({'with' if committed_only else 'without'} committedOnly)"
    return {**collector.percentiles(what), "messages": count, "rate": rate, "downstream_batches": len(batches)}


def latency_pair(spark, rate: float, seconds: float, reps: int) -> dict:
    """``stage_latency`` with and without ``committedOnly``, alternately ``reps`` times;
    medians of each one's percentiles, and the p50 and p99 with over without."""
    import statistics

    runs: dict[str, list[dict]] = {"committedOnly": [], "without committedOnly": []}
    for _ in range(reps):
        runs["committedOnly"].append(stage_latency(spark, rate, seconds, True))
        runs["without committedOnly"].append(stage_latency(spark, rate, seconds, False))
    out: dict = {"rate": rate, "messages": int(rate * seconds), "reps": reps}
    for name, measured in runs.items():
        out[name] = {key: statistics.median(r[key] for r in measured) for key in ("p50_ms", "p95_ms", "p99_ms")}
        out[name]["p50_runs_ms"] = [r["p50_ms"] for r in measured]
    for key in ("p50_ms", "p99_ms"):
        out[f"{key[:3]}_ratio"] = out["committedOnly"][key] / out["without committedOnly"][key]
    return out


def relay_readers(spark, count: int, rows: int, readers: int) -> list[float]:
    """Rows/s of each of ``readers`` queries reading one relay (``--format arrow``) under
    their own ``relayReader``, concurrently, into ``noop``: ``count`` Arrow messages of
    ``rows`` rows, each query timed from the producer's start to its micro-batch that had
    every row, after a warm-up that every query read."""
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    port, listen_port = free_ports(2)
    relay = Relay(
        f"@tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{listen_port}", os.path.join(work, "relay"), "pull", "arrow"
    )
    queries: list = []
    try:
        relay.wait_ready()
        for i in range(readers):
            queries.append(
                spark.readStream.format("zmq")
                .option("relays", relay.listen)
                .option("relayReader", f"reader-{i}")
                .option("format", "arrow")
                .schema(payloads.ARROW_DDL)
                .load()
                .writeStream.format("noop")
                .option("checkpointLocation", os.path.join(work, f"ckpt-{i}"))
                .trigger(processingTime="0 seconds")
                .start()
            )
        for query in queries:
            wait_started(query)
        endpoint = f"tcp://127.0.0.1:{port}"
        warm = warm_up(queries[0], [endpoint], "arrow", rows, messages=WARM_UP_MESSAGES["arrow"])
        for query in queries[1:]:
            wait_for_rows(query, warm)
        producer = Producer(endpoint, count, "arrow", rows)
        producer.ready()
        started = producer.go()
        finished = [wait_for_rows(query, warm + count * rows) for query in queries]
        producer.wait(60)
    finally:
        _stop(*queries)
        relay.stop()
    return [count * rows / (end - started) for end in finished]


class TwoReaders:
    """Two readers on one relay as two contenders of one comparison: ``first()`` runs them
    and returns the first query's rate, ``second()`` the other's from the same run."""

    def __init__(self, spark, count: int, rows: int) -> None:
        self.spark, self.count, self.rows = spark, count, rows
        self._second: float | None = None

    def first(self) -> float:
        first, self._second = relay_readers(self.spark, self.count, self.rows, 2)
        return first

    def second(self) -> float:
        assert self._second is not None, "second() reports the run first() made"
        second, self._second = self._second, None
        return second
