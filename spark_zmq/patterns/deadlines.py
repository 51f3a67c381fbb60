"""The one waiting rule of every socket, whichever wire carries it, and the errors it raises.

A blocked call waits in slices of at most ``WAIT_SLICE_S`` and, between two slices, looks
at whether the socket is closing (``SocketClosedError``) and whether its deadline passed
(``TimeoutError``): so ``close()`` from another thread interrupts a call that would
otherwise wait forever, within a slice. The caller always looks once before it gives up,
even when the deadline has already passed (``timeout=0`` looks once, never zero times).

Both wires wait by this rule: the libzmq wire (``libzmq_wire``) polls its socket for a
slice, the engine's callers (``zmtp.engine.Engine._wait_until``) wait on the engine's
condition for a slice; ``next_slice`` is the step between two looks for both.

``SocketState`` is a socket's lifetime (``closing``, then ``closed``) that its API class
(``base.PatternSocket``) owns and its wire reads while it waits: a plain object both hold,
so the wire never refers back to the socket (which would make a cycle, and delay a
dropped socket's ``__del__`` to the garbage collector).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

__all__ = ["WAIT_SLICE_S", "SendTimeoutError", "SocketClosedError", "SocketState", "first_slice", "next_slice"]

#: a blocked call re-checks for close() at least this often (seconds)
WAIT_SLICE_S = 0.1


class SocketClosedError(RuntimeError):
    """The socket was closed (possibly by another thread) while a call used it."""


class SendTimeoutError(TimeoutError):
    """``send_many`` waited ``timeout`` for room for one message: the ``sent`` messages
    before it were queued, the rest were not (a caller resumes from ``messages[sent:]``)."""

    def __init__(self, message: str, sent: int) -> None:
        super().__init__(message)
        self.sent = sent


class SocketState:
    """A socket's lifetime: ``closed`` until its wire is open, ``closing`` from the moment
    ``close()`` starts (so every wait that looks raises), ``closed`` once it is released."""

    __slots__ = ("label", "closing", "closed")

    def __init__(self, label: str) -> None:
        self.label = label
        self.closing = False
        self.closed = True  # until the wire exists, so __del__/close are safe

    def check_open(self) -> None:
        """``SocketClosedError`` once the socket is closing or closed."""
        if self.closed or self.closing:
            raise SocketClosedError(f"{self.label} is closed")

    def check_during(self, what: str) -> None:
        """``SocketClosedError`` naming the call ``what`` once the socket is closing."""
        if self.closing:
            raise SocketClosedError(f"{self.label} was closed during {what}")


def first_slice(deadline: Optional[float]) -> float:
    """How long the first look may wait: a slice, or what is left of the deadline (``0``
    when it passed: the look still happens, without waiting)."""
    if deadline is None:
        return WAIT_SLICE_S
    return min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))


def next_slice(deadline: Optional[float], check: Callable[[], None]) -> Optional[float]:
    """After a look that found nothing: ``check()`` (it raises ``SocketClosedError`` when
    the socket is closing), then ``None`` when ``deadline`` (monotonic seconds; ``None``:
    no limit) has passed, else how long to wait before looking again (at most a slice)."""
    check()
    if deadline is None:
        return WAIT_SLICE_S
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return None
    return min(WAIT_SLICE_S, remaining)
