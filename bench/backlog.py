"""One-row ingest from a backlog: Spark's part of the connector's read, in one micro-batch.

Why: against a live producer the connector's rows arrive while Spark runs, so Spark cuts
them into several micro-batches, each paying Spark's fixed per-micro-batch cost; the
in-memory ceiling offers its rows at once, in one. Their JVM CPU a row then differs by the
number of micro-batches, not by what the connector hands Spark. Here the connector's query
runs on a processing-time trigger, the producer starts just after one trigger and its
messages all reach the receiver before the next, which reads them in one micro-batch, as
the ceiling does:
CPU a message by process (Spark's JVM and its threads, the read tasks, the source runner;
the receiver's intake before the trigger is its own process and is left out) against the
in-memory source's (``ingest.memory_rows``), run alternately.

Spark starts a processing-time trigger at the multiples of its interval since the epoch
(``ProcessingTimeExecutor``), so the CPU window opens just before a known instant instead
of taking in the seconds the query waits idle.
"""

from __future__ import annotations

import math
import statistics
import time

import cpu as cpu_tree
import ingest
from common import Producer, measured, pull_to_noop, started_at, wait_for_rows, wait_started, warm_up

#: the trigger interval: room for the producer's messages to reach the receiver between two
#: triggers (1,000,000 messages take about 1.2 s here)
INTERVAL_S = 5
#: how long before the trigger the CPU window opens
LEAD_S = 0.3
#: how long after a trigger the producer starts (Spark's look for data at it is done)
AFTER_S = 0.2
CONNECTOR = "connector"  # reading a backlog: compare() names the connector so
CEILING = "in-memory Python source"


def connector(spark, count: int, size: int, cpu: dict, interval_s: int = INTERVAL_S) -> float:
    """The connector's defaults (``pull``, ``raw``) on a ``interval_s`` trigger, into ``noop``:
    ``count`` messages sent right after one trigger, read by the next; msgs/s over that
    micro-batch, and ``cpu`` filled as ``ingest.memory_rows`` fills it, plus the number of
    micro-batches the backlog took."""
    query, endpoint = pull_to_noop(spark, "spark-zmq-bench-backlog-", f"{interval_s} seconds")
    try:
        wait_started(query)
        warm = warm_up(query, [endpoint], "raw", size, messages=ingest.WARM_UP_MESSAGES["raw"])
        producer = Producer(endpoint, count, "raw", size)
        producer.ready()
        # just past a trigger (Spark looks for data at each and finds none), so the producer
        # has a whole interval before the next one, which reads everything it sent
        boundary = math.ceil(time.time() / interval_s) * interval_s
        time.sleep(max(0.0, boundary + AFTER_S - time.time()))  # until just past a known instant
        trigger_at = boundary + interval_s
        producer.go()
        producer.wait(60)
        time.sleep(max(0.0, trigger_at - LEAD_S - time.time()))  # until just before the next one
        before = cpu_tree.snapshot()
        threads_before = cpu_tree.jvm_threads(before)
        batches_before = {p["batchId"] for p in query.recentProgress if p["numInputRows"]}
        finished = wait_for_rows(query, warm + count)
        after = cpu_tree.snapshot(follow=before)
        taken = [p for p in query.recentProgress if p["numInputRows"] and p["batchId"] not in batches_before]
    finally:
        query.stop()
    read = sum(p["numInputRows"] for p in taken)
    if read != count:  # part of the backlog was read before the window: its figures would be wrong
        raise RuntimeError(
            f"the backlog's micro-batches in the measured window read {read} of {count} messages "
            f"(the producer took longer than the {interval_s} s trigger interval?)"
        )
    roles = {role: used / count * 1e6 for role, used in cpu_tree.by_role(before, after).items() if role != "receivers"}
    roles.update(cpu_tree.jvm_threads_us(threads_before, after, count))
    cpu.update(
        {
            "messages": count,
            "micro_batches": len(taken),
            "by_role_us_per_msg": roles,
            "total_us_per_msg": cpu_tree.used(
                before, after, lambda p: not cpu_tree.is_relay(p) and cpu_tree.not_producer(p)
            )
            / count
            * 1e6,
        }
    )
    # ``taken`` read the whole backlog (checked above), so it is not empty
    return count / (finished - started_at(min(taken, key=lambda p: p["batchId"])))


def measure(spark, count: int, size: int, reps: int, compare, interval_s: int = INTERVAL_S) -> dict:
    """The connector reading a backlog against the in-memory source offered at once,
    ``reps`` times each, alternately; the row's ``cpu`` holds each contender's medians by
    process and the JVM's and read tasks' ratios (the issue's targets: at most 1.1 and 1.2)."""
    cpu: dict[str, list[dict]] = {CONNECTOR: [], CEILING: []}
    row = compare(
        f"backlog-raw-{size}B",
        "msgs/s",
        {
            CONNECTOR: measured(lambda c: connector(spark, count, size, c, interval_s), cpu[CONNECTOR]),
            CEILING: measured(lambda c: ingest.memory_rows(spark, count, size, cpu=c), cpu[CEILING]),
        },
        reps,
        CEILING,
        None,
    )
    medians = {
        name: {
            role: statistics.median(r["by_role_us_per_msg"].get(role, 0.0) for r in runs)
            for role in runs[0]["by_role_us_per_msg"]
        }
        for name, runs in cpu.items()
        if runs
    }
    row["cpu"] = {"by_role_us_per_msg": medians, "micro_batches": [r["micro_batches"] for r in cpu[CONNECTOR]]}
    if len(medians) == 2:
        row["cpu"]["ratios"] = {
            role: medians[CONNECTOR][role] / medians[CEILING][role]
            for role in ("jvm", "read tasks")
            if medians[CEILING].get(role)
        }
    row["notes"] = [line(row)]
    return row


def line(row: dict) -> str:
    """The report's sentence: CPU a message by process, both contenders, and the ratios."""
    cpu = row["cpu"]
    parts = [
        f"{name}: {cpu_tree.roles_text(roles, always=('jvm', 'read tasks'))}"
        for name, roles in cpu["by_role_us_per_msg"].items()
    ]
    ratios = ", ".join(f"{role} {value:.2f}x" for role, value in cpu.get("ratios", {}).items())
    return (
        f"{row['scenario']}: CPU us a message by process, {'; '.join(parts)}; connector / in-memory source: "
        f"{ratios or '-'} (targets: jvm at most 1.1x, read tasks 1.2x); the connector's backlog took "
        f"{cpu['micro_batches']} micro-batch(es) a run"
    )
