"""Latency: a producer at a fixed rate stamps each message with its send time; a query
(pull ``text`` -> push ``text``, ``processingTime="0 seconds"``) passes it through; a
collector notes when each arrives. ZeroMQ in, Spark, ZeroMQ out: the whole path."""

from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import zmq

from common import Producer, free_port, wait_started, warm_up

WARM = 50_000  # 5 s at 10,000 msgs/s: the JVM compiles its hot paths before the measured run


def connector(spark, rate: float, seconds: float) -> dict:
    count = int(rate * seconds)
    expected = WARM + count
    collector = zmq.Context.instance().socket(zmq.PULL)
    out_port = collector.bind_to_random_port("tcp://127.0.0.1")
    latencies: list[float] = []

    def collect() -> None:
        while len(latencies) < expected and collector.poll(60_000):
            stamp = float(collector.recv())
            latencies.append(time.time() - stamp)

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    in_port = free_port()
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    query = (spark.readStream.format("zmq").option("endpoints", f"@tcp://127.0.0.1:{in_port}").option("format", "text")
             .option("spoolDir", os.path.join(work, "spool")).load().select("value")
             .writeStream.format("zmq").option("endpoints", f"tcp://127.0.0.1:{out_port}").option("format", "text")
             .option("checkpointLocation", os.path.join(work, "ckpt")).trigger(processingTime="0 seconds").start())
    try:
        wait_started(query)
        warm_up(query, [f"tcp://127.0.0.1:{in_port}"], "stamped", rate, messages=WARM)
        proc = Producer(f"tcp://127.0.0.1:{in_port}", count, "stamped", rate)
        first_batch = len(query.recentProgress)
        proc.go()
        thread.join(seconds + 120)
        proc.wait(60)
        batch_ms = _median_batch_ms(query.recentProgress[first_batch:])
    finally:
        query.stop()
        collector.close(0)
    if len(latencies) < expected:
        raise RuntimeError(f"latency run: {len(latencies)} of {expected} messages came back")
    steady = np.array(latencies[WARM:]) * 1000  # the warm-up messages are not measured
    return {"p50_ms": float(np.percentile(steady, 50)), "p95_ms": float(np.percentile(steady, 95)),
            "p99_ms": float(np.percentile(steady, 99)), "messages": count, "rate": rate,
            "batch_ms": batch_ms, "rate_source_batch_ms": rate_source_batch_ms(spark, rate, seconds)}


def _median_batch_ms(progress: list[dict]) -> float:
    return float(np.median([p["durationMs"]["triggerExecution"] for p in progress if p["numInputRows"]]))


def rate_source_batch_ms(spark, rate: float, seconds: float) -> float:
    """The floor under any micro-batch latency here: Spark's built-in ``rate`` source at the
    same rate into ``noop``, ``processingTime="0 seconds"``; median micro-batch duration
    (offset log, planning, one task, commit log) once it has run for ``seconds``."""
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    query = (spark.readStream.format("rate").option("rowsPerSecond", int(rate)).load().writeStream.format("noop")
             .option("checkpointLocation", os.path.join(work, "ckpt")).trigger(processingTime="0 seconds").start())
    try:
        wait_started(query)
        time.sleep(seconds)  # a fixed-length observation window, not a synchronisation
        return _median_batch_ms(query.recentProgress[len(query.recentProgress) // 2:])
    finally:
        query.stop()
