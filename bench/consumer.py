"""A benchmark consumer process: a bare pyzmq PULL that receives until it has EXPECTED
messages (raw) or rows (arrow, decoding each message), then exits.

    python bench/consumer.py raw|arrow EXPECTED      # prints its port, then "done"

Why a separate process: a receiving thread in the measuring process would share its GIL
with the sender being measured (the bare PUSH loop) but not with a Spark write task.
"""

from __future__ import annotations

import sys

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
    while got < expected:
        message = pull.recv(copy=False)
        got += pa.ipc.open_stream(message.buffer).read_all().num_rows if kind == "arrow" else 1
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
