"""The spool's in-memory index: what the driver knows of each channel without its files.

Why apart from the log: the planner's questions (how many rows and bytes lie between two
offsets, how far a batch may reach under a cap, which offsets were lost) are pure
arithmetic over the entries the log publishes, with no locks, files or sockets.
``ChannelLog`` (``spool``) builds the entries and hands the planner an ``IndexSnapshot``.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .loss import LostRange

__all__ = ["Segment", "BatchEntry", "batch_entry", "IndexSnapshot"]


@dataclass
class Segment:
    """One segment file of a channel as the log knows it: its first offset, sequence number,
    size and the offset after its last message."""

    first: int
    seq: int
    path: str
    size: int = 0
    end: int = 0  # offset after its last message
    #: recovery found unreadable bytes after the last complete record (why, where)
    tail_damage: str | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


@dataclass
class BatchEntry:
    """What the driver keeps per spooled batch: enough for admission control, no payload."""

    first: int
    count: int
    bytes_cum: np.ndarray  # cumulative payload bytes, per message
    rows_cum: np.ndarray | None  # cumulative rows per message; None when 1 row/message
    segment: Segment
    position: int  # byte position of the record in its segment
    #: when its messages were received (microseconds since the epoch; one time per spool batch)
    received_us: int = 0

    @property
    def end(self) -> int:
        return self.first + self.count

    def rows_upto(self, n: int) -> int:
        """Rows in the first ``n`` messages of this batch."""
        if n <= 0:
            return 0
        return int(self.rows_cum[n - 1]) if self.rows_cum is not None else n

    def bytes_upto(self, n: int) -> int:
        return int(self.bytes_cum[n - 1]) if n > 0 else 0


def batch_entry(batch: pa.RecordBatch, first: int, segment: Segment, position: int) -> BatchEntry:
    """The index entry of ``batch`` (a spool batch numbered from ``first``), written at
    byte ``position`` of ``segment``: its cumulative payload bytes and rows, no payload."""
    values = batch.column(0)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset : values.offset + len(values) + 1]
    bytes_cum = offsets[1:] - offsets[0]
    counts = batch.column(3)
    if counts.null_count:  # (never written so: a spool batch's row counts have no nulls)
        rows = counts.to_numpy(zero_copy_only=False)
    else:  # a view of the buffer: Array.to_numpy imports pandas in a receiving process (see spool_format)
        rows = np.frombuffer(counts.buffers()[1], dtype=np.int32)[counts.offset : counts.offset + len(counts)]
    rows_cum = None if bool((rows == 1).all()) else np.cumsum(np.maximum(rows, 0), dtype=np.int64)
    times = batch.column(2)
    received_us = int(np.frombuffer(times.buffers()[1], dtype=np.int64)[times.offset]) if len(times) else 0
    return BatchEntry(
        first, batch.num_rows, bytes_cum.astype(np.int64, copy=True), rows_cum, segment, position, received_us
    )


@dataclass
class IndexSnapshot:
    """A channel's index at one moment: what the planner reads (no locks, no files)."""

    entries: list[BatchEntry]
    firsts: list[int]
    lost: list[LostRange]

    def _from(self, start: int) -> int:
        return max(0, bisect.bisect_right(self.firsts, start) - 1)

    def count_between(self, start: int, end: int) -> tuple[int, int]:
        """(rows, payload bytes) in ``[start, end)``."""
        rows = nbytes = 0
        for entry in self.entries[self._from(start) :]:
            if entry.first >= end:
                break
            lo, hi = max(start, entry.first), min(end, entry.end)
            if lo >= hi:
                continue
            a, b = lo - entry.first, hi - entry.first
            rows += entry.rows_upto(b) - entry.rows_upto(a)
            nbytes += entry.bytes_upto(b) - entry.bytes_upto(a)
        return rows, nbytes

    def end_within(self, start: int, limit: int, max_rows: int | None, max_bytes: int | None) -> int:
        """The furthest offset ``e <= limit`` such that ``[start, e)`` holds at most
        ``max_rows`` rows and ``max_bytes`` payload bytes (``None`` = no cap)."""
        if max_rows is None and max_bytes is None:
            return limit
        rows_left = max_rows if max_rows is not None else 1 << 62
        bytes_left = max_bytes if max_bytes is not None else 1 << 62
        position = start
        for entry in self.entries[self._from(start) :]:
            if position >= limit:
                break
            if entry.end <= position:
                continue
            skip = max(0, position - entry.first)
            stop = min(entry.end, limit) - entry.first
            if stop <= skip:
                break
            base_rows, base_bytes = entry.rows_upto(skip), entry.bytes_upto(skip)
            rows_all = entry.rows_upto(stop) - base_rows
            bytes_all = entry.bytes_upto(stop) - base_bytes
            if rows_all <= rows_left and bytes_all <= bytes_left:
                rows_left -= rows_all
                bytes_left -= bytes_all
                position = entry.first + stop
                continue
            # Only part of this batch fits: find how many messages do.
            rows_cum = entry.rows_cum if entry.rows_cum is not None else np.arange(1, entry.count + 1)
            fit_rows = int(np.searchsorted(rows_cum, base_rows + rows_left, side="right"))
            fit_bytes = int(np.searchsorted(entry.bytes_cum, base_bytes + bytes_left, side="right"))
            return entry.first + max(skip, min(fit_rows, fit_bytes, stop))
        return position

    def lost_within(self, start: int, end: int) -> list[LostRange]:
        return [r for r in self.lost if r.first < end and r.end > start]
