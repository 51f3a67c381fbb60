"""Exactly-once on start and restart: which offsets a micro-batch may plan, given Spark's
offsets and the spool.

These are the rules behind docs/architecture.md, "2. Offsets and the spool" and
"6. Guarantees": every message the connector spooled reaches Spark exactly once per
checkpointed query, an offset never names two messages, and what cannot be delivered is
data loss reported through the one ``LossPolicy`` (``failOnDataLoss``), never silent.
Spark hands the reader offsets from its checkpoint on every call (``latestOffset``'s
start, ``partitions``' start and end, a restarted query's last batch); each is checked
against what the ingest reports of its spool before anything is planned or read:

- ``ExactlyOnce.reconcile``: the checkpoint names the same channels, the same spool, and
  a spool behind it continues numbering after it;
- ``ExactlyOnce.open``: the receivers start only after that check;
- ``ExactlyOnce.resume``: a start below the spool's earliest offset is loss;
- ``ExactlyOnce.readable``: a batch planned on another spool reads nothing, offsets below
  the earliest are loss, and so are the spool's own losses inside a range;
- ``ExactlyOnce.first_offsets``: where a query without a checkpoint begins.

No Spark here (``tests/test_layers.py`` keeps it so): the rules take an ingest
(``source.reader_ingest.Ingest``: its channels' next and earliest offsets, the spool's id) and
plain offsets, so ``tests/source/test_exactly_once.py`` drives each rule directly. The
arithmetic is in plain functions (``is_foreign``, ``skip_freed``) for the same reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from ..ingest.loss import DataLossError, LossPolicy, LostRange
from ..ingest.runtime import RangeInfo
from .offsets import ChannelOffsets

if TYPE_CHECKING:
    from ..options import SourceOptions
    from .reader_ingest import Ingest

__all__ = ["ExactlyOnce", "is_foreign", "skip_freed"]

log = logging.getLogger(__name__)


def is_foreign(checkpointed: str | None, spool_id: str) -> bool:
    """Whether offsets that name spool ``checkpointed`` number another spool than
    ``spool_id``. The id is minted when a spool directory is created, so a different one
    means the directory was deleted and recreated or belongs to another query: the same
    offset there names another message. Offsets written before they named their spool
    (``None``) are taken as this spool's: the only way such a checkpoint could be read."""
    return checkpointed is not None and checkpointed != spool_id


def skip_freed(start: int, earliest: int, end: int | None = None) -> tuple[int, tuple[int, int] | None]:
    """Where reading from ``start`` can begin on a spool that starts at ``earliest``, and
    the offsets ``(first, end)`` it cannot give, if any.

    Offsets below ``earliest`` were released (committed by an earlier run of the query,
    or the spool was pruned or deleted) while the checkpoint still points at them: an old
    copy of a checkpoint, a recreated spool. They are data loss, never re-read from
    elsewhere and never renumbered. With ``end`` (a planned range ``[start, end)``), the
    loss and the new start stay within the range."""
    if start >= earliest:
        return start, None
    resume = earliest if end is None else min(end, earliest)
    return resume, (start, resume)


class ExactlyOnce:
    """The driver's checks of Spark's offsets against its ingest, with the loss policy
    they report to and what they remember between calls (the foreign spools already
    warned about, so a ``failOnDataLoss=false`` query says so once, not every trigger).

    ``option`` names the option that defines the channels (``endpoints`` or ``relays``),
    for the error when a checkpoint's channels differ."""

    def __init__(self, loss: LossPolicy, option: str) -> None:
        self.loss = loss
        self.option = option
        self._foreign_spools_seen: set[str] = set()

    @classmethod
    def for_options(cls, options: SourceOptions, loss: LossPolicy) -> ExactlyOnce:
        return cls(loss, "relays" if options.relays else "endpoints")

    def open(self, open_ingest: Callable[[], Ingest], checkpointed: Iterable[ChannelOffsets]) -> Ingest:
        """A new ingest, checked against every offset Spark passed, then started.

        The order is the rule: a spool behind the checkpoint must continue numbering after
        it before its receivers take a message, or a new message would get an offset Spark
        has already seen (until ``start`` libzmq queues what arrives; section 2, "Why
        numbering is safe across failures"). An ingest that fails the check is stopped,
        so its sockets do not hold the endpoints of a query that is not running."""
        ingest = open_ingest()
        try:
            for offsets in checkpointed:
                self.reconcile(ingest, offsets)
        except BaseException:
            ingest.stop()
            raise
        ingest.start()
        return ingest

    def reconcile(self, ingest: Ingest, offsets: ChannelOffsets) -> None:
        """Check offsets from Spark against the spool: the same channels, the same spool,
        and a spool behind them continues numbering after them.

        - Other channels: the offsets of one channel would be read on another; a query's
          endpoints or relays cannot change across restarts (a ``ValueError``).
        - Another spool (``is_foreign``): what the checkpointed spool held and Spark had not
          processed is gone: a ``DataLossError``, or with ``failOnDataLoss=false`` a
          warning (once per foreign spool) and the query continues on this spool after the
          checkpoint's offsets, this spool's messages below them counted as lost (they
          will never be read: their offsets are the old spool's, already in Spark).
        - Ahead of the spool (a crash without ``spoolFsync`` lost the tail, or another
          spool): the channel continues numbering at the checkpoint's offset, never below.
        """
        channels = offsets.to_channel_dict()
        expected = [str(c) for c in range(len(ingest.channels))]
        if set(channels) != set(expected):
            raise ValueError(
                f"the checkpoint's offsets name channels {sorted(channels, key=int)} but option {self.option!r} "
                f"({', '.join(ingest.channel_names)}) defines channels {expected}: "
                f"a query's {self.option} cannot change across restarts; use a new checkpointLocation"
            )
        theirs, ours = offsets.spool, ingest.spool_id
        foreign = is_foreign(theirs, ours)
        if foreign and theirs not in self._foreign_spools_seen:
            message = (
                f"the checkpoint's offsets {channels} refer to spool {theirs}, but the spool "
                f"{ingest.where} is spool {ours} (it was deleted and recreated, or belongs to "
                "another query): the messages of the checkpointed spool that Spark had not processed are lost"
            )
            if self.loss.fail:
                raise DataLossError(
                    message + ". Set failOnDataLoss=false to continue on this spool after the checkpoint's offsets, "
                    "or start the query with a new checkpointLocation"
                )
            log.warning(
                "%s; continuing on spool %s after the checkpoint's offsets (failOnDataLoss=false)", message, ours
            )
            assert theirs is not None  # (``foreign``)
            self._foreign_spools_seen.add(theirs)
        if foreign:
            ingest.latest()  # what a relay has written now (its channels' next_offset), for the count below
        for channel_log in ingest.channels:
            wanted = offsets[channel_log.channel]
            if wanted > channel_log.next_offset:
                if ingest.started and not foreign:
                    log.warning(
                        "channel %d: the checkpoint is at offset %d, ahead of the spool's %d: the spool lost "
                        "its tail (a crash without spoolFsync?)",
                        channel_log.channel,
                        wanted,
                        channel_log.next_offset,
                    )
                if foreign:
                    # Messages this (other) spool numbered below the checkpoint will never be read.
                    # It holds none past its latest, and a relay refuses to count past it (an
                    # answer there would plan batches over messages that do not exist).
                    earliest, held = channel_log.earliest, min(wanted, channel_log.next_offset)
                    below = channel_log.snapshot().count_between(earliest, held)[0] if held > earliest else 0
                    if below:
                        self.loss.lose(
                            LostRange(
                                channel_log.channel,
                                earliest,
                                wanted,
                                messages=below,
                                text=f"channel {channel_log.channel}: {below} messages spool {ours} holds below the "
                                f"checkpoint's offset {wanted}",
                            )
                        )
                channel_log.advance_to(wanted)

    def resume(self, ingest: Ingest, begin: ChannelOffsets) -> ChannelOffsets:
        """Where the next batch starts when Spark resumes at ``begin`` (``latestOffset``):
        each channel at ``begin``, or at the spool's earliest offset when ``begin`` is below
        it, the offsets in between reported lost (``skip_freed``)."""
        for channel_log in ingest.channels:
            channel = channel_log.channel
            earliest = channel_log.earliest
            start, lost = skip_freed(begin[channel], earliest)
            if lost is not None:
                self.loss.lose(
                    LostRange(
                        channel,
                        lost[0],
                        lost[1],
                        text=f"Spark resumes channel {channel} at offset {lost[0]}, but the spool "
                        f"{ingest.where} starts at {earliest} (spool deleted or pruned)",
                    )
                )
                begin = begin.replace(channel, start)
        return begin

    def readable(
        self, ingest: Ingest, begin: ChannelOffsets, finish: ChannelOffsets
    ) -> dict[int, tuple[int, int]] | None:
        """The ranges ``[start, end)`` per channel that a batch from ``begin`` to ``finish``
        can read (``partitions``; channels with nothing to read left out), or ``None``
        when the batch reads nothing at all.

        - A batch planned on another spool (Spark re-runs the last planned batch after a
          restart, with the ends it wrote to its offset log): its messages are not in this
          spool, whatever offsets this spool has given out since, so nothing is read
          (``None``) and every offset of it is lost. Reading this spool's offsets instead
          would deliver other messages under the batch's offsets.
        - Offsets below the spool's earliest are lost (``skip_freed``, within the range).
        """
        spool_id = ingest.spool_id
        if is_foreign(finish.spool, spool_id):
            why = (
                f"the batch {begin.to_channel_dict()}..{finish.to_channel_dict()} was planned on spool "
                f"{finish.spool}, which the spool {ingest.where} no longer is (it is spool {spool_id})"
            )
            for channel, (lo, hi) in begin.ranges_to(finish).items():
                if hi > lo:
                    self.loss.lose(LostRange(channel, lo, hi, text=why))
            return None
        ranges: dict[int, tuple[int, int]] = {}
        for channel_log in ingest.channels:
            channel = channel_log.channel
            lo, hi = begin.get(channel, finish[channel]), finish[channel]
            if hi <= lo:
                continue
            earliest = channel_log.earliest
            lo, lost = skip_freed(lo, earliest, hi)
            if lost is not None:
                self.loss.lose(
                    LostRange(
                        channel,
                        lost[0],
                        lost[1],
                        text=f"offsets {lost[0]}..{lost[1]} of channel {channel} are no longer in the spool "
                        f"{ingest.where}, which starts at {earliest}",
                    )
                )
            if hi > lo:
                ranges[channel] = (lo, hi)
        return ranges

    def spool_losses(self, ranges: Mapping[int, tuple[int, int]], described: Mapping[int, RangeInfo]) -> None:
        """Report the losses the spool knows of inside each range (records recovery could
        not read, a relay's own losses), cut to the range: a batch reads past them, and
        the policy decides whether that is an error (section 2: a record that cannot be
        read is a gap, never a shift)."""
        for channel, (lo, hi) in ranges.items():
            for lost in described[channel].lost:
                self.loss.lose(lost.within(lo, hi))

    def first_offsets(self, ingest: Ingest, starting_offsets: str, starting_timestamp_ms: int | None) -> ChannelOffsets:
        """Where a query without a checkpoint begins, on this spool.

        ``startingTimestamp`` takes precedence over ``startingOffsets``: each channel's
        first message received at or after it that the spool still holds; freed messages
        received at or after it are data loss (the user asked for them). Else ``earliest``,
        or ``latest``: where the spool ended when the query's ingest opened, so what
        arrives while Spark plans the first batch is not skipped."""
        if starting_timestamp_ms is not None:
            offsets = {}
            for channel, (offset, lost) in sorted(ingest.start_at_time(starting_timestamp_ms).items()):
                if lost is not None:
                    self.loss.lose(lost)
                offsets[str(channel)] = offset
            return ChannelOffsets(offsets, ingest.spool_id)
        return ChannelOffsets(
            ingest.earliest() if starting_offsets == "earliest" else ingest.start_offsets, ingest.spool_id
        )
