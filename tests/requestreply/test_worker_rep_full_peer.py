"""A REP server (``serve(..., broker=False)``) against a client that sends and never reads,
on real sockets, with plain pyzmq clients.

libzmq's REP drops a reply its client has no room for silently, and nothing counted it. The
server is a ROUTER keeping REP's envelope rules: each reply is tried once, a drop is counted
(``dropped_replies``, also in its ``PING`` answer), and the other clients are served
meanwhile; ``stop`` still ends it within its documented time. The envelope goes back
unchanged (a DEALER's extra address frames included) and a request without the empty
delimiter is dropped unanswered, counted, as a REP drops it.

The stuck client is a process of its own, killed only once the worker's context is
terminated: libzmq 4.3.5 can abort the process (``Assertion failed: !_io_error``,
stream_engine_base.cpp:310) when a socket closed with a linger still holds unread requests
of a peer that dies meanwhile; the REP socket this server replaced did the same. The worker
and the reading client use contexts of their own, terminated at the end of each test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import zmq
from zmqtest import wait_until

from spark_zmq.requestreply.broker_stats import PING, PONG
from spark_zmq.worker import WorkerStats, serve

pytestmark = pytest.mark.timeout(60)

#: the stuck client's requests, and the size of each reply to them
_FLOOD, _BIG = 3000, 16 << 10


#: the client that never reads: sends ``_FLOOD`` requests, says so, then waits to be killed
_STUCK = textwrap.dedent("""
    import sys, zmq
    stuck = zmq.Context().socket(zmq.DEALER)
    stuck.rcvhwm, stuck.rcvbuf, stuck.sndtimeo = 1, 4096, 10_000
    stuck.connect(sys.argv[1])
    for _ in range(int(sys.argv[2])):  # REP's envelope from a DEALER: the empty delimiter, then the body
        stuck.send_multipart([b"", b"big"])
    print("sent", flush=True)
    sys.stdin.read()
""")


def _handler(body: bytes) -> bytes:
    return b"r" * _BIG if body == b"big" else body.upper()


class _Worker:
    """``serve`` on a thread until ``close``."""

    def __init__(self, handler=None, **options) -> None:
        self.context = zmq.Context()
        self.stop = threading.Event()
        self.result: list[WorkerStats] = []
        ready = threading.Event()
        self.address = ""

        def on_ready(addresses: list[str]) -> None:
            self.address = addresses[0]
            ready.set()

        self.thread = threading.Thread(
            target=lambda: self.result.append(
                serve(
                    handler or _handler,
                    "@tcp://127.0.0.1:*",
                    format="raw",
                    broker=False,
                    stop=self.stop,
                    on_ready=on_ready,
                    context=self.context,
                    **options,
                )
            ),
            daemon=True,
            name="rep-worker",
        )
        self.thread.start()
        assert ready.wait(10), "the worker never bound"

    def close(self, within_s: float) -> tuple[WorkerStats, float]:
        """Stop it: its stats and how long ``serve`` took to return."""
        began = time.monotonic()
        self.stop.set()
        self.thread.join(within_s + 5)
        assert not self.thread.is_alive(), "serve did not return after stop"
        return self.result[0], time.monotonic() - began


@pytest.fixture
def worker():
    started = _Worker()
    yield started
    started.stop.set()
    started.thread.join(5)
    started.context.destroy(linger=0)


@pytest.fixture
def sockets():
    made: list[zmq.Socket] = []
    context = zmq.Context()

    def make(kind: int, address: str) -> zmq.Socket:
        sock = context.socket(kind)
        sock.linger = 0
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close(0)
    context.term()


def _ask(req: zmq.Socket, frames: list[bytes], within_s: float) -> list[bytes]:
    req.send_multipart(frames)
    assert req.poll(int(within_s * 1000)), f"no answer to {frames!r} within {within_s:g} s"
    return req.recv_multipart()


def _pong(req: zmq.Socket) -> dict:
    reply = _ask(req, [PING], 5)
    assert reply[0] == PONG, reply
    return json.loads(reply[1])


def test_a_client_that_never_reads_holds_no_one_and_its_dropped_replies_are_counted(worker, sockets):
    stuck = subprocess.Popen(
        [sys.executable, "-c", _STUCK, worker.address, str(_FLOOD)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert stuck.stdout.readline().strip() == "sent", "the stuck client did not send its requests"
        req = sockets(zmq.REQ, worker.address)
        req.connect(worker.address)
        slowest = 0.0
        for i in range(20):
            began = time.monotonic()
            assert _ask(req, [b"abc%d" % i], 5) == [b"ABC%d" % i]
            slowest = max(slowest, time.monotonic() - began)
        assert slowest < 2.0, f"an answer to the reading client took {slowest:.2f} s"
        # the flood's replies fill the stuck client's queue (1,000) and kernel buffers, then drop
        wait_until(lambda: _pong(req)["dropped_replies"] > 0, 20, "the worker to count a dropped reply")
        stats, took = worker.close(within_s=1.0)
        # its socket's linger (2 s) ends with the stuck client still there (see the module docstring)
        worker.context.destroy(linger=0)
    finally:
        stuck.kill()
        stuck.wait(10)
    assert took < 1.0, f"stop took {took:.2f} s with a stuck client connected"
    assert 0 < stats.dropped_replies < _FLOOD, stats
    assert stats.dropped_replies <= stats.replies - 20, stats  # (each drop a reply made, the reading client's sent)


def test_the_envelope_goes_back_unchanged_and_a_request_without_a_delimiter_is_dropped(worker, sockets):
    dealer = sockets(zmq.DEALER, worker.address)
    dealer.connect(worker.address)
    dealer.send_multipart([b"no delimiter"])
    # an address frame of a hop before the delimiter (as a DEALER-fronted proxy adds) comes back as it went
    dealer.send_multipart([b"hop-1", b"hop-2", b"", b"abc"])
    assert dealer.poll(5000), "no answer to the request with an envelope"
    assert dealer.recv_multipart() == [b"hop-1", b"hop-2", b"", b"ABC"]
    assert not dealer.poll(100), "the request without a delimiter was answered"
    req = sockets(zmq.REQ, worker.address)
    req.connect(worker.address)
    assert _ask(req, [b"xyz"], 5) == [b"XYZ"]
    stats, _ = worker.close(within_s=1.0)
    assert (stats.requests, stats.replies, stats.malformed, stats.dropped_replies) == (3, 2, 1, 0), stats


def test_with_handler_timeout_a_poison_request_is_answered_at_the_deadline_and_stop_ends_a_running_handler(
    sockets, tmp_path
):
    began_file = tmp_path / "began"

    def hangs_on_poison(body: bytes) -> bytes:
        if body == b"poison":
            began_file.write_text("began")  # (in the handler's process: the test polls for it)
            time.sleep(3600)
        return body.upper()

    worker = _Worker(hangs_on_poison, handler_timeout=0.5)
    try:
        req = sockets(zmq.REQ, worker.address)
        req.connect(worker.address)
        began = time.monotonic()
        assert _ask(req, [b"poison"], 10) == [
            b"ERROR",
            b"the handler did not return within handler_timeout (0.5 s); its process was killed and replaced",
        ]
        assert 0.4 < time.monotonic() - began < 5
        assert _ask(req, [b"fine"], 10) == [b"FINE"]  # a new handler process
        began_file.unlink()
        req.send_multipart([b"poison"])
        wait_until(began_file.exists, 10, "the handler to run the poison request")
        stats, took = worker.close(within_s=1.0)
        assert took < 1.0, f"stop took {took:.2f} s while a handler ran"
        assert (stats.timeouts, stats.replies) == (1, 1), stats
    finally:
        worker.stop.set()
        worker.thread.join(5)
        worker.context.destroy(linger=0)
