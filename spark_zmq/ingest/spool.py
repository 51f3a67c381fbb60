"""The durable spool, driver side: numbered messages per channel in checksummed segments.

Why a spool: ZeroMQ has no acknowledgements and no replay, so a message the connector has
taken off the socket exists nowhere else. The spool makes every received message
addressable by ``(channel, offset)`` until Spark commits it, which is what gives the
source replayable offsets (exactly-once into Spark, like Kafka's) and bounded memory
(bursts go to disk, not to the heap).

This module is the log's owner: the receiving process appends, recovers after a restart
or a crash, answers the planner's questions about the index, and releases what Spark
committed. Read tasks read segments through ``spool_reader``; ``spool_format`` describes
the bytes on disk, ``spool_budget`` the room receivers wait for, ``spool_freed`` the record
of released segments that ``startingTimestamp`` reads.

The rules that make it crash-safe:

- Offsets are written into every record, so recovery reads them rather than counting; a
  record it cannot read is a gap (reported as data loss), never a renumbering.
- A segment is only ever appended to by the process that created it, and a restarted
  receiver never reopens a segment: it creates a new one with the next ``seq``, with
  ``O_EXCL``, so no two index entries ever name one file and no name is reused.
- The newest segment is never deleted (it carries the numbering across restarts, even when
  empty); release deletes segments by identity, only when every offset in them is below
  what Spark committed.
- A batch is written (and with ``spoolFsync=true`` fsynced, with the directory fsynced when
  segments are created or deleted) before its offsets are published, so a reader never
  sees a partial batch.
- The spool has an identity (``SPOOL_ID``, written once when the spool is created, and in
  every segment header) that travels in Spark's offsets, so a checkpoint paired with a
  different or recreated spool is detected.
- The directory is private to its user: 0700 directories, 0600 files, never following a
  symlink planted in place of the directory or of a file in it.
"""

from __future__ import annotations

import bisect
import errno
import fcntl
import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from .loss import LostRange
from .spool_files import SpoolLockedError, SpoolSecurityError, fsync_dir, private_dir, read_spool_id, write_atomically
from .spool_format import (
    SEGMENT_HEADER_SIZE,
    SPOOL_SCHEMA,
    RecordEncoder,
    SegmentHeader,
    SpoolFormatError,
    decode_segment_header,
    encode_segment_header,
    header_seed,
    map_segment,
    open_private,
    read_body,
    scan_records,
)
from .spool_freed import encode_freed, freed_since, kept_freed, read_freed
from .spool_index import BatchEntry, IndexSnapshot, Segment, batch_entry
from .spool_layout import (
    FREED_FILE,
    ID_FILE,
    LOCK_FILE,
    OLD_SEGMENT_SUFFIX,
    OWNER_FILE,
    channel_dir,
    list_segments,
    segment_name,
)

__all__ = [
    "SPOOL_SCHEMA",
    "Spool",
    "ChannelLog",
    "LostRange",
    "SpoolLockedError",
    "SpoolSecurityError",
    "read_spool_id",
]

log = logging.getLogger(__name__)


@dataclass
class ChannelLog:
    """The spool of one ingest channel: an append-only log of numbered messages."""

    spool_dir: str
    channel: int
    spool_id: str
    fsync: bool = False
    segment_bytes: int = 64 << 20
    entries: list[BatchEntry] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    next_offset: int = 0
    #: offsets recovery could not read (torn in the middle, corrupt), in offset order
    lost: list[LostRange] = field(default_factory=list)
    #: the freed segments, oldest first, as ``[first, end, newest receive time (us)]`` (the
    #: last ``spool_freed.FREED_KEPT``; ``freed.json``): what ``start_at_time`` knows of what is gone
    freed: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dir = channel_dir(self.spool_dir, self.channel)
        private_dir(self.dir, fsync_parent=self.fsync)
        self.freed = read_freed(self.dir)
        # Two locks, so that the driver's calls (latest, earliest, snapshot, release) never
        # wait for a write: ``_write_lock`` serialises the writers (the receiver thread; a
        # stop's close) and is held through a record's serialising, checksum, write and
        # fsync; ``_lock`` guards the index (segments, entries, offsets) and is held only to
        # read it or to publish a written record. Order: ``_write_lock``, then ``_lock``.
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._next_seq = 0
        self._firsts: list[int] = []  # entries' first offsets, for bisection
        self._seed = header_seed(bytes.fromhex(self.spool_id))
        self._encoder = RecordEncoder()  # writers only (``_write_lock``)
        self._recover()

    # -- recovery -------------------------------------------------------------------------

    def _recover(self) -> None:
        """Rebuild the index from the segment files (after a restart or a crash)."""
        found = [(first, seq, os.path.join(self.dir, name)) for first, seq, name in list_segments(self.dir)]
        self._next_seq = max((seq for _, seq, _ in found), default=-1) + 1
        for first, seq, path in found:
            segment = Segment(first=first, seq=seq, path=path, end=first)
            self._recover_segment(segment)
            self.segments.append(segment)
            self.next_offset = max(self.next_offset, segment.end)
        # Damage at the end of an older segment: the offsets up to the next segment are lost
        # (a newer segment exists, so this was no unfinished write). In the newest segment it
        # is the write a crash interrupted: nothing after it was ever published.
        for segment, after in zip(self.segments, self.segments[1:]):
            if segment.tail_damage is not None:
                if after.first > segment.end:
                    self._lose(segment.end, after.first, segment, segment.tail_damage)
                else:
                    log.error("spool recovery: %s: %s", segment.path, segment.tail_damage)
        if self.segments and self.segments[-1].tail_damage is not None:
            log.warning(
                "spool recovery: %s ends with an unfinished write (%s); numbering continues at %d",
                self.segments[-1].path,
                self.segments[-1].tail_damage,
                self.segments[-1].end,
            )
        self.lost.sort(key=lambda r: r.first)
        for lost in self.lost:
            log.error("spool recovery: %s", lost.describe())
        # Empty segments (a roll just before a stop, a crash right after creating one) hold
        # nothing; only the newest is kept, because it carries the numbering.
        empty = [
            s
            for s in self.segments[:-1]
            if s.end == s.first and s.tail_damage is None and not any(r.path == s.path for r in self.lost)
        ]
        for segment in empty:
            self._delete(segment)
        self.segments = [s for s in self.segments if s not in empty]
        self._firsts = [e.first for e in self.entries]

    def _recover_segment(self, segment: Segment) -> None:
        view = map_segment(segment.path)
        if view is None:
            return
        segment.size = len(view)
        try:
            header = decode_segment_header(view)
            if (
                header.spool_id.hex() != self.spool_id
                or header.channel != self.channel
                or header.first != segment.first
            ):
                raise SpoolFormatError(
                    f"it belongs to another spool or channel (spool {header.spool_id.hex()}, channel {header.channel})"
                )
            trusted = True
        except SpoolFormatError as exc:
            trusted = False
            why = str(exc)
        offset = segment.first
        for record in scan_records(view, seed=header_seed(bytes.fromhex(self.spool_id))):
            if record.first < 0:
                if record.next_position >= len(view) and len(view) > SEGMENT_HEADER_SIZE:
                    segment.tail_damage = record.damage
                continue  # unreadable bytes mid-segment: the gap shows between its neighbours
            if record.first < offset:
                log.error(
                    "spool recovery: %s byte %d repeats offsets from %d; ignored",
                    segment.path,
                    record.position,
                    record.first,
                )
                continue
            if record.first > offset:
                self._lose(offset, record.first, segment, "unreadable records")
            if not trusted:
                self._lose(record.first, record.end, segment, f"segment header: {why}")
            elif record.damage is not None:
                self._lose(record.first, record.end, segment, f"record at byte {record.position}: {record.damage}")
            else:
                try:
                    batch = read_body(view, record)
                    self.entries.append(batch_entry(batch, record.first, segment, record.position))
                except Exception as exc:  # a checksummed body that is not our Arrow: still a loss, not a crash  # noqa: BLE001
                    self._lose(record.first, record.end, segment, f"record at byte {record.position}: {exc}")
            offset = record.end
        segment.end = offset

    def _lose(self, first: int, end: int, segment: Segment, reason: str) -> None:
        if end > first:
            self.lost.append(LostRange(self.channel, first, end, reason, path=segment.path))

    # -- writing (the receiver thread) ---------------------------------------------------------

    def advance_to(self, offset: int) -> None:
        """Continue numbering at ``offset`` (a checkpoint that is ahead of this spool: the
        offsets in between were seen by Spark and are never given to other messages)."""
        with self._write_lock:
            if offset > self.next_offset:
                self._close_segment()
                with self._lock:
                    self.next_offset = offset
                self._open_segment()

    def append(self, batch: pa.RecordBatch) -> None:
        """Write one batch as a record, make it durable as configured, then publish its
        offsets. On a failed write (disk full) nothing is published, the partial record is
        cut off where possible, and the next append starts a new segment."""
        if batch.num_rows == 0:
            return
        with self._write_lock:  # only writers change the newest segment and next_offset
            if self._fd is None or self.segments[-1].size >= self.segment_bytes:
                self._open_segment()
            segment = self.segments[-1]
            fd = self._fd
            assert fd is not None  # opened just above if it was not
            record, size = self._encoder.encode(self.next_offset, batch, self._seed)
            position = segment.size
            try:
                written = os.writev(fd, record)
                if written != size:
                    raise OSError(errno.ENOSPC, f"short write to {segment.path}")
                if self.fsync:
                    os.fsync(fd)
            except OSError:
                try:
                    os.ftruncate(fd, position)
                except OSError:
                    pass  # the torn record is where this segment's readable data ends
                self._close_segment()
                raise
            entry = batch_entry(batch, self.next_offset, segment, position)
            with self._lock:  # publish
                segment.size = position + written
                self.next_offset += batch.num_rows
                segment.end = self.next_offset
                self.entries.append(entry)
                self._firsts.append(entry.first)

    def roll(self) -> None:
        """Start a new segment now, so the current one becomes releasable by a commit."""
        with self._write_lock:
            if self._fd is not None and self.segments[-1].end > self.segments[-1].first:
                self._open_segment()

    def _open_segment(self) -> None:
        self._close_segment()
        seq = self._next_seq
        self._next_seq += 1
        path = os.path.join(self.dir, segment_name(self.next_offset, seq))  # (writers only: see _write_lock)
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            header = encode_segment_header(
                SegmentHeader(self.channel, self.next_offset, seq, bytes.fromhex(self.spool_id))
            )
            if os.write(fd, header) != len(header):
                raise OSError(errno.ENOSPC, f"short write of the segment header of {path}")
            if self.fsync:
                os.fsync(fd)
                fsync_dir(self.dir)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        with self._lock:
            self.segments.append(
                Segment(first=self.next_offset, seq=seq, path=path, size=SEGMENT_HEADER_SIZE, end=self.next_offset)
            )

    def _close_segment(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self) -> None:
        with self._write_lock:
            self._close_segment()

    # -- reading the index (the driver) --------------------------------------------------------

    @property
    def earliest(self) -> int:
        with self._lock:
            if self.entries:
                first = self.entries[0].first
                return min(first, self.lost[0].first) if self.lost else first
            return self.lost[0].first if self.lost else self.next_offset

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self.segments)

    def snapshot(self) -> IndexSnapshot:
        """The index as it is now, for the planner (entries are immutable once published)."""
        with self._lock:
            return IndexSnapshot(list(self.entries), list(self._firsts), list(self.lost))

    def segment_ages(self) -> list[tuple[int, int, int, int]]:
        """Each segment, oldest first, as ``(end offset, bytes, oldest receive time, newest
        receive time)`` of the messages it holds (times in us, ``0`` when it holds none):
        what a relay's retention frees by. The last is the one being written, which a
        release never deletes."""
        with self._lock:
            out = []
            for segment in self.segments:
                i = bisect.bisect_left(self._firsts, segment.first)
                j = bisect.bisect_left(self._firsts, segment.end)
                oldest, newest = (self.entries[i].received_us, self.entries[j - 1].received_us) if i < j else (0, 0)
                out.append((segment.end, segment.size, oldest, newest))
            return out

    def locate(self, offset: int) -> tuple[str, int] | None:
        """``(segment file name, byte position)`` of the record holding ``offset``, so a
        read task starts there instead of scanning its segment; ``None`` if not spooled."""
        with self._lock:
            i = bisect.bisect_right(self._firsts, offset) - 1
            if i < 0 or self.entries[i].end <= offset:
                return None
            entry = self.entries[i]
            return entry.segment.name, entry.position

    def start_at_time(self, received_us: int) -> tuple[int, LostRange | None]:
        """Where a query with ``startingTimestamp`` begins: the first message held that was
        received at or after ``received_us`` (the oldest held when the time is before it;
        the next offset when nothing held is that recent), and the freed messages that were
        received at or after it, if any (data loss under ``failOnDataLoss``)."""
        with self._lock:
            offset = next((e.first for e in self.entries if e.received_us >= received_us), self.next_offset)
            freed = list(self.freed)
        return offset, freed_since(freed, received_us, self.channel, self.spool_dir)

    # -- releasing (commit) -------------------------------------------------------------------

    def release_before(self, offset: int) -> int:
        """Delete the segments (never the newest) whose every offset is below ``offset``.
        Returns the bytes freed."""
        with self._lock:
            doomed = [s for s in self.segments[:-1] if s.end <= offset]
            if doomed:
                gone = {id(s) for s in doomed}
                self.segments = [s for s in self.segments if id(s) not in gone]
                keep = 0
                newest: dict[int, int] = {}
                while keep < len(self.entries) and id(self.entries[keep].segment) in gone:
                    entry = self.entries[keep]
                    newest[id(entry.segment)] = max(newest.get(id(entry.segment), 0), entry.received_us)
                    keep += 1
                del self.entries[:keep]
                del self._firsts[:keep]
                self.freed = kept_freed(
                    self.freed, [[s.first, s.end, newest[id(s)]] for s in doomed if id(s) in newest]
                )
                freed = encode_freed(self.freed)
            self.lost = [r for r in self.lost if r.end > offset]
        if doomed:
            write_atomically(self.dir, FREED_FILE, freed, fsync=self.fsync)
        # the files go outside the lock: unlinking a large file (its cached pages freed) is
        # slow, and the receiver publishes its next record meanwhile
        for segment in doomed:
            self._delete(segment)
        return sum(segment.size for segment in doomed)

    def _delete(self, segment: Segment) -> None:
        try:
            os.remove(segment.path)
        except FileNotFoundError:
            pass
        if self.fsync:
            fsync_dir(self.dir)


class Spool:
    """All channels of one source, the lock that makes the directory single-owner, and
    the spool's identity."""

    #: how long to wait for the lock of a previous owner that is still stopping (a query
    #: restarted right after a stop: the old reader drains its sockets for up to 2 s)
    lock_wait_s = 15.0

    def __init__(self, spool_dir: str, channels: int, *, fsync: bool = False, max_bytes: int = 1 << 30) -> None:
        self.spool_dir = spool_dir
        private_dir(spool_dir)
        lock_path = os.path.join(spool_dir, LOCK_FILE)
        try:
            self._lock_fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SpoolSecurityError(
                    f"{lock_path!r} is a symbolic link; the spool refuses to follow it (someone could have "
                    "planted it): remove it"
                ) from None
            raise
        os.fchmod(self._lock_fd, 0o600)
        try:
            deadline = time.monotonic() + self.lock_wait_s
            while True:
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.05)
        except BlockingIOError:
            owner = os.pread(self._lock_fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self._lock_fd)
            raise SpoolLockedError(
                f"spool directory {spool_dir!r} is in use by another running query (pid {owner}, still "
                f"holding it after {self.lock_wait_s:.0f} s); "
                "stop it, or give this query its own 'spoolDir' option"
            ) from None
        try:
            os.ftruncate(self._lock_fd, 0)
            os.pwrite(self._lock_fd, str(os.getpid()).encode(), 0)
            self._refuse_old_format(channels)
            self.spool_id = self._identity(fsync)
            # A fresh id per owning process: a read task that finds this id in OWNER knows it
            # sees this very spool (not a stale directory of the same name on another host).
            self.owner_id = uuid.uuid4().hex
            write_atomically(spool_dir, OWNER_FILE, self.owner_id.encode(), fsync=False)
            segment_bytes = max(1 << 20, min(64 << 20, max_bytes // 8))
            self.channels = [
                ChannelLog(spool_dir, c, self.spool_id, fsync=fsync, segment_bytes=segment_bytes)
                for c in range(channels)
            ]
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _refuse_old_format(self, channels: int) -> None:
        for c in range(channels):
            directory = channel_dir(self.spool_dir, c)
            if os.path.isdir(directory) and any(n.endswith(OLD_SEGMENT_SUFFIX) for n in os.listdir(directory)):
                raise SpoolFormatError(
                    f"spool directory {self.spool_dir!r} holds segments of an earlier spark-zmq version "
                    f"({directory}/*{OLD_SEGMENT_SUFFIX}, a format without offsets or checksums): drain it with that "
                    "version, or move it away and start this query with a new checkpointLocation"
                )

    def _identity(self, fsync: bool) -> str:
        """The spool's id: read back, or minted once when the spool is created."""
        existing = read_spool_id(self.spool_dir)
        if existing is not None:
            return existing
        spool_id = uuid.uuid4().hex
        write_atomically(self.spool_dir, ID_FILE, spool_id.encode(), fsync=True)
        return spool_id

    def latest(self) -> dict[str, int]:
        return {str(c.channel): c.next_offset for c in self.channels}

    def earliest(self) -> dict[str, int]:
        return {str(c.channel): c.earliest for c in self.channels}

    @property
    def size_bytes(self) -> int:
        return sum(c.size_bytes for c in self.channels)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(self._lock_fd)
