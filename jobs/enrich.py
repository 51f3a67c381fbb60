"""Enrich a ZeroMQ stream by calling a ZeroMQ service: PULL in, request/reply out to the
service for every row, then Parquet files (exactly once) or PUSH to the next stage.

    spark-submit jobs/enrich.py --input @tcp://*:5555 --format json \\
        --schema "seq long, sensor string, reading double" \\
        --service tcp://scoring-broker:5559 --reply-schema "score double, label string" \\
        --output /data/scored --checkpoint /data/scored-checkpoint

The service is any REP worker (pyzmq, C, zeromq.js, ``spark_zmq.worker.serve``), several of
them (``--service`` takes a comma-separated list; requests round-robin), or the frontend of
``spark-zmq broker``. Rows go to it as Arrow requests of up to --batch-rows rows (the
default) or one JSON object per row (``--request-format json``), with --max-in-flight
requests outstanding per task; a request unanswered within --timeout is sent again up to
--retries times, then the task fails and Spark retries it. Calls are at least once, so
the service must be idempotent; with ``--output`` each input row is written once across
restarts from the same checkpoint.

CURVE: ``--curve-*`` secure the input (as for zmq_to_parquet.py); ``--service-curve-*``
make the calls a CURVE client of the service (its certificate and the service's key).
"""

from __future__ import annotations

import sys

import jobkit


def parse_args(argv: list[str]):
    p = jobkit.parser(__doc__)
    p.add_argument("--input", required=True, help="endpoints to PULL from, e.g. @tcp://*:5555")
    p.add_argument("--format", choices=("json", "arrow"), default="json", help="incoming messages (default json)")
    p.add_argument("--schema", required=True, help="DDL schema of the incoming messages")
    p.add_argument("--service", required=True, help="the service's endpoints (workers or a broker's frontend)")
    p.add_argument("--reply-schema", required=True, help="DDL schema of the service's replies")
    p.add_argument(
        "--request-format",
        choices=("arrow", "json"),
        default="arrow",
        help="arrow: --batch-rows rows per request; json: one row per request (default arrow)",
    )
    p.add_argument("--batch-rows", type=int, default=1000, help="rows per Arrow request (default 1000)")
    p.add_argument("--max-in-flight", type=int, default=4, help="requests outstanding per task (default 4)")
    p.add_argument("--timeout", default="30s", help="wait for a reply before resending, e.g. 5s (default 30s)")
    p.add_argument("--retries", type=int, default=2, help="resends before the task fails (default 2)")
    p.add_argument(
        "--mode",
        choices=("FAILFAST", "PERMISSIVE"),
        default="FAILFAST",
        help="a reply that does not fit: fail, or null reply columns (default FAILFAST)",
    )
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--output", help="directory of the Parquet files (exactly once)")
    out.add_argument("--push", help="endpoints to PUSH the enriched rows to as Arrow messages")
    p.add_argument("--checkpoint", required=True, help="Spark checkpoint directory (keep it between runs)")
    p.add_argument("--spool-dir", help="the connector's spool (default: <checkpoint>/zmq-spool)")
    p.add_argument("--max-rows-per-trigger", type=int, help="cap on rows per micro-batch")
    jobkit.add_common(p)
    jobkit.add_curve(p, side="the input (--input)")
    jobkit.add_curve(p, "service-", side="the calls (--service; a CURVE client of the service)")
    args = p.parse_args(argv)
    jobkit.check_positive(p, args, "batch_rows", "max_in_flight", "max_rows_per_trigger", "idle_timeout")
    if args.retries < 0:
        p.error(f"--retries must be >= 0, got {args.retries}")
    args.spool_dir = jobkit.spool_dir(p, args)
    args.curve = jobkit.curve_options(p, args)
    args.service_curve = jobkit.curve_options(p, args, "service-")
    args.call = dict(
        reply_schema=args.reply_schema,
        format=args.request_format,
        batch_rows=args.batch_rows,
        max_in_flight=args.max_in_flight,
        timeout=args.timeout,
        retries=args.retries,
        mode=args.mode,
        **args.service_curve,
    )
    from spark_zmq.options import OptionError, RequestOptions

    try:  # every option checked before Spark starts: a usage error, not a failed task
        RequestOptions.parse({"endpoints": args.service, "timeout": args.timeout})
    except OptionError as exc:
        p.error(str(exc).replace("option 'endpoints'", "--service").replace("option 'timeout'", "--timeout"))
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = jobkit.session("spark-zmq-enrich", args.master)
    import spark_zmq

    reader = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", args.input)
        .option("format", args.format)
        .schema(args.schema)
        .option("spoolDir", args.spool_dir)
        .option("timeout", str(args.idle_timeout))
        .options(**args.curve)
        .options(**jobkit.fetch_options(args))
    )
    if args.max_rows_per_trigger:
        reader = reader.option("maxRowsPerTrigger", str(args.max_rows_per_trigger))
    try:
        enriched = spark_zmq.request(reader.load(), args.service, **args.call)
    except ValueError as exc:  # a reply schema that clashes or does not parse
        print(f"enrich: {exc}", file=sys.stderr)
        spark.stop()
        return 2
    writer = enriched.writeStream.option("checkpointLocation", args.checkpoint).outputMode("append")
    if args.output:
        writer = writer.format("parquet").option("path", args.output)
    else:
        writer = writer.format("zmq").option("pattern", "push").option("endpoints", args.push).option("format", "arrow")
    query = writer.trigger(**jobkit.trigger(args)).start()
    jobkit.run_query(query)
    where = args.output or args.push
    return jobkit.finish(
        spark, query, "enrich", f"{jobkit.rows_in(query)} rows in, enriched by {args.service}, out to {where}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
