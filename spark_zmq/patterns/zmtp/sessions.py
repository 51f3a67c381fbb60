"""The connections of one ZMTP engine (libzmq's sessions): accepting, connecting and
reconnecting, handshake deadlines, and what happens to a peer's messages when its
connection fails or closes (re-routed, never forgotten: see ``engine``).

``_Sessions`` is a part of ``Engine``, split off by concern: its methods run on the I/O
thread and use the engine's state; the protocol on each connection is ``stream``'s.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import socket
from typing import TYPE_CHECKING, Optional

import zmq

from . import transport
from .codec import COMMAND, ZmtpError
from .connection import CLOSED, GREETING, HANDSHAKE, READY, Connection, Connector
from .stream import _Renegotiate

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.zmtp.engine")

_ACCEPT_RETRY_S = 0.2
#: the longest wait between tries at an endpoint whose handshakes keep failing
HANDSHAKE_BACKOFF_MAX_S = 5.0


if TYPE_CHECKING:
    from .parts import EngineParts
else:
    EngineParts = object


class _Sessions(EngineParts):
    """The connection management of ``Engine`` (see the module's docstring)."""

    # -- clocks ------------------------------------------------------------------------

    def _due(self, at: float) -> None:
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
                    self._fail(conn, ZmtpError("the peer did not complete the handshake in time",
                                               zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.ETIMEDOUT))
                else:
                    delay = min(delay, conn.deadline - now)
            elif conn.stage == READY and self.heartbeat.enabled:
                delay = min(delay, self._heartbeat(conn, now))
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
            self.call_soon(lambda: self._adopt(sock, address, None))

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
            self._set_events(conn, selectors.EVENT_WRITE)

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
               connecting: bool = False, endpoint: Optional[str] = None) -> Optional[Connection]:
        if self.closing:
            sock.close()
            return None
        if connector is None or connector.address.transport == "inproc":
            self._configure(sock)
        conn = Connection(self, sock, address, connector, endpoint or address)
        if connector is not None:
            connector.conn = conn
        self._connections.add(conn)
        self._due(conn.deadline)
        conn.connecting = connecting
        if not connecting:
            self._start_greeting(conn)
        self._set_events(conn, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out or connecting else 0))
        if not connecting:
            self._flush(conn)
        return conn

    # -- failing and closing -----------------------------------------------------------

    def _lost(self, conn: Connection, code: int) -> None:
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
            self._emit(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, code, conn.endpoint)
        self._close(conn, requeue=True)

    def _other_type(self, declared: bytes) -> bytes:
        answers = list(dict.fromkeys(self.peer_types.values()))
        return answers[(answers.index(declared) + 1) % len(answers)] if declared in answers else self.socket_type

    def _fail(self, conn: Connection, exc: ZmtpError) -> None:
        if conn.stage == CLOSED:
            return
        if isinstance(exc, _Renegotiate):
            log.debug("%s: %s: %s", self.label, conn.endpoint, exc)
            conn.retry_now = True
            self._close(conn, requeue=True)
            return
        if exc.reply is not None:
            conn.queue_frame(COMMAND, exc.reply)
            try:
                self._write(conn)
            except OSError:
                pass
        if conn.stage != READY:
            conn.refused = True
            if conn.connector is not None:
                conn.connector.failed_handshakes += 1
            self._emit(exc.event, exc.value, conn.endpoint)
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
        conn.stage = CLOSED
        try:
            if conn.events:
                self._selector.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.events = 0
        try:
            conn.sock.close()
        except OSError:
            pass
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
            self._emit(zmq.EVENT_DISCONNECTED, 0, conn.endpoint)
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
                self._flush(conn)
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

    def _emit(self, event: int, value: int, address: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, value, address)
            except Exception:
                log.exception("%s: event callback failed", self.label)
