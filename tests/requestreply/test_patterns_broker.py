"""The load-balancing broker (``spark_zmq.requestreply.Broker`` and ``spark-zmq broker``) on real
sockets, with workers nobody here wrote: plain pyzmq REQ workers in processes of their own
(tests/scripts/broker_worker.py), so one can be killed with SIGKILL while it holds a request.

Each test waits on what it can observe (the broker's counters, a worker's output), never on
a sleep.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq
import zmq.auth
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the timing-sensitive tests)
from zmqtest import free_ports, wait_until

from spark_zmq.patterns import Heartbeat
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair, load_authorized_keys, load_public_key
from spark_zmq.requestreply import Broker, Client, RequestTimeoutError

pytestmark = pytest.mark.timeout(90)

WORKER_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "broker_worker.py")
CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
ANY = "@tcp://127.0.0.1:*"


class RunningBroker:
    """A ``Broker`` whose loop runs on a thread of the test process."""

    def __init__(self, **options) -> None:
        self.broker = Broker(options.pop("frontend", ANY), options.pop("backend", ANY), **options)
        self.frontend = self.broker.frontend_addresses[0]
        self.backend = self.broker.backend_addresses[0]
        self.thread = threading.Thread(target=self.broker.run, daemon=True, name="broker")
        self.thread.start()

    def stats(self):
        return self.broker.stats()

    def wait(self, predicate, what: str, timeout: float = 20):
        try:
            return wait_until(lambda: predicate(self.broker.stats()), timeout, what)
        except AssertionError as exc:  # the counters when it gave up, not when it began
            raise AssertionError(f"{exc} (broker: {self.broker.stats()})") from None

    def close(self) -> None:
        self.broker.close()
        self.thread.join(10)
        assert not self.thread.is_alive()


class WorkerProcess:
    """tests/scripts/broker_worker.py in a process of its own; its stdout lines are collected."""

    def __init__(self, backend: str, name: str, *args: str) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, WORKER_PY, backend, name, *args], stdout=subprocess.PIPE, text=True
        )
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.strip())

    def line(self, prefix: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"worker {self.name} printed no {prefix!r} line in {timeout}s") from None
            if line.startswith(prefix):
                return line

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture
def broker():
    running = [None]

    def start(**options) -> RunningBroker:
        running[0] = RunningBroker(**options)
        return running[0]

    yield start
    if running[0] is not None:
        running[0].close()


@pytest.fixture
def workers():
    started: list[WorkerProcess] = []

    def start(backend: str, name: str, *args: str) -> WorkerProcess:
        worker = WorkerProcess(backend, name, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def _names(replies) -> collections.Counter:
    return collections.Counter(frames[0].split(b":")[0].decode() for frames in replies)


def test_the_slow_worker_of_four_gets_far_fewer_than_a_quarter_and_every_request_one_reply(broker, workers):
    running = broker()
    for i in range(3):
        workers(running.backend, f"fast{i}", "--delay", "0.005")
    workers(running.backend, "slow", "--delay", "0.05")
    running.wait(lambda s: s.workers_known == 4, "four workers")
    bodies = [b"%d" % i for i in range(300)]
    with Client(running.frontend, timeout=20) as client:
        replies = list(client.map(bodies, max_in_flight=8))
        assert [frames[0].split(b":", 1)[1] for frames in replies] == bodies  # each its own reply, in order
        assert all(len(frames) == 1 for frames in replies)
        assert client.resent == 0 and client.duplicates == 0 and client.malformed == 0
    names = _names(replies)
    # round-robin would give the slow worker 75; least-recently-used about 1 in 31 (10x slower)
    assert names["slow"] < 300 / 4 / 2, names
    assert all(names[f"fast{i}"] > names["slow"] for i in range(3)), names
    stats = running.wait(lambda s: s.requests_in_flight == 0, "no request in flight")
    stats = running.stats()
    assert stats.requests_forwarded == stats.replies_returned == 300
    assert stats.malformed == stats.requests_lost == stats.replies_undeliverable == 0


def test_a_worker_killed_holding_a_request_costs_one_resend_and_nothing_is_lost(broker, workers):
    running = broker()
    doomed = workers(running.backend, "doomed", "--hold-after", "3")
    for name in ("b", "c"):
        workers(running.backend, name, "--delay", "0.01")
    running.wait(lambda s: s.workers_known == 3, "three workers")

    def kill_when_holding() -> None:
        doomed.line("holding")
        os.kill(doomed.process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_when_holding, daemon=True)
    killer.start()
    bodies = [b"r%d" % i for i in range(40)]
    with Client(running.frontend, timeout=1.0, retries=3) as client:
        replies = list(client.map(bodies, max_in_flight=4))
        assert [frames[0].split(b":", 1)[1] for frames in replies] == bodies
        assert client.resent >= 1
        killer.join(10)
        assert doomed.process.wait(10) == -signal.SIGKILL
        assert "doomed" in _names(replies) and _names(replies)["doomed"] == 2  # answered two, held the third
        running.wait(
            lambda s: s.requests_lost == 1 and s.workers_known == 2 and s.requests_in_flight == 0,
            "the broker to count the lost request and forget the dead worker",
        )
        # every reply the broker returned reached the client as an answer or a counted duplicate
        assert client.request(b"flush") != []
        stats = running.stats()
        assert stats.requests_forwarded == len(bodies) + 1 + client.resent
        assert stats.replies_returned == len(bodies) + 1 + client.duplicates
        assert stats.replies_returned + stats.requests_lost == stats.requests_forwarded
        assert stats.workers_gone == 1


def test_workers_join_and_leave_mid_run_and_every_request_is_answered(broker, workers):
    running = broker()
    first = workers(running.backend, "w1", "--delay", "0.005")
    running.wait(lambda s: s.workers_known == 1, "the first worker")

    def answers(client, bodies, during=None):
        replies = []
        for i, frames in enumerate(client.map(bodies, max_in_flight=4)):
            replies.append(frames)
            if during:
                during(i)
        assert [frames[0].split(b":", 1)[1] for frames in replies] == bodies
        return _names(replies)

    with Client(running.frontend, timeout=1.0, retries=5) as client:
        assert answers(client, [b"a%d" % i for i in range(30)]) == {"w1": 30}
        second, third = (workers(running.backend, name, "--delay", "0.005") for name in ("w2", "w3"))
        running.wait(lambda s: s.workers_known == 3, "the workers that joined")
        names = answers(client, [b"b%d" % i for i in range(60)])
        assert set(names) == {"w1", "w2", "w3"}, names

        def leave(i: int) -> None:
            if i == 10:  # one leaves cleanly: it finishes the request in hand and exits
                first.process.send_signal(signal.SIGTERM)
            elif i == 30:  # one dies, perhaps holding a request
                second.kill()

        answers(client, [b"c%d" % i for i in range(100)], during=leave)
        assert first.line("served").startswith("served ") and first.process.wait(10) == 0
        running.wait(lambda s: s.workers_known == 1 and s.workers_gone == 2, "the broker to forget the two that left")
        assert answers(client, [b"d%d" % i for i in range(30)]) == {"w3": 30}


def test_a_silent_worker_holding_a_request_is_dropped_by_heartbeats_and_its_request_resent(broker, workers):
    """SIGSTOP: the worker's host still acknowledges TCP, only the ZMTP heartbeat (PINGs the
    stopped process never answers) tells the broker it is gone."""
    running = broker(heartbeat=Heartbeat(interval=0.1, timeout=0.6, ttl=1.0))
    silent = workers(running.backend, "silent", "--delay", "30")
    running.wait(lambda s: s.workers_known == 1, "the worker")
    with Client(running.frontend, timeout=2.0, retries=3) as client:
        request_id = client.send(b"question")
        running.wait(lambda s: s.requests_in_flight == 1, "the request given to the worker")
        os.kill(silent.process.pid, signal.SIGSTOP)
        try:
            running.wait(
                lambda s: s.workers_known == 0 and s.requests_lost == 1, "the silent worker dropped with its request"
            )
            workers(running.backend, "alive")
            assert client.recv(timeout=20) == (request_id, [b"alive:question"])
        finally:
            os.kill(silent.process.pid, signal.SIGCONT)


def test_a_req_client_and_an_id_client_and_a_deep_envelope_each_get_their_own_replies(broker, workers):
    running = broker()
    for name in ("a", "b"):
        workers(running.backend, name)
    running.wait(lambda s: s.workers_known == 2, "two workers")
    context = zmq.Context.instance()
    req = context.socket(zmq.REQ)
    deep = context.socket(zmq.DEALER)  # a client behind two more hops: [hop1, hop2, b"", body]
    try:
        for sock in (req, deep):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(running.frontend)
        with Client(running.frontend, timeout=10) as client:
            ids = {client.send(b"client-%d" % i): b"client-%d" % i for i in range(10)}
            req.send(b"from-req")
            deep.send_multipart([b"hop1", b"hop2", b"", b"from-deep"])
            for _ in range(10):
                request_id, frames = client.recv(timeout=10)
                assert frames[0].split(b":", 1)[1] == ids.pop(request_id)
            assert not ids
        assert req.poll(10_000)
        [reply] = req.recv_multipart()
        assert reply.split(b":", 1)[1] == b"from-req"
        assert deep.poll(10_000)
        hop1, hop2, empty, body = deep.recv_multipart()
        assert (hop1, hop2, empty) == (b"hop1", b"hop2", b"") and body.split(b":", 1)[1] == b"from-deep"
    finally:
        req.close(0)
        deep.close(0)


def test_hostile_backend_and_frontend_messages_are_counted_and_the_broker_keeps_serving(broker, workers):
    running = broker()
    context = zmq.Context.instance()
    hostile = context.socket(zmq.DEALER)
    hostile.setsockopt(zmq.LINGER, 1000)
    hostile.connect(running.backend)
    for message in (
        [b"garbage"],  # no REQ delimiter
        [b"", b"READY"],  # registers it as a worker ...
        [b"", b"READY"],  # ... and READY again
        [b"", b"no-envelope-reply"],  # a reply without [envelope, b"", body]
        [b"", b"", b"empty-envelope"],
        [b"", b"client", b""],  # no body
        [b"", b"client", b"", b"x"],
    ):  # a reply from a worker that holds no request
        hostile.send_multipart(message)
    running.wait(
        lambda s: s.malformed == 5 and s.replies_unexpected == 1,
        "five malformed backend messages and a reply from a worker holding no request",
    )
    forger = context.socket(zmq.DEALER)  # a reply for a client that never was
    forger.setsockopt(zmq.LINGER, 1000)
    forger.connect(running.backend)
    forger.send_multipart([b"", b"\x00nobody", b"", b"forged"])
    running.wait(lambda s: s.replies_unexpected == 2, "the forged reply dropped")
    assert running.stats().replies_undeliverable == 0  # never tried: no request was given to it
    hostile.close()
    forger.close()
    running.wait(lambda s: s.workers_known == 0, "the hostile peers forgotten once disconnected")

    rogue = context.socket(zmq.DEALER)
    rogue.setsockopt(zmq.LINGER, 1000)
    rogue.connect(running.frontend)
    for message in ([b"no-delimiter"], [b""], [b"a", b"b"], [b"envelope", b""]):
        rogue.send_multipart(message)
    running.wait(lambda s: s.malformed == 9, "four malformed frontend messages")
    rogue.close()

    workers(running.backend, "good")
    running.wait(lambda s: s.workers_known == 1, "a real worker")
    with Client(running.frontend, timeout=10) as client:
        bodies = [b"%d" % i for i in range(50)]
        assert [frames[0] for frames in client.map(bodies)] == [b"good:" + b for b in bodies]


def test_a_worker_that_answers_garbage_loses_its_request_to_a_resend(broker, workers):
    running = broker()
    context = zmq.Context.instance()
    liar = context.socket(zmq.REQ)
    liar.setsockopt(zmq.LINGER, 1000)
    liar.connect(running.backend)
    liar.send(b"READY")
    running.wait(lambda s: s.workers_known == 1, "the liar")
    with Client(running.frontend, timeout=0.5, retries=4) as client:
        request_id = client.send(b"question")
        assert liar.poll(10_000)
        liar.recv_multipart()
        liar.send(b"no envelope at all")  # its REQ adds the delimiter; there is no client envelope
        running.wait(lambda s: s.malformed == 1 and s.requests_lost == 1, "the garbage reply dropped")
        liar.close()
        workers(running.backend, "honest")
        assert client.recv(timeout=20) == (request_id, [b"honest:question"])
        assert client.resent >= 1


def test_requests_wait_bounded_by_hwm_then_all_are_served(broker, workers, busy):
    # heartbeats that cannot expire while the broker holds the client back: a full broker
    # reads no client PINGs, and a client whose heartbeat timeout passed meanwhile (a busy
    # machine starting the worker late) drops its connection and waits out its request
    # timeout before resending (docs/request-reply.md); this test is about the hwm
    patient = Heartbeat(interval=2.0, timeout=300.0, ttl=300.0)
    running = broker(hwm=5, heartbeat=patient)
    padding = b"x" * 100_000  # large, so the kernel's socket buffers fill after a few dozen
    with Client(running.frontend, timeout=30, hwm=10, heartbeat=patient) as client:
        sent = _fill_until_blocked(client, padding)
        assert 5 <= sent < 2000
        running.wait(lambda s: s.requests_waiting == 5, "the broker's queue full")
        assert running.stats().requests_waiting == 5  # never more than hwm
        workers(running.backend, "late")
        got = set()
        for _ in range(sent):
            try:
                got.add(client.recv(timeout=30)[0])  # each id once
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; broker: {running.stats()}") from None
        assert got == set(range(1, sent + 1))
        assert client.resent == 0


def _fill_until_blocked(client: Client, padding: bytes, limit: int = 2000) -> int:
    """Requests until backpressure stops the sender (the broker's queue and the kernels'
    buffers full); how many were sent."""
    sent = 0
    try:
        while sent < limit:
            client.send(b"%d-" % sent + padding, timeout=0.5)
            sent += 1
    except TimeoutError:
        pass
    return sent


def test_a_client_that_pauses_reading_loses_no_reply(broker, workers, busy):
    """A client that reads nothing for a while (a pause, a busy machine) while a worker
    answers its requests: replies past its queue in the broker are held, not dropped, and
    the broker gives the worker no new request while ``client_hwm`` of them are held for
    that client. Once the client reads, every reply comes, none resent: its requests still
    waiting (at most ``client_hwm``, as here) are kept, not refused."""
    running = broker(hwm=5, client_hwm=20)
    requests = 40  # small; their 2 MB replies overflow every buffer on the way back
    with Client(running.frontend, timeout=300, hwm=2) as client:
        for i in range(requests):
            client.send(b"%d" % i, timeout=10)
        workers(running.backend, "w", "--reply-bytes", str(2 << 20))
        # the client reads nothing until the broker holds client_hwm replies it cannot deliver
        running.wait(lambda s: s.replies_held >= 20 or s.replies_undeliverable > 0, "replies held", timeout=60)
        stats = running.stats()
        assert stats.replies_undeliverable == 0 and stats.requests_refused == 0, stats
        assert stats.requests_forwarded < requests and stats.requests_in_flight <= 1, stats  # no new work meanwhile
        got = set()
        for _ in range(requests):
            try:
                got.add(client.recv(timeout=30)[0])
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; broker: {running.stats()}") from None
        assert got == set(range(1, requests + 1))
        assert client.resent == 0
        assert running.stats().replies_undeliverable == 0


def test_replies_held_for_a_client_that_never_reads_are_dropped_after_reply_timeout(broker, workers, busy):
    """``reply_timeout`` bounds how long a reply waits for a client that is connected and
    reads nothing: then it is dropped and counted, and the broker serves again."""
    running = broker(hwm=5, client_hwm=20, reply_timeout=0.5)
    requests = 40
    with Client(running.frontend, timeout=300, hwm=10) as client:
        for i in range(requests):
            client.send(b"%d" % i, timeout=10)
        workers(running.backend, "w", "--reply-bytes", str(2 << 20))
        running.wait(
            lambda s: (
                s.replies_undeliverable >= 5
                and s.replies_held == 0
                and s.requests_in_flight == 0
                and s.requests_forwarded == requests
            ),
            "held replies dropped, all requests served",
            timeout=60,
        )
        stats = running.stats()
        assert stats.replies_returned + stats.replies_undeliverable == requests, stats


def test_curve_frontend_serves_an_authorized_client_and_refuses_the_others(broker, workers, tmp_path):
    clients_dir, strangers_dir = tmp_path / "clients", tmp_path / "strangers"
    clients_dir.mkdir()
    strangers_dir.mkdir()
    _, broker_secret = zmq.auth.create_certificates(str(tmp_path), "broker")
    _, client_secret = zmq.auth.create_certificates(str(clients_dir), "client")
    _, stranger_secret = zmq.auth.create_certificates(str(strangers_dir), "stranger")
    server_key = load_public_key(str(tmp_path / "broker.key"))
    running = broker(
        curve_frontend=Curve.server(KeyPair.from_certificate(broker_secret), load_authorized_keys(str(clients_dir)))
    )
    workers(running.backend, "w")
    running.wait(lambda s: s.workers_known == 1, "a worker")
    with Client(
        running.frontend, timeout=10, curve=Curve.client(KeyPair.from_certificate(client_secret), server_key)
    ) as client:
        assert client.request(b"secret") == [b"w:secret"]
    for curve in (Curve.client(KeyPair.from_certificate(stranger_secret), server_key), None):
        with Client(running.frontend, timeout=0.3, retries=1, curve=curve) as outsider:
            with pytest.raises((RequestTimeoutError, TimeoutError)):
                outsider.send(b"let me in", timeout=1)
                outsider.recv(timeout=5)
    running.wait(lambda s: s.handshakes_rejected >= 2, "both outsiders' handshakes refused")
    assert running.stats().requests_forwarded == 1


def test_bad_options_and_a_port_in_use_name_what_is_wrong():
    with pytest.raises(ValueError, match="option 'hwm' of Broker must be a positive integer"):
        Broker(ANY, ANY, hwm=0)
    with pytest.raises(ValueError, match="invalid ZeroMQ endpoint"):
        Broker("@tcp://127.0.0.1:x", ANY)
    with Broker(ANY, ANY) as first:
        with pytest.raises(OSError, match="cannot bind BrokerBackend to .*Address already in use"):
            Broker(ANY, "@" + first.backend_addresses[0])


# -- spark-zmq broker --------------------------------------------------------------------


def _stderr_lines(process: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stderr:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _next_line(lines: queue.Queue, prefix: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no line starting {prefix!r} in {timeout}s; saw {seen}") from None
        if line is None:
            raise AssertionError(f"stderr ended before a line starting {prefix!r}; saw {seen}")
        seen.append(line)
        if line.startswith(prefix):
            return line


def test_cli_broker_serves_reports_status_and_exits_0_on_sigterm(workers):
    front, back = free_ports(2)
    process = subprocess.Popen(
        [
            CLI,
            "broker",
            "--frontend",
            f"@tcp://127.0.0.1:{front}",
            "--backend",
            f"@tcp://127.0.0.1:{back}",
            "--status-interval",
            "0.2",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _stderr_lines(process)
        assert _next_line(lines, "broker: workers 0 idle / 0 known")
        for name in ("x", "y"):
            workers(f"tcp://127.0.0.1:{back}", name)
        _next_line(lines, "broker: workers 2 idle / 2 known")
        with Client(f"tcp://127.0.0.1:{front}", timeout=10) as client:
            replies = list(client.map([b"%d" % i for i in range(20)]))
        assert [r[0].split(b":", 1)[1] for r in replies] == [b"%d" % i for i in range(20)]
        _next_line(
            lines, "broker: workers 2 idle / 2 known; requests 0 waiting, 0 in flight; 20 forwarded, 20 returned"
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
        final = _next_line(lines, "broker: stopped (SIGTERM)")
        assert "20 forwarded, 20 returned" in final
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


@pytest.mark.parametrize("reply_timeout", [-1, float("nan"), float("inf"), True, "30"])
def test_a_bad_reply_timeout_is_refused_naming_the_option(reply_timeout):
    with pytest.raises(ValueError, match="option 'reply_timeout' of Broker must be a finite number of seconds >= 0"):
        Broker("@tcp://127.0.0.1:*", "@tcp://127.0.0.1:*", reply_timeout=reply_timeout)


@pytest.mark.parametrize(
    "args, code, message",
    [
        (
            ["--frontend", "@tcp://127.0.0.1:x", "--backend", "@tcp://127.0.0.1:1"],
            2,
            "'--frontend': invalid ZeroMQ endpoint",
        ),
        (["--frontend", "@tcp://127.0.0.1:1", "--backend", "tcp//nowhere"], 2, "'--backend': invalid ZeroMQ endpoint"),
        (["--frontend", "@tcp://127.0.0.1:1", "--backend", "@tcp://127.0.0.1:2", "--hwm", "0"], 2, "--hwm"),
        (
            ["--frontend", "@tcp://127.0.0.1:1", "--backend", "@tcp://127.0.0.1:2", "--reply-timeout", "-1"],
            2,
            "--reply-timeout",
        ),
        (
            [
                "--frontend",
                "@tcp://127.0.0.1:1",
                "--backend",
                "@tcp://127.0.0.1:2",
                "--curve-certificate",
                "x.key_secret",
            ],
            2,
            "needs --frontend-authorized-keys",
        ),
    ],
)
def test_cli_broker_bad_arguments_are_usage_errors(args, code, message):
    result = subprocess.run([CLI, "broker", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == code, result.stderr
    assert message in " ".join(result.stderr.replace("│", " ").split())
    assert "Traceback" not in result.stderr


def test_cli_broker_on_a_port_in_use_fails_with_one_line():
    holder = zmq.Context.instance().socket(zmq.ROUTER)
    holder.setsockopt(zmq.LINGER, 0)
    holder.bind("tcp://127.0.0.1:*")
    taken = holder.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        result = subprocess.run(
            [CLI, "broker", "--frontend", "@" + taken, "--backend", "@tcp://127.0.0.1:*"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        holder.close(0)
    assert result.returncode == 1
    assert "error: cannot bind BrokerFrontend" in result.stderr and "Address already in use" in result.stderr
    assert "Traceback" not in result.stderr
