"""The ``pull`` source on the package's ZMTP engine (``ZmtpPull``), through Spark.

What changed for users when ``pull`` left libzmq's PULL: less CPU per message (bench), and
``maxMessageBytes`` now bounds a multipart message as a whole (libzmq bounds each frame, so
a ``[topic, part, part]`` message of twice the limit became a row). Everything else must
stay: libzmq's own PUSH delivers to it, multipart messages give the topic column.
"""

from __future__ import annotations

from collections import Counter

import pytest
import zmq
from zmqjs_peer import NodePeer, payload, skip_unless_node
from zmqtest import SocketEvents, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

LIMIT = 64 * 1024


def _start(spark, endpoint: str, spool_dir: str, tmp_path, name: str, **options):
    reader = spark.readStream.format("zmq").option("endpoints", "@" + endpoint).option("spoolDir", spool_dir)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return (
        reader.load()
        .selectExpr("topic", "value")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"ckpt-{name}"))
        .trigger(processingTime="0 seconds")
        .start()
    )


def _rows(spark, name: str) -> list[tuple]:
    return [(r.topic, bytes(r.value)) for r in spark.table(name).collect()]


def test_a_multipart_message_over_maxMessageBytes_never_becomes_a_row(spark, free_port, spool_dir, tmp_path):
    """Each frame fits under ``maxMessageBytes``, the message does not: the producer is
    disconnected (what it sent before arrives), and heard again once it reconnects."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    query = _start(spark, endpoint, spool_dir, tmp_path, "multipart_bound", maxMessageBytes=LIMIT)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    events = SocketEvents(push, zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    try:
        wait_until(lambda: query.recentProgress, 60, "the query's first trigger")
        push.connect(endpoint)
        events.wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED, timeout=60)
        push.send_multipart([b"small", b"a" * 100, b"b" * 100])
        push.send_multipart([b"big", b"x" * (LIMIT * 3 // 4), b"y" * (LIMIT * 3 // 4)])
        events.wait_for(zmq.EVENT_DISCONNECTED, timeout=60)
        events.wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED, count=2, timeout=60)
        push.send(b"after")
        wait_until(lambda: len(_rows(spark, "multipart_bound")) >= 2, 120, "the rows before and after")
        assert Counter(_rows(spark, "multipart_bound")) == Counter(
            [("small", b"a" * 100 + b"b" * 100), (None, b"after")]
        )
    finally:
        events.close()
        push.close(0)
        context.term()
        stop_all([query])


def test_libzmq_push_peers_into_the_pull_source_arrive_exactly_once(spark, free_port, spool_dir, tmp_path):
    """Two libzmq PUSH sockets (zeromq.js, libzmq 4.3.5) connect to the source."""
    skip_unless_node()
    endpoint = f"tcp://127.0.0.1:{free_port}"
    query = _start(spark, endpoint, spool_dir, tmp_path, "from_libzmq_push")
    n = 10_000
    try:
        wait_until(lambda: query.recentProgress, 60, "the query's first trigger")
        with (
            NodePeer.start("push", connect=[endpoint], count=n, size=100, prefix="a") as first,
            NodePeer.start("push", connect=[endpoint], count=n, size=100, prefix="b") as second,
        ):
            first.wait_sent(60)
            second.wait_sent(60)
            wait_until(lambda: spark.table("from_libzmq_push").count() >= 2 * n, 180, f"{2 * n} rows")
        got = Counter(value for _, value in _rows(spark, "from_libzmq_push"))
        assert got == Counter([payload(i, 100, "a") for i in range(n)] + [payload(i, 100, "b") for i in range(n)])
    finally:
        stop_all([query])
