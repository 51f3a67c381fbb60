"""A producer that exits while its receiver applies backpressure loses nothing to heartbeats.

Why this test exists: a libzmq producer that closes its TCP socket while bytes from us sit
unread in it (a PING that arrived after its I/O thread last read) makes its kernel answer
with a reset instead of a FIN, and a reset throws away what both kernels still buffer:
the producer's untransmitted send buffer and our unread receive buffer. A producer that
finished sending into a receiver under backpressure (spool full, queue full) is exactly
one with megabytes in those buffers, so the receiver's own heartbeats destroyed them
(measured before the fix, 300,000 messages of 100 B into a receiver reading slowly, a
plain pyzmq PUSH that exits: 7,000-25,000 lost per run, the kernel counting one
``TCPAbortOnData``). Receive-only sockets therefore PING only a peer that has been silent
for a whole interval while they read (a peer that sends is alive, and one that has been
silent that long has nothing in flight), with no TTL; libzmq's PULL, which cannot be told
so, sends none (TCP keepalive still watches the host).

The producer is a separate process, as in production: its exit is what closes the TCP
socket. The receiver reads slowly, so the producer's buffers stay full to the end.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from spark_zmq.patterns import Gather, Heartbeat, Pull, ZmtpPull

pytestmark = pytest.mark.timeout(120)

#: PINGs every 50 ms: many reach the producer while it lingers, so an unread one at its
#: close is near certain when receivers PING a peer that streams to them
FAST = Heartbeat(interval=0.05, timeout=5.0, ttl=1.0)
MESSAGES = 150_000

_PRODUCER = """
import sys, zmq
ctx = zmq.Context()
push = ctx.socket(zmq.PUSH)
push.setsockopt(zmq.SNDHWM, {n})  # the whole run fits in its queue: it never blocks
push.connect(sys.argv[1])
for i in range({n}):
    push.send(b"%09d" % i + b"x" * 91)
push.close(linger=-1)  # until everything is in the kernel's send buffer
ctx.term()
"""


@pytest.mark.parametrize("cls", [ZmtpPull, Gather, Pull], ids=["zmtp-pull", "gather", "libzmq-pull"])
def test_a_producer_exiting_into_a_backpressured_receiver_loses_nothing(cls):
    receiver = cls("@tcp://127.0.0.1:*", hwm=1000, heartbeat=FAST)
    producer = None
    try:
        endpoint = receiver.last_endpoint if cls is Pull else receiver.bound_addresses[0]
        producer = subprocess.Popen([sys.executable, "-c", _PRODUCER.format(n=MESSAGES), endpoint])
        seen = set()
        deadline = time.monotonic() + 90
        # a slow reader (a spool that drains as Spark commits): the producer's buffers stay
        # full until it has handed its last message to the kernel and exited
        while len(seen) < MESSAGES and time.monotonic() < deadline:
            try:
                values, _ = receiver.recv_values(500, timeout=2.0 if producer.poll() is not None else 10.0)
            except TimeoutError:
                if producer.poll() is not None:
                    break  # it has exited and nothing more comes
                continue
            seen.update(int(v[:9]) for v in values)
            time.sleep(0.002)  # the slow reader itself, not a wait for anything
        assert producer.wait(30) == 0
        missing = MESSAGES - len(seen)
        assert missing == 0, f"{missing} of {MESSAGES} messages lost when the producer exited"
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        receiver.close()
