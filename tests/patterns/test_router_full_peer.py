"""A ROUTER's send to one peer whose queue is full, while another peer has room (no Spark).

libzmq's POLLOUT on a ROUTER (``ROUTER_MANDATORY``) means *some* peer can take a message:
with a second peer connected it stays set while the message to the full peer is refused
again and again. The send loop once took that POLLOUT as "retry now", forever: a
``timeout=0`` reply never ended, spun a core, and ``close()`` waited for it for good. These
tests hold the wire to its deadline, its ``close()`` and a bounded CPU cost.

The full peer is a plain pyzmq DEALER that sent one request and reads nothing (receive
high-water mark 1, a 4 KiB kernel buffer); the bystander is a DEALER that is connected and
reads."""

from __future__ import annotations

import os
import threading
import time

import pytest
import zmq
from zmqtest import wait_until

from spark_zmq.patterns import Router
from spark_zmq.patterns.deadlines import SocketClosedError
from spark_zmq.patterns.heartbeat import NO_HEARTBEAT

pytestmark = pytest.mark.timeout(60)

_REPLY = b"r" * (256 << 10)


def _cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def _in_thread(call, timeout_s: float) -> tuple[bool, object]:
    """(finished, result or exception) of ``call()`` run in a daemon thread for at most
    ``timeout_s``: a send that never ends fails the test instead of hanging it."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return not thread.is_alive(), (out[0] if out else None)


@pytest.fixture
def router_with_a_full_peer():
    """A mandatory ROUTER, its stuck peer's identity with that peer's queue full, and a
    bystander that reads: (router, identity, bystander)."""
    # no heartbeat: its PINGs, stuck behind the full buffers, would drop the peer after its
    # timeout (a relay's listening port times a peer out after 300 s: as good as never)
    router = Router("@tcp://127.0.0.1:*", mandatory=True, hwm=2, linger=0, heartbeat=NO_HEARTBEAT)
    context = zmq.Context.instance()
    stuck, bystander = context.socket(zmq.DEALER), context.socket(zmq.DEALER)
    stuck.routing_id, bystander.routing_id = b"stuck", b"bystander"
    for dealer in (stuck, bystander):
        dealer.linger = 0
    stuck.rcvhwm = 1
    stuck.rcvbuf = 4096
    try:
        for dealer in (stuck, bystander):
            dealer.connect(router.last_endpoint)
            dealer.send(b"hello")
        assert {router.recv_multipart(timeout=5)[0] for _ in range(2)} == {b"stuck", b"bystander"}
        # fill the stuck peer: its kernel buffers, then its queue, until a send waited 0.2 s
        # in vain (the peer's I/O thread has moved all it could into the kernel by then)
        finished, result = _in_thread(lambda: _fill(router, b"stuck"), 20)
        assert finished, "filling the stuck peer's queue never ended: a send (timeout 0.2 s) to it hung"
        assert isinstance(result, int) and result > 0, result
        yield router, b"stuck", bystander
    finally:
        stuck.close()
        bystander.close()
        finished, _ = _in_thread(router.close, 5)
        assert finished, "Router.close() hung behind a send to the full peer"


def _fill(router: Router, identity: bytes) -> int:
    for sent in range(2000):
        try:
            router.send([identity, _REPLY], timeout=0.2)
        except TimeoutError:
            return sent
    raise AssertionError("2,000 replies of 256 KiB all queued for a peer that reads nothing")


def test_a_timeout_zero_reply_to_a_full_peer_fails_at_once_while_another_peer_has_room(router_with_a_full_peer):
    router, stuck_id, bystander = router_with_a_full_peer
    started = time.monotonic()
    finished, result = _in_thread(lambda: router.send([stuck_id, b"one more"], timeout=0), 5)
    assert finished, "send(timeout=0) to a full peer did not end within 5 s (another peer has room)"
    assert isinstance(result, TimeoutError), result
    assert "not for this message" in str(result)
    assert time.monotonic() - started < 1.0
    # the peer with room is served meanwhile
    router.send([b"bystander", b"still served"], timeout=1)
    assert bystander.poll(2000) and bystander.recv() == b"still served"


def test_a_bounded_send_to_a_full_peer_ends_at_its_deadline_without_spinning_a_core(router_with_a_full_peer):
    router, stuck_id, _ = router_with_a_full_peer
    cpu, started = _cpu_s(), time.monotonic()
    finished, result = _in_thread(lambda: router.send([stuck_id, b"one more"], timeout=1.0), 10)
    took, spent = time.monotonic() - started, _cpu_s() - cpu
    assert finished, "send(timeout=1) to a full peer did not end within 10 s"
    assert isinstance(result, TimeoutError), result
    assert 0.9 <= took < 2.0, took
    assert spent < 0.3, f"the send took {spent:.2f} s of CPU in {took:.2f} s: it spun instead of waiting"


def test_close_interrupts_an_unbounded_send_to_a_full_peer(router_with_a_full_peer):
    router, stuck_id, _ = router_with_a_full_peer
    errors: list[BaseException] = []

    def send_forever() -> None:
        try:
            router.send([stuck_id, b"one more"])
        except BaseException as exc:  # noqa: BLE001 - looked at below
            errors.append(exc)

    sender = threading.Thread(target=send_forever, daemon=True)
    sender.start()
    # the send holds the socket's lock while it waits for room: close() must interrupt it
    wait_until(lambda: router._wire.lock.locked(), 5, "the send to start waiting")
    assert sender.is_alive() and not errors, errors
    started = time.monotonic()
    finished, _ = _in_thread(router.close, 5)
    assert finished, "close() did not interrupt a send to a full peer within 5 s"
    wait_until(lambda: not sender.is_alive(), 5, "the interrupted send to return")
    assert time.monotonic() - started < 1.0
    assert errors and isinstance(errors[0], SocketClosedError), errors
