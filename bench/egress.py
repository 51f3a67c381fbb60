"""Egress scenarios: ``df.write.format("zmq")`` vs a bare pyzmq PUSH loop sending the same bytes."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import zmq

import payloads


def _drain(count_rows: bool, expected: int) -> tuple[zmq.Socket, int, threading.Thread, list]:
    """A PULL peer in this process that receives until ``expected`` rows (or messages) arrived."""
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 100_000)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    got = [0]

    def run() -> None:
        while got[0] < expected:
            message = pull.recv(copy=False)
            got[0] += pa.ipc.open_stream(message.buffer).read_all().num_rows if count_rows else 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return pull, port, thread, got


def bare_push(count: int, kind: str, arg: int) -> float:
    """Messages (raw) or rows (arrow, ``count`` rows in messages of ``arg`` rows) per second."""
    messages = count if kind == "raw" else count // arg
    payload = payloads.raw(arg) if kind == "raw" else payloads.arrow_message(arg)
    pull, port, thread, _ = _drain(kind == "arrow", count)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 100_000)
    push.connect(f"tcp://127.0.0.1:{port}")
    started = time.perf_counter()
    for _ in range(messages):
        push.send(payload, copy=len(payload) < 65536)
    push.close(linger=-1)
    context.term()
    elapsed = time.perf_counter() - started
    thread.join(60)
    pull.close(0)
    return count / elapsed


def connector(spark, count: int, kind: str, arg: int) -> float:
    """``df.write.format("zmq")`` of a cached DataFrame: ``raw`` values of ``arg`` bytes,
    or the Arrow scenario's rows in messages of ``arg`` rows."""
    pull, port, thread, _ = _drain(kind == "arrow", count)
    if kind == "raw":
        df = spark.range(count).selectExpr(f"repeat('x', {arg}) AS value").coalesce(1)
    else:
        df = spark.createDataFrame(pa.Table.from_batches([payloads.arrow_batch(arg)] * (count // arg)))
    df = df.cache()
    df.count()
    started = time.perf_counter()
    (df.write.format("zmq").mode("append").option("endpoints", f"tcp://127.0.0.1:{port}")
     .option("format", kind).option("rowsPerMessage", str(arg)).save())
    elapsed = time.perf_counter() - started
    thread.join(60)
    pull.close(0)
    df.unpersist()
    return count / elapsed
