"""A MESSAGE deleted from a CURVE stream in transit is detected, counted and logged.

Both this engine and libzmq number CURVE's short nonces consecutively, so a gap can only
mean loss or tampering: the receiving side (our ZMTP engine, as CURVE server and as CURVE
client) closes the connection, counts it in ``sequence_gaps`` and logs it. The peer that
sends is libzmq (pyzmq) in one test and our own engine in the other; the middlebox is
``faultproxy.FaultProxy``, which deletes exactly one MESSAGE frame.
"""

from __future__ import annotations

import logging

import pytest
import zmq
from faultproxy import UP, FaultProxy, is_curve_message
from zmqtest import wait_until

from spark_zmq.patterns import Gather, Heartbeat, Scatter
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import ANY_KEY, KeyPair

pytestmark = pytest.mark.timeout(60)

_NO_PINGS = Heartbeat(interval=3600.0, timeout=3600.0, ttl=0.0)  # only data frames in the stream


def _receive_all(gather: Gather, expected: set, deadline_s: float = 20.0) -> set:
    got: set = set()

    def more() -> bool:
        try:
            got.update(frames[0] for frames in gather.recv_batch(1000, timeout=0.2))
        except TimeoutError:
            pass
        return got >= expected

    wait_until(more, deadline_s, "the messages sent after the gap")
    return got


def test_a_message_deleted_from_a_libzmq_curve_stream_closes_the_connection(caplog):
    server = KeyPair.generate()
    client = KeyPair.generate()
    with Gather("@tcp://127.0.0.1:*", curve=Curve.server(server, ANY_KEY), heartbeat=_NO_PINGS) as gather:
        port = int(gather.last_endpoint.rsplit(":", 1)[1])
        with FaultProxy("127.0.0.1", port) as proxy:
            ctx = zmq.Context()
            push = ctx.socket(zmq.PUSH)
            push.curve_secretkey, push.curve_publickey = client.secret_key, client.public_key
            push.curve_serverkey = server.public_key
            push.setsockopt(zmq.LINGER, 0)
            push.setsockopt(zmq.RECONNECT_IVL, 50)
            try:
                push.connect(proxy.endpoint)
                push.send(b"first")
                assert gather.recv(timeout=10) == b"first"
                proxy.active_connections[0].drop_frame(UP, 2, is_curve_message)
                with caplog.at_level(logging.WARNING):
                    for i in range(5):
                        push.send(b"m%d" % i)
                    wait_until(lambda: gather._engine.sequence_gaps == 1, 10, "the gap to be detected")
                assert any("missing" in r.getMessage() and "tampered" in r.getMessage() for r in caplog.records)
                # libzmq reconnects (through the proxy, which now passes everything) and goes on
                later = {b"n%d" % i for i in range(20)}
                for message in sorted(later):
                    push.send(message)
                got = _receive_all(gather, later)
                assert b"m2" not in got  # the deleted one: never delivered as if nothing happened
            finally:
                push.close(0)
                ctx.term()


def test_a_message_deleted_from_our_own_curve_stream_closes_the_connection():
    server = KeyPair.generate()
    client = KeyPair.generate()
    with Gather("@tcp://127.0.0.1:*", curve=Curve.server(server, ANY_KEY), heartbeat=_NO_PINGS) as gather:
        port = int(gather.last_endpoint.rsplit(":", 1)[1])
        with FaultProxy("127.0.0.1", port) as proxy:
            with Scatter(
                f">{proxy.endpoint}",
                curve=Curve.client(client, server.public_key),
                heartbeat=_NO_PINGS,
                reconnect_ivl=50,
            ) as scatter:
                scatter.send(b"first", timeout=10)
                assert gather.recv(timeout=10) == b"first"
                proxy.active_connections[0].drop_frame(UP, 1, is_curve_message)
                for i in range(5):
                    scatter.send(b"m%d" % i, timeout=10)
                wait_until(lambda: gather._engine.sequence_gaps == 1, 10, "the gap to be detected")
                later = {b"n%d" % i for i in range(20)}
                for message in sorted(later):
                    scatter.send(message, timeout=10)
                _receive_all(gather, later)
