"""What the application's calls and a ZMTP engine's I/O thread share: the lock and its
condition, the queueing policies, the messages of broken connections, the counters.

The engine makes one ``SharedState`` and hands it to its session manager (``sessions``),
so both reach the same queues without one reading the other's attributes. Each holds
direct references to the objects that never change (the lock, the condition, the
policies, the orphans' deque), bound once, so the hot paths take no extra step; the plain
values that do change (``closing``, ``waiters``, the counters) are read here.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING

from .policies import FairQueue, RoundRobin

if TYPE_CHECKING:
    from .codec import EngineMessage

__all__ = ["SharedState"]


class SharedState:
    """One socket's shared state; everything but the counters is used with ``lock`` held."""

    __slots__ = (
        "lock",
        "cond",
        "lb",
        "fq",
        "orphans",
        "closing",
        "waiters",
        "heartbeat_timeouts",
        "broken_connections",
        "sequence_gaps",
        "discarded_multipart",
        "resent",
        "lost_peers",
    )

    def __init__(self, hwm: int) -> None:
        self.lock = threading.Lock()
        #: notified whenever the I/O thread changes something a caller may wait for
        self.cond = threading.Condition(self.lock)
        #: the peers a message may be queued to, round-robin: those with a completed
        #: handshake and (unless ``immediate``) connect endpoints not refused by their peer
        self.lb = RoundRobin()
        #: peers with messages in their inbox, in fair-queue order
        self.fq = FairQueue(hwm)
        #: what broken connections had not delivered: the next connection to write takes it first
        self.orphans: collections.deque[EngineMessage] = collections.deque()
        #: the socket is closing: the I/O thread stops, nothing new is connected or adopted
        self.closing = False
        #: callers waiting on ``cond``: the I/O thread notifies only when there are some
        self.waiters = 0
        #: connections closed because the peer was silent past the heartbeat timeout or TTL
        self.heartbeat_timeouts = 0
        #: connections that ended after their handshake other than by the peer's orderly
        #: close (a reset, the kernel's timeout, our heartbeat timeout, a protocol error):
        #: what the peer had in flight on one may be lost, so receivers report them
        self.broken_connections = 0
        #: connections closed because a CURVE stream skipped a message (deleted in transit)
        self.sequence_gaps = 0
        #: received multipart messages dropped whole (a socket that takes single parts only)
        self.discarded_multipart = 0
        #: messages sent again because a peer's TCP never acknowledged them before it left
        self.resent = 0
        #: peers whose connection broke after their handshake while they held messages of
        #: ours (queued, being written, or written and not acknowledged by their TCP)
        self.lost_peers = 0
