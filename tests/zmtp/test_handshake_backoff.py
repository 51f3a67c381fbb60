"""A connect endpoint whose peer answers and then fails every handshake (here: a TCP server
that is not a ZeroMQ peer) is retried with a doubling wait, not every reconnect interval,
and the failure is named for what it is, with no mention of CURVE on a socket without it."""

from __future__ import annotations

import pytest
import zmq
from zmqtest import NotZeroMQ, wait_until

from spark_zmq.patterns.reroutingpush import ReroutingPush
from spark_zmq.patterns.wires.zmtp.sessions import HANDSHAKE_BACKOFF_MAX_S

pytestmark = pytest.mark.timeout(60)


def test_a_peer_that_fails_every_handshake_is_retried_less_and_less_often():
    server = NotZeroMQ()
    ivl_s = 0.015  # a short reconnect interval (the default is 0.1 s) so six attempts take about 1 s
    push = ReroutingPush([f"tcp://127.0.0.1:{server.port}"], immediate=True, linger=0, reconnect_ivl=int(ivl_s * 1000))
    try:
        wait_until(lambda: len(server.accepted) >= 6, 30, "six connection attempts")
        gaps = [b - a for a, b in zip(server.accepted, server.accepted[1:])]
        # after failures in a row the waits double: the fifth gap is 16 intervals, not one
        assert gaps[4] >= 0.8 * 16 * ivl_s, gaps
        assert all(gap <= HANDSHAKE_BACKOFF_MAX_S + 2.0 for gap in gaps), gaps
    finally:
        push.close(linger=0)
        server.close()


def test_the_failure_of_a_handshake_without_curve_names_no_curve():
    server = NotZeroMQ()
    push = ReroutingPush(
        [f"tcp://127.0.0.1:{server.port}"], immediate=True, linger=0, monitor=zmq.EVENT_HANDSHAKE_SUCCEEDED
    )  # as the sink watches its peers
    try:
        wait_until(
            lambda: (push.handshakes.poll(0.05), push.handshakes.rejected)[1] >= 1, 30, "a failed handshake counted"
        )
        text = push.handshakes.last_rejection
        assert "not a ZeroMQ peer" in text and "CURVE" not in text, text
        assert "CURVE" not in push.handshakes.failure_note()
    finally:
        push.close(linger=0)
        server.close()
