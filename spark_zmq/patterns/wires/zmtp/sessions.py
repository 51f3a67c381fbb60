"""The connections of one ZMTP engine (libzmq's sessions): connecting and reconnecting,
adopting what is accepted or connected, and what happens to a peer's messages when its
connection fails or closes (re-routed, never forgotten: see ``engine``).

``Sessions`` is the session manager an ``Engine`` holds: it owns the listeners
(``listeners.Listeners``, which hand it what they accept), the connectors and the
connections with their clocks (``clocks.Clocks``: handshake deadlines, heartbeats), makes
each connection's protocol object (``stream.StreamEngine``) and is that object's owner
(``owner.ConnectionOwner``): the queues, policies and counters a connection touches are
reached through it alone. It is made with what it uses and nothing more: the settings,
the options of its connections, the I/O thread's loop (``poller.Poller``) and the state
it shares with the application's calls (``state.SharedState``: the lock, the queues, the
counters). Its methods run on the I/O thread, but for ``listen`` and ``connect`` (before
the thread starts).
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import zmq

from ...message_block import MessageRun
from . import transport
from .clocks import Clocks
from .codec import EngineMessage, ZmtpError
from .connection import CLOSED, GREETING, HANDSHAKE, READY, Connection, Connector, Peer
from .listeners import Listeners
from .owner import EndReason, Settings
from .security import Security
from .stream import StreamEngine

if TYPE_CHECKING:
    from ...curve import Curve
    from .poller import Poller
    from .state import SharedState

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")

#: the longest wait between tries at an endpoint whose handshakes keep failing
HANDSHAKE_BACKOFF_MAX_S = 5.0
#: about this many bytes of messages are taken for one write batch of a connection
_WRITE_BATCH_BYTES = 256 * 1024
#: messages taken from a peer's queue per step of a refill (the batch may pass
#: _WRITE_BATCH_BYTES by at most one run's worth)
_REFILL_RUN = 64


class Sessions:
    """The session manager of one ``Engine`` and the owner of its connections (see the
    module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        state: SharedState,
        poller: Poller,
        *,
        curve: Curve | None,
        rcvbuf: int | None,
        sndbuf: int | None,
        tcp_options: Sequence[tuple[int, int, int]],
        immediate: bool,
        reconnect_ivl_s: float,
        reconnect_ivl_max_s: float,
        on_event: Callable[[int, int, str], None] | None,
    ) -> None:
        #: what each connection's protocol object reads of the socket
        self._settings = settings
        #: what the application's calls share (``closing``, ``waiters``, the counters are read there)
        self._state = state
        # bound once, the objects that never change: the hot paths take no extra step
        self._lock, self._cond, self._lb, self._orphans = state.lock, state.cond, state.lb, state.orphans
        self._fq_deliver = state.fq.deliver
        self._fq_deliver_run = state.fq.deliver_run
        #: a send-only socket ignores what its peers send (a well-behaved peer sends nothing)
        self._send_only = settings.socket_type in (b"SCATTER", b"PUSH")
        self._poller = poller
        self._selector = poller.selector
        self._curve = curve
        self._rcvbuf, self._sndbuf = rcvbuf, sndbuf
        #: socket options set on every TCP connection after the heartbeat's (the user's keepalive)
        self._tcp_options = tcp_options
        #: connect endpoints count as peers only once connected (ZMQ_IMMEDIATE)
        self._immediate = immediate
        #: ZMQ_RECONNECT_IVL and ZMQ_RECONNECT_IVL_MAX (0: no backoff)
        self._reconnect_ivl_s, self._reconnect_ivl_max_s = reconnect_ivl_s, reconnect_ivl_max_s
        self._on_event = on_event
        #: the bound endpoints, which hand what they accept to ``_adopt``
        self._listeners = Listeners(settings, state, poller, self._adopt)
        #: every connection's protocol object (the engine reads it, lock held, for what it holds)
        self.connections: set[StreamEngine] = set()
        #: the connections' handshake and heartbeat clocks: ``tick`` each turn of the I/O
        #: thread's loop, ``due`` when a connection sets one (bound here: no extra call)
        clocks = Clocks(settings, self.connections)
        self.tick, self.due = clocks.tick, clocks.due
        #: makes each connection's security mechanism
        self._security = Security(curve)

    # -- set-up (application thread, before the I/O thread starts) ------------------------

    def listen(self, endpoint: str) -> str:
        """Listen on ``endpoint`` now (errors surface in the caller); returns the real address."""
        return self._listeners.listen(endpoint)

    def connect(self, endpoint: str) -> None:
        """Connect to ``endpoint`` from the I/O thread, and again whenever the connection ends."""
        address = transport.parse_address(endpoint, bind=False)
        connector = Connector(endpoint, address, self._settings.socket_type)
        if not self._immediate:
            self._lb.add(connector.peer)
        self._poller.call_soon(lambda: self._connect(connector))

    # -- accepting and connecting ------------------------------------------------------

    def _configure(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as libzmq does
        self._settings.heartbeat.configure_tcp(sock)
        if self._rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
        if self._sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, name, value in self._tcp_options:
                sock.setsockopt(level, name, value)

    def _connect(self, connector: Connector) -> None:
        if self._state.closing or connector.conn is not None:
            return
        address = connector.address
        if address.transport == "inproc":
            try:
                sock = transport.connect_inproc(address.host)
            except OSError as exc:  # EMFILE and friends: retry as the TCP path does, log once
                if not connector.inproc_failing:
                    connector.inproc_failing = True
                    log.warning(
                        "%s: cannot connect to %s (%s); retrying every %.1f s",
                        self._settings.label,
                        connector.endpoint,
                        exc,
                        self._reconnect_ivl_s,
                    )
                self._retry(connector)
                return
            if sock is None:
                self._retry(connector)
                return
            if connector.inproc_failing:
                connector.inproc_failing = False
                log.warning("%s: connected to %s again", self._settings.label, connector.endpoint)
            self._adopt(sock, connector.endpoint, connector)
            return
        try:
            family, target = transport.connect_target(address)
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            self._retry(connector)
            return
        self._configure(sock)
        code = sock.connect_ex(target)
        if code not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            self._retry(connector)
            return
        conn = self._adopt(sock, connector.endpoint, connector, connecting=code != 0)
        if conn is not None and code != 0:
            conn.set_events(selectors.EVENT_WRITE)

    def _retry(self, connector: Connector) -> None:
        if not self._state.closing:
            wait = self._reconnect_ivl_s
            if self._reconnect_ivl_max_s > self._reconnect_ivl_s:  # libzmq's backoff: doubling up to the max
                wait = connector.backoff_s or wait
                connector.backoff_s = min(wait * 2, self._reconnect_ivl_max_s)
            if connector.failed_handshakes:
                # a peer that answers and then fails every handshake (not a ZeroMQ peer, a
                # wrong key or socket type) is not hammered every reconnect interval: the
                # wait doubles per failure in a row, up to HANDSHAKE_BACKOFF_MAX_S
                wait = max(
                    wait,
                    min(self._reconnect_ivl_s * 2 ** min(connector.failed_handshakes, 16), HANDSHAKE_BACKOFF_MAX_S),
                )
            self._poller.at(wait, lambda: self._connect(connector))

    def _adopt(
        self,
        sock: socket.socket,
        address: str,
        connector: Connector | None,
        connecting: bool = False,
        endpoint: str | None = None,
    ) -> StreamEngine | None:
        if self._state.closing:
            sock.close()
            return None
        if connector is None or connector.address.transport == "inproc":
            self._configure(sock)
        conn = StreamEngine(
            self,
            self._settings,
            self._selector,
            sock,
            address,
            connector,
            endpoint or address,
            self._security.new_mechanism,
        )
        if connector is not None:
            connector.conn = conn
        self.connections.add(conn)
        self.due(conn.deadline)
        conn.connecting = connecting
        if not connecting:
            conn.start_greeting()
        conn.set_events(selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out or connecting else 0))
        if not connecting:
            conn.flush()
        return conn

    # -- what a connection asks of its owner (``owner.ConnectionOwner``) ------------------

    def deliver(self, conn: Connection, messages: Sequence[EngineMessage], nbytes: int | None) -> bool:
        if self._send_only:
            return False
        with self._lock:
            paused = self._fq_deliver(conn.peer, messages, nbytes)
            if self._state.waiters:
                self._cond.notify()
        return paused

    def deliver_run(self, conn: Connection, run: MessageRun) -> bool:
        if self._send_only:
            return False
        with self._lock:
            paused = self._fq_deliver_run(conn.peer, run)
            if self._state.waiters:
                self._cond.notify()
        return paused

    def take_outgoing(self, peer: Peer) -> list[EngineMessage] | None:
        state, orphans = self._state, self._orphans
        with self._lock:
            source = orphans if orphans else peer.outbox
            if not source:
                if state.waiters:  # a close() waiting for the queues to drain
                    self._cond.notify_all()
                return None
            batch: list[EngineMessage] = []
            size = 0
            take = source.popleft
            while source and size < _WRITE_BATCH_BYTES:
                # a run of messages at a time, their sizes summed after (one Python step per
                # run, not per message); a multipart message is sized frame by frame
                run = [take() for _ in range(min(len(source), _REFILL_RUN))]
                batch += run
                size += (
                    sum(map(len, run))
                    if tuple not in set(map(type, run))
                    else sum(len(m) if type(m) is not tuple else sum(map(len, m)) for m in run)
                )
            if state.waiters:
                self._cond.notify_all()
        return batch

    def written(self) -> None:
        if self._state.waiters:  # a close() waiting for the queues to drain
            with self._lock:
                self._cond.notify_all()

    def peer_ready(self, conn: Connection) -> None:
        with self._lock:
            self._lb.add(conn.peer)
            self._cond.notify_all()
        self.emit(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, conn.endpoint)

    def command(self, conn: Connection, body: bytes) -> None:
        self._on_command(conn, body)

    def _on_command(self, conn: Connection, body: bytes) -> None:
        """This socket takes no command itself (no SUBSCRIBE on these types): the
        connection answers them. (A seam where a socket type would take its own.)"""
        assert isinstance(conn, StreamEngine)
        conn.on_command(body)

    def discarded(self, count: int) -> None:
        self._state.discarded_multipart += count

    # -- failing and closing -----------------------------------------------------------

    def ended(self, conn: Connection, reason: EndReason, exc: ZmtpError | None = None) -> None:
        """``conn`` is over (``owner.EndReason`` says what each reason does here)."""
        if conn.stage == CLOSED:
            return
        if reason is EndReason.PEER_CLOSED or reason is EndReason.CONNECTION_BROKEN:
            self._lost(conn, exc.value if exc is not None else 0)
        elif reason is EndReason.RENEGOTIATE:
            log.debug("%s: %s: %s", self._settings.label, conn.endpoint, exc)
            conn.retry_now = True
            self._close(conn, requeue=True)
        elif reason is EndReason.CONNECT_FAILED or reason is EndReason.INTERNAL_ERROR:
            self._close(conn, requeue=True, quiet=reason is EndReason.CONNECT_FAILED)
        else:  # PROTOCOL_ERROR, HANDSHAKE_TIMEOUT, HEARTBEAT_TIMEOUT: each carries its ZmtpError
            assert exc is not None
            if reason is EndReason.HEARTBEAT_TIMEOUT:
                self._state.heartbeat_timeouts += 1
            self._failed(conn, exc)

    def _lost(self, conn: Connection, code: int) -> None:
        """The peer closed the connection (``code`` 0) or it broke (an errno)."""
        if conn.stage == READY and code:
            self._state.broken_connections += 1
        if conn.stage in (GREETING, HANDSHAKE):
            # a peer that closes during the handshake refused it (socket type, credentials)
            # or is not a ZeroMQ peer; a connector that spoke first tries the other type next
            connector = conn.connector
            if connector is not None and conn.sent_metadata and self._curve is not None:
                # a CURVE server closes without a word on a socket-type mismatch, as on a
                # key it cannot decrypt: try the other type next, and keep the queue
                connector.declare = self._other_type(connector.declare)
            else:
                conn.refused = True
            if connector is not None:
                connector.failed_handshakes += 1
            self.emit(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, code, conn.endpoint)
        self._close(conn, requeue=True)

    def _other_type(self, declared: bytes) -> bytes:
        answers = list(dict.fromkeys(self._settings.peer_types.values()))
        return (
            answers[(answers.index(declared) + 1) % len(answers)] if declared in answers else self._settings.socket_type
        )

    def _failed(self, conn: Connection, exc: ZmtpError) -> None:
        """``conn`` broke the protocol, was refused or timed out (``StreamEngine.fail`` sent its ERROR)."""
        if conn.stage != READY:
            conn.refused = True
            if conn.connector is not None:
                conn.connector.failed_handshakes += 1
            self.emit(exc.event, exc.value, conn.endpoint)
        else:
            if getattr(exc, "missing", 0) and not getattr(exc, "replay", True):
                # a CURVE stream skipped messages (curve_message.CurveSequenceError): tampering or loss
                self._state.sequence_gaps += 1
            self._state.broken_connections += 1
            log.warning("%s: closing the connection of %s: %s", self._settings.label, conn.address, exc)
        self._close(conn, requeue=True)

    def _close(self, conn: Connection, *, requeue: bool, quiet: bool = False) -> None:
        if conn.stage == CLOSED:
            return
        was_ready = conn.stage == READY
        # before the socket closes: how far the peer's TCP acknowledged (it answers after a reset)
        confirmed = conn.confirmed() if requeue and (conn.unacked or conn.inflight) else None
        if confirmed is not None:
            conn.trim_acked(confirmed)
        # a peer that leaves with nothing of ours unacknowledged or queued left in good order
        last_end = conn.batch_base + conn.inflight_ends[-1] if conn.inflight_ends else 0
        held = bool(conn.unacked or conn.peer.outbox or (conn.inflight and (confirmed is None or last_end > confirmed)))
        assert isinstance(conn, StreamEngine)  # every connection is (``_adopt``)
        conn.shutdown()
        self.connections.discard(conn)
        peer = conn.peer
        keep = conn.connector is not None and not self._immediate and not conn.refused
        with self._lock:
            peer.conn = None
            unwritten = (
                [m for m, end in zip(conn.inflight, conn.inflight_ends) if end > conn.written] if requeue else []
            )
            if confirmed is not None:
                # written to the kernel, never acknowledged by the peer's: send them again
                base = conn.batch_base
                unconfirmed = [m for end, m in conn.unacked if end > confirmed]
                unconfirmed += [
                    m
                    for m, end in zip(conn.inflight, conn.inflight_ends)
                    if end <= conn.written and base + end > confirmed
                ]
                self._state.resent += len(unconfirmed)
                unwritten = unconfirmed + unwritten
            conn.unacked.clear()
            conn.inflight, conn.inflight_ends = [], []
            if keep:
                # a connect endpoint keeps its queue (49/SCATTERGATHER) and resends, on the
                # next connection, what did not reach the kernel whole
                peer.outbox.extendleft(reversed(unwritten))
                self._lb.add(peer)
            else:
                self._lb.remove(peer)
                if unwritten or peer.outbox:
                    self._orphans.extendleft(reversed(list(peer.outbox)))
                    self._orphans.extendleft(reversed(unwritten))
                    peer.outbox.clear()
            self._cond.notify_all()
        if was_ready and not quiet:
            if held:
                self._state.lost_peers += 1
            self.emit(zmq.EVENT_DISCONNECTED, 0, conn.endpoint)
        connector = conn.connector
        if connector is not None and connector.conn is conn:
            connector.conn = None
            if conn.retry_now and not connector.renegotiated:
                connector.renegotiated = True  # once at once; again only after a handshake
                self._poller.at(0.0, lambda: self._connect(connector))
            else:
                self._retry(connector)
        if self._orphans:
            self._serve_orphans()

    def _serve_orphans(self) -> None:
        for conn in list(self.connections):
            if conn.stage == READY and not conn.out:
                conn.flush()
                if not self._orphans:
                    return

    def close_all(self) -> None:
        for conn in list(self.connections):
            self._close(conn, requeue=True, quiet=True)
        if self._selector.get_map() is None:  # already closed
            return
        self._listeners.close()
        self._poller.close()

    # -- events ------------------------------------------------------------------------

    def emit(self, event: int, value: int, address: str) -> None:
        if self._on_event is not None:
            try:
                self._on_event(event, value, address)
            except Exception:
                log.exception("%s: event callback failed", self._settings.label)
