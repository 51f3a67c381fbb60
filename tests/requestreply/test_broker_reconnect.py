"""A worker with a fixed routing id (ZMQ_ROUTING_ID) that reconnects to the broker, on real
sockets: the worker is a plain pyzmq REQ socket. Whether its old connection was seen closed
first (a clean reconnect) or is still open (a half-open connection, which libzmq's ROUTER
would otherwise refuse the id for), the broker serves it again, counts and logs it.
"""

from __future__ import annotations

import pytest
import zmq
from brokertest import ANY, running  # noqa: F401  (a fixture)
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the timing-sensitive tests)
from zmqtest import wait_until

from spark_zmq.requestreply import Client

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker(running):
    return running()


def _worker(backend: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTING_ID, b"worker-7")
    sock.connect(backend)
    sock.send(b"READY")
    return sock


def _answer_one(sock: zmq.Socket) -> None:
    assert sock.poll(10_000), "the worker was given no request"
    frames = sock.recv_multipart()
    sock.send_multipart(frames[:-1] + [b"7:" + frames[-1]])


def _stats(broker, predicate, what):
    wait_until(lambda: predicate(broker.stats()), 15, f"{what} ({broker.stats()})")


@pytest.mark.parametrize("old_connection", ["closed", "still open"])
def test_a_worker_that_reconnects_with_its_routing_id_is_served_again(broker, busy, caplog, old_connection):
    backend, frontend = broker.backend_addresses[0], broker.frontend_addresses[0]
    first = _worker(backend)
    _stats(broker, lambda s: s.workers_idle == 1, "the worker READY")
    with Client(frontend, timeout=10, retries=0) as client:
        request = client.send(b"one")
        _answer_one(first)
        assert client.recv(10) == (request, [b"7:one"])
        if old_connection == "closed":
            first.close(0)
            _stats(broker, lambda s: s.workers_known == 0, "the worker forgotten")
        second = _worker(backend)  # the same routing id, a new connection
        _stats(broker, lambda s: s.workers_reconnected == 1 and s.workers_idle == 1, "the worker back")
        request = client.send(b"two")
        _answer_one(second)
        assert client.recv(10) == (request, [b"7:two"])
    assert any("back on a new connection with the same routing id" in r.getMessage() for r in caplog.records)
    second.close(0)
    if old_connection != "closed":
        first.close(0)
