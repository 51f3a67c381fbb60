"""Planning maths for the stream reader: offsets, admission control, the partition split.

Pure functions over numbers and a channel index (anything with ``count_between`` and
``end_within``, see ``spool_index.IndexSnapshot``): no Spark, no sockets, no files, so every
rule here is unit-tested on its own, as Spark's Kafka connector does with its offset
range calculator.

Offsets here are ``{channel: next offset}`` mappings (``offsets.ChannelOffsets`` is one,
and is what Spark checkpoints).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "admit",
    "holds_back",
    "split",
    "PlannedRange",
    "ChannelIndex",
    "MAX_MESSAGES_PER_PARTITION",
    "MAX_BYTES_PER_PARTITION",
    "MAX_BYTES_PER_PARTITION_PER_SLOT",
    "MIN_BYTES_PER_PARTITION",
    "MAX_MESSAGES_PER_PARTITION_PER_SLOT",
]

# A read task covers at most this many messages and about this many bytes, so large
# backlogs are read in parallel (Arrow messages hold many rows: 1,000 of them can be
# 370 MB, which one task would otherwise decode alone while the other cores idle).
MAX_MESSAGES_PER_PARTITION = 200_000
MAX_BYTES_PER_PARTITION = 32 << 20
# With the task slots known (a local master), Spark's own rule for files instead
# (spark.sql.files.maxPartitionBytes and openCostInBytes): a backlog's bytes shared by the
# slots, each task between these two. Why: every read task costs Spark a fixed ~0.1 s, so
# 140 MB read as 5 tasks of 32 MB on 2 slots took 1.25x as long as 2 tasks of 70 MB.
MAX_BYTES_PER_PARTITION_PER_SLOT = 128 << 20
MIN_BYTES_PER_PARTITION = 4 << 20
# The same for messages: with the slots known, a backlog's messages are shared by them
# (up to this many a task) instead of cut every MAX_MESSAGES_PER_PARTITION. One-row
# messages of 100 B hit the message cap long before the bytes one: a 1,000,000-message
# micro-batch was 5 tasks on 2 slots, and its read tasks cost 0.42 us of CPU a message
# against 0.33 as 2 tasks, Spark's JVM 1.26 against 1.09 (bench/run.py's ingest, alternated).
MAX_MESSAGES_PER_PARTITION_PER_SLOT = 2_000_000


class ChannelIndex(Protocol):
    def count_between(self, start: int, end: int) -> tuple[int, int]: ...

    def end_within(self, start: int, limit: int, max_rows: int | None, max_bytes: int | None) -> int: ...


def admit(
    indexes: Mapping[int, ChannelIndex],
    start: Mapping[int, int],
    latest: Mapping[int, int],
    max_rows: int | None,
    max_bytes: int | None,
    backlog: Mapping[int, tuple[int, int]] | None = None,
) -> dict[int, int]:
    """The end offsets of the next batch under ``max_rows``/``max_bytes``.

    The caps are split across channels in proportion to their backlog (as Kafka does), and
    at least one message always gets through, so a query never stalls on a message larger
    than the cap. ``backlog``: each channel's (rows, bytes) between ``start`` and ``latest``
    when the caller has them already (a relay answers them for every channel at once);
    a channel missing from it is counted through its index.
    """
    known = backlog or {}
    counts = {k: known[k] if k in known else indexes[k].count_between(int(start[k]), int(latest[k])) for k in latest}
    total_rows = sum(r for r, _ in counts.values())
    total_bytes = sum(b for _, b in counts.values())
    end = {}
    for k, (rows, nbytes) in counts.items():
        if rows == 0:
            # Nothing readable (an empty backlog, or only offsets the spool lost): move past
            # it, so the batch reports the loss instead of the query stalling on it.
            end[k] = max(int(start[k]), int(latest[k]))
            continue
        rows_cap = None if max_rows is None else math.floor(max_rows * rows / max(total_rows, 1))
        bytes_cap = None if max_bytes is None else math.floor(max_bytes * nbytes / max(total_bytes, 1))
        end[k] = indexes[k].end_within(int(start[k]), int(latest[k]), rows_cap, bytes_cap)
    if all(end[k] <= int(start[k]) for k in end) and total_rows:
        busiest = max(counts, key=lambda k: counts[k][0])
        end[busiest] = int(start[busiest]) + 1
    return end


def holds_back(
    pending_rows: int, min_rows: int | None, waited_s: float, max_delay_s: float, available_now: bool = False
) -> bool:
    """Whether the next micro-batch waits (``minRowsPerTrigger``/``maxTriggerDelay``, as
    Kafka's ``minOffsetsPerTrigger``/``maxTriggerDelay``): it does while fewer than
    ``min_rows`` rows are pending and less than ``max_delay_s`` has passed (``waited_s``)
    since the last batch. Never under ``Trigger.AvailableNow`` (``available_now``), which
    must reach its end; never with nothing pending (there is no batch to hold)."""
    if min_rows is None or available_now or pending_rows <= 0:
        return False
    return pending_rows < min_rows and waited_s < max_delay_s


@dataclass(frozen=True)
class PlannedRange:
    """``[start, end)`` of one channel: one read task."""

    channel: int
    start: int
    end: int


def split(
    ranges: Mapping[int, tuple[int, int]],
    bytes_in: Mapping[int, int],
    min_partitions: int | None = None,
    max_messages: int | None = None,
    max_bytes: int | None = None,
    slots: int | None = None,
) -> list[PlannedRange]:
    """Cut each channel's ``[lo, hi)`` into read tasks: at least ``min_partitions`` in all
    (shared in proportion to the channels' message counts), none larger than
    ``max_messages`` messages or about ``max_bytes`` bytes, never an empty one.
    ``max_bytes`` by default: ``MAX_BYTES_PER_PARTITION``, or with ``slots`` (the cluster's
    task slots, when known) the backlog's bytes over ``slots``, between
    ``MIN_BYTES_PER_PARTITION`` and ``MAX_BYTES_PER_PARTITION_PER_SLOT``; ``max_messages``
    likewise: ``MAX_MESSAGES_PER_PARTITION``, or with ``slots`` the backlog's messages over
    ``slots``, between that and ``MAX_MESSAGES_PER_PARTITION_PER_SLOT``."""
    total = sum(max(0, hi - lo) for lo, hi in ranges.values())
    if max_bytes is None:
        max_bytes = (
            MAX_BYTES_PER_PARTITION
            if not slots
            else min(
                MAX_BYTES_PER_PARTITION_PER_SLOT,
                max(MIN_BYTES_PER_PARTITION, math.ceil(sum(bytes_in.values()) / slots)),
            )
        )
    if max_messages is None:
        max_messages = (
            MAX_MESSAGES_PER_PARTITION
            if not slots
            else min(MAX_MESSAGES_PER_PARTITION_PER_SLOT, max(MAX_MESSAGES_PER_PARTITION, math.ceil(total / slots)))
        )
    wanted = max(min_partitions or 1, 1)
    out: list[PlannedRange] = []
    for k in sorted(ranges, key=int):
        lo, hi = ranges[k]
        if hi <= lo:
            continue
        share = math.ceil(wanted * (hi - lo) / max(total, 1))
        pieces = min(
            hi - lo, max(1, share, math.ceil((hi - lo) / max_messages), math.ceil(bytes_in.get(k, 0) / max_bytes))
        )
        step = math.ceil((hi - lo) / pieces)
        for piece_start in range(lo, hi, step):
            out.append(PlannedRange(int(k), piece_start, min(hi, piece_start + step)))
    return out
