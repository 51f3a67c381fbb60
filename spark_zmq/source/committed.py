"""``committedOnly``: deliver only the task runs a spark-zmq sink's commit record names.

The sink delivers at least once: a retried task, or a batch the writing query runs again
after a restart, sends its rows again, each run under its own ``spark_zmq.attempt_id``.
Once Spark committed a write, the sink's driver sends every consumer endpoint a commit
record (``sink/commit_record.py``): ``spark_zmq.commit`` names the run of each partition
Spark kept. With ``committedOnly`` the source turns that into exactly once, and keeps
Spark's replayable offsets:

* Every message stays in the spool at its offset, as without the option.
* Planning (the driver, ``latestOffset``) reads the sink's metadata of the messages it has
  not looked at yet (the schema of each Arrow message; no batch is decoded) and admits, per
  channel, an end offset below the first data message whose batch is still *undecided*:
  no commit record of its ``(query_id, batch_id)`` has been seen on any channel. A record
  may arrive before the last data of its batch (a receiving socket reads its connections
  in turn), so a data message whose batch is decided already is decided on arrival.
* A decision is the first record of its ``(query_id, batch_id)`` the driver read, or the
  first later record of the same writing query that names the batch among its recent ones
  (``spark_zmq.recent``: what repairs a record lost on the way); a later one (the writing
  query committed the batch again after a restart) is ignored, and logged and counted
  when it names other runs (``conflicting_records``: without CURVE, a forged record may
  have come first). Decisions
  are appended to ``committed-runs-<spool id>.jsonl`` in ``spoolDir`` and written to disk
  (fsync) before any batch planned with them is returned to Spark, and never change: a
  batch Spark re-runs, after a task failure or a restart of this query, is read with the
  same decisions, although the records themselves may have been freed from the spool.
  The file is compacted (``decisions.py``; ``RunSelector.compactable`` says which
  decisions no read can need any more), so it does not grow a line per batch forever.
* The driver gives each read task the decisions of the batches its range holds
  (``SpoolRange.committed_runs``); the task drops the messages of other runs and the
  records (``keep``), and reads the rest as the ``arrow`` format does.
* Within a committed run each ``spark_zmq.sequence`` is delivered once (``skips``): a copy
  (the sink resends what a broken connection had not acknowledged) and a sequence beyond
  the record's message count are skipped, by offsets decided once per planned batch and
  kept with the decisions, so a re-run batch skips the same ones.
* A batch that no record will decide is released (``release_batch``): ``HOLD_LIMIT_SECONDS``
  after this driver saw its first message, or when a record of its writing query
  ``RELEASE_AFTER_BATCHES`` later arrives without naming it. It is decided as "no run
  committed" (its messages skipped), logged, and counted in the source's progress.
* Decisions no compaction floor can cover (a batch write's, a released batch's, a record's
  whose batch had no data: a forged one) are forgotten ``FORGET_AFTER_SECONDS`` after they
  were made, once nothing of them is left to read: what bounds forged records.

A message without the sink's metadata is malformed: ``DROPMALFORMED`` skips it, the
other modes fail naming its channel, its offset and ``committedOnly``. It never blocks a
channel. A batch whose record never arrives blocks its channels from its first message
on until it is released: what arrives behind it is held in the spool (``maxSpoolBytes``,
then backpressure), and the driver logs a warning once it has been held for
``BLOCKED_WARN_SECONDS``. Without CURVE anyone who can connect can send records and data:
the rules above bound what they cost, CURVE keeps them out.

The pure part (``Decisions``, ``RunSelector`` of ``run_selector``, and ``run_tags``: ``Tag``,
``tag_of``, ``keep``, what a read task needs) has no Spark and no sockets, and is tested on
its own; ``CommittedOnly`` is the reader's glue.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from .decisions import BatchKey, Decisions
from .run_selector import FORGET_AFTER_SECONDS, HOLD_LIMIT_SECONDS, RELEASE_AFTER_BATCHES, RunSelector
from .run_tags import (
    Tag,
    decode_reading,
    encode_reading,
    keep,
    kept_batches,
    kept_slices,
    message_tags,
    read_tag,
    tag_of,
)

if TYPE_CHECKING:
    from .partitions import SpoolRange
    from .reader_ingest import Ingest

__all__ = [
    "BatchKey",
    "Tag",
    "tag_of",
    "read_tag",
    "Decisions",
    "RunSelector",
    "keep",
    "CommittedOnly",
    "BLOCKED_WARN_SECONDS",
    "HOLD_LIMIT_SECONDS",
    "RELEASE_AFTER_BATCHES",
    "FORGET_AFTER_SECONDS",
    "kept_slices",
    "kept_batches",
    "message_tags",
    "encode_reading",
    "decode_reading",
]

log = logging.getLogger(__name__)

#: a channel held this long by a batch without its commit record gets a warning
BLOCKED_WARN_SECONDS = 60.0


#: (range read task) -> (first offset, spool batch) of it: how the driver reads messages
ReadBatches = Callable[["SpoolRange"], Iterable[tuple[int, pa.RecordBatch]]]


class CommittedOnly:
    """The stream reader's part of ``committedOnly`` on the driver: scans what the spool
    received, keeps the decisions on disk, clamps the planned end and annotates read tasks."""

    def __init__(self, spool_dir: str) -> None:
        self.spool_dir = spool_dir
        self.selector: RunSelector | None = None
        self._spool_id: str | None = None

    def _selector(self, runtime: Ingest) -> RunSelector:
        spool_id = runtime.spool_id
        if self.selector is None or spool_id != self._spool_id:
            os.makedirs(self.spool_dir, mode=0o700, exist_ok=True)
            path = os.path.join(self.spool_dir, f"committed-runs-{spool_id}.jsonl")
            self.selector = RunSelector(Decisions(path))
            self._spool_id = spool_id
        return self.selector

    def scan(
        self, runtime: Ingest, begin: Mapping[int, int], upto: Mapping[int, int], read: ReadBatches
    ) -> RunSelector:
        """Observe every channel's messages from where it was left (or ``begin``) up to
        ``upto``, then write the new decisions to disk."""
        selector = self._selector(runtime)
        for channel, hi in upto.items():
            state = selector.channel(channel, int(begin.get(channel, hi)))
            if state.cursor < int(begin.get(channel, state.cursor)):
                selector.skip_to(channel, int(begin[channel]))
            # below the spool's earliest offset nothing is left to read (the reader reports the loss)
            selector.skip_to(channel, int(runtime.channels[channel].earliest))
            lo = state.cursor
            if hi <= lo:
                continue
            for first, batch in read(runtime.spool_range(channel, lo, hi)):
                for i, tag in enumerate(message_tags(batch)):
                    offset = first + i
                    if state.cursor <= offset < hi:
                        selector.observe(channel, offset, tag)
            selector.skip_to(channel, hi)  # offsets the spool lost hold nothing to wait for
        selector.decisions.flush()
        return selector

    def clamp(
        self, runtime: Ingest, begin: Mapping[int, int], latest: Mapping[int, int], read: ReadBatches
    ) -> dict[int, int]:
        """``latest`` held back, per channel, below the first message of a batch without a
        decision; warns of a channel held for ``BLOCKED_WARN_SECONDS``."""
        selector = self.scan(runtime, begin, latest, read)
        if selector.release_stale():
            selector.decisions.flush()
        now = time.monotonic()
        out = {}
        for channel, hi in latest.items():
            end = max(int(begin.get(channel, hi)), min(int(hi), selector.end(channel)))
            out[channel] = end
            state = selector.channels[channel]
            if end >= hi:
                state.held_since = None
                continue
            if state.held_since is None:
                state.held_since = now
            elif now - state.held_since >= BLOCKED_WARN_SECONDS:
                self._warn(channel, selector, hi, now - state.held_since)
        return out

    def _warn(self, channel: int, selector: RunSelector, hi: int, held_s: float) -> None:
        state = selector.channels[channel]
        for key, first in selector.holding(channel):
            if key in state.warned:
                continue
            state.warned.add(key)
            log.warning(
                "committedOnly: channel %d has held offsets %d..%d for %.0f s: batch %d of query %s has no "
                "commit record yet (the writing query has not committed it, or its record did not reach "
                "this endpoint); what arrives behind it stays in the spool (up to maxSpoolBytes, then "
                "backpressure) until a record decides it or it is released, %.0f s after its first message",
                channel,
                first,
                hi,
                held_s,
                key[1],
                key[0],
                HOLD_LIMIT_SECONDS,
            )

    def annotate(
        self, runtime: Ingest, begin: Mapping[int, int], end: Mapping[int, int], parts: list, read: ReadBatches
    ) -> list:
        """Each read task with the decisions of the batches in its range."""
        selector = self.scan(runtime, begin, end, read)
        skips = selector.skips(begin, end)
        selector.decisions.flush()
        return [
            replace(
                part,
                committed_runs=encode_reading(
                    selector.decisions_within(part.channel, part.start, part.end),
                    [o for o in skips.get(part.channel, ()) if part.start <= o < part.end],
                ),
            )
            for part in parts
        ]

    def report(self) -> dict:
        """For the source's progress (``reportLatestOffset``), when anything happened:
        ``{"committedOnly": {"releasedBatches", "releasedMessages", "conflictingRecords"}}``,
        counted since this driver started."""
        selector = self.selector
        if selector is None or not (
            selector.released_batches or selector.released_messages or selector.conflicting_records
        ):
            return {}
        return {
            "committedOnly": {
                "releasedBatches": selector.released_batches,
                "releasedMessages": selector.released_messages,
                "conflictingRecords": selector.conflicting_records,
            }
        }

    def release(self, end: Mapping[int, int]) -> None:
        """Spark committed up to ``end``: forget what lies below, and compact the decisions'
        file when enough of it is dead (``RunSelector.compact``)."""
        if self.selector is not None:
            for channel, offset in end.items():
                self.selector.release(int(channel), int(offset))
            self.selector.compact()
