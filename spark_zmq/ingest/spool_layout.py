"""Where a spool's files are: the one module that spells a spool directory's layout.

Why one module: the receiver's side (``spool``: writes, recovers and frees segments), the
read side (``spool_reader``: a read task reading a range in place) and the fetch service
all find the same files, and two spellings of a name or of the listing rule would let them
disagree without a test noticing. The bytes inside the files are ``spool_format``'s.

A spool directory holds ``SPOOL_ID`` (its identity, written once), ``OWNER`` (a fresh id
per owning process, so a read task knows it sees this very spool and not a stale directory
of the same name on another host), ``LOCK`` (the owning process's pid, held with ``flock``)
and one directory per channel, ``ch-<n>``, of segment files
``<first offset, 20 digits>-<sequence, 10 digits>.seg`` and ``freed.json`` (the record of
freed segments). ``*.arrows`` segments are an earlier version's, refused on start.
"""

from __future__ import annotations

import os

__all__ = [
    "ID_FILE",
    "OWNER_FILE",
    "LOCK_FILE",
    "FREED_FILE",
    "SEGMENT_SUFFIX",
    "OLD_SEGMENT_SUFFIX",
    "channel_dir",
    "segment_name",
    "parse_segment_name",
    "list_segments",
]

#: the spool's identity, written once when the spool is created
ID_FILE = "SPOOL_ID"
#: the owning process's fresh id
OWNER_FILE = "OWNER"
#: the owning process's pid, under ``flock``
LOCK_FILE = "LOCK"
#: a channel's record of its freed segments
FREED_FILE = "freed.json"
SEGMENT_SUFFIX = ".seg"
#: an earlier spark-zmq version's segments (a format without offsets or checksums)
OLD_SEGMENT_SUFFIX = ".arrows"


def channel_dir(spool_dir: str, channel: int) -> str:
    """The directory of ``channel``'s segments."""
    return os.path.join(spool_dir, f"ch-{channel}")


def segment_name(first: int, seq: int) -> str:
    return f"{first:020d}-{seq:010d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first offset, seq)`` of a segment file name, ``None`` for any other file."""
    if not name.endswith(SEGMENT_SUFFIX):
        return None
    stem = name[: -len(SEGMENT_SUFFIX)]
    first, sep, seq = stem.partition("-")
    if not sep or not first.isdigit() or not seq.isdigit() or len(first) != 20 or len(seq) != 10:
        return None
    return int(first), int(seq)


def list_segments(directory: str) -> list[tuple[int, int, str]]:
    """The segment files of a channel directory as ``(first offset, seq, file name)``, in
    order (first offset, then sequence); none for a directory that does not exist. Other
    files (``freed.json``, a writer's temporary file) are not segments."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        parsed = parse_segment_name(name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], name))
    found.sort()
    return found
