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
import subprocess
import sys
import tempfile
import time
from typing import Optional

import pyarrow as pa
import zmq

import curvekeys
import payloads
import wire
from common import HERE, register_ceilings

#: one entry per measured write: contender, curve, messages, rows, elapsed_s, window_s,
#: fixed_s (elapsed minus window); run.py empties it before an egress scenario and files
#: it with the scenario's result (compare()'s contenders return only their rate)
FIXED_COSTS: list[dict] = []


def _record(contender: str, rows: int, messages: int, elapsed: float, window: float) -> float:
    """File one write's timing in ``FIXED_COSTS``; return its rate over ``window``."""
    FIXED_COSTS.append({"contender": contender, "curve": bool(curvekeys.current()), "rows": rows,
                        "messages": messages, "elapsed_s": elapsed, "window_s": window, "fixed_s": elapsed - window})
    return rows / max(window, 1e-9)


def consumer_name(kind: str) -> str:
    """Which consumer the egress scenarios of ``kind`` use here (for the report)."""
    if kind == "raw" and wire.missing() is None:
        return f"libzmq's C PULL ({wire.library()})"
    return "a pyzmq PULL loop in Python (bench/consumer.py)" + (
        f"; the C consumer is not here: {wire.missing()}" if kind == "raw" else "")


class Consumer:
    """The consumer in its own process (``consumer_name``); ``endpoint`` once it has bound."""

    def __init__(self, kind: str, expected: int) -> None:
        if kind == "raw" and wire.missing() is None:
            env = dict(os.environ)
            if curvekeys.current():
                env["THR_CURVE_SECRET"] = curvekeys.server_secret_z85(curvekeys.current())
            self.proc = subprocess.Popen(wire.consumer_command(expected), stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=env)
            self.endpoint = self.proc.stdout.readline().strip()
        else:
            self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "consumer.py"), kind, str(expected)],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.endpoint = f"tcp://127.0.0.1:{int(self.proc.stdout.readline())}"

    def wait(self) -> tuple[float, float]:
        """Until it has everything; its ``time.time()`` at the first message and the last.
        Then it is told to go (it stayed bound for anything sent after the data)."""
        window = self.proc.stdout.readline().split()
        done = self.proc.stdout.readline().strip() == "done"
        self.proc.stdin.close()
        if not done or self.proc.wait(120) != 0 or len(window) != 2:
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
    started = time.time()
    for _ in range(messages):
        push.send(payload, copy=len(payload) < 65536)
    push.close(linger=-1)
    context.term()
    elapsed = time.time() - started
    first, last = consumer.wait()
    return _record("bare pyzmq PUSH", count, messages, elapsed, last - first)


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
    timing: dict = {}
    rate = _zmq_write(df, kind, arg, count, timing)
    df.unpersist()
    _record("connector", count, count if kind == "raw" else count // arg, timing["elapsed"], timing["window"])
    return rate


def _zmq_write(df, kind: str, arg: int, expected: int, timing: Optional[dict] = None) -> float:
    """One ``save()`` into a consumer; ``expected`` rows per second over the consumer's
    window. ``timing`` gets ``elapsed`` (the whole ``save()``) and ``window``."""
    consumer = Consumer(kind, expected)
    started = time.time()
    writer = (df.write.format("zmq").mode("append").option("endpoints", consumer.endpoint)
              .option("format", kind).option("rowsPerMessage", str(arg)))
    if curvekeys.current():
        writer = writer.options(**curvekeys.sink_options(curvekeys.current()))
    writer.save()
    elapsed = time.time() - started
    first, last = consumer.wait()
    if timing is not None:
        timing.update(elapsed=elapsed, window=last - first)
    return expected / max(last - first, 1e-9)


def discard_writer(spark, count: int, kind: str, arg: int) -> float:
    """The same DataFrame into a Python Arrow writer that drops it: what any Python sink
    pays before it sends a byte. Rate over its first batch to the end of its last (the
    writer's commit files them, option ``timing``); elapsed: the whole ``save()``."""
    register_ceilings(spark)
    df = _frame(spark, count, kind, arg)
    df.limit(arg).write.format("bench_discard").mode("append").save()  # warm-up
    timing = os.path.join(tempfile.mkdtemp(prefix="spark-zmq-bench-"), "timing.json")
    started = time.time()
    df.write.format("bench_discard").mode("append").option("timing", timing).save()
    elapsed = time.time() - started
    df.unpersist()
    with open(timing) as f:
        window = json.load(f)
    return _record("Python Arrow writer, discarding", count, count if kind == "raw" else count // arg, elapsed,
                   window["last"] - window["first"])
