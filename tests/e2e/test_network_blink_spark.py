"""A network that blinks, and a fetch port a firewall can name, through Spark with defaults.

The blink: a producer's path goes silent (``faultproxy`` black hole: no FIN, no RST; the
bytes wait in the proxy's buffers) for longer than a short heartbeat timeout while the
producer keeps sending, then comes back. With the source's default liveness settings
nothing is lost and nothing is duplicated. With a short ``heartbeatTimeout`` the receiver
closes the silent connection, and what the producer had in flight on it may be lost: that
is reported (``brokenConnections`` in the query's progress), not silent.
"""

from __future__ import annotations

import json
import time

import pytest
import zmq
from faultproxy import FaultProxy
from zmqtest import free_port_range, free_ports, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: how long the path stays silent: longer than the 10 s a receiving socket once allowed
SILENCE_S = 14.0


def _start(spark, tmp_path, name: str, endpoints: str, **options: str):
    reader = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", endpoints)
        .option("spoolDir", str(tmp_path / "spool"))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .selectExpr("cast(cast(value as string) as long) as n")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )


class _Sender:
    """One libzmq PUSH, one connection (through the proxy), numbered messages."""

    def __init__(self, endpoint: str) -> None:
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.PUSH)
        self.socket.setsockopt(zmq.SNDHWM, 1_000_000)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(endpoint)
        self.sent = 0

    def send(self, count: int, over_s: float = 0.0) -> None:
        """Send the next ``count`` numbers, spread over ``over_s`` seconds (load shape)."""
        started = time.monotonic()
        for _ in range(count):
            if over_s and self.sent % 50 == 0:
                ahead = started + over_s * (self.sent % count) / count - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            self.socket.send(b"%d" % self.sent)  # the HWM is far above what is sent: never blocks
            self.sent += 1

    def close(self) -> None:
        self.socket.close(0)
        self.context.term()


def _blink(spark, tmp_path, name: str, silence_s: float, closed: bool = False, **options: str):
    """A query whose producer's path is silent for ``silence_s`` while it sends; returns the
    query (running), the rows' numbers once the sent count arrived or 60 s passed, and the
    count sent.

    ``closed``: the receiver closes the silent connection (a heartbeat timeout shorter than
    the silence), so what was in flight on it is lost and the sent count never arrives.
    Then, once the producer has reconnected through the proxy, it sends 100 more and the
    wait is for the last of them: ZeroMQ keeps a connection's order, so by then every row
    that can still arrive has (waiting for the count would wait out the 60 s)."""
    (port,) = free_ports(1)
    query = _start(spark, tmp_path, name, f"@tcp://127.0.0.1:{port}", **options)
    sender = None
    try:
        with FaultProxy("127.0.0.1", port) as proxy:
            sender = _Sender(proxy.endpoint)
            sender.send(1000)
            wait_until(lambda: spark.table(name).count() >= 1000, 120, "the rows sent before the silence")
            proxy.blackhole_all()
            silent_at = time.monotonic()
            sender.send(1000, over_s=silence_s * 0.8)  # the producer goes on: its data waits
            time.sleep(max(0.0, silent_at + silence_s - time.monotonic()))  # the outage's length: the fault itself
            proxy.pass_all()
            sender.send(1000)
            if closed:
                proxy.wait_for_connections(2, timeout=60)  # the producer's reconnection, end to end
                sender.send(100)
                last = sender.sent - 1
                wait_until(
                    lambda: spark.table(name).where(f"n = {last}").count(),
                    60,
                    "the last row, sent on the new connection",
                )
            else:
                try:
                    wait_until(lambda: spark.table(name).count() >= sender.sent, 60, "every row")
                except AssertionError:
                    pass  # the caller judges what arrived
            total = sender.sent
            numbers = [row.n for row in spark.table(name).collect()]
        return query, numbers, total
    except BaseException:
        stop_all([query])
        raise
    finally:
        if sender is not None:
            sender.close()


def _source_progress(query) -> dict:
    progress = query.lastProgress
    latest = progress["sources"][0]["latestOffset"] if progress else None
    return json.loads(latest) if isinstance(latest, str) else (latest or {})


def test_a_producer_path_silent_for_14_s_loses_nothing_with_default_options(spark, tmp_path):
    query, numbers, total = _blink(spark, tmp_path, "blink_defaults", SILENCE_S)
    try:
        assert len(numbers) == len(set(numbers)), "duplicates"
        missing = sorted(set(range(total)) - set(numbers))
        assert not missing, f"{len(missing)} of {total} lost (first {missing[:5]})"
        assert "brokenConnections" not in _source_progress(query)
    finally:
        stop_all([query])


def test_a_connection_closed_by_a_short_heartbeat_timeout_is_reported_in_the_progress(spark, tmp_path):
    query, numbers, total = _blink(
        spark, tmp_path, "blink_short", 4.0, closed=True, heartbeatInterval="0.5", heartbeatTimeout="1.5"
    )
    try:
        assert len(numbers) == len(set(numbers)), "duplicates"
        wait_until(
            lambda: _source_progress(query).get("brokenConnections", 0) >= 1, 60, "brokenConnections in the progress"
        )
    finally:
        stop_all([query])


def _listening_ports() -> set[int]:
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_the_fetch_service_listens_on_the_ports_of_spoolServerPort(spark, tmp_path, receivers):
    """Read tasks fetch (``spoolAccess=fetch``) from the port range given, one port per
    receiver process: what a firewall between executors and the driver must let through."""
    data_ports = free_ports(2)
    first = free_port_range(2)
    last = first + 1
    endpoints = ",".join(f"@tcp://127.0.0.1:{p}" for p in data_ports)
    name = f"fixed_port_{receivers}"
    query = _start(
        spark,
        tmp_path,
        name,
        endpoints,
        receivers=receivers,
        spoolAccess="fetch",
        spoolServerHost="127.0.0.1",
        spoolServerPort=f"{first}-{last}",
    )
    context = zmq.Context()
    try:
        pushes = []
        for port in data_ports:
            push = context.socket(zmq.PUSH)
            push.setsockopt(zmq.LINGER, 5000)
            push.connect(f"tcp://127.0.0.1:{port}")
            pushes.append(push)
        for i in range(200):
            pushes[i % 2].send(b"%d" % i)
        wait_until(lambda: spark.table(name).count() >= 200, 120, "the rows, fetched")
        assert sorted(r.n for r in spark.table(name).collect()) == list(range(200))
        listening = _listening_ports()
        wanted = {first, last} if receivers == "processes" else {first}
        assert wanted <= listening, f"ports {sorted(wanted)} not listening"
        for push in pushes:
            push.close(0)
    finally:
        stop_all([query])
        context.term()
