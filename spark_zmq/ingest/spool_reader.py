"""The spool, executor side: read ``[start, end)`` of a channel and decode it for Spark.

Read tasks run in Spark's Python workers, possibly on other hosts and long after the
batch was planned (a retry, a restart that re-runs the last batch). So a task checks
everything it reads: each segment's spool id against the id the batch was planned on
(a recreated spool directory is another spool, whatever its file names say), each
record's checksum, and that the records it finds cover its range with no gap. Whatever
fails is a ``DataLossError`` naming the channel, the offsets and the file, or, with
``failOnDataLoss=false``, skipped and logged with the same details.

Local or fetched: a task that sees the driver's spool directory (local and
local-cluster mode, a shared filesystem) maps its files directly; otherwise it fetches
the range from the driver's spool server (``fetch``). A query that reads relays reads a
relay's spool the same way (in place on the relay's host, else from the relay's port);
its losses then name the relay (``owner``), whose retention frees what a lagging query
has not read: the user must learn which relay and channel, not "the driver's spool".
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

import pyarrow as pa

from .loss import LossPolicy, LostRange
from .spool_format import (
    SEGMENT_HEADER_SIZE,
    Record,
    SpoolFormatError,
    decode_segment_header,
    header_seed,
    map_segment,
    read_body,
    scan_records,
)
from .spool_layout import OWNER_FILE, channel_dir, list_segments

__all__ = ["read_range", "coalesce", "sees_spool", "LossPolicy", "LostRange", "skip_loss", "gone_from_relay"]

#: skip and log what cannot be read, counting it nowhere the user sees: for reading a
#: spool known to be damaged (a query passes its own ``LossPolicy``)
skip_loss = LossPolicy(fail=False)


def gone_from_relay(owner: str, channel: int, start: int, end: int, where: str) -> str:
    """The words for offsets a relay's spool no longer has, naming the relay (``owner``,
    ``"the relay at tcp://host:port"``) and its channel, and why that happens: the batch
    was planned while the relay held them, and its retention freed them before the read
    task came (a query lagging behind ``--retention-bytes``/``--retention-seconds``). A
    query's own receiver process (``receivers=processes``) has no retention: its spool's
    files were removed."""
    said = f"offsets {start}..{end} of channel {channel} of {owner} {where}"
    if not owner.startswith("the relay at "):  # the labels of ``source.relays``
        return said + ": its spool's files were removed after this batch was planned"
    return (
        said + ": the relay freed them after this batch was planned (its --retention-bytes or "
        "--retention-seconds frees what a lagging query has not read yet) or its spool files were removed; "
        "give the relay more retention or let the query keep up"
    )


def sees_spool(spool_dir: str, owner_id: str) -> bool:
    """Whether this process sees the spool directory that ``owner_id`` wrote."""
    try:
        with open(os.path.join(spool_dir, OWNER_FILE)) as owner:
            return owner.read().strip() == owner_id
    except OSError:
        return False


def read_range(
    spool_dir: str,
    channel: int,
    start: int,
    end: int,
    hint: Sequence[str | int] | None = None,
    *,
    spool_id: str | None = None,
    on_loss: LossPolicy | None = None,
    owner: str | None = None,
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Yield ``(first offset, spool batch)`` covering ``[start, end)`` of a channel, in
    offset order.

    ``hint`` (``ChannelLog.locate(start)``: segment file name and byte position) lets the
    read start at the record holding ``start`` instead of scanning its segment. With
    ``spool_id``, segments of any other spool are refused. Offsets that are missing or
    unreadable go to ``on_loss`` (raise, the default, or log and skip); the batches yielded
    then cover the rest of the range.

    ``owner`` names whose spool it is when it is not the query's own (the driver's): a
    relay's (``"the relay at tcp://host:port"``, read in place on its host), named in
    every loss; ``channel`` is then the relay's channel.
    """
    if end <= start:
        return
    policy = on_loss if on_loss is not None else LossPolicy(fail=True)
    lose: Callable[[LostRange], None] = policy if owner is None else _naming(policy, owner)
    directory = channel_dir(spool_dir, channel)
    segments = list_segments(directory)
    # The segment holding ``start``: the last one that begins at or before it.
    i = bisect.bisect_right([(first, seq) for first, seq, _ in segments], (start, 1 << 62)) - 1
    if i < 0:
        i = 0
    position = start
    #: damage found at the end of the segment read last (names the file when offsets are missing)
    tail: str | None = None
    for first, _seq, name in segments[i:]:
        if position >= end:
            return
        path = os.path.join(directory, name)
        view = map_segment(path)
        if view is None or len(view) < SEGMENT_HEADER_SIZE:
            continue  # deleted meanwhile, or created and not yet written: holds nothing
        try:
            header = decode_segment_header(view)
        except SpoolFormatError as exc:
            if first >= end:
                break
            # its offsets show as a gap before the next readable record
            lose(
                LostRange(
                    channel, position, position, text=f"segment {path} of channel {channel} is unreadable ({exc})"
                )
            )
            continue
        if spool_id is not None and header.spool_id.hex() != spool_id:
            lose(
                LostRange(
                    channel,
                    position,
                    end,
                    text=(
                        f"offsets {position}..{end} of channel {channel} were planned on spool {spool_id}, but {path} "
                        f"belongs to spool {header.spool_id.hex()}: the spool directory {spool_dir!r} was recreated"
                    ),
                )
            )
            return
        byte_position = SEGMENT_HEADER_SIZE
        if hint and position == start and hint[0] == name:
            byte_position = int(hint[1])
        previous_tail, tail = tail, None
        for record in scan_records(view, byte_position, seed=header_seed(header.spool_id)):
            if record.first < 0:
                tail = f"{path}: {record.damage}"  # the gap shows at the next readable record
                continue
            if record.end <= position:
                tail = None
                continue
            if record.first >= end:
                if record.position != byte_position or not previous_tail:
                    tail = None
                else:
                    tail = previous_tail  # nothing readable between the damage and the range's end
                break
            tail = None
            if record.first > position:
                where = previous_tail if record.position == byte_position and previous_tail else path
                lose(
                    LostRange(
                        channel,
                        position,
                        min(record.first, end),
                        text=f"offsets {position}..{min(record.first, end)} of channel {channel} are "
                        f"missing (unreadable in {where})",
                    )
                )
                position = record.first
                if position >= end:
                    return
            if record.damage is not None:
                lose(_in_record(channel, path, record, record.damage))
                position = record.end
                continue
            try:
                batch = read_body(view, record)
            except (pa.ArrowException, ValueError, OSError) as exc:
                lose(_in_record(channel, path, record, exc))
                position = record.end
                continue
            lo, hi = position - record.first, min(end, record.end) - record.first
            yield position, (batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo))
            position = record.first + hi
            if position >= end:
                return
    if position < end:
        if tail is not None:
            lose(
                LostRange(
                    channel,
                    position,
                    end,
                    text=f"offsets {position}..{end} of channel {channel} are missing (unreadable in {tail})",
                )
            )
            return
        if owner is not None:
            policy(
                LostRange(
                    channel,
                    position,
                    end,
                    text=gone_from_relay(owner, channel, position, end, f"are no longer in its spool {spool_dir!r}"),
                )
            )
            return
        lose(
            LostRange(
                channel,
                position,
                end,
                text=(
                    f"offsets {position}..{end} of channel {channel} are not in the spool {spool_dir!r} "
                    "(deleted or pruned, or written on another machine: executors must see the driver's spoolDir)"
                ),
            )
        )


def _naming(policy: LossPolicy, owner: str) -> Callable[[LostRange], None]:
    """``policy``, with ``owner`` named after each loss's words (as a relay's own reports are)."""
    return lambda loss: policy(replace(loss, text=f"{loss.describe()} ({owner})"))


def _in_record(channel: int, path: str, record: Record, damage: object) -> LostRange:
    """A record whose offsets are known but whose bytes are damaged (or not our Arrow)."""
    return LostRange(
        channel,
        record.first,
        record.end,
        text=(
            f"offsets {record.first}..{record.end} of channel {channel} in {path}, record at byte {record.position}: "
            f"{damage}"
        ),
    )


def coalesce(
    batches: Iterable[tuple[int, pa.RecordBatch]], max_rows: int = 65_536, max_bytes: int = 16 << 20
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """Join runs of consecutive ``(first offset, spool batch)`` into batches of up to
    ``max_rows`` rows / about ``max_bytes`` bytes (never across a gap of skipped offsets).

    Why: a receiver appends whatever one receive call returned, so a slow, steady producer
    leaves thousands of few-row batches in the spool; decoding and handing each to Spark
    separately costs far more than the rows themselves (docs/performance.md, "Measured
    design choices").
    """
    group: list[pa.RecordBatch] = []
    first = rows = size = 0
    for offset, batch in batches:
        if group and (rows + batch.num_rows > max_rows or size + batch.nbytes > max_bytes or offset != first + rows):
            yield first, group[0] if len(group) == 1 else pa.concat_batches(group)
            group, rows, size = [], 0, 0
        if not group:
            first = offset
        group.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
    if group:
        yield first, group[0] if len(group) == 1 else pa.concat_batches(group)
