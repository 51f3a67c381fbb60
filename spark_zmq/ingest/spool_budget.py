"""The spool's disk budget (option ``maxSpoolBytes``), shared by the receivers of one spool.

Why: a full spool must hold producers back, never drop what they send (docs/architecture.md,
"6. Guarantees": memory is bounded, a full spool holds producers back). A receiver asks the
budget before each receive batch and waits here while it is spent; a commit that deletes
segments wakes it (``released``). The budget only reads the channels' sizes: the log
itself (``spool.ChannelLog``) knows nothing of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .spool import ChannelLog

__all__ = ["SpoolBudget"]


class SpoolBudget:
    """The shared disk budget (``maxSpoolBytes``): receivers wait here while it is spent."""

    def __init__(self, max_bytes: int, logs: list[ChannelLog]) -> None:
        self.max_bytes = max_bytes
        self._logs = logs
        self._room = threading.Condition()

    def used(self) -> int:
        return sum(channel.size_bytes for channel in self._logs)

    def wait_for_room(
        self, channel: ChannelLog, stop: threading.Event, poll_s: float = 0.1, idle: Callable[[], object] | None = None
    ) -> int:
        """Wait until the spool has room (or a stop); ``idle`` runs at every wake-up
        meanwhile (the receiver reads its socket monitor there, see ``HandshakeWatch``).
        Returns the payload bytes one channel may receive now: its share of the room left
        (at least 1), so that a receive batch ends the spool at most one message past
        the budget, not one whole batch (8 MiB) past it."""
        used = self.used()
        if used >= self.max_bytes:
            # Close the active segment so a commit can delete it: otherwise the segment being
            # written could be the only one, never released, and the spool would stay full.
            channel.roll()
            with self._room:
                while not stop.is_set() and used >= self.max_bytes:
                    self._room.wait(poll_s)
                    if idle is not None:
                        idle()
                    used = self.used()
        return max(1, (self.max_bytes - used) // max(1, len(self._logs)))

    def released(self) -> None:
        with self._room:
            self._room.notify_all()
