"""CURVE in the pattern layer (no Spark), against plain pyzmq peers: the ZAP domains of two
server sockets in one process stay apart, the application's own sockets are not judged by
our ZAP handler, and closing the last server socket stops the handler (so a context can
terminate)."""

from __future__ import annotations

import threading
import time

import pytest
import zmq
from zmqtest import SocketEvents

from spark_zmq.patterns import Pull, Push
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import ANY_KEY, CurveError, KeyPair, load_public_key

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
        for pull, server, keys, label in (
            (pull_a, server_a, alice, b"alice->a"),
            (pull_a, server_a, bob, b"bob->a"),
            (pull_b, server_b, bob, b"bob->b"),
            (pull_b, server_b, alice, b"alice->b"),
        ):
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
    ours = Pull(
        "@tcp://127.0.0.1:*", curve=Curve.server(KeyPair.generate(), frozenset({KeyPair.generate().public_key}))
    )
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
        for _cycle in range(200):
            pull = Pull(
                "@tcp://127.0.0.1:*",
                context=context,
                linger=0,
                curve=Curve.server(server_keys, frozenset({client_keys.public_key})),
            )
            pull.close()
        pull = Pull(
            "@tcp://127.0.0.1:*",
            context=context,
            linger=0,
            curve=Curve.server(server_keys, frozenset({client_keys.public_key})),
        )
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


# -- our ZMTP engine's CURVE (Scatter/Gather) against libzmq: strict short nonces --------------


def _after_handshake(monitor: SocketEvents) -> list:
    """The connection events from the first successful handshake on (a connection our
    side closed before it, as when a Scatter first announces SCATTER to a PULL and tries
    PUSH next, does not count)."""
    seen = monitor.quiet(0.3)
    assert zmq.EVENT_HANDSHAKE_SUCCEEDED in seen, seen
    return seen[seen.index(zmq.EVENT_HANDSHAKE_SUCCEEDED) :]


def _libzmq_curve_socket(context, kind, keys, *, server_key=None):
    sock = context.socket(kind)
    sock.linger = 0
    sock.curve_publickey, sock.curve_secretkey = keys.public_key, keys.secret_key
    if server_key is None:
        sock.curve_server = True
    else:
        sock.curve_serverkey = server_key
    # libzmq PINGs every 10 ms: commands interleaved with the data, one nonce sequence
    sock.heartbeat_ivl = 10
    sock.heartbeat_timeout = 10_000
    return sock


CONNECTION_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED


def test_libzmq_push_with_heartbeats_to_our_curve_gather_keeps_one_connection():
    """3,000 messages from a libzmq CURVE client, its PINGs between them and our PONGs back:
    every MESSAGE is the previous nonce plus one, so the one connection stays up (a
    sequence error would close it: libzmq would reconnect, and its monitor would show it)."""
    from spark_zmq.patterns import Gather

    context = zmq.Context()
    server, client = KeyPair.generate(), KeyPair.generate()
    gather = Gather("@tcp://127.0.0.1:*", curve=Curve.server(server, frozenset({client.public_key})), linger=0)
    push = _libzmq_curve_socket(context, zmq.PUSH, client, server_key=server.public_key)
    push.sndtimeo = 10_000
    monitor = SocketEvents(push, CONNECTION_EVENTS)
    try:
        push.connect(gather.last_endpoint)
        sent, received = [], []
        for round_ in range(30):
            batch = [b"m%05d" % (round_ * 100 + i) * (1 + i % 7) for i in range(100)]
            for message in batch:
                push.send(message)
            received += [gather.recv(timeout=10) for _ in batch]
            sent += batch
            time.sleep(0.01)
        assert received == sent
        assert _after_handshake(monitor) == [zmq.EVENT_HANDSHAKE_SUCCEEDED]
    finally:
        monitor.close()
        push.close(0)
        gather.close(linger=0)
        context.destroy(linger=0)


def test_our_curve_scatter_to_a_libzmq_pull_with_heartbeats_keeps_one_connection():
    """Our CURVE client decodes the PINGs of a libzmq server in strict sequence (READY 1,
    then 2, 3, ...) while it sends 3,000 messages: still the one connection at the end."""
    from spark_zmq.patterns import Scatter

    context = zmq.Context()  # no ZAP handler: libzmq's CURVE server accepts any client key
    server, client = KeyPair.generate(), KeyPair.generate()
    pull = _libzmq_curve_socket(context, zmq.PULL, server)
    pull.rcvtimeo = 10_000
    monitor = SocketEvents(pull, CONNECTION_EVENTS)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    scatter = Scatter(f">tcp://127.0.0.1:{port}", curve=Curve.client(client, server.public_key), linger=0)
    try:
        sent, received = [], []
        for round_ in range(30):
            batch = [b"s%05d" % (round_ * 100 + i) * (1 + i % 7) for i in range(100)]
            for message in batch:
                scatter.send(message, timeout=10)
            received += [pull.recv() for _ in batch]
            sent += batch
            time.sleep(0.01)
        assert received == sent
        assert _after_handshake(monitor) == [zmq.EVENT_HANDSHAKE_SUCCEEDED]
    finally:
        monitor.close()
        scatter.close(linger=0)
        pull.close(0)
        context.destroy(linger=0)


# -- Curve(authorized=...): "*" is the only string, every key of a set is valid Z85 -------------


def _texts_never_show(error: BaseException, *secrets: bytes) -> None:
    for secret in secrets:
        assert secret.decode() not in str(error)


@pytest.mark.parametrize("text", ["abc", "", "any", "**", " * ", "*\n", "/etc/spark-zmq/authorized", "ANY_KEY"])
def test_authorized_refuses_any_string_but_any_key(text):
    keys = KeyPair.generate()
    with pytest.raises(CurveError) as err:
        Curve.server(keys, authorized=text)
    message = str(err.value)
    assert "authorized" in message and "'*'" in message and "Z85 public keys" in message
    assert err.value.option == "curveAuthorizedKeys" and isinstance(err.value, ValueError)
    _texts_never_show(err.value, keys.secret_key)


def test_authorized_string_is_never_shown_even_a_secret_key():
    keys = KeyPair.generate()
    with pytest.raises(CurveError) as err:
        Curve.server(keys, authorized=keys.secret_key.decode())  # a secret key where "*" belongs
    assert "40 characters, not shown" in str(err.value)
    _texts_never_show(err.value, keys.secret_key)


def test_authorized_any_key_and_sets_of_valid_keys():
    keys, alice, bob = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    assert Curve.server(keys, ANY_KEY).authorized == ANY_KEY == "*"
    assert Curve.server(keys, "*").describe().endswith("accepting any client key")
    wanted = frozenset({alice.public_key, bob.public_key})
    assert Curve.server(keys, wanted).authorized == wanted
    # str keys, sets, lists and tuples: kept as one frozenset of Z85 bytes
    for given in (
        {alice.public_key.decode(), bob.public_key},
        [alice.public_key, bob.public_key.decode()],
        (alice.public_key, bob.public_key, alice.public_key),
    ):
        curve = Curve.server(keys, given)
        assert curve.authorized == wanted and type(curve.authorized) is frozenset
    assert Curve.server(keys, frozenset()).authorized == frozenset()  # refuses every client


@pytest.mark.parametrize(
    "bad, shown, reason",
    [
        (b"#" * 40, "'#####'... (40 characters)", "not valid Z85 text"),  # each group above 2**32 - 1
        (b"~" * 40, "'~~~~~'... (40 characters)", "not valid Z85 text"),  # not in the Z85 alphabet
        ("abc", "'abc'", "expected 40 Z85 characters, got 3"),
        (b"rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf0" + b"0" * 5, "'rq:rM'... (45 characters)", "got 45"),
        ("é" * 40, "'?????'... (40 characters)", "it is not ASCII"),  # not '?' * 40, valid Z85
    ],
    ids=["overflow", "alphabet", "short", "long", "non-ascii"],
)
def test_authorized_keys_must_be_40_characters_of_z85(bad, shown, reason):
    keys, good = KeyPair.generate(), KeyPair.generate()
    with pytest.raises(CurveError) as err:
        Curve.server(keys, frozenset({good.public_key, bad}))
    message = str(err.value)
    assert f"Curve: the authorized key {shown} is not a CURVE key" in message and reason in message
    assert err.value.option == "curveAuthorizedKeys"


def test_an_invalid_authorized_entry_never_shows_a_whole_secret_key():
    keys, client = KeyPair.generate(), KeyPair.generate()
    for bad in (client.secret_key + b"\n", client.secret_key[:-1], b" " + client.secret_key):
        with pytest.raises(CurveError, match="the authorized key") as err:
            Curve.server(keys, {bad})
        _texts_never_show(err.value, client.secret_key, keys.secret_key)


@pytest.mark.parametrize(
    "value",
    [KeyPair.generate().public_key, b"*", bytearray(b"*"), 7, {"a": 1}.keys(), None],
    ids=["one-key-bytes", "bytes-star", "bytearray", "int", "dict-keys", "none"],
)
def test_authorized_of_another_type_is_refused(value):
    keys = KeyPair.generate()
    with pytest.raises(CurveError, match="authorized"):
        Curve.server(keys, value)
    with pytest.raises(CurveError, match="authorized holds a value of type int"):
        Curve.server(keys, {1})


def test_a_z85_overflow_is_a_curve_error_not_a_struct_error():
    with pytest.raises(CurveError, match="not valid Z85"):
        load_public_key("#" * 40)


def test_str_authorized_keys_authenticate_through_zap():
    """A set of str keys used to reach the ZAP handler as str, never equal to the bytes key
    libzmq asks about: every client was refused."""
    server, client = KeyPair.generate(), KeyPair.generate()
    with Pull("@tcp://127.0.0.1:*", curve=Curve.server(server, {client.public_key.decode()})) as pull:
        push = _client(pull.last_endpoint, server.public_key, client)
        try:
            push.send(b"str key")
            assert pull.recv(timeout=10) == b"str key"
        finally:
            push.close(0)
