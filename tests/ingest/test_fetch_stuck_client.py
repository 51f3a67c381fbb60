"""The driver's spool fetch service against a client that sends fetches and reads nothing (no Spark).

The attacker holds the query's real client key (an insider, or a slow executor on a
congested link: the same client without malice) and is a plain pyzmq DEALER whose replies
pile up unread. Another reader is connected meanwhile, so the ROUTER always has a peer with
room: that once made the serving thread retry the reply to the full peer forever (a
``timeout=0`` send that never ended), so the other reader got nothing, ``dropped_replies``
stayed 0, and ``close()`` never returned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
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


def _spool(path: str) -> Spool:
    """Channel 0: 500 small messages; channel 1: 32 of ``_BIG``."""
    spool = Spool(path, 2, max_bytes=1 << 30)
    spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(500)], None, "raw", 0))
    for start in range(0, 32, 8):
        spool.channels[1].append(
            messages_to_batch([bytes([i]) * _BIG for i in range(start, start + 8)], None, "raw", 0)
        )
    return spool


def _server(spool: Spool) -> SpoolServer:
    return SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        spool_id=spool.spool_id,
        channels=2,
        locate=lambda channel, offset: spool.channels[channel].locate(offset),
    )


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


def _attack(directory: str) -> None:
    """A client that reads nothing beside one that reads: the other is served within a
    bound and the service closes in time (assertions; run in a child process by the test,
    its spool in ``directory``)."""
    spool = _spool(os.path.join(directory, "spool"))
    server = _server(spool)
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
        spool.close()


def _child(*args: str) -> subprocess.CompletedProcess:
    """This file run as a script in a process of its own (``__main__`` below)."""
    helpers = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "helpers")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([helpers, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=90, env=env)


def test_a_client_that_reads_nothing_costs_others_nothing_and_close_ends_in_time():
    """In a child process: a service closed under a client stuck inside a multipart reply
    can meet libzmq's abort (see the next test) whatever the service does, and in the test
    worker's own process it would end the worker and every test queued behind it."""
    result = _child("attack")
    assert result.returncode == 0, f"the attack run exited {result.returncode}: {result.stderr[-3000:]}"


#: rounds per child process, and children: about 1 s of rounds a child on 2 cores
_ROUNDS, _CHILDREN = 30, 3


def _close_under_a_stuck_reply(rounds: int) -> None:
    """``rounds`` times: a service, a client that sends 8 fetches of 8 MiB replies with a
    4 KiB receive buffer and reads nothing, the service closed once it dropped a reply, then
    the client (what a stopping query's read tasks do)."""
    spool = _spool(os.path.join(tempfile.mkdtemp(), "spool"))
    for _ in range(rounds):
        server = _server(spool)
        client = _dealer(server)
        client.rcvhwm, client.rcvbuf = 1, 4096
        client.connect(server.endpoint)
        for i in range(8):
            client.send_multipart([b"", _fetch(spool, 1, 0, 32, i)])
        wait_until(lambda s=server: s.dropped_replies >= 1, 10.0, "a reply dropped for the stuck client")
        server.close()
        client.close()
    spool.close()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_closing_the_service_under_a_client_stuck_mid_reply_never_aborts_the_process():
    """libzmq 4.3.5 asserts ("Resource temporarily unavailable (src/session_base.cpp:233)",
    zeromq/libzmq#3442) when a connection fails while its session holds part of a multipart
    message and the closed socket's pipe already refuses the rest. A fetch reply's Arrow frame
    is not its last, so a client stuck partway through it and closed just after the service
    aborted the driver or relay process: with the ROUTER closed at linger 0
    (``router_reply.CLOSE_LINGER_MS``) this test failed in each of three runs, its first child
    aborting. The rounds run in child processes, so an abort ends a child, not the test run.
    A race in libzmq, so probabilistic: marked slow, CI runs it, the inner loop does not."""
    for child in range(_CHILDREN):
        result = _child(str(_ROUNDS))
        aborted = result.returncode == -signal.SIGABRT
        assert result.returncode == 0, (
            f"child {child} {'aborted' if aborted else f'exited {result.returncode}'}: {result.stderr[-800:]}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "attack":
        with tempfile.TemporaryDirectory() as directory:  # the spool goes with the child's run
            _attack(directory)
    else:
        _close_under_a_stuck_reply(int(sys.argv[1]))
