"""The batch fast paths the connector's receivers and write tasks use."""

from __future__ import annotations

import pytest
import zmq

from spark_zmq.patterns import Gather, Pull, Push

pytestmark = pytest.mark.timeout(30)


def test_send_many_then_recv_values_round_trip_in_order():
    with Pull("@inproc://fast-order", hwm=10_000) as pull, Push("inproc://fast-order", hwm=10_000) as push:
        messages = [b"m-%d" % i for i in range(5000)]
        assert push.send_many(messages, timeout=5) == 5000
        got = []
        while len(got) < 5000:
            values, topics = pull.recv_values(1000, timeout=5)
            assert topics is None
            got += values
        assert got == messages


def test_recv_values_splits_topic_frames_and_keeps_single_frame_topics_null():
    with Pull("@inproc://fast-topics") as pull, Push("inproc://fast-topics") as push:
        push.send(b"plain", timeout=5)
        push.send([b"t1", b"payload"], timeout=5)
        push.send([b"t2", b"a", b"b"], timeout=5)
        values, topics = [], []
        while len(values) < 3:
            v, t = pull.recv_values(10, timeout=5)
            values += v
            topics += t if t is not None else [None] * len(v)
        assert values == [b"plain", b"payload", b"ab"]
        assert topics == [None, b"t1", b"t2"]


def test_recv_values_on_gather_discards_multipart_whole():
    with Gather("@inproc://fast-gather") as gather:
        raw = zmq.Context.instance().socket(zmq.PUSH)
        raw.connect("inproc://fast-gather")
        raw.send_multipart([b"x", b"y"])
        raw.send(b"ok")
        values = []
        while not values:
            values, topics = gather.recv_values(10, timeout=5)
        assert values == [b"ok"] and topics is None and gather.discarded_multipart == 1
        raw.close(0)


def test_send_many_rejects_non_bytes_before_sending_anything():
    with Pull("@inproc://fast-bad") as pull, Push("inproc://fast-bad") as push:
        with pytest.raises(TypeError, match="not str"):
            push.send_many([b"fine", "text"], timeout=1)
        with pytest.raises(TimeoutError):
            pull.recv(timeout=0.2)


def test_send_many_times_out_with_no_peer_and_says_how_many_went():
    with Push("tcp://127.0.0.1:1", immediate=True) as push:
        with pytest.raises(TimeoutError) as info:
            push.send_many([b"a", b"b"], timeout=0.2)
        assert info.value.sent == 0
