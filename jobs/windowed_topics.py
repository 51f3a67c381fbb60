"""Windowed aggregation over pub/sub topics, with a watermark.

    spark-submit jobs/windowed_topics.py --endpoints tcp://publisher:5556 --topics alpha,beta \\
        --window "10 seconds" --watermark "30 seconds" --output /data/windows \\
        --checkpoint /data/windows-checkpoint

Subscribes (SUB) to the given topic prefixes of a publisher's ``[topic, payload]`` messages,
reads each payload as JSON sensor readings (``--schema``, event time in ``--time-column``,
epoch seconds), and counts and averages the readings per topic and event-time window. A
window is written (Parquet, append mode) once the watermark passes its end: events later
than ``--watermark`` behind the newest one seen are dropped by Spark, as usual.

The ``json`` format parses the payloads into ``--schema``'s columns, and the source option
``includeMetadata`` adds each message's ``topic`` (its first frame), ``partition``,
``offset`` and ``timestamp``, declared as the last four columns (Spark takes a declared
schema as it is). PUB/SUB is lossy by specification (a slow subscriber drops at its
high-water mark; messages published before the subscription arrive nowhere): use PUSH/PULL
where every message counts.

With CURVE the subscriber is normally the client of a publisher that is the server:
``--curve-certificate`` (this job's secret certificate) and ``--curve-server-key`` (the
publisher's public key); the publisher authorizes this job's public key.
"""

from __future__ import annotations

import sys

import jobkit


def parse_args(argv: list[str]):
    p = jobkit.parser(__doc__)
    p.add_argument("--endpoints", required=True, help="publisher endpoint(s) to connect to, e.g. tcp://host:5556")
    p.add_argument("--topics", default="", help="comma-separated topic prefixes (default: every topic)")
    p.add_argument(
        "--schema",
        default="seq long, sensor string, ts double, reading double",
        help="DDL schema of the JSON payload (default: spark-zmq produce's sensor readings)",
    )
    p.add_argument("--time-column", default="ts", help="event time column, epoch seconds (default ts)")
    p.add_argument("--value-column", default="reading", help="column to average (default reading)")
    p.add_argument("--window", default="10 seconds", help="window length (default '10 seconds')")
    p.add_argument("--watermark", default="30 seconds", help="allowed lateness (default '30 seconds')")
    p.add_argument("--output", required=True, help="directory of the Parquet files")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--spool-dir", help="the connector's spool (default: <checkpoint>/zmq-spool)")
    jobkit.add_common(p)
    jobkit.add_curve(p)
    args = p.parse_args(argv)
    jobkit.check_positive(p, args, "idle_timeout")
    args.spool_dir = jobkit.spool_dir(p, args)
    args.curve = jobkit.curve_options(p, args)
    return args


def _count_rows(spark, path: str) -> int:
    """Rows the file sink has committed to ``path`` (0 before its first file)."""
    try:
        return spark.read.parquet(path).count()
    except Exception:  # no committed file yet: Spark cannot infer a schema  # noqa: BLE001
        return 0


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = jobkit.session("spark-zmq-windowed-topics", args.master)
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    try:
        schema = StructType.fromDDL(args.schema)
    except Exception as exc:  # noqa: BLE001
        print(f"windowed_topics: --schema {args.schema!r} is not a valid DDL schema: {exc}", file=sys.stderr)
        return 2
    for column in (args.time_column, args.value_column):
        if column not in schema.fieldNames():
            print(
                f"windowed_topics: column {column!r} is not in --schema ({', '.join(schema.fieldNames())})",
                file=sys.stderr,
            )
            return 2
    metadata = "topic string, partition int, offset long, timestamp timestamp"
    clash = [c for c in schema.fieldNames() if c in ("topic", "partition", "offset", "timestamp")]
    if clash:
        print(
            f"windowed_topics: --schema column {clash[0]!r} has the name of a metadata column ({metadata})",
            file=sys.stderr,
        )
        return 2

    messages = (
        spark.readStream.format("zmq")
        .option("pattern", "sub")
        .option("endpoints", args.endpoints)
        .option("topics", args.topics)
        .option("format", "json")
        .option("includeMetadata", "true")
        .option("spoolDir", args.spool_dir)
        .option("timeout", str(args.idle_timeout))
        .options(**args.curve)
        .options(**jobkit.fetch_options(args))
        .schema(f"{args.schema}, {metadata}")
        .load()
    )
    readings = messages
    windows = (
        readings.withColumn("event_time", F.col(args.time_column).cast("timestamp"))
        .withWatermark("event_time", args.watermark)
        .groupBy(F.window("event_time", args.window), "topic")
        .agg(F.count("*").alias("readings"), F.avg(args.value_column).alias(f"avg_{args.value_column}"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "topic",
            "readings",
            f"avg_{args.value_column}",
        )
    )
    query = (
        windows.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(**jobkit.trigger(args))
        .start()
    )
    jobkit.run_query(query)
    written = _count_rows(spark, args.output) if query.exception() is None else 0
    return jobkit.finish(
        spark,
        query,
        "windowed_topics",
        f"{jobkit.rows_in(query)} messages in, {written} closed windows in {args.output}",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
