"""The loop of a ZMTP engine's I/O thread (libzmq's poller): a ``selectors`` loop over the
engine's OS sockets, commands queued by other threads, and timers.

Other threads never touch a socket: they queue a command (``call_soon``) and wake the loop
through a socketpair, so everything on the wire happens on one thread without locks around
the protocol state. The loop knows nothing of ZMTP; the engine registers callbacks.
"""

from __future__ import annotations

import collections
import functools
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["Poller", "READ_PACING_S", "STREAMING_TURN_BYTES"]

#: the pause after a streaming turn of a receive-only socket's loop (``Poller(pace_s=...)``).
#: Why: a producer streaming to a PULL socket keeps it readable, so an unpaced loop wakes
#: for every few tens of kilobytes the kernel has, and each wake-up costs the receiving
#: process a read, a parse, a hand-over to the receiving thread and two context switches,
#: whatever the read holds. A millisecond's pause lets the next read take what a
#: millisecond brought (docs/performance.md, "Measured design choices").
READ_PACING_S = 0.001
#: a loop whose turns read at least this many bytes on average (an exponentially weighted
#: mean over the turns that read, each weighing a quarter) is streaming, and only then is a
#: turn followed by the pause: messages one at a time (a request, a lock-step exchange, a
#: trickle of up to about 16 MB/s) are read at once, as without pacing. A mean, not each
#: turn's own count: on a busy machine the loop of a streaming socket wakes for single
#: messages between large reads (with two busy processes beside a standalone relay paused
#: only after a turn that itself read 16 KB: one message of 102 B in a quarter of its
#: turns, 1.2 KB at the median, 58 KB on average), and each pause makes the next read a
#: large one.
STREAMING_TURN_BYTES = 16 * 1024

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")


class Poller:
    """Selector, wake-up socketpair, command queue and timer heap of one I/O thread.

    ``lock`` is the engine's: it guards the command queue, and the engine's ``closing``
    flag that ends ``run``. ``label`` names the socket in log lines. ``pace_s``: after a
    turn, while its turns read ``STREAMING_TURN_BYTES`` on average (a callback returns the
    bytes it read, or None), the loop sleeps this long before it looks again
    (``READ_PACING_S`` for a socket that only receives; 0, never, for one that sends,
    whose replies and round trips must not wait)."""

    def __init__(self, lock: threading.Lock, label: str, pace_s: float = 0.0) -> None:
        self.lock = lock
        self.label = label
        self.pace_s = pace_s
        #: the weighted mean of the bytes a turn read (``STREAMING_TURN_BYTES``)
        self.turn_bytes_mean = 0.0
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._woken = False
        self._commands: collections.deque[Callable[[], object]] = collections.deque()
        self._timers: list[tuple[float, int, Callable[[], object]]] = []
        self._ids = itertools.count(1)
        self.selector.register(self._wake_r, selectors.EVENT_READ, self._on_wake)

    # -- any thread (lock held) ---------------------------------------------------------------

    def wake(self) -> None:
        """Make the I/O thread run its commands (lock held by the caller)."""
        if not self._woken:
            self._woken = True
            try:
                self._wake_w.send(b"\0")
            except (BlockingIOError, OSError):
                pass

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the I/O thread (lock held by the caller)."""
        self._commands.append(fn)
        self.wake()

    # -- the I/O thread -----------------------------------------------------------------------

    def at(self, delay: float, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the I/O thread ``delay`` seconds from now."""
        heapq.heappush(self._timers, (time.monotonic() + delay, next(self._ids), fn))

    def run(self, closing: Callable[[], bool], tick: Callable[[float], float]) -> None:
        """Run commands, timers and socket callbacks until ``closing()`` (asked with the lock
        held) says stop. ``tick(now)`` runs after the due timers of each turn and returns
        how long the loop may sleep for its sake."""
        while True:
            with self.lock:
                if closing():
                    break
                commands = list(self._commands)
                self._commands.clear()
            for fn in commands:
                self.guard(fn)
            timeout = self._run_timers(tick)
            turn_bytes = 0
            for key, mask in self.selector.select(timeout):
                got = self.guard(functools.partial(key.data, mask))
                if got:
                    turn_bytes += got
            if turn_bytes and self.pace_s:
                self.turn_bytes_mean += (turn_bytes - self.turn_bytes_mean) * 0.25
                if self.turn_bytes_mean >= STREAMING_TURN_BYTES:
                    time.sleep(self.pace_s)

    def guard(self, fn: Callable[[], object]) -> int:
        """Run ``fn`` and return the bytes it says it read (0 if it says nothing); a failure
        is logged and the loop goes on (one connection's bug must not stop the socket)."""
        try:
            got = fn()
        except Exception:
            log.exception("%s: unexpected error in the ZMTP I/O thread (the connection is closed)", self.label)
            return 0
        return got if isinstance(got, int) else 0

    def _on_wake(self, mask: int) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        with self.lock:
            self._woken = False

    def _run_timers(self, tick: Callable[[float], float]) -> float:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            self.guard(fn)
        delay = tick(now)
        if self._timers:
            delay = min(delay, max(0.0, self._timers[0][0] - time.monotonic()))
        return delay

    def close(self) -> None:
        """Close the wake-up sockets and the selector (after the engine closed its own)."""
        for sock in (self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass
        try:
            self.selector.close()
        except (OSError, RuntimeError):
            pass
