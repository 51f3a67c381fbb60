"""The broker's deadlines, on real sockets (workers are plain pyzmq REQ sockets): a request
that waited longer than ``request_ttl`` for a worker is not dispatched (its client gave up on
it, or resent it), and a worker that holds a request past ``hold_limit`` is counted as having
lost it, without the broker resending it; a late reply still reaches its client.
"""

from __future__ import annotations

import pytest
import zmq
from brokertest import ANY, running  # noqa: F401  (a fixture)
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the timing-sensitive tests)
from zmqtest import wait_until

from spark_zmq.requestreply import Broker, Client, RequestTimeoutError

pytestmark = pytest.mark.timeout(60)


def _worker(backend: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(backend)
    sock.send(b"READY")
    return sock


def _answer(sock: zmq.Socket, what: str) -> bytes:
    assert sock.poll(10_000), f"the worker was given no request ({what})"
    frames = sock.recv_multipart()
    sock.send_multipart(frames[:-1] + [b"re:" + frames[-1]])
    return frames[-1]


def _stats(broker: Broker, predicate, what: str) -> None:
    wait_until(lambda: predicate(broker.stats()), 15, f"{what} ({broker.stats()})")


def test_a_request_that_waited_past_request_ttl_is_not_dispatched(running, busy):
    broker = running(request_ttl=0.5)
    with Client(broker.frontend_addresses[0], timeout=0.6, retries=0) as client:
        with pytest.raises(RequestTimeoutError):
            client.request(b"stale")  # no worker: it waits in the broker, and the client gives up
        worker = _worker(broker.backend_addresses[0])
        _stats(broker, lambda s: s.requests_expired == 1 and s.workers_idle == 1, "the stale request dropped")
        assert not worker.poll(0), "the worker was given the stale request"
        fresh = client.send(b"fresh")
        assert _answer(worker, "fresh") == b"fresh"
        assert client.recv(10) == (fresh, [b"re:fresh"])
    assert broker.stats().requests_forwarded == 1
    worker.close(0)


def test_a_worker_holding_a_request_past_hold_limit_counts_it_lost_once(running, busy):
    broker = running(hold_limit=0.5)
    worker = _worker(broker.backend_addresses[0])
    _stats(broker, lambda s: s.workers_idle == 1, "the worker READY")
    with Client(broker.frontend_addresses[0], timeout=20, retries=0) as client:
        request = client.send(b"slow")
        assert worker.poll(10_000)
        frames = worker.recv_multipart()  # held, not answered yet
        _stats(broker, lambda s: s.workers_overdue == 1 and s.requests_lost == 1, "the request counted lost")
        assert broker.stats().requests_forwarded == 1, "the broker resent the request"
        worker.send_multipart(frames[:-1] + [b"late"])
        assert client.recv(10) == (request, [b"late"])  # a late reply still reaches its client
        _stats(
            broker,
            lambda s: s.workers_overdue == 0 and s.requests_lost == 0 and s.workers_idle == 1,
            "the worker back to work",
        )
    worker.close(0)


@pytest.mark.parametrize("option", ["request_ttl", "hold_limit"])
def test_deadlines_must_be_positive_seconds_or_none(option):
    for bad in (0, -1, float("nan"), "5s"):
        with pytest.raises(ValueError, match=f"option '{option}' of Broker"):
            Broker(ANY, ANY, **{option: bad})


def test_expired_requests_stop_counting_toward_hwm_before_any_worker_is_free(running, busy):
    """A client floods the broker up to ``hwm`` while no worker is connected, then gives up
    on its requests. Once they are past ``request_ttl`` they are dropped and counted, with no
    worker free to take them, so the broker reads again: a second client's request is
    admitted at once and is the only one a worker, connecting later, is given."""
    hwm, ttl = 20, 2.0
    broker = running(hwm=hwm, request_ttl=ttl)
    flooder = zmq.Context.instance().socket(zmq.DEALER)  # a plain client: [request id, b"", body]
    flooder.setsockopt(zmq.LINGER, 0)
    flooder.connect(broker.frontend_addresses[0])
    for i in range(hwm):
        flooder.send_multipart([b"%d" % i, b"", b"flood-%d" % i])
    _stats(broker, lambda s: s.requests_waiting == hwm, "the flood waiting in the broker, which is full")
    with Client(broker.frontend_addresses[0], timeout=20, retries=0) as client:
        # past the flood's ttl, the broker is not full any more: the live request is read
        live = client.send(b"live")
        _stats(
            broker,
            lambda s: s.requests_expired == hwm and s.requests_waiting == 1,
            "the flood dropped as expired and the live request admitted, with no worker connected",
        )
        worker = _worker(broker.backend_addresses[0])
        assert _answer(worker, "the live request") == b"live"
        assert client.recv(10) == (live, [b"re:live"])
    stats = broker.stats()
    assert (stats.requests_forwarded, stats.requests_expired, stats.requests_waiting) == (1, hwm, 0), stats
    worker.close(0)
    flooder.close(0)


def test_expiry_frees_the_places_of_stalled_and_served_clients_alike():
    """The bookkeeping under the broker (no sockets): a stalled client's expired requests
    leave ``stalled_hwm`` as a served client's leave ``hwm``, so neither refuses nor holds
    back a live request; nothing is looked at before the oldest can expire."""
    from spark_zmq.requestreply.broker_clients import ClientQueues

    queues = ClientQueues(hwm=2, client_hwm=1, max_held_bytes=1 << 20, request_ttl=1.0)
    assert queues.hold(b"stalled", [zmq.Frame(b"reply")], 5, drop_after=1e9, now=0.0)  # one held: stalled
    assert queues.add(b"stalled", (0.0, [zmq.Frame(b"a")]))
    assert not queues.add(b"stalled", (0.1, [zmq.Frame(b"b")])), "client_hwm 1: refused"
    assert queues.add(b"served", (0.2, [zmq.Frame(b"c")])) and queues.add(b"served", (0.5, [zmq.Frame(b"d")]))
    assert not queues.room()
    assert queues.expire(1.0) == []  # nothing past its ttl yet
    assert [(client, round(waited, 6)) for client, waited in queues.expire(1.3)] == [
        (b"stalled", 1.3),
        (b"served", 1.1),
    ]
    assert (queues.waiting_stalled, queues.waiting_ready, queues.room()) == (0, 1, True)
    assert queues.add(b"stalled", (1.3, [zmq.Frame(b"e")])), "its place was freed"
    assert [(client, round(waited, 6)) for client, waited in queues.expire(1.6)] == [(b"served", 1.1)]
    assert queues.waiting == 1 and queues.next_request() is None  # the stalled client's waits; none to dispatch
