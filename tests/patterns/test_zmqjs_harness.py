"""The zeromq.js peer harness (tests/helpers/zmqjs_peer.py + tests/zmqjs/peer.js) against plain pyzmq.

These prove the harness before other tests lean on it: libzmq's own PUSH/PULL talk to
pyzmq both ways, the draft SCATTER/GATHER sockets exist and talk to each other, CURVE works
in both roles, and a libzmq SCATTER refuses a PULL peer (the mismatch the connector's
Scatter/Gather engine exists to avoid).
"""

from __future__ import annotations

import subprocess
import time

import pytest
import zmq
from zmqjs_peer import PEER_JS, ZMQJS_DIR, NodePeer, PeerError, payload, skip_unless_node
from zmqtest import SocketEvents

pytestmark = pytest.mark.timeout(20)

ANY_PORT = "tcp://127.0.0.1:*"


@pytest.fixture(autouse=True)
def _node_peers():
    skip_unless_node()


def bound(ctx, socket_type, **options):
    sock = ctx.socket(socket_type)
    for option, value in options.items():
        setattr(sock, option, value)
    sock.bind(ANY_PORT)
    return sock, sock.last_endpoint.decode()


def recv_all(sock, n, timeout_ms=10_000):
    got = []
    for _ in range(n):
        assert sock.poll(timeout_ms), f"only {len(got)} of {n} messages arrived"
        got.append(sock.recv())
    return got


@pytest.mark.parametrize("node_binds", [True, False], ids=["node-binds", "node-connects"])
def test_node_push_to_pyzmq_pull(ctx, node_binds):
    count, size = 2000, 64
    if node_binds:
        peer = NodePeer.start("push", bind=[ANY_PORT], count=count, size=size, prefix="p")
        pull = ctx.socket(zmq.PULL)
        pull.connect(peer.endpoints[0])
    else:
        pull, endpoint = bound(ctx, zmq.PULL)
        peer = NodePeer.start("push", connect=[endpoint], count=count, size=size, prefix="p")
        assert peer.endpoints == [endpoint]
    with peer:
        got = recv_all(pull, count)
        assert got == [payload(i, size, "p") for i in range(count)]  # each once, in order
        assert all(len(message) == size for message in got)
        assert peer.wait_sent(10) == {"event": "sent", "count": count}
        assert peer.wait_exit(10) == 0
        assert pull.poll(100) == 0  # nothing extra


def test_pyzmq_push_to_node_pull_volume_multipart_and_stop(ctx):
    """100,000 messages of 100 bytes, then a multipart one, then ``stop``."""
    count = 100_000
    with NodePeer.start("pull", bind=[ANY_PORT], rcvhwm=0) as peer:
        push = ctx.socket(zmq.PUSH)
        push.sndhwm = 0
        push.connect(peer.endpoints[0])
        started = time.monotonic()
        for i in range(count):
            push.send(payload(i, 100))
        push.send_multipart([b"head", b"", b"\x00\xff"])
        got = peer.messages(count + 1, timeout=15)
        elapsed = time.monotonic() - started
        assert got[:count] == [payload(i, 100) for i in range(count)]
        assert got[count] == [b"head", b"", b"\x00\xff"]
        assert elapsed < 10, f"{count} messages took {elapsed:.1f}s"
        assert peer.stop() == {"event": "stopped", "count": count + 1}


def test_pyzmq_push_to_connecting_node_pull_with_count(ctx):
    push, endpoint = bound(ctx, zmq.PUSH)
    with NodePeer.start("pull", connect=[endpoint], count=3) as peer:
        for i in range(3):
            push.send(payload(i))
        assert peer.messages(3) == [b"0-", b"1-", b"2-"]
        assert peer.wait_event("done") == {"event": "done", "count": 3}
        assert peer.wait_exit(10) == 0


@pytest.mark.parametrize("scatter_binds", [True, False], ids=["scatter-binds", "gather-binds"])
def test_node_scatter_to_node_gather(scatter_binds):
    """The draft sockets exist: libzmq SCATTER -> libzmq GATHER, both ways of binding."""
    count, size = 500, 32
    if scatter_binds:
        scatter = NodePeer.start("scatter", bind=[ANY_PORT], count=count, size=size, prefix="s")
        gather = NodePeer.start("gather", connect=scatter.endpoints, count=count)
    else:
        gather = NodePeer.start("gather", bind=[ANY_PORT], count=count)
        scatter = NodePeer.start("scatter", connect=gather.endpoints, count=count, size=size, prefix="s")
    with scatter, gather:
        assert gather.messages(count, timeout=10) == [payload(i, size, "s") for i in range(count)]
        assert gather.wait_event("done") == {"event": "done", "count": count}
        assert scatter.wait_sent(10)["count"] == count
        assert gather.wait_exit(10) == 0 and scatter.wait_exit(10) == 0


def test_two_node_scatters_to_one_gather_are_told_apart():
    with (
        NodePeer.start("gather", bind=[ANY_PORT], count=20) as gather,
        NodePeer.start("scatter", connect=gather.endpoints, count=10, prefix="a") as a,
        NodePeer.start("scatter", connect=gather.endpoints, count=10, prefix="b") as b,
    ):
        got = gather.messages(20)
        assert sorted(got) == sorted([payload(i, prefix=p) for p in "ab" for i in range(10)])
        a.wait_sent(10)
        b.wait_sent(10)


def test_node_curve_server_pull_from_pyzmq_curve_client(ctx):
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    with NodePeer.start("pull", bind=[ANY_PORT], curve_server=server_secret, curve_public=server_public) as peer:
        push = ctx.socket(zmq.PUSH)
        push.curve_publickey, push.curve_secretkey = client_public, client_secret
        push.curve_serverkey = server_public
        push.connect(peer.endpoints[0])
        for i in range(10):
            push.send(payload(i, 40))
        assert peer.messages(10) == [payload(i, 40) for i in range(10)]


def test_pyzmq_curve_server_pull_from_node_curve_client(ctx):
    server_public, server_secret = zmq.curve_keypair()
    client = zmq.curve_keypair()
    pull, endpoint = bound(ctx, zmq.PULL, curve_server=True, curve_secretkey=server_secret)
    with NodePeer.start(
        "push", connect=[endpoint], count=10, size=40, curve_client=client, curve_server_key=server_public
    ) as peer:
        assert recv_all(pull, 10) == [payload(i, 40) for i in range(10)]
        peer.wait_sent(10)


def test_node_push_send_timeout_exits_3():
    """No peer ever connects: the first send times out, the peer says so and exits 3."""
    with NodePeer.start("push", bind=[ANY_PORT], count=5, send_timeout=200) as peer:
        with pytest.raises(PeerError, match="the peer reported"):
            peer.wait_sent(10)
        assert peer.wait_exit(10) == 3
        assert peer.events[-1]["event"] == "error"


def test_bad_arguments_exit_2_with_usage():
    done = subprocess.run(
        ["node", str(PEER_JS), "--type", "push", "--bind", ANY_PORT],
        cwd=ZMQJS_DIR,
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "needs --count" in done.stderr and "usage: node peer.js" in done.stderr


def test_libzmq_scatter_does_not_deliver_to_pyzmq_pull(ctx):
    """libzmq checks the peer's socket type in the ZMTP handshake: SCATTER pairs only with
    GATHER, PULL only with PUSH.  The connection is accepted, then dropped, and nothing
    arrives. The scatter reports "sent" when its sends came before the drop (its queue is
    dropped with the connection), or a send timeout (exit 3) when the drop came first: a
    race on a busy machine, and nothing arrives either way."""
    pull, endpoint = bound(ctx, zmq.PULL)
    monitor = SocketEvents(pull, zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
    with NodePeer.start("scatter", connect=[endpoint], count=5, linger=0) as peer:
        monitor.wait_for(zmq.EVENT_DISCONNECTED)
        assert monitor.seen[zmq.EVENT_ACCEPTED] and not monitor.seen[zmq.EVENT_HANDSHAKE_SUCCEEDED]
        assert pull.poll(1000) == 0, "a libzmq SCATTER delivered to a PULL socket"
        try:
            peer.stop()
        except PeerError:
            last = peer.events[-1] if peer.events else {}
            assert peer.returncode == 3 and last.get("event") == "error" and "send" in last.get("message", ""), (
                f"the peer failed otherwise than a send finding no GATHER: {last}"
            )
    monitor.close()


# -- request-reply: libzmq's REP, and a libzmq REQ worker behind our broker -----------------


@pytest.mark.parametrize("node_binds", [True, False], ids=["node-binds", "node-connects"])
def test_our_client_against_a_node_rep_worker(node_binds):
    """``Client`` (DEALER, id envelope) to libzmq's REP: the REP keeps the envelope, so each
    reply comes back to its request, in input order through ``map``."""
    from spark_zmq.requestreply import Client

    bodies = [b"req-%d" % i for i in range(50)]
    if node_binds:
        peer = NodePeer.start("rep", bind=[ANY_PORT], prefix="js:")
        client = Client(peer.endpoints[0], timeout=10)
    else:
        from zmqtest import free_ports

        endpoint = f"tcp://127.0.0.1:{free_ports(1)[0]}"
        client = Client("@" + endpoint, timeout=10)
        peer = NodePeer.start("rep", connect=[endpoint], prefix="js:")
    with peer, client:
        assert list(client.map(bodies, max_in_flight=8)) == [[b"js:" + body] for body in bodies]
        assert client.resent == 0 and client.malformed == 0
        assert peer.messages(50) == bodies
        assert peer.stop() == {"event": "stopped", "count": 50}


def test_a_node_rep_with_count_answers_that_many_then_exits():
    from spark_zmq.patterns import Req

    with NodePeer.start("rep", bind=[ANY_PORT], count=3) as peer, Req(peer.endpoints[0]) as req:
        for i in range(3):
            req.send([b"part-%d" % i, b"tail"], timeout=10)
            assert req.recv_multipart(timeout=10) == [b"part-%d" % i, b"tail"]
        assert peer.messages(3) == [[b"part-%d" % i, b"tail"] for i in range(3)]
        assert peer.wait_event("done") == {"event": "done", "count": 3}
        assert peer.wait_exit(10) == 0


def test_node_req_workers_behind_our_broker_serve_our_clients():
    """Workers nobody here wrote (libzmq REQ sockets that send READY and keep the envelope)
    behind ``Broker``: a ``Client`` and a plain REQ client each get their own replies."""
    import threading

    from zmqtest import wait_until

    from spark_zmq.patterns import Req
    from spark_zmq.requestreply import Broker, Client

    with Broker("@" + ANY_PORT, "@" + ANY_PORT) as broker:
        thread = threading.Thread(target=broker.run, daemon=True)
        thread.start()
        with (
            NodePeer.start("req-worker", connect=broker.backend_addresses, prefix="a:") as a,
            NodePeer.start("req-worker", connect=broker.backend_addresses, prefix="b:") as b,
        ):
            wait_until(lambda: broker.stats().workers_idle == 2, 20, "the node workers' READY")
            bodies = [b"%d" % i for i in range(40)]
            with Client(broker.frontend_addresses[0], timeout=10) as client, Req(broker.frontend_addresses[0]) as req:
                replies = list(client.map(bodies, max_in_flight=4))
                assert [r[0][2:] for r in replies] == bodies
                assert {r[0][:2] for r in replies} == {b"a:", b"b:"}  # both workers served
                req.send(b"plain", timeout=10)
                assert req.recv(timeout=10) in (b"a:plain", b"b:plain")
            # a worker reports what it got on its stdout, read by a thread of ours: the reply
            # can be back before that line is
            wait_until(lambda: len(a.received + b.received) >= 41, 20, "the workers' reports of 41 requests")
            assert sorted(a.received + b.received) == sorted(bodies + [b"plain"])
            assert broker.stats().replies_returned == 41 and broker.stats().malformed == 0
        broker.stop()
        thread.join(10)
