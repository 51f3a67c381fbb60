"""Relays (``spark-zmq relay``) read by Spark queries through the source option ``relays``.

Each relay is a child process on real sockets; producers are plain pyzmq PUSH sockets.
"""

from __future__ import annotations

import pytest

from relaytest import RelayProcess, stop_relays
from zmqtest import Producer, numbered, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _ports(n):
    import socket
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _relay_stream(spark, relays, **options):
    reader = spark.readStream.format("zmq").option("relays", relays)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_one_query_reads_two_relays_and_a_second_query_is_refused(spark, tmp_path):
    ports = _ports(4)
    relays = [RelayProcess(f"@tcp://127.0.0.1:{ports[i]}", f"tcp://127.0.0.1:{ports[i + 2]}", str(tmp_path / f"r{i}"))
              for i in range(2)]
    try:
        producers = [Producer(f"tcp://127.0.0.1:{ports[i]}", numbered(3000, fmt=b"r%d-%%d" % i)) for i in range(2)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.finish()
        addresses = ",".join(relay.listen for relay in relays)
        query = (_relay_stream(spark, addresses, startingOffsets="earliest")
                 .selectExpr("cast(value as string) as value", "partition", "offset")
                 .writeStream.format("memory").queryName("two_relays")
                 .option("checkpointLocation", str(tmp_path / "ckpt")).start())
        try:
            wait_until(lambda: spark.table("two_relays").count() >= 6000, 120, "both relays' messages")
            rows = spark.table("two_relays").collect()
            assert len(rows) == 6000
            by_partition = {p: sorted(r.offset for r in rows if r.partition == p) for p in (0, 1)}
            assert by_partition == {0: list(range(3000)), 1: list(range(3000))}
            assert {r.value for r in rows if r.partition == 1} == {f"r1-{i}" for i in range(3000)}
            second = (_relay_stream(spark, relays[1].listen).writeStream.format("memory").queryName("refused")
                      .option("checkpointLocation", str(tmp_path / "ckpt2")).start())
            try:
                second.awaitTermination(120)
            except Exception:
                pass
            error = str(second.exception())
            assert f"the relay at {relays[1].listen} is read by another query" in error, error
        finally:
            stop_all(spark.streams.active)
    finally:
        stop_relays(relays)
