"""Input partitions: what one Spark read task is told to read (must pickle small)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..ingest.fetch import FetchAccess

__all__ = ["SpoolRange", "InlineMessages"]


@dataclass
class SpoolRange(InputPartition):
    """Messages ``[start, end)`` of one channel, read from the spool: directly when the task
    sees the spool directory (``owner_id`` matches), else fetched from the driver's fetch
    service (``fetch``: its endpoint and this query's CURVE client keys; ``None`` when the
    driver runs none because every executor shares its host)."""

    spool_dir: str
    channel: int
    start: int
    end: int
    owner_id: str = ""
    fetch: FetchAccess | None = None
    #: where ``start`` is in the spool (``ChannelLog.locate``: segment file name, byte
    #: position), so the task need not scan the segment from its beginning; empty when unknown
    hint: tuple = ()
    #: the spool the batch was planned on: a task refuses segments of any other spool
    spool_id: str = ""
    #: the channel's number inside its spool when it differs from ``channel`` (the query's
    #: partition number): a relay's channel 0 can be the query's partition 3
    spool_channel: int = -1
    #: committedOnly: the decisions of the batches this range holds
    #: (``run_tags.encode_reading``); empty otherwise
    committed_runs: tuple = ()

    @property
    def channel_in_spool(self) -> int:
        return self.spool_channel if self.spool_channel >= 0 else self.channel


@dataclass
class InlineMessages(InputPartition):
    """A bounded batch read's messages, carried in the partition itself (Arrow IPC bytes of
    spool batches): the driver received them, the executors decode them."""

    channel: int
    first_offset: int
    ipc: bytes
