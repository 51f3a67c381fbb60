"""``Client.send`` and ``Client.request`` never block past the client's own bound, on real
sockets: nobody listening, a peer whose queues are full, a server that refuses the client's
CURVE key (the error then says so, and where). Each call runs on a thread the test joins
with a deadline, so a call that blocks fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq
import zmq.auth
from loadhelper import busy  # noqa: F401  (a fixture: CPU load beside the timing-sensitive tests)
from zmqtest import free_ports

from spark_zmq.patterns import Router
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair, load_public_key
from spark_zmq.requestreply import Client, RequestTimeoutError

pytestmark = pytest.mark.timeout(60)


def _within(seconds: float, call) -> BaseException:
    """Run ``call`` on a thread; the exception it raised, which it must raise within ``seconds``."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001  (handed to the test)
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the call still blocks after {seconds:g} s"
    assert raised, f"the call returned after {time.monotonic() - started:.2f} s instead of raising"
    return raised[0]


def test_request_with_nobody_listening_fails_within_the_clients_bound(busy):
    (port,) = free_ports(1)
    client = Client(f"tcp://127.0.0.1:{port}", timeout=0.5, retries=1)
    try:
        error = _within(10, lambda: client.request(b"anyone?"))
        assert isinstance(error, RequestTimeoutError), repr(error)
        assert f"tcp://127.0.0.1:{port}" in str(error) and "within 1 s" in str(error), str(error)
    finally:
        client.close()


def test_send_to_a_peer_whose_queues_are_full_fails_within_the_clients_bound(busy):
    server = zmq.Context.instance().socket(zmq.ROUTER)  # connected, reads nothing
    server.setsockopt(zmq.LINGER, 0)
    server.setsockopt(zmq.RCVHWM, 1)
    server.setsockopt(zmq.RCVBUF, 65536)
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client = Client(f"tcp://127.0.0.1:{port}", timeout=0.3, retries=1, hwm=1, sndbuf=65536)
    try:

        def fill() -> None:
            for _ in range(200):
                client.send(b"x" * (1 << 20))

        error = _within(20, fill)
        assert isinstance(error, RequestTimeoutError) and "within 0.6 s" in str(error), repr(error)
    finally:
        client.close()
        server.close(0)


def test_a_refused_curve_key_is_named_in_the_clients_error(tmp_path, busy):
    _, server_secret = zmq.auth.create_certificates(str(tmp_path), "server")
    _, client_secret = zmq.auth.create_certificates(str(tmp_path), "client")
    _, other_secret = zmq.auth.create_certificates(str(tmp_path), "other")
    other = KeyPair.from_certificate(other_secret).public_key
    server = Router(
        "@tcp://127.0.0.1:*", curve=Curve.server(KeyPair.from_certificate(server_secret), frozenset({other}))
    )
    address = server.bound_addresses[0]
    curve = Curve.client(KeyPair.from_certificate(client_secret), load_public_key(str(tmp_path / "server.key")))
    client = Client(address, timeout=1, retries=1, curve=curve)
    try:
        error = _within(15, lambda: client.request(b"let me in"))
        assert isinstance(error, RequestTimeoutError), repr(error)
        text = str(error)
        assert "the server refused this side's CURVE certificate" in text and address in text, text
    finally:
        client.close()
        server.close()
