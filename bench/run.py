"""spark-zmq benchmarks: the connector next to its baselines, in the same run.

    python bench/run.py            # full run (a few minutes), writes bench/results/
    python bench/run.py --smoke    # seconds-scale run that proves the command works

Scenarios (more in the benchmark issue):
  ingest-raw   one row per message (100-byte payloads): the connector's streaming source
               into a noop sink vs a bare pyzmq PULL loop receiving the same messages;
  egress-raw   df.write.format("zmq") vs a bare pyzmq PUSH loop sending the same bytes.
Each pair runs back to back, ``--reps`` times; the report gives medians, spread and the
ratio, because absolute figures vary between machines.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

import zmq  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCER = (
    "import sys, zmq\n"
    "c = zmq.Context(); s = c.socket(zmq.PUSH); s.setsockopt(zmq.SNDHWM, 100000); s.connect(sys.argv[1])\n"
    "p = b'x' * int(sys.argv[3])\n"
    "for i in range(int(sys.argv[2])): s.send(p)\n"
    "s.close(linger=-1); c.term()\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def producer(endpoint: str, count: int, size: int) -> subprocess.Popen:
    """A separate process, so the producer never shares a GIL with what is measured."""
    return subprocess.Popen([sys.executable, "-c", PRODUCER, endpoint, str(count), str(size)])


def bare_pull(count: int, size: int) -> float:
    pull = zmq.Context.instance().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    proc = producer(f"tcp://127.0.0.1:{port}", count, size)
    pull.recv()
    started = time.perf_counter()
    for _ in range(count - 1):
        pull.recv()
    elapsed = time.perf_counter() - started
    proc.wait()
    pull.close(0)
    return count / elapsed


def connector_ingest(spark, count: int, size: int) -> float:
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    df = (spark.readStream.format("zmq").option("endpoints", "@" + endpoint)
          .option("spoolDir", os.path.join(work, "spool")).load())
    query = (df.writeStream.format("noop").option("checkpointLocation", os.path.join(work, "ckpt"))
             .trigger(processingTime="0 seconds").start())
    while not query.recentProgress:
        time.sleep(0.05)
    started = time.perf_counter()
    proc = producer(endpoint, count, size)
    while sum(p["numInputRows"] for p in query.recentProgress) < count:
        if query.exception():
            raise query.exception()
        time.sleep(0.02)
    elapsed = time.perf_counter() - started
    query.stop()
    proc.wait()
    return count / elapsed


def bare_push(count: int, size: int) -> float:
    pull = zmq.Context.instance().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    drained = threading.Thread(target=lambda: [pull.recv() for _ in range(count)])
    drained.start()
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(count):
        push.send(payload)
    push.close(linger=-1)
    context.term()
    elapsed = time.perf_counter() - started
    drained.join()
    pull.close(0)
    return count / elapsed


def connector_egress(spark, count: int, size: int) -> float:
    pull = zmq.Context.instance().socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    drained = threading.Thread(target=lambda: [pull.recv() for _ in range(count)])
    drained.start()
    df = spark.range(count).selectExpr(f"repeat('x', {size}) AS value").coalesce(1).cache()
    df.count()
    started = time.perf_counter()
    df.write.format("zmq").mode("append").option("endpoints", f"tcp://127.0.0.1:{port}").save()
    elapsed = time.perf_counter() - started
    drained.join()
    pull.close(0)
    df.unpersist()
    return count / elapsed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one repetition: proves the command works")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    args = parser.parse_args(argv)
    count, reps = (5_000, 1) if args.smoke else (args.messages, args.reps)

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    import spark_zmq

    spark_zmq.register(spark)

    scenarios = {
        "ingest-raw (100 B msgs/s)": (lambda: connector_ingest(spark, count, 100), lambda: bare_pull(count, 100), "bare pyzmq PULL loop"),
        "egress-raw (100 B msgs/s)": (lambda: connector_egress(spark, count, 100), lambda: bare_push(count, 100), "bare pyzmq PUSH loop"),
    }
    results = []
    for name, (ours, baseline, baseline_name) in scenarios.items():
        ours_runs, base_runs = [], []
        for _ in range(reps):  # back to back, so both see the same machine state
            base_runs.append(baseline())
            ours_runs.append(ours())
        row = {
            "scenario": name, "messages": count, "reps": reps, "baseline": baseline_name,
            "connector_median": statistics.median(ours_runs), "baseline_median": statistics.median(base_runs),
            "connector_runs": ours_runs, "baseline_runs": base_runs,
        }
        row["ratio"] = row["connector_median"] / row["baseline_median"]
        results.append(row)
        print(f"{name:28s} connector {row['connector_median']:>11,.0f}   {baseline_name} {row['baseline_median']:>11,.0f}   ratio {row['ratio']:.2f}")
    spark.stop()

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(f"# spark-zmq benchmark ({'smoke' if args.smoke else 'full'})\n\n")
        f.write("| scenario | connector (median) | baseline | baseline (median) | ratio | runs |\n|---|---|---|---|---|---|\n")
        for r in results:
            spread = f"{min(r['connector_runs']):,.0f}..{max(r['connector_runs']):,.0f}"
            f.write(f"| {r['scenario']} | {r['connector_median']:,.0f} | {r['baseline']} | {r['baseline_median']:,.0f} | {r['ratio']:.2f} | {spread} |\n")
    print(f"wrote {args.out}/results.json and report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
