"""A plain pyzmq REP (or REQ broker-worker) service for the request-reply tests: no
spark_zmq code, so the tests check the connector against a worker nobody here wrote.

    python rep_worker.py --format arrow|json|raw|text [--bind EP | --connect EP] [--broker]
                         [--every-other] [--hold-after N] [--reply garbage|billion|rows+1|nothing]
                         [--name NAME] [--delay SECONDS]

Prints ``READY <endpoint>`` on stdout once bound (or connected), then ``SERVED <n>`` after
every request it answers (so a test can wait for "n requests served" without sleeping).
Handlers: arrow replies ``doubled = x * 2`` and ``worker = NAME`` for every row; json
replies ``{"doubled": x * 2, "worker": NAME}``; raw/text reply ``NAME:`` + the request.
``--router`` makes it a ROUTER worker that echoes the envelope (the Guide's asynchronous
server); ``--every-other`` (ROUTER only: a REP must answer each request) leaves every
second request unanswered; ``--hold-after N`` receives request N+1 and
never answers (the test kills it meanwhile); ``--reply`` sends hostile replies.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time

import pyarrow as pa
import zmq

#: the request column the handlers double (``--column``)
COLUMN = "x"


def arrow_reply(body: bytes, name: str) -> bytes:
    table = pa.ipc.open_stream(io.BytesIO(body)).read_all()
    doubled = pa.array([None if v is None else v * 2 for v in table.column(COLUMN).to_pylist()], pa.int64())
    reply = pa.table({"doubled": doubled, "worker": pa.array([name] * table.num_rows, pa.string())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, reply.schema) as writer:
        writer.write_table(reply)
    return sink.getvalue().to_pybytes()


def hostile(kind: str, body: bytes, fmt: str) -> bytes:
    if kind == "garbage":
        return b"\xff\x00garbage" * 7
    if kind == "billion":  # an Arrow stream whose record batch claims 10^9 rows
        schema = pa.schema([("doubled", pa.int64()), ("worker", pa.string())])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            writer.write_batch(pa.record_batch([pa.array([1], pa.int64()), pa.array(["w"])], schema=schema))
        data = bytearray(sink.getvalue().to_pybytes())
        # the record batch's length field: the int64 1 after the schema message
        at = data.rfind((1).to_bytes(8, "little"))
        data[at : at + 8] = (10**9).to_bytes(8, "little")
        return bytes(data)
    if kind == "rows+1" and fmt == "arrow":
        table = pa.ipc.open_stream(io.BytesIO(body)).read_all()
        table = pa.concat_tables([table, table.slice(0, 1)])
        return arrow_reply(_stream(table), "w")
    raise SystemExit(f"unknown --reply {kind}")


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def answer(body: bytes, fmt: str, name: str) -> bytes:
    if fmt == "arrow":
        return arrow_reply(body, name)
    if fmt == "json":
        row = json.loads(body)
        value = row.get(COLUMN)
        return json.dumps({"doubled": None if value is None else value * 2, "worker": name}).encode()
    return name.encode() + b":" + body


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--format", required=True)
    parser.add_argument("--bind")
    parser.add_argument("--connect")
    parser.add_argument("--broker", action="store_true", help="a REQ worker of a load-balancing broker")
    parser.add_argument("--router", action="store_true", help="a ROUTER worker echoing the envelope")
    parser.add_argument("--every-other", action="store_true")
    parser.add_argument("--hold-after", type=int)
    parser.add_argument("--reply")
    parser.add_argument("--name", default="w")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--curve-secret-file", help="a CURVE server with this secret certificate (zmq.auth format)")
    parser.add_argument("--authorized", help="zmq.auth: the directory of client certificates it accepts")
    parser.add_argument("--column", default="x", help="the request column the handlers double")
    args = parser.parse_args()
    global COLUMN
    COLUMN = args.column
    context = zmq.Context()
    if args.every_other and not args.router:
        raise SystemExit("--every-other needs --router (a REP socket must answer every request)")
    sock = context.socket(zmq.REQ if args.broker else zmq.ROUTER if args.router else zmq.REP)
    sock.setsockopt(zmq.LINGER, 0)
    if args.curve_secret_file:
        from zmq.auth import load_certificate
        from zmq.auth.thread import ThreadAuthenticator

        public, secret = load_certificate(args.curve_secret_file)
        if args.authorized:
            auth = ThreadAuthenticator(context)
            auth.start()
            auth.configure_curve(domain="*", location=args.authorized)
        sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
    if args.bind:
        sock.bind(args.bind)
        where = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    else:
        sock.connect(args.connect)
        where = args.connect
    if args.broker:
        sock.send(b"READY")
    print(f"READY {where}", flush=True)
    served = 0
    received = 0
    while True:
        frames = sock.recv_multipart()
        received += 1
        envelope, body = (frames[:-1], frames[-1]) if args.broker or args.router else ([], frames[-1])
        if args.hold_after is not None and received > args.hold_after:
            print(f"HOLDING {received}", flush=True)
            time.sleep(3600)
        if args.delay:
            time.sleep(args.delay)
        if args.every_other and received % 2 == 0:
            continue
        if args.reply == "unknown-id" and args.router:
            # a reply to a request this client never sent, a second reply to the request
            # answered before this one (this worker answers in turn, so it was), one with
            # a malformed id, then the real one: only the last may reach the output
            previous = int.from_bytes(envelope[1], "big") - 1
            sock.send_multipart([envelope[0], (2**62).to_bytes(8, "big"), b"", b"stray"])
            sock.send_multipart([envelope[0], previous.to_bytes(8, "big"), b"", b"stray"])
            sock.send_multipart([envelope[0], b"short", b"", b"stray"])
            reply = answer(body, args.format, args.name)
        else:
            reply = hostile(args.reply, body, args.format) if args.reply else answer(body, args.format, args.name)
        sock.send_multipart(envelope + [reply])
        served += 1
        print(f"SERVED {served}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
