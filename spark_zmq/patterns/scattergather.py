"""49/SCATTERGATHER on the wire: SCATTER and GATHER sockets that real peers accept.

pyzmq's bundled libzmq is built without the draft API, so it has no SCATTER or GATHER
socket, and libzmq gives no way to announce another socket type: a libzmq SCATTER refuses
a PULL peer's handshake (and the other way round). So these two classes do not use libzmq
at all: they speak ZMTP 3.1 themselves (``spark_zmq.patterns.zmtp``: greeting, NULL and
CURVE mechanisms, framing, PING/PONG), on an I/O thread of their own per socket, over
``tcp://``, ``ipc://`` and ``inproc://`` (between two of these sockets in one process).
The other route, a libzmq built with the draft API, would not install with ``pip`` on a
fresh machine.

What they promise (49/SCATTERGATHER and the connector's rules):

* thread safety: one instance may be shared by many threads; every send and receive is
  one atomic call on one whole message;
* single-part only: ``Scatter.send`` raises ``ValueError`` for a list/tuple of frames;
  ``Gather`` discards a multipart message from a non-conforming peer whole (every part)
  and counts it in ``discarded_multipart``;
* a ``Scatter`` sends round-robin to GATHER peers and, for compatibility, to PULL peers
  (it announces itself as PUSH to those); a ``Gather`` fair-queues from SCATTER peers and
  PUSH peers (announcing PULL to them);
* a peer counts only once its handshake completed: a refused peer, or one that never
  completes the handshake, is never a delivery (``send`` blocks, then ``TimeoutError``);
* per-peer queues limited by ``hwm`` (default 1000 messages), backpressure through TCP
  when a GATHER's queue is full;
* where they differ from the RFC, to lose nothing: a ``Gather`` still delivers what it
  received from a peer that left, and a ``Scatter`` re-routes the queue of a peer that
  left to the other peers instead of discarding it (see ``zmtp.engine``).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, ClassVar, Optional, Sequence, cast

import zmq

from .base import PatternSocket, SendTimeoutError
from .endpoints import EndpointsSpec, bind_error, check_ipc_bind
from .frames import Frames, flatten
from .handshakes import HANDSHAKE_FAILURES, HandshakeWatch
from .socket_options import check_linger, positive_int, timeout_deadline
from .zmtp.codec import EngineMessage
from .zmtp.engine import Engine

__all__ = ["Scatter", "Gather"]

_DEFAULT_HWM = 1000


class EngineWatch(HandshakeWatch):
    """``HandshakeWatch`` fed by the ZMTP engine's events instead of a libzmq monitor."""

    def __init__(self, wanted: int, *, is_server: bool, label: str, curve: bool = True) -> None:
        super().__init__(None, is_server=is_server, label=label, curve=curve)  # type: ignore[arg-type]  # no monitor: events come from the engine
        self.wanted = wanted
        self._events: collections.deque[tuple[int, int, str]] = collections.deque()
        self._cond = threading.Condition()

    def push(self, event: int, value: int, address: str) -> None:
        if event & (HANDSHAKE_FAILURES | self.wanted):
            with self._cond:
                self._events.append((event, value, address))
                self._cond.notify_all()

    def poll(self, timeout_s: float = 0.0) -> list[tuple[int, int, str]]:
        with self._cond:
            if not self._events and timeout_s > 0:
                self._cond.wait(timeout_s)
            events = list(self._events)
            self._events.clear()
        others = []
        for event, value, address in events:
            if event & HANDSHAKE_FAILURES:
                self._rejected(event, value, address)
            else:
                others.append((event, value, address))
        return others


class ZmtpPatternSocket(PatternSocket):
    """A ``PatternSocket`` whose wire is this package's ZMTP engine, not a libzmq socket.

    It keeps the ``PatternSocket`` API (``send``, ``send_many``, ``recv``, ``recv_batch``,
    ``recv_values``, ``poll_recv``, ``close``, ``handshakes``...) and its options, plus
    ``handshake_ivl`` (ms, default 30,000: a peer that has not completed its handshake by
    then is disconnected) and ``confirm`` (default ``False``: with ``True``, ``close()`` also
    waits, within the linger period, until the peers' TCP acknowledged every message, and
    counts what it did not in ``unconfirmed``). ``context`` is accepted and unused (there
    is no libzmq context); ``immediate`` makes a connect endpoint count only once its
    handshake completed."""

    zmtp_type: ClassVar[bytes]
    #: a peer's Socket-Type -> the type this socket announces to it
    peer_types: ClassVar[dict[bytes, bytes]]
    socket_type: ClassVar[int] = -1

    def __init__(self, endpoints: EndpointsSpec, *, hwm: Optional[int] = None, **options: Any) -> None:
        self._closed = True
        tuning = options.get("tuning")
        if tuning is not None:  # the user's socket options, in place of the package's
            options = tuning.engine_options(options)
        hwm, curve = self._check_common(endpoints, hwm, options)
        self._linger = check_linger(options.get("linger", self.default_linger_ms))
        # ZMQ_HANDSHAKE_IVL: a peer that has not completed its handshake after this many ms
        # is disconnected (libzmq's default, 30 s), so idle strangers cannot pile up
        handshake_ms = positive_int("handshake_ivl", options.get("handshake_ivl", 30_000))
        reconnect_ms = options.get("reconnect_ivl")
        if reconnect_ms is not None:
            positive_int("reconnect_ivl", reconnect_ms)
        for name in ("rcvbuf", "sndbuf"):
            if options.get(name) is not None:
                positive_int(name, options[name])
        wanted = int(options.get("monitor") or 0)
        self.handshakes: Optional[HandshakeWatch] = (
            EngineWatch(wanted, is_server=curve is None or curve.is_server, label=type(self).__name__,
                        curve=curve is not None)
            if curve is not None or wanted else None
        )
        self._lock = threading.Lock()
        self._zap = None
        self._confirm = bool(options.get("confirm"))
        #: after ``close()``: messages the socket still held (never written to a peer)
        self.unsent = 0
        #: after ``close(confirm=True)``: messages written that no peer's TCP acknowledged
        self.unconfirmed = 0
        self._engine = Engine(
            socket_type=self.zmtp_type,
            peer_types=self.peer_types,
            label=type(self).__name__,
            hwm=_DEFAULT_HWM if hwm is None else hwm,
            max_message_bytes=self.max_message_bytes,
            reconnect_ivl_s=(reconnect_ms or 100) / 1000.0,
            handshake_ivl_s=handshake_ms / 1000.0,
            curve=curve,
            heartbeat=self.heartbeat,
            rcvbuf=options.get("rcvbuf"),
            sndbuf=options.get("sndbuf"),
            immediate=bool(options.get("immediate")),
            reconnect_ivl_max_s=(tuning.reconnect_ivl_max_ms or 0) / 1000.0 if tuning is not None else 0.0,
            tcp_options=tuning.tcp_options() if tuning is not None else (),
            on_event=self.handshakes.push if isinstance(self.handshakes, EngineWatch) else None,
            multipart=self.can_recv and not self.single_part,
            receive_only=self.can_recv and not self.can_send,
        )
        self._bound: list[str] = []
        self._closed = False
        try:
            for endpoint in self._endpoints:
                if endpoint.bind:
                    check_ipc_bind(endpoint.address, type(self).__name__)
                    try:
                        self._bound.append(self._engine.bind(endpoint.address))
                    except OSError as exc:
                        raise bind_error(type(self).__name__, endpoint.address, exc.errno,
                                         exc.strerror or str(exc)) from exc
                else:
                    self._engine.connect(endpoint.address)
            self._engine.start()
        except BaseException:
            self._closed = True
            self._engine.stop()
            raise

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return ("handshake_ivl", "confirm")

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        raise AttributeError(f"{type(self).__name__} speaks ZMTP itself; it has no libzmq socket")

    @property
    def resent(self) -> int:
        """Messages sent again, since the socket was opened, because the peer they were
        written to left before its TCP acknowledged them (tcp only)."""
        return self._engine.resent

    @property
    def broken_connections(self) -> int:
        """Connections that ended other than by the peer's orderly close (a reset, a
        timeout, a protocol error), with whatever the peer had in flight on them."""
        return self._engine.broken_connections

    @property
    def lost_peers(self) -> int:
        """Connections that broke, since the socket was opened, while they held messages of
        this socket (queued, being written, or not yet acknowledged by the peer's TCP)."""
        return self._engine.lost_peers

    @property
    def discarded_multipart(self) -> int:
        """Multipart messages dropped whole since the socket was opened."""
        return self._engine.discarded_multipart

    # -- sending ----------------------------------------------------------------------------

    def send(self, data: Frames, timeout: Optional[float] = None) -> None:
        """Send one message: round-robin to a peer whose queue has room; blocks while none
        has (``timeout`` seconds at most, then ``TimeoutError``)."""
        self._check_can_send()
        frames = self._frames(data)
        # the RFC says a sender SHALL NOT modify messages: a mutable buffer is copied now
        copied = [frame if type(frame) is bytes else bytes(frame) for frame in frames]
        self._send_all([copied[0] if len(copied) == 1 else tuple(copied)], timeout)

    def send_many(self, messages: Sequence[bytes], timeout: Optional[float] = None) -> int:
        """Send ``bytes`` messages in order under one lock round-trip; ``timeout`` bounds the
        wait for each message; on ``TimeoutError`` its ``sent`` attribute says how many went."""
        self._check_send_many(messages)
        return self._send_all(messages, timeout)

    def _send_all(self, messages: Sequence[EngineMessage], timeout: Optional[float]) -> int:
        timeout_deadline(timeout)  # validates
        sent, timed_out = self._engine.send_round_robin(messages, timeout, self._check_open)
        if timed_out:
            raise SendTimeoutError(f"{type(self).__name__}.send timed out{self._timeout_hint('send')}", sent)
        return sent

    # -- receiving --------------------------------------------------------------------------

    def recv_values(
        self, max_messages: int, timeout: Optional[float] = None, max_bytes: Optional[int] = None
    ) -> tuple[list[bytes], Optional[list[Optional[bytes]]]]:
        """Up to ``max_messages`` messages (and about ``max_bytes``), fair-queued over the
        peers, waiting up to ``timeout`` for the first; ``(values, topics)`` as
        ``PatternSocket.recv_values`` (``topics`` is ``None`` when every message had one
        frame, always so on a single-part socket)."""
        self._check_recv(max_messages)
        values = self._engine.receive(max_messages, max_bytes, timeout_deadline(timeout), self._check_open)
        if not values:
            raise TimeoutError(f"{type(self).__name__}.recv timed out{self._timeout_hint('recv')}")
        if not self.single_part and tuple in set(map(type, values)):  # multipart messages: as Pull's
            # a message is exactly bytes or a tuple of them: ``type(m) is tuple`` does not narrow for mypy
            messages: list[Any] = values
            return flatten([list(m) if type(m) is tuple else [m] for m in messages])
        return cast("list[bytes]", values), None  # no tuple among them: single-part messages

    def poll_recv(self, timeout: Optional[float] = 0.0) -> bool:
        """Whether a message is ready to receive, waiting up to ``timeout`` seconds for one."""
        self._check_can_recv()
        return self._engine.wait_readable(timeout_deadline(timeout), self._check_open)

    def recv_batch(
        self, max_messages: int, timeout: Optional[float] = None, max_bytes: Optional[int] = None
    ) -> list[list[bytes]]:
        self._check_recv(max_messages)
        values = self._engine.receive(max_messages, max_bytes, timeout_deadline(timeout), self._check_open)
        if not values:
            raise TimeoutError(f"{type(self).__name__}.recv timed out{self._timeout_hint('recv')}")
        # a message is exactly bytes or a tuple of them: ``type(v) is tuple`` does not narrow for mypy
        messages: list[Any] = values
        return [list(value) if type(value) is tuple else [value] for value in messages]

    # -- lifetime ---------------------------------------------------------------------------

    def close(self, linger: Optional[int] = None) -> None:
        """Close; a sender first waits up to ``linger`` ms (the socket's linger by default)
        for what it holds to reach the kernel. ``unsent`` counts what was left."""
        if self._closed:
            return
        linger_ms = self._linger if linger is None else check_linger(linger)
        engine = self._engine
        if self.can_send and linger_ms != 0:
            engine.drain(None if linger_ms < 0 else time.monotonic() + linger_ms / 1000.0, self._confirm)
        self._closing = True  # before release() wakes the callers waiting on the engine
        self.unsent, unconfirmed = engine.release(self._confirm)
        if self._confirm:
            self.unconfirmed = unconfirmed
        engine.stop()
        self._closed = True

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._engine.stop()
        except Exception:
            pass


class Scatter(ZmtpPatternSocket):
    """Thread-safe round-robin sender of single-part messages to GATHER (and PULL) peers.
    Connects by default."""

    zmtp_type: ClassVar[bytes] = b"SCATTER"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"GATHER": b"SCATTER", b"PULL": b"PUSH"}
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    single_part: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000


class Gather(ZmtpPatternSocket):
    """Thread-safe fair-queued receiver of single-part messages from SCATTER (and PUSH)
    peers. Binds by default."""

    zmtp_type: ClassVar[bytes] = b"GATHER"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"SCATTER": b"GATHER", b"PUSH": b"PULL"}
    default_bind: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    single_part: ClassVar[bool] = True
