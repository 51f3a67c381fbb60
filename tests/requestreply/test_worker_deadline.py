"""A handler that never returns, on real sockets: three ``serve`` workers behind the broker,
a ``Client`` with a 1 s timeout and 2 retries. With ``handler_timeout`` a poison request
costs one deadline (an error reply), the handler's process is replaced, and every worker
goes on serving; ``stop`` ends a worker whose handler is running.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from brokertest import ANY, running  # noqa: F401  (a fixture)
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the timing-sensitive tests)
from zmqtest import wait_until

from spark_zmq.requestreply import Client
from spark_zmq.worker import WorkerStats, is_error_reply, serve

pytestmark = pytest.mark.timeout(120)


def poisoned(body: bytes) -> bytes:
    if body == b"poison":
        while True:  # never returns
            time.sleep(0.05)
    return b"pid %d: %s" % (os.getpid(), body)


class Worker:
    def __init__(self, backend: str, **options) -> None:
        self.stop = threading.Event()
        self.result: list[WorkerStats] = []
        ready = threading.Event()
        self.thread = threading.Thread(
            target=lambda: self.result.append(
                serve(poisoned, backend, format="raw", stop=self.stop, on_ready=lambda _: ready.set(), **options)
            ),
            daemon=True,
            name="worker",
        )
        self.thread.start()
        assert ready.wait(10), "the worker never got its socket"

    def close(self, within: float = 5.0) -> WorkerStats:
        self.stop.set()
        self.thread.join(within)
        assert not self.thread.is_alive(), f"serve did not return within {within:g} s after stop"
        return self.result[0]


@pytest.fixture
def broker(running):
    return running()


@pytest.fixture
def workers():
    started: list[Worker] = []

    def start(backend: str, **options) -> Worker:
        started.append(Worker(backend, **options))
        return started[-1]

    yield start
    for worker in started:
        worker.stop.set()
        worker.thread.join(5)


def test_a_poison_request_costs_one_deadline_and_every_worker_goes_on(broker, workers, busy):
    backend = broker.backend_addresses[0]
    # 1 s: a trivial handler in a freshly forked child, beside busy processes on a loaded
    # CI machine, once took more than 0.5 s
    pool = [workers(backend, handler_timeout=1.0) for _ in range(3)]
    wait_until(lambda: broker.stats().workers_idle == 3, 10, "three idle workers")
    with Client(broker.frontend_addresses[0], timeout=2, retries=2) as client:
        started = time.monotonic()
        reply = client.request(b"poison")
        took = time.monotonic() - started
        assert is_error_reply(reply) and b"handler_timeout (1 s)" in reply[1], reply
        assert took < 2.0 and client.resent == 0, f"{took:.2f} s, {client.resent} resent"
        answers = list(client.map([b"%d" % i for i in range(30)], max_in_flight=3))
        assert all(a[0].endswith(b": %d" % i) for i, a in enumerate(answers)), answers[:3]
        assert len({a[0].split(b":")[0] for a in answers}) > 1, "only one worker served"
    stats = [w.close() for w in pool]
    assert sum(s.timeouts for s in stats) == 1 and sum(s.replies for s in stats) == 30, stats
    print(f"\npoison answered in {took:.2f} s; {stats}")


def test_stop_ends_a_worker_whose_handler_is_running(broker, workers, busy):
    worker = workers(broker.backend_addresses[0], handler_timeout=60)
    wait_until(lambda: broker.stats().workers_idle == 1, 10, "an idle worker")
    with Client(broker.frontend_addresses[0], timeout=30, retries=0) as client:
        client.send(b"poison")
        wait_until(lambda: broker.stats().requests_in_flight == 1, 10, "the worker holding the poison request")
        started = time.monotonic()
        stats = worker.close(within=3)
        print(f"\nstopped in {time.monotonic() - started:.2f} s while its handler ran; {stats}")
        assert stats.replies == 0 and stats.timeouts == 0, stats
        wait_until(lambda: broker.stats().workers_known == 0, 15, "the broker forgetting the stopped worker")
        assert broker.stats().requests_lost == 1, broker.stats()


def test_handler_timeout_must_be_a_positive_number_of_seconds():
    for bad in (0, -1, float("inf"), "5s", True):
        with pytest.raises(ValueError, match="handler_timeout must be None"):
            serve(poisoned, "@tcp://127.0.0.1:*", format="raw", broker=False, handler_timeout=bad)
