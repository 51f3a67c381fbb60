"""``Trigger.AvailableNow`` pins its end at what producers had queued, drained until the
channels are silent for ``timeout`` seconds. The silence counts from when the receivers
start: before that, what producers sent waits unread in the socket, and a receiver bound
long before the query starts (a JVM and a Spark plan on a loaded machine take seconds)
must not count that wait as silence. Driven on the ingest itself (no Spark), with real
sockets, for both receiver kinds."""

from __future__ import annotations

import time

import pytest
import zmq
from zmqtest import free_ports

from spark_zmq.options import SourceOptions
from spark_zmq.source.reader_ingest import LocalIngest
from spark_zmq.source.relays import RelayIngest

pytestmark = pytest.mark.timeout(120)

MESSAGES = 3000
#: long enough that a producer connecting just after the start is heard on a busy machine
IDLE_S = 1.5
#: between the receivers' bind and their start, longer than IDLE_S: Spark's start and its
#: first plan, where the query's receivers are bound but not yet receiving (a silence counted
#: from the bind is then past IDLE_S at the start; half a second past is as telling as more)
PLANNING_S = IDLE_S + 0.5


def _producer(ctx: zmq.Context, port: int) -> zmq.Socket:
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, MESSAGES + 1)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://127.0.0.1:{port}")
    for i in range(MESSAGES):
        push.send(b"%d" % i)
    return push


@pytest.mark.parametrize("producer", ["queued-before-start", "connects-after-start"])
@pytest.mark.parametrize("receivers", ["processes", "threads"])
def test_available_now_drains_what_producers_send_once_the_receivers_start(tmp_path, receivers, producer):
    """The receivers are bound, then Spark takes longer than ``timeout`` to start them;
    a producer's messages wait in the socket meanwhile, or its connection comes just after
    the start: the drain still waits for ``timeout`` of silence from the start and takes them."""
    port = free_ports(1)[0]
    options = SourceOptions.parse(
        {
            "endpoints": f"@tcp://127.0.0.1:{port}",
            "format": "raw",
            "receivers": receivers,
            "spoolDir": str(tmp_path / "spool"),
            "timeout": str(IDLE_S),
        }
    )
    ingest = RelayIngest(options) if receivers == "processes" else LocalIngest(options)
    ctx = zmq.Context()
    push = None
    try:
        if producer == "queued-before-start":
            push = _producer(ctx, port)
        planned_at = time.monotonic()
        while time.monotonic() - planned_at < PLANNING_S:  # a deliberate delay: Spark's planning
            time.sleep(PLANNING_S / 4)
        assert sum(ingest.latest().values()) == 0
        ingest.start()
        if push is None:
            push = _producer(ctx, port)
        ingest.drain_until_idle(IDLE_S)
        assert sum(ingest.latest().values()) == MESSAGES
    finally:
        if push is not None:
            push.close(0)
        ctx.term()
        ingest.stop()
