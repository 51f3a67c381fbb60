"""Closing the spool fetch service while a client is stuck inside a multipart reply does not
abort the process.

libzmq 4.3.5 asserts ("Resource temporarily unavailable (src/session_base.cpp:233)",
zeromq/libzmq#3442) when a connection fails while its session holds part of a multipart
message and the closed socket's pipe already refuses the rest. A fetch reply's Arrow frame is
not its last, so a client that stops reading partway through it, closed just after the
service closes (what a stopping query's read tasks do), aborted the driver or relay process:
with the ROUTER closed at linger 0 (``router_reply.CLOSE_LINGER_MS``) this test failed in
each of three runs, its first child aborting. The rounds run in child processes: an abort ends the
child, not the test run. Probabilistic by nature (a race in libzmq), so marked slow: CI runs
it, the inner loop does not."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: rounds per child process and children: about 1 s of rounds a child on 2 cores
ROUNDS, CHILDREN = 30, 3


def _rounds(rounds: int) -> None:
    """``rounds`` times: a service, a client that sends 8 fetches of 8 MiB replies with a
    4 KiB receive buffer and reads nothing, the service closed once it dropped a reply, then
    the client."""
    import zmq
    from zmqtest import wait_until

    from spark_zmq.ingest.fetch import SpoolServer
    from spark_zmq.ingest.receiver import messages_to_batch
    from spark_zmq.ingest.spool import Spool

    spool = Spool(os.path.join(tempfile.mkdtemp(), "spool"), 1, max_bytes=1 << 30)
    for start in range(0, 32, 8):
        batch = [bytes([i]) * (256 << 10) for i in range(start, start + 8)]
        spool.channels[0].append(messages_to_batch(batch, None, "raw", 0))
    for _ in range(rounds):
        server = SpoolServer(
            spool.spool_dir,
            host="127.0.0.1",
            spool_id=spool.spool_id,
            channels=1,
            locate=lambda c, o: spool.channels[c].locate(o),
        )
        access = server.access
        client = zmq.Context.instance().socket(zmq.DEALER)
        client.linger, client.rcvhwm, client.rcvbuf = 0, 1, 4096
        client.curve_publickey, client.curve_secretkey = access.client_public, access.client_secret
        client.curve_serverkey = access.server_key
        client.connect(server.endpoint)
        for i in range(8):
            request = {"channel": 0, "start": 0, "end": 32, "spool": spool.spool_id, "id": i}
            client.send_multipart([b"", json.dumps(request).encode()])
        wait_until(lambda s=server: s.dropped_replies >= 1, 10.0, "a reply dropped for the stuck client")
        server.close()
        client.close()
    spool.close()


def test_closing_the_service_under_a_client_stuck_mid_reply_never_aborts_the_process():
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tests, "helpers"), os.environ.get("PYTHONPATH", "")])
    )
    for child in range(CHILDREN):
        result = subprocess.run(
            [sys.executable, __file__, str(ROUNDS)], capture_output=True, text=True, timeout=90, env=env
        )
        aborted = result.returncode == -signal.SIGABRT
        assert result.returncode == 0, (
            f"child {child} {'aborted' if aborted else f'exited {result.returncode}'}: {result.stderr[-800:]}"
        )


if __name__ == "__main__":
    _rounds(int(sys.argv[1]))
