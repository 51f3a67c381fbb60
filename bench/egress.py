"""Egress scenarios: ``df.write.format("zmq")`` vs a bare pyzmq PUSH loop sending the same
bytes, and (Arrow) vs a Python Arrow writer that discards its rows (Spark's ceiling).

Each returns messages/s (raw) or rows/s (arrow), timed until the sender has handed every
message to the network (the bare loop's ``Context.term``, the write's return, which
follows the sink's flush); a consumer process drains them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pyarrow as pa
import zmq

import curvekeys
import payloads
from common import HERE, register_ceilings


class Consumer:
    """``bench/consumer.py`` in its own process; ``endpoint`` once it has bound."""

    def __init__(self, kind: str, expected: int) -> None:
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "consumer.py"), kind, str(expected)],
                                     stdout=subprocess.PIPE, text=True)
        self.endpoint = f"tcp://127.0.0.1:{int(self.proc.stdout.readline())}"

    def wait(self) -> None:
        if self.proc.stdout.readline().strip() != "done" or self.proc.wait(120) != 0:
            raise RuntimeError("the benchmark consumer did not receive everything")


def bare_push(count: int, kind: str, arg: int) -> float:
    """Messages (raw) or rows (arrow, ``count`` rows in messages of ``arg`` rows) per second."""
    messages = count if kind == "raw" else count // arg
    payload = payloads.raw(arg) if kind == "raw" else payloads.arrow_message(arg)
    consumer = Consumer(kind, count)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 100_000)
    if curvekeys.current():
        curvekeys.secure_client(push, curvekeys.current())
    push.connect(consumer.endpoint)
    started = time.perf_counter()
    for _ in range(messages):
        push.send(payload, copy=len(payload) < 65536)
    push.close(linger=-1)
    context.term()
    elapsed = time.perf_counter() - started
    consumer.wait()
    return count / elapsed


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
    elapsed = _zmq_write(df, kind, arg, count)
    df.unpersist()
    return count / elapsed


def _zmq_write(df, kind: str, arg: int, expected: int) -> float:
    consumer = Consumer(kind, expected)
    started = time.perf_counter()
    writer = (df.write.format("zmq").mode("append").option("endpoints", consumer.endpoint)
              .option("format", kind).option("rowsPerMessage", str(arg)))
    if curvekeys.current():
        writer = writer.options(**curvekeys.sink_options(curvekeys.current()))
    writer.save()
    elapsed = time.perf_counter() - started
    consumer.wait()
    return elapsed


def discard_writer(spark, count: int, kind: str, arg: int) -> float:
    """The same DataFrame into a Python Arrow writer that drops it: what any Python sink
    pays before it sends a byte."""
    register_ceilings(spark)
    df = _frame(spark, count, kind, arg)
    df.limit(arg).write.format("bench_discard").mode("append").save()  # warm-up
    started = time.perf_counter()
    df.write.format("bench_discard").mode("append").save()
    elapsed = time.perf_counter() - started
    df.unpersist()
    return count / elapsed
