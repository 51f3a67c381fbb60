"""The connections of one ZMTP engine (libzmq's sessions): accepting, connecting and
reconnecting, handshake deadlines, and what happens to a peer's messages when its
connection fails or closes (re-routed, never forgotten: see ``engine``).

``_Sessions`` is the session manager of ``Engine`` (its base): it owns the listeners, the
connectors and the connections, makes each connection's protocol object
(``stream.StreamEngine``) and is that object's owner (``owner.ConnectionOwner``): the
queues, policies and counters a connection touches are reached through it alone. Its
methods run on the I/O thread; the state it shares with the application's calls (the
lock, the queues, the counters) is the engine's, declared below for the type checker.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import selectors
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import zmq

from . import transport
from .codec import EngineMessage, ZmtpError
from .connection import CLOSED, GREETING, HANDSHAKE, READY, Connection, Connector, Peer
from .null import NullMechanism
from .owner import Renegotiate, Settings
from .stream import StreamEngine

if TYPE_CHECKING:
    from ..curve import Curve
    from ..heartbeat import Heartbeat
    from .connection import Mechanism
    from .poller import Poller
    from .policies import FairQueue, RoundRobin

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.zmtp.engine")

_ACCEPT_RETRY_S = 0.2
#: the longest wait between tries at an endpoint whose handshakes keep failing
HANDSHAKE_BACKOFF_MAX_S = 5.0
#: about this many bytes of messages are taken for one write batch of a connection
_WRITE_BATCH_BYTES = 256 * 1024
#: messages taken from a peer's queue per step of a refill (the batch may pass
#: _WRITE_BATCH_BYTES by at most one run's worth)
_REFILL_RUN = 64


def _prepare_curve(curve: Optional[Curve]) -> Optional[dict[str, Any]]:
    """The socket's CURVE keys, decoded once for every connection's mechanism."""
    if curve is None:
        return None
    from zmq.utils import z85
    keys: dict[str, Any] = {"public": z85.decode(curve.public_key), "secret": z85.decode(curve.secret_key)}
    if curve.is_server:
        authorized = curve.authorized
        assert authorized is not None  # a server has it (``Curve.__post_init__``)
        keys["authorized"] = None if isinstance(authorized, str) else frozenset(z85.decode(k) for k in authorized)
    else:
        assert curve.server_key is not None  # a client has one (``Curve.__post_init__``)
        keys["server"] = z85.decode(curve.server_key)
    return keys


class _Sessions:
    """The session manager of ``Engine`` and the owner of its connections (see the
    module's docstring)."""

    # the engine's state used here, set by ``Engine.__init__`` (its own is set below): the
    # settings, ...
    socket_type: bytes
    peer_types: dict[bytes, bytes]
    label: str
    curve: Optional[Curve]
    heartbeat: Heartbeat
    rcvbuf: Optional[int]
    sndbuf: Optional[int]
    tcp_options: list[tuple[int, int, int]]
    immediate: bool
    reconnect_ivl_s: float
    reconnect_ivl_max_s: float
    on_event: Optional[Callable[[int, int, str], None]]
    # ... what it shares with the application's calls (under ``lock``) ...
    lock: threading.Lock
    cond: threading.Condition
    _lb: RoundRobin
    _fq: FairQueue
    orphans: collections.deque[EngineMessage]
    closing: bool
    waiters: int
    heartbeat_timeouts: int
    broken_connections: int
    sequence_gaps: int
    discarded_multipart: int
    resent: int
    lost_peers: int
    # ... and the I/O thread's loop
    _poller: Poller
    _selector: selectors.BaseSelector

    def __init__(self, settings: Settings, curve: Optional[Curve]) -> None:
        #: what each connection's protocol object reads of the socket
        self._settings = settings
        self._accept_failing = False
        self._listeners: list[tuple[socket.socket, str, transport.Address]] = []
        self._inproc_names: list[str] = []
        self._connections: set[StreamEngine] = set()
        #: no connection's handshake or heartbeat clock is due before this (monotonic
        #: seconds), so the loop walks the connections only when one may be: set by each
        #: walk, lowered by whatever sets an earlier clock (``due``)
        self._connections_due = 0.0
        self._mechanism_keys = _prepare_curve(curve)
        #: (host, key) of the CURVE clients refused and logged: each once per socket, as the
        #: libzmq sockets' ZAP handler does (``curve._KeyPolicy``), at most 10,000
        self._refused_logged: set[tuple[str, str]] = set()

    # -- clocks ------------------------------------------------------------------------

    def due(self, at: float) -> None:
        """A connection's clock was set to ``at``: the next walk comes no later."""
        if at < self._connections_due:
            self._connections_due = at

    def _walk_connections(self, now: float) -> float:
        """Fail handshakes past their deadline and run heartbeats; returns the time to the
        next connection event (at most 1 s)."""
        delay = 1.0
        for conn in list(self._connections):
            if conn.stage in (GREETING, HANDSHAKE):
                if now >= conn.deadline:
                    conn.fail(ZmtpError("the peer did not complete the handshake in time",
                                        zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.ETIMEDOUT))
                else:
                    delay = min(delay, conn.deadline - now)
            elif conn.stage == READY and self.heartbeat.enabled:
                delay = min(delay, conn.heartbeat(now))
        return delay

    # -- accepting and connecting ------------------------------------------------------

    def _configure(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as libzmq does
        self.heartbeat.configure_tcp(sock)
        if self.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        if self.sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            for level, name, value in self.tcp_options:
                sock.setsockopt(level, name, value)

    def _on_accept(self, listener: socket.socket, actual: str) -> None:
        for _ in range(64):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: stop listening a while, log once
                if not self._accept_failing:
                    log.warning("%s: cannot accept connections on %s (%s); retrying every %.1f s", self.label,
                                actual, exc, _ACCEPT_RETRY_S)
                self._accept_failing = True
                self._selector.unregister(listener)
                self._poller.at(_ACCEPT_RETRY_S, lambda: self._selector.register(
                    listener, selectors.EVENT_READ, lambda mask: self._on_accept(listener, actual)))
                return
            if self._accept_failing:
                self._accept_failing = False
                log.warning("%s: accepting connections on %s again", self.label, actual)
            peer_address = (f"tcp://{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else actual)
            self._adopt(sock, peer_address, None, endpoint=actual)

    def _accept_inproc(self, sock: socket.socket, address: str) -> None:
        """Called by a connecting thread (``transport.connect_inproc``)."""
        with self.lock:
            if self.closing:
                sock.close()
                return
            self._poller.call_soon(lambda: self._adopt(sock, address, None))

    def _connect(self, connector: Connector) -> None:
        if self.closing or connector.conn is not None:
            return
        address = connector.address
        if address.transport == "inproc":
            try:
                sock = transport.connect_inproc(address.host)
            except OSError as exc:  # EMFILE and friends: retry as the TCP path does, log once
                if not connector.inproc_failing:
                    connector.inproc_failing = True
                    log.warning("%s: cannot connect to %s (%s); retrying every %.1f s", self.label,
                                connector.endpoint, exc, self.reconnect_ivl_s)
                self._retry(connector)
                return
            if sock is None:
                self._retry(connector)
                return
            if connector.inproc_failing:
                connector.inproc_failing = False
                log.warning("%s: connected to %s again", self.label, connector.endpoint)
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
        if not self.closing:
            wait = self.reconnect_ivl_s
            if self.reconnect_ivl_max_s > self.reconnect_ivl_s:  # libzmq's backoff: doubling up to the max
                wait = connector.backoff_s or wait
                connector.backoff_s = min(wait * 2, self.reconnect_ivl_max_s)
            if connector.failed_handshakes:
                # a peer that answers and then fails every handshake (not a ZeroMQ peer, a
                # wrong key or socket type) is not hammered every reconnect interval: the
                # wait doubles per failure in a row, up to HANDSHAKE_BACKOFF_MAX_S
                wait = max(wait, min(self.reconnect_ivl_s * 2 ** min(connector.failed_handshakes, 16),
                                     HANDSHAKE_BACKOFF_MAX_S))
            self._poller.at(wait, lambda: self._connect(connector))

    def _adopt(self, sock: socket.socket, address: str, connector: Optional[Connector],
               connecting: bool = False, endpoint: Optional[str] = None) -> Optional[StreamEngine]:
        if self.closing:
            sock.close()
            return None
        if connector is None or connector.address.transport == "inproc":
            self._configure(sock)
        conn = StreamEngine(self, self._settings, self._selector, sock, address, connector, endpoint or address,
                            self.new_mechanism)
        if connector is not None:
            connector.conn = conn
        self._connections.add(conn)
        self.due(conn.deadline)
        conn.connecting = connecting
        if not connecting:
            conn.start_greeting()
        conn.set_events(selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out or connecting else 0))
        if not connecting:
            conn.flush()
        return conn

    def new_mechanism(self, conn: StreamEngine) -> Mechanism:
        """The security mechanism of a new connection: the socket holds the keys and the
        policy on client keys; the connection answers what to declare and accept."""
        declare, accept = conn.declare_metadata, conn.accept_metadata
        if self.curve is None:
            return NullMechanism(conn.initiator, declare, accept)
        from .curve import CurveClient, CurveServer
        keys = self._mechanism_keys
        assert keys is not None  # prepared from ``curve`` (``_prepare_curve``)
        if self.curve.is_server:
            allowed = keys["authorized"]
            authorize = (lambda key: True) if allowed is None else (lambda key: self._authorize(conn, key, allowed))
            return CurveServer(keys["public"], keys["secret"], authorize, declare, accept)
        return CurveClient(keys["public"], keys["secret"], keys["server"], declare, accept)

    def _authorize(self, conn: Connection, key: bytes, allowed: frozenset[bytes]) -> bool:
        if key in allowed:
            return True
        from zmq.utils import z85
        text = z85.encode(key).decode()
        entry = (conn.address.rsplit(":", 1)[0], text)
        if entry not in self._refused_logged and len(self._refused_logged) < 10_000:
            self._refused_logged.add(entry)
            log.warning("CURVE: refused client key %s from %s (not in curveAuthorizedKeys)", text, conn.address)
        return False

    # -- what a connection asks of its owner (``owner.ConnectionOwner``) ------------------

    def deliver(self, conn: Connection, messages: Sequence[EngineMessage], nbytes: Optional[int]) -> bool:
        if self.socket_type in (b"SCATTER", b"PUSH"):
            return False  # a send-only socket ignores messages (a well-behaved peer sends none)
        with self.lock:
            paused = self._fq.deliver(conn.peer, messages, nbytes)
            if self.waiters:
                self.cond.notify()
        return paused

    def take_outgoing(self, peer: Peer) -> Optional[list[EngineMessage]]:
        with self.lock:
            source = self.orphans if self.orphans else peer.outbox
            if not source:
                if self.waiters:  # a close() waiting for the queues to drain
                    self.cond.notify_all()
                return None
            batch: list[EngineMessage] = []
            size = 0
            take = source.popleft
            while source and size < _WRITE_BATCH_BYTES:
                # a run of messages at a time, their sizes summed after (one Python step per
                # run, not per message); a multipart message is sized frame by frame
                run = [take() for _ in range(min(len(source), _REFILL_RUN))]
                batch += run
                size += sum(map(len, run)) if tuple not in set(map(type, run)) else \
                    sum(len(m) if type(m) is not tuple else sum(map(len, m)) for m in run)
            if self.waiters:
                self.cond.notify_all()
        return batch

    def written(self) -> None:
        if self.waiters:  # a close() waiting for the queues to drain
            with self.lock:
                self.cond.notify_all()

    def peer_ready(self, conn: Connection) -> None:
        with self.lock:
            self._lb.add(conn.peer)
            self.cond.notify_all()
        self.emit(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, conn.endpoint)

    def command(self, conn: Connection, body: bytes) -> None:
        self._on_command(conn, body)

    def _on_command(self, conn: Connection, body: bytes) -> None:
        """This socket takes no command itself (no SUBSCRIBE on these types): the
        connection answers them. (A seam where a socket type would take its own.)"""
        assert isinstance(conn, StreamEngine)
        conn.on_command(body)

    def discarded(self, count: int) -> None:
        self.discarded_multipart += count

    def expired(self, conn: Connection, exc: ZmtpError) -> None:
        self.heartbeat_timeouts += 1
        self.failed(conn, exc)

    def abort(self, conn: Connection, *, quiet: bool = False) -> None:
        self._close(conn, requeue=True, quiet=quiet)

    # -- failing and closing -----------------------------------------------------------

    def lost(self, conn: Connection, code: int) -> None:
        """The peer closed the connection (``code`` 0) or it broke (an errno)."""
        if conn.stage == READY and code:
            self.broken_connections += 1
        if conn.stage in (GREETING, HANDSHAKE):
            # a peer that closes during the handshake refused it (socket type, credentials)
            # or is not a ZeroMQ peer; a connector that spoke first tries the other type next
            connector = conn.connector
            if connector is not None and conn.sent_metadata and self.curve is not None:
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
        answers = list(dict.fromkeys(self.peer_types.values()))
        return answers[(answers.index(declared) + 1) % len(answers)] if declared in answers else self.socket_type

    def failed(self, conn: Connection, exc: ZmtpError) -> None:
        """``conn`` broke the protocol or was refused (``StreamEngine.fail`` sent its ERROR)."""
        if conn.stage == CLOSED:
            return
        if isinstance(exc, Renegotiate):
            log.debug("%s: %s: %s", self.label, conn.endpoint, exc)
            conn.retry_now = True
            self._close(conn, requeue=True)
            return
        if conn.stage != READY:
            conn.refused = True
            if conn.connector is not None:
                conn.connector.failed_handshakes += 1
            self.emit(exc.event, exc.value, conn.endpoint)
        else:
            if getattr(exc, "missing", 0) and not getattr(exc, "replay", True):
                # a CURVE stream skipped messages (curve_message.CurveSequenceError): tampering or loss
                self.sequence_gaps += 1
            self.broken_connections += 1
            log.warning("%s: closing the connection of %s: %s", self.label, conn.address, exc)
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
        self._connections.discard(conn)
        peer = conn.peer
        keep = conn.connector is not None and not self.immediate and not conn.refused
        with self.lock:
            peer.conn = None
            unwritten = ([m for m, end in zip(conn.inflight, conn.inflight_ends) if end > conn.written]
                         if requeue else [])
            if confirmed is not None:
                # written to the kernel, never acknowledged by the peer's: send them again
                base = conn.batch_base
                unconfirmed = [m for end, m in conn.unacked if end > confirmed]
                unconfirmed += [m for m, end in zip(conn.inflight, conn.inflight_ends)
                                if end <= conn.written and base + end > confirmed]
                self.resent += len(unconfirmed)
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
                    self.orphans.extendleft(reversed(list(peer.outbox)))
                    self.orphans.extendleft(reversed(unwritten))
                    peer.outbox.clear()
            self.cond.notify_all()
        if was_ready and not quiet:
            if held:
                self.lost_peers += 1
            self.emit(zmq.EVENT_DISCONNECTED, 0, conn.endpoint)
        connector = conn.connector
        if connector is not None and connector.conn is conn:
            connector.conn = None
            if conn.retry_now and not connector.renegotiated:
                connector.renegotiated = True  # once at once; again only after a handshake
                self._poller.at(0.0, lambda: self._connect(connector))
            else:
                self._retry(connector)
        if self.orphans:
            self._serve_orphans()

    def _serve_orphans(self) -> None:
        for conn in list(self._connections):
            if conn.stage == READY and not conn.out:
                conn.flush()
                if not self.orphans:
                    return

    def _close_all(self) -> None:
        for conn in list(self._connections):
            self._close(conn, requeue=True, quiet=True)
        if self._selector.get_map() is None:  # already closed
            return
        for sock, actual, address in self._listeners:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
            if address.transport == "ipc" and not actual.startswith("ipc://@"):
                try:
                    os.unlink(actual[len("ipc://"):])
                except OSError:
                    pass
        self._listeners.clear()
        for name in self._inproc_names:
            transport.unregister_inproc(name)
        self._inproc_names.clear()
        self._poller.close()

    # -- events ------------------------------------------------------------------------

    def emit(self, event: int, value: int, address: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, value, address)
            except Exception:
                log.exception("%s: event callback failed", self.label)
