"""``spark.readStream.format("zmq")``: replayable offsets over brokerless ZeroMQ.

Offsets are ``{"<channel>": <next message number>, "spool": "<spool id>"}`` (see
``offsets.ChannelOffsets``, their codec). Spark writes them to its offset log before a
batch runs; the spool keeps every message until Spark commits past it. So a retried task, a lost executor or a driver
restarted from the checkpoint reads exactly the same messages for the same batch:
exactly-once into Spark for everything the connector received.

Every path that reads checks the checkpoint against the spool (the rules are
``exactly_once``, the ingest is the one the data source hands over): ``latestOffset`` (the
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
from collections.abc import Callable, Iterator, Mapping, Sequence

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
from ..ingest.loss import LossPolicy
from ..ingest.spool_reader import read_range, sees_spool
from ..metrics import MetricsServer, serve_metrics, source_metrics
from ..options import SourceOptions
from ..task_gc import freeze_long_lived
from .committed import CommittedOnly, kept_batches
from .decoders import decoder_for
from .exactly_once import ExactlyOnce
from .locality import local_cores
from .offsets import ChannelOffsets
from .partitions import SpoolRange
from .planner import admit, holds_back, split
from .query_start import QueryStart
from .read_task import decoded_rows
from .reader_ingest import Ingest, open_ingest

__all__ = ["ZmqStreamReader"]

log = logging.getLogger(__name__)


class ZmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the spool filled by the receivers."""

    def __init__(
        self, options: SourceOptions, schema: StructType, open_ingest: Callable[[SourceOptions], Ingest] = open_ingest
    ) -> None:
        """``open_ingest`` makes the ingest the reader reads (``source.reader_ingest.open_ingest``
        unless a test gives another); it is called on the first offset call, never here:
        Spark also builds readers in short-lived planning processes."""
        self.options = options
        self.schema = schema
        decoder_for(options, schema)  # validate early
        self._runtime: Ingest | None = None
        self._pinned_end: ChannelOffsets | None = None
        #: the end of the batch Spark planned last: what the progress's lag is measured from
        self._planned_end: ChannelOffsets | None = None
        #: failOnDataLoss on the driver; what it skips is reported in the progress
        self._loss = LossPolicy.from_option(options.fail_on_data_loss, counted=True)
        #: the checks of Spark's offsets against the spool, reporting to ``_loss``
        self._rules = ExactlyOnce.for_options(options, self._loss)
        self._open_ingest = open_ingest
        #: the task slots of a local master, once looked up (``_slots``); False: not yet
        self._local_slots: int | None | bool = False
        #: the first batch's start, kept in the spool directory until Spark commits a batch
        self._query_start = QueryStart(options.spool_dir)
        self._start_forgotten = False
        #: what ``initialOffset`` answered (None: not asked in this run of the query)
        self._initial: ChannelOffsets | None = None
        #: producer connections seen broken so far (each new one is logged at WARN)
        self._broken_seen = 0
        #: the Prometheus endpoint of option metricsAddress, once the ingest is open
        self._metrics: MetricsServer | None = None
        #: committedOnly: the runs the writing sink's commit records name (``committed``)
        self._committed = CommittedOnly(options.spool_dir) if options.committed_only else None
        #: when the last batch was planned (or the first offset call came): maxTriggerDelay's clock
        self._last_batch_at: float | None = None

    # -- driver: the spool and the checkpoint ------------------------------------------------------

    def _ingest(self, *checkpointed: ChannelOffsets) -> Ingest:
        """The ingest, opened on first use; every call checks the offsets Spark passed
        (``exactly_once``)."""
        if self._runtime is None:
            self._runtime = self._rules.open(lambda: self._open_ingest(self.options), checkpointed)
            if self.options.metrics_address is not None and self._metrics is None:
                self._metrics = serve_metrics(
                    self.options.metrics_address,
                    source_metrics(lambda: self._runtime, lambda: self._planned_end),
                    flag="option 'metricsAddress'",
                )
        else:
            for offsets in checkpointed:
                self._rules.reconcile(self._runtime, offsets)
        self._runtime.raise_if_failed()
        return self._runtime

    # -- driver: offsets -----------------------------------------------------------------------

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint begins (``ExactlyOnce.first_offsets``); the
        same answer on every call until Spark commits a batch, across restarts too
        (``query_start``)."""
        runtime = self._ingest()
        start = self._query_start.recall(runtime.spool_id, len(runtime.channels))
        if start is None:
            start = self._rules.first_offsets(runtime, self.options.starting_offsets, self.options.starting_timestamp)
            self._query_start.remember(start)
        self._initial = start
        return start.to_dict()

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
        if self._initial is None or begin != self._initial:
            # a start other than the first batch's: a batch is in Spark's commit log. An
            # availableNow query (or one stopped after its first batch) gets no commit() for its
            # last batch; a new query on this spool must not begin at this one's start.
            self._forget_query_start()
        self._warn_broken_connections(runtime)
        begin = self._rules.resume(runtime, begin)
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
            if holds_back(
                sum(rows for rows, _ in counted.values()),
                min_rows,
                now - self._last_batch_at,
                self.options.max_trigger_delay,
                available_now=self._pinned_end is not None,
            ):
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
            log.warning(
                "ZeroMQ source (%s): %d producer connection(s) broke since the last batch (%d in all): "
                "messages a producer had in flight on them may be lost; the receiver's log in %s "
                "names the peer and the reason (see the liveness documentation)",
                ", ".join(runtime.channel_names),
                broken - self._broken_seen,
                broken,
                runtime.where,
            )
            self._broken_seen = broken

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end at what was there: whatever producers had queued for us, drained
        until the channels are idle for ``timeout`` seconds."""
        runtime = self._ingest()
        runtime.drain_until_idle(self.options.timeout)
        self._pinned_end = ChannelOffsets(runtime.latest())

    def reportLatestOffset(self) -> dict | None:
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
        if self._committed is not None:
            report.update(self._committed.report())  # batches released without a record, conflicting records
        return report

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = ChannelOffsets.from_dict(start), ChannelOffsets.from_dict(end)
        runtime = self._ingest(begin, finish)
        ranges = self._rules.readable(runtime, begin, finish)
        if ranges is None:
            return []
        # one call for every channel's counts, losses and read hints (a relay: one round trip)
        described = runtime.describe(ranges)
        self._rules.spool_losses(ranges, described)
        nbytes = {channel: described[channel].bytes for channel in ranges}
        parts: list[InputPartition] = []
        for piece in split(ranges, nbytes, self.options.min_partitions, slots=self._slots()):
            first = piece.start == ranges[piece.channel][0]
            parts.append(
                runtime.spool_range(
                    piece.channel, piece.start, piece.end, described[piece.channel].hint if first else None
                )
            )
        if self._committed is not None:
            parts = self._committed.annotate(runtime, begin, finish, parts, self._spool_batches)
        return parts

    def _slots(self) -> int | None:
        """The task slots of a local master (``locality.local_cores``), looked up once."""
        if self._local_slots is False:
            self._local_slots = local_cores()
        return self._local_slots

    def _forget_query_start(self) -> None:
        """A batch is in Spark's commit log: the first batch's start is in the checkpoint now."""
        if not self._start_forgotten:
            self._query_start.forget()
            self._start_forgotten = True

    def commit(self, end: dict) -> None:
        self._forget_query_start()
        if self._runtime is not None:
            self._runtime.release(ChannelOffsets.from_dict(end).to_channel_dict())
        if self._committed is not None:
            self._committed.release(ChannelOffsets.from_dict(end))

    def stop(self) -> None:
        if self._metrics is not None:
            metrics, self._metrics = self._metrics, None
            metrics.close()
        if self._runtime is not None:
            runtime, self._runtime = self._runtime, None
            runtime.stop()

    # -- executors: data -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple] | Iterator[pa.RecordBatch]:
        assert isinstance(partition, SpoolRange)
        freeze_long_lived()
        decoder = decoder_for(self.options, self.schema)
        batches = self._spool_batches(partition)
        if self.options.committed_only:
            batches = kept_batches(batches, partition.channel, partition.committed_runs, self.options.mode)
        yield from decoded_rows(decoder, partition.channel, batches)

    def _spool_batches(self, partition: SpoolRange) -> Iterator[tuple[int, pa.RecordBatch]]:
        mode = self.options.spool_access
        if mode == "local" or (mode == "auto" and sees_spool(partition.spool_dir, partition.owner_id)):
            # a relay's spool, read in place: its losses name the relay (as its fetches do)
            relay = partition.fetch.server_name if partition.fetch is not None and partition.fetch.is_relay else None
            return read_range(
                partition.spool_dir,
                partition.channel_in_spool,
                partition.start,
                partition.end,
                partition.hint,
                spool_id=partition.spool_id or None,
                on_loss=LossPolicy.from_option(self.options.fail_on_data_loss),
                owner=relay,
            )
        if partition.fetch is None:
            raise FetchError(
                f"this executor ({socket.gethostname()}) cannot see the driver's spool directory, and the driver "
                "runs no spool fetch service (with spoolAccess=auto it runs one unless Spark's master is local); "
                "set option spoolAccess=fetch (and spoolServerHost to the driver's address executors reach)"
            )
        return fetch_range(
            partition.fetch,
            partition.channel_in_spool,
            partition.start,
            partition.end,
            spool_id=partition.spool_id or None,
            loss=LossPolicy.from_option(self.options.fail_on_data_loss),
            timeout=self.options.fetch_timeout,
        )
