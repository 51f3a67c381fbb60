"""Memory under backpressure: a producer much faster than a throttled query. Measures the
peak memory of the driver-side receiver process against the configured bound, the spool's
peak size against ``maxSpoolBytes``, how long the producer was held back, and messages lost."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time

from common import Producer, free_port, wait_for_rows, wait_started

from spark_zmq.ingest.spool_layout import LOCK_FILE


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass
    return total


def connector(spark, count: int, size: int, spool_bytes: int, rows_per_trigger: int) -> dict:
    port = free_port()
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    spool = os.path.join(work, "spool")
    query = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{port}")
        .option("spoolDir", spool)
        .option("receiverLingerSeconds", "0")  # receivers stop with the query, not 5 min later
        .option("maxSpoolBytes", str(spool_bytes))
        .option("maxRowsPerTrigger", str(rows_per_trigger))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(work, "ckpt"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    peaks = {"rss": 0, "spool": 0}
    done = threading.Event()
    try:
        wait_started(query)
        # the receiving process owns the spool: the receiver process (receivers=processes,
        # the default) in receiver-0/, or the reader itself (threads) at the top
        lock = os.path.join(spool, "receiver-0", LOCK_FILE)
        with open(lock if os.path.exists(lock) else os.path.join(spool, LOCK_FILE)) as f:
            pid = int(f.read().strip())
        baseline = _rss(pid)

        def sample() -> None:
            while not done.is_set():
                peaks["rss"] = max(peaks["rss"], _rss(pid))
                peaks["spool"] = max(peaks["spool"], _dir_bytes(spool))
                done.wait(0.2)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.time()
        proc = Producer(f"tcp://127.0.0.1:{port}", count, "raw", size)
        proc.go()
        try:
            wait_for_rows(query, count, timeout=600)
        except TimeoutError:
            pass  # counted as lost below
        elapsed = time.time() - started
        proc.wait(60)
        done.set()
        sampler.join(5)
        end = query.lastProgress["sources"][0]["endOffset"]
    finally:
        done.set()
        query.stop()
    received = sum(int(v) for k, v in json.loads(end).items() if k.isdigit())  # channels ("spool" is its id)
    return {
        "messages": count,
        "payload_mb": count * size / 2**20,
        "max_spool_mb": spool_bytes / 2**20,
        "peak_spool_mb": peaks["spool"] / 2**20,
        "rss_growth_mb": (peaks["rss"] - baseline) / 2**20,
        "lost": count - received,
        "seconds": elapsed,
    }
