"""CURVE in the pattern layer (no Spark), against plain pyzmq peers: the ZAP domains of two
server sockets in one process stay apart, the application's own sockets are not judged by
our ZAP handler, and closing the last server socket stops the handler (so a context can
terminate)."""

from __future__ import annotations

import threading

import pytest
import zmq

from spark_zmq.patterns import Pull, Push
from spark_zmq.patterns.curve import ANY_KEY, Curve, KeyPair

pytestmark = pytest.mark.timeout(60)


def _client(endpoint, server_key, keys=None, context=None):
    sock = (context or zmq.Context.instance()).socket(zmq.PUSH)
    sock.linger = 0
    if keys is not None:
        sock.curve_serverkey = server_key
        sock.curve_publickey, sock.curve_secretkey = keys.public_key, keys.secret_key
    sock.connect(endpoint)
    return sock


def _zap_threads():
    return [t for t in threading.enumerate() if "Authenticat" in type(t).__name__]


def test_two_server_sockets_in_one_process_accept_their_own_keys_only():
    server_a, server_b, alice, bob = (KeyPair.generate() for _ in range(4))
    pull_a = Pull("@tcp://127.0.0.1:*", curve=Curve.server(server_a, frozenset({alice.public_key})))
    pull_b = Pull("@tcp://127.0.0.1:*", curve=Curve.server(server_b, frozenset({bob.public_key})))
    clients = []
    try:
        for pull, server, keys, label in ((pull_a, server_a, alice, b"alice->a"), (pull_a, server_a, bob, b"bob->a"),
                                          (pull_b, server_b, bob, b"bob->b"), (pull_b, server_b, alice, b"alice->b")):
            client = _client(pull.last_endpoint, server.public_key, keys)
            client.send(label)
            clients.append(client)
        assert pull_a.recv(timeout=10) == b"alice->a"
        assert pull_b.recv(timeout=10) == b"bob->b"
        for pull in (pull_a, pull_b):
            with pytest.raises(TimeoutError):
                pull.recv(timeout=0.5)
            pull.handshakes.poll()
            assert pull.handshakes.rejected >= 1
    finally:
        for client in clients:
            client.close(0)
        pull_a.close()
        pull_b.close()
    assert _zap_threads() == []  # the last server socket stopped the handler


def test_the_applications_own_curve_server_is_not_judged_by_our_handler():
    """A CURVE server of the application's, on Context.instance() and without a ZAP handler
    of its own, accepts any key (libzmq's rule); our sockets must not change that."""
    ours = Pull("@tcp://127.0.0.1:*", curve=Curve.server(KeyPair.generate(), frozenset({KeyPair.generate().public_key})))
    theirs_keys, anyone = KeyPair.generate(), KeyPair.generate()
    theirs = zmq.Context.instance().socket(zmq.PULL)
    theirs.linger = 0
    theirs.curve_server = True
    theirs.curve_publickey, theirs.curve_secretkey = theirs_keys.public_key, theirs_keys.secret_key
    port = theirs.bind_to_random_port("tcp://127.0.0.1")
    client = _client(f"tcp://127.0.0.1:{port}", theirs_keys.public_key, anyone)
    try:
        client.send(b"hello")
        assert theirs.poll(10_000) and theirs.recv() == b"hello"
    finally:
        client.close(0)
        theirs.close(0)
        ours.close()


def test_a_new_server_socket_right_after_the_last_one_closed_gets_a_handler():
    """Closing the last CURVE server socket of a context stops its ZAP handler; libzmq
    frees the handler's inproc name later, on its reaper thread, so the next server
    socket's handler found it taken (EADDRINUSE) now and then. Many quick cycles on one
    context make that window likely; each socket must still authenticate."""
    context = zmq.Context()
    server_keys, client_keys = KeyPair.generate(), KeyPair.generate()
    try:
        for cycle in range(200):
            pull = Pull("@tcp://127.0.0.1:*", context=context, linger=0,
                        curve=Curve.server(server_keys, frozenset({client_keys.public_key})))
            pull.close()
        pull = Pull("@tcp://127.0.0.1:*", context=context, linger=0,
                    curve=Curve.server(server_keys, frozenset({client_keys.public_key})))
        client = _client(pull.last_endpoint, server_keys.public_key, client_keys)
        try:
            client.send(b"after 200 cycles")
            assert pull.recv(timeout=10_000) == b"after 200 cycles"
        finally:
            client.close(0)
            pull.close()
    finally:
        context.term()


def test_a_server_socket_in_a_private_context_lets_the_context_terminate():
    """The sink's write tasks each own a context and terminate it when done."""
    context = zmq.Context()
    push = Push("@tcp://127.0.0.1:*", context=context, curve=Curve.server(KeyPair.generate(), ANY_KEY), linger=0)
    push.close()
    done = threading.Event()
    threading.Thread(target=lambda: (context.term(), done.set()), daemon=True).start()
    assert done.wait(10), "Context.term() hung: the ZAP handler still holds a socket"


def test_push_client_to_a_plain_pyzmq_curve_server_and_a_wrong_server_key():
    server, me = KeyPair.generate(), KeyPair.generate()
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.linger = 0
    pull.curve_server = True
    pull.curve_publickey, pull.curve_secretkey = server.public_key, server.secret_key
    endpoint = f"tcp://127.0.0.1:{pull.bind_to_random_port('tcp://127.0.0.1')}"
    try:
        with Push(endpoint, curve=Curve.client(me, server.public_key), immediate=True) as push:
            push.send(b"sealed", timeout=10)
            assert pull.poll(10_000) and pull.recv() == b"sealed"
        wrong = KeyPair.generate().public_key
        with Push(endpoint, curve=Curve.client(me, wrong), immediate=True, linger=0) as push:
            with pytest.raises(TimeoutError):
                push.send(b"never", timeout=1)
            push.handshakes.poll()
            assert push.handshakes.rejected >= 1 and "curveServerKey" in push.handshakes.last_rejection
        assert not pull.poll(200)
    finally:
        pull.close(0)


def test_curve_option_must_be_a_curve_object():
    with pytest.raises(TypeError, match="curve"):
        Pull("@tcp://127.0.0.1:*", curve="secret")


def _flood(port: int, count: int) -> None:
    """``count`` TCP connections that each send a ZMTP 3.0 greeting asking for NULL, then leave."""
    import socket

    greeting = b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00NULL" + b"\x00" * 48
    for _ in range(count):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(greeting)


def test_a_flood_of_failed_handshakes_never_stalls_the_context_even_unread():
    """libzmq's I/O thread blocks on a full monitor queue; with pyzmq's monitor socket 3,000
    failed handshakes that nobody read stalled every connection of the context (this flood
    itself hung). Nothing reads the monitor here until the end."""
    server, me = KeyPair.generate(), KeyPair.generate()
    with Pull("@tcp://127.0.0.1:*", curve=Curve.server(server, ANY_KEY)) as pull:
        _flood(int(pull.last_endpoint.rsplit(":", 1)[1]), 3000)
        client = _client(pull.last_endpoint, server.public_key, me)
        try:
            client.send(b"still served")
            assert pull.recv(timeout=10) == b"still served"
        finally:
            client.close(0)
        pull.handshakes.poll()
        assert pull.handshakes.rejected >= 3000
