"""A pipeline stage: Arrow batches in over ZeroMQ (PULL), a SQL transform, Arrow out (PUSH).

    spark-submit jobs/pipeline_stage.py --input @tcp://*:5555 --output tcp://next-stage:5556 \\
        --schema "seq long, sensor string, ts double, reading double" \\
        --sql "SELECT seq, sensor, reading * 1.8 + 32 AS fahrenheit FROM input WHERE reading > 0" \\
        --checkpoint /data/stage-checkpoint

Spark sits in the middle of a ZeroMQ pipeline: upstream PUSH producers send Arrow IPC
messages (many rows each), this stage reads them with the connector (``input`` is the
stream as a temporary view), runs ``--sql``, and sends each micro-batch's result
round-robin to the downstream PULL peers as Arrow messages of up to --rows-per-message rows.
Input is exactly-once into Spark; output is at-least-once, and every Arrow message carries
its query id, batch id, partition and sequence in the schema metadata so the next stage can
drop a retried task's duplicates.

Chained stages: when the upstream is itself a spark-zmq sink (another pipeline_stage, or
any query writing format=arrow with pattern push), ``--committed-only`` reads only the task
runs that upstream's commit records name, so each upstream row enters this stage exactly
once, across the upstream's task retries and restarts and this stage's restarts (see
docs/pipelines.md):

    spark-submit jobs/pipeline_stage.py --input @tcp://*:5556 --output tcp://sink:5557 \\
        --schema "seq long, sensor string, fahrenheit double" --committed-only --checkpoint /data/stage-2

CURVE: the two sides have separate flags, because a stage usually plays both roles: the
server of its upstream producers (``--curve-certificate`` with ``--curve-authorized-keys``)
and a client of the next stage (``--sink-curve-server-key``). ``--curve-*`` secure the
input, ``--sink-curve-*`` the output; the output uses ``--curve-certificate`` too (one
identity per stage) unless ``--sink-curve-certificate`` names another one. Without any
``--sink-curve-*`` flag the output is not encrypted.

    spark-submit jobs/pipeline_stage.py --input @tcp://*:5555 --output tcp://next-stage:5556 \\
        --curve-certificate keys/stage.key_secret --curve-authorized-keys keys/producers/ \\
        --sink-curve-server-key keys/next-stage.key ...
"""

from __future__ import annotations

import sys

import jobkit


def parse_args(argv: list[str]):
    p = jobkit.parser(__doc__)
    p.add_argument("--input", required=True, help="endpoints to PULL Arrow messages from, e.g. @tcp://*:5555")
    p.add_argument("--output", required=True, help="endpoints to PUSH results to, e.g. tcp://next:5556")
    p.add_argument("--schema", required=True, help="DDL schema of the incoming Arrow batches")
    p.add_argument(
        "--sql",
        default="SELECT * FROM input",
        help="the transform; the incoming stream is the view 'input' (default: pass through)",
    )
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    p.add_argument("--spool-dir", help="the connector's spool (default: <checkpoint>/zmq-spool)")
    p.add_argument("--rows-per-message", type=int, default=10_000, help="rows per outgoing message (default 10000)")
    p.add_argument(
        "--send-timeout-ms",
        type=int,
        default=30_000,
        help="fail a write task after this long without a downstream peer (default 30000)",
    )
    p.add_argument("--max-rows-per-trigger", type=int, help="cap on rows per micro-batch")
    p.add_argument(
        "--committed-only",
        action="store_true",
        help="the input is a spark-zmq sink's output: read only the task runs its commit records name "
        "(each upstream row once; option committedOnly)",
    )
    jobkit.add_common(p)
    jobkit.add_curve(p, side="the input (--input)")
    jobkit.add_curve(p, "sink-", side="the output (--output; the certificate defaults to --curve-certificate)")
    args = p.parse_args(argv)
    jobkit.check_positive(p, args, "rows_per_message", "send_timeout_ms", "max_rows_per_trigger", "idle_timeout")
    args.spool_dir = jobkit.spool_dir(p, args)
    args.curve = jobkit.curve_options(p, args)
    args.sink_curve = jobkit.curve_options(p, args, "sink-", certificate=args.curve_certificate)
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = jobkit.session("spark-zmq-pipeline-stage", args.master)
    reader = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", args.input)
        .option("format", "arrow")
        .schema(args.schema)
        .option("spoolDir", args.spool_dir)
        .option("timeout", str(args.idle_timeout))
        .options(**args.curve)
        .options(**jobkit.fetch_options(args))
    )
    if args.max_rows_per_trigger:
        reader = reader.option("maxRowsPerTrigger", str(args.max_rows_per_trigger))
    if args.committed_only:
        reader = reader.option("committedOnly", "true")
    reader.load().createOrReplaceTempView("input")
    try:
        transformed = spark.sql(args.sql)
    except Exception as exc:  # noqa: BLE001
        print(f"pipeline_stage: --sql is not a valid query over the view 'input': {exc}", file=sys.stderr)
        spark.stop()
        return 2
    query = (
        transformed.writeStream.format("zmq")
        .option("pattern", "push")
        .option("endpoints", args.output)
        .option("format", "arrow")
        .option("rowsPerMessage", str(args.rows_per_message))
        .option("sendTimeoutMs", str(args.send_timeout_ms))
        .options(**args.sink_curve)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(**jobkit.trigger(args))
        .start()
    )
    jobkit.run_query(query)
    return jobkit.finish(
        spark, query, "pipeline_stage", f"{jobkit.rows_in(query)} rows in, transformed with: {args.sql}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
