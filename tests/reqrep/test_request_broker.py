"""``spark_zmq.request`` through the load-balancing broker (``spark-zmq broker``), to
workers nobody here wrote (plain pyzmq REQ workers, libzmq's REP through zeromq.js) and to
``spark_zmq.worker.serve`` workers, through Spark, every process its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from servicetest import ServiceWorker, collect_in_thread
from zmqjs_peer import NodePeer, skip_unless_node
from zmqtest import free_ports

import spark_zmq

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
REPLY = "doubled long, worker string"


class BrokerProcess:
    """``spark-zmq broker`` on two fixed ports (so a restarted one is found again)."""

    def __init__(self, frontend: int, backend: int, *flags: str) -> None:
        self.frontend, self.backend = f"tcp://127.0.0.1:{frontend}", f"tcp://127.0.0.1:{backend}"
        self.proc = subprocess.Popen(
            [
                CLI,
                "broker",
                "--frontend",
                "@" + self.frontend,
                "--backend",
                "@" + self.backend,
                "--status-interval",
                "0.5",
                *flags,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stderr.readline()
        assert line.startswith("broker:"), line + self.proc.stderr.read()[-2000:]

    def kill(self, sig: int = signal.SIGKILL) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self.proc.stderr.close()
        return code


def numbers(spark, n: int, partitions: int = 2):
    return spark.range(0, n, numPartitions=partitions).selectExpr("id as x", "cast(id as string) as value")


def assert_doubled(rows, n: int) -> None:
    assert [r.x for r in rows] == list(range(n))
    assert all(r.doubled == 2 * r.x for r in rows)


def test_plain_req_workers_behind_the_broker_one_killed_holding_a_request(spark):
    frontend, backend = free_ports(2)
    broker = BrokerProcess(frontend, backend)
    workers = [
        ServiceWorker.start("--format", "arrow", "--broker", "--connect", broker.backend, "--name", name, *extra)
        for name, extra in (("a", ()), ("b", ()), ("dies", ("--hold-after", "4")))
    ]
    try:
        out = spark_zmq.request(
            numbers(spark, 3000),
            broker.frontend,
            reply_schema=REPLY,
            batch_rows=20,
            max_in_flight=4,
            timeout=3,
            retries=3,
        )
        thread, result = collect_in_thread(out)
        workers[2].wait_for("HOLDING")
        workers[2].kill(signal.SIGKILL)
        thread.join(180)
        assert not thread.is_alive() and "error" not in result, result.get("error")
        rows = result["rows"]
        assert_doubled(rows, 3000)
        assert {r.worker for r in rows} == {"a", "b", "dies"}
    finally:
        for worker in workers:
            worker.kill()
        assert broker.kill(signal.SIGTERM) == 0


def test_a_broker_restarted_while_a_query_runs_loses_no_row(spark):
    frontend, backend = free_ports(2)
    broker = BrokerProcess(frontend, backend)
    workers = [
        ServiceWorker.serve(broker.backend, "--format", "json", "--name", name, "--delay", "0.002")
        for name in ("a", "b")
    ]
    try:
        out = spark_zmq.request(
            numbers(spark, 1500),
            broker.frontend,
            reply_schema=REPLY,
            format="json",
            max_in_flight=4,
            timeout=2,
            retries=10,
        )
        thread, result = collect_in_thread(out)
        workers[0].wait_for("SERVED 100")
        broker.kill(signal.SIGKILL)
        broker = BrokerProcess(frontend, backend)  # the workers announce themselves again
        thread.join(180)
        assert not thread.is_alive() and "error" not in result, result.get("error")
        assert_doubled(result["rows"], 1500)
    finally:
        for worker in workers:
            worker.kill(signal.SIGTERM)
        broker.kill(signal.SIGTERM)


def test_worker_error_replies_fail_fast_or_land_in_the_corrupt_column(spark):
    with ServiceWorker.serve("@tcp://127.0.0.1:*", "--rep", "--format", "json", "--fail-on", "7") as worker:
        strict = spark_zmq.request(numbers(spark, 20, 1), worker.endpoint, reply_schema=REPLY, format="json")
        with pytest.raises(Exception, match="x = 7 is not scorable"):
            strict.collect()
        lenient = spark_zmq.request(
            numbers(spark, 20, 1),
            worker.endpoint,
            format="json",
            mode="PERMISSIVE",
            reply_schema=REPLY + ", why string",
            column_name_of_corrupt_record="why",
        )
        rows = lenient.collect()
    assert [r.x for r in rows] == list(range(20))
    bad = [r for r in rows if r.doubled is None]
    assert [r.x for r in bad] == [7] and "x = 7 is not scorable" in bad[0].why
    assert all(r.doubled == 2 * r.x and r.why is None for r in rows if r.x != 7)
    with ServiceWorker.serve("@tcp://127.0.0.1:*", "--rep", "--format", "arrow", "--fail-on", "33") as worker:
        lenient = spark_zmq.request(
            numbers(spark, 100, 1),
            worker.endpoint,
            reply_schema=REPLY + ", why string",
            batch_rows=10,
            mode="PERMISSIVE",
            column_name_of_corrupt_record="why",
        )
        rows = lenient.collect()
    assert [r.x for r in rows if r.doubled is None] == list(range(30, 40))
    assert all("x = 33 is not scorable" in r.why for r in rows if r.doubled is None)


def test_libzmq_rep_worker_through_zeromq_js(spark):
    skip_unless_node()
    with NodePeer.start("rep", bind=["tcp://127.0.0.1:*"], prefix="js:") as peer:
        rows = spark_zmq.request(numbers(spark, 500), peer.endpoints[0], format="text", max_in_flight=8).collect()
    assert [r.reply for r in rows] == [f"js:{i}" for i in range(500)]


def test_a_curve_broker_serves_its_clients_and_refuses_the_others(spark, tmp_path):
    """CURVE on both sides of the broker (keys from pyzmq's zmq.auth): the query with an
    authorized key gets every reply; one with another key, or none, is refused and fails
    within timeout x (retries + 1), naming the broker."""
    import zmq.auth

    keys = tmp_path / "keys"
    keys.mkdir()
    broker_public, broker_secret = zmq.auth.create_certificates(str(keys), "broker")
    authorized = {}
    for name in ("query", "worker"):
        public, _ = zmq.auth.create_certificates(str(keys), name)
        authorized[name] = tmp_path / f"authorized-{name}"
        authorized[name].mkdir()
        (authorized[name] / f"{name}.key").write_bytes(open(public, "rb").read())
    stranger_public, stranger_secret = zmq.auth.create_certificates(str(keys), "stranger")
    frontend, backend = free_ports(2)
    broker = BrokerProcess(
        frontend,
        backend,
        "--curve-certificate",
        broker_secret,
        "--frontend-authorized-keys",
        str(authorized["query"]),
        "--backend-authorized-keys",
        str(authorized["worker"]),
    )
    worker = ServiceWorker.serve(
        broker.backend,
        "--format",
        "arrow",
        "--name",
        "secure",
        "--curve-certificate",
        str(keys / "worker.key_secret"),
        "--curve-server-key",
        broker_public,
    )
    try:
        rows = spark_zmq.request(
            numbers(spark, 400),
            broker.frontend,
            reply_schema=REPLY,
            batch_rows=50,
            curve_certificate=str(keys / "query.key_secret"),
            curve_server_key=broker_public,
        ).collect()
        assert_doubled(rows, 400)
        assert {r.worker for r in rows} == {"secure"}
        for credentials in (dict(curve_certificate=stranger_secret, curve_server_key=broker_public), {}):
            refused = spark_zmq.request(
                numbers(spark, 10, 1), broker.frontend, reply_schema=REPLY, timeout=1, retries=1, **credentials
            )
            with pytest.raises(Exception, match=broker.frontend.replace(".", r"\.")):
                refused.collect()
    finally:
        worker.kill(signal.SIGTERM)
        assert broker.kill(signal.SIGTERM) == 0
