"""The exactly-once rules (``source/exactly_once.py``) without Spark: what a micro-batch may
plan on start and restart, given Spark's offsets and the spool (docs/architecture.md,
"2. Offsets and the spool" and "6. Guarantees").

Three levels, each failing when its rule is removed: the arithmetic as plain functions
(Hypothesis properties), every rule on a small in-memory ingest of plain values (no
files, no sockets), and the rules that depend on a real spool on ``LocalIngest`` and
``RelayIngest`` (receiver processes) built from ``SourceOptions`` with a spool directory
of the test's own, as the reader builds them. The same behaviours through a Spark query
are in test_source_failure.py and test_starting_timestamp.py."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples, free_ports, wait_until

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.loss import DataLossError, LossPolicy, LostRange
from spark_zmq.ingest.runtime import RangeInfo
from spark_zmq.options import SourceOptions
from spark_zmq.source.exactly_once import ExactlyOnce, is_foreign, skip_freed
from spark_zmq.source.offsets import ChannelOffsets
from spark_zmq.source.reader_ingest import open_ingest

pytestmark = pytest.mark.timeout(120)

offsets_ = st.integers(min_value=0, max_value=1 << 40)


# -- the arithmetic ------------------------------------------------------------------------------


@settings(max_examples=examples(300))
@given(start=offsets_, earliest=offsets_)
def test_a_resume_below_the_spool_starts_at_its_earliest_and_loses_exactly_the_offsets_between(start, earliest):
    resume, lost = skip_freed(start, earliest)
    assert resume == max(start, earliest)
    assert lost == ((start, earliest) if start < earliest else None)


@settings(max_examples=examples(300))
@given(start=offsets_, length=st.integers(min_value=1, max_value=1 << 20), earliest=offsets_)
def test_a_range_partly_freed_splits_into_lost_and_read_offsets_without_a_gap_or_overlap(start, length, earliest):
    end = start + length
    resume, lost = skip_freed(start, earliest, end)
    assert start <= resume <= end
    assert resume >= earliest or resume == end, "read offsets below the spool's earliest"
    if lost is None:
        assert resume == start
    else:
        assert lost == (start, resume) and resume > start  # lost + read == [start, end)


@settings(max_examples=examples(100))
@given(a=st.text(min_size=1, max_size=8), b=st.text(min_size=1, max_size=8))
def test_offsets_number_another_spool_only_when_they_name_a_different_one(a, b):
    assert is_foreign(a, b) == (a != b)
    assert not is_foreign(None, b), "a checkpoint from before offsets named their spool is read on this spool"


# -- every rule on an in-memory ingest -----------------------------------------------------------


@dataclass
class Index:
    """A channel's index: message i is at offset ``first + i``, every offset one message,
    except ``gaps`` (offsets that hold none)."""

    first: int
    end: int
    gaps: frozenset = frozenset()

    def count_between(self, start: int, end: int) -> tuple[int, int]:
        n = sum(1 for o in range(max(start, self.first), min(end, self.end)) if o not in self.gaps)
        return n, n


@dataclass
class MemoryChannel:
    channel: int
    next_offset: int
    earliest: int
    calls: list = field(default_factory=list)
    gaps: frozenset = frozenset()

    def snapshot(self) -> Index:
        return Index(self.earliest, self.next_offset, self.gaps)

    def advance_to(self, offset: int) -> None:
        self.calls.append(("advance_to", self.channel, offset))
        self.next_offset = max(self.next_offset, offset)


class MemoryIngest:
    """The part of ``source.reader_ingest.Ingest`` the rules use, over plain values."""

    def __init__(
        self, spool_id: str = "ours", channels: tuple[tuple[int, int], ...] = ((0, 10),), at_time: dict | None = None
    ) -> None:
        self.calls: list = []
        self.channels = [MemoryChannel(c, nxt, earliest, self.calls) for c, (earliest, nxt) in enumerate(channels)]
        self.spool_id = spool_id
        self.where = "'/memory'"
        self.channel_names = [f"tcp://host:{c}" for c in range(len(channels))]
        self.started = False
        self.start_offsets = self.latest()
        self.at_time = at_time or {}

    def start(self) -> None:
        self.calls.append(("start",))
        self.started = True

    def stop(self) -> None:
        self.calls.append(("stop",))

    def latest(self) -> dict[str, int]:
        return {str(c.channel): c.next_offset for c in self.channels}

    def earliest(self) -> dict[str, int]:
        return {str(c.channel): c.earliest for c in self.channels}

    def start_at_time(self, timestamp_ms: int) -> dict:
        return self.at_time


def rules(fail: bool = True, option: str = "endpoints") -> ExactlyOnce:
    return ExactlyOnce(LossPolicy(fail, counted=True), option)


def test_a_checkpoint_with_other_channels_is_refused_naming_the_option():
    ingest = MemoryIngest(channels=((0, 10), (0, 10)))
    with pytest.raises(ValueError, match=r"channels \['0'\].*option 'relays'.*defines channels \['0', '1'\]"):
        rules(option="relays").reconcile(ingest, ChannelOffsets({0: 5}, "ours"))


def test_a_checkpoint_of_another_spool_is_data_loss_and_changes_nothing():
    ingest = MemoryIngest(channels=((0, 10),))
    with pytest.raises(DataLossError, match="refer to spool theirs.*is spool ours.*failOnDataLoss=false"):
        rules().reconcile(ingest, ChannelOffsets({0: 500}, "theirs"))
    assert ingest.channels[0].next_offset == 10 and not ingest.calls


def test_without_fail_on_data_loss_another_spool_continues_after_the_checkpoint_counting_what_it_skips(caplog):
    """The new spool's messages below the checkpoint's offset are lost (their offsets are
    the old spool's, already in Spark); it numbers on from the checkpoint; warned once."""
    ingest = MemoryIngest(channels=((2, 10), (0, 600)))
    checker = rules(fail=False)
    with caplog.at_level(logging.WARNING, logger="spark_zmq.source.exactly_once"):
        checker.reconcile(ingest, ChannelOffsets({0: 500, 1: 400}, "theirs"))
        checker.reconcile(ingest, ChannelOffsets({0: 500, 1: 400}, "theirs"))
    assert [c.next_offset for c in ingest.channels] == [500, 600], "channel 1 is past the checkpoint: unchanged"
    assert checker.loss.lost == 8, "channel 0's offsets 2..10 are messages that will never be read"
    assert sum("refer to spool theirs" in r.getMessage() for r in caplog.records) == 1


def test_a_checkpoint_ahead_of_its_spool_continues_numbering_after_it(caplog):
    """The spool lost its tail (no spoolFsync): offsets Spark has seen are never given to
    other messages; no loss (the checkpoint's messages were delivered)."""
    ingest = MemoryIngest(channels=((0, 10), (0, 10)))
    ingest.started = True
    checker = rules()
    with caplog.at_level(logging.WARNING, logger="spark_zmq.source.exactly_once"):
        checker.reconcile(ingest, ChannelOffsets({0: 25, 1: 7}, "ours"))
    assert [c.next_offset for c in ingest.channels] == [25, 10]
    assert checker.loss.lost == 0
    assert "ahead of the spool's 10" in caplog.text


def test_a_checkpoint_that_names_no_spool_is_read_as_this_spools():
    ingest = MemoryIngest(channels=((0, 10),))
    rules().reconcile(ingest, ChannelOffsets({0: 30}))
    assert ingest.channels[0].next_offset == 30


def test_the_receivers_start_only_after_the_checkpoint_is_reconciled():
    ingest = MemoryIngest(channels=((0, 10),))
    assert rules().open(lambda: ingest, [ChannelOffsets({0: 20}, "ours")]) is ingest
    assert ingest.calls == [("advance_to", 0, 20), ("start",)]


def test_an_ingest_failing_the_check_is_stopped_and_never_started():
    ingest = MemoryIngest(channels=((0, 10),))
    with pytest.raises(DataLossError):
        rules().open(lambda: ingest, [ChannelOffsets({0: 20}, "theirs")])
    assert ingest.calls == [("stop",)]


@pytest.mark.parametrize("fail", [True, False])
def test_a_resume_below_the_spool_follows_fail_on_data_loss(fail):
    ingest = MemoryIngest(channels=((100, 150), (0, 150)))
    checker = rules(fail)
    begin = ChannelOffsets({0: 40, 1: 40}, "ours")
    if fail:
        with pytest.raises(DataLossError, match="resumes channel 0 at offset 40.*starts at 100"):
            checker.resume(ingest, begin)
        return
    assert checker.resume(ingest, begin) == ChannelOffsets({0: 100, 1: 40}, "ours")
    assert checker.loss.lost == 60


def test_a_resume_at_or_above_the_earliest_offset_is_unchanged_and_no_loss():
    ingest = MemoryIngest(channels=((100, 150),))
    checker = rules()
    assert checker.resume(ingest, ChannelOffsets({0: 100}, "ours")) == ChannelOffsets({0: 100}, "ours")


@pytest.mark.parametrize("fail", [True, False])
def test_a_batch_planned_on_another_spool_reads_nothing_and_loses_all_of_it(fail):
    ingest = MemoryIngest(channels=((0, 500), (0, 500)))
    checker = rules(fail)
    begin, finish = ChannelOffsets({0: 10, 1: 20}, "theirs"), ChannelOffsets({0: 30, 1: 20}, "theirs")
    if fail:
        with pytest.raises(DataLossError, match="planned on spool theirs.*it is spool ours"):
            checker.readable(ingest, begin, finish)
        return
    assert checker.readable(ingest, begin, finish) is None
    assert checker.loss.lost == 20


def test_a_batch_on_this_spool_reads_its_ranges_from_the_earliest_offset():
    ingest = MemoryIngest(channels=((100, 500), (0, 500), (300, 500)))
    checker = rules(False)
    begin, finish = ChannelOffsets({0: 50, 1: 20, 2: 0}, "ours"), ChannelOffsets({0: 150, 1: 20, 2: 200}, "ours")
    assert checker.readable(ingest, begin, finish) == {0: (100, 150)}, "channel 1 empty, channel 2 wholly freed"
    assert checker.loss.lost == 50 + 200


def test_a_batch_partly_below_the_spool_fails_naming_the_offsets():
    ingest = MemoryIngest(channels=((100, 500),))
    with pytest.raises(DataLossError, match="offsets 50..100 of channel 0 are no longer in the spool"):
        rules().readable(ingest, ChannelOffsets({0: 50}, "ours"), ChannelOffsets({0: 150}, "ours"))


def test_the_spools_own_losses_count_only_within_the_batch():
    checker = rules(False)
    described = {0: RangeInfo(0, 0, [LostRange(0, 10, 40, "torn record")], ())}
    checker.spool_losses({0: (20, 30)}, described)
    assert checker.loss.lost == 10
    with pytest.raises(DataLossError, match="torn record"):
        rules().spool_losses({0: (20, 30)}, described)


def test_a_query_without_a_checkpoint_starts_where_the_options_say():
    ingest = MemoryIngest(channels=((5, 10), (0, 7)))
    ingest.channels[0].next_offset = 12  # arrived after the ingest opened
    checker = rules()
    assert checker.first_offsets(ingest, "earliest", None) == ChannelOffsets({0: 5, 1: 0}, "ours")
    assert checker.first_offsets(ingest, "latest", None) == ChannelOffsets({0: 10, 1: 7}, "ours")


def test_a_starting_timestamp_wins_over_starting_offsets_and_freed_messages_after_it_are_loss():
    lost = LostRange(0, 3, 5, "freed", messages=2)
    ingest = MemoryIngest(channels=((5, 10), (0, 7)), at_time={0: (5, lost), 1: (4, None)})
    checker = rules(False)
    assert checker.first_offsets(ingest, "earliest", 1000) == ChannelOffsets({0: 5, 1: 4}, "ours")
    assert checker.loss.lost == 2
    with pytest.raises(DataLossError, match="freed"):
        rules().first_offsets(ingest, "latest", 1000)


# -- the rules on real ingests -------------------------------------------------------------------


RECEIVERS = ["threads", "processes"]


def _options(tmp_path, receivers: str, port: int, **extra: str) -> SourceOptions:
    return SourceOptions.parse(
        {
            "endpoints": f"@tcp://127.0.0.1:{port}",
            "format": "raw",
            "receivers": receivers,
            "spoolDir": str(tmp_path / "spool"),
            "receiverLingerSeconds": "0",
            **extra,
        }
    )


def _stop(ingest) -> None:
    ingest.stop(force=True) if hasattr(ingest, "processes") else ingest.stop()


def _spool_id_of_a_deleted_spool(tmp_path) -> str:
    """The id of a spool made at the test's spoolDir, then deleted. Made by receiver threads
    whatever the test's receivers: the same spool on disk, without starting (and stopping)
    receiver processes just to read its id."""
    ingest = open_ingest(_options(tmp_path, "threads", free_ports(1)[0]))
    try:
        return ingest.spool_id
    finally:
        _stop(ingest)
        shutil.rmtree(tmp_path / "spool")


@pytest.mark.parametrize("receivers", RECEIVERS)
def test_a_recreated_spool_is_detected_and_with_fail_on_data_loss_false_never_renumbers(tmp_path, receivers):
    old = _spool_id_of_a_deleted_spool(tmp_path)
    options = _options(tmp_path, receivers, free_ports(1)[0])
    checkpoint = ChannelOffsets({0: 500}, old)
    with pytest.raises(DataLossError, match=f"refer to spool {old}"):
        rules().open(lambda: open_ingest(options), [checkpoint])
    ingest = rules(False).open(lambda: open_ingest(options), [checkpoint])
    try:
        assert ingest.spool_id != old
        assert ingest.latest() == {"0": 500}
        assert rules(False).readable(ingest, ChannelOffsets({0: 400}, old), checkpoint) is None
    finally:
        _stop(ingest)


@pytest.mark.parametrize("receivers", RECEIVERS)
def test_messages_queued_before_the_start_are_numbered_after_a_checkpoint_ahead_of_the_spool(tmp_path, receivers):
    """A producer's messages wait in the bound socket while the reader checks the
    checkpoint; the receivers start after it, so the spool (behind the checkpoint) gives
    them offsets from the checkpoint's on, none Spark has seen."""
    port = free_ports(1)[0]
    options = _options(tmp_path, receivers, port)
    spool_id = _reopened_spool_id(options)

    def bound_with_messages_waiting():
        ingest = open_ingest(options)
        ctx = zmq.Context()
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{port}")
        for i in range(20):
            push.send(b"m-%d" % i)
        # in the receiving socket's queue: terminating the context returns once libzmq has
        # written every queued message to the connection (LINGER bounds the wait)
        push.close(linger=10_000)
        ctx.term()
        return ingest

    ingest = rules().open(bound_with_messages_waiting, [ChannelOffsets({0: 50}, spool_id)])
    try:
        wait_until(lambda: ingest.latest()["0"] >= 70, 30, "the 20 messages spooled")
        assert ingest.latest() == {"0": 70}
        described = ingest.describe({0: (0, 50)})
        assert described[0].rows == 0, "a message was numbered below the checkpoint"
    finally:
        _stop(ingest)


def _reopened_spool_id(options: SourceOptions) -> str:
    """The id of the spool ``options`` name, created empty (the spool a checkpoint was
    written against, after a crash lost its tail)."""
    ingest = open_ingest(options)
    try:
        return ingest.spool_id
    finally:
        _stop(ingest)


@pytest.mark.parametrize("fail", [True, False])
def test_a_checkpoint_below_a_released_spool_follows_fail_on_data_loss(tmp_path, fail):
    """An old copy of a checkpoint after the spool released what it points at: the batch
    Spark re-runs and the next one start at the spool's earliest offset, or fail."""
    options = _options(tmp_path, "threads", free_ports(1)[0], failOnDataLoss=str(fail).lower())
    ingest = open_ingest(options)
    try:
        log = ingest.channels[0]
        for n in range(3):
            log.append(messages_to_batch([b"m-%d-%d" % (n, i) for i in range(10)], None, "raw", 0))
            log.roll()
        ingest.release({"0": 20})
        assert log.earliest == 20
        checker = ExactlyOnce.for_options(options, LossPolicy.from_option(options.fail_on_data_loss, counted=True))
        old = ChannelOffsets({0: 5}, ingest.spool_id)
        checker.reconcile(ingest, old)
        if fail:
            with pytest.raises(DataLossError, match="resumes channel 0 at offset 5.*starts at 20"):
                checker.resume(ingest, old)
            with pytest.raises(DataLossError, match="offsets 5..20 of channel 0 are no longer"):
                checker.readable(ingest, old, ChannelOffsets({0: 25}, ingest.spool_id))
            return
        assert checker.resume(ingest, old) == ChannelOffsets({0: 20}, ingest.spool_id)
        assert checker.readable(ingest, old, ChannelOffsets({0: 25}, ingest.spool_id)) == {0: (20, 25)}
        assert checker.loss.lost == 15 + 15
    finally:
        ingest.stop()


def test_a_new_query_starts_at_the_spools_earliest_or_where_it_ended_when_the_ingest_opened(tmp_path):
    options = _options(tmp_path, "threads", free_ports(1)[0])
    ingest = open_ingest(options)
    try:
        ingest.channels[0].append(messages_to_batch([b"a", b"b"], None, "raw", 0))
        ingest.channels[0].roll()
    finally:
        ingest.stop()
    ingest = open_ingest(options)  # reopened with two messages spooled
    try:
        ingest.channels[0].append(messages_to_batch([b"c"], None, "raw", 0))
        checker = rules()
        assert checker.first_offsets(ingest, "earliest", None) == ChannelOffsets({0: 0}, ingest.spool_id)
        assert checker.first_offsets(ingest, "latest", None) == ChannelOffsets({0: 2}, ingest.spool_id)
    finally:
        ingest.stop()
