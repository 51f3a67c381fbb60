"""The clocks of one ZMTP engine's connections: handshake deadlines (libzmq's
``ZMQ_HANDSHAKE_IVL`` timer) and heartbeats (``ZMQ_HEARTBEAT_IVL``, the peers' PING TTLs).

The I/O thread's loop asks for the time to the next clock each turn (``tick``), so the
connections are walked only when one may be due; a connection that sets an earlier clock
says so through its owner (``due``). A job of its own, apart from the session manager
(``sessions``) that makes the connections: it only reads their clocks and acts on them.
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

import zmq

from .codec import ZmtpError
from .connection import GREETING, HANDSHAKE, READY
from .owner import EndReason

if TYPE_CHECKING:
    from .owner import Settings
    from .stream import StreamEngine


class Clocks:
    """The handshake and heartbeat clocks of one session manager's connections (see the
    module's docstring); on the I/O thread."""

    def __init__(self, settings: Settings, connections: set[StreamEngine]) -> None:
        #: ``heartbeat.enabled`` is read there
        self._settings = settings
        #: the session manager's connections (the same set, which it fills and empties)
        self.connections = connections
        #: no connection's handshake or heartbeat clock is due before this (monotonic
        #: seconds), so the loop walks the connections only when one may be: set by each
        #: walk, lowered by whatever sets an earlier clock (``due``)
        self._connections_due = 0.0

    def tick(self, now: float) -> float:
        """The connections' clocks (handshake deadlines, heartbeats), walked only when one
        may be due; returns the time to the next (the I/O thread's loop calls it each turn)."""
        if now < self._connections_due:
            return self._connections_due - now
        delay = self._walk_connections(now)
        self._connections_due = now + delay
        return delay

    def due(self, at: float) -> None:
        """A connection's clock was set to ``at``: the next walk comes no later."""
        if at < self._connections_due:
            self._connections_due = at

    def _walk_connections(self, now: float) -> float:
        """Fail handshakes past their deadline and run heartbeats; returns the time to the
        next connection event (at most 1 s)."""
        delay = 1.0
        for conn in list(self.connections):
            if conn.stage in (GREETING, HANDSHAKE):
                if now >= conn.deadline:
                    conn.fail(
                        ZmtpError(
                            "the peer did not complete the handshake in time",
                            zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                            errno.ETIMEDOUT,
                        ),
                        EndReason.HANDSHAKE_TIMEOUT,
                    )
                else:
                    delay = min(delay, conn.deadline - now)
            elif conn.stage == READY and self._settings.heartbeat.enabled:
                delay = min(delay, conn.heartbeat(now))
        return delay
