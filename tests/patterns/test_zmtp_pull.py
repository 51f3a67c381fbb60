"""ZmtpPull: PULL on the package's ZMTP engine, against peers nobody here wrote: what is
specific to it or to the connector's use of it.

The 30/PIPELINE lines (fair queuing, per-peer queues, messages unmodified, a libzmq PUSH
peer binding or connecting...) run on ``ZmtpPull`` in ``test_rfc30_pipeline.py``
(``engine`` ids). Here: ``recv_values``' topics and ``recv_block`` as from libzmq's
``Pull``, CURVE with the keys of ``zmq.auth``, which socket the source picks, and the
bound on what a hostile peer can make it hold (a multipart message counts as a whole
against ``max_message_bytes``, empty frames included).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import zmq
import zmq.auth
from zmqtest import SocketEvents

from spark_zmq.patterns import Pull, ZmtpPull
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.patterns.wires.zmtp.stream import PART_OVERHEAD

pytestmark = pytest.mark.timeout(60)


def _receive(sock, count: int, timeout: float = 10.0) -> tuple[list[bytes], list]:
    """``count`` messages' values and topics (``None`` for single-part ones)."""
    values: list[bytes] = []
    topics: list = []
    while len(values) < count:
        got, got_topics = sock.recv_values(count - len(values), timeout=timeout)
        values += got
        topics += got_topics if got_topics is not None else [None] * len(got)
    return values, topics


@pytest.mark.parametrize("cls", [Pull, ZmtpPull])
def test_single_and_multipart_messages_come_out_as_from_libzmq_pull(ctx, cls):
    """The same sends give the same ``recv_values`` and ``recv_batch`` on both sockets."""
    sock = cls("@tcp://127.0.0.1:*")
    try:
        push = ctx.socket(zmq.PUSH)
        push.connect(sock.last_endpoint)
        push.send(b"one")
        push.send_multipart([b"topic", b"pay", b"load"])
        push.send_multipart([b"t2", b""])
        push.send(b"")
        values, topics = _receive(sock, 4)
        assert values == [b"one", b"payload", b"", b""]
        assert topics == [None, b"topic", b"t2", None]
        push.send_multipart([b"a", b"b"])
        push.send(b"c")
        batch: list = []
        while len(batch) < 2:
            batch += sock.recv_batch(2 - len(batch), timeout=10)
        assert batch == [[b"a", b"b"], [b"c"]]
    finally:
        sock.close(linger=0)


def test_a_multipart_message_is_bounded_as_a_whole(ctx):
    """libzmq bounds each frame; a peer could send frames under the limit forever. Here the
    message's frames count together (each also ``PART_OVERHEAD``): past the limit the
    connection closes, what came before is delivered, and the peer, reconnected, is heard."""
    limit = 4096
    sock = ZmtpPull("@tcp://127.0.0.1:*", max_message_bytes=limit)
    try:
        push = ctx.socket(zmq.PUSH)
        events = SocketEvents(push, zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
        push.connect(sock.last_endpoint)
        fits = limit // PART_OVERHEAD - 1
        push.send_multipart([b"ok"] + [b""] * (fits - 2) + [b"end"])  # just under: delivered
        push.send(b"before")
        assert _receive(sock, 2) == ([b"end", b"before"], [b"ok", None])
        push.send_multipart([b""] * (10 * fits))  # empty frames only: still bounded
        events.wait_for(zmq.EVENT_DISCONNECTED)
        events.wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED, count=2)
        push.send_multipart([b"big", b"x" * (limit // 2), b"y" * (limit // 2)])  # each frame fits, not the sum
        events.wait_for(zmq.EVENT_DISCONNECTED, count=2)
        events.wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED, count=3)
        push.send(b"after")
        assert _receive(sock, 1) == ([b"after"], [None])
        events.close()
        push.close(0)
    finally:
        sock.close(linger=0)


def test_curve_server_with_zmq_auth_certificates(ctx, tmp_path):
    """A pyzmq CURVE PUSH with keys made by ``zmq.auth``: an authorized one is heard, an
    unknown one is refused and counted."""
    keys = str(tmp_path)
    zmq.auth.create_certificates(keys, "server")
    zmq.auth.create_certificates(keys, "client")
    zmq.auth.create_certificates(keys, "stranger")
    server_public, server_secret = zmq.auth.load_certificate(os.path.join(keys, "server.key_secret"))
    client_public, client_secret = zmq.auth.load_certificate(os.path.join(keys, "client.key_secret"))
    curve = Curve.server(KeyPair(server_public, server_secret), frozenset({client_public}))
    sock = ZmtpPull("@tcp://127.0.0.1:*", curve=curve)
    try:

        def client(name: str) -> zmq.Socket:
            push = ctx.socket(zmq.PUSH)
            push.curve_publickey, push.curve_secretkey = zmq.auth.load_certificate(
                os.path.join(keys, f"{name}.key_secret")
            )
            push.curve_serverkey = server_public
            push.connect(sock.last_endpoint)
            return push

        stranger = client("stranger")
        stranger.send(b"from a stranger")
        trusted = client("client")
        trusted.send_multipart([b"topic", b"secret"])
        trusted.send(b"plain")
        assert _receive(sock, 2) == ([b"secret", b"plain"], [b"topic", None])
        while not sock.handshakes.rejected:
            sock.handshakes.poll(0.5)
        with pytest.raises(TimeoutError):
            sock.recv_values(1, timeout=0.3)
        stranger.close(0)
        trusted.close(0)
    finally:
        sock.close(linger=0)


def test_the_connector_receives_pull_on_the_engine_but_curve_and_inproc_on_libzmq():
    """The source's choice (``open_channel_socket``): the engine for plain tcp/ipc, libzmq's
    ``Pull`` where it is faster (CURVE: decryption in C) or the only one that can (inproc)."""
    from spark_zmq.ingest.receiver import open_channel_socket
    from spark_zmq.patterns.endpoints import parse_endpoints

    keys = KeyPair.generate()
    cases = [
        ("@tcp://127.0.0.1:*", None, ZmtpPull),
        ("@tcp://127.0.0.1:*", Curve.server(keys, "*"), Pull),
        ("@inproc://zmtp-pull-choice", None, Pull),
    ]
    for endpoint, curve, expected in cases:
        sock = open_channel_socket(
            "pull", parse_endpoints(endpoint, default_bind=True)[0], hwm=10, topics=[], curve=curve
        )
        try:
            assert type(sock) is expected, (endpoint, curve)
        finally:
            sock.close(linger=0)


@pytest.mark.parametrize("cls", [Pull, ZmtpPull])
def test_recv_block_takes_every_message_in_order_through_small_takes_and_a_small_hwm(ctx, cls):
    """``recv_block`` (the receivers' fast path; on the engine, runs of same-size frames are
    split in bulk): 20,000 messages from libzmq's PUSH, mostly runs of one size with other
    sizes, empty ones and a multipart one between them, taken a few at a time under a
    ``max_bytes`` that cuts runs, with a high-water mark far below the backlog so the peer
    is paused and resumed many times: every message once, in order, topics where sent."""
    sock = cls("@tcp://127.0.0.1:*", hwm=50)
    push = ctx.socket(zmq.PUSH)
    try:
        push.connect(sock.last_endpoint)
        sent: list[bytes] = []
        for i in range(20_000):
            size = 100 if (i // 1000) % 2 == 0 else (0 if i % 97 == 0 else 300 + i % 3)
            sent.append((b"%08d" % i + b"." * size)[: max(size, 8)] if size else b"")
        sent[12_345] = b"payload"
        push.send(b"x")
        assert sock.recv_block(1, timeout=10).values() == [b"x"]

        def produce() -> None:  # the peer sends while this side takes (the queues hold far less)
            for i, message in enumerate(sent):
                if i == 12_345:
                    push.send_multipart([b"topic", message])
                else:
                    push.send(message)

        producer = threading.Thread(target=produce, daemon=True)
        producer.start()
        values: list[bytes] = []
        topics: list = []
        sizes = iter([1, 7, 500, 3000, 20_000] * 10_000)
        while len(values) < len(sent):
            block = sock.recv_block(next(sizes), timeout=10, max_bytes=40_000)
            assert block.count >= 1 and len(block.offsets) == block.count + 1
            values += block.values()
            topics += block.topics if block.topics is not None else [None] * block.count
        producer.join(10)
        assert values == sent
        assert [i for i, t in enumerate(topics) if t is not None] == [12_345] and topics[12_345] == b"topic"
    finally:
        push.close(linger=0)
        sock.close(linger=0)


@pytest.mark.parametrize("cls", [Pull, ZmtpPull])
def test_interrupt_ends_a_receive_waiting_without_a_timeout_and_no_later_one(ctx, cls):
    """``interrupt()`` (how a receiver's ``stop`` reaches a receive that waits long, since an
    idle receiver no longer looks around every 100 ms): the receive waiting with no timeout
    gives up with ``TimeoutError`` at once; the next receive still waits for its message."""
    sock = cls("@tcp://127.0.0.1:*")
    push = ctx.socket(zmq.PUSH)
    outcome: list = []

    def wait_forever() -> None:
        try:
            outcome.append(sock.recv_block(10, timeout=None))
        except BaseException as exc:  # what the waiting receive ended with
            outcome.append(exc)

    try:
        waiter = threading.Thread(target=wait_forever, daemon=True)
        waiter.start()
        # the receive is waiting once the thread is in it; interrupt until it has ended
        # (an interrupt before the receive began would not end it: later calls are spared)
        deadline = time.monotonic() + 10
        while waiter.is_alive() and time.monotonic() < deadline:
            sock.interrupt()
            waiter.join(0.05)
        assert not waiter.is_alive(), "interrupt() did not end the waiting receive"
        assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError), outcome
        push.connect(sock.last_endpoint)
        push.send(b"after")
        assert sock.recv_block(10, timeout=10).values() == [b"after"]
    finally:
        push.close(linger=0)
        sock.close(linger=0)
