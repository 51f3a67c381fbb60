"""The planner's maths, on synthetic indexes: no Spark, no files (as Spark's Kafka
connector tests its offset range calculator)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples

from spark_zmq.source.offsets import ChannelOffsets, OffsetsFormatError
from spark_zmq.source.planner import admit, split


class RowsIndex:
    """An index where message i of a channel carries ``rows[i]`` rows and ``sizes[i]`` bytes."""

    def __init__(self, rows: list[int], sizes: list[int] | None = None, first: int = 0) -> None:
        self.rows, self.sizes, self.first = rows, sizes or [1] * len(rows), first

    def count_between(self, start, end):
        a, b = max(start - self.first, 0), max(end - self.first, 0)
        return sum(self.rows[a:b]), sum(self.sizes[a:b])

    def end_within(self, start, limit, max_rows, max_bytes):
        rows = nbytes = 0
        position = start
        while position < limit:
            i = position - self.first
            r, s = self.rows[i], self.sizes[i]
            if (max_rows is not None and rows + r > max_rows) or (max_bytes is not None and nbytes + s > max_bytes):
                break
            rows, nbytes, position = rows + r, nbytes + s, position + 1
        return position


#: offsets as the connector wrote them to Spark's offset log before ChannelOffsets (PySpark
#: json.dumps the dict the reader returns): a query restarted from such a checkpoint reads them
OLD_CHECKPOINT = '{"0": 1200, "1": 980, "10": 7, "2": 0, "spool": "0123456789abcdef0123456789abcdef"}'
#: before offsets named their spool
OLDEST_CHECKPOINT = '{"0": 5, "1": 7}'


def test_offsets_read_a_checkpoint_written_before_and_write_the_same_text():
    offsets = ChannelOffsets.from_json(OLD_CHECKPOINT)
    assert dict(offsets) == {0: 1200, 1: 980, 2: 0, 10: 7}
    assert offsets.spool == "0123456789abcdef0123456789abcdef"
    # what the old code wrote for these offsets: channels in channel order, then the spool
    assert offsets.to_json() == '{"0": 1200, "1": 980, "2": 0, "10": 7, "spool": "0123456789abcdef0123456789abcdef"}'
    assert ChannelOffsets.from_json(offsets.to_json()) == offsets
    oldest = ChannelOffsets.from_json(OLDEST_CHECKPOINT)
    assert oldest.spool is None and dict(oldest) == {0: 5, 1: 7}
    assert oldest.to_json() == OLDEST_CHECKPOINT


def test_offsets_json_is_what_pyspark_writes_for_the_dict():
    import json

    offsets = ChannelOffsets({"1": 7, "0": 5}, "ab" * 16)
    assert offsets.to_json() == json.dumps(offsets.to_dict()) == '{"0": 5, "1": 7, "spool": "%s"}' % ("ab" * 16)
    assert ChannelOffsets.from_dict(json.loads(offsets.to_json())) == offsets


@pytest.mark.parametrize(
    "text, why",
    [
        ("[1, 2]", "not a JSON object"),
        ('{"0": 5', "not JSON"),
        ('{"0": "5", "spool": "ab"}', "channel 0's offset"),
        ('{"0": -1}', "channel 0's offset"),
        ('{"0": 1.5}', "channel 0's offset"),
        ('{"0": true}', "channel 0's offset"),
        ('{"0": 5, "spool": 12}', "'spool' must be a spool id"),
        ('{"0": 5, "lag": 3}', "unknown key 'lag'"),
        ('{"spool": "ab"}', "no channel offsets"),
    ],
)
def test_a_corrupt_checkpoint_offset_is_an_error_naming_its_json(text, why):
    with pytest.raises(OffsetsFormatError) as error:
        ChannelOffsets.from_json(text)
    assert text in str(error.value) and why in str(error.value) and "checkpointLocation" in str(error.value)


def test_offsets_arithmetic():
    start = ChannelOffsets({0: 5, 1: 7}, "s")
    end = ChannelOffsets({0: 9, 1: 7, 2: 4}, "s")
    assert start.ranges_to(end) == {0: (5, 9), 1: (7, 7), 2: (4, 4)}
    assert start.count_to(end) == 4 and end.count_to(start) == 0
    assert start.at_least({0: 6, 1: 2}) == ChannelOffsets({0: 6, 1: 7}, "s")
    assert start.replace(1, 8) == ChannelOffsets({0: 5, 1: 8}, "s")
    assert start.with_spool("t") != start and start.with_spool("t").spool == "t"
    assert start.to_channel_dict() == {"0": 5, "1": 7}
    assert hash(start) == hash(ChannelOffsets({"1": 7, "0": 5}, "s"))


def test_admit_splits_the_cap_in_proportion_to_the_backlog():
    indexes = {0: RowsIndex([1] * 300), 1: RowsIndex([1] * 100)}
    end = admit(indexes, ChannelOffsets({0: 0, 1: 0}), ChannelOffsets({0: 300, 1: 100}), 100, None)
    assert end == {0: 75, 1: 25}


def test_admit_lets_one_message_through_when_it_alone_exceeds_the_cap():
    end = admit({0: RowsIndex([50, 1])}, {0: 0}, {0: 2}, 10, None)
    assert end == {0: 1}


def test_admit_moves_past_a_backlog_with_nothing_readable():
    """Offsets the spool lost (an index with no rows there) must not stall the query."""
    end = admit({0: RowsIndex([0] * 10)}, {0: 0}, {0: 10}, 5, None)
    assert end == {0: 10}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 20), min_size=0, max_size=40), min_size=1, max_size=4),
    st.integers(1, 200),
    st.data(),
)
def test_admit_never_exceeds_the_caps_and_always_progresses(channels, cap, data):
    indexes = {i: RowsIndex(rows) for i, rows in enumerate(channels)}
    start = {k: data.draw(st.integers(0, len(ix.rows)), label=f"start {k}") for k, ix in indexes.items()}
    latest = {k: len(ix.rows) for k, ix in indexes.items()}
    end = admit(indexes, start, latest, cap, None)
    backlog = sum(ix.count_between(start[k], latest[k])[0] for k, ix in indexes.items())
    admitted = sum(ix.count_between(start[k], end[k])[0] for k, ix in indexes.items())
    for k in indexes:
        assert start[k] <= end[k] <= latest[k]
    if backlog:
        assert any(end[k] > start[k] for k in indexes), "a non-empty backlog must make progress"
        assert admitted <= cap or sum(end[k] - start[k] for k in indexes) == 1


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(st.sampled_from("0123"), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1),
    st.integers(1, 16),
    st.integers(1, 1000),
)
def test_split_covers_each_range_exactly_with_bounded_pieces(raw, min_partitions, max_messages):
    ranges = {k: (min(a, b), max(a, b)) for k, (a, b) in raw.items()}
    # at most a few thousand pieces an example (a million of one message each took the
    # suite tens of seconds and tests nothing more)
    cap = max(max_messages, max(hi - lo for lo, hi in ranges.values()) // 2000)
    pieces = split(ranges, {}, min_partitions, max_messages=cap)
    for k, (lo, hi) in ranges.items():
        mine = sorted((p.start, p.end) for p in pieces if p.channel == int(k))
        covered = lo
        for a, b in mine:
            assert a == covered and b > a and b - a <= cap
            covered = b
        assert covered == (hi if hi > lo else lo)


def test_split_cuts_by_bytes_too():
    pieces = split({"0": (0, 100)}, {"0": 100 << 20}, None, max_bytes=32 << 20)
    assert len(pieces) == 4


@pytest.mark.parametrize("min_partitions", [None, 1, 3])
def test_split_gives_at_least_min_partitions(min_partitions):
    pieces = split({"0": (0, 10), "1": (5, 15)}, {}, min_partitions)
    assert len(pieces) >= (min_partitions or 1)


def test_with_the_slots_known_a_backlog_is_shared_by_them_not_cut_into_32_mb_tasks():
    """Spark's rule for files: 140 MB on 2 slots is 2 tasks of 70 MB (by size alone it
    would be 5 of 32 MB, each costing Spark a task's fixed start-up)."""
    assert len(split({"0": (0, 400)}, {"0": 140 << 20}, None)) == 5
    assert len(split({"0": (0, 400)}, {"0": 140 << 20}, None, slots=2)) == 2
    # no task over 128 MB, however few the slots
    assert len(split({"0": (0, 4000)}, {"0": 1 << 30}, None, slots=2)) == 8
    # nor under 4 MB, however many
    assert len(split({"0": (0, 400)}, {"0": 8 << 20}, None, slots=64)) == 2
    # one-row messages: the messages are shared by the slots too, not cut every 200,000
    # (1,000,000 messages of 100 B on 2 slots: 2 tasks, not 5)
    assert len(split({"0": (0, 1_000_000)}, {"0": 100 << 20}, None)) == 5
    assert len(split({"0": (0, 1_000_000)}, {"0": 100 << 20}, None, slots=2)) == 2
    assert len(split({"0": (0, 600_000)}, {"0": 60 << 20}, None, slots=2)) == 2
    # up to 2,000,000 a task however few the slots, never below 200,000 however many;
    # minPartitions still holds
    assert len(split({"0": (0, 10_000_000)}, {"0": 100 << 20}, None, slots=2)) == 5
    assert len(split({"0": (0, 600_000)}, {"0": 8 << 20}, None, slots=64)) == 3
    assert len(split({"0": (0, 400)}, {"0": 140 << 20}, 6, slots=2)) == 6


@settings(max_examples=examples(200), deadline=None)
@given(
    st.dictionaries(st.sampled_from("0123"), st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1),
    st.integers(0, 1 << 34),
    st.integers(1, 256),
)
def test_split_with_slots_covers_each_range_exactly(raw, total_bytes, slots):
    ranges = {k: (min(a, b), max(a, b)) for k, (a, b) in raw.items()}
    nbytes = {k: total_bytes // len(ranges) for k in ranges}
    pieces = split(ranges, nbytes, None, slots=slots)
    for k, (lo, hi) in ranges.items():
        mine = sorted((p.start, p.end) for p in pieces if p.channel == int(k))
        covered = lo
        for a, b in mine:
            assert a == covered and b > a
            covered = b
        assert covered == (hi if hi > lo else lo)


# -- minRowsPerTrigger / maxTriggerDelay ------------------------------------------------------

from spark_zmq.source.planner import holds_back  # noqa: E402

_rows = st.integers(min_value=0, max_value=10_000)
_min = st.one_of(st.none(), st.integers(min_value=1, max_value=10_000))
_seconds = st.floats(min_value=0, max_value=10_000, allow_nan=False)


@settings(max_examples=examples(300))
@given(_rows, _min, _seconds, _seconds, st.booleans())
def test_a_batch_waits_only_below_min_rows_and_inside_the_delay(pending, min_rows, waited, delay, available_now):
    held = holds_back(pending, min_rows, waited, delay, available_now)
    # Kafka's rule: wait while fewer than minOffsetsPerTrigger are there and maxTriggerDelay has not passed
    expected = min_rows is not None and not available_now and 0 < pending < min_rows and waited < delay
    assert held == expected


@settings(max_examples=examples(100))
@given(_rows, _min, _seconds, _seconds)
def test_trigger_available_now_and_an_unset_minimum_are_never_held(pending, min_rows, waited, delay):
    assert not holds_back(pending, min_rows, waited, delay, available_now=True)
    assert not holds_back(pending, None, waited, delay)


@settings(max_examples=examples(100))
@given(st.integers(min_value=1, max_value=10_000), _seconds, st.data())
def test_enough_rows_or_enough_waiting_always_releases_the_batch(min_rows, delay, data):
    enough = data.draw(st.integers(min_value=min_rows, max_value=min_rows + 10_000))
    assert not holds_back(enough, min_rows, 0.0, delay)
    waited = data.draw(st.floats(min_value=delay, max_value=delay + 10_000, allow_nan=False))
    assert not holds_back(max(1, min_rows - 1), min_rows, waited, delay)
