"""ZeroMQ to Parquet, exactly once: every message received lands in the files once, across
stops, crashes and restarts from the same checkpoint.

    spark-submit jobs/zmq_to_parquet.py --endpoints @tcp://*:5555 --format json \\
        --schema "seq long, sensor string, ts double, reading double" \\
        --output /data/readings --checkpoint /data/readings-checkpoint

The connector's spool (kept under the checkpoint unless --spool-dir says otherwise) holds
what was received but not yet committed; Spark's file sink commits each micro-batch's files
with its offsets, so a restart replays exactly what the files lack. Keep the checkpoint and
the spool together: losing either one loses that guarantee.

With CURVE, a receiver that binds is usually the server (``--curve-certificate`` and
``--curve-authorized-keys``, the producers are its clients); one that connects, a client
(``--curve-certificate`` and ``--curve-server-key``).
"""

from __future__ import annotations

import sys

import jobkit


def parse_args(argv: list[str]):
    p = jobkit.parser(__doc__)
    p.add_argument("--endpoints", required=True, help="ZeroMQ endpoints to receive on, e.g. @tcp://*:5555")
    p.add_argument("--pattern", choices=("pull", "gather", "sub"), default="pull", help="default pull")
    p.add_argument("--format", choices=("raw", "text", "json", "arrow"), default="json", help="default json")
    p.add_argument("--schema", help="DDL schema of json/arrow messages (required for those formats)")
    p.add_argument("--topics", default="", help="comma-separated SUB topic prefixes (sub only)")
    p.add_argument("--output", required=True, help="directory of the Parquet files")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it between runs)")
    p.add_argument("--spool-dir", help="the connector's spool (default: <checkpoint>/zmq-spool)")
    p.add_argument("--partition-by", default="", help="comma-separated columns to partition the files by")
    p.add_argument("--max-rows-per-trigger", type=int, help="cap on rows per micro-batch")
    jobkit.add_common(p)
    jobkit.add_curve(p)
    args = p.parse_args(argv)
    if args.format in ("json", "arrow") and not args.schema:
        p.error(f'--schema is required for --format {args.format}, e.g. "seq long, sensor string"')
    if args.topics and args.pattern != "sub":
        p.error("--topics only applies to --pattern sub")
    jobkit.check_positive(p, args, "max_rows_per_trigger", "idle_timeout")
    args.spool_dir = jobkit.spool_dir(p, args)
    args.curve = jobkit.curve_options(p, args)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = jobkit.session("spark-zmq-to-parquet", args.master)
    reader = (
        spark.readStream.format("zmq")
        .option("pattern", args.pattern)
        .option("endpoints", args.endpoints)
        .option("format", args.format)
        .option("spoolDir", args.spool_dir)
        .option("timeout", str(args.idle_timeout))
        .options(**args.curve)
        .options(**jobkit.fetch_options(args))
    )
    if args.schema:
        reader = reader.schema(args.schema)
    if args.topics:
        reader = reader.option("topics", args.topics)
    if args.max_rows_per_trigger:
        reader = reader.option("maxRowsPerTrigger", str(args.max_rows_per_trigger))
    writer = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(**jobkit.trigger(args))
    )
    if args.partition_by:
        writer = writer.partitionBy(*[c.strip() for c in args.partition_by.split(",") if c.strip()])
    query = writer.start()
    jobkit.run_query(query)
    batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    return jobkit.finish(
        spark,
        query,
        "zmq_to_parquet",
        f"{jobkit.rows_in(query)} rows written to {args.output} in {batches} micro-batch(es)",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
