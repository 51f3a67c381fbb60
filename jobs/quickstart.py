"""spark-zmq quickstart: ZeroMQ in, Spark, ZeroMQ out, on an embedded default.

    spark-submit jobs/quickstart.py [--messages 5000] [--rate 2500] [--master local[2]]
    spark-submit jobs/quickstart.py --endpoints @tcp://*:5555 --no-producer   # your own producer

A built-in producer sends sensor readings as JSON over ZeroMQ (PUSH); a Spark query reads
them with the connector (PULL), averages them per sensor, and writes the results back out
over ZeroMQ (PUSH, Arrow) to a built-in collector (PULL). It runs with
Trigger.AvailableNow, so it stops by itself once the producer is done, and prints a
summary: rows in, rows out, rate and lag. ``--endpoints`` says where the source receives
(the built-in producer connects there); with ``--no-producer`` your own producers send
JSON objects with ``sensor`` and ``reading`` (``spark-zmq produce --format json`` does),
and the query stops after 2 s of silence.

With CURVE the Spark source is the server and the built-in producer its client:

    spark-zmq keygen server --dir keys && spark-zmq keygen producer --dir keys/clients
    spark-submit jobs/quickstart.py --curve-certificate keys/server.key_secret \\
        --curve-authorized-keys keys/clients --producer-curve-certificate keys/clients/producer.key_secret

With ``--curve-authorized-keys '*'`` the producer needs no certificate (it makes a
throw-away key pair). The results' hop to the built-in collector stays unencrypted: both
of its ends are in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

import jobkit  # noqa: E402  (sets PYSPARK_PYTHON to this interpreter first)
import pyarrow as pa  # noqa: E402
import zmq  # noqa: E402

from spark_zmq.cli import loadgen  # noqa: E402  (the built-in producer: sensor readings over PUSH)
from spark_zmq.free_ports import free_tcp_port  # noqa: E402


def free_port() -> int:
    """A port below the ephemeral range, which no connection takes before the query binds it."""
    return free_tcp_port()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=5000, help="sensor readings to send (default 5000)")
    parser.add_argument("--rate", type=float, default=2500.0, help="messages per second (default 2500)")
    parser.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's --master, else local[2] from conf/)"
    )
    parser.add_argument(
        "--endpoints",
        default=None,
        help="where the Spark source receives, e.g. @tcp://*:5555 (default: a free loopback port); "
        "the built-in producer connects there",
    )
    parser.add_argument(
        "--no-producer",
        action="store_true",
        help="start no built-in producer: read what your own producers send to --endpoints",
    )
    curve = jobkit.add_curve(parser, side="the Spark source (a CURVE server: the built-in producer is its client)")
    curve.add_argument(
        "--producer-curve-certificate",
        metavar="FILE",
        help="the built-in producer's secret certificate; its public key must be in "
        "--curve-authorized-keys (not needed with '*')",
    )
    jobkit.add_fetch(parser)
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rate <= 0:
        parser.error("--messages must be >= 1 and --rate > 0")
    if args.no_producer and not args.endpoints:
        parser.error("--no-producer needs --endpoints (where your producers send)")
    if args.endpoints:
        from spark_zmq.patterns import parse_endpoints

        try:
            parsed = parse_endpoints(args.endpoints, default_bind=True)
        except ValueError as exc:
            parser.error(f"--endpoints: {exc}")
        if not args.no_producer and any(not e.bind for e in parsed):
            parser.error(
                "--endpoints: the built-in producer connects to the source, so the source binds "
                "(@tcp://...); a source that connects out needs --no-producer"
            )
    args.curve = jobkit.curve_options(parser, args)
    args.producer_curve = producer_curve(parser, args)
    return args


def producer_curve(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The built-in producer's CURVE client settings matching the source's flags (``None``
    without CURVE); a producer the source would refuse is a usage error now, not a quickstart
    that waits for readings that never arrive."""
    from spark_zmq.patterns.curve import Curve
    from spark_zmq.patterns.curve_keys import ANY_KEY, CurveError, KeyPair, load_authorized_keys

    if not args.curve:
        if args.producer_curve_certificate:
            parser.error(
                "--producer-curve-certificate needs --curve-certificate and --curve-authorized-keys "
                "(the Spark source's CURVE server settings)"
            )
        return None
    if "curveServerKey" in args.curve:
        parser.error(
            "--curve-server-key would make the Spark source a CURVE client, and the built-in producer "
            "cannot be its server; give --curve-authorized-keys (the source is the server)"
        )
    server = KeyPair.from_certificate(args.curve["curveCertificate"])
    authorized = load_authorized_keys(args.curve["curveAuthorizedKeys"])
    if args.producer_curve_certificate:
        try:
            keys = KeyPair.from_certificate(args.producer_curve_certificate, "--producer-curve-certificate")
        except CurveError as exc:
            parser.error(f"--producer-curve-certificate: {exc}")
        if authorized != ANY_KEY and keys.public_key not in authorized:
            parser.error(
                f"--producer-curve-certificate: its public key {keys.public_key.decode()} is not among "
                f"the keys in --curve-authorized-keys {args.curve_authorized_keys}, so the source would "
                "refuse the built-in producer"
            )
    elif authorized == ANY_KEY:
        keys = KeyPair.generate()
    else:
        parser.error(
            "--curve-authorized-keys DIR accepts only the keys in DIR: give the built-in producer one "
            "of them with --producer-curve-certificate, or accept any key with '*'"
        )
    return Curve.client(keys, server.public_key)


def producer_endpoints(source_endpoints: str) -> str:
    """Where the built-in producer connects: the source's bound endpoints, a wildcard host
    as loopback."""
    from spark_zmq.patterns import parse_endpoints

    out = []
    for endpoint in parse_endpoints(source_endpoints, default_bind=True):
        address = endpoint.address
        for wildcard in ("//*:", "//0.0.0.0:", "//[::]:"):
            address = address.replace(wildcard, "//127.0.0.1:")
        out.append(address)
    return ",".join(out)


class Collector(threading.Thread):
    """The built-in consumer of the results: a PULL socket decoding Arrow messages."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.pull = zmq.Context.instance().socket(zmq.PULL)
        self.pull.bind(endpoint)
        self.rows = 0
        self.latest: dict[str, dict] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            if self.pull.poll(100):
                table = pa.ipc.open_stream(self.pull.recv()).read_all()
                self.rows += table.num_rows
                for row in table.to_pylist():
                    self.latest[row["sensor"]] = row


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = jobkit.session("spark-zmq-quickstart", args.master)

    results = f"tcp://127.0.0.1:{free_port()}"
    source_endpoints = args.endpoints or f"@tcp://127.0.0.1:{free_port()}"
    ingest = producer_endpoints(source_endpoints)
    collector = Collector(results)
    collector.start()
    producer = threading.Thread(
        target=loadgen.produce,
        args=(ingest,),
        daemon=True,
        kwargs=dict(
            format="json", count=args.messages, rate=args.rate, hwm=args.messages + 1, curve=args.producer_curve
        ),
    )
    workdir = tempfile.mkdtemp(prefix="spark-zmq-quickstart-")
    started = time.monotonic()
    if not args.no_producer:
        producer.start()

    readings = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", source_endpoints)
        .option("format", "json")
        .schema("sensor string, ts double, reading double")
        .option("spoolDir", os.path.join(workdir, "spool"))
        .option("timeout", "2")  # AvailableNow: stop once the producers are quiet for 2 s
        # a temporary spool no restart reads: the receivers stop with the query, freeing the
        # port for the next run (else they linger 300 s for a restart, taking its messages)
        .option("receiverLingerSeconds", "0")
        .options(**args.curve)
        .options(**jobkit.fetch_options(args))
        .load()
    )
    summary = (
        readings.groupBy("sensor")
        .agg({"reading": "avg", "*": "count"})
        .withColumnRenamed("avg(reading)", "avg_reading")
        .withColumnRenamed("count(1)", "readings")
    )
    query = (
        summary.writeStream.format("zmq")
        .option("pattern", "push")
        .option("endpoints", results)
        .option("format", "arrow")
        .option("checkpointLocation", os.path.join(workdir, "checkpoint"))
        .outputMode("complete")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if not args.no_producer:
        producer.join(60)
    elapsed = time.monotonic() - started
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows_in = sum(p["numInputRows"] for p in progress)
    deadline = time.monotonic() + 10
    while collector.rows < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    collector.done.set()
    collector.join(5)
    last = query.lastProgress["sources"][0] if query.lastProgress else {}
    latest = json.loads(last["latestOffset"]) if last.get("latestOffset") else {}
    lag = latest.get("lag", {"records": 0, "bytes": 0})  # received, in no planned batch yet

    print("\nspark-zmq quickstart")
    print(f"  rows in   {rows_in:>8}   (sensor readings received over ZeroMQ PULL, json)")
    print(f"  rows out  {collector.rows:>8}   (per-sensor aggregates sent over ZeroMQ PUSH, arrow)")
    busy_s = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000 or elapsed
    print(
        f"  rate      {rows_in / busy_s:>8.0f}   rows/s processed, in {len(progress)} micro-batch(es); {elapsed:.1f} s in all"
    )
    print(
        f"  lag       {lag['records']:>8}   messages ({lag['bytes']} bytes) received but not yet processed at the end"
    )
    for sensor in sorted(collector.latest):
        row = collector.latest[sensor]
        print(f"    {sensor}: {row['readings']:>5} readings, average {row['avg_reading']:.2f}")
    spark.stop()
    shutil.rmtree(workdir, ignore_errors=True)
    expected = rows_in if args.no_producer else args.messages
    ok = rows_in == expected and (collector.rows > 0 or rows_in == 0) and query.exception() is None
    if not ok:
        print(f"quickstart FAILED: expected {expected} rows in, got {rows_in}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
