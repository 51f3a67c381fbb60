"""Bring Spark's JVM to its steady state before the measured scenarios.

Why: a streaming query analyses, plans, schedules and logs every micro-batch, Spark code
that runs a few hundred times a micro-batch, so the JVM's optimising compiler (C2) reaches
it only after many micro-batches. Measured in one long-running connector query fed a
million one-row messages at a time (about four micro-batches each): the JIT compilers'
CPU fell from 0.87 us a message in the first million to 0.13 by the twentieth, and the
JVM's whole CPU from 1.7 to 0.55, while its task threads stayed at 0.18-0.20
(docs/performance.md). A scenario measured before that measures the JVM's warm-up, which a
long-running query pays once; one that runs a single micro-batch (an in-memory source
offering everything at once) barely pays it. So every contender runs on a JVM that has
already run a streaming query through ``ROUNDS`` rounds (a few hundred micro-batches), and the report says how
much the compilers still took per micro-batch at the start and at the end of the warm-up.
"""

from __future__ import annotations

import json
import time

import zmq
from common import pull_to_noop, wait_started

#: rounds of the warm-up query (each ``ROUND`` messages, one or two micro-batches)
ROUNDS = 150
ROUND = 20_000
#: rounds whose compile time the report's first and last figures average
WINDOW = 10
#: the warm-up never takes longer than this, whatever the machine
BUDGET_S = 120.0


def compile_ms(spark) -> int:
    """The JVM's JIT compilers' total compile time so far (``CompilationMXBean``)."""
    return int(spark._jvm.java.lang.management.ManagementFactory.getCompilationMXBean().getTotalCompilationTime())


def _wait_for_offset(query, offset: int, timeout_s: float = 120.0) -> None:
    """Until a finished micro-batch of ``query`` ended at ``offset`` of channel 0 or past it.
    (Not ``common.wait_for_rows``: it sums ``recentProgress``, which keeps only the last 100
    micro-batches, fewer than the warm-up runs.)"""
    deadline = time.monotonic() + timeout_s
    while True:
        progress = query.lastProgress
        end = progress["sources"][0]["endOffset"] if progress else None
        if isinstance(end, str):  # (a JSON string or a dict, by pyspark version)
            end = json.loads(end)
        if end is not None and int(end.get("0", 0)) >= offset:
            return
        if query.exception() is not None:
            raise RuntimeError(f"the JIT warm-up query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the JIT warm-up query did not reach offset {offset} in {timeout_s} s")
        time.sleep(0.01)


def warm_up(spark) -> dict:
    """Run a connector query (``pull``, ``raw``, 100 B, into ``noop``) for ``ROUNDS``
    rounds of ``ROUND`` messages, each waited for; returns what the report prints."""
    query, endpoint = pull_to_noop(spark, "spark-zmq-bench-jit-")
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(endpoint)
    payload = b"x" * 100
    per_round: list[int] = []
    started = time.monotonic()
    try:
        wait_started(query)
        total = 0
        while len(per_round) < ROUNDS and time.monotonic() - started < BUDGET_S:
            before = compile_ms(spark)
            for _ in range(ROUND):
                push.send(payload)
            total += ROUND
            _wait_for_offset(query, total)
            per_round.append(compile_ms(spark) - before)
        batches = int(query.lastProgress["batchId"]) + 1 if query.lastProgress else 0
    finally:
        push.close(0)
        query.stop()
    first, last = per_round[:WINDOW], per_round[-WINDOW:]
    return {
        "rounds": len(per_round),
        "micro_batches": batches,
        "seconds": time.monotonic() - started,
        "first_ms_per_round": sum(first) / max(len(first), 1),
        "last_ms_per_round": sum(last) / max(len(last), 1),
    }


def line(result: dict) -> str:
    """The report's line for the warm-up."""
    return (
        f"JVM warm-up: {result['rounds']} rounds of {ROUND:,} one-row messages through one connector query "
        f"({result['micro_batches']} micro-batches, {result['seconds']:.0f} s); the JIT compilers took {result['first_ms_per_round']:.0f} ms a round "
        f"over the first {WINDOW} rounds and {result['last_ms_per_round']:.0f} ms over the last {WINDOW}"
    )
