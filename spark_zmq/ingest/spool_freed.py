"""What a channel remembers of the segments it freed: ``freed.json`` in its directory.

Why: ``startingTimestamp`` asks for the messages received at or after a time, and some of
them may already be gone (committed by another query on the spool and deleted). Without a
record of what was freed, and when those messages arrived, such a start would silently skip
them; with it they are data loss, reported through ``failOnDataLoss`` (``ingest.loss``).
The record is bounded (the last ``FREED_KEPT`` segments): it only needs to say whether a
recent enough message was freed, not to keep every segment ever deleted.
"""

from __future__ import annotations

import json
import logging
import os
import time

from .loss import LostRange
from .spool_layout import FREED_FILE

__all__ = ["FREED_FILE", "FREED_KEPT", "read_freed", "kept_freed", "encode_freed", "freed_since"]

log = logging.getLogger(__name__)

#: a channel's record of its freed segments (``ChannelLog.freed``), and how many it keeps
FREED_KEPT = 256


def read_freed(channel_dir: str) -> list[list[int]]:
    """The record in ``channel_dir``, ``[first, end, newest receive time (us)]`` per freed
    segment, oldest first; empty when there is none, or with a warning when it is damaged
    (it only informs ``startingTimestamp``: a damaged one must not stop the spool)."""
    path = os.path.join(channel_dir, FREED_FILE)
    try:
        with open(path, "rb") as f:
            kept = json.loads(f.read(1 << 20))
        if isinstance(kept, list) and all(
            isinstance(x, list) and len(x) == 3 and all(isinstance(v, int) for v in x) for x in kept
        ):
            return kept
        log.warning("ignoring %s: not a list of freed segments", path)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
    return []


def kept_freed(freed: list[list[int]], more: list[list[int]]) -> list[list[int]]:
    """``freed`` with the segments of ``more`` after it, the last ``FREED_KEPT`` of them."""
    return (freed + more)[-FREED_KEPT:]


def encode_freed(freed: list[list[int]]) -> bytes:
    """The bytes of ``FREED_FILE`` for ``freed``."""
    return json.dumps(freed).encode()


def freed_since(freed: list[list[int]], received_us: int, channel: int, spool_dir: str) -> LostRange | None:
    """The freed offsets of ``channel`` that include messages received at or after
    ``received_us`` (data loss for a query with ``startingTimestamp``), or ``None``."""
    gone = [f for f in freed if f[2] >= received_us]
    if not gone:
        return None
    first, end = gone[0][0], max(f[1] for f in gone)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(received_us / 1e6))
    return LostRange(
        channel,
        first,
        end,
        text=(
            f"channel {channel}: offsets {first}..{end}, freed from the spool {spool_dir!r} before this query "
            f"started, include messages received at or after startingTimestamp ({received_us // 1000} ms, {when} UTC)"
        ),
    )
