"""``spark_zmq.request`` straight to several workers, one of them forging: through Spark.

The attack of #43: two workers on one ``endpoints`` list, one honest but slow, the other
answering its own request and then the 8 request ids after it, which it never received.
Ids were a counter from 1 and a reply was taken from any connection, so the forger's
values filled most rows and the honest replies were dropped as late duplicates. Every
row must carry the reply of the worker its request went to. The workers are plain pyzmq
sockets on threads of this process (no spark_zmq code).
"""

from __future__ import annotations

import io
import threading
import time

import pyarrow as pa
import pytest
import zmq

import spark_zmq

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _reply(body: bytes, name: str, doubled=None) -> bytes:
    """``doubled = x * 2`` (or the given values) and ``worker = name`` for every row of the request."""
    xs = pa.ipc.open_stream(io.BytesIO(body)).read_all().column("x").to_pylist()
    values = [2 * x for x in xs] if doubled is None else [doubled] * len(xs)
    return _stream(pa.table({"doubled": pa.array(values, pa.int64()), "worker": pa.array([name] * len(xs))}))


class _Worker(threading.Thread):
    """Honest (a REP answering ``doubled``) or a forger (a ROUTER answering its own request,
    then 8 guessed ids). ``served``: requests answered, a forger's counted once its
    guesses are sent. The honest one answers only once the forger has served as many
    requests as it has itself (``after``; the client sends to the two in turn): the
    forger's guesses for the request sent just before this one went out first."""

    def __init__(self, context: zmq.Context, forger: bool) -> None:
        super().__init__(daemon=True)
        self.socket = context.socket(zmq.ROUTER if forger else zmq.REP)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.forger, self.served, self.forged = forger, 0, 0
        self.stop = threading.Event()
        self.after: _Worker | None = None

    def run(self) -> None:
        while not self.stop.is_set():
            if not self.socket.poll(20):
                continue
            frames = self.socket.recv_multipart()
            if not self.forger:
                self._wait_for_the_forger()  # slow but honest: the forger's replies come first
                self.socket.send_multipart(frames[:-1] + [_reply(frames[-1], "honest")])
            else:
                identity, wire_id, body = frames[0], frames[1], frames[-1]
                self.socket.send_multipart([identity, wire_id, b"", _reply(body, "forger")])
                forged = _reply(body, "forged", doubled=-1)
                for step in range(1, 9):
                    guess = ((int.from_bytes(wire_id, "big") + step) % 2**64).to_bytes(8, "big")
                    self.socket.send_multipart([identity, guess, b"", forged])
                    self.forged += 1
            self.served += 1
        self.socket.close(0)

    def _wait_for_the_forger(self, timeout: float = 2.0) -> None:
        """Until the forger has served as many requests as this worker has (or ``timeout``
        passed, as at the end, when the forger may have no request left to serve)."""
        deadline = time.monotonic() + timeout
        while self.after is not None and self.after.served < self.served and time.monotonic() < deadline:
            time.sleep(0.001)


def test_a_worker_forging_replies_for_requests_it_never_received_fills_no_row(spark):
    n = 2000
    context = zmq.Context()
    honest, forger = _Worker(context, forger=False), _Worker(context, forger=True)
    honest.after = forger
    honest.start()
    forger.start()
    try:
        df = spark.range(0, n, numPartitions=1).selectExpr("id as x")
        out = spark_zmq.request(
            df,
            [honest.endpoint, forger.endpoint],
            reply_schema="doubled long, worker string",
            format="arrow",
            batch_rows=100,
            max_in_flight=4,
            timeout="20s",
        )
        rows = out.collect()
        assert [r.x for r in rows] == list(range(n))
        wrong = [r for r in rows if r.doubled != 2 * r.x or r.worker == "forged"]
        assert not wrong, f"{len(wrong)} of {n} rows carry a forged reply, e.g. {wrong[:2]}"
        assert forger.forged > 0 and honest.served > 0
        assert {r.worker for r in rows} == {"honest", "forger"}
    finally:
        for worker in (honest, forger):
            worker.stop.set()
            worker.join(5)
        context.term()
