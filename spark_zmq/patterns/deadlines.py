"""The one waiting rule of every socket, whichever wire carries it, and the errors it raises.

A blocked call waits in slices of at most ``WAIT_SLICE_S`` and, between two slices, looks
at whether the socket is closing (``SocketClosedError``) and whether its deadline passed
(``TimeoutError``): so ``close()`` from another thread interrupts a call that would
otherwise wait forever, within a slice. The caller always looks once before it gives up,
even when the deadline has already passed (``timeout=0`` looks once, never zero times).

What wakes a waiter early: a message or room (the engine's I/O thread notifies its
condition; libzmq's socket polls ready), ``close()`` and ``interrupt()`` (the engine's
condition is notified; the libzmq wire writes to a pipe it polls beside its socket). So
after its first look a call waits in slices of ``IDLE_SLICE_S``: an idle receiver, relay or
service waits in the kernel, not in a loop of wake-ups (ten a second per thread before).

Both wires wait by this rule: the libzmq wire (``wires.libzmq``) polls its socket for a
slice, the engine's callers (``zmtp.engine.Engine._wait_until``) wait on the engine's
condition for a slice; ``next_slice`` is the step between two looks for both.

``SocketState`` is a socket's lifetime (``closing``, then ``closed``) that its API class
(``base.PatternSocket``) owns and its wire reads while it waits: a plain object both hold,
so the wire never refers back to the socket (which would make a cycle, and delay a
dropped socket's ``__del__`` to the garbage collector).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import SparkZmqError

__all__ = [
    "WAIT_SLICE_S",
    "IDLE_SLICE_S",
    "SendTimeoutError",
    "SocketClosedError",
    "SocketState",
    "first_slice",
    "next_slice",
]

#: a blocked call's first look waits at most this long (seconds), and a wait nothing wakes
#: (a send backing off) re-checks this often
WAIT_SLICE_S = 0.1
#: a wait that a message, ``close()`` or ``interrupt()`` wakes still re-checks this often (seconds)
IDLE_SLICE_S = 2.0


class SocketClosedError(SparkZmqError, RuntimeError):
    """The socket was closed (possibly by another thread) while a call used it."""


class SendTimeoutError(SparkZmqError, TimeoutError):
    """``send_many`` waited ``timeout`` for room for one message: the ``sent`` messages
    before it were queued, the rest were not (a caller resumes from ``messages[sent:]``)."""

    retriable = True  # the peers were busy or away: room may come

    def __init__(self, message: str, sent: int) -> None:
        super().__init__(message)
        self.sent = sent


class SocketState:
    """A socket's lifetime: ``closed`` until its wire is open, ``closing`` from the moment
    ``close()`` starts (so every wait that looks raises), ``closed`` once it is released."""

    __slots__ = ("label", "closing", "closed", "interrupts")

    def __init__(self, label: str) -> None:
        self.label = label
        self.closing = False
        self.closed = True  # until the wire exists, so __del__/close are safe
        #: how many times ``interrupt()`` was called: a receive that began before the latest
        #: one gives up (``check_receiving``)
        self.interrupts = 0

    def check_receiving(self, began: int, what: str = "recv") -> None:
        """``SocketClosedError`` once the socket is closing or closed; ``TimeoutError`` when
        ``interrupt()`` was called since the receive began (``began``: ``interrupts`` then)."""
        if self.closed:
            raise SocketClosedError(f"{self.label} is closed")
        if self.closing:
            raise SocketClosedError(f"{self.label} was closed during {what}")
        if self.interrupts != began:
            raise TimeoutError(f"{self.label}.{what} was interrupted")

    def check_open(self) -> None:
        """``SocketClosedError`` once the socket is closing or closed."""
        if self.closed or self.closing:
            raise SocketClosedError(f"{self.label} is closed")

    def check_during(self, what: str) -> None:
        """``SocketClosedError`` naming the call ``what`` once the socket is closing."""
        if self.closing:
            raise SocketClosedError(f"{self.label} was closed during {what}")


def first_slice(deadline: float | None) -> float:
    """How long the first look may wait: a slice, or what is left of the deadline (``0``
    when it passed: the look still happens, without waiting)."""
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))


def next_slice(deadline: float | None, check: Callable[[], None], slice_s: float = WAIT_SLICE_S) -> float | None:
    """After a look that found nothing: ``check()`` (it raises ``SocketClosedError`` when
    the socket is closing), then ``None`` when ``deadline`` (monotonic seconds; ``None``:
    no limit) has passed, else how long to wait before looking again (at most a slice)."""
    check()
    if deadline is None:
        return slice_s
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    return min(slice_s, remaining)
