"""A query's own ingest (option ``endpoints`` with ``receivers=threads``), as the reader sees it.

``LocalIngest`` is ``spark_zmq.ingest.runtime.IngestRuntime`` created inside the
long-running Python process that hosts the ``DataSourceStreamReader``, lazily by the first
offset call (never in a constructor: Spark also builds readers in short-lived planning
processes, where a bind would only steal the port), plus what only Spark needs: whether
executors need the fetch service, and the read task for a range.

``open_ingest`` is the ingest a query's options ask for, ``LocalIngest`` or relays
(``relays.RelayIngest``). The data source hands it to the stream reader, which calls it on
its first offset call; a test hands the reader another factory, as Spark's Kafka connector
hands ``KafkaMicroBatchStream`` its ``KafkaOffsetReader``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..ingest.config import IngestConfig
from ..ingest.runtime import IngestRuntime, RangeInfo
from ..options import SourceOptions
from .driver_host import fetch_service_host
from .locality import needs_fetch_service
from .partitions import SpoolRange
from .planner import ChannelIndex
from .relays import RelayIngest

__all__ = ["Ingest", "IngestChannel", "LocalIngest", "open_ingest"]


class IngestChannel(Protocol):
    """One channel as the reader sees it: a spool's ``ChannelLog`` or a relay's channel."""

    channel: int

    @property
    def next_offset(self) -> int: ...

    @property
    def earliest(self) -> int: ...

    def snapshot(self) -> ChannelIndex:
        """The channel's index for planning: a copy in memory for a spool's channel, the
        relay's own (every question a round trip) for a relay's."""
        ...

    def advance_to(self, offset: int) -> None: ...


class Ingest(Protocol):
    """What the stream reader needs of the ingest it reads: the driver's own spool and
    receivers (``LocalIngest``) or relays, standalone or its receiver processes
    (``relays.RelayIngest``). Offsets are ``{"<channel>": next offset}``."""

    if TYPE_CHECKING:
        # read-only to the reader: ``LocalIngest``'s is a property, ``RelayIngest``'s a list
        # of its own channel type (a settable member would have to be exactly this type)
        @property
        def channels(self) -> Sequence[IngestChannel]: ...
    else:
        # at run time a data member, as tests/test_layers.py reads the interface
        channels: Sequence[IngestChannel]
    #: whether the channels receive (a spool must learn the checkpoint's numbering first)
    started: bool
    #: where each channel's spool ended when the query started (``startingOffsets=latest``)
    start_offsets: dict[str, int]

    @property
    def spool_id(self) -> str: ...

    @property
    def where(self) -> str:
        """The spool(s), for messages."""
        ...

    @property
    def channel_names(self) -> list[str]: ...

    def start(self) -> None:
        """Start receiving, once the reader has checked the checkpoint."""
        ...

    def raise_if_failed(self) -> None: ...

    def latest(self) -> dict[str, int]: ...

    def earliest(self) -> dict[str, int]: ...

    def start_at_time(self, timestamp_ms: int) -> dict[int, tuple[int, Any | None]]:
        """Each channel's first offset received at or after ``timestamp_ms`` and the
        ``LostRange`` of freed messages received at or after it, if any."""
        ...

    def release(self, end: dict[str, int]) -> None:
        """Free what is below ``end`` (Spark has committed it)."""
        ...

    def drain_until_idle(self, idle_s: float) -> None: ...

    def rejected_handshakes(self) -> int: ...

    def broken_connections(self) -> int:
        """Producer connections that broke with data possibly in flight, so far."""
        ...

    def describe(self, ranges: dict[int, tuple[int, int]]) -> dict[int, RangeInfo]:
        """Messages, bytes, losses and read hint of each channel's ``(start, end)``: what
        planning a micro-batch needs, in one call (one round trip per relay)."""
        ...

    def spool_range(self, channel: int, start: int, end: int, hint: tuple | None = None) -> SpoolRange:
        """The read task for ``[start, end)`` of ``channel`` (``hint``: where ``start``
        lies, from ``describe``; else looked up)."""
        ...

    def stop(self) -> None: ...


class LocalIngest(IngestRuntime):
    """The driver's spool and receivers, serving read tasks."""

    def __init__(self, options: SourceOptions) -> None:
        serve_fetch = needs_fetch_service(options.spool_access)
        super().__init__(
            IngestConfig.from_options(options),
            serve_fetch=serve_fetch,
            fetch_host=fetch_service_host(options.spool_server_host) if serve_fetch else None,
        )

    def spool_range(self, channel: int, start: int, end: int, hint: tuple | None = None) -> SpoolRange:
        """The read task for ``[start, end)`` of ``channel``."""
        return SpoolRange(
            self.config.spool_dir,
            channel,
            start,
            end,
            self.spool.owner_id,
            self.server.access if self.server is not None else None,
            hint if hint is not None else (self.spool.channels[channel].locate(start) or ()),
            self.spool.spool_id,
        )


def open_ingest(options: SourceOptions) -> Ingest:
    """The ingest ``options`` ask for: relays (option ``relays``, or receiver processes,
    ``receivers=processes``, which are relays the query starts) or the driver's own
    receiver threads. Binds or attaches at once: call it where the ingest is to live
    (the reader's first offset call), never in a planning process."""
    if options.relays or options.receivers == "processes":
        return RelayIngest(options)
    return LocalIngest(options)
