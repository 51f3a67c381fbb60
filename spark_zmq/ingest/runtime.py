"""One ingest unit: spool, sockets, receivers, disk budget, and optionally the fetch service.

A query's driver runs one inside the long-running Python process that hosts its stream
reader (``spark_zmq.source.reader_ingest``); a relay runs one as its core (``spark_zmq.relay``).

Sockets are bound when the runtime is created, but receivers start only after the stream
reader has checked the checkpoint against the spool (``start``): a recreated spool must
learn where Spark's numbering is before it numbers a single message, or a message could
get an offset Spark already used. Meanwhile libzmq queues what arrives (up to ``hwm``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .config import IngestConfig
from .fetch import SpoolServer
from .loss import LostRange
from .receiver import Receiver, open_channel_socket
from .spool import ChannelLog, Spool
from .spool_budget import SpoolBudget

__all__ = ["IngestRuntime", "RangeInfo", "describe_range"]


@dataclass(frozen=True)
class RangeInfo:
    """What planning needs of one channel's ``[start, end)``: its messages and payload
    bytes, the losses inside it, and where ``start`` lies in the spool (a read task's hint)."""

    rows: int
    bytes: int
    lost: list[LostRange]
    hint: tuple[str | int, ...] = ()


def describe_range(log: Any, start: int, end: int) -> RangeInfo:
    """``RangeInfo`` of ``[start, end)`` of a ``ChannelLog``, from one index snapshot."""
    index = log.snapshot()
    rows, nbytes = index.count_between(start, end) if end > start else (0, 0)
    lost = index.lost_within(start, end) if end > start else []
    return RangeInfo(rows, nbytes, lost, tuple(log.locate(start) or ()))


class IngestRuntime:
    """Spool + one receiver per endpoint (ingest channel); with ``serve_fetch``, the fetch
    service too, for read tasks that cannot see the spool directory, listening on
    ``fetch_host`` (the caller's answer to "which address do executors use")."""

    def __init__(self, config: IngestConfig, *, serve_fetch: bool = False, fetch_host: str | None = None) -> None:
        self.config = config
        self.spool = Spool(
            config.spool_dir, len(config.endpoints), fsync=config.spool_fsync, max_bytes=config.max_spool_bytes
        )
        self.budget = SpoolBudget(config.max_spool_bytes, self.spool.channels)
        #: where the spool ended when this query started: startingOffsets=latest begins here,
        #: whichever offset call (initialOffset or prepareForTriggerAvailableNow) came first.
        self.start_offsets = self.spool.latest()
        self.receivers: list[Receiver] = []
        self.started = False
        try:
            for endpoint, channel_log in zip(config.endpoints, self.spool.channels):
                socket = open_channel_socket(
                    config.pattern,
                    endpoint,
                    hwm=config.hwm,
                    topics=config.topics,
                    max_message_bytes=config.max_message_bytes,
                    curve=config.curve,
                    heartbeat=config.heartbeat,
                    rcvbuf=config.receive_buffer_bytes,
                    tuning=config.tuning,
                )
                self.receivers.append(
                    Receiver(
                        socket,
                        channel_log,
                        self.budget,
                        config.format,
                        batch_bytes=min(8 << 20, config.max_spool_bytes // 4),
                    )
                )
        except BaseException:
            for receiver in self.receivers:
                receiver.socket.close(linger=0)
            self.spool.close()
            raise
        self.server: SpoolServer | None = None
        if serve_fetch:
            try:
                self.server = SpoolServer(
                    config.spool_dir,
                    host=fetch_host or config.spool_server_host,
                    ports=config.spool_server_port,
                    spool_id=self.spool.spool_id,
                    locate=lambda channel, offset: self.spool.channels[channel].locate(offset),
                    channels=len(self.spool.channels),
                )
            except BaseException:
                for receiver in self.receivers:
                    receiver.socket.close(linger=0)
                self.spool.close()
                raise

    # -- what the stream reader uses (``source.relays.RelayIngest`` offers the same for relays) ------

    @property
    def spool_id(self) -> str:
        return self.spool.spool_id

    def describe(self, ranges: dict[int, tuple[int, int]]) -> dict[int, RangeInfo]:
        """``RangeInfo`` of each channel's range, ``{channel: (start, end)}``."""
        return {c: describe_range(self.spool.channels[c], lo, hi) for c, (lo, hi) in ranges.items()}

    @property
    def channels(self) -> list[ChannelLog]:
        return self.spool.channels

    @property
    def where(self) -> str:
        """The spool, for messages."""
        return repr(self.config.spool_dir)

    @property
    def channel_names(self) -> list[str]:
        return [str(endpoint) for endpoint in self.config.endpoints]

    def earliest(self) -> dict[str, int]:
        return self.spool.earliest()

    def start_at_time(self, timestamp_ms: int) -> dict[int, tuple[int, LostRange | None]]:
        """Each channel's first offset received at or after ``timestamp_ms``, with the freed
        messages that were (``ChannelLog.start_at_time``): option ``startingTimestamp``."""
        return {c.channel: c.start_at_time(timestamp_ms * 1000) for c in self.spool.channels}

    def start(self) -> None:
        """Start receiving (once the numbering is settled, see the module docstring)."""
        if not self.started:
            self.started = True
            for receiver in self.receivers:
                receiver.start()

    def raise_if_failed(self) -> None:
        for receiver in self.receivers:
            if receiver.error is not None:
                raise RuntimeError(
                    f"the ZeroMQ receiver of channel {receiver.log.channel} "
                    f"({self.config.endpoints[receiver.log.channel]}) failed: {receiver.error!r}"
                ) from receiver.error

    def drain_until_idle(self, idle_s: float) -> None:
        """Wait until no receiver has taken a message for ``idle_s`` seconds (used to pin
        the end of a Trigger.AvailableNow run at "what was there")."""
        start = time.monotonic()
        while True:
            self.raise_if_failed()
            last = max([start] + [r.last_receive for r in self.receivers])
            remaining = last + idle_s - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(remaining, 0.05))

    def broken_connections(self) -> int:
        """Producer connections that broke with data possibly in flight, since the start."""
        return sum(receiver.broken_connections for receiver in self.receivers)

    def rejected_handshakes(self) -> int:
        """Handshakes the channels' sockets refused (CURVE), since the query started."""
        return sum(receiver.rejected_handshakes for receiver in self.receivers)

    def latest(self) -> dict[str, int]:
        return self.spool.latest()

    def release(self, end: dict[str, int]) -> None:
        freed = 0
        for channel_log in self.spool.channels:
            offset = end.get(str(channel_log.channel))
            if offset is not None:
                freed += channel_log.release_before(int(offset))
        if freed:
            self.budget.released()

    def stop(self, drain: bool = True) -> None:
        """Stop the receivers (each spools what its socket still holds, unless the spool
        is gone: ``drain=False``), then the rest."""
        for receiver in self.receivers:
            if self.started:
                receiver.stop(drain=drain)
            else:
                receiver.socket.close(linger=0)
        if self.server is not None:
            self.server.close()
        self.spool.close()
