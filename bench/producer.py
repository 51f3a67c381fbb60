"""A benchmark producer process: a bare pyzmq PUSH loop sending prepared payloads.

    python bench/producer.py ENDPOINT COUNT raw SIZE        # SIZE-byte messages
    python bench/producer.py ENDPOINT COUNT arrow ROWS      # Arrow IPC messages of ROWS rows
    python bench/producer.py ENDPOINT COUNT stamped RATE    # text: send time, at RATE msg/s

It imports, connects and builds its payload, prints "ready", then waits for a line on
stdin before sending, so that timing starts at "go" rather than at Python start-up. Why a separate process: the producer must never share a GIL (or a core's time slice
bookkeeping) with what is measured, and a bare loop is the same for every contender.
"""

from __future__ import annotations

import sys
import time

import zmq

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import curvekeys  # noqa: E402
import payloads  # noqa: E402


def main(endpoint: str, count: int, kind: str, arg: int) -> None:
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 100_000)
    if curvekeys.current():
        curvekeys.secure_client(push, curvekeys.current())
    push.connect(endpoint)
    message = b"" if kind == "stamped" else payloads.raw(arg) if kind == "raw" else payloads.arrow_message(arg)
    print("ready", flush=True)  # started, imported, connected, payload built
    sys.stdin.readline()  # "go": the measurement starts now, not at process start-up
    if kind == "stamped":
        started = time.monotonic()
        for i in range(count):
            push.send(b"%.6f" % time.time())
            if i % 10 == 0:
                ahead = started + i / arg - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)  # pacing the load at RATE
    else:
        for _ in range(count):
            push.send(message, copy=len(message) < 65536)
    push.close(linger=-1)
    context.term()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(float(sys.argv[4])))
