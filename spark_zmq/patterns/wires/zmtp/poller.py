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

__all__ = ["Poller"]

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")


class Poller:
    """Selector, wake-up socketpair, command queue and timer heap of one I/O thread.

    ``lock`` is the engine's: it guards the command queue, and the engine's ``closing``
    flag that ends ``run``. ``label`` names the socket in log lines."""

    def __init__(self, lock: threading.Lock, label: str) -> None:
        self.lock = lock
        self.label = label
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
            for key, mask in self.selector.select(timeout):
                self.guard(functools.partial(key.data, mask))

    def guard(self, fn: Callable[[], object]) -> None:
        """Run ``fn``; a failure is logged and the loop goes on (one connection's bug must
        not stop the socket)."""
        try:
            fn()
        except Exception:
            log.exception("%s: unexpected error in the ZMTP I/O thread (the connection is closed)", self.label)

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
