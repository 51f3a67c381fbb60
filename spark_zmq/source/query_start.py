"""Where a new query began, kept until Spark has committed its first batch.

Why: Spark asks ``initialOffset`` for the start of batch 0 each time the query starts
until batch 0 is in its commit log, and re-runs batch 0 from the answer. A query stopped
(or its driver killed) while batch 0 ran, restarted on receivers that kept receiving
meanwhile (``receivers=processes`` lingering, or standalone relays), would get a later
"latest" the second time: batch 0 would re-run from there and the messages between the two
answers would be skipped, silently. Spark's Kafka source writes its initial offsets into
the checkpoint for the same reason; a Python data source does not see the checkpoint, so
the answer is kept in the spool directory (``spoolDir``, derived from the options, so a
restarted query finds it) and given again until the first commit.

A query with a new checkpoint on a spool whose earlier query never committed a batch gets
that earlier start too: it reads more of what the spool holds, never less.
"""

from __future__ import annotations

import logging
import os

from ..ingest.spool_files import private_dir, write_atomically
from .offsets import ChannelOffsets, OffsetsFormatError

__all__ = ["QueryStart"]

log = logging.getLogger(__name__)

#: the file in ``spoolDir``: the offsets as Spark's offset log holds them (``ChannelOffsets``)
FILE_NAME = "query-start.json"
#: larger is not a file of ours
_MAX_BYTES = 1 << 16


class QueryStart:
    """``recall``/``remember``/``forget`` the first batch's start offsets of the query whose
    spool directory is ``spool_dir``."""

    def __init__(self, spool_dir: str) -> None:
        self.spool_dir = spool_dir
        self.path = os.path.join(spool_dir, FILE_NAME)

    def recall(self, spool_id: str, channels: int) -> ChannelOffsets | None:
        """The offsets remembered for this spool and its ``channels`` channels, or None
        (none kept, another spool's, or a file that is not one of ours: logged and ignored)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(_MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read %s (%s): the query starts at the spool's latest offsets", self.path, exc)
            return None
        if len(data) > _MAX_BYTES:
            log.warning("ignoring %s: larger than %d bytes", self.path, _MAX_BYTES)
            return None
        try:
            kept = ChannelOffsets.from_json(data)
        except OffsetsFormatError:
            log.warning(
                'ignoring %s: not this source\'s offsets ({"<channel>": <offset>, ..., "spool": "<id>"})', self.path
            )
            return None
        if kept.spool != spool_id or set(kept) != set(range(channels)):
            return None  # another spool's (recreated) or other channels: not this query's start
        return kept

    def remember(self, offsets: ChannelOffsets) -> None:
        """Keep ``offsets`` (with their spool; written whole or not at all)."""
        private_dir(self.spool_dir)
        write_atomically(self.spool_dir, FILE_NAME, offsets.to_json().encode())

    def forget(self) -> None:
        """Spark has committed a batch: the start is in its checkpoint now."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
