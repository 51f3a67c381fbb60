"""Small requests through the broker with the frontend's queues at their least: what the
minima of ``frontend_rcvhwm`` and ``frontend_sndhwm`` cost a client that pipelines.

A ``Broker`` in a process of its own with ``max_message_bytes`` 64 MiB (the CLI's default:
8 MiB holds none of them, so both high-water marks are their minima, which this script sets
per run), ``--workers`` plain pyzmq REQ echo workers, and one plain pyzmq DEALER sending
``--count`` requests of ``--size`` bytes with ``--in-flight`` outstanding. Prints requests/s
per setting, the runs interleaved (each setting once per round), and the median, and how
many sends found a client's queue full (the reply then held by the broker and sent again later).

    python bench/broker_queues.py --sndhwm 1,2,4,8,1000 --rcvhwm 2 --in-flight 8
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import textwrap
import time

import zmq

from spark_zmq.free_ports import free_tcp_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BROKER = textwrap.dedent("""
    import signal, sys, threading
    from spark_zmq.requestreply import broker_defaults
    broker_defaults.FRONTEND_RCVHWM_MIN = int(sys.argv[3])
    if hasattr(broker_defaults, "FRONTEND_SNDHWM_MIN"):
        broker_defaults.FRONTEND_SNDHWM_MIN = int(sys.argv[4])
    from spark_zmq.requestreply import Broker
    import zmq
    if sys.argv[5] == "no-refresh":  # a full queue is not looked at again before the reply is held
        Broker._send_now = lambda self, payload: self._frontend.zmq_socket.send_multipart(
            payload, zmq.NOBLOCK, copy=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    read_only = int(sys.argv[6])  # > 0: no worker, room for this many requests, the count waiting reported
    options = {"hwm": read_only, "request_ttl": None} if read_only else {}
    with Broker(sys.argv[1], sys.argv[2], max_message_bytes=64 << 20, **options) as broker:
        front = broker._frontend.zmq_socket
        print("ready", front.getsockopt(zmq.RCVHWM), front.getsockopt(zmq.SNDHWM),
              broker_defaults.__file__, flush=True)
        full = [0]
        send = broker._try_send

        def counted(payload):
            sent = send(payload)
            full[0] += not sent
            return sent

        broker._try_send = counted
        if read_only:
            broker.run(stop, report=lambda stats: print("waiting", stats.requests_waiting, flush=True),
                       report_interval=0.005)
        else:
            broker.run(stop)
        print("full", full[0], flush=True)
""")

WORKER = textwrap.dedent("""
    import sys, zmq
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(sys.argv[1])
    sock.send(b"READY")
    while True:
        sock.send_multipart(sock.recv_multipart(copy=False), copy=False)
""")


def one_run(
    rcvhwm: int, sndhwm: int, workers: int, count: int, size: int, in_flight: int, refresh: bool
) -> tuple[float, int, str]:
    front, back = (f"tcp://127.0.0.1:{p}" for p in free_tcp_ports(2))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    broker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BROKER,
            "@" + front,
            "@" + back,
            str(rcvhwm),
            str(sndhwm),
            "refresh" if refresh else "no-refresh",
            str(count if workers == 0 else 0),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    procs = [broker]
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 30_000)
    sock.setsockopt(zmq.SNDTIMEO, 30_000)
    try:
        line = broker.stdout.readline().split()
        assert line and line[0] == "ready", line
        for _ in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-c", WORKER, back]))
        sock.connect(front)
        body = b"x" * size
        if workers == 0:  # the broker's read rate: how soon it has taken ``count`` requests
            sock.setsockopt(zmq.SNDHWM, 0)
            started = time.perf_counter()
            for _ in range(count):
                sock.send_multipart([b"", body])
            for report in broker.stdout:
                if report.split()[:2] == ["waiting", str(count)]:
                    break
            rate = count / (time.perf_counter() - started)
            broker.terminate()
            out = broker.communicate(timeout=30)[0].split()
            return rate, int(out[out.index("full") + 1]), " ".join(line[1:])
        for _ in range(200):  # warm up: connections, every worker READY
            sock.send_multipart([b"", body])
            sock.recv_multipart()
        started = time.perf_counter()
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < in_flight:
                sock.send_multipart([b"", body])
                sent += 1
            sock.recv_multipart()
            answered += 1
        rate = count / (time.perf_counter() - started)
        broker.terminate()
        out = broker.communicate(timeout=30)[0].split()
        return rate, int(out[out.index("full") + 1]), " ".join(line[1:])
    finally:
        sock.close(0)
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sndhwm", default="1,2,4,8,1000", help="frontend SNDHWM minima to try (comma-separated)")
    parser.add_argument("--rcvhwm", default="2", help="frontend RCVHWM minima to try (comma-separated)")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="echo workers; 0: none, the broker's read rate (time until it has every request waiting)",
    )
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--no-refresh",
        action="store_true",
        help="hold a reply at once when its queue is full (no second look: Broker._send_now)",
    )
    args = parser.parse_args()
    settings = [(int(r), int(s)) for r in args.rcvhwm.split(",") for s in args.sndhwm.split(",")]
    rates: dict[tuple[int, int], list[float]] = {setting: [] for setting in settings}
    fulls: dict[tuple[int, int], list[int]] = {setting: [] for setting in settings}
    for round_ in range(args.rounds):
        for rcvhwm, sndhwm in settings:
            rate, full, seen = one_run(
                rcvhwm, sndhwm, args.workers, args.count, args.size, args.in_flight, not args.no_refresh
            )
            rates[(rcvhwm, sndhwm)].append(rate)
            fulls[(rcvhwm, sndhwm)].append(full)
            print(
                f"round {round_ + 1}: RCVHWM min {rcvhwm} SNDHWM min {sndhwm} (broker's sockets: {seen}): "
                f"{rate:,.0f} requests/s, {full} sends found a queue full",
                flush=True,
            )
    print(
        f"\n{args.workers} workers, {args.in_flight} in flight, {args.size} B requests, {args.count:,} per run"
        f"{', no second look at a full queue' if args.no_refresh else ''}:"
    )
    for (rcvhwm, sndhwm), runs in rates.items():
        print(
            f"  RCVHWM min {rcvhwm:5d}  SNDHWM min {sndhwm:5d}: median {statistics.median(runs):9,.0f} requests/s "
            f"(runs {', '.join(f'{r:,.0f}' for r in runs)}); sends that found a queue full: "
            f"{', '.join(map(str, fulls[(rcvhwm, sndhwm)]))}"
        )


if __name__ == "__main__":
    main()
