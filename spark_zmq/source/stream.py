"""``spark.readStream.format("zmq")``: replayable offsets over brokerless ZeroMQ.

Offsets are ``{"<channel>": <next message number>}``, Kafka's meaning per channel. Spark
writes them to its offset log before a batch runs; the spool keeps every message until
Spark commits past it. So a retried task, a lost executor or a driver restarted from the
checkpoint reads exactly the same messages for the same batch: exactly-once into Spark for
everything the connector received.
"""

from __future__ import annotations

import math
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

from ..options import SourceOptions
from .decode import Decoder
from .ingest import IngestRuntime
from .partitions import SpoolRange
from .fetch import fetch_range
from .spool import DataLossError, coalesce, read_range, sees_spool

__all__ = ["ZmqStreamReader"]

# A read task covers at most this many messages and about this many bytes, so large
# backlogs are read in parallel (Arrow messages hold many rows: 1,000 of them can be
# 370 MB, which one task would otherwise decode alone while the other cores idle).
_MAX_MESSAGES_PER_PARTITION = 200_000
_MAX_BYTES_PER_PARTITION = 32 << 20


class ZmqStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader over the spool filled by the receivers."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        Decoder(options.format, schema, mode=options.mode, corrupt_column=options.corrupt_column)  # validate early
        self._runtime: Optional[IngestRuntime] = None
        self._pinned_end: Optional[dict[str, int]] = None
        #: the end of the batch Spark planned last: what the progress's lag is measured from
        self._planned_end: Optional[dict[str, int]] = None

    # -- driver: offsets -----------------------------------------------------------------------

    def _ingest(self) -> IngestRuntime:
        if self._runtime is None:
            self._runtime = IngestRuntime(self.options)
        self._runtime.raise_if_failed()
        return self._runtime

    def _channels(self) -> list[str]:
        return [str(c) for c in range(len(self.options.endpoints))]

    def _check_start(self, start: dict) -> None:
        """The checkpoint must describe the same channels; a spool that is behind a
        checkpoint (deleted with its directory) continues numbering where Spark is."""
        runtime = self._ingest()
        if set(start) != set(self._channels()):
            raise ValueError(
                f"the checkpoint's offsets name channels {sorted(start)} but option 'endpoints' "
                f"({', '.join(map(str, self.options.endpoints))}) defines channels {self._channels()}: "
                "a query's endpoints cannot change across restarts; use a new checkpointLocation"
            )
        for channel_log in runtime.spool.channels:
            wanted = int(start[str(channel_log.channel)])
            if wanted > channel_log.next_offset:
                channel_log.advance_to(wanted)
            elif wanted < channel_log.earliest and self.options.fail_on_data_loss:
                raise DataLossError(
                    f"Spark resumes channel {channel_log.channel} at offset {wanted}, but the spool "
                    f"{self.options.spool_dir!r} starts at {channel_log.earliest}: messages were lost "
                    "(spool deleted or pruned). Set failOnDataLoss=false to continue from the spool."
                )

    def initialOffset(self) -> dict:
        runtime = self._ingest()
        if self.options.starting_offsets == "earliest":
            return runtime.spool.earliest()
        return dict(runtime.start_offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        if self.options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        runtime = self._ingest()
        self._check_start(start)
        # Spark asks for the next batch only after the batch ending at ``start`` is in its
        # commit log, but calls commit() only once it has a next batch to run. Releasing
        # here is what lets a full spool drain when the receivers are the ones waiting.
        runtime.release(start)
        latest = self._pinned_end if self._pinned_end is not None else runtime.latest()
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            # Spark passes one ReadLimit; a second cap configured through options still applies.
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_rows_per_trigger
            max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else self.options.max_bytes_per_trigger
            end = self._admit(runtime, start, latest, max_rows, max_bytes)
        self._planned_end = end
        return end

    @staticmethod
    def _admit(runtime: IngestRuntime, start: dict, latest: dict, max_rows: Optional[int], max_bytes: Optional[int]) -> dict:
        """Split the caps across channels in proportion to their backlog (as Kafka does),
        and always let at least one message through so a query never stalls on a message
        larger than the cap."""
        logs = {str(c.channel): c for c in runtime.spool.channels}
        backlog = {k: logs[k].count_between(int(start[k]), int(latest[k])) for k in latest}
        total_rows = sum(r for r, _ in backlog.values())
        total_bytes = sum(b for _, b in backlog.values())
        end = {}
        for k, (rows, nbytes) in backlog.items():
            if rows == 0:
                end[k] = int(start[k])
                continue
            rows_cap = None if max_rows is None else math.floor(max_rows * rows / max(total_rows, 1))
            bytes_cap = None if max_bytes is None else math.floor(max_bytes * nbytes / max(total_bytes, 1))
            end[k] = logs[k].end_within(int(start[k]), int(latest[k]), rows_cap, bytes_cap)
        if all(end[k] == int(start[k]) for k in end) and total_rows:
            busiest = max(backlog, key=lambda k: backlog[k][0])
            end[busiest] = int(start[busiest]) + 1
        return end

    def prepareForTriggerAvailableNow(self) -> None:
        """Pin the end at what was there: whatever producers had queued for us, drained
        until the channels are idle for ``timeout`` seconds."""
        runtime = self._ingest()
        runtime.drain_until_idle(self.options.timeout)
        self._pinned_end = runtime.latest()

    def reportLatestOffset(self) -> Optional[dict]:
        """What the receivers have spooled, per channel, plus ``"lag"``: the records and
        payload bytes received but not in any batch planned yet (the query's progress shows
        this as the source's ``latestOffset``; Spark only displays it)."""
        if self._runtime is None:
            return None
        latest = self._runtime.latest()
        planned = self._planned_end or {}
        records = nbytes = 0
        for log in self._runtime.spool.channels:
            key = str(log.channel)
            rows, size = log.count_between(int(planned.get(key, log.earliest)), latest[key])
            records, nbytes = records + rows, nbytes + size
        return {**latest, "lag": {"records": records, "bytes": nbytes}}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        runtime = self._ingest()
        owner = runtime.spool.owner_id
        fetch_endpoint = runtime.server.endpoint if runtime.server is not None else ""
        parts: list[InputPartition] = []
        channels = sorted(end, key=int)
        wanted = max(self.options.min_partitions or 1, 1)
        total = sum(max(0, int(end[k]) - int(start.get(k, end[k]))) for k in channels)
        logs = {str(c.channel): c for c in runtime.spool.channels}
        for k in channels:
            lo, hi = int(start.get(k, end[k])), int(end[k])
            if hi <= lo:
                continue
            share = math.ceil(wanted * (hi - lo) / max(total, 1))
            _, nbytes = logs[k].count_between(lo, hi)
            pieces = min(hi - lo, max(1, share, math.ceil((hi - lo) / _MAX_MESSAGES_PER_PARTITION),
                                      math.ceil(nbytes / _MAX_BYTES_PER_PARTITION)))
            step = math.ceil((hi - lo) / pieces)
            for piece_start in range(lo, hi, step):
                parts.append(
                    SpoolRange(self.options.spool_dir, int(k), piece_start, min(hi, piece_start + step), owner,
                               fetch_endpoint, logs[k].locate(piece_start) or ())
                )
        return parts

    def commit(self, end: dict) -> None:
        if self._runtime is not None:
            self._runtime.release(end)

    def stop(self) -> None:
        if self._runtime is not None:
            runtime, self._runtime = self._runtime, None
            runtime.stop()

    # -- executors: data -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Union[Iterator[tuple], Iterator[pa.RecordBatch]]:
        assert isinstance(partition, SpoolRange)
        decoder = Decoder(self.options.format, self.schema, mode=self.options.mode, corrupt_column=self.options.corrupt_column)
        offset = partition.start
        for batch in coalesce(self._spool_batches(partition)):
            yield from decoder.decode(batch, partition.channel, offset)
            offset += batch.num_rows

    def _spool_batches(self, partition: SpoolRange) -> Iterator[pa.RecordBatch]:
        local = self.options.spool_access == "local" or (
            self.options.spool_access == "auto" and sees_spool(partition.spool_dir, partition.owner_id)
        )
        if local or not partition.fetch_endpoint:
            return read_range(partition.spool_dir, partition.channel, partition.start, partition.end, partition.hint)
        return fetch_range(partition.fetch_endpoint, partition.channel, partition.start, partition.end)
