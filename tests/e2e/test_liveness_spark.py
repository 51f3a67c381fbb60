"""Heartbeats through Spark: a silent peer behind a black hole, on real sockets.

The peers are libzmq (pyzmq); the network fault is ``faultproxy.FaultProxy`` turning a
live connection into a black hole (no FIN, no RST). Without heartbeats the source's
connecting receiver would wait on the dead connection forever, and a write task would
wait for acknowledgements that never come until ``sendTimeoutMs`` failed it.
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq
from faultproxy import FaultProxy
from zmqtest import Trickle, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: short settings so the test is quick; the defaults are documented in the README
FAST = {"heartbeatInterval": "0.2", "heartbeatTimeout": "1", "heartbeatTtl": "1"}


class _Producer:
    """A bound libzmq PUSH or PUB trickling numbered messages (``zmqtest.Trickle``)."""

    def __init__(self, socket_type: int) -> None:
        self.context = zmq.Context()
        sock = self.context.socket(socket_type)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 1000)
        sock.bind("tcp://127.0.0.1:*")
        self.port = int(sock.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1])
        self.trickle = Trickle(sock)

    @property
    def sent(self) -> int:
        return self.trickle.sent

    def close(self) -> None:
        self.trickle.stop()
        self.trickle.socket.close(0)
        self.context.term()


@pytest.mark.parametrize("pattern", ["gather", "pull", "sub"])
def test_a_connecting_source_reconnects_when_its_producer_goes_silent(spark, tmp_path, pattern):
    """``pull`` too: it runs on the ZMTP engine, whose heartbeat timeout libzmq's PULL had
    to go without (the proxy's black hole keeps acknowledging TCP, so only a ZMTP timeout
    can notice)."""
    feeder = _Producer(zmq.PUB if pattern == "sub" else zmq.PUSH)
    query = None
    try:
        with FaultProxy("127.0.0.1", feeder.port) as proxy:
            reader = (
                spark.readStream.format("zmq")
                .option("pattern", pattern)
                .option("endpoints", f">{proxy.endpoint}")
                .option("spoolDir", str(tmp_path / "spool"))
            )
            for key, value in FAST.items():
                reader = reader.option(key, value)
            name = f"liveness_{pattern}"
            query = (
                reader.load()
                .selectExpr("cast(cast(value as string) as long) as n")
                .writeStream.format("memory")
                .queryName(name)
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="0 seconds")
                .start()
            )
            table = lambda: spark.table(name)  # noqa: E731
            wait_until(lambda: table().count() > 0, 120, "the first rows")
            live = proxy.active_connections
            assert len(live) == 1, live
            live[0].blackhole()
            seen = len(proxy.connections)
            mark = feeder.sent
            # the receiver notices within its timeout, reconnects, and rows sent after the
            # black hole arrive
            proxy.wait_for_connections(seen + 1, timeout=30)
            wait_until(lambda: table().where(f"n > {mark}").count() > 0, 120, "rows sent after the black hole")
    finally:
        if query is not None:
            stop_all([query])
        feeder.close()


def test_a_write_task_commits_when_a_consumer_goes_silent_mid_write(spark):
    """Two libzmq consumers, one behind a proxy that becomes a black hole once it has
    received some rows: the write completes (its unacknowledged rows go to the other
    consumer within the heartbeat timeout) instead of failing after sendTimeoutMs."""
    rows = 100_000
    context = zmq.Context()
    pulls = []
    for _ in range(2):
        pull = context.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.RCVHWM, 100)
        pull.setsockopt(zmq.RCVBUF, 65536)
        pull.bind("tcp://127.0.0.1:*")
        pulls.append(pull)
    ports = [int(p.getsockopt_string(zmq.LAST_ENDPOINT).rsplit(":", 1)[1]) for p in pulls]
    counts = [0, 0]
    stop = threading.Event()
    with FaultProxy("127.0.0.1", ports[1], buffer_bytes=65536) as proxy:

        def drain(i: int) -> None:
            while not stop.is_set():
                if pulls[i].poll(50):
                    pulls[i].recv()
                    counts[i] += 1
                    if i == 1 and counts[1] == 2000:
                        proxy.blackhole_all()  # mid-write: the consumer's link goes silent

        threads = [threading.Thread(target=drain, args=(i,), daemon=True) for i in range(2)]
        for thread in threads:
            thread.start()
        try:
            df = spark.range(rows, numPartitions=1).selectExpr("lpad(cast(id as string), 100, '0') as value")
            writer = (
                df.write.format("zmq")
                .mode("append")
                .option("pattern", "push")
                .option("endpoints", f"tcp://127.0.0.1:{ports[0]},{proxy.endpoint}")
                .option("sendTimeoutMs", "60000")
            )
            for key, value in FAST.items():
                writer = writer.option(key, value)
            started = time.monotonic()
            writer.save()
            took = time.monotonic() - started
            assert counts[1] >= 2000, "the black hole never happened"
            assert took < 60, f"the write took {took:.0f} s: it waited for the silent consumer"
            # the rows the silent consumer's side never acknowledged reached the other one;
            # what the proxy took in and never forwarded (its queue, and its two kernel
            # buffers of 64 KiB, doubled by Linux) is what a userspace middlebox can hide
            swallowed = max(c.pipes["up"].pending() for c in proxy.connections)
            bound = (swallowed + 4 * 2 * 65536) // 102 + 200
            wait_until(
                lambda: counts[0] + counts[1] >= rows - bound,
                60,
                f"the rows at the consumers (all but at most {bound}; got {counts})",
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(5)
            for pull in pulls:
                pull.close(0)
            context.term()
