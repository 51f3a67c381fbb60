"""The Guide's asynchronous client (chapter 3): many requests in flight, each with an id.

A ``Client`` sends ``[id, b"", body...]``: a REP worker (pyzmq, C, zeromq.js) takes
everything up to the empty delimiter as the envelope and returns it with its reply, and a
ROUTER worker that echoes the envelope does the same, so replies come back as
``[id, b"", reply...]``, in any order. The id is what the client needs and nothing a worker
has to know about.

Why a DEALER per endpoint, and random ids: a reply counts only from the connection its
request went out on, as the broker counts a reply only from the worker holding its
request. One DEALER over every endpoint would hide which worker a request went to and
which one a reply came from, so any worker could answer every pending request, and ids
counted from 1 would tell it which ones are pending: a worker answering ids it never
received would have its values taken and the honest replies dropped as late duplicates.
So each endpoint has a DEALER of its own (requests round-robin over them, skipping one
that takes nothing now), each request remembers the DEALERs it went out on, and its id on
the wire is 8 random bytes (``secrets``): a reply from elsewhere, or with an id never sent,
is dropped and counted (``misrouted``, ``malformed``). Workers that connect to one bound
endpoint (``@``) share its DEALER: there the random id is what keeps one from answering
for another. ``send`` still returns the request's number in this client (1, 2, ...).

Why resends: ZeroMQ hides connections, so a request that a dead worker took with it, or
that a broken connection dropped, simply never gets an answer. A request unanswered within
``timeout`` is sent again with the same id (to the next endpoint's DEALER, so usually to
another worker); a late answer to an earlier copy is dropped, so each request gets exactly
one reply. After ``retries`` resends the request fails with ``RequestTimeoutError``.
Calls are therefore at least once: the service must be idempotent.

Not thread-safe: one client per thread (as one socket per thread).
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zmq

from ..errors import SparkZmqError
from ..patterns.bounds import MAX_FRAMES, MessageBounds
from ..patterns.endpoints import Endpoint, EndpointsSpec, parse_endpoints
from ..patterns.reqrep import Dealer
from ..patterns.socket_options import HwmSocketOptions

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["Client", "RequestTimeoutError"]

#: the id frame: 8 bytes, random (``secrets.token_bytes``)
_ID_BYTES = 8
#: ids drawn from the CSPRNG at once
_IDS_PER_DRAW = 512
#: ids of answered (or given up) requests remembered, so a late reply counts as a duplicate
_FINISHED_KEPT = 65_536

Body = bytes | list[bytes]

log = logging.getLogger(__name__)


class RequestTimeoutError(SparkZmqError, TimeoutError):
    """A request got no reply within its timeout, on every attempt."""

    retriable = True  # the broker or its workers may be back (the Guide's Lazy Pirate retries)

    def __init__(self, message: str, request_id: int, attempts: int) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.attempts = attempts


@dataclass
class _Pending:
    number: int
    frames: list[bytes]
    due: float
    attempts: int
    #: the DEALERs (indexes into ``Client._dealers``) this request went out on
    sent_on: set[int]
    #: the one it went out on last (a resend tries the others first)
    last: int


class Client:
    """Requests with ids, replies in any order, resends on silence.

    ``endpoints``: where the workers (or a broker's frontend) are, connected by default;
    each has a DEALER of its own, and a reply counts only from the one its request went
    out on.
    ``timeout``: seconds a request may wait for its reply before it is sent again;
    ``retries``: how many times it is sent again before ``RequestTimeoutError``.
    ``max_frames``: the most frames a reply may have (default 64); ``max_message_bytes``
    bounds each reply frame (libzmq disconnects a peer sending more) and a reply's frames
    in all: a reply past either is dropped whole, counted in ``oversize`` and logged once
    per peer. Other keyword options (``curve``, ``heartbeat``, ``hwm``, ...) are the
    DEALERs'."""

    def __init__(
        self,
        endpoints: EndpointsSpec,
        *,
        timeout: float = 5.0,
        retries: int = 2,
        max_frames: int = MAX_FRAMES,
        **options: Unpack[HwmSocketOptions],
    ) -> None:
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not math.isfinite(timeout)
            or timeout <= 0
        ):
            raise ValueError(f"timeout must be a finite number of seconds > 0, not {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an integer >= 0, not {retries!r}")
        options.setdefault("linger", 0)
        # queue requests only to workers connected now: libzmq would otherwise keep a pipe
        # to a dead worker's endpoint and round-robin requests (and resends) into it
        options.setdefault("immediate", True)
        self._bounds = [MessageBounds("Client", max_frames, options.get("max_message_bytes"), logger=log)]
        self._timeout = float(timeout)
        self._retries = retries
        self._endpoints: list[Endpoint] = parse_endpoints(endpoints, default_bind=Dealer.default_bind)
        self._dealers: list[Dealer] = []
        try:
            for endpoint in self._endpoints:
                self._dealers.append(Dealer([endpoint], **options))
        except BaseException:
            self.close()
            raise
        self._bounds += [
            MessageBounds("Client", max_frames, options.get("max_message_bytes"), logger=log) for _ in self._dealers[1:]
        ]
        self._poll_in = zmq.Poller()
        self._poll_out = zmq.Poller()
        for dealer in self._dealers:
            self._poll_in.register(dealer.zmq_socket, zmq.POLLIN)
            self._poll_out.register(dealer.zmq_socket, zmq.POLLOUT)
        #: the DEALER the next request tries first (round-robin over the endpoints)
        self._turn = 0
        #: the DEALER read first next time (fair reading)
        self._read_turn = 0
        self._next_number = 1
        self._id_pool, self._id_at = b"", 0
        # by wire id, in due order: a request is sent (or resent) with the latest due of
        # all, since every wait is the same ``timeout``, and a resent one moves to the end,
        # so the first entry is always the next one due
        self._pending: dict[bytes, _Pending] = {}
        self._ready: dict[int, list[bytes]] = {}
        self._finished: OrderedDict[bytes, None] = OrderedDict()
        #: replies that were not ``[id, b"", ...]`` of a request of ours (dropped)
        self.malformed = 0
        #: late replies to requests already answered or given up (dropped)
        self.duplicates = 0
        #: replies to a pending request from a connection it did not go out on (dropped)
        self.misrouted = 0
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
        return sum(bounds.oversize for bounds in self._bounds)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered (or given up)."""
        return len(self._pending)

    def _where(self) -> str:
        return ", ".join(map(str, self._endpoints))

    def _new_id(self) -> bytes:
        """8 bytes from the system's CSPRNG, taken ``_IDS_PER_DRAW`` at a time: one
        ``getrandom`` per request cost a small request a fifth of its time."""
        while True:  # (a repeat of 64 random bits is not expected; the loop is for certainty)
            if self._id_at >= len(self._id_pool):
                self._id_pool, self._id_at = secrets.token_bytes(_ID_BYTES * _IDS_PER_DRAW), 0
            wire_id = self._id_pool[self._id_at : self._id_at + _ID_BYTES]
            self._id_at += _ID_BYTES
            if wire_id not in self._pending and wire_id not in self._finished:
                return wire_id

    def _send_any(self, message: list[bytes], timeout: float, avoid: int | None = None) -> int | None:
        """Send ``message`` on the first DEALER, from the next in turn (``avoid`` last),
        that takes it within ``timeout`` seconds; its index, or None."""
        count = len(self._dealers)
        deadline = time.monotonic() + timeout
        while True:
            order = [(self._turn + i) % count for i in range(count)]
            if avoid is not None and count > 1:
                order.remove(avoid)
                order.append(avoid)
            for index in order:
                try:
                    self._dealers[index].send(message, timeout=0)
                except TimeoutError:
                    continue
                self._turn = (index + 1) % count
                return index
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._poll_out.poll(max(1, math.ceil(min(left, 0.1) * 1000)))

    def send(self, body: Body, timeout: float | None = None) -> int:
        """Send one request (one frame or a list of frames); returns its number in this
        client (1, 2, ...). ``timeout`` bounds the wait for a worker to take it: by default
        as long as a request may wait for its reply, ``timeout x (retries + 1)`` (no worker
        connected, or every queue to one at its high-water mark); then
        ``RequestTimeoutError`` naming the endpoints (and a refused CURVE handshake, if
        there was one)."""
        frames = [body] if isinstance(body, (bytes, bytearray, memoryview)) else list(body)
        number = self._next_number
        wire_id = self._new_id()
        message = [wire_id, b""] + [bytes(f) for f in frames]
        wait = self.timeout * (self.retries + 1) if timeout is None else timeout
        index = self._send_any(message, wait)
        if index is None:
            raise RequestTimeoutError(
                f"no worker at {self._where()} took request {number} within "
                f"{wait:g} s (timeout {self.timeout:g} s x (retries {self.retries} + 1) by default): is any worker "
                f"(or broker) running and reachable?{self._handshake_note()}",
                number,
                0,
            )
        self._next_number += 1
        self._pending[wire_id] = _Pending(number, message, time.monotonic() + self.timeout, 1, {index}, index)
        return number

    def _handshake_note(self) -> str:
        """Why the connection fails, when a CURVE handshake was refused (see ``HandshakeWatch``)."""
        return "".join(d.handshakes.failure_note() for d in self._dealers if d.handshakes is not None)

    def recv(self, timeout: float | None = None) -> tuple[int, list[bytes]]:
        """The next reply, ``(request number, reply frames)``, whichever request it answers.
        Resends overdue requests meanwhile; ``RequestTimeoutError`` when one has used up
        its retries; ``TimeoutError`` when nothing came within ``timeout`` seconds."""
        if self._ready:
            number = next(iter(self._ready))
            return number, self._ready.pop(number)
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
            got = self._recv_bounded(max(0.0, wait))
            if got is None:
                continue
            answered = self._take(*got)
            if answered is not None:
                return answered

    def request(self, body: Body, timeout: float | None = None) -> list[bytes]:
        """Send one request and wait for its reply (other replies that come meanwhile are
        kept for ``recv``). ``timeout`` bounds the send as in ``send``; the wait for the
        reply is bounded by ``timeout x (retries + 1)`` of the client (then
        ``RequestTimeoutError``)."""
        number = self.send(body, timeout=timeout)
        while True:
            if number in self._ready:
                return self._ready.pop(number)
            answered, frames = self.recv()
            if answered == number:
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

    def _recv_one(self) -> tuple[int, list[bytes] | None] | None:
        """One message waiting on any DEALER, from the next in turn: ``(its index, frames
        or None when it was dropped)``, or None when none waits."""
        count = len(self._dealers)
        for i in range(count):
            index = (self._read_turn + i) % count
            try:
                frames = self._bounds[index].recv(self._dealers[index].zmq_socket)[0]
            except zmq.Again:
                continue
            self._read_turn = (index + 1) % count
            return index, frames
        return None

    def _recv_bounded(self, wait: float) -> tuple[int, list[bytes]] | None:
        """One reply within ``max_frames`` and ``max_message_bytes`` (see ``bounds``) and
        the DEALER it came on, or None: nothing came within ``wait`` seconds, or what came
        was dropped."""
        got = self._recv_one()  # a reply that is already there costs no poll
        if got is None:
            if not self._poll_in.poll(math.ceil(wait * 1000)):
                return None
            got = self._recv_one()
        if got is None or got[1] is None:
            return None
        return got[0], got[1]

    def _finish(self, wire_id: bytes) -> None:
        self._finished[wire_id] = None
        if len(self._finished) > _FINISHED_KEPT:
            self._finished.popitem(last=False)

    def _take(self, index: int, frames: list[bytes]) -> tuple[int, list[bytes]] | None:
        if len(frames) < 2 or len(frames[0]) != _ID_BYTES or frames[1] != b"":
            self.malformed += 1
            return None
        wire_id = frames[0]
        entry = self._pending.get(wire_id)
        if entry is None:
            if wire_id in self._finished:
                self.duplicates += 1
            else:
                self.malformed += 1
            return None
        if index not in entry.sent_on:
            self.misrouted += 1
            if self.misrouted == 1:
                log.warning(
                    "Client: dropped a reply to request %d from %s, which that request never went out to "
                    "(it went to %s); further ones are counted in misrouted, not logged",
                    entry.number,
                    self._endpoints[index],
                    ", ".join(str(self._endpoints[i]) for i in sorted(entry.sent_on)),
                )
            return None
        del self._pending[wire_id]
        self._finish(wire_id)
        return entry.number, frames[2:]

    def _resend_overdue(self) -> None:
        now = time.monotonic()
        pending = self._pending
        while pending:
            wire_id = next(iter(pending))
            entry = pending[wire_id]
            if entry.due > now:
                return  # (due order: the rest are due later)
            if entry.attempts > self.retries:
                del pending[wire_id]
                self._finish(wire_id)
                raise RequestTimeoutError(
                    f"no reply to request {entry.number} from {self._where()} within "
                    f"{self.timeout:g} s, {entry.attempts} times (timeout {self.timeout:g} s, retries "
                    f"{self.retries}): are the workers running and reachable?{self._handshake_note()}",
                    entry.number,
                    entry.attempts,
                )
            # to another endpoint if one takes it now, else the same: this wait counts all the same
            index = self._send_any(entry.frames, 0.0, avoid=entry.last)
            if index is not None:
                entry.sent_on.add(index)
                entry.last = index
                self.resent += 1
            entry.attempts += 1
            entry.due = now + self.timeout
            del pending[wire_id]  # to the end: the latest due now
            pending[wire_id] = entry

    def close(self) -> None:
        for dealer in self._dealers:
            dealer.close(linger=0)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
