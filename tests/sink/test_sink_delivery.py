"""The sink's at-least-once when a consumer dies: through Spark, consumers in their own processes.

A consumer killed with ``kill -9`` takes with it what its host had acknowledged but its
application had not read (its kernel receive queue, its libzmq queue): ZeroMQ has no
application acknowledgements, so that much is beyond any sender's reach. Everything else
(what the write task still held for it, what was in the task's kernel send queue) must
reach another consumer, or the consumer that comes back on the same port. Each test
stops the consumer first (SIGSTOP), measures what its side holds, then kills it, and
asserts that no more than that was lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
from zmqtest import established_tcp, free_ports, settled, wait_until

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs /proc/net/tcp")

CONSUMER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "pull_consumer.py")
ROWS = 100_000
SIZE = 100  # bytes per message: 8 digits of the row number, then filler
WIRE = SIZE + 2  # a ZMTP frame of it
RCVHWM = 10
RCVBUF = 8192
IDLE_S = 1.0
#: libzmq reads up to 8 KiB from the kernel at a time into its decoder
LIBZMQ_READ = 8192


class Consumer:
    """``tests/scripts/pull_consumer.py`` on ``port``; its lines collected by a thread."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [sys.executable, CONSUMER, str(port), str(RCVHWM), str(RCVBUF), str(IDLE_S)], stdout=subprocess.PIPE
        )
        assert self.process.stdout.readline().strip() == b"ready"
        self.rows: list[int] = []
        self.idle_at: list[int] = []  # len(rows) each time it went idle
        self.thread = threading.Thread(target=self._collect, daemon=True)
        self.thread.start()

    def _collect(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if line == b"IDLE":
                self.idle_at.append(len(self.rows))
            elif line:
                self.rows.append(int(line))

    def stop_and_kill(self) -> int:
        """SIGSTOP, wait for its kernel queue to settle, SIGKILL; the most rows it can have
        taken with it: its kernel receive queue, its libzmq queue, one read in progress."""
        os.kill(self.process.pid, signal.SIGSTOP)
        settled = stable_receive_queue(self.port)
        receive_queue = receive_queue_bytes(self.port)  # again, right before the kill
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.thread.join(timeout=30)
        held = max(settled, receive_queue)
        return -(-held // WIRE) + 2 * RCVHWM + LIBZMQ_READ // WIRE + 2

    def wait_drained(self, after: int) -> None:
        """Wait until it went idle after having printed ``after`` rows or more, once the
        write finished: by then it read everything its host received."""
        wait_until(
            lambda: any(n >= after for n in self.idle_at) and self.idle_at[-1] == len(self.rows),
            60,
            f"consumer on port {self.port} to read what it received",
        )

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)


def receive_queue_bytes(port: int) -> int:
    """Bytes received but not read on the established TCP connections whose local port is
    ``port`` (the consumer's side), from ``/proc/net/tcp``."""
    return sum(c.rx_queue for c in established_tcp() if c.local_port == port)


def stable_receive_queue(port: int, settle: float = 0.5) -> int:
    """``receive_queue_bytes`` once it stayed the same for ``settle`` seconds."""
    return settled(lambda: receive_queue_bytes(port), "the consumer's receive queue", settle)


class Write(threading.Thread):
    """A batch write of ``ROWS`` numbered rows (one partition, in order) with pattern push."""

    def __init__(self, spark, ports: list[int], **options: str) -> None:
        super().__init__(daemon=True)
        self.spark = spark
        self.options = {
            "endpoints": ",".join(f"tcp://127.0.0.1:{p}" for p in ports),
            "hwm": "1000",
            "sendTimeoutMs": "60000",
            **options,
        }
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            # Spark looks a Python data source up in the JVM thread's active session, and a
            # new thread has none of its own: make the test's session active here
            jvm_session = self.spark._jsparkSession
            self.spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(jvm_session)
            df = self.spark.range(ROWS, numPartitions=1).selectExpr(
                f"concat(lpad(CAST(id AS STRING), 8, '0'), repeat('x', {SIZE - 8})) AS value"
            )
            df.write.format("zmq").mode("append").options(**self.options).save()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.finished.set()


@pytest.mark.timeout(300)
def test_consumer_killed_and_restarted_on_its_port_loses_only_what_its_own_side_held(spark):
    """kill -9 of the only consumer during a 100,000-row write, a new one on the same port:
    the write succeeds, and every row arrives but at most what the dead consumer's side held
    (its kernel receive queue and libzmq queue, measured before the kill). libzmq's PUSH
    with IMMEDIATE lost its whole send queue here (1,000 messages, the high-water mark),
    and without re-sending what the dead consumer's TCP had not acknowledged, the writer's
    kernel send queue (hundreds of KiB) would be lost as well."""
    port = free_ports(1)[0]
    first = Consumer(port)
    second = None
    write = Write(spark, [port])
    try:
        write.start()
        wait_until(
            lambda: len(first.rows) >= ROWS // 4 or write.finished.is_set(),
            120,
            "the first consumer to receive a quarter of the rows",
        )
        assert not write.finished.is_set(), f"the write ended before the kill: {write.error}"
        bound = first.stop_and_kill()
        second = Consumer(port)
        assert write.finished.wait(180), "the write did not finish"
        assert write.error is None, f"the write failed: {write.error}"
        second.wait_drained(1)
        arrived = set(first.rows) | set(second.rows)
        missing = sorted(set(range(ROWS)) - arrived)
        assert len(missing) <= bound, (
            f"{len(missing)} rows lost; the dead consumer's side held at most {bound} (first missing: {missing[:10]})"
        )
        assert len(first.rows) < ROWS // 2 and len(second.rows) > ROWS // 4  # the kill really was mid-write
    finally:
        first.close()
        if second is not None:
            second.close()


@pytest.mark.timeout(300)
def test_three_consumers_one_killed_the_other_two_receive_its_share(spark):
    """Three consumers, one killed (not restarted) mid-write: the write succeeds, the two
    left receive the dead one's share, and the rows lost are at most what the dead one's
    side held."""
    ports = free_ports(3)
    consumers = [Consumer(p) for p in ports]
    write = Write(spark, ports)
    try:
        write.start()
        victim = consumers[1]
        wait_until(
            lambda: len(victim.rows) >= ROWS // 12 or write.finished.is_set(),
            120,
            "the consumer to be killed to receive part of its share",
        )
        assert not write.finished.is_set(), f"the write ended before the kill: {write.error}"
        bound = victim.stop_and_kill()
        assert write.finished.wait(180), "the write did not finish"
        assert write.error is None, f"the write failed: {write.error}"
        for survivor in (consumers[0], consumers[2]):
            survivor.wait_drained(1)
        arrived = set().union(*(c.rows for c in consumers))
        missing = sorted(set(range(ROWS)) - arrived)
        assert len(missing) <= bound, f"{len(missing)} rows lost; the dead consumer's side held at most {bound}"
        survivors = len(consumers[0].rows) + len(consumers[2].rows)
        assert survivors >= ROWS - len(victim.rows) - bound
        assert len(victim.rows) < ROWS // 3  # it did not get its round-robin third
    finally:
        for consumer in consumers:
            consumer.close()
