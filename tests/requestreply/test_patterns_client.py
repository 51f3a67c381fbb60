"""The asynchronous client (``spark_zmq.requestreply.Client``) against workers nobody here wrote.

Workers are plain pyzmq sockets on threads: REP workers that know nothing of request ids
(the envelope carries them), a ROUTER worker that answers out of order, one that answers
only every other request, one that dies holding requests, one that answers with garbage.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
import zmq

from spark_zmq.requestreply import Client, RequestTimeoutError

pytestmark = pytest.mark.timeout(60)


class Worker(threading.Thread):
    """A pyzmq worker on its own thread: ``handle(socket, frames)`` answers (or not)."""

    def __init__(self, context: zmq.Context, kind: int, handle, endpoint: str = "tcp://127.0.0.1:*") -> None:
        super().__init__(daemon=True)
        self.socket = context.socket(kind)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(endpoint)
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.handle = handle
        self.seen = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.socket.poll(20):
                frames = self.socket.recv_multipart()
                self.seen += 1
                if self.handle(self.socket, frames) is False:
                    break
        self.socket.close(0)


class Workers:
    """The test's context and the workers started in it (stopped after the test)."""

    def __init__(self) -> None:
        self.context = zmq.Context()
        self.started: list[Worker] = []

    def socket(self, kind: int) -> zmq.Socket:
        return self.context.socket(kind)

    def close(self) -> None:
        for worker in self.started:
            worker.stop.set()
            worker.join(5)
        self.context.term()


@pytest.fixture
def context():
    workers = Workers()
    yield workers
    workers.close()


def _start(workers: Workers, kind, handle) -> Worker:
    worker = Worker(workers.context, kind, handle)
    workers.started.append(worker)
    worker.start()
    return worker


def _rep_upper(sock, frames):
    sock.send_multipart([f.upper() for f in frames])


def test_rep_workers_answer_requests_they_know_nothing_of_in_input_order(context):
    workers = [_start(context, zmq.REP, _rep_upper) for _ in range(2)]
    with Client([w.endpoint for w in workers], timeout=5) as client:
        bodies = [b"req-%d" % i for i in range(500)]
        replies = list(client.map(bodies, max_in_flight=32))
        assert replies == [[b.upper()] for b in bodies]
        assert client.resent == 0 and client.malformed == 0 and client.in_flight == 0
    assert all(w.seen > 100 for w in workers), [w.seen for w in workers]  # round-robin


def test_replies_in_any_order_come_out_in_input_order(context):
    held: list[list[bytes]] = []

    def reverse_tens(sock, frames):  # a ROUTER worker that answers ten at a time, reversed
        held.append(frames)
        if len(held) == 10:
            for identity, *envelope_and_body in reversed(held):
                sock.send_multipart([identity] + envelope_and_body[:-1] + [envelope_and_body[-1][::-1]])
            held.clear()

    worker = _start(context, zmq.ROUTER, reverse_tens)
    with Client(worker.endpoint, timeout=5) as client:
        bodies = [b"abc-%03d" % i for i in range(100)]
        assert list(client.map(bodies, max_in_flight=10)) == [[b[::-1]] for b in bodies]
        ids = [client.send(b"y%d" % i) for i in range(10)]
        answers = [client.recv(timeout=5)[0] for _ in range(10)]
        assert answers == ids[::-1]  # as they came: the last request's reply first


def test_a_worker_that_answers_every_other_request_still_answers_every_request_once(context):
    count = [0]

    def every_other(sock, frames):
        count[0] += 1
        if count[0] % 2:
            sock.send_multipart(frames)

    worker = _start(context, zmq.ROUTER, every_other)
    with Client(worker.endpoint, timeout=0.2, retries=6) as client:
        bodies = [b"%d" % i for i in range(40)]
        assert list(client.map(bodies, max_in_flight=8)) == [[b] for b in bodies]
        assert client.resent > 0, "nothing was dropped: the test proved nothing"


def test_late_duplicate_replies_are_dropped(context):
    def twice_late(sock, frames):  # answers each request twice
        sock.send_multipart(frames)
        sock.send_multipart(frames)

    worker = _start(context, zmq.ROUTER, twice_late)
    with Client(worker.endpoint, timeout=5) as client:
        bodies = [b"%d" % i for i in range(50)]
        assert list(client.map(bodies, max_in_flight=5)) == [[b] for b in bodies]
        client.request(b"last")
        deadline = time.monotonic() + 5
        while client.duplicates < 50 and time.monotonic() < deadline:
            client.send(b"flush")
            client.recv(timeout=5)
        assert client.duplicates >= 50


def test_a_worker_that_dies_holding_requests_costs_a_resend_to_the_other(context):
    def dies_after_three(sock, frames):
        return False if worker_a.seen >= 3 else None  # takes three requests, answers none, closes

    worker_a = _start(context, zmq.ROUTER, dies_after_three)
    worker_b = _start(context, zmq.REP, _rep_upper)
    with Client([worker_a.endpoint, worker_b.endpoint], timeout=0.5, retries=3) as client:
        bodies = [b"r%d" % i for i in range(30)]
        assert list(client.map(bodies, max_in_flight=6)) == [[b.upper()] for b in bodies]
        assert client.resent >= 1
    assert worker_a.seen == 3


def test_no_worker_is_a_clear_error_after_every_retry(context):
    sock = context.socket(zmq.ROUTER)  # takes requests, never answers
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        with Client(endpoint, timeout=0.2, retries=2) as client:
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError) as info:
                client.request(b"hello")
            took = time.monotonic() - started
            assert info.value.attempts == 3 and info.value.request_id == 1
            assert f"from >{endpoint}" in str(info.value) and "retries 2" in str(info.value)
            assert 0.5 < took < 5
            assert client.in_flight == 0
    finally:
        sock.close(0)


def test_garbage_replies_are_counted_and_dropped(context):
    def hostile(sock, frames):
        identity = frames[0]
        for junk in (
            [b"short", b"", b"x"],
            [b"\0" * 8, b"not-empty", b"x"],
            [b"\0" * 7 + b"\x63", b"", b"x"],
            [b"only-one-frame"],
        ):
            sock.send_multipart([identity] + junk)
        sock.send_multipart(frames)

    worker = _start(context, zmq.ROUTER, hostile)
    with Client(worker.endpoint, timeout=5) as client:
        assert client.request(b"real") == [b"real"]
        assert client.malformed == 4


def _until(condition, timeout: float) -> None:
    """Poll ``condition`` until it holds or ``timeout`` passed, without failing: a worker
    holding its reply for an ordering the test wants, which a broken client never gives
    (the test's own assertions say what went wrong)."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.001)


def test_a_worker_cannot_answer_requests_it_never_received_by_guessing_their_ids(context):
    """The attack of #43: a worker answers its own request, then the 8 ids after it (ids
    were a counter from 1). Ids are random now: every forged reply is dropped, counted."""
    forged: list[int] = []
    rounds = [0]  # requests the forger has answered and sent its guesses after
    clients: list[Client] = []

    def forger(sock, frames):
        identity, wire_id = frames[0], frames[1]
        sock.send_multipart([identity, wire_id, b"", frames[-1].upper()])
        for step in range(1, 9):
            guess = (int.from_bytes(wire_id, "big") + step) % 2**64
            sock.send_multipart([identity, guess.to_bytes(8, "big"), b"", b"FORGED"])
            forged.append(guess)
        rounds[0] += 1

    def rep_upper_after_the_forgeries(sock, frames):
        # the forger's replies come first: it has sent its guesses for every request it
        # received, and the client has read them all (dropped: malformed), before the
        # honest answer goes out
        _until(lambda: forging.seen == rounds[0] and clients[0].malformed >= len(forged), 2)
        _rep_upper(sock, frames)

    honest = _start(context, zmq.REP, rep_upper_after_the_forgeries)
    forging = _start(context, zmq.ROUTER, forger)
    with Client([honest.endpoint, forging.endpoint], timeout=10) as client:
        clients.append(client)
        bodies = [b"r%d" % i for i in range(40)]
        assert list(client.map(bodies, max_in_flight=4)) == [[b.upper()] for b in bodies]
        assert forging.seen > 0 and honest.seen > 0
        deadline = time.monotonic() + 5  # every forged reply the client read was dropped as one of no request
        while client.malformed < len(forged) and time.monotonic() < deadline:
            client.send(b"flush")
            client.recv(timeout=5)
        assert client.malformed >= 8 and client.misrouted == 0


class _Accomplice(threading.Thread):
    """A ROUTER worker that answers, over its own connection, the ids another worker saw."""

    def __init__(self, context: zmq.Context, seen: queue.Queue[bytes]) -> None:
        super().__init__(daemon=True)
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind("tcp://127.0.0.1:*")
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.seen, self.forged, self.stop = seen, 0, threading.Event()
        self.client: bytes | None = None  # the client's identity here, once it sent a request
        self.forged_ids: set[bytes] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.socket.poll(5):
                frames = self.socket.recv_multipart()
                self.client = frames[0]
                self.socket.send_multipart([self.client, frames[1], b"", frames[-1].upper()])
            while self.client is not None:
                try:
                    wire_id = self.seen.get_nowait()
                except queue.Empty:
                    break
                self.socket.send_multipart([self.client, wire_id, b"", b"FORGED"])
                self.forged += 1
                self.forged_ids.add(wire_id)
        self.socket.close(0)


def test_a_reply_counts_only_from_the_connection_its_request_went_out_on(context):
    """A worker that knows the id of a request sent to another (an accomplice, or one that
    saw the traffic) answers it first over its own connection: dropped, in misrouted."""
    seen: queue.Queue[bytes] = queue.Queue()
    clients: list[Client] = []

    def tells_then_answers_once_the_forgery_was_read(sock, frames):
        seen.put(frames[1])
        # the accomplice's forged reply first: it has sent one for this id and the client
        # has read every one sent (dropped: misrouted, or a duplicate for an id told before
        # the accomplice could reply), before the honest answer goes out; until the client
        # reached the accomplice there is no connection to forge on, nothing to wait for
        client = clients[0]
        _until(
            lambda: (
                accomplice.client is None
                or (frames[1] in accomplice.forged_ids and client.misrouted + client.duplicates >= accomplice.forged)
            ),
            2,
        )
        sock.send_multipart(frames[:-1] + [frames[-1].upper()])

    honest = _start(context, zmq.ROUTER, tells_then_answers_once_the_forgery_was_read)
    accomplice = _Accomplice(context.context, seen)
    accomplice.start()
    try:
        with Client([honest.endpoint, accomplice.endpoint], timeout=10) as client:
            clients.append(client)
            bodies = [b"r%d" % i for i in range(40)]
            assert list(client.map(bodies, max_in_flight=4)) == [[b.upper()] for b in bodies]
            assert accomplice.forged > 0 and client.misrouted > 0
    finally:
        accomplice.stop.set()
        accomplice.join(5)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"timeout": 0}, "timeout must be a finite number of seconds > 0"),
        ({"timeout": float("inf")}, "timeout must be a finite number of seconds > 0"),
        ({"retries": -1}, "retries must be an integer >= 0"),
        ({"retries": 1.5}, "retries must be an integer >= 0"),
    ],
)
def test_bad_arguments_name_what_is_valid(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Client("tcp://127.0.0.1:5", **kwargs)


def test_timeout_and_retries_cannot_change_under_requests_in_flight():
    """Pending requests are kept in due order on the promise that every wait is the
    same ``timeout``; a timeout changed with requests in flight would make resends late."""
    with Client("tcp://127.0.0.1:5", timeout=0.5, retries=1) as client:
        assert (client.timeout, client.retries) == (0.5, 1)
        with pytest.raises(AttributeError):
            client.timeout = 10.0
        with pytest.raises(AttributeError):
            client.retries = 5
