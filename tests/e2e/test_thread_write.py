"""A write to format("zmq") from a Python thread other than the one that built the session
finds the source (Spark looks a Python data source up in the JVM thread's active session;
``spark_zmq.sparkglue.thread_session`` makes the DataFrame's own session active first)."""

from __future__ import annotations

import threading

import pytest
import zmq

pytestmark = pytest.mark.timeout(240)


def _in_thread(action) -> dict:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except Exception as exc:  # reported by the assertion, with Spark's message
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(180)
    assert not thread.is_alive(), "the write did not return within 180 s"
    assert "error" not in outcome, outcome.get("error")
    return outcome


def test_a_batch_write_from_another_thread_delivers_every_row(spark):
    context = zmq.Context.instance()
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.LINGER, 0)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    try:
        _in_thread(
            lambda: (
                spark.range(300)
                .selectExpr("cast(id as string) as value")
                .write.format("zmq")
                .mode("append")
                .option("endpoints", f"tcp://127.0.0.1:{port}")
                .option("format", "text")
                .save()
            )
        )
        received = set()
        while len(received) < 300 and pull.poll(10_000):
            received.add(pull.recv())
        assert received == {str(i).encode() for i in range(300)}
    finally:
        pull.close()
