"""spark-zmq benchmarks: the connector next to its baselines, in the same run.

    python bench/run.py            # every scenario (about 10 minutes on 2 cores), bench/results/
    python bench/run.py --smoke    # tiny sizes, one repetition, no warm-ups: proves the command works
    python bench/run.py --only ingest-raw-100B,latency

Scenarios (the benchmark issue's numbering):
  1 ingest-arrow      Arrow messages of 10,000 mixed-type rows, rows/s: connector vs a Python
                      data source yielding the same batches from memory (Spark's ceiling) vs a
                      bare pyzmq PULL loop that decodes them (the wire's ceiling);
  2 ingest-raw-100B,  one row per message, msgs/s: connector vs a Python data source yielding
    ingest-raw-1KB    the rows the connector yields, from memory, in the same read tasks and
                      batch sizes (Spark's ceiling) vs a bare pyzmq PULL loop vs Spark's
                      socket source fed the same payloads as lines (and, where a C compiler
                      and a libzmq are present, libzmq's C throughput test: the wire's limit);
  3 egress-raw-100B,  df.write.format("zmq") vs a bare pyzmq PUSH loop sending the same bytes
    egress-arrow      vs a Python Arrow writer that discards (Spark's ceiling); rates over the
                      receiving side's first to last message (for one-row messages libzmq's C
                      PULL, bench/c/thr.c, where it builds), and beside them each write's
                      fixed cost (elapsed minus that window: for Spark a write job's planning,
                      launch and commit);
  4 latency           10,000 msgs/s through pull -> Spark -> push; p50/p95/p99, beside the
                      floor of any Python source: one offering the same stamped rows by wall
                      clock into the same sink (the two alternately, ``--reps`` times each);
  5 backpressure      a producer far faster than a throttled query: receiver memory, spool
                      size against maxSpoolBytes, messages lost;
  6 scaling           one-row ingest (raw, 100 B) by channels, msgs/s and CPU per message:
                      receivers as threads (1, 2, 3, 4 channels) and as child processes
                      (1, 2, 4), and 1 or 2 standalone relays of one channel each;
  7 curve-ingest-raw-100B, curve-ingest-arrow, curve-egress-raw-100B, curve-egress-arrow:
                      the connector with CURVE (a ZAP-authenticated server on ingest, a client
                      on egress) vs the connector without it, and a bare pyzmq loop with CURVE
                      vs without it (libzmq's own cost of encryption, for scale).
  8 reqrep-arrow,     spark_zmq.request over two echo workers (arrow: 1,000-row requests;
    reqrep-json       json: one row per request), rows/s, vs one Python process sending the
                      same requests over a bare pyzmq DEALER with as many in flight;
    reqrep-broker-lru four workers, one 10x slower: spark-zmq broker's time over plain
                      round-robin's (target <= 0.6);
    reqrep-latency    one request at a time through the broker vs a direct REQ/REP round trip.
  9 bed               across hosts on the tests' multi-host bed (root, ip, nft; only with --only bed):
                      bed-fetch, read tasks on two other hosts fetching from the driver's spool
                      vs reading spool files every host sees (spoolAccess=local); bed-ingest,
                      producers on two other hosts vs one on the driver's host (bench/bed.py).
 10 pipeline          two queries, the first's zmq sink (arrow) feeding the second, which reads
                      with committedOnly: rows/s vs the second stage without committedOnly vs
                      one query fed the same Arrow messages by the producer (one-stage ingest);
                      and per-row latency p50/p99 from the first stage's write to the second's
                      micro-batch, with and without committedOnly (2,000 msgs/s);
 11 relay-readers     two queries reading one relay under their own relayReader, concurrently:
                      each one's rows/s vs one query reading the same relay alone.
 12 peers             one-row ingest (raw, 100 B) from the same producer, msgs/s and CPU per message
                      of every receiving process: the connector (a user's defaults) vs Bytewax 0.21
                      reading ZeroMQ through a custom source (optional: pip install -e ".[bench]")
                      vs a bare pyzmq PULL loop in its own process (bench/peers.py).
    peers-libzmq-producer  the same three fed by libzmq's C sender (bench/c/thr.c) instead:
                      what each receiving side takes when sending costs least.
 13 checkpoint-manager a connector query at 10,000 msgs/s under Spark's default checkpoint file
                      manager and under conf/spark-defaults.conf's, alternately: each
                      micro-batch's offset and commit logs, its duration and the JVM's CPU
                      (bench/checkpoints.py).
 14 backlog-raw-100B  one-row ingest (raw, 100 B) read from a backlog in one micro-batch (a
                      processing-time trigger, the messages all spooled before it fires) vs
                      the in-memory source offered at once: CPU a message by process, Spark's
                      part of the connector's read on equal terms (bench/backlog.py).
Fair ceilings (``CEILINGS``; the sources are in bench/ceilings.py): Spark's own cost with a
Python source or sink that does no ZeroMQ work (in-memory sources for ingest and latency, a
discarding writer for egress); the wire's (a bare pyzmq loop, libzmq's C test) where that
is the limit; the connector itself for SCATTER and CURVE.
Needs: Java 17+ (Spark); for the gather scenarios, node and the ``zeromq`` package that
tests/zmqjs installs (``cd tests/zmqjs && npm ci``); for the wire's limit, a C compiler and
libzmq's headers (Debian: ``apt-get install libzmq3-dev``) or else the libzmq pyzmq's wheel
bundles (bench/c/zmq_abi.h declares what the test uses). Without them those scenarios
(or that contender) are skipped with the reason, and the others run.
Contenders run back to back, ``--reps`` times; the report gives medians, spread and the
ratio against the named baseline, since absolute figures vary between machines. Results:
results.json, report.md and chart.png in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backlog  # noqa: E402
import backpressure  # noqa: E402
import bed  # noqa: E402
import checkpoints  # noqa: E402
import curvekeys  # noqa: E402
import egress  # noqa: E402
import ingest  # noqa: E402
import jit  # noqa: E402
import latency  # noqa: E402
import peers  # noqa: E402
import pipeline  # noqa: E402
import report  # noqa: E402
import requestreply  # noqa: E402
import wire  # noqa: E402
from common import HERE, measured, spark_session  # noqa: E402

FULL = {
    "raw": 1_000_000,
    "socket": 30_000,
    "arrow_messages": 400,
    "arrow_rows": 10_000,
    "latency_s": 10.0,
    "bp_messages": 200_000,
    "scaling": 200_000,
    "reqrep_arrow": 4_000_000,
    "reqrep_json": 20_000,
    "reqrep_lru": 400,
    "reqrep_latency": 2_000,
    "bed": 200_000,
    "pipeline_messages": 400,
    "pipeline_rate": 2_000,
    "pipeline_latency_s": 10.0,
    "relay_messages": 400,
    "checkpoint_s": 8.0,
    "backlog_interval_s": backlog.INTERVAL_S,
}
SMOKE = {
    "raw": 5_000,
    "socket": 2_000,
    "arrow_messages": 4,
    "arrow_rows": 1_000,
    "latency_s": 0.5,
    "bp_messages": 5_000,
    "scaling": 5_000,
    "reqrep_arrow": 10_000,
    "reqrep_json": 500,
    "reqrep_lru": 40,
    "reqrep_latency": 100,
    "bed": 4_000,
    "pipeline_messages": 20,
    "pipeline_rate": 2_000,
    "pipeline_latency_s": 0.5,
    "relay_messages": 20,
    "checkpoint_s": 0.3,
    "backlog_interval_s": 2,
}


#: each scenario's fair ceiling: the contender that does everything the connector must do
#: except the connector's own work, and why it is the fairest one measured
PACED = "in-memory Python source, the connector's micro-batches"
#: the connector fed by libzmq's C sender instead of the Python producer: what its receiving
#: side takes against the wire's limit (the C test's sender and receiver) with the sender's cost
#: out of the way
C_FED = "connector, libzmq's C producer"
CEILINGS = {
    PACED: "Spark's ceiling in the connector's pacing: a Python source yielding the same batches (Arrow) or rows "
    "(one row per message) from memory, offered in as many micro-batches of the same sizes as the connector's "
    "run just before had (the producer's messages arrive while Spark runs, so the connector's first "
    "micro-batch takes only part of them)",
    "in-memory Python source": "Spark's ceiling: a Python source yielding from memory what the connector's read "
    "yields (Arrow: the same batches; raw: the same rows, read tasks and batch sizes)",
    "Python Arrow writer, discarding": "Spark's ceiling: a Python Arrow writer that discards the same rows",
    "bare pyzmq PULL": "the wire's ceiling in Python: a PULL loop with no Spark (one-row ingest's Spark-side "
    "ceiling is the in-memory Python source)",
    wire.NAME: "the wire's limit: libzmq's C throughput test, no Python and no Spark",
    "pull from libzmq PUSH": "the connector itself, fed by libzmq's PUSH instead of SCATTER",
    "connector without CURVE": "the connector itself without encryption",
    "Spark mapInArrow, no call": "Spark's ceiling: the same plan with the call taken out (mapInArrow appends the reply itself)",
    "one-stage ingest": "the same Arrow messages sent straight to one query: a pipeline's second stage can go no "
    "faster than a query fed by the producer itself",
    "one reader alone": "one query reading the same relay alone: what a second reader may take from the first",
}


def compare(
    name: str,
    unit: str,
    contenders: dict[str, Callable[[], float]],
    reps: int,
    versus: str,
    target: float | None,
    ceiling: str | None = None,
    ceiling_target: float | None = None,
) -> dict:
    """Run each contender ``reps`` times, interleaved, and summarise. ``versus`` is the
    baseline the target is set against; ``ceiling`` (default ``versus``) the fair ceiling
    the chart compares with (``CEILINGS`` says why), ``ceiling_target`` a target set
    against that ceiling."""
    runs: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(reps):  # interleaved, so every contender sees the same machine state
        for contender, fn in contenders.items():
            runs[contender].append(fn())
    medians = {k: statistics.median(v) for k, v in runs.items()}
    row = {
        "scenario": name,
        "unit": unit,
        "reps": reps,
        "runs": runs,
        "median": medians,
        "versus": versus,
        "ratio": medians["connector"] / medians[versus],
        "target": target,
        "ratios": {k: medians["connector"] / v for k, v in medians.items() if k != "connector"},
    }
    row["ceiling"] = ceiling or versus
    row["ceiling_ratio"] = row["ratios"][row["ceiling"]]
    row["ceiling_why"] = CEILINGS.get(row["ceiling"], "")
    row["ceiling_target"] = ceiling_target
    others = "   ".join(f"{k} {v:,.0f} ({row['ratios'][k]:.2f})" for k, v in medians.items() if k != "connector")
    print(
        f"{name:18s} connector {medians['connector']:>12,.0f} {unit}   {others}   "
        f"ratio vs {versus}: {row['ratio']:.2f}"
        + (f" (target {target})" if target else "")
        + (f"   vs {row['ceiling']}: {row['ceiling_ratio']:.2f} (target {ceiling_target})" if ceiling_target else ""),
        flush=True,
    )
    return row


def fixed_costs(run: Callable[[], dict]) -> Callable[[], dict]:
    """An egress comparison with what each write cost outside the consumer's window
    (``egress.FIXED_COSTS``) filed under ``fixed_cost_s`` by contender (", CURVE" when
    encrypted): median seconds, every run, messages per write; and which process consumed
    (``consumer``: libzmq's C PULL for one-row messages where it builds). Printed as one line."""

    def wrapped() -> dict:
        egress.FIXED_COSTS.clear()
        row = run()
        costs: dict[str, dict] = {}
        for entry in egress.FIXED_COSTS:
            label = entry["contender"] + (", CURVE" if entry["curve"] else "")
            cost = costs.setdefault(
                label, {"runs_s": [], "cpu_us_per_msg_runs": [], "messages": entry["messages"], "rows": entry["rows"]}
            )
            cost["runs_s"].append(entry["fixed_s"])
            cost["cpu_us_per_msg_runs"].append(entry["cpu_us_per_msg"])
        for cost in costs.values():
            cost["median_s"] = statistics.median(cost["runs_s"])
            cost["cpu_us_per_msg"] = statistics.median(cost["cpu_us_per_msg_runs"])
        row["fixed_cost_s"] = costs
        if row["scenario"].startswith("curve-egress") and row["unit"] == "msgs/s":  # the one target missed
            row["cpu_budget"] = curve_budget(row)
            print(report.curve_budget_line(row), flush=True)
        row["consumer"] = egress.consumer_name("arrow" if row["scenario"].endswith("arrow") else "raw")
        print(report.fixed_cost_line(row), flush=True)
        return row

    return wrapped


def cpu_budget(row: dict, cpu: dict[str, list[dict]]) -> dict:
    """Whether the one-row target (``ceiling_target`` of the in-memory source) fits in this
    machine's cores at all: at that rate, the cores that Spark's own part (the ceiling's
    CPU per message) and libzmq's C sender and receiver (the cheapest a message can be
    sent and received: ``wire.throughput``) need together, before any of the connector's
    own work (its framing, spool and read). Medians of each contender's runs."""

    def median(contender: str, key: str) -> float:
        return statistics.median(c[key] for c in cpu[contender])

    target_rate = row["ceiling_target"] * row["median"]["in-memory Python source"]
    budget = {
        "cores": os.cpu_count(),
        "target_msgs_per_s": target_rate,
        "spark_us_per_msg": median("in-memory Python source", "total_us_per_msg"),
        "paced_spark_us_per_msg": median(PACED, "total_us_per_msg"),
        "connector_us_per_msg": median("connector", "total_us_per_msg"),
        "receiving_us_per_msg": median("connector", "receiving_us_per_msg"),
        "producer_us_per_msg": median("connector", "producer_us_per_msg"),
    }
    # CPU a message by process (Spark's JVM, its read tasks, the source runner, the receivers...)
    budget["by_role_us_per_msg"] = {
        contender: {
            role: statistics.median(c["by_role_us_per_msg"][role] for c in cpu[contender])
            for role in cpu[contender][0]["by_role_us_per_msg"]
        }
        for contender in ("connector", C_FED, "in-memory Python source", PACED)
        if cpu.get(contender) and "by_role_us_per_msg" in cpu[contender][0]
    }
    parts = budget["spark_us_per_msg"]
    if cpu.get(wire.NAME):
        budget["c_sender_us_per_msg"] = median(wire.NAME, "sender_us_per_msg")
        budget["c_receiver_us_per_msg"] = median(wire.NAME, "receiver_us_per_msg")
        parts += budget["c_sender_us_per_msg"] + budget["c_receiver_us_per_msg"]
    budget["cores_needed"] = target_rate * parts / 1e6
    # what the cores leave a message for all the connector's own work (receive, spool, read)
    # once Spark's part and the cheapest sender (libzmq's C one where it builds) are paid
    budget["left_for_connector_us_per_msg"] = (
        budget["cores"] / target_rate * 1e6 - budget["spark_us_per_msg"] - budget.get("c_sender_us_per_msg", 0.0)
    )
    return budget


#: the performance issue's target for every CURVE scenario, against the connector without CURVE
CURVE_TARGET = 0.6


def curve_budget(row: dict) -> dict:
    """Whether a CURVE egress target fits in this machine's cores at all: at
    ``CURVE_TARGET`` of the connector without CURVE, the cores that the connector without
    CURVE (its CPU per message, every process, the consumer's included) and libzmq's own
    CURVE (sealing and opening in C: the bare pyzmq PUSH loop's CPU per message with CURVE
    less without, sender and consumer) need together: the least CURVE can add."""
    costs = row["fixed_cost_s"]
    target_rate = CURVE_TARGET * row["median"]["connector without CURVE"]
    plain = costs["connector"]["cpu_us_per_msg"]
    libzmq_curve = costs["bare pyzmq PUSH, CURVE"]["cpu_us_per_msg"] - costs["bare pyzmq PUSH"]["cpu_us_per_msg"]
    return {
        "cores": os.cpu_count(),
        "target": CURVE_TARGET,
        "target_per_s": target_rate,
        "without_curve_us_per_msg": plain,
        "libzmq_curve_us_per_msg": libzmq_curve,
        "with_curve_us_per_msg": costs["connector, CURVE"]["cpu_us_per_msg"],
        "cores_needed": target_rate * (plain + libzmq_curve) / 1e6,
    }


def one_row_ingest(spark, name: str, count: int, size: int, socket_count: int, reps: int, no_wire: str | None) -> dict:
    """One row per message of ``size`` bytes: the connector against Spark's ceiling (the
    in-memory rows source; the issue's target 0.85) and, as before, against a bare pyzmq
    PULL (target 0.5); Spark's socket source, and libzmq's C test where it builds. The
    row's ``cpu_budget`` (``cpu_budget``) says whether the target fits in the cores."""
    cpu: dict[str, list[dict]] = {"connector": [], "in-memory Python source": [], PACED: [], wire.NAME: [], C_FED: []}
    pacing: list[int] = []  # the last connector run's micro-batches, replayed by PACED
    contenders = {
        "connector": measured(
            lambda c: ingest.connector(spark, count, "raw", size, cpu=c, pacing=pacing), cpu["connector"]
        ),
        "in-memory Python source": measured(
            lambda c: ingest.memory_rows(spark, count, size, cpu=c), cpu["in-memory Python source"]
        ),
        PACED: measured(lambda c: ingest.memory_rows(spark, count, size, cpu=c, pacing=pacing), cpu[PACED]),
        "bare pyzmq PULL": lambda: ingest.bare_pull(count, "raw", size),
        "Spark socket source": lambda: ingest.socket_source(spark, socket_count, size),
    }
    if no_wire is None:
        contenders[wire.NAME] = measured(lambda c: wire.throughput(count, size, cpu=c), cpu[wire.NAME])
        contenders[C_FED] = measured(
            lambda c: ingest.connector(spark, count, "raw", size, producer=wire.CProducer, cpu=c), cpu[C_FED]
        )
    row = compare(
        name, "msgs/s", contenders, reps, "bare pyzmq PULL", 0.5, ceiling="in-memory Python source", ceiling_target=0.85
    )
    row["wire_limit_skipped"] = no_wire
    if no_wire is None:
        row["wire_library"] = wire.library()
    row["cpu_budget"] = cpu_budget(row, cpu)
    if no_wire is None:  # the receiving side against the wire's limit, both fed by libzmq's C sender
        row["c_wire_ratio"] = row["median"][C_FED] / row["median"][wire.NAME]
        row["notes"] = [report.c_wire_line(row, C_FED, wire.NAME)]
        print(row["notes"][0], flush=True)
    print(report.budget_line(row), flush=True)
    print(report.roles_line(row), flush=True)
    return row


#: scaling's contenders: name -> (channels or relays, ingest.connector's keyword arguments)
SCALING = {
    "threads": [(c, {"channels": c, "receivers": "threads"}) for c in (1, 2, 3, 4)],
    "processes": [(c, {"channels": c, "receivers": "processes"}) for c in (1, 2, 4)],
    "relays": [(n, {"relays": n}) for n in (1, 2)],
}
#: a smoke run's: every thread width (the report's ``channels``), the widest of the others
SMOKE_SCALING = {name: widths if name == "threads" else widths[-1:] for name, widths in SCALING.items()}


def scaling(spark, count: int, reps: int, widths: dict = SCALING) -> dict:
    """One-row ingest for every ``widths`` contender and width, ``reps`` times, interleaved;
    medians of msgs/s and of CPU microseconds per message (see ``ingest.connector``).
    ``channels`` repeats the threads' msgs/s by channel count (the shape earlier runs had)."""
    runs: dict[str, dict[int, list[tuple[float, dict]]]] = {
        name: {width: [] for width, _ in each} for name, each in widths.items()
    }
    for _ in range(reps):
        for name, each in widths.items():
            for width, kwargs in each:
                cpu: dict = {}
                rate = ingest.connector(spark, count, "raw", 100, cpu=cpu, **kwargs)
                runs[name][width].append((rate, cpu))
    contenders: dict[str, dict[int, dict]] = {}
    for name, by_width in runs.items():
        contenders[name] = {}
        for width, width_runs in by_width.items():
            contenders[name][width] = {
                "msgs_per_s": statistics.median(rate for rate, _ in width_runs),
                "receiving_us_per_msg": statistics.median(c["receiving_us_per_msg"] for _, c in width_runs),
                "total_us_per_msg": statistics.median(c["total_us_per_msg"] for _, c in width_runs),
                "receiving": width_runs[0][1]["receiving"],
                "runs": [rate for rate, _ in width_runs],
            }
        unit = (lambda w: "relay" + "s" * (w > 1)) if name == "relays" else (lambda w: "ch")
        print(
            f"{'scaling':18s} {name:9s} "
            + "   ".join(
                f"{width} {unit(width)}: {m['msgs_per_s']:>9,.0f} msgs/s, "
                f"{m['receiving_us_per_msg']:.1f}/{m['total_us_per_msg']:.1f} us CPU/msg"
                for width, m in contenders[name].items()
            )
            + "   (CPU: receiving/total)",
            flush=True,
        )
    return {
        "scenario": "scaling",
        "unit": "msgs/s",
        "reps": reps,
        "messages": count,
        "contenders": contenders,
        "channels": {c: m["msgs_per_s"] for c, m in contenders["threads"].items()},
    }


def secured(keys: str, fn: Callable[[], float]) -> Callable[[], float]:
    """``fn`` run with CURVE on every socket (the producer and consumer processes read the
    key directory from the environment)."""

    def run() -> float:
        os.environ[curvekeys.ENV] = keys
        try:
            return fn()
        finally:
            del os.environ[curvekeys.ENV]

    return run


def curve_cost(
    name: str,
    unit: str,
    keys: str,
    reps: int,
    connector: Callable[[], float],
    bare_name: str,
    bare: Callable[[], float],
) -> dict:
    """The connector with CURVE against itself without, and a bare loop with and without
    CURVE (libzmq's own cost, for scale), in one comparison."""
    return compare(
        name,
        unit,
        {
            "connector": secured(keys, connector),
            "connector without CURVE": connector,
            f"{bare_name}, CURVE": secured(keys, bare),
            bare_name: bare,
        },
        reps,
        "connector without CURVE",
        None,
    )


#: scenarios whose producer is libzmq itself, through node's zeromq package
NEEDS_NODE = ("gather-raw-100B", "gather-arrow")
#: scenarios that run only when named in --only
OPT_IN = ("bed",)
#: scenarios fed by libzmq's C sender (bench/c/thr.c), skipped where it does not build
NEEDS_C_WIRE = ("peers-libzmq-producer",)


def node_missing() -> str | None:
    """Why libzmq's own producer cannot run here, or ``None`` when it can."""
    import shutil

    if shutil.which("node") is None:
        return "node is not installed (install Node.js, then: cd tests/zmqjs && npm ci)"
    package = os.path.join(HERE, "..", "tests", "zmqjs", "node_modules", "zeromq", "package.json")
    if not os.path.exists(package):
        return "node's zeromq package is not installed: run  cd tests/zmqjs && npm ci --no-audit --no-fund"
    return None


def reqrep(spark, fmt: str, rows: int, reps: int) -> dict:
    """``request()`` and the bare DEALER loop against the same two echo workers."""
    with requestreply.workers(fmt, 2) as endpoints:
        return compare(
            f"reqrep-{fmt}",
            "rows/s",
            {
                "connector": lambda: requestreply.connector(spark, fmt, rows, 1000, endpoints),
                "bare pyzmq DEALER": lambda: requestreply.bare_dealer(fmt, rows, 1000, endpoints),
                "Spark mapInArrow, no call": lambda: requestreply.spark_ceiling(spark, fmt, rows),
            },
            reps,
            "bare pyzmq DEALER",
            0.7,
            ceiling="Spark mapInArrow, no call",
        )


def two_stages(spark, count: int, rows: int, rate: float, seconds: float, reps: int) -> dict:
    """Scenario 10, pipeline: two queries, the upstream's zmq sink feeding the downstream
    reading with ``committedOnly`` (``pipeline.two_stage``), rows/s beside the same
    downstream without it and beside the one-stage ingest of the same messages; then the
    per-row latency from the upstream's write to the downstream's batch, with and without
    ``committedOnly`` at ``rate`` one-row messages a second, a rate both stages keep up
    with on 2 cores, so the figures are the holding and not a backlog
    (``pipeline.latency_pair``), filed under ``latency``."""
    row = compare(
        "pipeline",
        "rows/s",
        {
            "connector": lambda: pipeline.two_stage(spark, count, rows, committed_only=True),
            "two stages without committedOnly": lambda: pipeline.two_stage(spark, count, rows, committed_only=False),
            "one-stage ingest": lambda: ingest.connector(spark, count, "arrow", rows),
        },
        reps,
        "one-stage ingest",
        None,
    )
    row["latency"] = pipeline.latency_pair(spark, rate, seconds, reps)
    print(report.pipeline_latency_line(row), flush=True)
    return row


def relay_readers(spark, count: int, rows: int, reps: int) -> dict:
    """Scenario 11, relay-readers: two queries reading one relay under their own
    ``relayReader``, concurrently, each one's rows/s, against one query reading the same
    relay alone (``pipeline.relay_readers``)."""
    two = pipeline.TwoReaders(spark, count, rows)
    return compare(
        "relay-readers",
        "rows/s",
        {
            "connector": two.first,
            "second reader, same run": two.second,
            "one reader alone": lambda: pipeline.relay_readers(spark, count, rows, 1)[0],
        },
        reps,
        "one reader alone",
        None,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, one repetition, no warm-ups: proves the command works"
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions per contender (default 3)")
    parser.add_argument("--only", default="", help="comma-separated scenario names to run (default: all)")
    parser.add_argument("--out", default=os.path.join(HERE, "results"), help="where results go (default bench/results)")
    args = parser.parse_args(argv)
    size = SMOKE if args.smoke else FULL
    if args.smoke:  # warm-ups exist for steady-state figures, which a smoke run does not give: none
        checkpoints.SKIP = 1
        ingest.WARM_UP_MESSAGES.update(raw=0, arrow=0)  # in place: pipeline.py imported the dict itself
        latency.WARM = 0
    reps = 1 if args.smoke else args.reps
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    spark = spark_session(smoke=args.smoke)
    n, m, r = size["raw"], size["arrow_messages"], size["arrow_rows"]
    keys = curvekeys.make()
    no_wire = wire.missing()
    if no_wire and (not only or only & {"ingest-raw-100B", "ingest-raw-1KB"}):
        print(report.wire_line(no_wire), flush=True)

    arrow_pacing: list[int] = []  # the last connector run's micro-batches, replayed by PACED
    comparisons = {
        "ingest-arrow": lambda: compare(
            "ingest-arrow",
            "rows/s",
            {
                "connector": lambda: ingest.connector(spark, m, "arrow", r, pacing=arrow_pacing),
                PACED: lambda: ingest.memory_source(spark, m, r, pacing=arrow_pacing),
                "in-memory Python source": lambda: ingest.memory_source(spark, m, r),
                "bare pyzmq PULL + decode": lambda: ingest.bare_pull(m, "arrow", r),
            },
            reps,
            PACED,
            0.8,
        ),
        "ingest-raw-100B": lambda: one_row_ingest(spark, "ingest-raw-100B", n, 100, size["socket"], reps, no_wire),
        "ingest-raw-1KB": lambda: one_row_ingest(spark, "ingest-raw-1KB", n, 1024, size["socket"], reps, no_wire),
        "gather-raw-100B": lambda: compare(
            "gather-raw-100B",
            "msgs/s",
            {
                "connector": lambda: ingest.connector(  # gather, fed by libzmq SCATTER
                    spark, n, "raw", 100, pattern="gather", producer=ingest.libzmq_producer("scatter")
                ),
                "pull from libzmq PUSH": lambda: ingest.connector(
                    spark, n, "raw", 100, producer=ingest.libzmq_producer("push")
                ),
            },
            reps,
            "pull from libzmq PUSH",
            0.9,
        ),
        "gather-arrow": lambda: compare(
            "gather-arrow",
            "rows/s",
            {
                "connector": lambda: ingest.connector(  # gather, fed by libzmq SCATTER
                    spark, m, "arrow", r, pattern="gather", producer=ingest.libzmq_producer("scatter")
                ),
                "pull from libzmq PUSH": lambda: ingest.connector(
                    spark, m, "arrow", r, producer=ingest.libzmq_producer("push")
                ),
            },
            reps,
            "pull from libzmq PUSH",
            0.9,
        ),
        "egress-raw-100B": fixed_costs(
            lambda: compare(
                "egress-raw-100B",
                "msgs/s",
                {
                    "connector": lambda: egress.connector(spark, n, "raw", 100),
                    "bare pyzmq PUSH": lambda: egress.bare_push(n, "raw", 100),
                    "Python Arrow writer, discarding": lambda: egress.discard_writer(spark, n, "raw", 100),
                },
                reps,
                "bare pyzmq PUSH",
                0.8,
                ceiling="Python Arrow writer, discarding",
            )
        ),
        "egress-arrow": fixed_costs(
            lambda: compare(
                "egress-arrow",
                "rows/s",
                {
                    "connector": lambda: egress.connector(spark, m * r, "arrow", r),
                    "bare pyzmq PUSH": lambda: egress.bare_push(m * r, "arrow", r),
                    "Python Arrow writer, discarding": lambda: egress.discard_writer(spark, m * r, "arrow", r),
                },
                reps,
                "bare pyzmq PUSH",
                0.8,
                ceiling="Python Arrow writer, discarding",
            )
        ),
        "curve-ingest-raw-100B": lambda: curve_cost(
            "curve-ingest-raw-100B",
            "msgs/s",
            keys,
            reps,
            lambda: ingest.connector(spark, n, "raw", 100),
            "bare pyzmq PULL",
            lambda: ingest.bare_pull(n, "raw", 100),
        ),
        "curve-ingest-arrow": lambda: curve_cost(
            "curve-ingest-arrow",
            "rows/s",
            keys,
            reps,
            lambda: ingest.connector(spark, m, "arrow", r),
            "bare pyzmq PULL + decode",
            lambda: ingest.bare_pull(m, "arrow", r),
        ),
        "curve-egress-raw-100B": fixed_costs(
            lambda: curve_cost(
                "curve-egress-raw-100B",
                "msgs/s",
                keys,
                reps,
                lambda: egress.connector(spark, n, "raw", 100),
                "bare pyzmq PUSH",
                lambda: egress.bare_push(n, "raw", 100),
            )
        ),
        "curve-egress-arrow": fixed_costs(
            lambda: curve_cost(
                "curve-egress-arrow",
                "rows/s",
                keys,
                reps,
                lambda: egress.connector(spark, m * r, "arrow", r),
                "bare pyzmq PUSH",
                lambda: egress.bare_push(m * r, "arrow", r),
            )
        ),
        "reqrep-arrow": lambda: reqrep(spark, "arrow", size["reqrep_arrow"], reps),
        "reqrep-json": lambda: reqrep(spark, "json", size["reqrep_json"], reps),
        "reqrep-broker-lru": lambda: requestreply.load_balancing(size["reqrep_lru"], reps),
        "reqrep-latency": lambda: requestreply.latency(size["reqrep_latency"]),
        "scaling": lambda: scaling(spark, size["scaling"], reps, SMOKE_SCALING if args.smoke else SCALING),
        "latency": lambda: {"scenario": "latency", **latency.measure(spark, 10_000, size["latency_s"], reps)},
        "pipeline": lambda: two_stages(
            spark, size["pipeline_messages"], r, size["pipeline_rate"], size["pipeline_latency_s"], reps
        ),
        "relay-readers": lambda: relay_readers(spark, size["relay_messages"], r, reps),
        "peers": lambda: peers.measure(spark, n, 100, reps, compare),
        "peers-libzmq-producer": lambda: peers.measure(
            spark, n, 100, reps, compare, "peers-libzmq-producer", wire.CProducer
        ),
        "backlog-raw-100B": lambda: backlog.measure(spark, n, 100, reps, compare, size["backlog_interval_s"]),
        "checkpoint-manager": lambda: checkpoints.measure(spark, seconds=size["checkpoint_s"], reps=min(reps, 2)),
        "backpressure": lambda: {
            "scenario": "backpressure",
            **backpressure.connector(spark, size["bp_messages"], 1024, spool_bytes=16 << 20, rows_per_trigger=20_000),
        },
        # across hosts on the tests' multi-host bed (root only): bed-fetch and bed-ingest
        "bed": lambda: bed.measure(size["bed"], reps, compare),
    }
    results = []
    started = time.time()
    if not args.smoke and (not only or only - {"reqrep-broker-lru", "reqrep-latency", "bed"}):
        warmed = jit.warm_up(spark)  # every contender on a JVM past its JIT warm-up (bench/jit.py)
        print(jit.line(warmed), flush=True)
        results.append({"scenario": "jvm-warm-up", **warmed, "notes": [jit.line(warmed)]})
    no_node = node_missing()
    for name, run in comparisons.items():
        if only and name not in only:
            continue
        if name in OPT_IN and name not in only:
            print(
                f"{name:18s} skipped: minutes of set-up (a multi-host bed), run it by name: --only {name}", flush=True
            )
            continue
        if name in NEEDS_NODE and no_node:
            print(f"{name:18s} skipped: {no_node}", flush=True)
            continue
        if name in NEEDS_C_WIRE and no_wire:
            print(f"{name:18s} skipped: {no_wire}", flush=True)
            continue
        result = run()
        if isinstance(result, list):  # a scenario of several rows (bed)
            results.extend(result)
            continue
        if name in ("checkpoint-manager", "backlog-raw-100B"):
            print(f"{name:18s} " + result["notes"][0], flush=True)
        if name in ("latency", "backpressure", "reqrep-broker-lru", "reqrep-latency"):  # (scaling prints its own)
            print(f"{name:18s} " + json.dumps({k: v for k, v in result.items() if k != "scenario"}), flush=True)
        results.append(result)
    spark.stop()
    report.write(
        results,
        args.out,
        smoke=args.smoke,
        seconds=time.time() - started,
        command="python bench/run.py " + " ".join(argv),
    )
    print(f"wrote {args.out}/results.json, report.md and chart.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
