"""committedOnly between two stages when something goes wrong on the way: the planning
(``RunSelector``) and read filter (``kept_slices``) fed with what the sink's own encoder
and commit record make, without Spark.

* a message of a committed run that arrives a second time (the sink resends what a broken
  connection had not acknowledged) reaches Spark once, by its ``spark_zmq.sequence``,
  in the same batch, in a later batch and after a restart of the reading query;
* a sequence beyond the record's message count never reaches Spark;
* a commit record lost on the way is repaired by the next record of the same writing
  query, which names the runs of its recent micro-batches (``spark_zmq.recent``);
* a batch nobody will commit is released (``HOLD_LIMIT_SECONDS`` after its first message,
  or once its writing query is ``RELEASE_AFTER_BATCHES`` further on), logged and counted;
* a record that disagrees with the one that decided its batch (a forged one arriving
  first) is logged and counted;
* forged records leave a bounded number of decisions, in memory and on disk.
"""

from __future__ import annotations

import pyarrow as pa

from spark_zmq.options import SinkOptions
from spark_zmq.sink.commit_record import commit_record
from spark_zmq.sink.encoders import ArrowEncoder
from spark_zmq.source import committed
from spark_zmq.source.committed import Decisions, RunSelector, kept_slices, read_tag

SCHEMA = pa.schema([("id", pa.int64())])
OPTIONS = SinkOptions.parse({"endpoints": "tcp://127.0.0.1:5555", "format": "arrow", "rowsPerMessage": "3"})


def run(query: str, batch: int, partition: int, attempt_id: str, ids: list[int]) -> list[bytes]:
    """One write task's messages, as the sink's encoder makes them (3 rows each)."""
    encoder = ArrowEncoder(
        OPTIONS, {"query_id": query, "batch_id": batch, "partition": partition, "attempt": 0, "attempt_id": attempt_id}
    )
    rows = pa.RecordBatch.from_arrays([pa.array(ids, pa.int64())], schema=SCHEMA)
    return [bytes(m) for m in encoder.encode(rows) + encoder.finish()]


class Stage:
    """The reading query's driver and tasks over one channel's messages."""

    def __init__(self, path: str, margin: int = 1024) -> None:
        self.path = path
        self.margin = margin
        self.now = 0.0
        self.messages: list[bytes] = []
        self.committed = 0
        self.restart()

    def restart(self) -> None:
        self.selector = RunSelector(Decisions(self.path, margin=self.margin), clock=lambda: self.now)
        self.selector.channel(0, self.committed)

    def scan(self) -> None:
        state = self.selector.channels[0]
        for offset in range(state.cursor, len(self.messages)):
            self.selector.observe(0, offset, read_tag(self.messages[offset]))
        self.selector.decisions.flush()

    def batch(self) -> list[int]:
        """Plan up to what arrived, read it, commit it: the ids that reached Spark."""
        self.scan()
        self.selector.release_stale()
        self.selector.decisions.flush()
        begin, end = self.committed, self.selector.end(0)
        ids = self.read(begin, end)
        self.committed = end
        self.selector.release(0, end)
        self.selector.compact()
        return ids

    def read(self, begin: int, end: int) -> list[int]:
        self.scan()
        skip = self.selector.skips({0: begin}, {0: end}).get(0, ())
        self.selector.decisions.flush()
        decisions = self.selector.decisions_within(0, begin, end)
        spool = pa.RecordBatch.from_arrays([pa.array(self.messages[begin:end], pa.binary())], names=["message"])
        return [
            i
            for _, piece in kept_slices(spool, begin, 0, decisions, "FAILFAST", skip)
            for m in piece.column(0)
            for i in pa.ipc.open_stream(m.as_buffer()).read_all()["id"].to_pylist()
        ]


def test_a_resent_message_of_a_committed_run_reaches_spark_once(tmp_path):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    data = run("q", 0, 0, "a", [1, 2, 3, 4])  # two messages: [1, 2, 3], [4]
    record = commit_record(SCHEMA, "q", 0, {0: ("a", len(data))})
    stage.messages += [data[0], data[1], data[0], record]  # the first one resent
    assert stage.batch() == [1, 2, 3, 4]


def test_a_copy_in_a_later_batch_or_after_a_restart_is_skipped_and_a_rerun_skips_the_same(tmp_path):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    data = run("q", 0, 0, "a", [1, 2, 3, 4, 5, 6, 7])  # [1, 2, 3], [4, 5, 6], [7]
    stage.messages += [data[0], data[1], data[2], commit_record(SCHEMA, "q", 0, {0: ("a", len(data))})]
    assert stage.batch() == [1, 2, 3, 4, 5, 6, 7]
    stage.messages.append(data[1])  # a resent copy, in the next batch
    assert stage.batch() == []
    # the reading query restarts: the copies still find their sequences delivered
    stage.messages += [data[0], data[2]]
    stage.restart()
    begin = stage.committed
    assert stage.batch() == []
    # a batch Spark runs again after a restart is read with the same rows
    stage.committed = begin
    stage.restart()
    assert stage.read(begin, begin + 2) == []


def test_a_rerun_batch_delivers_the_copy_it_delivered_before(tmp_path):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    data = run("q", 0, 0, "a", [1, 2, 3, 4])
    stage.messages += [data[0], data[0], data[1], commit_record(SCHEMA, "q", 0, {0: ("a", len(data))})]
    first = stage.read(0, 4)
    stage.restart()  # before Spark committed the batch
    assert stage.read(0, 4) == first == [1, 2, 3, 4]


def test_a_sequence_beyond_the_records_count_never_reaches_spark(tmp_path):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    data = run("q", 0, 0, "a", [1, 2, 3, 4])
    stage.messages += [data[0], data[1], commit_record(SCHEMA, "q", 0, {0: ("a", 1)})]
    assert stage.batch() == [1, 2, 3]


def test_a_lost_record_is_repaired_by_the_next_one(tmp_path):
    from spark_zmq.sink.commit_record import RecentBatches

    stage = Stage(str(tmp_path / "runs.jsonl"))
    recent = RecentBatches(str(tmp_path / "sink"))
    batch0, batch1 = run("q", 0, 0, "a", [1, 2, 3, 4]), run("q", 1, 0, "b", [5])
    runs0, runs1 = {0: ("a", len(batch0))}, {0: ("b", len(batch1))}
    assert recent.remember("q", 0, runs0) == {}
    commit_record(SCHEMA, "q", 0, runs0)  # made, and lost on the way
    earlier = recent.remember("q", 1, runs1)
    assert earlier == {0: runs0}
    stage.messages += batch0 + batch1
    assert stage.batch() == []  # batch 0 holds the channel, waiting for a record
    stage.messages.append(commit_record(SCHEMA, "q", 1, runs1, earlier))
    assert stage.batch() == [1, 2, 3, 4, 5]


def test_a_stray_message_is_released_after_the_hold_limit_and_counted(tmp_path, caplog):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    stray = run("gone", 7, 0, "x", [99])  # a batch whose writing query never commits it
    data = run("q", 0, 0, "a", [1, 2])
    stage.messages += stray + data + [commit_record(SCHEMA, "q", 0, {0: ("a", len(data))})]
    assert stage.batch() == []  # held behind the stray
    stage.now += committed.HOLD_LIMIT_SECONDS
    with caplog.at_level("WARNING", logger=committed.__name__):
        assert stage.batch() == [1, 2]
    assert "released batch 7 of query gone" in caplog.text and "1 message(s)" in caplog.text
    assert (stage.selector.released_batches, stage.selector.released_messages) == (1, 1)
    driver = committed.CommittedOnly(str(tmp_path))
    driver.selector = stage.selector
    assert driver.report() == {"committedOnly": {"releasedBatches": 1, "releasedMessages": 1, "conflictingRecords": 0}}
    # the release is a decision on disk: a restarted query is not held again
    stage.messages += run("q", 1, 0, "b", [3]) + [commit_record(SCHEMA, "q", 1, {0: ("b", 1)})]
    stage.restart()
    assert stage.batch() == [3]


def test_a_batch_is_released_once_its_query_is_further_on_than_any_record_names(tmp_path):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    stage.messages += run("q", 0, 0, "a", [0])  # its record, and every one naming it, lost
    for b in range(1, committed.RELEASE_AFTER_BATCHES):
        stage.messages += run("q", b, 0, f"r{b}", [b]) + [commit_record(SCHEMA, "q", b, {0: (f"r{b}", 1)})]
    assert stage.batch() == []
    b = committed.RELEASE_AFTER_BATCHES
    stage.messages += run("q", b, 0, f"r{b}", [b]) + [commit_record(SCHEMA, "q", b, {0: (f"r{b}", 1)})]
    assert stage.batch() == list(range(1, b + 1))
    assert stage.selector.released_messages == 1


def test_a_forged_record_arriving_first_is_logged_and_counted(tmp_path, caplog):
    stage = Stage(str(tmp_path / "runs.jsonl"))
    data = run("q", 0, 0, "a", [1, 2, 3])
    forged = commit_record(SCHEMA, "q", 0, {0: ("forged", 1)})
    stage.messages += [forged] + data + [commit_record(SCHEMA, "q", 0, {0: ("a", len(data))})]
    with caplog.at_level("WARNING", logger=committed.__name__):
        assert stage.batch() == []  # the first record stands: without CURVE, anyone can send one
    assert stage.selector.conflicting_records == 1
    assert "names other runs of batch 0 of query q than the record that decided it" in caplog.text


def test_forged_records_leave_a_bounded_number_of_decisions(tmp_path):
    path = tmp_path / "runs.jsonl"
    stage = Stage(str(path), margin=64)
    for i in range(2000):
        stage.messages.append(commit_record(SCHEMA, f"forged-{i}", i, {0: ("x", 1)}))
        if i % 100 == 99:
            stage.batch()
            stage.now += 60
    stage.now += committed.FORGET_AFTER_SECONDS
    stage.messages.append(commit_record(SCHEMA, "q", 0, {0: ("a", 0)}))
    stage.batch()
    assert len(stage.selector.decisions) < 500, len(stage.selector.decisions)
    assert path.stat().st_size < 100_000, path.stat().st_size
    assert len(stage.selector.decisions.floor) == 0


def test_a_record_decides_at_most_eight_earlier_batches():
    recent = {b: {0: (f"r{b}", 1)} for b in range(20)}
    tag = read_tag(commit_record(SCHEMA, "q", 30, {0: ("a", 1)}, {**recent, 31: {0: ("later", 1)}}))
    assert sorted(b for _, b in tag.recent) == list(range(12, 20))
