"""A broker worker written with plain pyzmq (nothing of spark_zmq), run as its own process
by the broker tests::

    python broker_worker.py BACKEND NAME [--delay S] [--hold-after N] [--reply-bytes N]

It connects a REQ socket to BACKEND, sends ``READY``, then answers each request
``[envelope..., b"", body]`` with ``[envelope..., b"", NAME:body]`` after ``--delay``
seconds. With ``--hold-after N`` it takes its N-th request and never answers it (prints
``holding BODY`` and waits to be killed). With ``--reply-bytes N`` each reply is padded
with ``.`` to N bytes (large replies from small requests). SIGTERM: it finishes the request in hand and
exits 0, printing ``served N``. stdout: ``ready``, then those lines.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

import zmq


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend")
    parser.add_argument("name")
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--hold-after", type=int, default=0)
    parser.add_argument("--reply-bytes", type=int, default=0)
    args = parser.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    context = zmq.Context()
    sock = context.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.connect(args.backend)
    sock.send(b"READY")
    print("ready", flush=True)
    served = 0
    name = args.name.encode() + b":"
    while not stopping:
        if not sock.poll(20):
            continue
        frames = sock.recv_multipart()
        served += 1
        if served == args.hold_after:
            print(f"holding {frames[-1].decode()}", flush=True)
            while True:
                time.sleep(1)
        if args.delay:
            time.sleep(args.delay)
        delimiter = frames.index(b"")
        reply = name + frames[-1]
        sock.send_multipart(frames[: delimiter + 1] + [reply.ljust(args.reply_bytes, b".")])
    print(f"served {served}", flush=True)
    sock.close()
    context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
