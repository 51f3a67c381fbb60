"""The broker's memory bounded in bytes: the bytes of waiting requests (``max_waiting_bytes``),
libzmq's own queues in front of the broker (the frontend's RCVHWM, ``frontend_rcvhwm``) and
toward each client (its SNDHWM, ``frontend_sndhwm``), and the replies the broker holds
(``max_held_bytes``). The bookkeeping is checked without sockets; the floods on real sockets,
with the broker in a process of its own (its resident memory, VmRSS in /proc, is its own),
plain pyzmq DEALERs as the attacker and the honest client, and a plain pyzmq REQ as the
worker. Each wait is on what can be observed (the broker's counters, a socket's poll), never
a sleep.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable

import pytest
import zmq
from brokertest import ANY, running  # noqa: F401  (a fixture)
from zmqtest import free_ports, peak_rss_bytes, rss_bytes, wait_until

from spark_zmq.requestreply import Broker
from spark_zmq.requestreply.broker_clients import ClientQueues, request_bytes
from spark_zmq.requestreply.broker_defaults import (
    DEFAULT_MAX_HELD_BYTES,
    DEFAULT_MAX_WAITING_BYTES,
    FRONTEND_QUEUE_BYTES,
    FRONTEND_RCVHWM_MIN,
    FRONTEND_SNDHWM_MIN,
    frontend_rcvhwm,
    frontend_sndhwm,
)

pytestmark = pytest.mark.timeout(120)

MiB = 1 << 20


def _request(client: bytes, body_bytes: int) -> list[zmq.Frame]:
    """A request as the frontend receives it: [client, b"", body]."""
    return [zmq.Frame(client), zmq.Frame(b""), zmq.Frame(b"x" * body_bytes)]


def _totals(queues: ClientQueues) -> tuple[int, int, int, int]:
    return queues.waiting_ready, queues.waiting_stalled, queues.bytes_ready, queues.bytes_stalled


def test_waiting_bytes_are_counted_exactly_through_add_dispatch_expire_and_stall():
    """Every way a request enters or leaves the queues (add, dispatch, put back, expiry, a
    client stalling and reading again) keeps the bytes exact, and they return to zero; the
    bound stops reading at ``max_waiting_bytes`` and refuses stalled clients past half of it."""
    queues = ClientQueues(hwm=100, client_hwm=100, max_held_bytes=1000, request_ttl=1.0, max_waiting_bytes=100)
    a40, b59 = _request(b"A", 39), _request(b"B", 58)
    assert request_bytes(a40) == 40 and request_bytes(b59) == 59  # every frame counts, the envelope too
    assert queues.add(b"A", (0.0, a40)) and queues.room()
    assert _totals(queues) == (1, 0, 40, 0)
    assert queues.add(b"B", (0.1, b59)) and queues.room(), "99 bytes < 100"
    assert queues.add(b"B", (0.2, _request(b"B", 0)))
    assert queues.waiting_bytes == 100 and not queues.room(), "at max_waiting_bytes: backpressure"
    client, request = queues.next_request()
    assert client == b"A" and queues.waiting_bytes == 60 and queues.room()
    queues.put_back(client, request)  # the worker could not take it
    assert queues.waiting_bytes == 100 and not queues.room()
    assert queues.next_request()[0] == b"A" and queues.waiting_bytes == 60

    # a client that reads nothing (a quarter of max_held_bytes held) is stalled
    assert queues.hold(b"S", [zmq.Frame(b"r" * 300)], 300, drop_after=1e9, now=0.0)
    assert queues.add(b"S", (0.3, _request(b"S", 28))) and queues.add(b"S", (0.3, _request(b"S", 28)))
    assert _totals(queues) == (2, 2, 60, 58)
    assert not queues.add(b"S", (0.3, _request(b"S", 0))), "the stalled clients have half of 100 bytes waiting"
    assert queues.refuses(b"S") and not queues.refuses(b"A")
    assert not queues.room(), "60 + the stalled clients' share 50 >= 100"
    assert queues.retry(b"S", 0.4, lambda payload: True) == []  # it reads again: its requests are served
    assert _totals(queues) == (4, 0, 118, 0)
    assert queues.next_request()[0] == b"B" and queues.next_request()[0] == b"S"
    assert _totals(queues) == (2, 0, 30, 0)

    # a client that stalls with requests waiting takes them along, and brings them back
    assert queues.hold(b"B", [zmq.Frame(b"r" * 300)], 300, drop_after=1e9, now=0.5)
    assert _totals(queues) == (1, 1, 29, 1)
    assert [client for client, _ in queues.expire(1.35)] == [b"B", b"S"]  # both waited more than 1 s
    assert _totals(queues) == (0, 0, 0, 0) and queues.waiting == 0 and queues.waiting_bytes == 0
    assert queues.next_request() is None and queues.room()


def test_the_bounds_in_bytes_are_validated_and_sized_from_the_message_bound(running):
    """``max_waiting_bytes`` is checked like ``max_held_bytes``; the frontend's RCVHWM and
    SNDHWM hold ``FRONTEND_QUEUE_BYTES`` of the largest messages, at least their minima,
    never more than ``hwm``; the backend's stay at ``hwm``."""
    assert DEFAULT_MAX_WAITING_BYTES == DEFAULT_MAX_HELD_BYTES
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="max_waiting_bytes"):
            Broker(ANY, ANY, max_waiting_bytes=bad)
    assert frontend_rcvhwm(1000, 64 * MiB) == frontend_rcvhwm(1000, None) == FRONTEND_RCVHWM_MIN
    assert frontend_rcvhwm(1000, 64 << 10) == FRONTEND_QUEUE_BYTES // (64 << 10) == 128
    assert frontend_rcvhwm(5, 1024) == 5 and frontend_rcvhwm(1, None) == 1
    assert frontend_sndhwm(1000, 64 * MiB) == frontend_sndhwm(1000, None) == FRONTEND_SNDHWM_MIN
    assert frontend_sndhwm(1000, 64 << 10) == 128 and frontend_sndhwm(1, None) == 1
    broker = running(hwm=1000, max_message_bytes=64 * MiB)
    assert broker._frontend.zmq_socket.getsockopt(zmq.RCVHWM) == FRONTEND_RCVHWM_MIN
    assert broker._frontend.zmq_socket.getsockopt(zmq.SNDHWM) == FRONTEND_SNDHWM_MIN
    for side in (broker._backend.zmq_socket.getsockopt(zmq.RCVHWM), broker._backend.zmq_socket.getsockopt(zmq.SNDHWM)):
        assert side == 1000  # workers: one request at a time each, always read


#: the flood: this many requests of this many bytes, at a broker that takes this many bytes
FLOOD, REQUEST, MAX_WAITING, MAX_MESSAGE = 40, 8 * MiB, 32 * MiB, 16 * MiB

BROKER = textwrap.dedent("""
    import dataclasses, json, signal, sys, threading
    import zmq
    from spark_zmq.requestreply import Broker

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Broker(sys.argv[1], sys.argv[2], max_message_bytes=int(sys.argv[3]),
                max_waiting_bytes=int(sys.argv[4]), max_held_bytes=int(sys.argv[5])) as broker:
        front = broker._frontend.zmq_socket
        print("ready", front.getsockopt(zmq.SNDHWM), front.getsockopt(zmq.RCVHWM), flush=True)
        broker.run(stop, report=lambda stats: print(json.dumps(dataclasses.asdict(stats)), flush=True),
                   report_interval=0.05)
""")


def _reports(broker: subprocess.Popen) -> tuple[list[str], Callable[[], dict]]:
    """The broker's ``ready`` line (its frontend's SNDHWM and RCVHWM), and a function that
    returns its latest report, read by a thread so that each wait has its timeout."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in broker.stdout], daemon=True).start()
    ready = lines.get(timeout=30).split()
    assert ready[:1] == ["ready"], ready
    latest = [json.loads(lines.get(timeout=30))]

    def stats() -> dict:
        while not lines.empty():
            latest[0] = json.loads(lines.get_nowait())
        return latest[0]

    return ready, stats


def _reap(process: subprocess.Popen, timeout: float) -> None:
    """Wait for a child told to end; kill it if it has not within ``timeout`` seconds."""
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _socket(kind: int, address: str, **options: int) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    for name, value in options.items():
        sock.setsockopt(getattr(zmq, name), value)
    sock.connect(address)
    return sock


def test_a_flood_of_large_requests_takes_max_waiting_bytes_and_the_others_are_still_served():
    """A DEALER sends 40 requests of 8 MiB to a broker with no worker. The broker takes
    ``max_waiting_bytes`` (32 MiB) of them, libzmq a few more (RCVHWM 4 per connection),
    and stops reading: the attacker's sends block, and the broker's resident memory grows
    by less than max_waiting_bytes + (RCVHWM + 2) x 8 MiB + 24 MiB of slack (with the
    count alone, ``hwm`` 1000, it took all 40: 320 MiB). Once a worker appears, a second
    client's request is served among the flood's."""
    front_port, back_port = free_ports(2)
    front, back = f"tcp://127.0.0.1:{front_port}", f"tcp://127.0.0.1:{back_port}"
    broker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BROKER,
            "@" + front,
            "@" + back,
            str(MAX_MESSAGE),
            str(MAX_WAITING),
            str(DEFAULT_MAX_HELD_BYTES),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    sockets: list[zmq.Socket] = []
    try:
        ready, stats = _reports(broker)

        baseline = rss_bytes(broker.pid)
        attacker = _socket(zmq.DEALER, front, SNDHWM=1)
        sockets.append(attacker)
        body = b"x" * REQUEST
        sent = 0
        while sent < FLOOD:
            try:
                attacker.send_multipart([b"", body], zmq.NOBLOCK, copy=False)
                sent += 1
            except zmq.Again:
                # backpressure: nothing of the flood moves on for 3 s (the broker reads no more)
                if not attacker.poll(3000, zmq.POLLOUT):
                    break
        rcvhwm = frontend_rcvhwm(1000, MAX_MESSAGE)  # the least: 8 MiB holds none of 16 MiB
        bound = MAX_WAITING + (rcvhwm + 2) * REQUEST + 24 * MiB
        if sent == FLOOD:  # nothing held the flood back: wait until the broker has it all, or the bound is passed
            wait_until(
                lambda: stats()["requests_waiting"] == FLOOD or rss_bytes(broker.pid) - baseline >= bound,
                60,
                "the whole flood read by the broker, or its memory past the bound",
            )
        else:
            wait_until(lambda: stats()["waiting_bytes"] >= MAX_WAITING, 30, "max_waiting_bytes reached")
        full = stats()
        grown = rss_bytes(broker.pid) - baseline
        print(
            f"\nbroker: {sent} of {FLOOD} requests of {REQUEST // MiB} MiB sent before backpressure; "
            f"{full['requests_waiting']} waiting ({full['waiting_bytes'] / MiB:.1f} MiB); resident memory grew "
            f"{grown / MiB:.1f} MiB (bound {bound / MiB:.0f} MiB)"
        )
        assert grown < bound, f"the broker's resident memory grew {grown / MiB:.0f} MiB (bound {bound / MiB:.0f})"
        assert sent < FLOOD, "the broker read the whole flood: nothing held it back"
        assert full["waiting_bytes"] < MAX_WAITING + REQUEST + 1024, full

        honest = _socket(zmq.DEALER, front)
        sockets.append(honest)
        honest.send_multipart([b"", b"honest"])
        worker = _socket(zmq.REQ, back)
        sockets.append(worker)
        worker.send(b"READY")
        served = 0
        while not honest.poll(0):
            assert worker.poll(30_000), f"the worker was given no request after {served} ({stats()})"
            frames = worker.recv_multipart()
            worker.send_multipart(frames[:-1] + [b"re:" + frames[-1][:16]])  # a small reply
            served += 1
            assert served <= FLOOD + 1, "the honest request was never served"
        assert honest.recv_multipart() == [b"", b"re:honest"]
        peak = peak_rss_bytes(broker.pid) - baseline
        print(
            f"broker: the honest request served after {served - 1} of the flood; peak memory grew {peak / MiB:.1f} MiB"
        )
        assert peak < bound + REQUEST, f"the broker's peak memory grew {peak / MiB:.0f} MiB"
    finally:
        for sock in sockets:
            sock.close(0)
        broker.terminate()
        _reap(broker, 30)


#: a worker that echoes every request, until its parent closes its stdin
ECHO_WORKER = textwrap.dedent("""
    import sys, threading, zmq
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDTIMEO, 10_000)
    sock.connect(sys.argv[1])
    sock.send(b"READY")
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.is_set():
        if sock.poll(100):
            sock.send_multipart(sock.recv_multipart(copy=False), copy=False)
""")

#: the reply flood: this many requests of this many bytes, echoed to a client that reads none
REPLY_FLOOD, REPLY, REPLY_MAX_MESSAGE, REPLY_MAX_WAITING, REPLY_MAX_HELD = 150, 1 * MiB, 2 * MiB, 16 * MiB, 16 * MiB


def test_replies_to_a_client_that_reads_nothing_take_the_documented_bytes_and_the_others_are_served():
    """A DEALER sends 150 requests of 1 MiB through a broker to an echo worker and reads no
    reply (its own receive queue is one message, its kernel buffer small). What the broker's
    process keeps for it is bounded in bytes: libzmq's queue toward it (SNDHWM, one more
    being written), the replies the broker holds (at most ``max_held_bytes``), its waiting
    requests (at most ``max_waiting_bytes``) and libzmq's queue in front (RCVHWM, one more
    being read), so the broker's resident memory grows by less than that formula + 24 MiB
    of slack. With SNDHWM ``hwm`` (1000) libzmq took every reply: about 150 MiB. Meanwhile a
    second client gets each of its replies."""
    front_port, back_port = free_ports(2)
    front, back = f"tcp://127.0.0.1:{front_port}", f"tcp://127.0.0.1:{back_port}"
    broker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            BROKER,
            "@" + front,
            "@" + back,
            str(REPLY_MAX_MESSAGE),
            str(REPLY_MAX_WAITING),
            str(REPLY_MAX_HELD),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    worker = None
    sockets: list[zmq.Socket] = []
    try:
        ready, stats = _reports(broker)

        worker = subprocess.Popen([sys.executable, "-c", ECHO_WORKER, back], stdin=subprocess.PIPE)
        wait_until(lambda: stats()["workers_idle"] == 1, 30, "the echo worker ready")
        baseline = rss_bytes(broker.pid)
        sndhwm, rcvhwm = frontend_sndhwm(1000, REPLY_MAX_MESSAGE), frontend_rcvhwm(1000, REPLY_MAX_MESSAGE)
        bound = REPLY_MAX_WAITING + REPLY_MAX_HELD + (sndhwm + 1 + rcvhwm + 1) * REPLY_MAX_MESSAGE + 24 * MiB

        # the attacker reads nothing: libzmq in its process takes one reply, its kernel little
        attacker = _socket(zmq.DEALER, front, RCVHWM=1, RCVBUF=64 << 10)
        sockets.append(attacker)
        body = b"x" * REPLY
        for sent in range(REPLY_FLOOD):
            assert attacker.poll(30_000, zmq.POLLOUT), f"the broker read no more requests after {sent} ({stats()})"
            attacker.send_multipart([b"", body], zmq.NOBLOCK, copy=False)

        def settled() -> bool:
            now = stats()
            accounted = now["requests_forwarded"] + now["requests_waiting"] + now["requests_refused"]
            return (
                accounted == REPLY_FLOOD
                and now["requests_in_flight"] == 0
                and now["requests_forwarded"] == now["replies_returned"] + now["replies_held"]
            )

        wait_until(settled, 60, "every request of the flood forwarded and answered, waiting or refused")
        flood = stats()
        grown = rss_bytes(broker.pid) - baseline
        print(
            f"\nbroker (frontend SNDHWM {ready[1]}, RCVHWM {ready[2]}; the rule's {sndhwm}, {rcvhwm}): "
            f"{REPLY_FLOOD} requests of {REPLY // MiB} MiB from a "
            f"client that reads nothing: {flood['requests_forwarded']} forwarded, {flood['replies_returned']} "
            f"replies sent, {flood['replies_held']} held ({flood['held_bytes'] / MiB:.1f} MiB), "
            f"{flood['requests_waiting']} waiting, {flood['requests_refused']} refused; resident memory grew "
            f"{grown / MiB:.1f} MiB (bound {bound / MiB:.0f} MiB)"
        )
        assert grown < bound, f"the broker's resident memory grew {grown / MiB:.0f} MiB (bound {bound / MiB:.0f})"

        honest = _socket(zmq.DEALER, front)
        sockets.append(honest)
        for i in range(20):
            honest.send_multipart([b"", b"honest %d" % i], zmq.NOBLOCK)
            assert honest.poll(10_000), f"the honest client's request {i} was not answered ({stats()})"
            assert honest.recv_multipart(zmq.NOBLOCK) == [b"", b"honest %d" % i]
        peak = peak_rss_bytes(broker.pid) - baseline
        print(f"broker: the honest client got its 20 replies; peak memory grew {peak / MiB:.1f} MiB")
        assert peak < bound, f"the broker's peak memory grew {peak / MiB:.0f} MiB (bound {bound / MiB:.0f})"
    finally:
        for sock in sockets:
            sock.close(0)
        if worker is not None:
            worker.stdin.close()
            _reap(worker, 10)
        broker.terminate()
        _reap(broker, 30)
