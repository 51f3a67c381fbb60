"""The Guide's load-balancing broker (chapter 3, "lbbroker"): clients on a ROUTER frontend,
REQ workers on a ROUTER backend, each request to the worker that has been idle longest.

Why a broker at all: a ``Client`` can connect straight to REP workers, but its DEALER
round-robins, so a slow worker gets as many requests as a fast one and requests queue up
behind it while others are idle. The broker knows which workers are idle (a REQ worker
asks for work by sending), so a request waits in the broker instead, and goes to the
first worker free to take it. Workers come and go without clients knowing: only the
broker's two endpoints are fixed.

Wire (RFC 28 envelopes, as the Guide's chapter 3 draws them):

- frontend, what a client sends: ``[envelope..., b"", body...]``. The frontend ROUTER puts
  the client's identity in front, so a REQ client arrives as ``[client, b"", body]`` and a
  ``Client`` (DEALER with a request id) as ``[client, id, b"", body]``. Everything up to
  the first empty frame is the envelope; the broker keeps all of it and never looks
  inside.
- backend, what a worker (a REQ socket) sends: first the one frame ``b"READY"``, then each
  reply as ``[envelope..., b"", reply...]``, the envelope exactly as the request carried
  it. The worker's REQ adds and removes its own delimiter, so the worker sees requests as
  ``[envelope..., b"", body...]``.

Liveness: the backend uses ROUTER_MANDATORY, so a request sent to a worker whose
connection is gone fails at once (EHOSTUNREACH) instead of vanishing; that worker is
forgotten and the request goes to the next idle worker, or waits. Connections carry ZMTP
heartbeats (the ``heartbeat`` option), so a worker that stops answering PINGs (a host that
lost power, a half-open TCP connection) is disconnected too; the broker watches the
backend's disconnections (the socket monitor, matched to workers by file descriptor) so
that the counts of known workers and requests in flight stay true.

What the broker does *not* do: keep a copy of a request a worker holds. A worker that dies
holding a request loses it; the broker counts it (``requests_lost``) and the client's
timeout sends it again (``Client`` resends with the same id), usually to another worker.
So calls through the broker are at least once, never silently lost: the service must be
idempotent, and a client drops the late duplicate of a reply it already has.

Fair to every client (see ``broker_clients``): requests wait in one queue per client and
are dispatched round-robin across clients, so a client with thousands waiting takes turns
with one that has a single request.

Bounded memory: at most ``hwm`` requests of the clients being served, and
``max_waiting_bytes`` of requests in all, wait in the broker while no worker is idle; beyond
that it stops reading the frontend, libzmq's queues (a few messages per client connection,
``frontend_rcvhwm``) fill and clients' sends block (backpressure), as everywhere in this
package. Replies to a client that does not read fill libzmq's queue to it (a few,
``frontend_sndhwm``), then are held (``max_held_bytes``). Because it stops reading client
connections on purpose, the frontend sends PINGs but does not drop a peer whose PONGs it
has not read (see ``heartbeat``); the backend, always read, does.

Never crashed by what peers send: a message that is not what a client or a worker may
send (no delimiter, an empty envelope, no body, ``READY`` twice) is dropped and counted in
``malformed``; a reply whose client is gone is dropped and counted in
``replies_undeliverable``.

Replies only from the worker that holds the request: the broker remembers the envelope of
the request it gave each worker and forwards a reply only from that worker's connection,
only while the request is outstanding there, and only with that envelope. Any other reply
(from a connection that holds no request, a fresh or reconnected one, or for another
request than the one held) is dropped and counted in ``replies_unexpected``: a peer that
may connect to the backend cannot answer requests it was never given. A worker whose
connection broke while it held a request and that answers on a new one therefore loses
that answer to the client's resend; its new connection is taken as an idle worker.

Never throws away finished work because a client paused: a reply whose client is
connected but not reading (a garbage-collection pause, a busy machine) waits in libzmq's
queue toward that client (a few replies, ``frontend_sndhwm``), then is held in the broker,
for up to ``reply_timeout`` seconds, then dropped (``replies_undeliverable``; the client
resends).
Held replies are bounded per client (``client_hwm``) and in bytes (``max_held_bytes``); a
client at its bound gets no new request while the others go on, and its further requests
are refused (``requests_refused``): ``broker_clients`` says how and why.

Deadlines: a request that waited longer than ``request_ttl`` for a worker is dropped within
about 0.1 s of its deadline, whether or not a worker is free (its client has resent it or
given up by then), and from then on takes no place under ``hwm``: expired requests never
keep the broker from reading, or make it refuse, the requests of live clients; a worker that holds a request longer than
``hold_limit`` counts it lost, once, and the broker does not resend it. The worker side
(idle and busy workers, their connections, reconnections under the same routing id) is
``broker_workers``; the client side (the frontend socket, reading requests, returning,
holding and refusing) ``broker_frontend``; the per-client queues ``broker_clients``; the
counters ``broker_stats``.

One thread runs the broker (``run``/``serve_forever``); ``stop()`` may be called from any
thread (or a signal handler) and ends the loop within about 0.1 s.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from ..patterns.bounds import MAX_FRAMES, recv_bounded
from ..patterns.curve import Curve
from ..patterns.endpoints import EndpointsSpec
from ..patterns.heartbeat import Heartbeat
from ..patterns.reqrep import Router
from ..patterns.router_reply import CLOSE_LINGER_MS
from . import broker_defaults as defaults
from .broker_clients import ClientQueues, Frames
from .broker_frontend import LOGGED_CLIENTS, BrokerFrontend, ClientSide
from .broker_stats import BrokerStats, answered_probe, warn_shared_keys
from .broker_workers import READY, WorkerSide

__all__ = ["Broker", "BrokerStats", "READY"]

log = logging.getLogger(__name__)

#: the loop checks for ``stop()`` at least this often (seconds)
_WAKE_S = 0.1


class BrokerBackend(Router):
    """The broker's backend (a ``Router`` named for its errors and log lines)."""


class Broker(ClientSide, WorkerSide):
    """The least-recently-used queue between clients (``frontend``) and REQ workers
    (``backend``). Both endpoints bind by default (``@``/``>`` choose).

    ``hwm``: requests that may wait in the broker while no worker is idle (and the
    backend's high-water marks; the frontend's are at most ``hwm``).
    ``curve_frontend``/``curve_backend``: a ``Curve`` for that
    side (usually a server: clients or workers must hold an authorized key).
    ``heartbeat``: the connections' liveness (``Heartbeat``; the default is on).
    ``reply_timeout``: seconds a reply is held for a connected client that is not reading
    before it is dropped (the client's own timeout then resends the request).
    ``client_hwm`` (default ``hwm``): replies held for one client before it is given no new
    request, and requests one client may have waiting. ``max_held_bytes``: the bytes all
    held replies may take (default 256 MiB). ``max_waiting_bytes``: the bytes (all frames)
    waiting requests may take before the broker stops reading clients (default 256 MiB;
    one request is always taken, whatever its size); clients that read no reply may have
    half of it waiting, their further requests are refused. libzmq's own queues in front
    of the broker and toward each client are bounded in bytes too (``defaults.frontend_rcvhwm``,
    ``defaults.frontend_sndhwm``): the broker's memory is about ``max_waiting_bytes`` +
    ``max_held_bytes`` + (RCVHWM + 1 + SNDHWM + 1) × ``max_message_bytes`` per client
    connection.
    ``max_message_bytes``: the largest message accepted from a peer on either side (a
    frame larger: libzmq disconnects the peer; frames larger together: the message is
    dropped, counted in ``messages_oversize`` and logged once per peer). ``max_frames``:
    the most frames a message may have (default 64; more: dropped the same way). ``context``: a ``zmq.Context`` for both
    sockets (by default as ``PatternSocket`` chooses).
    """

    def __init__(
        self,
        frontend: EndpointsSpec,
        backend: EndpointsSpec,
        *,
        hwm: int = defaults.DEFAULT_HWM,
        curve_frontend: Curve | None = None,
        curve_backend: Curve | None = None,
        heartbeat: Heartbeat | None = None,
        max_message_bytes: int | None = None,
        context: zmq.Context[Any] | None = None,
        reply_timeout: float = defaults.DEFAULT_REPLY_TIMEOUT,
        client_hwm: int | None = None,
        max_held_bytes: int = defaults.DEFAULT_MAX_HELD_BYTES,
        max_frames: int = MAX_FRAMES,
        request_ttl: float | None = defaults.DEFAULT_REQUEST_TTL,
        hold_limit: float | None = defaults.DEFAULT_HOLD_LIMIT,
        max_waiting_bytes: int = defaults.DEFAULT_MAX_WAITING_BYTES,
    ) -> None:
        if isinstance(hwm, bool) or not isinstance(hwm, int) or hwm < 1:
            raise ValueError(
                f"option 'hwm' of Broker must be a positive integer (requests that may wait for a worker), got {hwm!r}"
            )
        if (
            isinstance(reply_timeout, bool)
            or not isinstance(reply_timeout, (int, float))
            or not math.isfinite(reply_timeout)
            or reply_timeout < 0
        ):
            raise ValueError(
                f"option 'reply_timeout' of Broker must be a finite number of seconds >= 0 (how long "
                f"a reply waits for a client that is not reading), got {reply_timeout!r}"
            )
        for name, value, what in (
            ("request_ttl", request_ttl, "how long a request may wait for a worker"),
            ("hold_limit", hold_limit, "how long a worker may hold a request"),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise ValueError(
                    f"option {name!r} of Broker must be None (off) or a finite number of seconds > 0 "
                    f"({what}), got {value!r}"
                )
        self.request_ttl = None if request_ttl is None else float(request_ttl)
        self.hold_limit = None if hold_limit is None else float(hold_limit)
        for name, value in (
            ("client_hwm", hwm if client_hwm is None else client_hwm),
            ("max_held_bytes", max_held_bytes),
            ("max_waiting_bytes", max_waiting_bytes),
            ("max_frames", max_frames),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"option {name!r} of Broker must be a positive integer, got {value!r}")
        warn_shared_keys(curve_frontend, curve_backend)
        self.hwm = hwm
        self.reply_timeout = float(reply_timeout)
        common: dict[str, Any] = {"hwm": hwm, "heartbeat": heartbeat, "mandatory": True}
        if max_message_bytes is not None:
            common["max_request_bytes"] = max_message_bytes
        if context is not None:
            common["context"] = context
        self._frontend: Router = BrokerFrontend(
            frontend,
            curve=curve_frontend,
            rcvhwm=defaults.frontend_rcvhwm(hwm, max_message_bytes),
            sndhwm=defaults.frontend_sndhwm(hwm, max_message_bytes),
            **common,
        )
        try:
            # the monitor's disconnections tell which workers are gone (see _on_disconnect)
            self._backend: Router = BrokerBackend(
                backend, curve=curve_backend, monitor=zmq.EVENT_DISCONNECTED, **common
            )
            # a worker with a fixed routing id that reconnects before its old connection is
            # seen gone (a half-open one) takes the id over instead of being refused
            self._backend.zmq_socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        except BaseException:
            self._frontend.close()
            raise
        #: waiting requests and held replies, per client
        self._clients = ClientQueues(
            hwm, hwm if client_hwm is None else client_hwm, max_held_bytes, self.request_ttl, max_waiting_bytes
        )
        #: clients whose refused request was logged (bounded: at most LOGGED_CLIENTS)
        self._refusals_logged: set[bytes] = set()
        self.requests_refused = 0
        self.max_frames = max_frames
        self.max_message_bytes = max_message_bytes
        self.messages_oversize = 0
        #: peers whose oversize message was logged (bounded: at most LOGGED_CLIENTS)
        self._oversize_logged: set[bytes] = set()
        #: idle workers, the one idle longest first
        self._idle: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        #: workers holding a request: identity -> the request's envelope (the only reply it may send)
        self._busy: dict[bytes, tuple[bytes, ...]] = {}
        #: when each busy worker was given its request, the earliest first; those past hold_limit
        self._held_since: collections.OrderedDict[bytes, float] = collections.OrderedDict()
        self._overdue: set[bytes] = set()
        #: the connection (file descriptor) each worker came on, and the workers on each
        self._fd_of: dict[bytes, int] = {}
        self._workers_at_fd: dict[int, set[bytes]] = {}
        #: workers forgotten lately -> (the envelope of the request one held then or None, its descriptor)
        self._departed: collections.OrderedDict[bytes, tuple[tuple[bytes, ...] | None, int | None]] = (
            collections.OrderedDict()
        )
        self._stop = threading.Event()
        self._running = threading.Lock()
        self._closed = False
        self.requests_forwarded = 0
        self.replies_returned = 0
        self.malformed = 0
        self.replies_undeliverable = 0
        self.requests_lost = 0
        self.workers_gone = 0
        self.replies_unexpected = 0
        self.workers_reconnected = 0
        self.requests_expired = 0

    # -- introspection ----------------------------------------------------------------------

    @property
    def frontend_addresses(self) -> list[str]:
        """The frontend's bound addresses (a ``*`` port resolved)."""
        return self._frontend.bound_addresses

    @property
    def backend_addresses(self) -> list[str]:
        """The backend's bound addresses (a ``*`` port resolved)."""
        return self._backend.bound_addresses

    def stats(self) -> BrokerStats:
        """The counters now (safe to call from another thread: a snapshot, possibly a few
        messages old)."""
        rejected = sum(s.handshakes.rejected for s in (self._frontend, self._backend) if s.handshakes is not None)
        idle, busy = len(self._idle), len(self._busy)
        clients = self._clients
        return BrokerStats(
            idle,
            idle + busy,
            clients.waiting,
            busy,
            self.requests_forwarded,
            self.replies_returned,
            self.malformed,
            self.replies_undeliverable,
            self.requests_lost,
            self.workers_gone,
            rejected,
            clients.held_count,
            self.replies_unexpected,
            self.requests_refused,
            clients.held_bytes,
            self.messages_oversize,
            workers_reconnected=self.workers_reconnected,
            requests_expired=self.requests_expired,
            workers_overdue=len(self._overdue),
            waiting_bytes=clients.waiting_bytes,
        )

    # -- the loop ---------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        report: Callable[[BrokerStats], None] | None = None,
        report_interval: float = 10.0,
    ) -> None:
        """Serve until ``stop`` is set or ``stop()`` is called, in the calling thread.
        ``report(stats)`` is called every ``report_interval`` seconds, the first time at once.
        Requests still waiting, and replies held, when it returns are dropped (their clients
        resend)."""
        if self._closed:
            raise RuntimeError("Broker is closed")
        if not self._running.acquire(blocking=False):
            raise RuntimeError("Broker.run is already running in another thread")
        try:
            self._loop(stop, report, report_interval)
        finally:
            self._running.release()

    def serve_forever(self) -> None:
        """``run()`` until ``stop()``."""
        self.run()

    def stop(self) -> None:
        """Ask the loop to end (from any thread or a signal handler); returns at once. Final:
        ``run`` returns at once afterwards."""
        self._stop.set()

    def _stopping(self, stop: threading.Event | None) -> bool:
        return self._stop.is_set() or (stop is not None and stop.is_set())

    def _loop(
        self, stop: threading.Event | None, report: Callable[[BrokerStats], None] | None, report_interval: float
    ) -> None:
        front, back = self._frontend.zmq_socket, self._backend.zmq_socket
        poller = zmq.Poller()
        poller.register(back, zmq.POLLIN)
        monitors = [s.handshakes.monitor for s in (self._frontend, self._backend) if s.handshakes is not None]
        for monitor in monitors:
            poller.register(monitor, zmq.POLLIN)
        reading_front = False
        next_report = time.monotonic()
        while not self._stopping(stop):
            if report is not None and time.monotonic() >= next_report:
                report(self.stats())
                next_report = time.monotonic() + report_interval
            room = self._clients.room()
            if room != reading_front:
                # backpressure: a full broker leaves client requests in libzmq's queues
                if room:
                    poller.register(front, zmq.POLLIN)
                else:
                    poller.unregister(front)
                reading_front = room
            wait_s = _WAKE_S if report is None else max(0.0, min(_WAKE_S, next_report - time.monotonic()))
            due = self._clients.next_due()
            if due is not None:
                # libzmq tells no per-client room: each client's held replies have a timer
                wait_s = max(0.0, min(wait_s, due - time.monotonic()))
            ready = dict(poller.poll(math.ceil(wait_s * 1000)))
            now = time.monotonic()
            self._check_holds(now)
            for client, waited in self._clients.expire(now):
                self._expired(client, waited)
            retried = self._clients.due(now)
            for client in retried:
                self._retry(client, now)
            if retried:
                self._dispatch()
            # disconnections first: a worker gone must not be given the next request, and a
            # new connection may already reuse a gone one's file descriptor
            self._read_monitors()
            if back in ready:
                self._read_backend(back)
            if front in ready:
                self._read_frontend(front)

    def _read_monitors(self) -> None:
        if self._frontend.handshakes is not None:
            self._frontend.handshakes.poll()
        backend_watch = self._backend.handshakes
        assert backend_watch is not None  # the backend is made with a monitor (``__init__``)
        for event, value, _ in backend_watch.poll():
            if event == zmq.EVENT_DISCONNECTED:
                self._on_disconnect(value)

    def _recv(self, sock: zmq.Socket[Any], side: str) -> Frames | None:
        """One message within ``max_frames`` and ``max_message_bytes``; ``[]`` when it was
        dropped for its size; None when nothing waits."""
        try:
            frames, first, why = recv_bounded(sock, self.max_frames, self.max_message_bytes)
        except zmq.Again:
            return None
        if why:
            peer = first.bytes
            self.messages_oversize += 1
            if peer not in self._oversize_logged and len(self._oversize_logged) < LOGGED_CLIENTS:
                self._oversize_logged.add(peer)
                log.warning(
                    "Broker: dropped a message from %s peer %r: %s (further ones of this peer are counted, not logged)",
                    side,
                    peer,
                    why,
                )
            return []
        return [] if side == "frontend" and answered_probe(sock, frames, self.stats) else frames  # ``spark-zmq ping``

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the loop (waiting for it to return, if it runs in another thread) and close
        both sockets. Idempotent."""
        if self._closed:
            return
        self.stop()
        with self._running:
            if self._closed:
                return
            self._closed = True
            self._clients.clear()
            # both pass multipart messages to peers that may have stopped reading
            self._frontend.close(linger=CLOSE_LINGER_MS)
            self._backend.close(linger=CLOSE_LINGER_MS)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return "<Broker closed>"
        return (
            f"<Broker frontend {','.join(map(str, self._frontend.endpoints))} "
            f"backend {','.join(map(str, self._backend.endpoints))}>"
        )
