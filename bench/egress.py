"""Egress scenarios: ``df.write.format("zmq")`` vs a bare pyzmq PUSH loop sending the same
bytes, and vs a Python Arrow writer that discards its rows (Spark's ceiling).

Each returns messages/s (raw) or rows/s (arrow) over the receiving side's window: the
consumer process's first message to its last (for the discarding writer, its first batch
to the end of its last, across tasks). What a write costs outside that window (for Spark,
a write job's fixed cost: planning, task launch, the commit; for the bare loop, about 0)
is elapsed minus window, recorded in ``FIXED_COSTS`` for the report, not mixed into the rate.

The consumer of one-row (``raw``) messages is libzmq's C program (``bench/c/thr.c``'s
``sink``) where it builds, else ``bench/consumer.py``: a Python receive loop takes about
1 us a message, as long as a bare pyzmq PUSH loop takes to send one, so with it every
contender ran at the consumer's speed and the ratios said nothing about the senders.
Arrow messages are few and large; their rows are counted by ``bench/consumer.py``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import cpu as cpu_tree
import curvekeys
import payloads
import pyarrow as pa
import wire
import zmq
from common import HERE, register_ceilings

#: one entry per measured write: contender, curve, messages, rows, elapsed_s, window_s,
#: fixed_s (elapsed minus window); run.py empties it before an egress scenario and files
#: it with the scenario's result (compare()'s contenders return only their rate)
FIXED_COSTS: list[dict] = []


def _record(contender: str, rows: int, messages: int, elapsed: float, window: float, cpu_s: float) -> float:
    """File one write's timing in ``FIXED_COSTS``; return its rate over ``window``.
    ``cpu_s``: the CPU seconds the write cost every process, the consumer's included
    (filed as ``cpu_us_per_msg``), less a write job's fixed CPU where Spark writes (that of a
    write of one message's rows just before), as the rate leaves out its fixed time."""
    FIXED_COSTS.append(
        {
            "contender": contender,
            "curve": bool(curvekeys.current()),
            "rows": rows,
            "messages": messages,
            "elapsed_s": elapsed,
            "window_s": window,
            "fixed_s": elapsed - window,
            "cpu_us_per_msg": cpu_s / messages * 1e6,
        }
    )
    return rows / max(window, 1e-9)


def consumer_name(kind: str) -> str:
    """Which consumer the egress scenarios of ``kind`` use here (for the report)."""
    if kind == "raw" and wire.missing() is None:
        return f"libzmq's C PULL ({wire.library()})"
    return "a pyzmq PULL loop in Python (bench/consumer.py)" + (
        f"; the C consumer is not here: {wire.missing()}" if kind == "raw" else ""
    )


class Consumer:
    """The consumer in its own process (``consumer_name``); ``endpoint`` once it has bound."""

    def __init__(self, kind: str, expected: int) -> None:
        if kind == "raw" and wire.missing() is None:
            env = dict(os.environ)
            if curvekeys.current():
                env["THR_CURVE_SECRET"] = curvekeys.server_secret_z85(curvekeys.current())
            self.proc = subprocess.Popen(
                wire.consumer_command(expected), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
            )
            self.endpoint = self.proc.stdout.readline().strip()
        else:
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "consumer.py"), kind, str(expected)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            self.endpoint = f"tcp://127.0.0.1:{int(self.proc.stdout.readline())}"

    def wait(self) -> tuple[float, float]:
        """Until it has everything; its ``time.time()`` at the first message and the last.
        Then it is told to go (it stayed bound for anything sent after the data), and
        ``cpu_s`` is the CPU it used in all, I/O threads included."""
        window = self.proc.stdout.readline().split()
        done = self.proc.stdout.readline().strip() == "done"
        self.proc.stdin.close()
        code, self.cpu_s = wire.reap(self.proc, 120)
        if not done or code != 0 or len(window) != 2:
            raise RuntimeError("the benchmark consumer did not receive everything")
        return float(window[0]), float(window[1])


def bare_push(count: int, kind: str, arg: int) -> float:
    """Messages (raw) or rows (arrow, ``count`` rows in messages of ``arg`` rows) per second
    over the consumer's window; elapsed: the first send to ``Context.term``'s return."""
    messages = count if kind == "raw" else count // arg
    payload = payloads.raw(arg) if kind == "raw" else payloads.arrow_message(arg)
    consumer = Consumer(kind, count)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 100_000)
    if curvekeys.current():
        curvekeys.secure_client(push, curvekeys.current())
    push.connect(consumer.endpoint)
    cpu_before = _own_cpu()  # this process: the loop and libzmq's I/O thread
    started = time.time()
    for _ in range(messages):
        push.send(payload, copy=len(payload) < 65536)
    push.close(linger=-1)
    context.term()
    elapsed = time.time() - started
    sender_cpu = _own_cpu() - cpu_before
    first, last = consumer.wait()
    return _record("bare pyzmq PUSH", count, messages, elapsed, last - first, sender_cpu + consumer.cpu_s)


def _own_cpu() -> float:
    """CPU seconds this process has used, every thread's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _frame(spark, count: int, kind: str, arg: int):
    if kind == "raw":
        df = spark.range(count).selectExpr(f"repeat('x', {arg}) AS value").coalesce(1)
    else:
        df = spark.createDataFrame(pa.Table.from_batches([payloads.arrow_batch(arg)] * (count // arg)))
    df = df.cache()
    df.count()
    return df


def connector(spark, count: int, kind: str, arg: int) -> float:
    """``df.write.format("zmq")`` of a cached DataFrame: ``raw`` values of ``arg`` bytes,
    or the Arrow scenario's rows in messages of ``arg`` rows."""
    df = _frame(spark, count, kind, arg)
    _zmq_write(df.limit(arg), kind, arg, arg)  # warm-up: Python workers started, modules imported
    fixed: dict = {}
    _zmq_write(df.limit(arg), kind, arg, arg, fixed)  # a write job's fixed CPU, left out of cpu_s below
    timing: dict = {}
    rate = _zmq_write(df, kind, arg, count, timing)
    df.unpersist()
    _record(
        "connector",
        count,
        count if kind == "raw" else count // arg,
        timing["elapsed"],
        timing["window"],
        timing["cpu_s"] - fixed["cpu_s"],
    )
    return rate


def _zmq_write(df, kind: str, arg: int, expected: int, timing: dict | None = None) -> float:
    """One ``save()`` into a consumer; ``expected`` rows per second over the consumer's
    window. ``timing`` gets ``elapsed`` (the whole ``save()``), ``window`` and ``cpu_s``
    (what the save cost Spark's JVM, its Python workers and the consumer)."""
    consumer = Consumer(kind, expected)
    spark_side = cpu_tree.snapshot()
    started = time.time()
    writer = (
        df.write.format("zmq")
        .mode("append")
        .option("endpoints", consumer.endpoint)
        .option("format", kind)
        .option("rowsPerMessage", str(arg))
    )
    if curvekeys.current():
        writer = writer.options(**curvekeys.sink_options(curvekeys.current()))
    writer.save()
    elapsed = time.time() - started
    spark_cpu = cpu_tree.used(spark_side, cpu_tree.snapshot(follow=spark_side), lambda p: p.pid != consumer.proc.pid)
    first, last = consumer.wait()
    if timing is not None:
        timing.update(elapsed=elapsed, window=last - first, cpu_s=spark_cpu + consumer.cpu_s)
    return expected / max(last - first, 1e-9)


def discard_writer(spark, count: int, kind: str, arg: int) -> float:
    """The same DataFrame into a Python Arrow writer that drops it: what any Python sink
    pays before it sends a byte. Rate over its first batch to the end of its last (the
    writer's commit files them, option ``timing``); elapsed: the whole ``save()``."""
    register_ceilings(spark)
    df = _frame(spark, count, kind, arg)
    df.limit(arg).write.format("bench_discard").mode("append").save()  # warm-up
    spark_side = cpu_tree.snapshot()
    df.limit(arg).write.format("bench_discard").mode("append").save()  # a write job's fixed CPU, left out below
    fixed_cpu = cpu_tree.used(spark_side, cpu_tree.snapshot(follow=spark_side))
    timing = os.path.join(tempfile.mkdtemp(prefix="spark-zmq-bench-"), "timing.json")
    spark_side = cpu_tree.snapshot()
    started = time.time()
    df.write.format("bench_discard").mode("append").option("timing", timing).save()
    elapsed = time.time() - started
    spark_cpu = cpu_tree.used(spark_side, cpu_tree.snapshot(follow=spark_side)) - fixed_cpu
    df.unpersist()
    with open(timing) as f:
        window = json.load(f)
    return _record(
        "Python Arrow writer, discarding",
        count,
        count if kind == "raw" else count // arg,
        elapsed,
        window["last"] - window["first"],
        spark_cpu,
    )
