"""``spark.readStream.format("zmq")``: replayable offsets over brokerless ZeroMQ.

Offsets are ``{"<channel>": <next message number>, "spool": "<spool id>"}`` (see
``planner``). Spark writes them to its offset log before a batch runs; the spool keeps
every message until Spark commits past it. So a retried task, a lost executor or a driver
restarted from the checkpoint reads exactly the same messages for the same batch:
exactly-once into Spark for everything the connector received.

Every path that reads checks the checkpoint against the spool: ``latestOffset`` (the
start of the next batch), ``partitions`` (including the batch Spark re-runs after a
restart) and ``read`` (each task checks the spool id of every segment it opens). A
checkpoint paired with another or a recreated spool, a checkpoint behind the spool's
earliest offset and offsets the spool cannot read are a ``DataLossError`` that names the
channel, the offsets and the spool, or, with ``failOnDataLoss=false``, skipped, logged and
counted (``dataLoss`` in the query progress's ``latestOffset``). Never a renumbering:
a spool that is behind a checkpoint continues numbering after it.
"""

from __future__ import annotations

import logging
import socket
from typing import Iterator, Optional, Sequence, Union

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..ingest.fetch import FetchError, fetch_range
from ..ingest.spool_format import DataLossError
from ..ingest.spool_reader import coalesce, loss_policy, read_range, sees_spool
from ..options import SourceOptions
from .decoders import decoder_for
from .ingest import Ingest, LocalIngest
from .partitions import SpoolRange
from .planner import admit, channel_offsets, split, spool_of, with_spool
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
        self._pinned_end: Optional[dict[str, int]] = None
        #: the end of the batch Spark planned last: what the progress's lag is measured from
        self._planned_end: Optional[dict[str, int]] = None
        #: messages skipped as lost (failOnDataLoss=false), reported in the progress
        self._lost = 0
        self._foreign_spools_seen: set[str] = set()

    # -- driver: the spool and the checkpoint ------------------------------------------------------

    def _ingest(self, *checkpointed: dict) -> Ingest:
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

    def _reconcile(self, runtime: Ingest, offsets: dict) -> None:
        """Check offsets from Spark's checkpoint against the spool: same channels, same
        spool; a spool behind them continues numbering after them (never reusing an offset
        Spark has seen)."""
        channels = channel_offsets(offsets)
        expected = [str(c) for c in range(len(runtime.channels))]
        source = "relays" if self.options.relays else "endpoints"
        if set(channels) != set(expected):
            raise ValueError(
                f"the checkpoint's offsets name channels {sorted(channels)} but option {source!r} "
                f"({', '.join(runtime.channel_names)}) defines channels {expected}: "
                f"a query's {source} cannot change across restarts; use a new checkpointLocation"
            )
        theirs, ours = spool_of(offsets), runtime.spool_id
        foreign = theirs is not None and theirs != ours
        if foreign and theirs not in self._foreign_spools_seen:
            message = (
                f"the checkpoint's offsets {channels} refer to spool {theirs}, but the spool "
                f"{runtime.where} is spool {ours} (it was deleted and recreated, or belongs to "
                "another query): the messages of the checkpointed spool that Spark had not processed are lost"
            )
            if self.options.fail_on_data_loss:
                raise DataLossError(
                    message + ". Set failOnDataLoss=false to continue on this spool after the checkpoint's offsets, "
                    "or start the query with a new checkpointLocation"
                )
            log.warning("%s; continuing on spool %s after the checkpoint's offsets (failOnDataLoss=false)", message, ours)
            self._foreign_spools_seen.add(theirs)
        for channel_log in runtime.channels:
            wanted = channels[str(channel_log.channel)]
            if wanted > channel_log.next_offset:
                if runtime.started and not foreign:
                    log.warning("channel %d: the checkpoint is at offset %d, ahead of the spool's %d: the spool lost "
                                "its tail (a crash without spoolFsync?)", channel_log.channel, wanted,
                                channel_log.next_offset)
                if foreign:
                    # Messages this (other) spool numbered below the checkpoint will never be read.
                    below = channel_log.snapshot().count_between(channel_log.earliest, wanted)[0]
                    if below:
                        self._lose(below, f"channel {channel_log.channel}: {below} messages spool {ours} holds below "
                                          f"the checkpoint's offset {wanted}")
                channel_log.advance_to(wanted)

    def _lose(self, count: int, message: str) -> None:
        """Offsets that cannot be delivered: an error, or (failOnDataLoss=false) logged and counted."""
        if self.options.fail_on_data_loss:
            raise DataLossError(message + ". Set failOnDataLoss=false to skip them (they are logged and counted).")
        self._lost += count
        log.warning("skipping %d messages (failOnDataLoss=false): %s", count, message)

    # -- driver: offsets -----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        runtime = self._ingest()
        if self.options.starting_offsets == "earliest":
            return with_spool(runtime.earliest(), runtime.spool_id)
        return with_spool(runtime.start_offsets, runtime.spool_id)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        runtime = self._ingest(start)
        begin = channel_offsets(start)
        # Spark asks for the next batch only after the batch ending at ``start`` is in its
        # commit log, but calls commit() only once it has a next batch to run. Releasing
        # here is what lets a full spool drain when the receivers are the ones waiting.
        runtime.release(begin)
        for channel_log in runtime.channels:
            key = str(channel_log.channel)
            if begin[key] < channel_log.earliest:
                self._lose(channel_log.earliest - begin[key],
                           f"Spark resumes channel {channel_log.channel} at offset {begin[key]}, but the spool "
                           f"{runtime.where} starts at {channel_log.earliest} (spool deleted or pruned)")
                begin[key] = channel_log.earliest
        latest = self._pinned_end if self._pinned_end is not None else runtime.latest()
        latest = {k: max(v, begin[k]) for k, v in latest.items()}
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            # Spark passes one ReadLimit; a second cap configured through options still applies.
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_rows_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes_per_trigger
            indexes = {str(c.channel): c.snapshot() for c in runtime.channels}
            end = admit(indexes, begin, latest, max_rows, max_bytes)
        self._planned_end = end
        return with_spool(end, runtime.spool_id)

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end at what was there: whatever producers had queued for us, drained
        until the channels are idle for ``timeout`` seconds."""
        runtime = self._ingest()
        runtime.drain_until_idle(self.options.timeout)
        self._pinned_end = runtime.latest()

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
        planned = self._planned_end or {}
        records = nbytes = 0
        for channel_log in self._runtime.channels:
            key = str(channel_log.channel)
            rows, size = channel_log.snapshot().count_between(int(planned.get(key, channel_log.earliest)), latest[key])
            records, nbytes = records + rows, nbytes + size
        report: dict = {**latest, "spool": self._runtime.spool_id, "lag": {"records": records, "bytes": nbytes}}
        if self._lost:
            report["dataLoss"] = {"records": self._lost}
        if self.options.curve is not None:
            report["rejectedHandshakes"] = self._runtime.rejected_handshakes()
        return report

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        runtime = self._ingest(start, end)
        spool_id = runtime.spool_id
        begin, finish = channel_offsets(start), channel_offsets(end)
        if spool_of(end) not in (None, spool_id):
            # A batch planned on another spool (Spark re-runs it after a restart): its
            # messages are not in this spool, whatever offsets this spool has given out.
            self._lose(sum(max(0, finish[k] - begin.get(k, finish[k])) for k in finish),
                       f"the batch {begin}..{finish} was planned on spool {spool_of(end)}, which the spool "
                       f"{runtime.where} no longer is (it is spool {spool_id})")
            return []
        ranges: dict[str, tuple[int, int]] = {}
        nbytes: dict[str, int] = {}
        for channel_log in runtime.channels:
            key = str(channel_log.channel)
            lo, hi = begin.get(key, finish[key]), finish[key]
            if hi <= lo:
                continue
            if lo < channel_log.earliest:
                self._lose(min(hi, channel_log.earliest) - lo,
                           f"offsets {lo}..{min(hi, channel_log.earliest)} of channel {key} are no longer in the spool "
                           f"{runtime.where}, which starts at {channel_log.earliest}")
                lo = min(hi, channel_log.earliest)
            index = channel_log.snapshot()
            for lost in index.lost_within(lo, hi):
                first, last = max(lo, lost.first), min(hi, lost.end)
                self._lose(last - first, lost.describe(channel_log.channel, first, last))
            if hi > lo:
                ranges[key] = (lo, hi)
                nbytes[key] = index.count_between(lo, hi)[1]
        parts: list[InputPartition] = []
        for piece in split(ranges, nbytes, self.options.min_partitions):
            parts.append(runtime.spool_range(piece.channel, piece.start, piece.end))
        return parts

    def commit(self, end: dict) -> None:
        if self._runtime is not None:
            self._runtime.release(channel_offsets(end))

    def stop(self) -> None:
        if self._runtime is not None:
            runtime, self._runtime = self._runtime, None
            runtime.stop()

    # -- executors: data -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Union[Iterator[tuple], Iterator[pa.RecordBatch]]:
        assert isinstance(partition, SpoolRange)
        decoder = decoder_for(self.options, self.schema)
        for first, batch in coalesce(self._spool_batches(partition)):
            yield from decoder.decode(batch, partition.channel, first)

    def _spool_batches(self, partition: SpoolRange) -> Iterator[tuple[int, pa.RecordBatch]]:
        mode = self.options.spool_access
        if mode == "local" or (mode == "auto" and sees_spool(partition.spool_dir, partition.owner_id)):
            return read_range(partition.spool_dir, partition.channel_in_spool, partition.start, partition.end, partition.hint,
                              spool_id=partition.spool_id or None,
                              on_loss=loss_policy(self.options.fail_on_data_loss))
        if partition.fetch is None:
            raise FetchError(
                f"this executor ({socket.gethostname()}) cannot see the driver's spool directory, and the driver "
                "runs no spool fetch service (with spoolAccess=auto it runs one unless Spark's master is local); "
                "set option spoolAccess=fetch (and spoolServerHost to the driver's address executors reach)"
            )
        return fetch_range(partition.fetch, partition.channel_in_spool, partition.start, partition.end,
                           spool_id=partition.spool_id or None, skip_loss=not self.options.fail_on_data_loss,
                           timeout=self.options.fetch_timeout)
