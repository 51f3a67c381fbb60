"""A ``spark_zmq.worker.serve`` service in its own process, for the request-reply tests.

    python serve_worker.py --format arrow|json|text ENDPOINT [--rep] [--name NAME]
                           [--fail-on N] [--delay SECONDS]

Doubles ``x`` (arrow, json) or prefixes ``NAME:`` (text); ``--fail-on N`` raises in the
handler for a request holding x == N (json, arrow) or value == N (text), so the worker
answers with its error reply. Prints ``READY ...`` once connected or bound and
``SERVED n`` after each request it answered; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.worker import serve


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("--format", required=True)
    parser.add_argument("--rep", action="store_true", help="a REP server instead of a broker worker")
    parser.add_argument("--name", default="w")
    parser.add_argument("--fail-on", type=int)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--curve-certificate", help="a CURVE client of the broker: this worker's secret certificate")
    parser.add_argument("--curve-server-key", help="... and the broker's public certificate")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    served = [0]

    def done(reply):
        served[0] += 1
        print(f"SERVED {served[0]}", flush=True)
        return reply

    def arrow(batch: pa.RecordBatch) -> pa.RecordBatch:
        if args.delay:
            time.sleep(args.delay)
        x = batch.column("x")
        if args.fail_on is not None and args.fail_on in x.to_pylist():
            raise ValueError(f"x = {args.fail_on} is not scorable")
        return done(
            pa.record_batch(
                {"doubled": pc.multiply(x, 2), "worker": pa.array([args.name] * batch.num_rows, pa.string())}
            )
        )

    def json_row(row: dict) -> dict:
        if args.delay:
            time.sleep(args.delay)
        if args.fail_on is not None and row.get("x") == args.fail_on:
            raise ValueError(f"x = {args.fail_on} is not scorable")
        return done({"doubled": row["x"] * 2, "worker": args.name})

    def text(value: str) -> str:
        if args.fail_on is not None and value == str(args.fail_on):
            raise ValueError(f"value {value} is not scorable")
        return done(f"{args.name}:{value}")

    handler = {"arrow": arrow, "json": json_row, "text": text}[args.format]
    curve = None
    if args.curve_certificate:
        from spark_zmq.patterns.curve import Curve
        from spark_zmq.patterns.curve_keys import KeyPair, load_public_key

        curve = Curve.client(KeyPair.from_certificate(args.curve_certificate), load_public_key(args.curve_server_key))
    serve(
        handler,
        args.endpoint,
        format=args.format,
        broker=not args.rep,
        stop=stop,
        curve=curve,
        on_ready=lambda where: print(f"READY {where[0]}", flush=True),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
