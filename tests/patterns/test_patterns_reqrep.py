"""Request-reply patterns (the Guide's chapter 3) as the connector uses them.

libzmq's wire only (``LibzmqWire``): every production path of request-reply runs on it.
The requester's ``Client`` sends on ``Dealer`` sockets; ``spark_zmq.worker`` serves on
``Req`` (behind a broker) or ``Router`` (a REP server); the ``Broker`` has two ``Router``
ends; the relay and the spool fetch service are ``Router`` servers with ``Dealer``
clients. The engine (``EngineWire``) has no REQ, REP, DEALER or ROUTER.
"""

from __future__ import annotations

import pytest

from spark_zmq.patterns import Dealer, Rep, Req, Router

pytestmark = pytest.mark.timeout(30)


def test_req_rep_lock_step_round_trip():
    with Rep("@tcp://127.0.0.1:*") as rep, Req(rep.last_endpoint) as req:
        for i in range(3):
            req.send(b"ping-%d" % i, timeout=5)
            assert rep.recv(timeout=5) == b"ping-%d" % i
            rep.send(b"pong-%d" % i, timeout=5)
            assert req.recv(timeout=5) == b"pong-%d" % i


def test_router_prefixes_identity_and_routes_replies_to_the_asking_dealer():
    with (
        Router("@inproc://reqrep-route") as router,
        Dealer("inproc://reqrep-route") as a,
        Dealer("inproc://reqrep-route") as b,
    ):
        a.send([b"", b"from-a"], timeout=5)
        b.send([b"", b"from-b"], timeout=5)
        requests = [router.recv_multipart(timeout=5) for _ in range(2)]
        assert sorted(r[-1] for r in requests) == [b"from-a", b"from-b"]
        for identity, _, body in requests:
            router.send([identity, b"", b"re:" + body], timeout=5)
        assert a.recv_multipart(timeout=5) == [b"", b"re:from-a"]
        assert b.recv_multipart(timeout=5) == [b"", b"re:from-b"]


def test_router_mandatory_refuses_a_reply_to_an_unknown_peer():
    with Router("@inproc://reqrep-mandatory", mandatory=True) as router:
        with pytest.raises(ConnectionError, match="no connected peer has identity b'nobody'"):
            router.send([b"nobody", b"", b"x"], timeout=0)
