"""The executors' spool fetch service, attacked as a stranger on the network would (no Spark).

Clients here are plain pyzmq DEALER sockets, not the project's code: one without
credentials, one with CURVE but a key of its own, and the real client key made for the
query, which then misbehaves (bad requests, requests it never reads the replies of)."""

from __future__ import annotations

import json
import os
import socket
import threading

import pyarrow as pa
import pytest
import zmq
from zmqtest import rss_bytes, wait_until

from spark_zmq.ingest import fetch
from spark_zmq.ingest.fetch import FetchError, SpoolServer, fetch_range
from spark_zmq.ingest.loss import LossPolicy
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def served(tmp_path):
    spool = Spool(str(tmp_path / "secret-spool-dir"), 2, max_bytes=1 << 30)
    for start in range(0, 2000, 100):
        spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(start, start + 100)], None, "raw", 0))
    for start in range(0, 64, 4):  # channel 1: 64 MiB of 1 MiB messages, for replies at the size cap
        spool.channels[1].append(
            messages_to_batch([bytes([i]) * (1 << 20) for i in range(start, start + 4)], None, "raw", 0)
        )
    server = SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        spool_id=spool.spool_id,
        channels=2,
        locate=lambda channel, offset: spool.channels[channel].locate(offset),
    )
    yield spool, server
    server.close()
    spool.close()


def _dealer(server: SpoolServer, keys=None, server_key=None) -> zmq.Socket:
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.linger = 0
    if keys is not None:
        dealer.curve_publickey, dealer.curve_secretkey = keys
        dealer.curve_serverkey = server_key or server.access.server_key
    dealer.connect(server.endpoint)
    return dealer


def _ask(dealer: zmq.Socket, request, timeout_ms: int = 1500):
    """The answer, or ``None`` if none came (or the request could not even be queued: a
    DEALER whose only connection failed its handshake has no pipe to queue it to)."""
    body = request if isinstance(request, bytes) else json.dumps(request).encode()
    dealer.sndtimeo = timeout_ms
    try:
        dealer.send_multipart([b"", body])
    except zmq.Again:
        return None
    if not dealer.poll(timeout_ms):
        return None
    return dealer.recv_multipart()[1:]  # after the empty delimiter


def _request(spool, start=0, end=2000, channel=0):
    return {"channel": channel, "start": start, "end": end, "spool": spool.spool_id}


def test_it_listens_only_on_the_named_address_never_a_wildcard(served):
    spool, server = served
    assert server.endpoint.startswith("tcp://127.0.0.1:")
    port = int(server.endpoint.rsplit(":", 1)[1])
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(OSError):  # 127.0.0.2 is this host too (Linux routes 127/8 to lo): nobody listens there
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    with pytest.raises(ValueError, match="wildcard"):
        SpoolServer(spool.spool_dir, host="0.0.0.0")


@pytest.mark.parametrize("credentials", ["none", "own CURVE key"])
def test_a_client_without_the_query_key_gets_nothing(served, credentials):
    spool, server = served
    dealer = _dealer(server, zmq.curve_keypair() if credentials == "own CURVE key" else None)
    try:
        assert _ask(dealer, _request(spool)) is None
    finally:
        dealer.close()


def test_the_query_key_reads_and_bad_requests_learn_nothing_about_paths(served):
    spool, server = served
    access = server.access
    dealer = _dealer(server, (access.client_public, access.client_secret))
    try:
        reply = _ask(dealer, _request(spool, 0, 10))
        assert reply is not None and reply[0] == b"ok", reply
        for bad in (
            b"\xff not json",
            b"[1, 2]",
            {"channel": 7, "start": 0, "end": 5},
            {"channel": 0, "start": 5, "end": 5},
            {"channel": "0", "start": 0, "end": 5},
            {"channel": 0, "start": -1, "end": 5},
            {"channel": 0, "start": 0, "end": 1 << 70},
            {"channel": 0, "start": 0, "end": 5, "spool": "x" * 1000},
            _request(spool, 5000, 6000),
            {"channel": 0, "start": 0, "end": 5, "spool": "another-spool"},
        ):
            reply = _ask(dealer, bad)
            assert reply is not None and reply[0] == b"error", (bad, reply)
            text = reply[1].decode()
            assert spool.spool_dir not in text and "secret-spool-dir" not in text and "/" not in text, text
        # a request over the size limit is dropped by libzmq (the peer is disconnected)
        assert _ask(dealer, b"{" + b" " * (fetch.REQUEST_BYTES * 2) + b"}", timeout_ms=500) is None
    finally:
        dealer.close()


def test_damage_in_the_spool_is_reported_without_its_path(served):
    spool, server = served
    segment = sorted(os.listdir(os.path.join(spool.spool_dir, "ch-0")))[0]
    path = os.path.join(spool.spool_dir, "ch-0", segment)
    with open(path, "r+b") as f:  # corrupt a record body in the middle of the segment
        f.seek(os.path.getsize(path) // 2)
        f.write(b"\x00" * 64)
    with pytest.raises(Exception) as caught:
        list(fetch_range(server.access, 0, 0, 2000, spool_id=spool.spool_id, timeout=30))
    assert "DataLossError" in f"{type(caught.value).__name__}: {caught.value}"
    assert spool.spool_dir not in str(caught.value) and segment not in str(caught.value)


def test_a_task_that_skips_loss_gets_the_rest_and_the_driver_logs_the_file(served, caplog):
    """``failOnDataLoss=false`` crosses the wire as ``skipLoss``; the server skips and logs
    there (with the file), the task gets every readable message."""
    spool, server = served
    segment = sorted(os.listdir(os.path.join(spool.spool_dir, "ch-0")))[0]
    path = os.path.join(spool.spool_dir, "ch-0", segment)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(b"\x00" * 64)
    with caplog.at_level("WARNING", logger="spark_zmq.ingest.loss"):
        got = [
            v.as_py()
            for _, batch in fetch_range(
                server.access, 0, 0, 2000, spool_id=spool.spool_id, timeout=30, loss=LossPolicy(fail=False)
            )
            for v in batch.column(0)
        ]
    assert 0 < len(got) < 2000 and len(set(got)) == len(got)
    assert all(v == b"m-%d" % int(v[2:]) for v in got)
    assert "failOnDataLoss=false" in caplog.text and segment in caplog.text


def test_a_peer_that_never_reads_its_replies_costs_bounded_memory(served):
    """60 unread requests once grew the driver from 130 to 596 MiB (32 MiB replies, 1,000
    queued per peer); now at most QUEUE replies of at most REPLY_BYTES (plus one spool
    batch) wait for a peer, and the rest are dropped and counted."""
    spool, server = served
    access = server.access
    dealer = _dealer(server, (access.client_public, access.client_secret))
    dealer.rcvhwm = 1
    dealer.rcvbuf = 4096
    before = rss_bytes(os.getpid())
    try:
        for _ in range(60):
            dealer.send_multipart([b"", json.dumps(_request(spool, 0, 64, channel=1)).encode()])
        wait_until(lambda: server.dropped_replies >= 40, 60, "the server to drop replies to a peer that does not read")
        grown = rss_bytes(os.getpid()) - before
        assert grown < 160 << 20, f"the process grew by {grown >> 20} MiB"
    finally:
        dealer.close()


def test_the_task_side_client_fetches_with_the_query_keys_and_fails_clearly_without_them(served):
    spool, server = served
    got = [
        v
        for _, batch in fetch_range(server.access, 0, 0, 2000, spool_id=spool.spool_id, timeout=30)
        for v in batch.column("value").to_pylist()
    ]
    assert got == [b"m-%d" % i for i in range(2000)]
    other = SpoolServer(spool.spool_dir, host="127.0.0.1", spool_id=spool.spool_id)
    try:  # the keys of another query's service: the handshake fails and the error says so
        wrong = fetch.FetchAccess(
            server.endpoint, other.access.server_key, other.access.client_public, other.access.client_secret
        )
        with pytest.raises(FetchError, match="CURVE"):
            list(fetch_range(wrong, 0, 0, 10, spool_id=spool.spool_id, timeout=2))
    finally:
        other.close()


def test_a_flood_of_strangers_does_not_stop_the_service(served):
    spool, server = served
    greeting = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00NULL" + b"\x00" * 48
    port = int(server.endpoint.rsplit(":", 1)[1])
    for _ in range(3000):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(greeting)
    got = sum(
        batch.num_rows for _, batch in fetch_range(server.access, 0, 0, 2000, spool_id=spool.spool_id, timeout=30)
    )
    assert got == 2000
    wait_until(lambda: server._router.handshakes.rejected >= 3000, 30, "3000 rejections counted")


def test_a_resent_fetch_skips_late_answers_to_its_earlier_requests():
    """A server (plain pyzmq) that answers a fetch request only after its resend, then answers
    the first copy late, after the client asked for the next part: the client takes each
    answer once, by its request id, and never mistakes the late one for progress."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    access = fetch.FetchAccess(f"tcp://127.0.0.1:{port}", None, None, None, server_name="the test")

    def reply(start: int, end: int, request_id: bytes) -> list[bytes]:
        batch = messages_to_batch([b"m-%d" % i for i in range(start, end)], None, "raw", 0)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return [b"ok", str(end).encode(), json.dumps([start]).encode(), sink.getvalue().to_pybytes(), request_id]

    def serve() -> None:
        first = router.recv_multipart()  # request 1, unanswered
        resent = router.recv_multipart()  # request 1 again, after resend_s
        assert json.loads(first[2]) == json.loads(resent[2])
        router.send_multipart(resent[:2] + reply(0, 5, b"1"))
        second = router.recv_multipart()  # request 2, for offsets 5..10
        router.send_multipart(first[:2] + reply(0, 5, b"1"))  # the late answer to request 1
        router.send_multipart(second[:2] + reply(5, 10, b"2"))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        got = [
            v.as_py()
            for _, batch in fetch_range(access, 0, 0, 10, timeout=20, resend_s=0.3)
            for v in batch.column("value")
        ]
        assert got == [b"m-%d" % i for i in range(10)]
    finally:
        server.join(10)
        router.close(0)
        context.term()
