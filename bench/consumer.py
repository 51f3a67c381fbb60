"""A benchmark consumer process: a bare pyzmq PULL that receives until it has EXPECTED
messages (raw) or rows (arrow, decoding each message), then stays bound until its stdin
closes, as a consumer that keeps running would (the zmq sink's Arrow writes end with a
commit record, which it waits up to 5 s to hand to a consumer: one that had already
exited would add that wait to the write job).

    python bench/consumer.py raw|arrow EXPECTED      # prints its port, "FIRST LAST", "done"

FIRST and LAST: ``time.time()`` when the first message and the last one had been received
(and, arrow, decoded): the window egress rates are measured over, so a sender's start-up
and shut-down (for Spark, a write job's fixed cost) are not mixed into them.

Why a separate process: a receiving thread in the measuring process would share its GIL
with the sender being measured (the bare PUSH loop) but not with a Spark write task.
"""

from __future__ import annotations

import sys
import time

import pyarrow as pa
import zmq

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import curvekeys  # noqa: E402


def main(kind: str, expected: int) -> None:
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 100_000)
    if curvekeys.current():
        curvekeys.secure_server(pull, curvekeys.current())
    print(pull.bind_to_random_port("tcp://127.0.0.1"), flush=True)
    got = 0
    first = None
    while got < expected:
        message = pull.recv(copy=False)
        got += pa.ipc.open_stream(message.buffer).read_all().num_rows if kind == "arrow" else 1
        if first is None:
            first = time.time()
    last = time.time()
    print(f"{first:.6f} {last:.6f}", flush=True)
    print("done", flush=True)
    sys.stdin.read()  # until the benchmark is done with us
    pull.close(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
