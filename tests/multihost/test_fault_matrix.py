"""The fault matrix on the multi-host bed (issue 33), with default options only: for each
fault, what the user sees (a query error, the driver log's WARN, ``brokenConnections`` in the
source's ``latestOffset`` in the query's progress, a stall), within how long, and what is
lost or duplicated. docs/liveness.md's table is these tests' figures.

Minutes each, so left out of a plain ``pytest`` (marker ``matrix``). Run:
``flock /tmp/spark-zmq-spark.lock env PYTHONPATH=$PWD python -m pytest -n 0 -p no:cacheprovider
-m matrix tests/multihost/test_fault_matrix.py -s`` as root (it skips, saying why, where no
bed can be built). Each test prints its figures as one JSON line.
"""

from __future__ import annotations

import json
import os
import time

import netbed
import pytest
from bedkit import Kit, consumer_values, private_spool, ranges, sink_values

pytestmark = [pytest.mark.multihost, pytest.mark.spark, pytest.mark.matrix]

#: the producer sends 1,000 msg/s for 40 s; a fault starts after 3,000 (3 s in)
RATE, MESSAGES, AFTER, FAULT_SECONDS = 1000, 40_000, 3000, 30
#: a blink of the network a firewall or a switch's failover makes
LONG_FAULT_SECONDS = 120
#: what the source logs at the next trigger when a producer connection broke
WARN = "producer connection(s) broke"


def _elapse(seconds: float, look=lambda: None) -> None:
    """The fault's duration (not synchronisation: nothing is waited for); ``look`` is
    called every half second meanwhile."""
    began = time.monotonic()

    def over():
        look()
        return time.monotonic() - began >= seconds

    netbed.poll(over, seconds + 5, 0.5, f"{seconds} s to pass")


class Watch:
    """What the user sees after a fault: the driver log's WARN lines (from the scenario's
    start), the query's ``broken`` events, its rows over time."""

    def __init__(self, kit: Kit, job: dict) -> None:
        self.kit, self.job = kit, job
        with open(kit.driver.log_path, "rb") as f:
            self.log_from = len(f.read())
        self.warn_at = None  # time.time() the WARN was first seen
        self.fault_at = self.healed_at = None

    def warn_lines(self) -> list:
        with open(self.kit.driver.log_path, "rb") as f:
            f.seek(self.log_from)
            text = f.read().decode(errors="replace")
        return [line for line in text.splitlines() if WARN in line]

    def look(self) -> None:
        if self.warn_at is None and self.warn_lines():
            self.warn_at = time.time()

    def fault(self) -> None:
        self.fault_at = time.time()

    def heal(self) -> float:
        self.healed_at = time.time()
        return self.healed_at

    def wait_event(self, started: dict, event: str, timeout: float, **match) -> dict:
        """``Kit.wait_event``, looking for the WARN meanwhile."""

        def found():
            self.look()
            for e in self.kit.events(started):
                if e["event"] == event and all(e.get(k, 0) >= v for k, v in match.items()):
                    return e
            assert started["proc"].poll() is None, f"{started['name']} exited before {event}"
            return None

        return netbed.poll(found, timeout, 0.2, f"{started['name']}: {event}")

    def broken_at(self):
        for e in self.kit.events(self.job):
            if e["event"] == "broken":
                return e["t"]
        return None

    def rows(self) -> int:
        return sum(sink_values(self.kit.path("out")).values())

    def settle(self, quiet: float = 30, timeout: float = 240) -> None:
        """Until the query is done, or its sink has not grown for ``quiet`` s."""
        last = {"rows": -1, "at": time.monotonic()}

        def settled():
            self.look()
            if self.kit.events(self.job) and self.kit.events(self.job)[-1]["event"] == "done":
                return True
            rows = self.rows()
            if rows != last["rows"]:
                last.update(rows=rows, at=time.monotonic())
            return time.monotonic() - last["at"] > quiet

        netbed.poll(settled, timeout, 1.0, "the sink to settle")

    def since_fault(self, t):
        return None if t is None or self.fault_at is None else round(t - self.fault_at, 1)


def _stall(timeline: list, after: float, healed) -> dict:
    """The longest gap between batches with rows from ``after`` (time.time(), the fault),
    the last batch with rows before the heal and the first after it (seconds from it)."""
    times = [t for t, _ in timeline if t >= after - 5]
    gaps = [round(b - a, 1) for a, b in zip(times, times[1:])]
    figures = {"longest_gap_between_batches_s": max(gaps, default=None)}
    if healed is not None:
        before = [t for t in times if t <= healed]
        later = [t for t in times if t > healed]
        figures.update(
            last_rows_before_heal_s=before and round(before[-1] - after, 1),
            first_rows_after_heal_s=later and round(later[0] - healed, 1),
        )
    return figures


def _stream(kit: Kit, bed: netbed.NetBed, name: str, deadline: float = 300) -> tuple:
    """The query (defaults; the driver binds, the spool private to its host), a paced
    producer that keeps its socket open to the end, and a ``Watch``."""
    private = private_spool(kit, "driver")
    endpoint = f"tcp://{bed.addr('driver')}:5555"
    job = kit.spark(
        "stream",
        expected=MESSAGES,
        deadline=deadline,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"endpoints": "@" + endpoint, "format": "text", "spoolDir": os.path.join(private, f"spool-{name}")},
    )
    kit.wait_event(job, "started", 180)
    watch = Watch(kit, job)
    producer = kit.start(
        "producer", "produce", "producer", endpoint=endpoint, count=MESSAGES, rate=RATE, report_every=500, hold=True
    )
    kit.wait_event(producer, "sent", 60, sent=AFTER)
    return job, producer, watch


def _finish(kit: Kit, job: dict, producer: dict, watch: Watch, label: str, **extra) -> dict:
    open(job["stop_file"], "w").close()
    result = kit.result(job, 90)
    watch.look()
    netbed.NetBed.stop(producer["proc"])
    sent = max((e.get("sent", 0) for e in kit.events(producer) if e["event"] in ("sent", "sent_all")), default=0)
    values = sink_values(kit.path("out"))
    distinct = {int(v) for v in values}
    figures = {
        "fault": label,
        "sent": sent,
        "rows": sum(values.values()),
        "distinct": len(values),
        "missing": len(set(range(sent)) - distinct),
        "missing_ranges": ranges(set(range(sent)) - distinct)[:10],
        "duplicates": sum(n - 1 for n in values.values() if n > 1),
        "query_error": result.get("error"),
        "broken_connections": result.get("broken_connections"),
        "broken_in_progress_after_s": watch.since_fault(watch.broken_at()),
        "warn_lines": len(watch.warn_lines()),
        "warn_after_s": watch.since_fault(watch.warn_at),
        **_stall(result.get("timeline", []), watch.fault_at or 0, watch.healed_at),
        **extra,
    }
    print(f"matrix {label}:", json.dumps(figures))
    if watch.warn_lines():
        print("  driver WARN:", watch.warn_lines()[0][-400:])
    return figures


def _outage(
    kit: Kit,
    bed: netbed.NetBed,
    name: str,
    label: str,
    cut,
    restore,
    seconds: float = FAULT_SECONDS,
    deadline: float = 300,
    quiet: float = 30,
    settle_timeout: float = 240,
) -> dict:
    """A paced stream, ``cut()`` after 3,000 messages, ``restore()`` ``seconds`` later, then
    until the query has every message or its sink has not grown for ``quiet`` s."""
    job, producer, watch = _stream(kit, bed, name, deadline=deadline)
    cut()
    watch.fault()
    _elapse(seconds, watch.look)
    restore()
    healed = watch.heal()
    watch.wait_event(producer, "sent_all", 300)
    watch.settle(quiet=quiet, timeout=settle_timeout)
    return _finish(kit, job, producer, watch, label, healed_to_settled_s=round(time.time() - healed, 1))


@pytest.mark.timeout(480)
def test_producer_to_driver_dropped_one_way_for_30s(bed, kit):
    """Only the producer's packets to the driver are dropped (the driver's reach the
    producer) for 30 s, then healed: nothing lost, nothing duplicated, nothing reported."""
    figures = _outage(
        kit,
        bed,
        "oneway",
        "one-way drop 30 s",
        lambda: bed.drop("producer", peer="driver", direction="out"),
        lambda: bed.heal("producer"),
    )
    assert figures["query_error"] is None
    assert figures["sent"] == MESSAGES
    assert figures["missing"] == 0 and figures["duplicates"] == 0, figures
    assert figures["broken_connections"] == 0 and figures["warn_lines"] == 0, figures


@pytest.mark.timeout(900)
def test_producer_cut_both_ways_for_2_minutes(bed, kit):
    """The producer's traffic is dropped both ways for 2 minutes, then healed: shorter than
    the source's heartbeatTimeout (300 s), so the connection outlives the outage and TCP
    retransmits what was in flight once its back-off's next retransmission comes (up to
    two minutes after the heal): nothing lost, nothing duplicated, nothing reported."""
    figures = _outage(
        kit,
        bed,
        "cut120",
        "cut both ways 2 min",
        lambda: bed.drop("producer"),
        lambda: bed.heal("producer"),
        seconds=LONG_FAULT_SECONDS,
        deadline=600,
        quiet=150,
        settle_timeout=420,
    )  # TCP's retransmission back-off reaches 120 s
    assert figures["query_error"] is None
    assert figures["sent"] == MESSAGES
    assert figures["missing"] == 0 and figures["duplicates"] == 0, figures
    assert figures["broken_connections"] == 0 and figures["warn_lines"] == 0, figures


@pytest.mark.timeout(480)
def test_producer_connection_reset_while_sending(bed, kit):
    """The producer's connection to the driver is reset (nftables: rejected with a TCP
    reset, both ways) for 5 s while it sends, then healed: the producer's libzmq
    reconnects; what it had in flight may be lost, and any loss must be reported
    (``brokenConnections``, the driver's WARN)."""
    job, producer, watch = _stream(kit, bed, "reset")
    bed.reject("producer", "driver")
    watch.fault()
    _elapse(5, watch.look)
    bed.heal("producer")
    watch.heal()
    watch.wait_event(producer, "sent_all", 180)
    watch.settle()
    figures = _finish(kit, job, producer, watch, "reset")
    assert figures["query_error"] is None
    assert figures["duplicates"] == 0, figures
    if figures["missing"]:
        assert figures["broken_connections"] >= 1 and figures["warn_lines"] >= 1, (
            f"{figures['missing']} messages lost and not reported: {figures}"
        )


@pytest.mark.timeout(420)
def test_producer_cut_for_good_seen_within_60s(bed, kit):
    """The producer's traffic is dropped both ways and never healed. Within 60 s the query
    runs on without an error, its rows stop (a stall), and nothing reports a broken
    connection yet: the source's ``heartbeatTimeout`` (300 s) is what ends the connection."""
    job, producer, watch = _stream(kit, bed, "cut")
    bed.drop("producer")
    watch.fault()
    rows_at_cut = watch.rows()
    last = {"rows": -1, "at": time.monotonic()}

    def grown():
        watch.look()
        rows = watch.rows()
        if rows != last["rows"]:
            last.update(rows=rows, at=time.monotonic())
        return False

    _elapse(60, grown)  # the observation window
    stalled_s = round(time.monotonic() - last["at"], 1)
    figures = _finish(
        kit, job, producer, watch, "cut for good (60 s seen)", rows_at_cut=rows_at_cut, stalled_for_s=stalled_s
    )
    assert figures["query_error"] is None
    assert stalled_s >= 30, figures
    assert figures["broken_connections"] == 0 and figures["warn_lines"] == 0, figures


@pytest.mark.timeout(480)
def test_worker_link_down_for_30s_during_a_query(bed, kit):
    """Spark worker ``w1``'s link is down for 30 s (its executor cut from the driver, the
    master and everything else) while the query reads a paced producer: the batches stall
    and resume; nothing lost, nothing duplicated."""
    figures = _outage(kit, bed, "link", "w1 link down 30 s", lambda: bed.link_down("w1"), lambda: bed.link_up("w1"))
    assert figures["query_error"] is None
    assert figures["sent"] == MESSAGES
    assert figures["missing"] == 0 and figures["duplicates"] == 0, figures


#: the push write: 40,000 rows in 4 tasks, 1 ms a row (two tasks at a time: about 20 s)
SINK_ROWS = 40_000


@pytest.mark.timeout(480)
def test_sink_consumer_dropped_for_30s_during_a_write(bed, kit):
    """``df.write.format("zmq")`` (push, defaults) to one pyzmq PULL on ``consumer``; once
    it holds 4,000 messages, its traffic is dropped both ways for 30 s, then healed. The
    sink's heartbeatTimeout (10 s) and sendTimeoutMs (30 s) come into play."""
    endpoint = f"tcp://{bed.addr('consumer')}:6000"
    consumer = kit.start("consumer", "consume", "consumer", endpoint="@tcp://*:6000", messages=kit.path("consumed"))
    kit.wait_event(consumer, "started", 30)
    job = kit.spark(
        "write",
        name="write",
        count=SINK_ROWS,
        partitions=4,
        pace_ms=1,
        options={"endpoints": endpoint, "format": "text"},
    )
    log_from = os.path.getsize(kit.driver.log_path)
    netbed.poll(
        lambda: sum(consumer_values(kit.path("consumed")).values()) >= 4000,
        180,
        0.2,
        "the consumer to hold 4,000 messages",
    )
    bed.drop("consumer")
    fault_at = time.time()
    _elapse(FAULT_SECONDS)
    bed.heal("consumer")
    healed = time.time()
    result = kit.result(job, 300)
    done_at = [e["t"] for e in kit.events(job) if e["event"] == "done"][0]
    last = {"n": -1, "at": time.monotonic()}

    def settled():
        n = sum(consumer_values(kit.path("consumed")).values())
        if n != last["n"]:
            last.update(n=n, at=time.monotonic())
        return time.monotonic() - last["at"] > 10

    netbed.poll(settled, 120, 0.5, "the consumer to settle")
    netbed.NetBed.stop(consumer["proc"])
    values = consumer_values(kit.path("consumed"))
    with open(kit.driver.log_path, "rb") as f:
        f.seek(log_from)
        log = f.read().decode(errors="replace")
    task_failures = [line for line in log.splitlines() if "Lost task" in line]
    timeouts = [line for line in log.splitlines() if "SinkTimeoutError" in line and "were not sent" in line]
    expected = {str(i) for i in range(SINK_ROWS)}
    duplicated = sorted(int(v) for v, n in values.items() if n > 1)
    figures = {
        "fault": "sink consumer dropped 30 s",
        "ok": result["ok"],
        "error": (result.get("error") or "")[:600],
        "write_s": result.get("write_s"),
        "fault_to_write_end_s": round(done_at - fault_at, 1),
        "heal_to_write_end_s": round(done_at - healed, 1),
        "received": sum(values.values()),
        "distinct": len(set(values) & expected),
        "missing": len(expected - set(values)),
        "missing_ranges": ranges(int(v) for v in expected - set(values))[:10],
        "duplicates": sum(n - 1 for v, n in values.items() if n > 1),
        "duplicated_ranges": ranges(duplicated)[:10],
        "unexpected": len(set(values) - expected),
        "lost_task_lines": len(task_failures),
        "sink_timeout_lines": [line[-200:] for line in timeouts[:4]],
    }
    print("matrix sink:", json.dumps(figures))
    for line in task_failures[:5]:
        print("  driver:", line[-300:])
    if not result["ok"]:
        print("  write error:", (result.get("error") or "")[:1500])
    # nothing lost; what a task sent before Spark retried it arrives twice, and every retry is
    # in the driver's log (the task's SinkTimeoutError); each task has 10,000 rows
    assert result["ok"], figures
    assert figures["missing"] == 0 and figures["unexpected"] == 0, figures
    if figures["duplicates"]:
        assert task_failures and timeouts, f"duplicates without a retried task in the driver's log: {figures}"
        assert figures["duplicates"] <= len(task_failures) * SINK_ROWS // 4, figures


@pytest.mark.timeout(480)
def test_broker_to_worker_dropped_for_30s_during_requests(bed, kit):
    """``spark_zmq.request`` (defaults) through ``spark-zmq broker`` on ``relay`` to
    workers on ``producer`` and ``producer2``; the traffic between the broker and the
    worker on ``producer`` is dropped both ways for 30 s from the request's start, then
    healed: every row answered once, correctly (requests resent to the other worker)."""
    broker = bed.addr("relay")
    kit.cli("relay", "broker", ["broker", "--frontend", "@tcp://*:5559", "--backend", "@tcp://*:5560"])
    netbed.poll(lambda: "broker: frontend" in kit.log("broker"), 30, 0.1, f"the broker to start: {kit.log('broker')}")
    workers = [
        kit.start(host, "worker", f"worker-{host}", endpoint=f"tcp://{broker}:5560", label=host)
        for host in ("producer", "producer2")
    ]
    for started in workers:
        kit.wait_event(started, "started", 60)
    count = 20_000
    job = kit.spark("request", count=count, partitions=8, endpoint=f"tcp://{broker}:5559")
    kit.wait_event(job, "started", 60)
    bed.drop("producer", peer="relay")
    fault_at = time.time()
    _elapse(FAULT_SECONDS)
    bed.heal("producer")
    result = kit.result(job, 300)
    done_at = [e["t"] for e in kit.events(job) if e["event"] == "done"][0]
    figures = {
        "fault": "broker-worker dropped 30 s",
        **{k: v for k, v in result.items() if k != "traceback"},
        "fault_to_done_s": round(done_at - fault_at, 1),
    }
    print("matrix request:", json.dumps(figures))
    assert result["ok"], figures


@pytest.mark.timeout(720)
def test_relay_to_driver_dropped_for_30s(bed, kit):
    """``spark-zmq relay`` on ``relay`` receives a paced producer; the query (defaults, the
    relay's address in ``relays``) leases it from the driver, its executors fetch from it. The
    traffic between the relay and the driver is dropped both ways for 30 s (the executors
    still reach the relay), then healed. The query's control requests are resent for up to
    ``relayTimeout`` (120 s) and its lease lapses, but its executors' fetches are served
    while no other query claims the reader: the query stalls and goes on; every message
    arrives exactly once."""
    private = private_spool(kit, "relay")
    listen = f"tcp://{bed.addr('relay')}:7000"
    kit.relay("relay", "@tcp://*:5555", listen, os.path.join(private, "spool"), private_dirs=[private])
    job = kit.spark(
        "stream",
        expected=MESSAGES,
        deadline=300,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"relays": listen, "format": "text", "startingOffsets": "earliest"},
    )
    kit.wait_event(job, "started", 180)
    watch = Watch(kit, job)
    producer = kit.start(
        "producer",
        "produce",
        "producer",
        endpoint=f"tcp://{bed.addr('relay')}:5555",
        count=MESSAGES,
        rate=RATE,
        report_every=500,
        hold=True,
    )
    kit.wait_event(producer, "sent", 60, sent=AFTER)
    bed.drop("relay", peer="driver")
    watch.fault()
    _elapse(FAULT_SECONDS, watch.look)
    bed.heal("relay")
    healed = watch.heal()
    watch.wait_event(producer, "sent_all", 180)
    first = kit.result(job, 360)
    ended_at = [e["t"] for e in kit.events(job) if e["event"] == "done"][0]
    values = sink_values(kit.path("out"))
    expected = {str(i) for i in range(MESSAGES)}
    figures = {
        "fault": "relay-driver dropped 30 s",
        "error": (first.get("error") or "")[:600] or None,
        "ended_after_fault_s": watch.since_fault(ended_at),
        "rows": sum(values.values()),
        "missing": len(expected - set(values)),
        "duplicates": sum(n - 1 for n in values.values() if n > 1),
        "unexpected": len(set(values) - expected),
        "healed_to_end_s": round(ended_at - healed, 1),
        **_stall(first.get("timeline", []), watch.fault_at, healed),
    }
    print("matrix relay:", json.dumps(figures))
    netbed.NetBed.stop(producer["proc"])
    assert figures["error"] is None, figures
    assert figures["missing"] == 0 and figures["duplicates"] == 0 and figures["unexpected"] == 0, figures
