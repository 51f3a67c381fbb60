"""What every example job shares: a SparkSession with the project's settings, argument
checks that end in a usage message (exit 2) rather than a traceback, and a summary line.

Why a module next to the jobs rather than in the package: it reads ``conf/`` from this
checkout, which an installed ``spark_zmq`` does not carry. ``spark-submit jobs/x.py`` puts
``jobs/`` on ``sys.path``, so ``import jobkit`` works there and in tests.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import this interpreter

CONF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "conf", "spark-defaults.conf")


def spark_defaults() -> dict[str, str]:
    """conf/spark-defaults.conf, so a job runs with the project's settings under plain
    spark-submit as well as under ``--properties-file``."""
    settings: dict[str, str] = {}
    if os.path.exists(CONF):
        with open(CONF) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    key, _, value = line.partition(" ")
                    settings[key] = value.strip()
    return settings


def session(app_name: str, master: str | None = None):
    """A SparkSession with conf/spark-defaults.conf applied, Python workers on this
    interpreter and the ``zmq`` format registered. ``master`` overrides the conf; under
    ``spark-submit --master`` pass ``None`` and Spark's own setting wins."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_defaults().items():
        if key == "spark.master" and (master or _under_spark_submit()):
            continue  # an explicit --master, or spark-submit's own choice, wins
        builder = builder.config(key, value)
    if master:
        builder = builder.master(master)
    spark = builder.config("spark.pyspark.python", sys.executable).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import spark_zmq

    spark_zmq.register(spark)
    return spark


def _under_spark_submit() -> bool:
    """True when spark-submit started this driver (its JVM is already up and has chosen
    the master: ``--master``, or its own default)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose description is the job's docstring."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_common(p: argparse.ArgumentParser) -> None:
    """--master, and the AvailableNow switch every job has."""
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's --master, else conf/spark-defaults.conf)")
    p.add_argument("--available-now", action="store_true",
                   help="process what producers have sent until --idle-timeout seconds pass without a "
                        "message, then stop (Trigger.AvailableNow); default: run until interrupted")
    p.add_argument("--idle-timeout", type=float, default=5.0,
                   help="seconds without a message that end an --available-now run (default 5)")
    p.add_argument("--trigger-seconds", type=float, default=0.0,
                   help="micro-batch interval when running continuously (default 0: as fast as possible)")


def check_positive(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Reject non-positive numeric arguments with a usage message (exit 2)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {value}")


def trigger(args: argparse.Namespace) -> dict:
    """The ``DataStreamWriter.trigger`` keyword for the common arguments."""
    if args.available_now:
        return {"availableNow": True}
    return {"processingTime": f"{args.trigger_seconds} seconds"}


def run_query(query) -> None:
    """Wait for the query; Ctrl-C stops it cleanly (the checkpoint stays consistent)."""
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


def spool_dir(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """--spool-dir, or ``<checkpoint>/zmq-spool`` when the checkpoint is a local path (the
    spool is a local directory on the driver; it cannot live on HDFS or S3)."""
    # absolute: the connector refuses a relative spoolDir (its processes run elsewhere)
    if args.spool_dir:
        return os.path.abspath(os.path.expanduser(args.spool_dir))
    if "://" in args.checkpoint and not args.checkpoint.startswith("file://"):
        p.error(f"--spool-dir is required when --checkpoint is not a local path ({args.checkpoint})")
    return os.path.abspath(os.path.join(args.checkpoint.removeprefix("file://"), "zmq-spool"))


def rows_in(query) -> int:
    """Input rows over the query's recent progress reports (Spark keeps the last 100)."""
    return sum(p["numInputRows"] for p in query.recentProgress)


def finish(spark, query, job: str, summary: str) -> int:
    """Print the job's summary line, stop Spark, and return the exit code: 1 with the
    reason on stderr if the query failed."""
    error = query.exception()
    print(f"{job}: {summary}")
    spark.stop()
    if error is not None:
        print(f"{job} FAILED: {error}", file=sys.stderr)
        return 1
    return 0
