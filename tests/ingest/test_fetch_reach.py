"""Reaching the spool fetch service across hosts: a fixed port (or range) a firewall can name,
and a read task that cannot connect fails within seconds naming the address and what to set,
not after ``fetchTimeout`` of silence (no Spark: the service and client on real sockets)."""

from __future__ import annotations

import errno
import socket
import time

import pytest
from zmqtest import free_port_range, free_ports

from spark_zmq.ingest import fetch
from spark_zmq.ingest.fetch import FetchAccess, FetchError, SpoolServer, bind_first, fetch_range, listen_candidates
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool

pytestmark = pytest.mark.timeout(120)

#: the handshake wait these tests use instead of the product's ``CONNECT_S`` (10 s): what
#: they guard is that a fetch whose ``timeout`` is 120 s fails within that wait, not its length
TEST_CONNECT_S = 1.0


@pytest.fixture
def short_connect(monkeypatch):
    monkeypatch.setattr(fetch, "CONNECT_S", TEST_CONNECT_S)


@pytest.fixture
def spool(tmp_path):
    spool = Spool(str(tmp_path / "spool"), 1, max_bytes=1 << 30)
    spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(100)], None, "raw", 0))
    yield spool
    spool.close()


def _serve(spool: Spool, ports=None) -> SpoolServer:
    return SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        ports=ports,
        spool_id=spool.spool_id,
        locate=lambda channel, offset: spool.channels[0].locate(offset),
    )


def test_the_service_takes_the_first_free_port_of_the_range_and_serves_there(spool):
    first = free_port_range(3)
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", first))
    squatter.listen()
    try:
        server = _serve(spool, (first, first + 2))
        try:
            assert server.endpoint == f"tcp://127.0.0.1:{first + 1}"
            rows = sum(batch.num_rows for _, batch in fetch_range(server.access, 0, 0, 100, spool_id=spool.spool_id))
            assert rows == 100
        finally:
            server.close()
    finally:
        squatter.close()


def test_a_full_range_is_an_error_naming_the_option_and_the_ports(spool):
    first = free_port_range(2)
    squatters = []
    for port in (first, first + 1):
        s = socket.socket()
        s.bind(("127.0.0.1", port))
        s.listen()
        squatters.append(s)
    try:
        with pytest.raises(OSError) as failure:
            _serve(spool, (first, first + 1))
        assert failure.value.errno == errno.EADDRINUSE
        assert "spoolServerPort" in str(failure.value) and f"{first}-{first + 1}" in str(failure.value)
    finally:
        for s in squatters:
            s.close()


def test_candidates_are_each_port_of_the_range_or_any_port():
    assert listen_candidates("127.0.0.1") == ["tcp://127.0.0.1:*"]
    assert listen_candidates("127.0.0.1", (7100, 7102)) == [f"tcp://127.0.0.1:{p}" for p in (7100, 7101, 7102)]
    with pytest.raises(ValueError, match="wildcard"):
        listen_candidates("0.0.0.0", (7100, 7100))
    with pytest.raises(OSError):  # one candidate: its own error, not the range's
        bind_first(["tcp://127.0.0.1:1"], lambda endpoint: (_ for _ in ()).throw(OSError(errno.EADDRINUSE, "x")))


def test_a_read_task_that_cannot_connect_fails_within_seconds_naming_the_address_and_the_option(spool, short_connect):
    server = _serve(spool)
    try:
        (closed_port,) = free_ports(1)  # nothing listens there: every connect is refused
        wrong = FetchAccess(
            f"tcp://127.0.0.1:{closed_port}",
            server.access.server_key,
            server.access.client_public,
            server.access.client_secret,
        )
        started = time.monotonic()
        with pytest.raises(FetchError) as failure:
            list(fetch_range(wrong, 0, 0, 100, spool_id=spool.spool_id, timeout=120))
        took = time.monotonic() - started
        assert took < TEST_CONNECT_S + 5, f"took {took:.1f} s"
        message = str(failure.value)
        assert f"127.0.0.1:{closed_port}" in message and "spoolServerHost" in message and "spoolServerPort" in message
    finally:
        server.close()


def test_a_silent_address_fails_as_fast_as_a_refused_one(spool, short_connect):
    """A port that accepts TCP but never speaks ZeroMQ (a firewall's tarpit, a wrong service)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    server = _serve(spool)
    try:
        wrong = FetchAccess(
            f"tcp://127.0.0.1:{listener.getsockname()[1]}",
            server.access.server_key,
            server.access.client_public,
            server.access.client_secret,
        )
        started = time.monotonic()
        with pytest.raises(FetchError, match="no connection completed its handshake"):
            list(fetch_range(wrong, 0, 0, 100, spool_id=spool.spool_id, timeout=120))
        assert time.monotonic() - started < TEST_CONNECT_S + 5
    finally:
        server.close()
        listener.close()


def test_a_short_fetch_timeout_bounds_the_connect_wait_too(spool):
    server = _serve(spool)
    try:
        (closed_port,) = free_ports(1)
        wrong = FetchAccess(
            f"tcp://127.0.0.1:{closed_port}",
            server.access.server_key,
            server.access.client_public,
            server.access.client_secret,
        )
        started = time.monotonic()
        with pytest.raises(FetchError):
            list(fetch_range(wrong, 0, 0, 100, spool_id=spool.spool_id, timeout=2))
        assert time.monotonic() - started < 6
    finally:
        server.close()
