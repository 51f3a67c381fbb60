"""Checkpoint file managers on a local disk: what each micro-batch's offset and commit logs
cost, Spark's default against the one conf/spark-defaults.conf names.

Why: every micro-batch writes its offsets before it runs and its commit after, each as a
temporary file renamed into place. Spark's default manager renames through Hadoop's
FileContext, which on the local file system, without Hadoop's native library (pip's pyspark
has none), starts ``readlink`` processes to look for symbolic links on each rename; the
FileSystem manager renames with one ``rename(2)``. Both start a ``chmod`` per new file. A
connector query fed at a steady rate (pull, raw 100 B, into ``noop``) runs under each
manager in turn, the same number of seconds; the figures are medians over its micro-batches
of Spark's own ``durationMs`` (``walCommit``: the offset log, ``commitOffsets``: the commit
log, ``triggerExecution``: the whole micro-batch) and the JVM's CPU a micro-batch, the
processes it started included.
"""

from __future__ import annotations

import statistics
import threading
import time

import cpu as cpu_tree
import zmq
from common import CHECKPOINT_FILE_MANAGER, pull_to_noop, wait_started

KEY = "spark.sql.streaming.checkpointFileManagerClass"
#: (label, class): ``None`` is Spark's own choice (FileContext for ``file:``)
MANAGERS = (("Spark's default (FileContext)", None), ("FileSystem (conf/spark-defaults.conf)", CHECKPOINT_FILE_MANAGER))
#: micro-batches of each run left out of the medians: the query's first, which start it
SKIP = 5


def _feed(endpoint: str, rate: float, stop: threading.Event) -> None:
    """``rate`` 100-byte messages a second in bursts of 1 % of a second, until ``stop``."""
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(endpoint)
    burst, payload, tick = max(1, int(rate / 100)), b"x" * 100, time.monotonic()
    try:
        while not stop.is_set():
            for _ in range(burst):
                push.send(payload)
            tick += 0.01
            stop.wait(max(0.0, tick - time.monotonic()))
    finally:
        push.close(0)


def run(spark, manager: str | None, rate: float, seconds: float) -> dict:
    """One connector query under ``manager`` (``None``: Spark's own choice) fed ``rate``
    messages a second; the medians of ``seconds`` of its micro-batches past the first ``SKIP``."""
    if manager is None:
        spark.conf.unset(KEY)
    else:
        spark.conf.set(KEY, manager)
    query, endpoint = pull_to_noop(spark, "spark-zmq-bench-ckpt-")
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(endpoint, rate, stop), daemon=True)
    try:
        wait_started(query)
        feeder.start()
        while len([p for p in query.recentProgress if p["numInputRows"]]) < SKIP:
            if query.exception() is not None:
                raise RuntimeError(f"the checkpoint query failed: {query.exception()}")
            time.sleep(0.05)
        first = query.lastProgress["batchId"]
        before = cpu_tree.snapshot()
        time.sleep(seconds)  # a measured window of wall-clock time, not a synchronisation
        # at least one whole micro-batch in the window: on a loaded machine a smoke run's
        # 0.3 s window could end before the first one did, leaving nothing to take medians of
        deadline = time.monotonic() + 60
        while query.lastProgress["batchId"] <= first and time.monotonic() < deadline:
            if query.exception() is not None:
                raise RuntimeError(f"the checkpoint query failed: {query.exception()}")
            time.sleep(0.05)
        after = cpu_tree.snapshot(follow=before)
        last = query.lastProgress["batchId"]
    finally:
        stop.set()
        query.stop()
        spark.conf.set(KEY, CHECKPOINT_FILE_MANAGER)  # the bench session's own setting
    progress = [p for p in query.recentProgress if first < p["batchId"] <= last]
    batches = max(1, last - first)

    def median(key: str) -> float:
        return statistics.median(p["durationMs"].get(key, 0) for p in progress) if progress else 0.0

    return {
        "micro_batches": batches,
        "trigger_ms": median("triggerExecution"),
        "offset_log_ms": median("walCommit"),
        "commit_log_ms": median("commitOffsets"),
        "add_batch_ms": median("addBatch"),
        "jvm_cpu_ms_per_batch": cpu_tree.by_role(before, after)["jvm"] * 1000 / batches,
    }


def measure(spark, rate: float = 10_000, seconds: float = 8.0, reps: int = 2) -> dict:
    """Each manager ``reps`` times, alternately; the medians of the runs' figures."""
    runs: dict[str, list[dict]] = {label: [] for label, _ in MANAGERS}
    for _ in range(reps):
        for label, manager in MANAGERS:
            runs[label].append(run(spark, manager, rate, seconds))
    medians = {label: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for label, rs in runs.items()}
    parts = [
        f"{label}: micro-batch {m['trigger_ms']:.0f} ms (offset log {m['offset_log_ms']:.0f}, commit log "
        f"{m['commit_log_ms']:.0f}), {m['micro_batches']:.0f} micro-batches, JVM CPU "
        f"{m['jvm_cpu_ms_per_batch']:.0f} ms a micro-batch"
        for label, m in medians.items()
    ]
    line = (
        f"checkpoint file manager on a local disk (a connector query at {rate:,.0f} msgs/s, {seconds:.0f} s "
        f"each, {reps} runs of each alternately, medians): " + "; ".join(parts)
    )
    return {"scenario": "checkpoint-manager", "runs": runs, "median": medians, "notes": [line]}
