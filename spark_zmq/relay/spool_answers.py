"""The answers of a relay's control requests that are built from its spool and its readers
(``SpoolAnswers``, a part of ``Relay``): ``hello``, ``readers``, the state, the descriptions
of the spool and of ranges, and the ops about one channel's offsets.

Why its own module: building each answer from the channels' indexes, within what the spool
has written, is a job apart from the service itself (``server``: the port, the dispatch of
requests under a reader's lease, freeing and retention, the relay's life).
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from ..ingest.config import IngestConfig
from ..ingest.runtime import IngestRuntime, describe_range
from .messages import (
    AdvanceRequest,
    CountAnswer,
    CountRequest,
    DescribeAnswer,
    DescribeRequest,
    Done,
    EndWithinAnswer,
    EndWithinRequest,
    HelloAnswer,
    LocateAnswer,
    LocateRequest,
    LostAnswer,
    LostRequest,
    RangeDescription,
    ReaderEntry,
    ReadersAnswer,
    RelayDescription,
    Retention,
    StateAnswer,
    WireLoss,
)
from .readers import Readers

__all__ = ["SpoolAnswers", "Answer"]

#: the requests about one channel's offsets
_ChannelRequest = CountRequest | EndWithinRequest | LostRequest | AdvanceRequest | LocateRequest


class Answer(Protocol):
    """Any answer type of ``messages``: the service only needs its JSON."""

    def to_wire(self) -> dict[str, Any]: ...


class SpoolAnswers:
    """The answers ``Relay`` builds from its spool (``ingest``) and its readers, and the check
    that the offsets a request names are within what the spool has written."""

    # what this part uses of ``Relay``, which sets it (annotations only: nothing at run time)
    config: IngestConfig
    ingest: IngestRuntime
    readers: Readers
    control_requests: int
    retention_bytes: int | None
    retention_s: float | None

    def _describe_ranges(self, request: DescribeRequest) -> DescribeAnswer:
        """Per channel asked: what ``COUNT``, ``LOST`` and ``LOCATE`` answer for its range."""
        channels = self.ingest.spool.channels
        if len(request.ranges) > len(channels):
            raise ValueError("bad request: 'ranges' must be an object {channel: [start, end]}")
        out = {}
        for channel, (start, end) in request.ranges.items():
            if channel >= len(channels):
                raise ValueError(
                    f"bad request: range {str(channel)!r}: {[start, end]!r} (the relay has {len(channels)} channels)"
                )
            self._within_written(channel, start, end)
            out[channel] = RangeDescription.of(describe_range(channels[channel], start, end), start, end)
        return DescribeAnswer(out)

    def _channel_op(self, request: _ChannelRequest, reader: str) -> Answer:
        """The ops about one channel's offsets (``reader``: the name asking, under its lease)."""
        channels = self.ingest.spool.channels
        channel = request.channel
        if channel >= len(channels):
            raise ValueError(f"bad request: channel {channel} (the relay has {len(channels)} channels)")
        log_ = channels[channel]
        if isinstance(request, AdvanceRequest):  # at most MAX_ADVANCE (``AdvanceRequest.from_wire``)
            # a reader renumbers only what no other registered reader still needs: the
            # offsets skipped would be data loss to every reader behind them
            needing = (
                self.readers.behind(reader, channel, request.offset) if request.offset > log_.next_offset else None
            )
            if needing is not None:
                other, committed = needing
                raise ValueError(
                    f"refused: advance of channel {channel} to offset {request.offset} would skip offsets "
                    f"{max(committed, log_.next_offset)}..{request.offset} that reader {other!r} of this relay has "
                    f"not read (it has committed up to {committed}); a relay renumbers a channel only when no other "
                    "registered reader needs the offsets skipped"
                )
            log_.advance_to(request.offset)
            return Done()
        if isinstance(request, LocateRequest):
            self._within_written(channel, request.offset)
            return LocateAnswer(log_.locate(request.offset))
        start, end = request.start, request.end
        self._within_written(channel, start, end)
        index = log_.snapshot()
        if isinstance(request, CountRequest):
            return CountAnswer(*index.count_between(start, end))
        if isinstance(request, EndWithinRequest):
            return EndWithinAnswer(index.end_within(start, end, request.rows, request.bytes))
        # protocol 1's form of a loss, whatever the reader's type for it: [first, end, words]
        return LostAnswer([WireLoss.of(r, (start, end)) for r in index.lost_within(start, end)])

    def _within_written(self, channel: int, *offsets: int) -> None:
        """Refuse offsets past what ``channel``'s spool has written, naming the highest asked
        and the latest. Answered, they would read as zero messages, no loss and no place: a
        batch planned over them would hold nothing, and its offsets would name other
        messages once those arrive. No reader needs them: it plans up to the latest the
        relay reported, and moves a checkpoint that is ahead of a recreated spool past it
        with ``advance`` after counting only what the spool holds."""
        latest = self.ingest.spool.channels[channel].next_offset
        asked = max(offsets)
        if asked > latest:
            raise ValueError(
                f"bad request: offset {asked} of channel {channel} is past what the spool has written (latest {latest})"
            )

    def _hello(self, reader: str) -> HelloAnswer:
        """What anyone who reaches ``--listen`` may know: never where the spool is."""
        spool = self.ingest.spool
        return HelloAnswer(
            spool.spool_id, len(spool.channels), self.config.format, self.readers.held(reader), self.control_requests
        )

    def _list_readers(self) -> ReadersAnswer:
        """The registered readers, with what each has yet to read (``behind``: messages
        between its committed offset and the latest, per channel) and the offsets freed
        before it committed them (``lost``), and the relay's retention."""
        channels = self.ingest.spool.channels
        latest, earliest = [c.next_offset for c in channels], [c.earliest for c in channels]
        readers = []
        for reader in self.readers.describe():
            committed: list[int] = reader["committed"]
            behind = [
                channels[c].snapshot().count_between(max(offset, earliest[c]), latest[c])[0]
                if latest[c] > offset
                else 0
                for c, offset in enumerate(committed)
            ]
            lost = [max(0, earliest[c] - offset) for c, offset in enumerate(committed)]
            readers.append(
                ReaderEntry(
                    reader["name"], committed, reader["registered"], reader["held"], reader["idle"], behind, lost
                )
            )
        return ReadersAnswer(
            readers,
            latest,
            earliest,
            self.ingest.spool.spool_id,
            Retention(self.retention_bytes, self.retention_s),
            sum(c.size_bytes for c in channels),
        )

    def _describe(self, reader: str) -> RelayDescription:
        spool = self.ingest.spool
        return RelayDescription(
            spool.spool_id,
            len(spool.channels),
            spool.spool_dir,
            spool.owner_id,
            self.config.format,
            self.config.pattern,
            [str(e) for e in self.config.endpoints],
            self.readers.held(reader),
            reader,
            self.control_requests,
        )

    def _errors(self) -> list[str]:
        """The receivers' failures, naming each one's channel and endpoint."""
        return [
            f"channel {receiver.log.channel} ({self.config.endpoints[receiver.log.channel]}): {receiver.error!r}"
            for receiver in self.ingest.receivers
            if receiver.error is not None
        ]

    def _state(self, reader: str) -> StateAnswer:
        spool = self.ingest.spool
        last = max([r.last_receive for r in self.ingest.receivers], default=time.monotonic())
        return StateAnswer(
            [c.next_offset for c in spool.channels],
            [c.earliest for c in spool.channels],
            self._errors(),
            time.monotonic() - last,
            self.ingest.rejected_handshakes(),
            self.ingest.broken_connections(),
            self.readers.committed(reader),
        )
