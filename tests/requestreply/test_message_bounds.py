"""Whole-message bounds on the worker's and the ``Client``'s receiving sockets, on real
sockets: the worker and the client each run in a process of their own (so their peak
memory, VmHWM in /proc, is their own); the attacker is a plain pyzmq socket sending one
message of 300,000 frames, then a flood of many-frame messages. Each is refused whole,
counted and logged once per peer, and the worker or the client goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import zmq
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the test)
from zmqtest import free_ports, peak_rss_bytes

pytestmark = pytest.mark.timeout(180)

#: the big message: 300,000 frames of 100 bytes (30 MB of payload)
BIG_FRAMES, FRAME = 300_000, b"x" * 100
#: the flood: this many messages of this many frames
FLOOD, FLOOD_FRAMES = 20, 5_000

WORKER = textwrap.dedent("""
    import signal, sys, threading, json
    from spark_zmq.worker import serve

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def ready(addresses):
        print("ready", flush=True)

    stats = serve(lambda body: body.upper(), sys.argv[1], format="raw", broker=False,
                  max_message_bytes=1 << 20, on_ready=ready, stop=stop)
    print(json.dumps(stats.__dict__), flush=True)
""")

CLIENT = textwrap.dedent("""
    import json, sys
    from spark_zmq.requestreply import Client

    def peak():
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

    with Client(sys.argv[1], timeout=60, retries=0, max_message_bytes=1 << 20) as client:
        before = peak()
        reply = client.request(b"question")
        print(json.dumps({"reply": [f.decode() for f in reply], "oversize": client.oversize,
                          "grown": peak() - before}), flush=True)
""")


def _socket(kind: int) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    return sock


def _recv(sock: zmq.Socket, what: str, timeout_ms: int = 60_000) -> list[bytes]:
    assert sock.poll(timeout_ms), f"no {what} within {timeout_ms / 1000:g} s"
    return sock.recv_multipart()


def test_a_worker_refuses_messages_of_too_many_frames_whole_and_goes_on(busy):
    (port,) = free_ports(1)
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, f"@tcp://127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout.readline().strip() == "ready"
        attacker = _socket(zmq.DEALER)  # a REP takes [b"", body...] from a DEALER
        attacker.connect(f"tcp://127.0.0.1:{port}")
        before = peak_rss_bytes(worker.pid)
        attacker.send_multipart([b""] + [FRAME] * BIG_FRAMES)
        reply = _recv(attacker, "reply to the 300,000-frame request")
        assert reply[1] == b"ERROR" and b"more than 64 frames" in reply[2], reply[:3]
        grown = peak_rss_bytes(worker.pid) - before
        for _ in range(FLOOD):
            attacker.send_multipart([b""] + [b"y"] * FLOOD_FRAMES)
        for i in range(FLOOD):
            assert _recv(attacker, f"reply {i} to the flood")[1] == b"ERROR"
        attacker.send_multipart([b"", b"still here"])
        assert _recv(attacker, "an honest reply") == [b"", b"STILL HERE"]
        worker.terminate()
        out, err = worker.communicate(timeout=30)
        stats = json.loads(out.strip().splitlines()[-1])
        print(
            f"\nworker: peak memory grew {grown / 2**20:.1f} MiB for a {len(FRAME) * BIG_FRAMES / 2**20:.0f} MiB "
            f"message of {BIG_FRAMES:,} frames; {stats}"
        )
        assert stats["oversize"] == FLOOD + 1 and stats["replies"] == 1, stats
        assert err.count("dropped a message from peer") == 1, err  # once per peer
        # libzmq holds a message whole before its first frame can be read (about 64 bytes
        # per frame besides the payload); the worker itself keeps none of it
        assert grown < 96 << 20, f"the worker's peak memory grew by {grown / 2**20:.0f} MiB"
        attacker.close(0)
    finally:
        worker.kill()
        worker.wait(10)


def test_a_client_drops_replies_of_too_many_frames_whole_and_takes_the_real_one(busy):
    (port,) = free_ports(1)
    server = _socket(zmq.ROUTER)
    server.bind(f"tcp://127.0.0.1:{port}")
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, f"tcp://127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        identity, request_id, delimiter, body = _recv(server, "the client's request")
        assert delimiter == b"" and body == b"question"
        envelope = [identity, request_id, b""]
        server.send_multipart(envelope + [FRAME] * BIG_FRAMES)
        for _ in range(FLOOD):
            server.send_multipart(envelope + [b"y"] * FLOOD_FRAMES)
        server.send_multipart(envelope + [b"the answer"])
        out, err = client.communicate(timeout=120)
        assert client.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        print(f"\nclient: peak memory grew {result['grown'] / 2**20:.1f} MiB; {result}")
        assert result["reply"] == ["the answer"] and result["oversize"] == FLOOD + 1, result
        assert err.count("dropped a message from peer") == 1, err
        assert result["grown"] < 96 << 20, result
    finally:
        client.kill()
        client.wait(10)
        server.close(0)
