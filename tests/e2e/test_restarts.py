"""Restarts that lose nothing: a query stopped under backpressure and restarted.

Why: most users restart a query to deploy new code. A receiver that stops with the query
closes its socket, and what ZeroMQ's queues and the kernel's buffers held is gone (the
issue that led here measured 3,440 of 6,000 messages lost over three stops). With
``receivers=processes`` and ``receiverLingerSeconds`` the receivers keep receiving while
the query is down, and the restarted query attaches to them.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
from zmqtest import Producer, free_ports, wait_until

from spark_zmq import procstat

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "seq long, pad string"
TOTAL = 6000


def _messages(n: int):
    for seq in range(n):
        yield json.dumps({"seq": seq, "pad": "x" * 1000}).encode()


def _start(spark, port: int, spool: str, ckpt: str, out: str, spool_bytes: str, **extra: str):
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{port}")
        .option("format", "json")
        .schema(SCHEMA)
        .option("spoolDir", spool)
        .option("maxSpoolBytes", spool_bytes)
        .option("hwm", "100")
        .option("maxRowsPerTrigger", "400")
    )
    for key, value in extra.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .select("seq")
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime="0 seconds")
        .start()
    )


def _rows(spark, out: str) -> list[int]:
    if not os.path.exists(os.path.join(out, "_spark_metadata")):
        return []
    return [r[0] for r in spark.read.schema("seq long").parquet(out).collect()]


@pytest.mark.parametrize("spool_bytes", ["1 MiB", "64 MiB"], ids=["spool-full", "query-down"])
def test_stops_and_restarts_deliver_every_message_exactly_once(spark, tmp_path, spool_bytes):
    """Three stops and restarts with the default receivers' alternative, processes that
    linger: ``spool-full`` stops while the spool is full and the producer blocked (hwm 100
    on both sides); ``query-down`` keeps the query down while the producer goes on (the
    lingering receiver takes what it sends). Every message arrives exactly once."""
    (port,) = free_ports(1)
    spool, ckpt, out = (str(tmp_path / name) for name in ("spool", "ckpt", "out"))
    producer = Producer(
        f"tcp://127.0.0.1:{port}", _messages(TOTAL), hwm=100, rate=None if spool_bytes == "1 MiB" else 1500
    )
    producer.start()
    query = _start(spark, port, spool, ckpt, out, spool_bytes, receivers="processes")
    try:
        for round_ in range(3):
            seen = len(_rows(spark, out))
            wait_until(
                lambda seen=seen: len(_rows(spark, out)) >= seen + 400 or producer.sent >= TOTAL,
                180,
                f"progress before stop {round_ + 1}",
            )
            query.stop()
            at_stop = producer.sent
            pids = _lingering_pids(spool)
            assert pids and all(procstat.is_alive(pid) for pid in pids), "the receiver did not linger after the stop"
            if spool_bytes != "1 MiB":
                # the query is down; the lingering receiver keeps taking messages in
                wait_until(
                    lambda at_stop=at_stop: producer.sent >= min(TOTAL, at_stop + 300),
                    60,
                    "the producer to go on while the query is down",
                )
            query = _start(spark, port, spool, ckpt, out, spool_bytes, receivers="processes")
            assert _lingering_pids(spool) == pids  # attached to, not replaced
        producer.finish(240)
        try:
            wait_until(
                lambda: len(_rows(spark, out)) >= TOTAL or query.exception() is not None, 240, f"all {TOTAL} rows"
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {len(_rows(spark, out))} rows; query {query.status}, last progress "
                f"{query.lastProgress}; spool {_spool_listing(spool)}"
            ) from None
        assert query.exception() is None, query.exception()
        rows = _rows(spark, out)
        assert len(rows) == TOTAL, f"{len(rows) - len(set(rows))} duplicates"
        assert set(rows) == set(range(TOTAL))
    finally:
        query.stop()
        # the receiver lingers after the last stop: it must not outlive the test
        _stop_lingering(spool)


def test_a_restart_after_the_linger_loses_at_most_what_the_buffers_held(spark, tmp_path):
    """``receiverLingerSeconds=1``: the stopped query's receiver drains into its spool and
    exits while the producer goes on; the restarted query delivers everything spooled
    exactly once, and the loss is at most what the connection's two kernel buffers and the
    receiving socket's queue held when the receiver closed (the documented bound, with
    ``receiveBufferBytes`` and the producer's SNDBUF at 64 KiB, doubled by Linux)."""
    import zmq

    (port,) = free_ports(1)
    spool, ckpt, out = (str(tmp_path / name) for name in ("spool", "ckpt", "out"))
    buffer = 64 << 10
    exited = threading.Event()

    def paced():
        """Sending (500 msgs/s: load shaping) while the receiver closes, and never done
        before it has: the last 1,000 wait for its exit."""
        for seq, message in enumerate(_messages(TOTAL)):
            if seq == TOTAL - 1000:
                exited.wait(120)
            yield message

    producer = Producer(f"tcp://127.0.0.1:{port}", paced(), hwm=100, rate=500, sockopts={zmq.SNDBUF: buffer})
    producer.start()
    options = {"receivers": "processes", "receiverLingerSeconds": "1", "receiveBufferBytes": str(buffer)}
    query = _start(spark, port, spool, ckpt, out, "64 MiB", **options)
    try:
        wait_until(lambda: len(_rows(spark, out)) >= 400, 180, "the first rows")
        query.stop()
        pids = _lingering_pids(spool)
        wait_until(
            lambda: not any(procstat.is_alive(pid) for pid in pids), 60, "the receiver to exit once its linger ran out"
        )
        exited.set()
        query = _start(spark, port, spool, ckpt, out, "64 MiB", **options)
        producer.finish(240)
        bound = 100 + 2 * (2 * buffer) // 1000 + 10  # hwm, two doubled 64 KiB buffers of 1 KB messages
        wait_until(lambda: len(_rows(spark, out)) >= TOTAL - bound, 240, f"all but at most {bound} rows")
        query.processAllAvailable()
        rows = _rows(spark, out)
        assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} duplicates"
        lost = sorted(set(range(TOTAL)) - set(rows))
        assert len(lost) <= bound, f"{len(lost)} lost (bound {bound}): {lost[:5]}..."
        if lost:  # what was lost was in flight when the receiver closed, in one run
            assert lost[-1] - lost[0] < len(lost) + bound, lost
        print(f"restart past the linger: {len(lost)} of {TOTAL} lost (bound {bound})")
    finally:
        query.stop()
        _stop_lingering(spool)


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_a_query_that_fails_in_its_first_batch_restarts_it_from_the_same_start(spark, tmp_path, receivers):
    """The first batch fails (Spark has it in its offset log, not in its commit log) and
    the query restarts from its checkpoint: Spark asks ``initialOffset`` again and re-runs
    batch 0 from the answer. The spool has numbered the first batch's messages by then, so
    the spool's latest offset would skip them; every message arrives, exactly once.

    The producer sends nothing after the first query has failed: with ``receivers=threads``
    what is in flight when a receiver closes is lost (README, "Guarantees"), which is not
    what this test is about."""
    (port,) = free_ports(1)
    spool, ckpt = str(tmp_path / "spool"), str(tmp_path / "ckpt")
    total = 500
    producer = Producer(f"tcp://127.0.0.1:{port}", _messages(total), hwm=100)
    producer.start()
    failed_once = threading.Event()
    got: dict[int, list[int]] = {}  # batch id -> its rows (a re-run batch replaces its rows)

    def sink(batch, batch_id: int) -> None:
        seqs = [r[0] for r in batch.collect()]
        if batch_id == 0 and not failed_once.is_set():
            assert seqs, "the first batch must hold messages for this test to mean anything"
            failed_once.set()
            raise RuntimeError("the first batch fails, once")
        got[batch_id] = seqs

    def start(trigger: dict):
        reader = (
            spark.readStream.format("zmq")
            .option("endpoints", f"@tcp://127.0.0.1:{port}")
            .option("format", "json")
            .schema(SCHEMA)
            .option("spoolDir", spool)
            .option("receivers", receivers)
            .option("timeout", "2")
        )
        return (
            reader.load()
            .select("seq")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    # availableNow: the first batch holds what the producer sent (it drains until idle)
    query = start({"availableNow": True})
    try:
        with pytest.raises(Exception, match="the first batch fails"):
            query.awaitTermination(180)
        assert failed_once.is_set()
        producer.finish(120)
        query = start({"processingTime": "0 seconds"})
        try:
            wait_until(
                lambda: sum(map(len, got.values())) >= total or query.exception() is not None, 180, f"{total} rows"
            )
        except AssertionError as exc:
            rows = sorted(r for seqs in got.values() for r in seqs)
            raise AssertionError(f"{exc}: {len(rows)} rows, from {rows[:1]} to {rows[-1:]}") from None
        assert query.exception() is None, query.exception()
        rows = [r for seqs in got.values() for r in seqs]
        assert len(rows) == len(set(rows)), f"{len(rows) - len(set(rows))} duplicates"
        assert set(rows) == set(range(total)), f"missing {sorted(set(range(total)) - set(rows))[:5]}..."
    finally:
        query.stop()
        _stop_lingering(spool)


def test_a_new_query_on_a_lingering_receiver_reads_what_came_after_the_last_one_left(spark, tmp_path):
    """A query stops and leaves its receiver lingering (the default 300 s); producers send
    while no query runs; a new query (a new checkpoint, the default
    ``startingOffsets=latest``) on the same spool directory reads those messages, as it
    would have found them queued in the producers had no receiver lingered, and nothing of
    the first query's."""
    (port,) = free_ports(1)
    spool = str(tmp_path / "spool")
    before, after = 301, 500

    def send(first_seq: int, n: int) -> None:
        producer = Producer(
            f"tcp://127.0.0.1:{port}",
            (json.dumps({"seq": first_seq + i, "pad": ""}).encode() for i in range(n)),
            hwm=100,
        )
        producer.start()
        producer.finish(120)

    def start(ckpt: str, got: list, **trigger):
        reader = (
            spark.readStream.format("zmq")
            .option("endpoints", f"@tcp://127.0.0.1:{port}")
            .option("format", "json")
            .schema(SCHEMA)
            .option("spoolDir", spool)
            .option("receivers", "processes")
            .option("timeout", "2")
        )
        return (
            reader.load()
            .select("seq")
            .writeStream.foreachBatch(lambda batch, _id: got.extend(r[0] for r in batch.collect()))
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    first: list = []
    query = start(str(tmp_path / "ckpt-1"), first, processingTime="0 seconds")
    second: list = []
    try:
        send(0, before - 1)
        wait_until(lambda: len(first) >= before - 1, 120, "the first query's rows")
        send(before - 1, 1)  # a batch after the first: Spark commits the first one's offsets to the source
        wait_until(lambda: len(first) >= before, 120, "the first query's last row")
        query.stop()
        assert sorted(first) == list(range(before))
        pids = _lingering_pids(spool)
        assert pids and all(procstat.is_alive(pid) for pid in pids), "the receiver did not linger after the stop"
        # behind the first query's committed offset: its last row unless Spark committed its batch
        # to the source before the stop (it does so when it plans the next batch, which may race
        # the stop), then these
        unread_at_stop = _unread(spool)
        assert unread_at_stop in (0, 1), unread_at_stop
        send(before, after)  # no query runs: the lingering receiver takes these
        unread = [unread_at_stop]
        try:
            wait_until(
                lambda: unread.append(_unread(spool)) or unread[-1] >= unread_at_stop + after,
                60,
                f"the lingering receiver to spool the {after} messages past the {unread_at_stop} unread",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last counts: {unread[-3:]}") from None
        query = start(str(tmp_path / "ckpt-2"), second, availableNow=True)
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        assert _lingering_pids(spool) == pids  # attached to, not replaced
        assert sorted(second) == list(range(before, before + after)), (
            f"{len(second)} rows, from {min(second, default=None)} to {max(second, default=None)}"
        )
    finally:
        query.stop()
        _stop_lingering(spool)


def _unread(spool: str) -> int:
    """What the lingering receiver of ``spool``'s channel 0 holds past what the last query
    committed, asked as ``spark-zmq relay-readers`` does (no lease taken)."""
    import uuid

    from spark_zmq.patterns.curve import Curve
    from spark_zmq.patterns.curve_keys import KeyPair
    from spark_zmq.relay.client import RelayClient
    from spark_zmq.relay.protocol import Op

    with open(os.path.join(spool, "receiver-0.state")) as f:
        state = json.load(f)
    curve = Curve.client(
        KeyPair(state["client_public"].encode(), state["client_secret"].encode()), state["server_public"].encode()
    )
    client = RelayClient(state["listen"], uuid.uuid4().hex, curve=curve, timeout_s=10.0)
    try:
        readers = client.call(Op.READERS)["readers"]
    finally:
        client.close()
    return sum(r["behind"][0] for r in readers if r["name"] == "default")


def _spool_listing(spool: str) -> dict[str, int]:
    """The spool's files and their sizes, for a failure's message."""
    listing = {}
    for root, _, files in os.walk(spool):
        for name in files:
            path = os.path.join(root, name)
            listing[os.path.relpath(path, spool)] = os.path.getsize(path)
    return listing


def _lingering_pids(spool: str) -> list[int]:
    pids = []
    for name in sorted(os.listdir(spool)) if os.path.isdir(spool) else ():
        if name.endswith(".state"):
            with open(os.path.join(spool, name)) as f:
                pids.append(json.load(f)["pid"])
    return pids


def _stop_lingering(spool: str) -> None:
    import signal

    for name in os.listdir(spool) if os.path.isdir(spool) else ():
        if name.endswith(".state"):
            try:
                with open(os.path.join(spool, name)) as f:
                    pid = json.load(f)["pid"]
                os.kill(pid, signal.SIGTERM)
            except (OSError, ValueError, KeyError):
                pass
