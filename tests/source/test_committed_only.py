"""committedOnly's run selection, without Spark: which messages of a spark-zmq sink's
output reach Spark, and that a batch re-planned after a restart reads the same ones.

The model (``History``) is what a spark-zmq sink with format=arrow sends: batches of
partitions, each run (task attempt) a sequence of messages with its own attempt id, runs
that fail part-way, a commit record naming one run per partition sent to every channel
after the batch committed, sometimes never (the writing driver died first), sometimes a
second time for other runs (the writing query ran the batch again after a restart). The
messages of the channels arrive in any interleaving, records possibly before the last
data of their batch. The properties: every row of every batch with a record reaches
Spark exactly once, nothing of a batch without a record does, and a batch planned before
a restart of the reading query is read after it with exactly the same rows.
"""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples

from spark_zmq.sink.commit_record import commit_record
from spark_zmq.sink.encoders import arrow_message
from spark_zmq.source.committed import (
    Decisions,
    RunSelector,
    Tag,
    decode_reading,
    encode_reading,
    keep,
    kept_slices,
    read_tag,
    tag_of,
)
from spark_zmq.source.decoders import MalformedMessageError
from spark_zmq.source.run_tags import decode_decisions, encode_decisions

# -- tags from the sink's real metadata ----------------------------------------------------------

SCHEMA = pa.schema([("id", pa.int64())])


def data_message(query: str, batch: int, partition: int, attempt_id: str, ids: list[int], sequence: int = 0) -> bytes:
    rows = pa.RecordBatch.from_arrays([pa.array(ids, pa.int64())], schema=SCHEMA)
    return arrow_message(
        rows,
        {
            "query_id": query,
            "batch_id": batch,
            "partition": partition,
            "attempt": 0,
            "attempt_id": attempt_id,
            "sequence": sequence,
            "last": "false",
        },
    )


def test_tags_of_the_sinks_messages():
    data = read_tag(data_message("q", 3, 1, "a1", [1, 2]))
    assert data == Tag("data", ("q", 3), partition=1, attempt_id="a1", sequence=0)
    record = read_tag(commit_record(SCHEMA, "q", 3, {0: ("a0", 2), 1: ("a1", 5)}))
    assert record.kind == "record" and record.key == ("q", 3) and dict(record.runs) == {0: "a0", 1: "a1"}
    assert dict(record.messages) == {0: 2, 1: 5}
    assert keep(data, {("q", 3): {1: "a1"}})
    assert not keep(data, {("q", 3): {1: "other"}})
    assert not keep(data, {("q", 4): {1: "a1"}})
    assert not keep(record, {("q", 3): {0: "a0", 1: "a1"}})


@pytest.mark.parametrize(
    "message, why",
    [
        (b"not arrow at all", "not an Arrow IPC stream"),
        (arrow_message(pa.RecordBatch.from_arrays([pa.array([1])], names=["id"]), {}), "no spark_zmq.query_id"),
        (
            arrow_message(
                pa.RecordBatch.from_arrays([pa.array([1])], names=["id"]), {"query_id": "q", "batch_id": "x"}
            ),
            "batch_id 'x' is not a number",
        ),
        (
            arrow_message(pa.RecordBatch.from_arrays([pa.array([1])], names=["id"]), {"query_id": "q", "batch_id": 1}),
            "no spark_zmq.partition",
        ),
        (
            arrow_message(
                pa.RecordBatch.from_arrays([pa.array([1])], names=["id"]),
                {"query_id": "q", "batch_id": 1, "commit": "[1, 2]"},
            ),
            "not the sink's commit record",
        ),
    ],
)
def test_a_message_without_the_sinks_metadata_is_untagged(message, why):
    tag = read_tag(message)
    assert tag.kind == "untagged" and why in tag.why


def spool_batch(messages: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(messages, pa.binary())], names=["message"])


def test_kept_slices_keep_offsets_and_follow_mode():
    messages = [
        data_message("q", 0, 0, "good", [0]),
        data_message("q", 0, 0, "bad", [0]),
        data_message("q", 0, 0, "good", [1]),
        data_message("q", 0, 0, "good", [2]),
        commit_record(SCHEMA, "q", 0, {0: ("good", 3)}),
        b"garbage",
        data_message("q", 0, 0, "good", [3]),
    ]
    decisions = {("q", 0): {0: "good"}}
    batch = spool_batch(messages)
    with pytest.raises(MalformedMessageError, match=r"channel 2, offset 105 .*committedOnly") as caught:
        list(kept_slices(batch, 100, 2, decisions, "FAILFAST"))
    assert (caught.value.channel, caught.value.offset) == (2, 105)
    with pytest.raises(MalformedMessageError, match="committedOnly"):
        list(kept_slices(batch, 100, 2, decisions, "PERMISSIVE"))
    pieces = list(kept_slices(batch, 100, 2, decisions, "DROPMALFORMED"))
    assert [(first, piece.num_rows) for first, piece in pieces] == [(100, 1), (102, 2), (106, 1)]
    ids = [
        pa.ipc.open_stream(m.as_buffer()).read_all()["id"][0].as_py() for _, piece in pieces for m in piece.column(0)
    ]
    assert ids == [0, 1, 2, 3]


def test_decisions_first_record_stands_and_survive_a_torn_line(tmp_path):
    path = str(tmp_path / "committed-runs.jsonl")
    decisions = Decisions(path)
    assert decisions.add(("q", 1), {0: "a"})
    assert not decisions.add(("q", 1), {0: "b"})
    decisions.flush()
    with open(path, "a") as f:
        f.write('{"query":"q","batch":2,"ru')  # a crash mid-write
    again = Decisions(path)
    assert again.get(("q", 1)) == {0: "a"} and ("q", 2) not in again
    assert again.add(("q", 2), {0: "c"})
    again.flush()
    assert Decisions(path).get(("q", 2)) == {0: "c"}
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"


def test_encoded_decisions_round_trip():
    decisions = {("q", 1): {0: "a", 3: "b"}, ("w", -1): {0: "c"}}
    assert decode_decisions(encode_decisions(decisions)) == decisions


def test_tag_of_ignores_other_metadata():
    assert tag_of({b"pandas": b"{}"}).kind == "untagged"


# -- the selection rule over any arrival order ---------------------------------------------------


class Message:
    def __init__(self, tag: Tag, rows: tuple = ()) -> None:
        self.tag, self.rows = tag, rows


@st.composite
def histories(draw):
    """Per channel, the messages in arrival order, and the rows each recorded batch holds."""
    channels = draw(st.integers(1, 3))
    streams: list[list[Message]] = [[] for _ in range(channels)]
    expected: list = []
    never_committed: set = set()
    #: what the writing driver remembers of its committed batches (a record's ``recent``)
    memory: list = []
    #: batches committed whose every record was lost, with their rows; batches with a record arrived
    lost: dict = {}
    recorded_batches: list = []
    for b in range(draw(st.integers(1, 4))):
        query = "q"
        partitions = draw(st.integers(1, 3))
        rows = {p: [(b, p, i) for i in range(draw(st.integers(0, 4)))] for p in range(partitions)}
        executions = draw(st.integers(1, 2))  # 2: the writing query ran the batch again after a restart
        recorded = False
        committed_runs = None
        pending: list[list[Message]] = [[] for _ in range(channels)]
        for execution in range(executions):
            kept = {}
            counts = {}
            for p in range(partitions):
                for failed in range(draw(st.integers(0, 2))):  # runs that fail part-way
                    attempt = f"{b}-{execution}-{p}-fail{failed}"
                    for i in range(draw(st.integers(0, len(rows[p])))):
                        pending[draw(st.integers(0, channels - 1))].append(
                            Message(Tag("data", (query, b), p, attempt, sequence=i), (rows[p][i],))
                        )
                attempt = kept[p] = f"{b}-{execution}-{p}-ok"
                per_message = draw(st.integers(1, 3))
                sent = []
                for seq, lo in enumerate(range(0, len(rows[p]), per_message)):
                    sent.append(
                        Message(
                            Tag("data", (query, b), p, attempt, sequence=seq), tuple(rows[p][lo : lo + per_message])
                        )
                    )
                    pending[draw(st.integers(0, channels - 1))].append(sent[-1])
                    if draw(st.integers(0, 4)) == 0:
                        # the sink resends a message a broken connection had not acknowledged
                        # (to the same consumer or another), a little later
                        pending[draw(st.integers(0, channels - 1))].append(sent[draw(st.integers(0, len(sent) - 1))])
                counts[p] = len(sent)
            if draw(st.booleans()) or execution == executions - 1:
                if draw(st.integers(0, 5)) == 0 and execution == executions - 1 and committed_runs is None:
                    continue  # never committed: no record, the batch stays held
                committed_runs = (dict(kept), dict(counts))
                if draw(st.integers(0, 4)) == 0:
                    continue  # committed, but the record is lost on the way to every channel
                recorded = True
                recent = {(query, b2): runs for b2, runs in memory[-8:]}
                for c in range(channels):
                    # the record comes after the batch's data, or a little before its last messages
                    at = len(pending[c]) - draw(st.integers(0, min(2, len(pending[c]))))
                    pending[c].insert(
                        at,
                        Message(
                            Tag("record", (query, b), runs=dict(kept), messages=dict(counts), recent=recent or None)
                        ),
                    )
        for c in range(channels):
            streams[c].extend(pending[c])
        batch_rows = [r for p in range(partitions) for r in rows[p]]
        if committed_runs is not None:
            memory.append((b, committed_runs))
        if recorded:
            expected += batch_rows
            recorded_batches.append(b)
        elif committed_runs is not None:
            lost[b] = batch_rows
        else:
            never_committed.add(b)
    for b, batch_rows in lost.items():
        # a later record names the batch among its recent ones: that repairs the lost record
        if any(later > b for later in recorded_batches):
            expected += batch_rows
        else:
            never_committed.add(b)
    return streams, sorted(expected), never_committed


class Reader:
    """The reading query's driver and tasks over the streams (what stream.py does)."""

    def __init__(self, streams, path, margin=10**9):
        self.streams, self.path, self.margin = streams, path, margin
        self.arrived = [0] * len(streams)
        self.start()

    def start(self, committed=None):
        self.selector = RunSelector(Decisions(self.path, margin=self.margin))
        self.committed = committed or [0] * len(self.streams)

    def scan(self, begin, upto):
        for c, hi in enumerate(upto):
            state = self.selector.channel(c, begin[c])
            for offset in range(state.cursor, hi):
                self.selector.observe(c, offset, self.streams[c][offset].tag)
            self.selector.skip_to(c, hi)
        self.selector.decisions.flush()

    def plan(self):
        begin = list(self.committed)
        self.scan(begin, self.arrived)
        return begin, [max(begin[c], min(self.arrived[c], self.selector.end(c))) for c in range(len(self.streams))]

    def read(self, begin, end, cut):
        self.scan(begin, end)
        skips = self.selector.skips(dict(enumerate(begin)), dict(enumerate(end)))
        self.selector.decisions.flush()
        rows = []
        for c in range(len(self.streams)):
            pieces = sorted({begin[c], end[c], *[x for x in cut if begin[c] < x < end[c]]})
            for lo, hi in zip(pieces, pieces[1:]):
                decisions, skip = decode_reading(
                    encode_reading(
                        self.selector.decisions_within(c, lo, hi), [o for o in skips.get(c, ()) if lo <= o < hi]
                    )
                )
                rows += [
                    r
                    for o, m in enumerate(self.streams[c][lo:hi], start=lo)
                    if keep(m.tag, decisions) and o not in skip
                    for r in m.rows
                ]
        return rows


@settings(max_examples=examples(200))  # 200 under the "ci" profile, 20 in the inner loop
@given(histories(), st.data())
def test_each_recorded_row_once_whatever_the_arrival_order_and_restarts(history, data):
    streams, expected, never_committed = history
    # the decisions file on a memory file system when there is one: the property runs
    # thousands of plans, each of which syncs the file
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        # margin 0: the decisions file is compacted whenever a decision is dead (the
        # selector's compaction rule then meets every arrival order and restart)
        reader = Reader(streams, os.path.join(tmp, "runs.jsonl"), margin=data.draw(st.sampled_from([0, 10**9])))
        delivered = []
        for _ in range(40):
            for c in range(len(streams)):
                reader.arrived[c] = min(len(streams[c]), reader.arrived[c] + data.draw(st.integers(0, 6)))
            begin, end = reader.plan()
            cut = data.draw(st.lists(st.integers(0, 40), max_size=3))
            rows = reader.read(begin, end, cut)
            if data.draw(st.integers(0, 3)) == 0:
                # this query restarts before committing the batch: Spark re-runs it from its
                # offset log, on a new driver that knows only what the decisions file kept
                reader.start(committed=begin)
                assert sorted(reader.read(begin, end, data.draw(st.lists(st.integers(0, 40), max_size=3)))) == sorted(
                    rows
                ), "a re-run batch read other rows"
            delivered += rows
            reader.committed = end
            for c in range(len(streams)):
                reader.selector.release(c, end[c])
            reader.selector.compact()
        reader.arrived = [len(s) for s in streams]
        begin, end = reader.plan()
        delivered += reader.read(begin, end, [])
    assert len(delivered) == len(set(delivered)), "a row reached Spark twice"
    assert set(delivered) <= set(expected), "a row of a batch without a commit record reached Spark"
    if not never_committed:
        assert sorted(delivered) == expected
        assert end == [len(s) for s in streams], "a channel is held although every batch has its record"
    for c, stream in enumerate(streams):
        # a channel is held only from the first message of a batch that has no record
        if end[c] < len(stream):
            assert stream[end[c]].tag.kind == "data" and stream[end[c]].tag.key[1] in never_committed
            assert all(m.tag.key[1] not in never_committed for m in stream[: end[c]] if m.tag.kind == "data")


def test_a_batch_without_its_record_holds_the_channel_from_its_first_message():
    selector = RunSelector()
    selector.channel(0, 0)
    selector.observe(0, 0, Tag("data", ("q", 0), 0, "a"))
    selector.observe(0, 1, Tag("data", ("q", 1), 0, "b"))
    selector.observe(0, 2, Tag("record", ("q", 1), runs={0: "b"}))
    selector.observe(0, 3, Tag("untagged", why="x"))
    assert selector.end(0) == 0
    assert selector.holding(0) == [(("q", 0), 0)]
    selector.observe(0, 4, Tag("record", ("q", 0), runs={0: "a"}))
    assert selector.end(0) == 5
    assert selector.decisions_within(0, 0, 5) == {("q", 0): {0: "a"}, ("q", 1): {0: "b"}}
    selector.observe(0, 5, Tag("record", ("q", 0), runs={0: "later"}))  # the first record stands
    assert selector.decisions.get(("q", 0)) == {0: "a"}


# -- the driver's glue: options, the warning of a held channel -----------------------------------


def test_committed_only_is_for_streaming_arrow_reads():
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_zmq.options import OptionError, SourceOptions
    from spark_zmq.sparkglue.datasource import ZmqDataSource

    with pytest.raises(OptionError, match="'committedOnly' applies to format 'arrow' only"):
        SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:5555", "format": "json", "committedOnly": "true"})
    source = ZmqDataSource({"endpoints": "@tcp://127.0.0.1:5555", "format": "arrow", "committedOnly": "true"})
    with pytest.raises(OptionError, match="'committedOnly' is for spark.readStream"):
        source.reader(StructType([StructField("id", LongType())]))


class SpoolOfMessages:
    """A spool's channels as the reader's driver sees them, holding given messages."""

    spool_id = "spool-1"

    def __init__(self, channels: list[list[bytes]]) -> None:
        self.messages = channels
        self.channels = [type("Channel", (), {"earliest": 0})() for _ in channels]

    def spool_range(self, channel, start, end):
        return channel, start, end

    def read(self, task):
        channel, start, end = task
        yield start, spool_batch(self.messages[channel][start:end])


def test_a_held_channel_is_warned_of_once_and_the_decisions_reach_disk(tmp_path, monkeypatch, caplog):
    from spark_zmq.source import committed

    monkeypatch.setattr(committed, "BLOCKED_WARN_SECONDS", 0.0)
    spool = SpoolOfMessages(
        [
            [
                data_message("q", 0, 0, "a", [1]),
                commit_record(SCHEMA, "q", 0, {0: ("a", 1)}),
                data_message("q", 1, 0, "b", [2]),
                data_message("q", 1, 0, "b", [3]),
            ]
        ]
    )
    driver = committed.CommittedOnly(str(tmp_path))
    with caplog.at_level("WARNING", logger=committed.__name__):
        assert driver.clamp(spool, {0: 0}, {0: 4}, spool.read) == {0: 2}
        assert driver.clamp(spool, {0: 0}, {0: 4}, spool.read) == {0: 2}
        assert driver.clamp(spool, {0: 0}, {0: 4}, spool.read) == {0: 2}
    warnings = [r.getMessage() for r in caplog.records]
    assert (
        len(warnings) == 1 and "channel 0 has held offsets 2..4" in warnings[0] and "batch 1 of query q" in warnings[0]
    )
    assert Decisions(str(tmp_path / "committed-runs-spool-1.jsonl")).get(("q", 0)) == {0: "a"}
    # a new driver (the query restarted) reads the batch it re-runs with the same decisions
    again = committed.CommittedOnly(str(tmp_path))
    parts = again.annotate(spool, {0: 0}, {0: 2}, [committed_range(0, 0, 2)], spool.read)
    assert decode_reading(parts[0].committed_runs) == ({("q", 0): {0: "a"}}, frozenset())


def committed_range(channel, start, end):
    from spark_zmq.source.partitions import SpoolRange

    return SpoolRange("/nonexistent", channel, start, end)


def test_a_batch_write_is_decided_by_its_record():
    """A ``df.write`` is batch ``-1`` of its own ``write-<uuid>`` query: its messages wait
    for its record and its committed runs are kept (no floor below -1 settles it)."""
    selector = RunSelector()
    selector.channel(0, 0)
    messages = [
        data_message("write-1", -1, 0, "a", [1, 2]),
        data_message("write-1", -1, 1, "b", [3]),
        commit_record(SCHEMA, "write-1", -1, {0: ("a", 1), 1: ("b", 1)}),
    ]
    selector.observe(0, 0, read_tag(messages[0]))
    assert selector.end(0) == 0, "a batch write's data was settled before its record arrived"
    for offset, message in enumerate(messages[1:], start=1):
        selector.observe(0, offset, read_tag(message))
    assert selector.end(0) == 3
    decisions = selector.decisions_within(0, 0, 3)
    assert decisions == {("write-1", -1): {0: "a", 1: "b"}}
    rows = [
        i
        for _, piece in kept_slices(spool_batch(messages), 0, 0, decisions, "FAILFAST")
        for m in piece.column(0)
        for i in pa.ipc.open_stream(m.as_buffer()).read_all()["id"].to_pylist()
    ]
    assert rows == [1, 2, 3]
