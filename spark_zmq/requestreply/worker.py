"""Run a Python function as a ZeroMQ request-reply service: a broker worker or a REP server.

Why: the other half of ``spark_zmq.request`` (and of any ``Client``) is a service that
answers requests. Writing one correctly takes more than a REP loop: the envelope must go
back unchanged, a handler's exception must not kill the service (a client would only see
silence and resend the same poison request to the next worker), a wrong answer must be
told from a right one, and a worker behind a broker must announce itself::

    from spark_zmq.worker import serve

    def score(batch: pyarrow.RecordBatch) -> pyarrow.RecordBatch:
        ...                                       # one output row per input row

    serve(score, "tcp://scoring-broker:5560")            # a worker of `spark-zmq broker`
    serve(score, "@tcp://*:5555", broker=False)          # a REP server clients connect to

Roles. ``broker=True`` (the default): a REQ socket, connecting by default, that first sends
the one frame ``b"READY"`` and then answers each request the broker gives it (the Guide's
load-balancing worker; see ``spark_zmq.requestreply.broker``). If its connection to the broker
is re-established (the broker restarted, or the network broke it), the worker sends
``READY`` again, so the broker, which forgets a disconnected worker, knows it once more.
``broker=False``: a REP server, binding by default: a ROUTER keeping REP's envelope rules
(RFC 28): a request's envelope (every frame up to and including the first empty one) goes
back unchanged before its reply, so REQ clients and DEALERs that send the empty delimiter
are served as by a REP; a request without one is dropped (``malformed``). Unlike libzmq's
REP, which silently drops a reply its client has no room for, each reply is tried once and
a drop counted (``dropped_replies``; ``patterns.router_reply``): a client that reads nothing
holds no one else. Endpoints follow ``spark_zmq.patterns.endpoints``: ``@`` binds, ``>`` connects.

Formats (``format``), for a request body of one frame:

- ``arrow``: the body is one Arrow IPC stream; the handler gets a ``pyarrow.RecordBatch``
  (the stream's batches concatenated) and returns a ``RecordBatch`` or ``Table`` with as
  many rows; the reply is one IPC stream.
- ``json``: the body is one JSON object; the handler takes and returns a ``dict``; the
  reply is its JSON text (UTF-8).
- ``raw``: ``bytes -> bytes``.  ``text``: ``str -> str`` (UTF-8 both ways).

Untrusted requests. An ``arrow`` request is read through the same guard as every Arrow
message this package receives (``spark_zmq.arrow.guard``): its rows and the bytes
its buffers take once decompressed are read from the metadata *before* anything is
decompressed, and a request claiming more than ``max_decompressed_bytes`` (or 10,000,000
rows) is answered with an error reply without being decoded. A 12 KB zstd request cannot
make the worker allocate the 400 MB it claims. A reply larger than ``max_message_bytes``
becomes an error reply naming both sizes, and the worker goes on.

Replies. A normal reply is ONE frame: the body. An error reply is TWO frames:
``[b"ERROR", message]``, the message UTF-8 text naming what went wrong (the handler's
exception type and text, a wrong row count, a body that is not valid for ``format``).
A client tells them apart by the number of frames after the envelope; no body can be
mistaken for an error. The worker logs each error and keeps serving.

What ``stop`` does: when the event is set the worker finishes (and answers) the request in
hand, if any, and returns within about 0.1 s. A handler that never returns: with
``handler_timeout`` the handler runs in a child process, its request is answered with an
error reply at the deadline and the child is replaced, and ``stop`` ends the worker (and
the child) within about 0.1 s even while a handler runs; without it, a handler that never
returns holds the worker and ``stop`` waits for it. SIGTERM handling is the caller's (set ``stop`` from a handler).
Delivery is at least once: a client resends a request whose reply is late, so a request
can be handled twice, and handlers should be idempotent.

This module holds ``serve`` and its loops; what a worker answers to one request (the
formats, the error reply, ``WorkerStats``) is ``worker_replies``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

import zmq

from ..arrow.guard import MAX_DECOMPRESSED_BYTES
from ..errors import SparkZmqError
from ..patterns import Heartbeat, Req, Router, SocketClosedError
from ..patterns.bounds import MAX_FRAMES, MessageBounds
from ..patterns.curve import Curve
from ..patterns.endpoints import EndpointsSpec, parse_endpoints
from ..patterns.router_reply import ReplyDrops
from .broker_stats import delimiter
from .broker_workers import READY
from .worker_process import HandlerProcess
from .worker_replies import (
    CALLS,
    DEFAULT_DECOMPRESSED_BYTES,
    ERROR,
    FORMATS,
    Handler,
    WorkerStats,
    answer_request,
    call_arrow,
    error_reply,
    is_error_reply,
)

__all__ = ["serve", "StopFlag", "WorkerStats", "ERROR", "FORMATS", "error_reply", "is_error_reply"]

log = logging.getLogger(__name__)

#: the loop checks ``stop`` at least this often (seconds)
_WAKE_S = 0.1
#: ms a closing worker keeps trying to deliver its last reply
_LINGER_MS = 2000


class StopFlag(Protocol):
    """What ``stop`` may be: a ``threading.Event``, a ``multiprocessing.Event``, ..."""

    def is_set(self) -> bool: ...


class _Stopped(SparkZmqError):
    """``stop`` was set while a handler ran in its process: the request is not answered."""


# -- the loop -----------------------------------------------------------------------------


def serve(
    handler: Handler,
    endpoint: EndpointsSpec,
    *,
    format: str = "arrow",
    broker: bool = True,
    curve: Curve | None = None,
    stop: StopFlag | None = None,
    heartbeat: Heartbeat | None = None,
    max_message_bytes: int | None = None,
    on_ready: Callable[[list[str]], None] | None = None,
    context: zmq.Context[Any] | None = None,
    max_decompressed_bytes: int | None = None,
    max_frames: int = MAX_FRAMES,
    handler_timeout: float | None = None,
    metrics: str | None = None,
) -> WorkerStats:
    """Answer requests with ``handler`` until ``stop`` is set (see the module docstring).

    ``curve``: the socket's CURVE security (usually a client of the broker's backend, or a
    server for a REP that binds). ``heartbeat``, ``max_message_bytes`` (the largest request
    accepted, and the largest reply sent: a larger one becomes an error reply), ``context``:
    as for pattern sockets. ``max_decompressed_bytes``: the most an arrow request may take
    once decompressed (default ``min(1 GiB, 16 x max_message_bytes)``, or 256 MiB without
    ``max_message_bytes``); checked before decompressing. ``max_frames`` (default 64) and
    ``max_message_bytes`` also bound a request as a whole: one with more frames, or more
    bytes over all its frames, is read and let go at once, frame by frame, answered with an
    error reply, counted (``oversize``) and logged once per peer. ``on_ready(addresses)`` is called once
    the socket is bound or connected (the bound addresses, a ``*`` port resolved, or the
    endpoints connected to). ``handler_timeout`` (seconds; default None, off): the handler then
    runs in a child process forked from the worker, and a request whose handler has not
    returned by then is answered with the error reply, the child killed and a new one
    forked (``timeouts``); ``stop`` then also ends a worker whose handler is running (that
    request is not answered: its client resends it). ``metrics``: ``"HOST:PORT"`` to serve
    the worker's counters as Prometheus metrics at ``/metrics`` while it runs (needs the
    extra ``spark-zmq[metrics]``; ``spark_zmq.metrics``). Returns what the worker did."""
    if not callable(handler):
        raise TypeError(f"handler must be callable, not {type(handler).__name__}")
    if handler_timeout is not None and (
        isinstance(handler_timeout, bool)
        or not isinstance(handler_timeout, (int, float))
        or not math.isfinite(handler_timeout)
        or handler_timeout <= 0
    ):
        raise ValueError(
            f"handler_timeout must be None (no deadline) or a finite number of seconds > 0 (how long a "
            f"handler may take before its request is answered with an error), got {handler_timeout!r}"
        )
    if format not in CALLS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    if broker:
        endpoints = parse_endpoints(endpoint, default_bind=False)
        if len(endpoints) != 1:
            raise ValueError(
                f"a broker worker connects to one broker backend, but {len(endpoints)} endpoints were "
                f"given ({', '.join(map(str, endpoints))}); run one worker per broker"
            )
    options: dict[str, Any] = {
        "linger": _LINGER_MS,
        "heartbeat": heartbeat,
        "curve": curve,
        "max_message_bytes": max_message_bytes,
    }
    if context is not None:
        options["context"] = context
    bounds = MessageBounds("worker", max_frames, max_message_bytes, logger=log)
    stop = stop or threading.Event()
    stats = WorkerStats()
    call = CALLS[format]
    if format == "arrow":
        if max_decompressed_bytes is None:
            max_decompressed_bytes = (
                DEFAULT_DECOMPRESSED_BYTES
                if max_message_bytes is None
                else min(MAX_DECOMPRESSED_BYTES, 16 * max_message_bytes)
            )
        elif (
            isinstance(max_decompressed_bytes, bool)
            or not isinstance(max_decompressed_bytes, int)
            or max_decompressed_bytes < 1
        ):
            raise ValueError(
                f"max_decompressed_bytes must be a positive integer (bytes an arrow request may take "
                f"once decompressed), got {max_decompressed_bytes!r}"
            )
        limit = max_decompressed_bytes
        call = lambda handler, body: call_arrow(handler, body, limit)  # noqa: E731
    reply_limit = max_message_bytes
    checked_call = call

    def answer_here(body: list[bytes]) -> list[bytes]:
        return answer_request(checked_call, handler, body, stats, reply_limit)

    answer: Callable[[list[bytes]], list[bytes]] = answer_here
    child: HandlerProcess | None = None
    if handler_timeout is not None:
        direct = answer_here

        def in_child(number: int, body: list[bytes]) -> list[bytes]:
            stats.requests = number  # (the child's copy: for its log lines)
            return direct(body)

        child = HandlerProcess(in_child)  # forked before the socket exists
        answer = _answer_in(child, float(handler_timeout), stop, stats)
    scrape = None
    try:
        if metrics is not None:
            from ..metrics import serve_metrics, worker_metrics

            scrape = serve_metrics(metrics, worker_metrics(stats), flag="metrics")
        sock: Req | Router
        if broker:
            # the monitor's CONNECTED events tell when the connection to the broker is new
            sock = Req(endpoint, monitor=zmq.EVENT_CONNECTED, **{k: v for k, v in options.items() if v is not None})
        else:  # mandatory: a reply to a full or gone client fails at once instead of vanishing
            sock = Router(endpoint, mandatory=True, **{k: v for k, v in options.items() if v is not None})
        with sock:
            if on_ready is not None:
                on_ready(sock.bound_addresses or [e.address for e in sock.endpoints])
            try:
                if broker:
                    _serve_broker(cast(Req, sock), answer, stop, stats, bounds)  # made as one above
                else:
                    _serve_rep(cast(Router, sock), answer, stop, stats, bounds)
            except _Stopped:
                pass
    finally:
        if scrape is not None:
            scrape.close()
        if child is not None:
            child.close()
    return stats


def _answer_in(
    child: HandlerProcess, timeout: float, stop: StopFlag, stats: WorkerStats
) -> Callable[[list[bytes]], list[bytes]]:
    """``answer`` through the handler's process, within ``timeout`` seconds (see ``serve``)."""

    def answer(body: list[bytes]) -> list[bytes]:
        child.submit(stats.requests, body)
        deadline = time.monotonic() + timeout
        while True:
            if stop.is_set():
                raise _Stopped()
            try:
                reply = child.wait(min(_WAKE_S, deadline - time.monotonic()))
            except ChildProcessError as exc:
                stats.errors += 1
                log.warning("worker: request %d: %s", stats.requests, exc)
                return error_reply(str(exc))
            if reply is not None:
                if is_error_reply(reply):
                    stats.errors += 1
                else:
                    stats.replies += 1
                return reply
            if time.monotonic() >= deadline:
                child.kill()
                stats.errors += 1
                stats.timeouts += 1
                text = (
                    f"the handler did not return within handler_timeout ({timeout:g} s); its process was "
                    f"killed and replaced"
                )
                log.warning("worker: request %d: %s", stats.requests, text)
                return error_reply(text)

    return answer


def _send(sock: Any, frames: list[bytes], stop: StopFlag) -> bool:
    """Send, waiting in slices while no peer takes it; False if stopped first."""
    while True:
        try:
            sock.send(frames, timeout=_WAKE_S)
            return True
        except TimeoutError:
            if stop.is_set():
                return False


def _recv(
    sock: Any, stop: StopFlag, bounds: MessageBounds, stats: WorkerStats, between: Callable[[], None] = lambda: None
) -> tuple[list[bytes] | None, list[bytes], str] | None:
    """Receive one message within ``bounds``, waiting in slices (``between()`` after each);
    None if stopped. ``(frames, [], "")``, or ``(None, kept, why)`` for a refused message
    (counted in ``stats.oversize``)."""
    waited = False  # a request that is already there costs no poll
    while not stop.is_set():
        if waited and not sock.poll_recv(_WAKE_S):
            between()
            continue
        try:
            got = bounds.recv(sock.zmq_socket)
        except zmq.Again:
            waited = True
            continue
        stats.requests += 1
        if got[0] is None:
            stats.oversize += 1
            stats.errors += 1
        return got
    return None


def _refusal(why: str, bounds: MessageBounds) -> list[bytes]:
    limits = f"max_frames {bounds.max_frames}" + (
        "" if bounds.max_bytes is None else f", max_message_bytes {bounds.max_bytes:,}"
    )
    return error_reply(f"the request was refused: {why} ({limits})")


def _serve_rep(
    sock: Router,
    answer: Callable[[list[bytes]], list[bytes]],
    stop: StopFlag,
    stats: WorkerStats,
    bounds: MessageBounds,
) -> None:
    """A REP's loop on a ROUTER (the module docstring): each reply after its envelope, tried once."""
    drops = ReplyDrops("worker", log)
    while True:
        got = _recv(sock, stop, bounds, stats)
        if got is None:
            return
        frames, kept, why = got
        message = kept if frames is None else frames
        at = delimiter(message, start=1)  # (the first frame is the ROUTER's identity of the client)
        if at is None:
            if frames is not None:  # (a refused one is counted as oversize already)
                stats.malformed += 1
            continue
        reply = _refusal(why, bounds) if frames is None else answer(frames[at + 1 :])
        try:
            if not drops.send(sock, message[: at + 1] + reply):
                stats.dropped_replies += 1
        except SocketClosedError:
            return


class _Connections:
    """Tells from the REQ socket's monitor when the connection to the broker is a new one."""

    def __init__(self, sock: Req) -> None:
        watch = sock.handshakes
        assert watch is not None  # a broker's worker socket is made with a monitor (``serve``)
        self.watch = watch
        self.connects = 0
        self.seen = 0

    def reconnected(self) -> bool:
        """Whether a connection after the first one was made since the last call."""
        for event, _, _ in self.watch.poll():
            if event == zmq.EVENT_CONNECTED:
                self.connects += 1
        reconnects = max(0, self.connects - 1)  # the first connection is the one READY went to
        new, self.seen = reconnects > self.seen, reconnects
        return new


def _serve_broker(
    sock: Req, answer: Callable[[list[bytes]], list[bytes]], stop: StopFlag, stats: WorkerStats, bounds: MessageBounds
) -> None:
    # relaxed: READY may be sent again while the socket waits for a request (a new
    # connection's broker does not know us; the request the old one would send never comes)
    sock.zmq_socket.setsockopt(zmq.REQ_RELAXED, 1)
    connections = _Connections(sock)
    if not _send(sock, [READY], stop):
        return

    def reannounce_if_reconnected() -> None:
        if connections.reconnected():
            stats.reannounced += 1
            log.info("worker: connected to the broker again; announcing READY")
            _send(sock, [READY], stop)

    while True:
        got = _recv(sock, stop, bounds, stats, reannounce_if_reconnected)
        if got is None:
            return
        frames, kept, why = got
        delimiter = next((i for i, frame in enumerate(kept if frames is None else frames) if not frame), None)
        if frames is None:
            # (a REQ must send before it reads again: the error reply, with the envelope if it was read)
            reply = _refusal(why, bounds) if delimiter is None else kept[: delimiter + 1] + _refusal(why, bounds)
        elif delimiter is None:
            reply = error_reply("the request has no envelope (no empty delimiter frame)")
            stats.errors += 1
        else:
            reply = frames[: delimiter + 1] + answer(frames[delimiter + 1 :])
        # a reconnection during the handler needs no READY: this reply goes on the new
        # connection and announces the worker by itself (the broker takes a reply as readiness)
        connections.reconnected()
        _send(sock, reply, stop)
