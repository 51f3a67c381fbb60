"""The Guide's asynchronous client (chapter 3): many requests in flight, each with an id.

A ``Client`` is a DEALER that sends ``[id, b"", body...]``: a REP worker (pyzmq, C,
zeromq.js) takes everything up to the empty delimiter as the envelope and returns it with
its reply, and a ROUTER worker that echoes the envelope does the same, so replies come
back as ``[id, b"", reply...]``, in any order and from any worker. The id is what the
client needs and nothing a worker has to know about.

Why resends: ZeroMQ hides connections, so a request that a dead worker took with it, or
that a broken connection dropped, simply never gets an answer. A request unanswered within
``timeout`` is sent again with the same id (the DEALER round-robins it, so usually to
another worker); a late answer to an earlier copy is dropped, so each request gets exactly
one reply. After ``retries`` resends the request fails with ``RequestTimeoutError``.
Calls are therefore at least once: the service must be idempotent.

Not thread-safe: one client per thread (as one socket per thread).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Union

import zmq

from .bounds import MAX_FRAMES, MessageBounds
from .endpoints import EndpointsSpec
from .reqrep import Dealer

__all__ = ["Client", "RequestTimeoutError"]

#: the id frame: 8 bytes, big-endian
_ID_BYTES = 8

Body = Union[bytes, list[bytes]]

log = logging.getLogger(__name__)


class RequestTimeoutError(TimeoutError):
    """A request got no reply within its timeout, on every attempt."""

    def __init__(self, message: str, request_id: int, attempts: int) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.attempts = attempts


@dataclass
class _Pending:
    frames: list[bytes]
    due: float
    attempts: int


class Client:
    """Requests with ids, replies in any order, resends on silence.

    ``endpoints``: where the workers (or a broker's frontend) are, connected by default.
    ``timeout``: seconds a request may wait for its reply before it is sent again;
    ``retries``: how many times it is sent again before ``RequestTimeoutError``.
    ``max_frames``: the most frames a reply may have (default 64); ``max_message_bytes``
    bounds each reply frame (libzmq disconnects a peer sending more) and a reply's frames
    in all: a reply past either is dropped whole, counted in ``oversize`` and logged once
    per peer. Other keyword options (``curve``, ``heartbeat``, ``hwm``, ...) are the
    DEALER's."""

    def __init__(self, endpoints: EndpointsSpec, *, timeout: float = 5.0, retries: int = 2,
                 max_frames: int = MAX_FRAMES, **options: Any) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or timeout <= 0:
            raise ValueError(f"timeout must be a finite number of seconds > 0, not {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, not {retries!r}")
        options.setdefault("linger", 0)
        # queue requests only to workers connected now: libzmq would otherwise keep a pipe
        # to a dead worker's endpoint and round-robin requests (and resends) into it
        options.setdefault("immediate", True)
        self._bounds = MessageBounds("Client", max_frames, options.get("max_message_bytes"), logger=log)
        self._timeout = float(timeout)
        self._retries = retries
        self._dealer = Dealer(endpoints, **options)
        self._next_id = 1
        # in due order: a request is sent (or resent) with the latest due of all, since
        # every wait is the same ``timeout``, and a resent one moves to the end, so the
        # first entry is always the next one due
        self._pending: dict[int, _Pending] = {}
        self._ready: dict[int, list[bytes]] = {}
        #: replies that were not ``[id, b"", ...]`` of a request of ours (dropped)
        self.malformed = 0
        #: late replies to requests already answered or given up (dropped)
        self.duplicates = 0
        #: requests sent again after a timeout
        self.resent = 0

    @property
    def timeout(self) -> float:
        """Seconds a request waits for its reply before it is sent again. Read-only: the
        pending requests are kept in due order on the promise that every wait is this long,
        so changing it with requests in flight would make resends late."""
        return self._timeout

    @property
    def retries(self) -> int:
        """How many times a request is sent again before ``RequestTimeoutError``."""
        return self._retries

    @property
    def oversize(self) -> int:
        """Replies dropped whole: more than ``max_frames`` frames, or more than
        ``max_message_bytes`` over all frames."""
        return self._bounds.oversize

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered (or given up)."""
        return len(self._pending)

    def send(self, body: Body, timeout: Optional[float] = None) -> int:
        """Send one request (one frame or a list of frames); returns its id. ``timeout``
        bounds the wait for a worker to take it: by default as long as a request may wait
        for its reply, ``timeout x (retries + 1)`` (no worker connected, or every queue to
        one at its high-water mark); then ``RequestTimeoutError`` naming the endpoints (and
        a refused CURVE handshake, if there was one)."""
        frames = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
        request_id = self._next_id
        message = [request_id.to_bytes(_ID_BYTES, "big"), b""] + [bytes(f) for f in frames]
        wait = self.timeout * (self.retries + 1) if timeout is None else timeout
        try:
            self._dealer.send(message, timeout=wait)
        except TimeoutError:
            raise RequestTimeoutError(
                f"no worker at {', '.join(map(str, self._dealer.endpoints))} took request {request_id} within "
                f"{wait:g} s (timeout {self.timeout:g} s x (retries {self.retries} + 1) by default): is any worker "
                f"(or broker) running and reachable?{self._handshake_note()}", request_id, 0,
            ) from None
        self._next_id += 1
        self._pending[request_id] = _Pending(message, time.monotonic() + self.timeout, 1)
        return request_id

    def _handshake_note(self) -> str:
        """Why the connection fails, when a CURVE handshake was refused (see ``HandshakeWatch``)."""
        watch = self._dealer.handshakes
        return "" if watch is None else watch.failure_note()

    def recv(self, timeout: Optional[float] = None) -> tuple[int, list[bytes]]:
        """The next reply, ``(request id, reply frames)``, whichever request it answers.
        Resends overdue requests meanwhile; ``RequestTimeoutError`` when one has used up
        its retries; ``TimeoutError`` when nothing came within ``timeout`` seconds."""
        if self._ready:
            request_id = next(iter(self._ready))
            return request_id, self._ready.pop(request_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._resend_overdue()
            if not self._pending:
                raise ValueError("no request is waiting for a reply")
            now = time.monotonic()
            wait = next(iter(self._pending.values())).due - now
            if deadline is not None:
                if now >= deadline:
                    raise TimeoutError(f"no reply within {timeout} s ({len(self._pending)} requests in flight)")
                wait = min(wait, deadline - now)
            frames = self._recv_bounded(max(0.0, wait))
            if frames is None:
                continue
            answered = self._take(frames)
            if answered is not None:
                return answered

    def request(self, body: Body, timeout: Optional[float] = None) -> list[bytes]:
        """Send one request and wait for its reply (other replies that come meanwhile are
        kept for ``recv``). ``timeout`` bounds the send as in ``send``; the wait for the
        reply is bounded by ``timeout x (retries + 1)`` of the client (then
        ``RequestTimeoutError``)."""
        request_id = self.send(body, timeout=timeout)
        while True:
            if request_id in self._ready:
                return self._ready.pop(request_id)
            answered, frames = self.recv()
            if answered == request_id:
                return frames
            self._ready[answered] = frames

    def map(self, bodies: Iterable[Body], max_in_flight: int = 16) -> Iterator[list[bytes]]:
        """The replies to ``bodies``, in their order, with up to ``max_in_flight``
        requests outstanding at a time."""
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(f"max_in_flight must be an integer >= 1, not {max_in_flight!r}")
        order: list[int] = []
        got: dict[int, list[bytes]] = {}
        source = iter(bodies)
        exhausted = False
        while True:
            while not exhausted and len(order) - len(got) < max_in_flight:
                try:
                    body = next(source)
                except StopIteration:
                    exhausted = True
                    break
                order.append(self.send(body))
            while order and order[0] in got:
                yield got.pop(order.pop(0))
            if not order:
                if exhausted:
                    return
                continue
            answered, frames = self.recv()
            got[answered] = frames

    def _recv_bounded(self, wait: float) -> Optional[list[bytes]]:
        """One reply within ``max_frames`` and ``max_message_bytes`` (see ``bounds``), or
        None: nothing came within ``wait`` seconds, or what came was dropped."""
        try:  # a reply that is already there costs no poll
            return self._bounds.recv(self._dealer.zmq_socket)[0]
        except zmq.Again:
            pass
        if not self._dealer.poll_recv(wait):
            return None
        try:
            return self._bounds.recv(self._dealer.zmq_socket)[0]
        except zmq.Again:
            return None

    def _take(self, frames: list[bytes]) -> Optional[tuple[int, list[bytes]]]:
        if len(frames) < 2 or len(frames[0]) != _ID_BYTES or frames[1] != b"":
            self.malformed += 1
            return None
        request_id = int.from_bytes(frames[0], "big")
        if self._pending.pop(request_id, None) is None:
            if 0 < request_id < self._next_id:
                self.duplicates += 1
            else:
                self.malformed += 1
            return None
        return request_id, frames[2:]

    def _resend_overdue(self) -> None:
        now = time.monotonic()
        pending = self._pending
        while pending:
            request_id = next(iter(pending))
            entry = pending[request_id]
            if entry.due > now:
                return  # (due order: the rest are due later)
            if entry.attempts > self.retries:
                del pending[request_id]
                raise RequestTimeoutError(
                    f"no reply to request {request_id} from {', '.join(map(str, self._dealer.endpoints))} within "
                    f"{self.timeout:g} s, {entry.attempts} times (timeout {self.timeout:g} s, retries "
                    f"{self.retries}): are the workers running and reachable?{self._handshake_note()}",
                    request_id, entry.attempts,
                )
            try:
                self._dealer.send(entry.frames, timeout=0)
                self.resent += 1
            except TimeoutError:
                pass  # no worker takes it now: this wait counts all the same
            entry.attempts += 1
            entry.due = now + self.timeout
            del pending[request_id]  # to the end: the latest due now
            pending[request_id] = entry

    def close(self) -> None:
        self._dealer.close(linger=0)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
