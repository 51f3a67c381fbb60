"""The driver's spool fetch service against a client that sends fetches and reads nothing (no Spark).

The attacker holds the query's real client key (an insider, or a slow executor on a
congested link: the same client without malice) and is a plain pyzmq DEALER whose replies
pile up unread. Another reader is connected meanwhile, so the ROUTER always has a peer with
room: that once made the serving thread retry the reply to the full peer forever (a
``timeout=0`` send that never ended), so the other reader got nothing, ``dropped_replies``
stayed 0, and ``close()`` never returned."""

from __future__ import annotations

import json
import threading
import time

import pytest
import zmq
from zmqtest import wait_until

from spark_zmq.ingest.fetch import SpoolServer, fetch_range
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool

pytestmark = pytest.mark.timeout(60)

#: channel 1: 32 messages of 256 KiB, so a fetch of it is an 8 MiB reply
_BIG = 256 << 10


@pytest.fixture
def served(tmp_path):
    spool = Spool(str(tmp_path / "spool"), 2, max_bytes=1 << 30)
    spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(500)], None, "raw", 0))
    for start in range(0, 32, 8):
        spool.channels[1].append(
            messages_to_batch([bytes([i]) * _BIG for i in range(start, start + 8)], None, "raw", 0)
        )
    server = SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        spool_id=spool.spool_id,
        channels=2,
        locate=lambda channel, offset: spool.channels[channel].locate(offset),
    )
    yield spool, server
    closing = threading.Thread(target=server.close, daemon=True)
    closing.start()
    closing.join(10)
    spool.close()


def _dealer(server: SpoolServer) -> zmq.Socket:
    access = server.access
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.linger = 0
    dealer.curve_publickey, dealer.curve_secretkey = access.client_public, access.client_secret
    dealer.curve_serverkey = access.server_key
    return dealer


def _fetch(spool: Spool, channel: int, start: int, end: int, request_id: int) -> bytes:
    return json.dumps(
        {"channel": channel, "start": start, "end": end, "spool": spool.spool_id, "id": request_id}
    ).encode()


def test_a_client_that_reads_nothing_costs_others_nothing_and_close_ends_in_time(served):
    spool, server = served
    # another reader, connected first: the ROUTER has a peer with room from now on
    other = _dealer(server)
    other.connect(server.endpoint)
    other.send_multipart([b"", _fetch(spool, 0, 0, 10, 1)])
    assert other.poll(10_000), "the fetch service did not answer before the attack"
    other.recv_multipart()

    attacker = _dealer(server)
    attacker.rcvhwm = 1
    attacker.rcvbuf = 4096
    attacker.connect(server.endpoint)
    try:
        for i in range(24):  # 24 fetches of 8 MiB each; not one reply is read
            attacker.send_multipart([b"", _fetch(spool, 1, 0, 32, 100 + i)])
        wait_until(
            lambda: server.dropped_replies >= 1, 20, "the service to drop a reply to the client that reads nothing"
        )

        # the other reader is served within a bound, with the attacker still connected
        started = time.monotonic()
        for i in range(5):
            other.send_multipart([b"", _fetch(spool, 0, i * 10, i * 10 + 10, 10 + i)])
            assert other.poll(3000), f"answer {i + 1} of 5 did not come within 3 s during the attack"
            assert other.recv_multipart()[1] == b"ok"
        got = [
            v
            for _, batch in fetch_range(server.access, 0, 0, 500, spool_id=spool.spool_id, timeout=5)
            for v in batch.column("value").to_pylist()
        ]
        assert got == [b"m-%d" % i for i in range(500)]
        assert time.monotonic() - started < 5.0

        # and the service stops in time (the driver's shutdown) whatever the attacker does
        started = time.monotonic()
        closing = threading.Thread(target=server.close, daemon=True)
        closing.start()
        closing.join(10)
        assert not closing.is_alive(), "SpoolServer.close() did not return within 10 s"
        assert time.monotonic() - started < 2.0, time.monotonic() - started
    finally:
        attacker.close()
        other.close()
