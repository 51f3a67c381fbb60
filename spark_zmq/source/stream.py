"""``spark.readStream.format("zmq")``: replayable offsets over brokerless ZeroMQ.

Offsets are ``{"<channel>": <next message number>, "spool": "<spool id>"}`` (see
``offsets.ChannelOffsets``, their codec). Spark writes them to its offset log before a
batch runs; the spool keeps every message until Spark commits past it. So a retried task, a lost executor or a driver
restarted from the checkpoint reads exactly the same messages for the same batch:
exactly-once into Spark for everything the connector received.

Every path that reads checks the checkpoint against the spool: ``latestOffset`` (the
start of the next batch), ``partitions`` (including the batch Spark re-runs after a
restart) and ``read`` (each task checks the spool id of every segment it opens). A
checkpoint paired with another or a recreated spool, a checkpoint behind the spool's
earliest offset and offsets the spool cannot read are a ``DataLossError`` that names the
channel, the offsets and the spool, or, with ``failOnDataLoss=false``, skipped, logged and
counted (``dataLoss`` in the query progress's ``latestOffset``): the option's
``ingest.loss.LossPolicy``, one on the driver and one in each read task. Never a
renumbering: a spool that is behind a checkpoint continues numbering after it.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Iterator, Mapping, Optional, Sequence, Union

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..ingest.fetch import FetchError, fetch_range
from ..ingest.loss import LossPolicy, LostRange
from ..ingest.spool_format import DataLossError
from ..ingest.spool_reader import coalesce, read_range, sees_spool
from ..options import SourceOptions
from .committed import CommittedOnly, kept_batches
from .decoders import decoder_for
from .ingest import Ingest, LocalIngest
from .partitions import SpoolRange
from .offsets import ChannelOffsets
from .locality import local_cores
from .planner import admit, holds_back, split
from .query_start import QueryStart
from .relays import RelayIngest

__all__ = ["ZmqStreamReader"]

log = logging.getLogger(__name__)


class ZmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the spool filled by the receivers."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        decoder_for(options, schema)  # validate early
        self._runtime: Optional[Ingest] = None
        self._pinned_end: Optional[ChannelOffsets] = None
        #: the end of the batch Spark planned last: what the progress's lag is measured from
        self._planned_end: Optional[ChannelOffsets] = None
        #: failOnDataLoss on the driver; what it skips is reported in the progress
        self._loss = LossPolicy.from_option(options.fail_on_data_loss, counted=True)
        self._foreign_spools_seen: set[str] = set()
        #: the task slots of a local master, once looked up (``_slots``); False: not yet
        self._local_slots: Union[int, None, bool] = False
        #: the first batch's start, kept in the spool directory until Spark commits a batch
        self._query_start = QueryStart(options.spool_dir)
        self._start_forgotten = False
        #: producer connections seen broken so far (each new one is logged at WARN)
        self._broken_seen = 0
        #: committedOnly: the runs the writing sink's commit records name (``committed``)
        self._committed = CommittedOnly(options.spool_dir) if options.committed_only else None
        #: when the last batch was planned (or the first offset call came): maxTriggerDelay's clock
        self._last_batch_at: Optional[float] = None

    # -- driver: the spool and the checkpoint ------------------------------------------------------

    def _ingest(self, *checkpointed: ChannelOffsets) -> Ingest:
        """The runtime, created on first use; every call checks the offsets Spark passed."""
        if self._runtime is None:
            relayed = self.options.relays or self.options.receivers == "processes"
            runtime: Ingest = RelayIngest(self.options) if relayed else LocalIngest(self.options)
            try:
                for offsets in checkpointed:
                    self._reconcile(runtime, offsets)
            except BaseException:
                runtime.stop()
                raise
            runtime.start()
            self._runtime = runtime
        else:
            for offsets in checkpointed:
                self._reconcile(self._runtime, offsets)
        self._runtime.raise_if_failed()
        return self._runtime

    def _reconcile(self, runtime: Ingest, offsets: ChannelOffsets) -> None:
        """Check offsets from Spark's checkpoint against the spool: same channels, same
        spool; a spool behind them continues numbering after them (never reusing an offset
        Spark has seen)."""
        channels = offsets.to_channel_dict()
        expected = [str(c) for c in range(len(runtime.channels))]
        source = "relays" if self.options.relays else "endpoints"
        if set(channels) != set(expected):
            raise ValueError(
                f"the checkpoint's offsets name channels {sorted(channels, key=int)} but option {source!r} "
                f"({', '.join(runtime.channel_names)}) defines channels {expected}: "
                f"a query's {source} cannot change across restarts; use a new checkpointLocation"
            )
        theirs, ours = offsets.spool, runtime.spool_id
        foreign = theirs is not None and theirs != ours
        if foreign and theirs not in self._foreign_spools_seen:
            message = (
                f"the checkpoint's offsets {channels} refer to spool {theirs}, but the spool "
                f"{runtime.where} is spool {ours} (it was deleted and recreated, or belongs to "
                "another query): the messages of the checkpointed spool that Spark had not processed are lost"
            )
            if self._loss.fail:
                raise DataLossError(
                    message + ". Set failOnDataLoss=false to continue on this spool after the checkpoint's offsets, "
                    "or start the query with a new checkpointLocation"
                )
            log.warning("%s; continuing on spool %s after the checkpoint's offsets (failOnDataLoss=false)", message, ours)
            assert theirs is not None  # (``foreign``)
            self._foreign_spools_seen.add(theirs)
        if foreign:
            runtime.latest()  # what a relay has written now (its channels' next_offset), for the count below
        for channel_log in runtime.channels:
            wanted = offsets[channel_log.channel]
            if wanted > channel_log.next_offset:
                if runtime.started and not foreign:
                    log.warning("channel %d: the checkpoint is at offset %d, ahead of the spool's %d: the spool lost "
                                "its tail (a crash without spoolFsync?)", channel_log.channel, wanted,
                                channel_log.next_offset)
                if foreign:
                    # Messages this (other) spool numbered below the checkpoint will never be read.
                    # It holds none past its latest, and a relay refuses to count past it (an
                    # answer there would plan batches over messages that do not exist).
                    earliest, held = channel_log.earliest, min(wanted, channel_log.next_offset)
                    below = channel_log.snapshot().count_between(earliest, held)[0] if held > earliest else 0
                    if below:
                        self._loss.lose(LostRange(
                            channel_log.channel, earliest, wanted, messages=below,
                            text=f"channel {channel_log.channel}: {below} messages spool {ours} holds below the "
                                 f"checkpoint's offset {wanted}"))
                channel_log.advance_to(wanted)

    # -- driver: offsets -----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint begins; the same answer on every call until
        Spark commits a batch, across restarts too (``query_start``)."""
        runtime = self._ingest()
        start = self._query_start.recall(runtime.spool_id, len(runtime.channels))
        if start is None:
            if self.options.starting_timestamp is not None:  # it takes precedence over startingOffsets
                start = ChannelOffsets(self._start_at_time(runtime, self.options.starting_timestamp), runtime.spool_id)
            else:
                start = ChannelOffsets(runtime.earliest() if self.options.starting_offsets == "earliest"
                                       else runtime.start_offsets, runtime.spool_id)
            self._query_start.remember(start)
        return start.to_dict()

    def _start_at_time(self, runtime: Ingest, timestamp_ms: int) -> dict[str, int]:
        """``startingTimestamp``: each channel's first message received at or after it that
        the spool still holds; freed messages received at or after it are data loss."""
        offsets = {}
        for channel, (offset, lost) in sorted(runtime.start_at_time(timestamp_ms).items()):
            if lost is not None:
                self._loss.lose(lost)
            offsets[str(channel)] = offset
        return offsets

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: the caps of maxRowsPerTrigger/maxBytesPerTrigger
        # still apply with ReadMinRows (latestOffset reads them from the options)
        if self.options.min_rows_per_trigger is not None:
            return ReadMinRows(self.options.min_rows_per_trigger)
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = ChannelOffsets.from_dict(start)
        runtime = self._ingest(begin)
        # Spark asks for the next batch only after the batch ending at ``start`` is in its
        # commit log, but calls commit() only once it has a next batch to run. Releasing
        # here is what lets a full spool drain when the receivers are the ones waiting.
        runtime.release(begin.to_channel_dict())
        self._warn_broken_connections(runtime)
        for channel_log in runtime.channels:
            channel, earliest = channel_log.channel, channel_log.earliest
            if begin[channel] < earliest:
                self._loss.lose(LostRange(
                    channel, begin[channel], earliest,
                    text=f"Spark resumes channel {channel} at offset {begin[channel]}, but the spool "
                         f"{runtime.where} starts at {earliest} (spool deleted or pruned)"))
                begin = begin.replace(channel, earliest)
        latest = self._pinned_end if self._pinned_end is not None else ChannelOffsets(runtime.latest())
        latest = latest.at_least(begin)
        if self._committed is not None:
            latest = ChannelOffsets(self._committed.clamp(runtime, begin, latest, self._spool_batches))
        now = time.monotonic()
        if self._last_batch_at is None:
            self._last_batch_at = now  # maxTriggerDelay counts from the query's start
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            # Spark passes one ReadLimit; a second cap configured through options still applies.
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_rows_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else None
            indexes = {c.channel: c.snapshot() for c in runtime.channels}
            pending = {c: (lo, hi) for c, (lo, hi) in begin.ranges_to(latest).items() if hi > lo}
            counted = {c: (0, 0) for c in latest}  # nothing between start and latest: nothing to ask
            if pending:
                counted.update((c, (info.rows, info.bytes)) for c, info in runtime.describe(pending).items())
            if holds_back(sum(rows for rows, _ in counted.values()), min_rows, now - self._last_batch_at,
                          self.options.max_trigger_delay, available_now=self._pinned_end is not None):
                end = begin  # Spark runs no batch for an end equal to its start
            else:
                end = ChannelOffsets(admit(indexes, begin, latest, max_rows, max_bytes, backlog=counted))
        if any(end[c] > begin[c] for c in end):
            self._last_batch_at = now
        self._planned_end = end
        return end.with_spool(runtime.spool_id).to_dict()

    def _warn_broken_connections(self, runtime: Ingest) -> None:
        """A producer connection that broke (a reset, a timeout; not the producer's orderly
        close) may have taken what the producer had in flight on it: ZeroMQ has no
        acknowledgements to resend it. Say so where the user looks, the driver's log, as
        well as in the progress (``brokenConnections``)."""
        broken = runtime.broken_connections()
        if broken > self._broken_seen:
            log.warning("ZeroMQ source (%s): %d producer connection(s) broke since the last batch (%d in all): "
                        "messages a producer had in flight on them may be lost; the receiver's log in %s "
                        "names the peer and the reason (see the liveness documentation)",
                        ", ".join(runtime.channel_names), broken - self._broken_seen, broken, runtime.where)
            self._broken_seen = broken

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end at what was there: whatever producers had queued for us, drained
        until the channels are idle for ``timeout`` seconds."""
        runtime = self._ingest()
        runtime.drain_until_idle(self.options.timeout)
        self._pinned_end = ChannelOffsets(runtime.latest())

    def reportLatestOffset(self) -> Optional[dict]:
        """What the receivers have spooled, per channel, plus ``"lag"``: the records and
        payload bytes received but not in any batch planned yet (the query's progress shows
        this as the source's ``latestOffset``; Spark only displays it), ``"dataLoss"``,
        the messages skipped as lost under failOnDataLoss=false, when there were any, and
        with CURVE ``"rejectedHandshakes"``: the handshakes refused so far (each kind of
        refusal is also logged once per endpoint, key refusals once per peer address)."""
        if self._runtime is None:
            return None
        latest = self._runtime.latest()
        planned: Mapping[int, int] = self._planned_end or {}
        backlog = {}
        for channel_log in self._runtime.channels:
            lo, hi = planned.get(channel_log.channel, channel_log.earliest), latest[str(channel_log.channel)]
            if hi > lo:
                backlog[channel_log.channel] = (lo, hi)
        described = self._runtime.describe(backlog) if backlog else {}
        records = sum(info.rows for info in described.values())
        nbytes = sum(info.bytes for info in described.values())
        report: dict = {**latest, "spool": self._runtime.spool_id, "lag": {"records": records, "bytes": nbytes}}
        if self._loss.lost:
            report["dataLoss"] = {"records": self._loss.lost}
        if self._broken_seen:
            report["brokenConnections"] = self._broken_seen
        if self.options.curve is not None:
            report["rejectedHandshakes"] = self._runtime.rejected_handshakes()
        return report

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = ChannelOffsets.from_dict(start), ChannelOffsets.from_dict(end)
        runtime = self._ingest(begin, finish)
        spool_id = runtime.spool_id
        if finish.spool not in (None, spool_id):
            # A batch planned on another spool (Spark re-runs it after a restart): its
            # messages are not in this spool, whatever offsets this spool has given out.
            why = (f"the batch {begin.to_channel_dict()}..{finish.to_channel_dict()} was planned on spool "
                   f"{finish.spool}, which the spool {runtime.where} no longer is (it is spool {spool_id})")
            for channel, (lo, hi) in begin.ranges_to(finish).items():
                if hi > lo:
                    self._loss.lose(LostRange(channel, lo, hi, text=why))
            return []
        ranges: dict[int, tuple[int, int]] = {}
        for channel_log in runtime.channels:
            channel = channel_log.channel
            lo, hi = begin.get(channel, finish[channel]), finish[channel]
            if hi <= lo:
                continue
            earliest = channel_log.earliest
            if lo < earliest:
                self._loss.lose(LostRange(
                    channel, lo, min(hi, earliest),
                    text=f"offsets {lo}..{min(hi, earliest)} of channel {channel} are no longer in the spool "
                         f"{runtime.where}, which starts at {earliest}"))
                lo = min(hi, earliest)
            if hi > lo:
                ranges[channel] = (lo, hi)
        # one call for every channel's counts, losses and read hints (a relay: one round trip)
        described = runtime.describe(ranges)
        nbytes: dict[int, int] = {}
        for channel, (lo, hi) in ranges.items():
            info = described[channel]
            for lost in info.lost:
                self._loss.lose(lost.within(lo, hi))
            nbytes[channel] = info.bytes
        parts: list[InputPartition] = []
        for piece in split(ranges, nbytes, self.options.min_partitions, slots=self._slots()):
            first = piece.start == ranges[piece.channel][0]
            parts.append(runtime.spool_range(piece.channel, piece.start, piece.end,
                                             described[piece.channel].hint if first else None))
        if self._committed is not None:
            parts = self._committed.annotate(runtime, begin, finish, parts, self._spool_batches)
        return parts

    def _slots(self) -> Optional[int]:
        """The task slots of a local master (``locality.local_cores``), looked up once."""
        if self._local_slots is False:
            self._local_slots = local_cores()
        return self._local_slots

    def commit(self, end: dict) -> None:
        if not self._start_forgotten:
            self._query_start.forget()  # a batch is in Spark's commit log: its start with it
            self._start_forgotten = True
        if self._runtime is not None:
            self._runtime.release(ChannelOffsets.from_dict(end).to_channel_dict())
        if self._committed is not None:
            self._committed.release(ChannelOffsets.from_dict(end))

    def stop(self) -> None:
        if self._runtime is not None:
            runtime, self._runtime = self._runtime, None
            runtime.stop()

    # -- executors: data -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Union[Iterator[tuple], Iterator[pa.RecordBatch]]:
        assert isinstance(partition, SpoolRange)
        decoder = decoder_for(self.options, self.schema)
        batches = self._spool_batches(partition)
        if self.options.committed_only:
            batches = kept_batches(batches, partition.channel, partition.committed_runs, self.options.mode)
        # one row per message: join the spool's small batches first; an Arrow message is
        # decoded on its own anyway, so joining would only copy every message once more
        for first, batch in (batches if decoder.fmt == "arrow" else coalesce(batches)):
            yield from decoder.decode(batch, partition.channel, first)

    def _spool_batches(self, partition: SpoolRange) -> Iterator[tuple[int, pa.RecordBatch]]:
        mode = self.options.spool_access
        if mode == "local" or (mode == "auto" and sees_spool(partition.spool_dir, partition.owner_id)):
            return read_range(partition.spool_dir, partition.channel_in_spool, partition.start, partition.end, partition.hint,
                              spool_id=partition.spool_id or None,
                              on_loss=LossPolicy.from_option(self.options.fail_on_data_loss))
        if partition.fetch is None:
            raise FetchError(
                f"this executor ({socket.gethostname()}) cannot see the driver's spool directory, and the driver "
                "runs no spool fetch service (with spoolAccess=auto it runs one unless Spark's master is local); "
                "set option spoolAccess=fetch (and spoolServerHost to the driver's address executors reach)"
            )
        return fetch_range(partition.fetch, partition.channel_in_spool, partition.start, partition.end,
                           spool_id=partition.spool_id or None,
                           loss=LossPolicy.from_option(self.options.fail_on_data_loss),
                           timeout=self.options.fetch_timeout)
