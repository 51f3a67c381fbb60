"""The spool's read path and the receiver's stop, on real files and real sockets (no Spark).

Fault injection and property tests of the log itself are in test_spool_faults.py and
test_spool_properties.py."""

from __future__ import annotations

import random
import threading
import time

import pytest
import zmq

from spark_zmq.ingest.receiver import Receiver, messages_to_batch
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.spool_budget import SpoolBudget
from spark_zmq.ingest.spool_reader import read_range
from spark_zmq.patterns import Pull

pytestmark = pytest.mark.timeout(60)


def _values(pairs):
    return [v for _, batch in pairs for v in batch.column("value").to_pylist()]


def test_read_range_from_a_located_batch_equals_a_scan_from_the_segment_start(tmp_path):
    """Read tasks start at the record holding their first offset (ChannelLog.locate) instead
    of scanning the segment from its beginning; both must give exactly [start, end)."""
    spool = Spool(str(tmp_path), 1, max_bytes=1 << 30)
    log = spool.channels[0]
    total = 0
    for i in range(400):  # small batches of varying size, as a steady producer leaves them
        values = [b"m-%d" % (total + j) for j in range(i % 7 + 1)]
        log.append(messages_to_batch(values, None, "raw", 0))
        total += len(values)
    rng = random.Random(7)
    for _ in range(300):
        start = rng.randrange(0, total)
        end = rng.randrange(start, total + 1)
        hint = log.locate(start)
        assert hint is not None
        expected = [b"m-%d" % k for k in range(start, end)]
        assert _values(read_range(str(tmp_path), 0, start, end, spool_id=spool.spool_id)) == expected
        assert _values(read_range(str(tmp_path), 0, start, end, hint, spool_id=spool.spool_id)) == expected, (
            start,
            end,
        )
    assert log.locate(total) is None  # not spooled yet
    spool.close()


def test_restart_after_a_roll_keeps_every_message_and_never_reuses_a_file(tmp_path):
    """The reported loss: the spool fills, the budget rolls (an empty newest segment), the
    query stops and restarts. Recovery used to index the empty file twice, and the next
    release deleted the segment being written."""
    spool = Spool(str(tmp_path), 1)
    log = spool.channels[0]
    log.append(messages_to_batch([b"m-0", b"m-1"], None, "raw", 0))
    log.roll()
    spool.close()
    for _restart in range(3):
        spool = Spool(str(tmp_path), 1)
        log = spool.channels[0]
        names = [s.name for s in log.segments]
        assert len(names) == len(set(names))
        n = log.next_offset
        log.append(messages_to_batch([b"m-%d" % n], None, "raw", 0))
        log.roll()
        log.release_before(n)  # Spark committed everything before the new message
        assert _values(read_range(str(tmp_path), 0, n, n + 1, spool_id=spool.spool_id)) == [b"m-%d" % n]
        spool.close()
    assert n == 4


def test_a_stop_spools_what_the_socket_already_holds(tmp_path):
    """Closing a receiving socket discards its queue; a graceful stop drains it first.
    The receiver is held by a full budget while 1,000 messages sit in its socket's queue
    (inproc: a send lands straight in the receiver's pipe)."""
    endpoint = f"inproc://drain-{random.getrandbits(32)}"
    spool = Spool(str(tmp_path / "spool"), 1)
    log = spool.channels[0]
    log.append(messages_to_batch([b"x" * 4096], None, "raw", 0))
    budget = SpoolBudget(1, spool.channels)  # already spent: the receiver waits for room
    pull = Pull("@" + endpoint, hwm=10_000)
    receiver = Receiver(pull, log, budget, "raw").start()
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 10_000)
    push.connect(endpoint)
    try:
        for i in range(1000):
            push.send(b"q-%d" % i, zmq.NOBLOCK)
        assert log.next_offset == 1, "the receiver should be waiting for room, not reading"
        receiver.stop()
        got = _values(read_range(str(tmp_path / "spool"), 0, 1, log.next_offset, spool_id=spool.spool_id))
        assert got == [b"q-%d" % i for i in range(1000)]
    finally:
        push.close(linger=0)
        spool.close()


def test_a_receive_batch_takes_the_spool_at_most_a_message_past_its_budget(tmp_path):
    """The budget is checked before each receive, and a receive takes at most the room
    left: with 2 MB queued in the socket and a 256 KiB budget, the spool ends one message
    (plus the last record's framing) past it, not one 8 MiB receive batch past it."""
    endpoint = f"inproc://room-{random.getrandbits(32)}"
    spool = Spool(str(tmp_path / "spool"), 1)
    log = spool.channels[0]
    budget = SpoolBudget(256 << 10, spool.channels)
    pull = Pull("@" + endpoint, hwm=10_000)
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 10_000)
    push.connect(endpoint)
    for i in range(2000):  # inproc: all of it sits in the receiver's pipe before it starts
        push.send(b"%08d" % i + b"x" * 992, zmq.NOBLOCK)
    receiver = Receiver(pull, log, budget, "raw").start()
    try:
        deadline = threading.Event()
        while budget.used() < budget.max_bytes and not deadline.wait(0.01):
            assert receiver.error is None and log.next_offset < 2000
        used, spooled = budget.used(), log.next_offset
        # one 1,000-byte message, and the framing of the records (offsets, times, headers)
        assert used <= budget.max_bytes + 1000 + 16 * 1024, (
            f"the spool took {used} bytes of a {budget.max_bytes} budget"
        )
        assert 200 <= spooled < 300
    finally:
        receiver.stop()
        push.close(linger=0)
        spool.close()
    # nothing was lost: the stop spooled what the socket still held, in order
    got = _values(read_range(str(tmp_path / "spool"), 0, 0, log.next_offset, spool_id=spool.spool_id))
    assert got == [b"%08d" % i + b"x" * 992 for i in range(2000)]


def test_a_receiver_survives_a_disk_that_refuses_writes_and_loses_nothing(tmp_path):
    """A failed append (disk full) publishes nothing; the receiver holds the batch, stops
    reading, and retries until the disk accepts it."""
    endpoint = f"inproc://full-{random.getrandbits(32)}"
    spool = Spool(str(tmp_path / "spool"), 1)
    log = spool.channels[0]
    budget = SpoolBudget(1 << 30, spool.channels)
    failing = threading.Event()
    failing.set()
    real_append = log.append
    attempts = []

    def append(batch):
        attempts.append(batch.num_rows)
        if failing.is_set():
            raise OSError(28, "No space left on device")
        real_append(batch)

    log.append = append  # the disk's answer, injected where the receiver meets it
    pull = Pull("@" + endpoint, hwm=10_000)
    receiver = Receiver(pull, log, budget, "raw")
    receiver.retry_s = 0.05
    receiver.start()
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(endpoint)
    try:
        for i in range(100):
            push.send(b"d-%d" % i)
        deadline = threading.Event()
        while len(attempts) < 3 and not deadline.wait(0.01):
            pass
        assert receiver.write_error is not None and receiver.error is None and receiver._thread.is_alive()
        failing.clear()
        while log.next_offset < 100 and not deadline.wait(0.01):
            assert receiver.error is None
        assert _values(read_range(str(tmp_path / "spool"), 0, 0, 100, spool_id=spool.spool_id)) == [
            b"d-%d" % i for i in range(100)
        ]
    finally:
        receiver.stop()
        push.close(linger=0)
        spool.close()


def test_the_drivers_calls_never_wait_for_a_stalled_spool_write(tmp_path, monkeypatch):
    """A write that stalls (a slow disk, an fsync on a busy one) held the channel's lock,
    and the driver's offset calls (latestOffset's earliest and release, the planner's
    snapshot, the budget) waited for it: 40-170 ms per micro-batch at Arrow rates. They
    must answer from the index while the write is stuck, and the stuck record must not be
    published before it is written."""
    import spark_zmq.ingest.spool as spool_module

    spool = Spool(str(tmp_path), 1, max_bytes=1 << 30)
    log = spool.channels[0]
    budget = SpoolBudget(1 << 30, spool.channels)
    log.append(messages_to_batch([b"m-0", b"m-1"], None, "raw", 0))
    log.roll()  # a second segment, so that a release has a file to delete
    log.append(messages_to_batch([b"m-2"], None, "raw", 0))
    entered, go = threading.Event(), threading.Event()
    real_writev = spool_module.os.writev

    def stalled_writev(fd, buffers):  # the disk's answer, injected where the spool meets it
        entered.set()
        go.wait(30)
        return real_writev(fd, buffers)

    monkeypatch.setattr(spool_module.os, "writev", stalled_writev)
    writer = threading.Thread(target=log.append, args=(messages_to_batch([b"m-3", b"m-4"], None, "raw", 0),))
    writer.start()
    try:
        assert entered.wait(10)
        answers = {}

        def driver():
            answers["latest"] = spool.latest()
            answers["earliest"] = log.earliest
            answers["snapshot"] = len(log.snapshot().entries)
            answers["used"] = budget.used()
            answers["locate"] = log.locate(2)
            answers["freed"] = log.release_before(2)

        calls = threading.Thread(target=driver, daemon=True)
        calls.start()
        calls.join(10)
        assert not calls.is_alive(), "the driver's calls waited for the stalled write"
        assert answers["latest"] == {"0": 3} and answers["snapshot"] == 2 and answers["locate"] is not None
        assert answers["freed"] > 0 and log.earliest == 2
    finally:
        go.set()
        writer.join(10)
    monkeypatch.undo()
    assert spool.latest() == {"0": 5}
    assert _values(read_range(str(tmp_path), 0, 2, 5, spool_id=spool.spool_id)) == [b"m-2", b"m-3", b"m-4"]
    spool.close()


def test_the_driver_reads_and_releases_while_the_receiver_writes_and_rolls(tmp_path):
    """Writes and the index take separate locks, so the driver plans, reads and releases
    while a record is being written. A writer appends 3,000 messages with a new segment
    every few records while the driver reads every published range as Spark's tasks would
    and releases behind itself: every read is exact, and what is released is deleted
    without ever touching the segment being written."""
    import os

    spool = Spool(str(tmp_path), 1, max_bytes=1 << 30)
    log = spool.channels[0]
    log.segment_bytes = 4096  # a roll every few records: many segments to release
    total = 3000
    rng = random.Random(11)
    sizes = []
    while sum(sizes) < total:
        sizes.append(min(rng.randint(1, 5), total - sum(sizes)))

    def write():
        first = 0
        for n in sizes:
            log.append(messages_to_batch([b"m-%d" % k for k in range(first, first + n)], None, "raw", 0))
            first += n

    writer = threading.Thread(target=write)
    writer.start()
    committed, idle = 0, threading.Event()
    try:
        while committed < total:
            latest = spool.latest()["0"]
            if latest == committed:
                assert writer.is_alive(), f"the writer stopped at {latest} of {total}"
                idle.wait(0.001)
                continue
            end = min(latest, committed + rng.randint(1, 60))
            hint = log.locate(committed)
            assert hint is not None
            got = _values(read_range(str(tmp_path), 0, committed, end, hint, spool_id=spool.spool_id))
            assert got == [b"m-%d" % k for k in range(committed, end)], (committed, end)
            committed = end
            log.release_before(committed)
    finally:
        writer.join(30)
    assert log.next_offset == total and log.segments[-1].seq > 10  # it did roll, many times
    names = sorted(n for n in os.listdir(log.dir) if n.endswith(".seg"))
    assert names == sorted(s.name for s in log.segments)  # released files gone, none else
    assert _values(read_range(str(tmp_path), 0, log.earliest, total, spool_id=spool.spool_id)) == [
        b"m-%d" % k for k in range(log.earliest, total)
    ]
    spool.close()


def test_a_receiving_process_never_imports_pandas(tmp_path):
    """pyarrow's ``pa.array`` imports pandas the first time it runs in a process (to check
    whether its argument is a pandas object): a third of a second of CPU at a receiver's
    first batch and 38 MiB for the life of every receiving process, relay children
    included. Receiving and spooling every format, topics and all, must not need it."""
    import subprocess
    import sys

    import pyarrow as pa

    sink = pa.BufferOutputStream()
    batch = pa.record_batch({"x": pa.array([1, 2, 3], pa.int64())})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    message = tmp_path / "message.arrows"
    message.write_bytes(sink.getvalue().to_pybytes())
    code = f"""
import sys
import spark_zmq.relay.child, spark_zmq.ingest.receiver
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.batches import messages_to_batch
spool = Spool({str(tmp_path / "spool")!r}, 1)
log = spool.channels[0]
arrow = open({str(message)!r}, "rb").read()
log.append(messages_to_batch([b"a", b"bc"], None, "raw", 1))
log.append(messages_to_batch([b"a", b"bc", b""], [b"t", None, b"u"], "raw", 1))
log.append(messages_to_batch([b"v"], [b"\\xff"], "text", 1))
log.append(messages_to_batch([arrow, b"not arrow"], None, "arrow", 1))
assert log.next_offset == 2 + 3 + 1 + 2, log.next_offset  # offsets count messages
spool.close()
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", "the receiving side imported pandas"
    spool = Spool(str(tmp_path / "spool"), 1)
    got = list(read_range(str(tmp_path / "spool"), 0, 0, 6, spool_id=spool.spool_id))
    assert _values(got) == [b"a", b"bc", b"a", b"bc", b"", b"v"]
    topics = [t for _, b in got for t in b.column("topic").to_pylist()]
    assert topics == [None, None, "t", None, "u", "\ufffd"]
    spool.close()


def test_a_steady_trickle_is_spooled_in_few_writes_and_every_message_kept(tmp_path, free_port):
    """At a modest rate the socket empties after every few messages; the receiver must not
    write a record per few messages (each costs an Arrow batch, a record and an index entry)
    but at most one per ``min_write_interval_s`` while the socket keeps emptying, and lose
    nothing. The producer sends 2 messages every half millisecond for about a second:
    about 2,000 bursts, against at most about 500 writes allowed."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    spool = Spool(str(tmp_path / "spool"), 1)
    log = spool.channels[0]
    pull = Pull("@" + endpoint, hwm=10_000)
    receiver = Receiver(pull, log, SpoolBudget(1 << 30, spool.channels), "raw").start()
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.connect(endpoint)
    pace = threading.Event()  # never set: its wait paces the producer
    try:
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < 1.0:
            push.send(b"t-%d" % sent)
            push.send(b"t-%d" % (sent + 1))
            sent += 2
            pace.wait(0.0005)
        while log.next_offset < sent and not pace.wait(0.01):
            assert time.monotonic() - started < 30, f"only {log.next_offset} of {sent} messages spooled"
        elapsed = time.monotonic() - started
        assert receiver.writes <= elapsed / receiver.min_write_interval_s + 2, (
            f"{receiver.writes} spool writes in {elapsed:.2f} s for {sent} messages"
        )
        assert _values(read_range(str(tmp_path / "spool"), 0, 0, sent, spool_id=spool.spool_id)) == [
            b"t-%d" % i for i in range(sent)
        ]
    finally:
        receiver.stop()
        push.close(linger=0)
        spool.close()
