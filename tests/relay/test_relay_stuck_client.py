"""A relay's ``--listen`` port against a client that sends requests and reads nothing (no Spark).

The attacker is a plain pyzmq DEALER (receive high-water mark 1, a 4 KiB kernel buffer)
that sends 60,000 ``hello``s, the one request that needs no lease, and never reads: about
20,000 small answers fill the buffers between it and the relay. Another reader stays
connected, so the relay's ROUTER always has a peer with room. That once made the serving
thread retry the answer to the full peer forever: the other reader got 0 of 5 answers, also
after the attacker left, the relay spun a core, ``dropped_replies`` stayed 0 and SIGTERM
did not end it. Now each answer to the full peer is tried once and dropped (counted, and
logged at most once a minute)."""

from __future__ import annotations

import json
import signal
import time

import pytest
import zmq
from relaytest import RelayProcess, relay, stop_relays  # noqa: F401  (relay: a fixture)
from zmqtest import free_ports, wait_until

pytestmark = pytest.mark.timeout(90)

#: twice what the buffers between the attacker and the relay took on Linux's default
#: (4 MiB) send buffer: about 20,000 answers of 140 bytes
_FLOOD = 60_000
#: how long the relay may take to exit after SIGTERM (docs/relays.md)
_SIGTERM_S = 10.0


def _dealer(address: str, *, reads: bool = True) -> zmq.Socket:
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.linger = 0
    if not reads:
        dealer.rcvhwm = 1
        dealer.rcvbuf = 4096
    dealer.connect(address)
    return dealer


def _hello(request_id: int) -> list[bytes]:
    return [b"", json.dumps({"op": "hello", "id": request_id}).encode()]


def _answers(dealer: zmq.Socket, n: int, within_s: float) -> int:
    """How many of ``n`` hellos sent now are answered within ``within_s`` seconds."""
    for i in range(n):
        dealer.send_multipart(_hello(1000 + i))
    got, deadline = 0, time.monotonic() + within_s
    while got < n and time.monotonic() < deadline:
        if dealer.poll(50):
            frames = dealer.recv_multipart()
            assert frames[1] == b"ok", frames
            got += 1
    return got


def _flood(address: str) -> zmq.Socket:
    attacker = _dealer(address, reads=False)
    for _ in range(_FLOOD):
        attacker.send_multipart(_hello(1))
    return attacker


def test_a_client_that_reads_nothing_has_its_answers_dropped_and_counted_while_others_are_served(relay):
    other = _dealer(relay.listen)
    attacker = None
    try:
        assert _answers(other, 1, 10) == 1  # connected: the ROUTER has a peer with room from now on
        attacker = _flood(relay.listen)
        wait_until(
            lambda: relay.server.dropped_replies >= 1,
            20,
            "the relay to drop an answer to the client that reads nothing",
        )
        assert _answers(other, 5, 3) == 5, "the other reader was not served during the attack"
        wait_until(lambda: relay.control_requests >= _FLOOD, 20, "the relay to read the whole flood")
        # what the attacker's buffers could not take was dropped, not held
        assert relay.server.dropped_replies >= _FLOOD // 10, relay.server.dropped_replies
        attacker.close()
        attacker = None
        assert _answers(other, 5, 3) == 5, "the other reader was not served after the attacker left"
    finally:
        other.close()
        if attacker is not None:
            attacker.close()


def test_the_relay_process_serves_others_and_ends_on_sigterm_while_the_attacker_is_connected(tmp_path):
    data, listen = free_ports(2)
    process = RelayProcess(f"@tcp://127.0.0.1:{data}", f"tcp://127.0.0.1:{listen}", str(tmp_path / "spool"))
    other = _dealer(process.listen)
    attacker = None
    try:
        assert _answers(other, 1, 10) == 1
        attacker = _flood(process.listen)
        wait_until(
            lambda: "dropped a reply" in process.errors(),
            20,
            "the relay to log a dropped answer to the client that reads nothing",
        )
        assert _answers(other, 5, 3) == 5, "the other reader got fewer than 5 of 5 answers during the attack"

        started = time.monotonic()
        assert process.process is not None
        process.process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: process.process.poll() is not None,
            _SIGTERM_S,
            "the relay to exit after SIGTERM with the attacker still connected",
        )
        took = time.monotonic() - started
        assert process.process.returncode == 0, process.errors()
        assert "Traceback" not in process.errors(), process.errors()
        assert took < _SIGTERM_S, took
    finally:
        other.close()
        if attacker is not None:
            attacker.close()
        stop_relays([process])
