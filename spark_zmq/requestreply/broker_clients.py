"""The broker's bookkeeping per client: the requests it has waiting and the replies held for it.

Why per client: one client that sends thousands of requests and reads no reply must not
stop the broker for everyone. So requests wait in one queue per client and are dispatched
round-robin across clients (a client with 1,000 waiting takes turns with one that has 1),
and the replies the broker holds for a client that is not reading are bounded per client:
a client at its bound ("stalled") is given no new dispatch until it reads, while the others
go on. A stalled client's waiting requests no longer count against ``hwm`` (which would
stop the broker reading every client), but they are bounded too: per client by
``client_hwm``, all stalled clients together by the larger of ``hwm`` and ``client_hwm``;
a request beyond that is refused
(dropped and counted; the client's own timeout resends it).

Why timers and not polling: libzmq tells nothing per peer when a ROUTER's queue to it has
room again. A client's held replies are tried again on a timer of their own that backs off
(``RETRY_FIRST_S`` doubling to ``RETRY_MAX_S``) while the client reads nothing, and at once
when the client sends something (it is alive, and usually reading again). A client that
never reads costs a few failed sends a second, not a loop turn every 10 ms.

Why the waiting requests are bounded in bytes too (``max_waiting_bytes``): ``hwm`` counts
requests, and a few large ones take as much memory as many small ones (1,000 requests of
64 MiB would be 64 GB). Served and stalled clients' requests count together: the broker
stops reading the frontend once they take ``max_waiting_bytes`` (backpressure, as for
``hwm``). The stalled clients' share is bounded apart: a stalled client's request is refused
while the stalled clients have half of ``max_waiting_bytes`` waiting, and ``room`` counts
no more than that half of theirs, so clients that read nothing can never take the broker's
whole room and stop it reading the others. Each bound is checked before a request is taken,
never against its size: one request is always admissible, whatever its size (up to
``max_message_bytes``), so no request is too large to ever be read.

Why expired requests are dropped on their own clock: a request that waited past
``request_ttl`` will never be dispatched (its client has resent it or given up), so it must
not keep a place under ``hwm`` or ``stalled_hwm`` until a worker happens to be free: a burst
of them would keep the broker from reading, or make it refuse, the requests of live
clients. ``expire`` drops them as their time passes, and looks at nothing before the oldest
waiting request can have expired.

Pure bookkeeping, no sockets: the broker passes the function that sends a reply.
"""

from __future__ import annotations

import collections
import heapq
from collections.abc import Callable

import zmq

__all__ = ["ClientQueues", "RETRY_FIRST_S", "RETRY_MAX_S", "request_bytes"]

#: the first retry of a client's held replies comes this soon (seconds) ...
RETRY_FIRST_S = 0.01
#: ... and the retries back off, doubling, to at most this
RETRY_MAX_S = 0.25

#: a message as the broker's sockets receive it (``copy=False``)
Frames = list[zmq.Frame]
#: a request waiting for a worker: (when it arrived, monotonic seconds; its frames)
Request = tuple[float, Frames]
#: a request as it waits: (when it arrived, its frames, its bytes: all frames' lengths together)
_Waiting = tuple[float, Frames, int]


def request_bytes(frames: Frames) -> int:
    """The bytes a request takes: all its frames' lengths together (envelope included)."""
    return sum(len(frame) for frame in frames)


class _Client:
    __slots__ = ("waiting", "waiting_bytes", "held", "held_bytes", "stalled", "retry_at", "backoff")

    def __init__(self) -> None:
        self.waiting: collections.deque[_Waiting] = collections.deque()
        self.waiting_bytes = 0
        #: (drop after, payload, bytes), oldest first
        self.held: collections.deque[tuple[float, Frames, int]] = collections.deque()
        self.held_bytes = 0
        self.stalled = False
        self.retry_at: float | None = None
        self.backoff = RETRY_FIRST_S


class ClientQueues:
    """Waiting requests and held replies of every client, by client identity.

    ``hwm``: requests that may wait from clients being served (beyond it the broker stops
    reading the frontend: backpressure).
    ``client_hwm``: replies held for one client before it counts as stalled, and requests a
    stalled client may have waiting. ``max_held_bytes``: the bytes of all held replies (a reply that
    would pass it is not held: the caller drops it), a client holding a quarter of it
    counts as stalled too. ``request_ttl``: seconds a request may wait (``None``: for ever;
    see ``expire``). ``max_waiting_bytes``: the bytes of all waiting requests beyond which
    the broker stops reading the frontend; stalled clients may have half of it waiting, a
    request beyond that is refused (``None``: no bound in bytes)."""

    def __init__(
        self,
        hwm: int,
        client_hwm: int,
        max_held_bytes: int,
        request_ttl: float | None = None,
        max_waiting_bytes: int | None = None,
    ) -> None:
        self.hwm = hwm
        self.client_hwm = client_hwm
        self.max_held_bytes = max_held_bytes
        self.request_ttl = request_ttl
        self.max_waiting_bytes = max_waiting_bytes
        #: bytes of requests all stalled clients together may have waiting (None: no bound)
        self.stalled_max_bytes = None if max_waiting_bytes is None else max_waiting_bytes // 2
        #: no waiting request expires before this (monotonic seconds; None: none waits)
        self._next_expiry: float | None = None
        #: requests all stalled clients together may have waiting
        self.stalled_hwm = max(hwm, client_hwm)
        self._clients: dict[bytes, _Client] = {}
        #: clients with requests waiting that may be dispatched, the next one first
        self._ready: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self.waiting_ready = 0
        self.waiting_stalled = 0
        #: the bytes of those requests (``request_bytes``)
        self.bytes_ready = 0
        self.bytes_stalled = 0
        self.held_count = 0
        self.held_bytes = 0
        self._timers: list[tuple[float, bytes]] = []

    # -- requests -----------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        return self.waiting_ready + self.waiting_stalled

    @property
    def waiting_bytes(self) -> int:
        """The bytes of all waiting requests (``request_bytes``), stalled clients' included."""
        return self.bytes_ready + self.bytes_stalled

    def room(self) -> bool:
        """Whether the broker may read the frontend: requests of served clients below
        ``hwm``, and the bytes of all waiting requests below ``max_waiting_bytes`` (the
        stalled clients' counted up to their share, ``stalled_max_bytes``)."""
        if self.waiting_ready >= self.hwm:
            return False
        if self.max_waiting_bytes is None:
            return True
        assert self.stalled_max_bytes is not None  # set with max_waiting_bytes
        return self.bytes_ready + min(self.bytes_stalled, self.stalled_max_bytes) < self.max_waiting_bytes

    def refuses(self, client_id: bytes) -> bool:
        """Whether ``add`` would refuse a request of this client now (it is stalled and at
        one of the stalled bounds)."""
        client = self._clients.get(client_id)
        return (
            client is not None
            and client.stalled
            and (
                len(client.waiting) >= self.client_hwm
                or self.waiting_stalled >= self.stalled_hwm
                or (self.stalled_max_bytes is not None and self.bytes_stalled >= self.stalled_max_bytes)
            )
        )

    def add(self, client_id: bytes, frames: Request) -> bool:
        """Queue a request; False when refused: the client is stalled and has ``client_hwm``
        waiting, or the stalled clients have ``stalled_hwm`` or ``stalled_max_bytes``
        waiting. (A client being served is bounded by ``hwm`` and ``max_waiting_bytes``
        through ``room``: backpressure, nothing refused.)"""
        if self.refuses(client_id):
            return False
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client()
        arrived, payload = frames
        self._push(client_id, client, (arrived, payload, request_bytes(payload)), last=True)
        return True

    def expire(self, now: float) -> list[tuple[bytes, float]]:
        """Drop every request that arrived more than ``request_ttl`` seconds before ``now``,
        returning the client and seconds waited of each (for the caller to count and log).
        Each client's requests wait in arrival order, so only the heads are looked at, and
        nothing at all before ``_next_expiry``."""
        ttl = self.request_ttl
        if ttl is None or self._next_expiry is None or now < self._next_expiry:
            return []
        dropped: list[tuple[bytes, float]] = []
        oldest: float | None = None
        for client_id, client in list(self._clients.items()):
            waiting = client.waiting
            while waiting and now - waiting[0][0] > ttl:
                arrived, _, _ = self._pop(client)
                dropped.append((client_id, now - arrived))
            if waiting:
                oldest = waiting[0][0] if oldest is None else min(oldest, waiting[0][0])
            else:
                self._ready.pop(client_id, None)
                self._forget_if_empty(client_id, client)
        self._next_expiry = None if oldest is None else oldest + ttl
        return dropped

    def next_request(self) -> tuple[bytes, Request] | None:
        """The next request to dispatch, round-robin across the clients that may be served."""
        if not self._ready:
            return None
        client_id, _ = self._ready.popitem(last=False)
        client = self._clients[client_id]
        arrived, frames, _ = self._pop(client)
        if client.waiting:
            self._ready[client_id] = None  # its next request after everyone else's
        else:
            self._forget_if_empty(client_id, client)
        return client_id, (arrived, frames)

    def put_back(self, client_id: bytes, frames: Request) -> None:
        """A request ``next_request`` gave that could not be sent: first again."""
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client()
        arrived, payload = frames
        self._push(client_id, client, (arrived, payload, request_bytes(payload)), last=False)
        if not client.stalled:
            self._ready.move_to_end(client_id, last=False)

    # -- held replies -------------------------------------------------------------------------

    def has_held(self, client_id: bytes) -> bool:
        client = self._clients.get(client_id)
        return client is not None and bool(client.held)

    def hold(self, client_id: bytes, payload: Frames, nbytes: int, drop_after: float, now: float) -> bool:
        """Keep a reply its client cannot take now; False when that would pass ``max_held_bytes``."""
        if self.held_bytes + nbytes > self.max_held_bytes:
            return False
        client = self._clients.get(client_id)
        if client is None:
            client = self._clients[client_id] = _Client()
        client.held.append((drop_after, payload, nbytes))
        client.held_bytes += nbytes
        self.held_count += 1
        self.held_bytes += nbytes
        if client.retry_at is None:
            client.backoff = RETRY_FIRST_S
            self._schedule(client_id, client, now)
        self._restall(client_id, client)
        return True

    def retry(self, client_id: bytes, now: float, send: Callable[[Frames], bool]) -> list[Frames]:
        """Send the client's held replies, oldest first, until one does not go (``send``
        returns False); those held past their time are dropped and returned."""
        client = self._clients.get(client_id)
        if client is None:
            return []
        expired: list[Frames] = []
        sent = 0
        while client.held:
            drop_after, payload, nbytes = client.held[0]
            if send(payload):
                sent += 1
            elif now >= drop_after:
                expired.append(payload)
            else:
                break
            client.held.popleft()
            client.held_bytes -= nbytes
            self.held_count -= 1
            self.held_bytes -= nbytes
        client.retry_at = None
        if client.held:
            client.backoff = RETRY_FIRST_S if sent else min(RETRY_MAX_S, client.backoff * 2)
            self._schedule(client_id, client, now)
        self._restall(client_id, client)
        self._forget_if_empty(client_id, client)
        return expired

    def due(self, now: float) -> list[bytes]:
        """The clients whose held replies are due for a retry."""
        out = []
        while self._timers and self._timers[0][0] <= now:
            at, client_id = heapq.heappop(self._timers)
            client = self._clients.get(client_id)
            if client is not None and client.retry_at == at:  # else a timer since replaced
                out.append(client_id)
        return out

    def next_due(self) -> float | None:
        """When the next retry is due (None: nothing held)."""
        while self._timers:
            at, client_id = self._timers[0]
            client = self._clients.get(client_id)
            if client is not None and client.retry_at == at:
                return at
            heapq.heappop(self._timers)
        return None

    def clear(self) -> None:
        self.__init__(  # type: ignore[misc]  # a reset: a new object's state
            self.hwm, self.client_hwm, self.max_held_bytes, self.request_ttl, self.max_waiting_bytes
        )

    # -- internals ----------------------------------------------------------------------------

    def _push(self, client_id: bytes, client: _Client, request: _Waiting, last: bool) -> None:
        """Queue ``request`` at the end (or, ``last`` False, the front) of the client's
        waiting requests, counted where the client is (served or stalled). With ``_pop``
        the only places a waiting request is counted in or out."""
        if last:
            client.waiting.append(request)
        else:
            client.waiting.appendleft(request)
        nbytes = request[2]
        client.waiting_bytes += nbytes
        self._expires(request[0])
        if client.stalled:
            self.waiting_stalled += 1
            self.bytes_stalled += nbytes
        else:
            self.waiting_ready += 1
            self.bytes_ready += nbytes
            if client_id not in self._ready:
                self._ready[client_id] = None

    def _pop(self, client: _Client) -> _Waiting:
        """The client's first waiting request, counted out (the caller updates ``_ready``)."""
        request = client.waiting.popleft()
        nbytes = request[2]
        client.waiting_bytes -= nbytes
        if client.stalled:
            self.waiting_stalled -= 1
            self.bytes_stalled -= nbytes
        else:
            self.waiting_ready -= 1
            self.bytes_ready -= nbytes
        return request

    def _expires(self, arrived: float) -> None:
        """A request that arrived at ``arrived`` waits: ``expire`` looks again no later than its expiry."""
        if self.request_ttl is not None:
            at = arrived + self.request_ttl
            if self._next_expiry is None or at < self._next_expiry:
                self._next_expiry = at

    def _schedule(self, client_id: bytes, client: _Client, now: float) -> None:
        at = now + client.backoff
        if client.held:
            at = min(at, client.held[0][0])  # the oldest is dropped on time
        client.retry_at = at
        heapq.heappush(self._timers, (at, client_id))

    def _restall(self, client_id: bytes, client: _Client) -> None:
        stalled = len(client.held) >= self.client_hwm or client.held_bytes >= self.max_held_bytes // 4
        if stalled == client.stalled:
            return
        client.stalled = stalled
        n, nbytes = len(client.waiting), client.waiting_bytes
        if stalled:
            self.waiting_ready -= n
            self.waiting_stalled += n
            self.bytes_ready -= nbytes
            self.bytes_stalled += nbytes
            self._ready.pop(client_id, None)
        else:
            self.waiting_stalled -= n
            self.waiting_ready += n
            self.bytes_stalled -= nbytes
            self.bytes_ready += nbytes
            if n:
                self._ready[client_id] = None

    def _forget_if_empty(self, client_id: bytes, client: _Client) -> None:
        if not client.waiting and not client.held:
            self._clients.pop(client_id, None)
            self._ready.pop(client_id, None)
