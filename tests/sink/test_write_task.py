"""One write task end to end without Spark: ``_write_task`` with plain Arrow batches, a
header and a real ``TaskSender`` on real sockets, received by plain pyzmq consumers.
And what the driver logs of the handshakes that failed, with CURVE and without."""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest
import zmq
from zmqtest import NotZeroMQ

from spark_zmq.options import SinkOptions
from spark_zmq.sink.encoders import TaskHeader
from spark_zmq.sink.send import TaskSender
from spark_zmq.sink.writer import SinkCommit, _report, _write_task

pytestmark = pytest.mark.timeout(60)

HEADER: TaskHeader = {"query_id": "q-9", "batch_id": 4, "partition": 2, "attempt": 0, "attempt_id": "run-1"}


@pytest.fixture
def bound():
    """``bound(zmq.PULL)`` -> (socket, endpoint), closed after the test."""
    context = zmq.Context()
    made = []

    def make(kind: int, **sockopts: object):
        sock = context.socket(kind)
        for option, value in sockopts.items():
            sock.setsockopt(getattr(zmq, option), value)
        sock.setsockopt(zmq.LINGER, 0)
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        made.append(sock)
        return sock, f"tcp://127.0.0.1:{port}"

    yield make
    for sock in made:
        sock.close(0)
    context.term()


def drain(sock, first_ms: int = 5000, idle_ms: int = 500, multipart: bool = False) -> list:
    out = []
    wait = first_ms
    while sock.poll(wait):
        out.append(sock.recv_multipart() if multipart else sock.recv())
        wait = idle_ms
    return out


def sink(endpoint: str, **given: str) -> SinkOptions:
    return SinkOptions.parse({"endpoints": endpoint, "sendTimeoutMs": "10000", **given})


def values(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "value": pa.array([f"row-{i}" if i % 7 else None for i in range(start, start + n)]),
        }
    )


BATCHES = [values(0, 30), values(30, 0), values(30, 45), values(75, 1)]


class Recording(TaskSender):
    """A real sender that also notes which method each send went through."""

    calls: list[tuple[str, int]]

    def __init__(self, options: SinkOptions) -> None:
        super().__init__(options)
        self.calls = []

    def send(self, messages):
        self.calls.append(("send", len(messages)))
        super().send(messages)

    def send_payloads(self, payloads):
        self.calls.append(("send_payloads", len(payloads)))
        super().send_payloads(payloads)


def test_raw_rows_reach_a_pull_consumer_one_message_each_through_the_batch_path(bound):
    pull, endpoint = bound(zmq.PULL)
    senders: list[Recording] = []

    def factory(options: SinkOptions) -> Recording:
        senders.append(Recording(options))
        return senders[-1]

    commit = _write_task(sink(endpoint, format="raw"), iter(BATCHES), HEADER, factory)
    assert drain(pull) == [b"" if i % 7 == 0 else f"row-{i}".encode() for i in range(76)]
    assert commit == SinkCommit(partition=2, messages=76, rows=76, attempt_id="run-1", query_id="q-9")
    # one batch call per non-empty batch, no tuple per message
    assert senders[0].calls == [("send_payloads", 30), ("send_payloads", 45), ("send_payloads", 1)]


def test_json_rows_reach_a_pull_consumer(bound):
    pull, endpoint = bound(zmq.PULL)
    commit = _write_task(sink(endpoint, format="json"), iter(BATCHES), HEADER)
    received = drain(pull)
    assert received[:2] == [b'{"id": 0, "value": null}', b'{"id": 1, "value": "row-1"}']
    assert len(received) == commit.messages == commit.rows == 76


def test_arrow_messages_decode_with_pyarrow_and_carry_the_tasks_header(bound):
    pull, endpoint = bound(zmq.PULL)
    commit = _write_task(sink(endpoint, format="arrow", rowsPerMessage="20"), iter(BATCHES), HEADER)
    tables = [pa.ipc.open_stream(m).read_all() for m in drain(pull)]
    assert pa.concat_tables(tables).column("id").to_pylist() == list(range(76))
    metas = [{k.decode(): v.decode() for k, v in t.schema.metadata.items()} for t in tables]
    for meta in metas:
        assert {f"spark_zmq.{k}": str(v) for k, v in HEADER.items()}.items() <= meta.items()
    assert [m["spark_zmq.sequence"] for m in metas] == [str(i) for i in range(len(tables))]
    assert [m["spark_zmq.last"] for m in metas] == ["false"] * (len(tables) - 1) + ["true"]
    # 30 rows -> 20 + 10, 45 -> 20 + 20 + 5, 1 -> 1: batches are not merged
    assert [t.num_rows for t in tables] == [20, 10, 20, 20, 5, 1]
    assert commit.messages == len(tables) and commit.rows == 76


def test_pub_sends_each_row_under_its_topic_column(bound):
    sub, endpoint = bound(zmq.SUB, SUBSCRIBE=b"")
    # a binding SUB sends its subscription only while it is read (libzmq #2267), as a real
    # subscriber is: read it on a thread during the write
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(drain(sub, first_ms=20_000, multipart=True)))
    reader.start()
    rows = pa.RecordBatch.from_pydict(
        {"value": pa.array([b"a", b"b", b"c"], pa.binary()), "topic": pa.array(["t1", None, "t2"])}
    )
    try:
        commit = _write_task(sink(endpoint, format="raw", pattern="pub"), iter([rows]), HEADER)
    finally:
        reader.join(30)
    assert got == [[b"t1", b"a"], [b"", b"b"], [b"t2", b"c"]]
    assert commit.messages == 3 and commit.dropped == 0


def test_a_task_without_rows_sends_nothing_and_waits_for_nobody():
    # nobody listens there: a task whose partition is empty must not wait for a peer
    commit = _write_task(sink("tcp://127.0.0.1:9", format="arrow"), iter([values(0, 0)]), HEADER)
    assert (commit.messages, commit.rows) == (0, 0)


def test_failed_handshakes_without_curve_are_counted_and_reported_without_a_word_of_curve(bound, caplog):
    """A non-CURVE sink counts a handshake that fails (here: one endpoint is a web server)
    among its rejected handshakes; the driver's report says what happened, not CURVE."""
    pull, endpoint = bound(zmq.PULL)
    server = NotZeroMQ()
    try:
        # sendTimeoutMs bounds the wait for the second peer that never completes a handshake
        # (min(5 s, sendTimeoutMs)): 1 s, not 5 s, before the task goes on with the one peer
        options = sink(f"{endpoint},tcp://127.0.0.1:{server.port}", format="text", sendTimeoutMs="1000")
        commit = _write_task(options, iter([values(0, 5)]), HEADER)
    finally:
        server.close()
    assert len(drain(pull)) == 5
    assert commit.rejected_handshakes > 0
    with caplog.at_level(logging.WARNING, logger="spark_zmq.sink.writer"):
        _report([commit], "write", curve=False)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "spark_zmq.sink.writer"]
    assert f"{commit.rejected_handshakes} handshakes with peers failed" in line and "CURVE" not in line
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spark_zmq.sink.writer"):
        _report([commit], "write", curve=True)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "spark_zmq.sink.writer"]
    assert f"{commit.rejected_handshakes} CURVE handshakes were rejected" in line
