"""``spark_zmq.worker.serve``: a Python function as a REP server and as a broker worker, in
each format, on real sockets. A handler that raises, or answers with the wrong number of
rows, gets the two-frame error reply and the worker keeps serving; ``stop`` ends it; a
worker whose broker restarts announces itself to the new one.
"""

from __future__ import annotations

import multiprocessing
import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import zmq
import zmq.auth
from brokertest import ANY, running  # noqa: F401  (a fixture)
from zmqtest import free_ports, wait_until

from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair, load_authorized_keys, load_public_key
from spark_zmq.requestreply import Broker, Client
from spark_zmq.worker import ERROR, WorkerStats, is_error_reply, serve

pytestmark = pytest.mark.timeout(60)


def ipc(*batches: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def table_of(reply: bytes) -> pa.Table:
    return pa.ipc.open_stream(reply).read_all()


def double(batch: pa.RecordBatch) -> pa.RecordBatch:
    if batch.num_rows == 0:
        return pa.RecordBatch.from_pydict({"y": pa.array([], pa.int64())})
    if batch.num_rows == 7:
        return batch.slice(0, 3)  # the wrong number of rows
    if pc.any(pc.equal(batch.column("x"), 13)).as_py():
        raise ValueError("unlucky row")
    return pa.RecordBatch.from_pydict({"y": pc.multiply(batch.column("x"), 2)})


def add_sum(request: dict) -> dict:
    return {**request, "sum": request["a"] + request["b"]}


def upper(body: bytes) -> bytes:
    if body == b"boom":
        raise RuntimeError("boom")
    return body.upper()


def reverse(text: str) -> str:
    if text == "none":
        return None  # type: ignore[return-value]  # not a str: an error reply
    return text[::-1]


def _x(*values: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"x": pa.array(values, pa.int64())})


#: format -> (handler, [(request, check of the one-frame reply)], [(request, text in the error)])
CASES = {
    "arrow": (
        double,
        [
            (ipc(_x(1, 2), _x(3, 4, 5)), lambda r: table_of(r).column("y").to_pylist() == [2, 4, 6, 8, 10]),
            (ipc(_x()), lambda r: table_of(r).num_rows == 0),
        ],
        [
            (ipc(_x(1, 13)), "ValueError: unlucky row"),
            (ipc(_x(*range(7))), "returned 3 rows for a request of 7 rows"),
            (b"not arrow", "not an Arrow IPC stream"),
        ],
    ),
    "json": (
        add_sum,
        [(b'{"a": 1, "b": 2}', lambda r: r == b'{"a":1,"b":2,"sum":3}')],
        [(b'{"a": 1}', "KeyError"), (b"[1, 2]", "not an object"), (b"{", "not JSON")],
    ),
    "raw": (
        upper,
        [(b"abc\x00", lambda r: r == b"ABC\x00"), (b"", lambda r: r == b"")],
        [(b"boom", "RuntimeError: boom")],
    ),
    "text": (
        reverse,
        [("héllo".encode(), lambda r: r == "olléh".encode())],
        [(b"\xff\xfe", "not UTF-8"), (b"none", "not str")],
    ),
}


class Serving:
    """``serve`` on a thread of the test process, until ``close``."""

    def __init__(self, handler, endpoint, **options) -> None:
        self.stop = threading.Event()
        self.addresses: list[str] = []
        self.result: list[WorkerStats] = []
        ready = threading.Event()

        def on_ready(addresses):
            self.addresses = addresses
            ready.set()

        def run():
            self.result.append(serve(handler, endpoint, stop=self.stop, on_ready=on_ready, **options))

        self.thread = threading.Thread(target=run, daemon=True, name="worker")
        self.thread.start()
        assert ready.wait(10), "the worker never got its socket"

    def close(self) -> WorkerStats:
        self.stop.set()
        self.thread.join(5)
        assert not self.thread.is_alive(), "serve did not return after stop"
        return self.result[0]


@pytest.fixture
def serving():
    started: list[Serving] = []

    def start(handler, endpoint, **options) -> Serving:
        started.append(Serving(handler, endpoint, **options))
        return started[-1]

    yield start
    for worker in started:
        worker.stop.set()
        worker.thread.join(5)


def _exercise(client: Client, fmt: str) -> None:
    """Every good and bad request of ``fmt``, twice over: the worker keeps serving after errors."""
    _, good, bad = CASES[fmt]
    for _ in range(2):
        for request, check in good:
            reply = client.request(request)
            assert len(reply) == 1 and check(reply[0]), reply
        for request, text in bad:
            reply = client.request(request)
            assert is_error_reply(reply) and reply[0] == ERROR, reply
            assert text in reply[1].decode(), reply


@pytest.mark.parametrize("fmt", list(CASES))
def test_a_rep_server_answers_each_format_and_errors_with_the_error_reply(serving, fmt):
    worker = serving(CASES[fmt][0], ANY, format=fmt, broker=False)
    with Client(worker.addresses[0], timeout=10) as client:
        _exercise(client, fmt)
    stats = worker.close()
    good, bad = len(CASES[fmt][1]), len(CASES[fmt][2])
    assert (stats.requests, stats.replies, stats.errors) == (2 * (good + bad), 2 * good, 2 * bad)


@pytest.mark.parametrize("fmt", list(CASES))
def test_a_broker_worker_answers_each_format_behind_the_broker(serving, running, fmt):
    b = running()
    workers = [serving(CASES[fmt][0], b.backend_addresses[0], format=fmt) for _ in range(2)]
    wait_until(lambda: b.stats().workers_idle == 2, 10, "two workers READY")
    with Client(b.frontend_addresses[0], timeout=10) as client:
        _exercise(client, fmt)
    served = [w.close() for w in workers]
    assert sum(s.requests for s in served) == b.stats().replies_returned
    assert all(s.requests > 0 for s in served), served  # both took turns (least recently used)


def test_a_plain_req_client_gets_the_reply_frames_of_a_broker_worker(serving, running):
    b = running()
    serving(upper, b.backend_addresses[0], format="raw")
    wait_until(lambda: b.stats().workers_idle == 1, 10, "the worker READY")
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.connect(b.frontend_addresses[0])
    try:
        for body, reply in (
            (b"abc", [b"ABC"]),
            (b"boom", [ERROR, b"RuntimeError: boom"]),
            ([b"two", b"frames"], [ERROR, b"the request has 2 body frames; one is expected"]),
        ):
            req.send_multipart(body if isinstance(body, list) else [body])
            assert req.poll(10_000)
            assert req.recv_multipart() == reply
    finally:
        req.close(0)


def test_stop_ends_an_idle_worker_at_once_and_the_broker_forgets_it(serving, running):
    b = running()
    worker = serving(upper, b.backend_addresses[0], format="raw")
    wait_until(lambda: b.stats().workers_idle == 1, 10, "the worker READY")
    stats = worker.close()
    assert stats == WorkerStats()
    wait_until(lambda: b.stats().workers_known == 0, 10, "the broker to forget the stopped worker")


def test_a_worker_announces_itself_again_to_a_restarted_broker(serving):
    front, back = free_ports(2)
    endpoints = {"frontend": f"@tcp://127.0.0.1:{front}", "backend": f"@tcp://127.0.0.1:{back}"}

    def started_broker():
        def bound():
            try:
                return Broker(**endpoints)
            except OSError:  # libzmq releases a closed socket's port on its own thread, soon
                return None

        b = wait_until(bound, 10, "the broker's ports to be free again")
        thread = threading.Thread(target=b.run, daemon=True)
        thread.start()
        return b, thread

    first, thread = started_broker()
    worker = serving(upper, f"tcp://127.0.0.1:{back}", format="raw")
    try:
        with Client(f"tcp://127.0.0.1:{front}", timeout=10) as client:
            assert client.request(b"one") == [b"ONE"]
        first.close()
        thread.join(5)
        second, thread = started_broker()
        try:
            wait_until(lambda: second.stats().workers_idle == 1, 20, "the worker's READY to the new broker")
            with Client(f"tcp://127.0.0.1:{front}", timeout=10) as client:
                assert client.request(b"two") == [b"TWO"]
            assert second.stats().malformed == 0
        finally:
            second.close()
            thread.join(5)
    finally:
        stats = worker.close()
    assert stats.reannounced == 1 and stats.replies == 2


def _process_worker(backend: str, name: str, stop) -> None:
    from spark_zmq.worker import serve as serve_in_child

    def tag(batch):
        return pa.RecordBatch.from_pydict({"worker": pa.array([name] * batch.num_rows)})

    serve_in_child(tag, backend, stop=stop)


def test_workers_in_processes_of_their_own_share_the_load(running):
    b = running()
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()
    processes = [spawn.Process(target=_process_worker, args=(b.backend_addresses[0], f"p{i}", stop)) for i in range(2)]
    for process in processes:
        process.start()
    try:
        wait_until(lambda: b.stats().workers_idle == 2, 60, "two worker processes READY")
        with Client(b.frontend_addresses[0], timeout=20) as client:
            replies = list(client.map([ipc(_x(*range(i % 5 + 1))) for i in range(60)], max_in_flight=4))
        names = [table_of(r[0]).column("worker").to_pylist() for r in replies]
        assert [len(n) for n in names] == [i % 5 + 1 for i in range(60)]
        assert {n[0] for n in names} == {"p0", "p1"}
    finally:
        stop.set()
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0, 0]


def test_a_curve_worker_behind_a_curve_backend(serving, running, tmp_path):
    (tmp_path / "workers").mkdir()
    _, broker_secret = zmq.auth.create_certificates(str(tmp_path), "broker")
    _, worker_secret = zmq.auth.create_certificates(str(tmp_path / "workers"), "worker")
    b = running(
        curve_backend=Curve.server(
            KeyPair.from_certificate(broker_secret), load_authorized_keys(str(tmp_path / "workers"))
        )
    )
    curve = Curve.client(KeyPair.from_certificate(worker_secret), load_public_key(str(tmp_path / "broker.key")))
    serving(add_sum, b.backend_addresses[0], format="json", curve=curve)
    wait_until(lambda: b.stats().workers_idle == 1, 10, "the CURVE worker READY")
    with Client(b.frontend_addresses[0], timeout=10) as client:
        assert client.request(b'{"a": 2, "b": 3}') == [b'{"a":2,"b":3,"sum":5}']


@pytest.mark.parametrize(
    "kwargs, error, text",
    [
        ({"format": "xml"}, ValueError, "format must be one of arrow, json, raw, text, not 'xml'"),
        ({"endpoint": "tcp://127.0.0.1:1,tcp://127.0.0.1:2"}, ValueError, "connects to one broker backend"),
        ({"handler": "not callable"}, TypeError, "handler must be callable"),
        ({"endpoint": "tcp://127.0.0.1:x"}, ValueError, "invalid ZeroMQ endpoint"),
    ],
)
def test_bad_arguments_name_what_is_valid(kwargs, error, text):
    arguments = {"handler": upper, "endpoint": "tcp://127.0.0.1:1", **kwargs}
    with pytest.raises(error, match=text):
        serve(arguments.pop("handler"), arguments.pop("endpoint"), **arguments)
