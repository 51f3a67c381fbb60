"""Who reads a relay: one query at a time, by a lease its reader renews.

Why a lease and not a connection: ZeroMQ hides connections (a DEALER reconnects by itself
and a ROUTER never says a peer left), and a driver killed with ``kill -9`` says nothing.
So a reader claims the relay with a session id that lives as long as its process, renews
the claim with every request (and a heartbeat), and a claim nobody renewed for ``ttl``
seconds lapses. A second query is refused while the holder is alive; a query restarted
after its driver died waits out the dead holder's remaining time (see ``client``).

Pure bookkeeping over a clock, so the rules are tested without sockets.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Lease", "Refusal"]


@dataclass(frozen=True)
class Refusal:
    """Why a claim failed: the holder renewed ``idle_s`` seconds ago; its claim lapses in
    ``lapses_in_s`` seconds unless it renews."""

    holder: str
    idle_s: float
    lapses_in_s: float


class Lease:
    """One holder at a time; a holder that stops renewing loses the lease after ``ttl``."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0:
            raise ValueError("the lease's ttl must be positive")
        self.ttl_s = ttl_s
        self._clock = clock
        self.holder: str | None = None
        self._renewed = 0.0
        self._released = clock()

    def claim(self, session: str) -> Refusal | None:
        """Take or renew the lease for ``session``; ``None`` when granted, else why not."""
        now = self._clock()
        if self.holder is None or self.holder == session or now - self._renewed >= self.ttl_s:
            self.holder, self._renewed = session, now
            return None
        idle = now - self._renewed
        return Refusal(self.holder, idle, self.ttl_s - idle)

    def holds(self, session: object) -> bool:
        """Whether ``session`` holds the lease now (no renewal: a check, as each fetch makes)."""
        return isinstance(session, str) and self.holder == session and self._clock() - self._renewed < self.ttl_s

    def last_held_by(self, session: object) -> bool:
        """Whether ``session`` holds the lease or was its last holder and nobody has claimed
        it since: what a fetch needs. A driver cut off from the relay for longer than ``ttl``
        (a network blink, a long GC pause) lets its lease lapse while its executors, which
        still reach the relay, go on reading; that is no reason to fail their tasks while no
        other query has taken the name."""
        return isinstance(session, str) and self.holder == session

    def release(self, session: str) -> None:
        """Give the lease up (a reader that stops); a stranger's release changes nothing."""
        if self.holder == session:
            self.holder = None
            self._released = self._clock()

    @property
    def renewed_at(self) -> float:
        """When the holder last claimed or renewed the lease (the clock's time)."""
        return self._renewed

    def unheld_for(self) -> float | None:
        """Seconds since nobody holds the lease (released, lapsed or never claimed), or
        ``None`` while a holder renews it: how long a lingering receiver has waited."""
        now = self._clock()
        if self.holder is None:
            return now - self._released
        lapsed_at = self._renewed + self.ttl_s
        return now - lapsed_at if now >= lapsed_at else None
