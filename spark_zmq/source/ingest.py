"""The driver-side ingest runtime of one streaming query: spool, receivers, budget.

It lives inside the long-running Python process that hosts the ``DataSourceStreamReader``
and is started lazily by the first offset call (never in a constructor: Spark also builds
readers in short-lived planning processes, where a bind would only steal the port).
"""

from __future__ import annotations

import time
from typing import Optional

from ..options import SourceOptions
from .fetch import SpoolServer
from .receiver import Receiver, SpoolBudget, open_channel_socket
from .spool import Spool

__all__ = ["IngestRuntime"]


class IngestRuntime:
    """Spool + one receiver per endpoint (ingest channel)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.spool = Spool(
            options.spool_dir, len(options.endpoints), fsync=options.spool_fsync, max_bytes=options.max_spool_bytes
        )
        self.budget = SpoolBudget(options.max_spool_bytes, self.spool.channels)
        #: where the spool ended when this query started: startingOffsets=latest begins here,
        #: whichever offset call (initialOffset or prepareForTriggerAvailableNow) came first.
        self.start_offsets = self.spool.latest()
        self.receivers: list[Receiver] = []
        try:
            for endpoint, channel_log in zip(options.endpoints, self.spool.channels):
                socket = open_channel_socket(options.pattern, endpoint, hwm=options.hwm, topics=options.topics)
                self.receivers.append(
                    Receiver(
                        socket, channel_log, self.budget, options.format,
                        batch_bytes=min(8 << 20, options.max_spool_bytes // 4),
                    )
                )
        except BaseException:
            for receiver in self.receivers:
                receiver.socket.close(linger=0)
            self.spool.close()
            raise
        self.server: Optional[SpoolServer] = None
        if options.spool_access != "local":
            self.server = SpoolServer(options.spool_dir, host=options.spool_server_host,
                                      locate=lambda channel, offset: self.spool.channels[channel].locate(offset))
        for receiver in self.receivers:
            receiver.start()

    def raise_if_failed(self) -> None:
        for receiver in self.receivers:
            if receiver.error is not None:
                raise RuntimeError(
                    f"the ZeroMQ receiver of channel {receiver.log.channel} "
                    f"({self.options.endpoints[receiver.log.channel]}) failed: {receiver.error!r}"
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

    def stop(self) -> None:
        for receiver in self.receivers:
            receiver.stop()
        if self.server is not None:
            self.server.close()
        self.spool.close()

    @property
    def receivers_alive(self) -> Optional[bool]:
        return all(r.alive for r in self.receivers) if self.receivers else None
