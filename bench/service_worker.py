"""An echo service for the request-reply benchmarks: plain pyzmq, one process per worker.

    python service_worker.py --format arrow|json (--bind EP | --broker EP) [--delay-ms D]

``arrow``: the request's Arrow stream comes back with its column ``x`` renamed ``y`` (a
decode and an encode, as any Arrow service does); ``json``: the request's JSON text with
``"x"`` renamed ``"y"``. ``--bind``: a REP server; ``--broker``: a REQ worker of a
load-balancing broker (``READY`` first). ``--delay-ms`` sleeps per request (a slow worker).
Prints ``READY <endpoint>`` once bound or connected.
"""

from __future__ import annotations

import argparse
import sys
import time

import pyarrow as pa
import zmq


def rename(body: bytes) -> bytes:
    table = pa.ipc.open_stream(body).read_all().rename_columns(["y"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", choices=("arrow", "json"), required=True)
    parser.add_argument("--bind")
    parser.add_argument("--broker")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    sock = zmq.Context.instance().socket(zmq.REQ if args.broker else zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    if args.broker:
        sock.connect(args.broker)
        sock.send(b"READY")
        where = args.broker
    else:
        sock.bind(args.bind)
        where = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    print(f"READY {where}", flush=True)
    answer = rename if args.format == "arrow" else (lambda body: body.replace(b'"x"', b'"y"', 1))
    delay = args.delay_ms / 1000
    while True:
        frames = sock.recv_multipart(copy=True)
        if delay:
            time.sleep(delay)
        frames[-1] = answer(frames[-1])
        sock.send_multipart(frames)


if __name__ == "__main__":
    sys.exit(main())
