"""How Spark's JVM talks to its Python workers: loopback TCP (Spark's default) against a Unix
socket (``spark.python.unix.domain.socket.enabled``, which conf/spark-defaults.conf sets).

Why: every Python task, a read task of any Python data source included, starts with the JVM
writing the task and then, in a second small write, the start of the Arrow stream the worker
reads. Over TCP, Nagle's algorithm holds that second write until the first is acknowledged,
and the worker, with nothing to send back, delays its acknowledgement by up to 40 ms: each
micro-batch's read task idles that long (the same stall Spark removed for its state server,
SPARK-51667). A Unix socket has neither.

The setting is read when Spark's JVM starts, so each run is a Spark application of its own:
this script runs itself in a child process per run, alternately, each a connector query at a
steady rate (``checkpoints.run``: pull, raw 100 B, into ``noop``), and prints the medians of
the runs' micro-batch figures (Spark's own ``durationMs``). Not part of ``bench/run.py``: two
Spark applications a run cost more than the figure is worth on every run; the bench's own
session uses the Unix socket, as users' sessions from the project's conf do.

    python bench/worker_socket.py [--reps 2] [--seconds 8] [--rate 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = (("loopback TCP (Spark's default)", False), ("Unix socket (conf/spark-defaults.conf)", True))
FIGURES = (
    ("trigger_ms", "micro-batch"),
    ("add_batch_ms", "of which its job (addBatch)"),
    ("jvm_cpu_ms_per_batch", "JVM CPU a micro-batch"),
)


def one_run(unix_socket: bool, rate: float, seconds: float) -> dict:
    """In this process: a Spark session with or without the Unix socket, one measured query."""
    import checkpoints
    from common import CHECKPOINT_FILE_MANAGER, spark_session

    spark = spark_session(unix_socket=unix_socket)
    try:
        return checkpoints.run(spark, CHECKPOINT_FILE_MANAGER, rate, seconds)
    finally:
        spark.stop()


def measure(reps: int, seconds: float, rate: float) -> dict[str, list[dict]]:
    """Each mode ``reps`` times, alternately, each run a child process of its own."""
    runs: dict[str, list[dict]] = {label: [] for label, _ in MODES}
    for _ in range(reps):
        for label, unix_socket in MODES:
            child = subprocess.run(
                [sys.executable, __file__, "--child", "unix" if unix_socket else "tcp", str(rate), str(seconds)],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=HERE,
            )
            if child.returncode != 0:
                raise RuntimeError(f"the {label} run failed:\n{child.stderr[-3000:]}")
            runs[label].append(json.loads(child.stdout.strip().splitlines()[-1]))
    return runs


def lines(runs: dict[str, list[dict]], rate: float, seconds: float) -> list[str]:
    out = [f"a connector query at {rate:,.0f} msgs/s, {seconds:.0f} s a run, medians of the runs' medians (ms):"]
    for label, done in runs.items():
        figures = ", ".join(f"{name} {statistics.median(r[key] for r in done):.0f}" for key, name in FIGURES)
        out.append(f"- {label}: {figures}; {len(done)} runs")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        mode, rate, seconds = argv[1], float(argv[2]), float(argv[3])
        print(json.dumps(one_run(mode == "unix", rate, seconds)), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2, help="runs of each mode, alternately (default 2)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds a run (default 8)")
    parser.add_argument("--rate", type=float, default=10_000, help="messages a second (default 10,000)")
    args = parser.parse_args(argv)
    print("\n".join(lines(measure(args.reps, args.seconds, args.rate), args.rate, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
