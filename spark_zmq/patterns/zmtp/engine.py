"""The I/O thread of one ZMTP socket: listeners, connectors, handshakes and per-peer queues.

Modelled on libzmq's own split (and JeroMQ's, NetMQ's, go-zeromq's): the application's
calls only touch queues under a lock; one I/O thread per socket owns every OS socket,
runs a ``selectors`` loop, speaks ZMTP 3.1 (greeting, mechanism handshake, frames,
PING/PONG) and moves whole messages between the wire and the queues.

* Each connection is a *peer* with an inbound queue (``inbox``, GATHER) or an outbound
  queue (``outbox``, SCATTER), limited to ``hwm`` messages (0 = no limit).
* A peer counts only once its handshake completed: until then nothing is queued to it
  (what libzmq calls ZMQ_IMMEDIATE), so a peer that is refused, or never answers, is never
  a delivery; a sender blocks or times out as with no peer at all.
* An inbound queue full to its ``hwm`` stops reading that connection, so TCP flow control
  holds the sender back (backpressure, as libzmq does). Reading resumes below half.
* What a broken connection had not written yet (its outbox, and the part of the write in
  progress that did not reach the kernel whole) goes back to the socket's ``orphans``,
  which the next connection to write takes first: closing a connection never forgets a
  message the socket still holds. (49/SCATTERGATHER says a SCATTER discards the queue of
  a peer that disconnects; this socket re-routes it instead, because the connector
  promises that it loses nothing it holds.)
* ZMTP has no acknowledgements, but TCP does: over ``tcp://`` a connection remembers what
  it wrote until the peer's kernel acknowledged it (``TCP_INFO``'s ``tcpi_bytes_acked``,
  read once per write batch). When the connection breaks, the messages the peer's host
  never acknowledged are re-routed like the queue (and counted in ``resent``); what the
  peer's host acknowledged but its application had not read yet (its kernel receive
  buffer, its own queue) is beyond reach. ``unconfirmed()`` says what is still
  unacknowledged, so a sender can wait for it before it reports success.
* What a GATHER received from a peer stays deliverable after the peer left (the RFC says
  discard it; the connector never drops data it received).

The socket-type rule of ZMTP (a peer's ``Socket-Type`` must be one this type talks to) is
``Engine.peer_types``: our type as the key's answer, e.g. a GATHER answers a SCATTER as
GATHER and a PUSH as PULL. See ``null.py`` for who declares first.
"""

from __future__ import annotations

import collections
import errno
import heapq
import itertools
import logging
import os
import selectors
import socket
import struct
import threading
import time
from typing import Callable, Iterable, Optional

import zmq

from ..heartbeat import DEFAULT_HEARTBEAT, Heartbeat
from . import transport
from .codec import (
    COMMAND, HANDSHAKE_FRAME_LIMIT, HARD_FRAME_LIMIT, MORE, FrameTooLarge, ZmtpError, encode_messages, frame_header,
    parse_frames,
)
from .null import NullMechanism
from .policies import FairQueue, RoundRobin
from .wire import GREETING_SIZE, command, error_from_command, greeting, parse_command, parse_greeting, socket_type_of

__all__ = ["Engine", "Peer", "HANDSHAKE_FRAME_LIMIT"]

log = logging.getLogger(__name__)

_NATIVE_U64 = struct.Struct("=Q")  # kernel structures are in the host's byte order
_READ_BYTES = 256 * 1024
_WRITE_BATCH_BYTES = 256 * 1024
#: a peer's PINGs are answered while less than this is waiting to be written; beyond it a
#: PING flood from a peer that does not read would grow the queue without bound
_MAX_PENDING_REPLY_BYTES = 64 * 1024
_IOV_MAX = 512
#: ``struct tcp_info`` (linux/tcp.h): ``tcpi_bytes_acked`` (u64) sits at this offset, after
#: 8 bytes of u8 fields, 24 u32 fields and two u64 pacing rates; Linux 4.1 and later
_TCP_INFO_BYTES_ACKED = 120
_TCP_INFO_SIZE = 128
_HAS_TCP_INFO = hasattr(socket, "TCP_INFO")
_ACCEPT_RETRY_S = 0.2
#: a caller waiting on the engine looks at its deadline and at ``check`` this often
_WAIT_SLICE_S = 0.1
#: a close waiting for TCP acknowledgements looks this often (they arrive without a wake-up)
_ACK_POLL_S = 0.005
#: how many heartbeat timeouts a peer that answers nothing may be kept for its host's TCP
#: acknowledgements of our data alone
_ACK_LIVENESS_TIMEOUTS = 3
#: PING flood and malformed heartbeat warnings: at most this many per connection
_HEARTBEAT_WARNINGS = 1

_GREETING, _HANDSHAKE, _READY, _CLOSED = range(4)
_ids = itertools.count(1)


class _Renegotiate(ZmtpError):
    """The peer told us its socket type after we announced ours (we had to speak first) and
    wants the other answer (a PUSH peer needs a PULL, not a GATHER): not a refusal. The
    connection is closed and opened again at once, announcing what the peer accepts, and
    the endpoint keeps its queue."""


class Peer:
    """One connection's queues and state (shared by the I/O thread and the app's calls)."""

    __slots__ = ("id", "inbox", "inbox_bytes", "outbox", "paused", "resume_asked", "conn")

    def __init__(self) -> None:
        self.id = next(_ids)
        self.inbox: collections.deque = collections.deque()
        self.inbox_bytes = 0
        self.outbox: collections.deque = collections.deque()
        self.paused = False
        self.resume_asked = False
        self.conn: Optional["_Connection"] = None


class _Connector:
    """A connect endpoint: (re)connects after ``reconnect_ivl`` whenever it has no connection.

    ``declare`` is the socket type this side announces when it must speak first (NULL as
    the connecting side, or as a CURVE client): this socket's own type at first; if a peer
    closed a handshake on it, or told us its type, the next attempt uses what that peer
    accepts (a PUSH peer needs a PULL, not a GATHER)."""

    def __init__(self, endpoint: str, address: transport.Address, declare: bytes) -> None:
        self.endpoint = endpoint
        self.address = address
        self.declare = declare
        self.conn: Optional["_Connection"] = None
        #: the queue of this endpoint, kept whether or not it is connected (49/SCATTERGATHER)
        self.peer = Peer()
        #: a renegotiation of the socket type was retried at once since the last handshake:
        #: the next waits the reconnect interval (a peer whose type depends on ours would
        #: otherwise make us reconnect in a tight loop)
        self.renegotiated = False
        #: the inproc connect failed for lack of file descriptors (logged once until it works)
        self.inproc_failing = False


class _Connection:
    """One OS socket speaking ZMTP with one peer."""

    def __init__(self, engine: "Engine", sock: socket.socket, address: str, connector: Optional[_Connector],
                 endpoint: str) -> None:
        self.sock = sock
        self.address = address
        #: what events name, as libzmq's monitor does: the bound address (for accepted
        #: connections) or the connect endpoint, so a log line per endpoint stays one line
        self.endpoint = endpoint
        self.connector = connector
        self.initiator = connector is not None
        self.peer = connector.peer if connector is not None else Peer()
        self.stage = _GREETING
        self.connecting = False
        self.mechanism = engine.new_mechanism(self)
        self.pending: list[bytes] = []
        self.pending_len = 0
        self.need = GREETING_SIZE
        self.out: collections.deque = collections.deque()
        self.out_bytes = 0
        # the messages of the write in progress, with the offset at which each one ends
        self.inflight: list[bytes] = []
        self.inflight_ends: list[int] = []
        self.written = 0
        #: tcp only: bytes written to the kernel on this connection, where the current write
        #: batch started, the peer kernel's acknowledgement count at the start (1 for the
        #: SYN of a connecting side), and the messages written whole but not yet
        #: acknowledged as (end offset, message), oldest first
        self.track_acks = _HAS_TCP_INFO and sock.family in (socket.AF_INET, socket.AF_INET6)
        self.sent_total = 0
        self.batch_base = 0
        self.acked_base: Optional[int] = None
        self.unacked: collections.deque = collections.deque()
        #: the sending side was shut down (``finish``): the peer acknowledges a FIN at once
        self.finished = False
        self.in_multipart = False
        self.deadline = time.monotonic() + engine.handshake_ivl_s
        self.events = 0
        self.sent_metadata = False
        #: the handshake failed: what this peer's queue holds goes to other peers
        self.refused = False
        self.retry_now = False
        self.declared: Optional[bytes] = None
        #: heartbeats (monotonic seconds): when the next PING goes out, when a PING is
        #: unanswered for too long (``None``: nothing awaited), when the peer's PING TTL
        #: runs out without traffic from it (``None``: no TTL asked)
        self.next_ping = 0.0
        self.ping_deadline: Optional[float] = None
        self.ttl_deadline: Optional[float] = None
        self.acked_at_ping: Optional[int] = None
        #: when the peer last sent anything (monotonic seconds)
        self.heard = time.monotonic()
        self.heartbeat_warnings = 0
        # last: the application's threads may look at ``peer.conn`` (and its ``out``) at once
        self.peer.conn = self

    # -- output -------------------------------------------------------------------------

    def queue_frame(self, flags: int, body: bytes) -> None:
        header = frame_header(len(body), flags)
        self.out.append(header)
        self.out.append(body)
        self.out_bytes += len(header) + len(body)

    def queue_command(self, body: bytes) -> None:
        if self.stage == _READY:
            flags, payload = self.mechanism.encode_command(body)
            self.queue_frame(flags, payload)
        else:
            self.queue_frame(COMMAND, body)

    # -- acknowledgements (tcp) ------------------------------------------------------------

    def _kernel_acked(self) -> Optional[int]:
        """Bytes of ours the peer's TCP acknowledged (it also answers after a reset)."""
        try:
            info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
        except OSError:
            return None
        if len(info) < _TCP_INFO_BYTES_ACKED + 8:
            return None
        return _NATIVE_U64.unpack_from(info, _TCP_INFO_BYTES_ACKED)[0]

    def start_ack_tracking(self) -> None:
        """Before the first byte is written: what the counter says now counts as zero."""
        if self.track_acks:
            self.acked_base = self._kernel_acked()
            if self.acked_base is None:
                self.track_acks = False

    def confirmed(self) -> Optional[int]:
        """Offset up to which the peer's TCP acknowledged what we wrote (``None``: unknown)."""
        if not self.track_acks or self.acked_base is None:
            return None
        acked = self._kernel_acked()
        return None if acked is None else acked - self.acked_base

    def trim_acked(self, acked: Optional[int] = None) -> None:
        """Forget the messages the peer's TCP acknowledged (up to ``acked``, a reading of
        ``confirmed()`` already taken, or a new one)."""
        unacked = self.unacked
        if not unacked:
            return
        if acked is None:
            acked = self.confirmed()
        if acked is None:
            unacked.clear()
            return
        while unacked and unacked[0][0] <= acked:
            unacked.popleft()


class Engine:
    """One ZMTP socket's I/O thread and queues. Socket classes (``Scatter``, ``Gather``)
    hold one and call ``send_round_robin``, ``receive``, ``wait_readable``, ``drain`` and
    ``release`` (each takes the lock itself); everything else is the engine's own.
    """

    def __init__(
        self,
        *,
        socket_type: bytes,
        peer_types: dict[bytes, bytes],
        label: str,
        hwm: int,
        max_message_bytes: Optional[int],
        reconnect_ivl_s: float = 0.1,
        handshake_ivl_s: float = 30.0,
        curve=None,
        heartbeat: Heartbeat = DEFAULT_HEARTBEAT,
        rcvbuf: Optional[int] = None,
        sndbuf: Optional[int] = None,
        immediate: bool = False,
        on_event: Optional[Callable[[int, int, str], None]] = None,
    ) -> None:
        self.socket_type = socket_type
        self.peer_types = peer_types
        self.label = label
        self.hwm = hwm
        self.max_message_bytes = max_message_bytes
        self.reconnect_ivl_s = reconnect_ivl_s
        self.handshake_ivl_s = handshake_ivl_s
        self.curve = curve
        self.heartbeat = heartbeat
        self._ping = command(b"PING", heartbeat.ttl_field)
        #: acknowledged bytes past a PING that prove a live consumer: more than our own
        #: PINGs can account for within one timeout
        self._ack_liveness_bytes = 1024 + (int(heartbeat.timeout / heartbeat.interval) + 2) * 64 \
            if heartbeat.enabled else 0
        #: connections closed because the peer was silent past the heartbeat timeout or TTL
        self.heartbeat_timeouts = 0
        #: connections closed because a CURVE stream skipped a message (deleted in transit)
        self.sequence_gaps = 0
        self.rcvbuf, self.sndbuf = rcvbuf, sndbuf
        self.immediate = immediate
        self.on_event = on_event
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        #: the peers a message may be queued to, round-robin: those with a completed
        #: handshake and (unless ``immediate``) connect endpoints not refused by their peer
        self._lb = RoundRobin()
        #: peers with messages in their inbox, in fair-queue order
        self._fq = FairQueue(hwm)
        self.orphans: collections.deque = collections.deque()
        self.discarded_multipart = 0
        #: messages sent again because a peer's TCP never acknowledged them before it left
        self.resent = 0
        #: peers whose connection broke after their handshake while they held messages of
        #: ours (queued, being written, or written and not acknowledged by their TCP)
        self.lost_peers = 0
        self.closing = False
        self.waiters = 0
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._woken = False
        self._accept_failing = False
        self._commands: collections.deque = collections.deque()
        self._timers: list = []
        self._listeners: list[tuple[socket.socket, str, transport.Address]] = []
        self._inproc_names: list[str] = []
        self._connections: set[_Connection] = set()
        #: no connection's handshake or heartbeat clock is due before this (monotonic
        #: seconds), so the loop walks the connections only when one may be: set by each
        #: walk, lowered by whatever sets an earlier clock (``_due``)
        self._connections_due = 0.0
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        self._thread = threading.Thread(target=self._run, name=f"zmtp-{label}", daemon=True)
        self._stopped = threading.Event()
        self._mechanism_keys = self._prepare_curve(curve)

    # -- set-up (application thread, before start) ------------------------------------------

    @staticmethod
    def _prepare_curve(curve):
        if curve is None:
            return None
        from zmq.utils import z85
        keys = {"public": z85.decode(curve.public_key), "secret": z85.decode(curve.secret_key)}
        if curve.is_server:
            authorized = curve.authorized
            keys["authorized"] = None if isinstance(authorized, str) else frozenset(z85.decode(k) for k in authorized)
        else:
            keys["server"] = z85.decode(curve.server_key)
        return keys

    def bind(self, endpoint: str) -> str:
        """Listen on ``endpoint`` now (errors surface in the caller); returns the real address."""
        address = transport.parse_address(endpoint, bind=True)
        if address.transport == "inproc":
            transport.register_inproc(address.host, self._accept_inproc)
            self._inproc_names.append(address.host)
            return f"inproc://{address.host}"
        sock, actual = transport.listen(address)
        self._listeners.append((sock, actual, address))
        self._selector.register(sock, selectors.EVENT_READ, lambda mask, s=sock, a=actual: self._on_accept(s, a))
        return actual

    def connect(self, endpoint: str) -> None:
        address = transport.parse_address(endpoint, bind=False)
        connector = _Connector(endpoint, address, self.socket_type)
        if not self.immediate:
            self._lb.add(connector.peer)
        self._commands.append(lambda: self._connect(connector))

    def start(self) -> None:
        self._thread.start()

    # -- application side -----------------------------------------------------------------

    def wake(self) -> None:
        """Make the I/O thread run its commands (lock held by the caller)."""
        if not self._woken:
            self._woken = True
            try:
                self._wake_w.send(b"\0")
            except (BlockingIOError, OSError):
                pass

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the I/O thread (lock held by the caller)."""
        self._commands.append(fn)
        self.wake()

    @property
    def ready_peers(self) -> list[Peer]:
        """The peers a message may be queued to now, in round-robin order (lock held)."""
        return self._lb.peers

    def send_round_robin(self, messages: Iterable, timeout: Optional[float],
                         check: Callable[[], None]) -> tuple[int, bool]:
        """Queue ``messages`` in order, each to the next ready peer whose queue has room,
        waiting while none has: at most ``timeout`` seconds for each message (``None``: no
        limit). Returns ``(messages queued, whether a wait timed out)``: on a timeout, those
        before the message that timed out were queued. ``check()`` runs before each message
        and around each wait and may raise (the socket was closed); what was queued is
        written all the same."""
        lb, hwm = self._lb, self.hwm
        sent = 0
        kick: dict[int, Peer] = {}
        with self.lock:
            try:
                for message in messages:
                    deadline = None
                    while True:
                        check()
                        peer = lb.next_with_room(hwm)
                        if peer is not None:
                            peer.outbox.append(message)
                            kick[peer.id] = peer
                            break
                        for waiting in kick.values():
                            self._kick(waiting)
                        kick.clear()
                        if deadline is None and timeout is not None:
                            deadline = time.monotonic() + timeout
                        if not self._wait_until(deadline, check):
                            return sent, True
                    sent += 1
            finally:
                for waiting in kick.values():
                    self._kick(waiting)
        return sent, False

    def receive(self, max_messages: int, max_bytes: Optional[int], deadline: Optional[float],
                check: Callable[[], None]) -> list[bytes]:
        """Up to ``max_messages`` received messages (and about ``max_bytes``), fair-queued
        over the peers, waiting until ``deadline`` (monotonic seconds; ``None``: no limit)
        for the first; ``[]`` when none came in time. ``check`` as in ``send_round_robin``."""
        with self.lock:
            while True:
                check()
                values = self._fq.take(max_messages, max_bytes, self._ask_resume)
                if values:
                    return values
                if not self._wait_until(deadline, check):
                    return []

    def wait_readable(self, deadline: Optional[float], check: Callable[[], None]) -> bool:
        """Whether a received message waits, waiting until ``deadline`` for one."""
        with self.lock:
            while not self._fq:
                if not self._wait_until(deadline, check):
                    return False
            return True

    def drain(self, deadline: Optional[float], confirm: bool) -> None:
        """Wait until every message this socket holds reached the kernel and, with
        ``confirm``, the peers' TCP acknowledged it; or until ``deadline`` (``None``: no
        limit, but then not while no peer is there to take them: that would hang)."""
        with self.lock:
            while True:
                holding = self.pending_outgoing() or self.out_bytes_pending()
                unacknowledged = confirm and not holding and self.unconfirmed(finish=True)
                if not holding and not unacknowledged:
                    return
                if not self._lb.peers and deadline is None:
                    return
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                # acknowledgements arrive without a wake-up: look again soon
                slice_s = _ACK_POLL_S if unacknowledged else _WAIT_SLICE_S
                self.wait(slice_s if remaining is None else min(slice_s, remaining))

    def release(self, confirm: bool) -> tuple[int, int]:
        """Wake every caller waiting on the engine (the socket is closing: their ``check``
        raises) and count what is left: ``(messages never written, messages written that
        the peers' TCP has not acknowledged)``, the second only with ``confirm``."""
        with self.lock:
            unsent = self.pending_outgoing()
            unconfirmed = self.unconfirmed() if confirm else 0
            self.cond.notify_all()
        return unsent, unconfirmed

    def _wait_until(self, deadline: Optional[float], check: Callable[[], None]) -> bool:
        """Wait (lock held) a slice for the I/O thread to change something, unless
        ``deadline`` passed (``False``); ``check()`` before and after."""
        check()
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            return False
        self.wait(_WAIT_SLICE_S if deadline is None else min(_WAIT_SLICE_S, deadline - now))
        check()
        return True

    def _kick(self, peer: Peer) -> None:
        """Ask the I/O thread to write ``peer``'s outbox (lock held)."""
        conn = peer.conn
        if conn is not None and not conn.out:
            self.call_soon(lambda: self._flush(conn))

    def _ask_resume(self, peer: Peer) -> None:
        """``peer``'s inbox was drained below half its limit: read its connection again."""
        conn = peer.conn
        if conn is not None:
            self.call_soon(lambda: self._resume(conn))

    def pending_outgoing(self) -> int:
        """Messages this socket still holds for sending (lock held)."""
        total = len(self.orphans)
        peers = {peer.id: peer for peer in self._lb.peers}
        for conn in list(self._connections):
            peers[conn.peer.id] = conn.peer
            total += len(conn.inflight)
        return total + sum(len(peer.outbox) for peer in peers.values())

    def wait(self, timeout_s: float) -> None:
        """Wait (lock held) up to ``timeout_s`` for the I/O thread to change something: a
        message received, room in a queue, a handshake, a flush."""
        self.waiters += 1
        try:
            self.cond.wait(timeout_s)
        finally:
            self.waiters -= 1

    def unconfirmed(self, finish: bool = False) -> int:
        """Messages written to the kernel that the peers' TCP has not acknowledged yet (lock
        held); asks the I/O thread to look again, so a waiter sees the count go down. With
        ``finish`` (the socket is closing and holds nothing else), connections with
        unacknowledged messages also shut their sending side down: a peer acknowledges a
        FIN at once, where the last data could wait for its delayed ACK (40 ms on Linux).
        (A PING would ask as fast, but a peer that closes right after reading leaves the
        PING unread, and its reset then carries no acknowledgement.)"""
        count = 0
        for conn in list(self._connections):
            if conn.stage == _READY and conn.track_acks:
                count += len(conn.unacked)
        if count:
            self.call_soon(lambda: self._trim_all(finish))
        return count

    def _trim_all(self, finish: bool = False) -> None:
        changed = False
        for conn in list(self._connections):
            if conn.stage == _READY and conn.unacked:
                before = len(conn.unacked)
                conn.trim_acked()
                changed = changed or len(conn.unacked) != before
                if finish and conn.unacked and not conn.out and not conn.finished:
                    conn.finished = True
                    try:
                        conn.sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
        if changed:
            with self.lock:
                self.cond.notify_all()

    def out_bytes_pending(self) -> int:
        """Bytes encoded but not yet written to the kernel, over all connections."""
        return sum(conn.out_bytes for conn in list(self._connections) if conn.stage == _READY)

    def stop(self) -> None:
        """Stop the I/O thread and close every OS socket (no lock held)."""
        with self.lock:
            self.closing = True
            self.cond.notify_all()
            self.wake()
        if self._thread.ident is None:  # never started
            self._close_all()
        elif threading.current_thread() is not self._thread:
            self._stopped.wait(10)

    # -- the I/O thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self.lock:
                    if self.closing:
                        break
                    commands = list(self._commands)
                    self._commands.clear()
                for fn in commands:
                    self._guard(fn)
                timeout = self._run_timers()
                for key, mask in self._selector.select(timeout):
                    self._guard(lambda: key.data(mask))
        except BaseException:  # never expected: every callback is guarded
            log.exception("%s: the ZMTP I/O thread failed", self.label)
        finally:
            self._close_all()
            self._stopped.set()

    def _guard(self, fn: Callable[[], None]) -> None:
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

    def _at(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (time.monotonic() + delay, next(_ids), fn))

    def _run_timers(self) -> float:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            self._guard(fn)
        if now < self._connections_due:
            delay = self._connections_due - now
        else:
            delay = self._walk_connections(now)
            self._connections_due = now + delay
        if self._timers:
            delay = min(delay, max(0.0, self._timers[0][0] - time.monotonic()))
        return delay

    def _due(self, at: float) -> None:
        """A connection's clock was set to ``at``: the next walk comes no later."""
        if at < self._connections_due:
            self._connections_due = at

    def _walk_connections(self, now: float) -> float:
        """Fail handshakes past their deadline and run heartbeats; returns the time to the
        next connection event (at most 1 s)."""
        delay = 1.0
        for conn in list(self._connections):
            if conn.stage in (_GREETING, _HANDSHAKE):
                if now >= conn.deadline:
                    self._fail(conn, ZmtpError("the peer did not complete the handshake in time",
                                               zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, errno.ETIMEDOUT))
                else:
                    delay = min(delay, conn.deadline - now)
            elif conn.stage == _READY and self.heartbeat.enabled:
                delay = min(delay, self._heartbeat(conn, now))
        return delay

    def _heartbeat(self, conn: _Connection, now: float) -> float:
        """Send the PING that is due, drop a connection whose peer stayed silent past the
        timeout (after our PING) or past its own PING's TTL; returns the time to the next
        heartbeat event of ``conn``."""
        heartbeat = self.heartbeat
        if conn.peer.paused:
            # we stopped reading (backpressure): the peer's answers wait unread in the
            # kernel, so its silence means nothing; judge it again once we read
            if conn.ping_deadline is not None:
                conn.ping_deadline = now + heartbeat.timeout
            if conn.ttl_deadline is not None:
                conn.ttl_deadline = max(conn.ttl_deadline, now + heartbeat.timeout)
        else:
            expired = None
            if conn.ping_deadline is not None and now >= conn.ping_deadline:
                acked = conn.confirmed() if conn.track_acks else None
                if acked is not None and conn.acked_at_ping is not None \
                        and acked - conn.acked_at_ping > self._ack_liveness_bytes \
                        and now - conn.heard < _ACK_LIVENESS_TIMEOUTS * heartbeat.timeout:
                    # the peer's host took more of our data since the PING (more than our
                    # PINGs alone): a consumer busy reading a long queue, not a dead one;
                    # for a while only: a host that acknowledges but whose application never
                    # answers (stopped, hung, a userspace middlebox) is dead all the same
                    conn.ping_deadline = None
                else:
                    expired = (f"no traffic from the peer for {heartbeat.timeout:g} s after a heartbeat PING "
                               "(heartbeatTimeout)")
            elif conn.ttl_deadline is not None and now >= conn.ttl_deadline:
                expired = "no traffic from the peer within the TTL of its own heartbeat PING"
            if expired is not None:
                self.heartbeat_timeouts += 1
                self._fail(conn, ZmtpError(expired, zmq.EVENT_DISCONNECTED, errno.ETIMEDOUT))
                return 1.0
        if now >= conn.next_ping:
            conn.next_ping = now + heartbeat.interval
            if conn.ping_deadline is None:
                conn.ping_deadline = now + heartbeat.timeout
                conn.acked_at_ping = conn.confirmed() if conn.track_acks else None
            if conn.out_bytes < _MAX_PENDING_REPLY_BYTES and not conn.finished:
                # (a peer that does not read what we queued gets no more PINGs, nor one whose
                # sending side we shut down at close; silence still counts from the first)
                conn.queue_command(self._ping)
                self._flush(conn)
                if conn.stage == _CLOSED:
                    return 1.0
        nearest = conn.next_ping
        for deadline in (conn.ping_deadline, conn.ttl_deadline):
            if deadline is not None:
                nearest = min(nearest, deadline)
        return max(0.0, nearest - now)

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
        for sock in (self._wake_r, self._wake_w):
            try:
                sock.close()
            except OSError:
                pass
        try:
            self._selector.close()
        except (OSError, RuntimeError):
            pass

    # -- connections --------------------------------------------------------------------------

    def _configure(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as libzmq does
        self.heartbeat.configure_tcp(sock)
        if self.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        if self.sndbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)

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
                self._at(_ACCEPT_RETRY_S, lambda: self._selector.register(
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

    def _connect(self, connector: _Connector) -> None:
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

    def _retry(self, connector: _Connector) -> None:
        if not self.closing:
            self._at(self.reconnect_ivl_s, lambda: self._connect(connector))

    def _adopt(self, sock: socket.socket, address: str, connector: Optional[_Connector],
               connecting: bool = False, endpoint: Optional[str] = None) -> Optional[_Connection]:
        if self.closing:
            sock.close()
            return None
        if connector is None or connector.address.transport == "inproc":
            self._configure(sock)
        conn = _Connection(self, sock, address, connector, endpoint or address)
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

    def _start_greeting(self, conn: _Connection) -> None:
        conn.start_ack_tracking()
        data = greeting(conn.mechanism.name, conn.mechanism.as_server)
        conn.out.append(data)
        conn.out_bytes += len(data)
        self._emit(zmq.EVENT_CONNECTED if conn.initiator else zmq.EVENT_ACCEPTED, 0, conn.endpoint)

    def _set_events(self, conn: _Connection, events: int) -> None:
        if conn.stage == _CLOSED or events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, lambda mask, c=conn: self._on_io(c, mask))
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, lambda mask, c=conn: self._on_io(c, mask))
        conn.events = events

    def _read_events(self, conn: _Connection) -> int:
        return 0 if conn.peer.paused else selectors.EVENT_READ

    def _on_io(self, conn: _Connection, mask: int) -> None:
        if conn.stage == _CLOSED:
            return
        if conn.connecting and mask & selectors.EVENT_WRITE:
            code = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self._close(conn, requeue=True, quiet=True)
                return
            conn.connecting = False
            self._start_greeting(conn)
        try:
            if mask & selectors.EVENT_READ:
                self._read(conn)
            if conn.stage != _CLOSED:
                self._flush(conn)  # replies, and (a new peer) what waits to be sent
        except ZmtpError as exc:
            self._fail(conn, exc)
        except Exception:  # a bug of ours: never leave a connection out of step with its stream
            log.exception("%s: unexpected error on the connection of %s; closing it", self.label, conn.address)
            self._close(conn, requeue=True)

    def _read(self, conn: _Connection) -> None:
        for _ in range(16):  # bounded, so one busy peer cannot starve the others
            if conn.peer.paused or conn.stage == _CLOSED:
                return
            try:
                data = conn.sock.recv(_READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(conn, exc.errno or 0)
                return
            if not data:
                self._lost(conn, 0)
                return
            # any traffic from the peer answers our PING and renews its TTL (RFC 37)
            conn.heard = time.monotonic()
            conn.ping_deadline = None
            conn.ttl_deadline = None
            self._feed(conn, data)
            if len(data) < _READ_BYTES:
                return

    def _lost(self, conn: _Connection, code: int) -> None:
        """The peer closed the connection (or it broke)."""
        if conn.stage in (_GREETING, _HANDSHAKE):
            # a peer that closes during the handshake refused it (socket type, credentials)
            # or is not a ZeroMQ peer; a connector that spoke first tries the other type next
            connector = conn.connector
            if connector is not None and conn.sent_metadata and self.curve is not None:
                # a CURVE server closes without a word on a socket-type mismatch, as on a
                # key it cannot decrypt: try the other type next, and keep the queue
                connector.declare = self._other_type(connector.declare)
            else:
                conn.refused = True
            self._emit(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, code, conn.endpoint)
        self._close(conn, requeue=True)

    def _other_type(self, declared: bytes) -> bytes:
        answers = list(dict.fromkeys(self.peer_types.values()))
        return answers[(answers.index(declared) + 1) % len(answers)] if declared in answers else self.socket_type

    def _fail(self, conn: _Connection, exc: ZmtpError) -> None:
        if conn.stage == _CLOSED:
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
        if conn.stage != _READY:
            conn.refused = True
            self._emit(exc.event, exc.value, conn.endpoint)
        else:
            if getattr(exc, "missing", 0) and not getattr(exc, "replay", True):
                # a CURVE stream skipped messages (curve.CurveSequenceError): tampering or loss
                self.sequence_gaps += 1
            log.warning("%s: closing the connection of %s: %s", self.label, conn.address, exc)
        self._close(conn, requeue=True)

    def _close(self, conn: _Connection, *, requeue: bool, quiet: bool = False) -> None:
        if conn.stage == _CLOSED:
            return
        was_ready = conn.stage == _READY
        # before the socket closes: how far the peer's TCP acknowledged (it answers after a reset)
        confirmed = conn.confirmed() if requeue and (conn.unacked or conn.inflight) else None
        if confirmed is not None:
            conn.trim_acked(confirmed)
        # a peer that leaves with nothing of ours unacknowledged or queued left in good order
        last_end = conn.batch_base + conn.inflight_ends[-1] if conn.inflight_ends else 0
        held = bool(conn.unacked or conn.peer.outbox or (conn.inflight and (confirmed is None or last_end > confirmed)))
        conn.stage = _CLOSED
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
                self._at(0.0, lambda: self._connect(connector))
            else:
                self._retry(connector)
        if self.orphans:
            self._serve_orphans()

    def _serve_orphans(self) -> None:
        for conn in list(self._connections):
            if conn.stage == _READY and not conn.out:
                self._flush(conn)
                if not self.orphans:
                    return

    # -- input --------------------------------------------------------------------------------

    def _feed(self, conn: _Connection, data: bytes) -> None:
        if conn.pending:
            conn.pending.append(data)
            conn.pending_len += len(data)
            if conn.pending_len < conn.need:
                return
            data = b"".join(conn.pending)
            conn.pending = []
            conn.pending_len = 0
        i = 0
        if conn.stage == _GREETING:
            if len(data) < GREETING_SIZE:
                conn.pending, conn.pending_len, conn.need = [data], len(data), GREETING_SIZE
                return
            self._on_greeting(conn, data[:GREETING_SIZE])
            i = GREETING_SIZE
        if conn.stage == _HANDSHAKE:
            i = self._handshake_frames(conn, data, i)
        if conn.stage == _READY and i < len(data):
            i = self._message_frames(conn, data, i)
        if conn.stage != _CLOSED and i < len(data):
            rest = memoryview(data)[i:]  # no copy: joined with the next chunks once the frame is whole
            conn.pending, conn.pending_len = [rest], len(rest)

    def _on_greeting(self, conn: _Connection, data: bytes) -> None:
        version, mechanism, _ = parse_greeting(data)
        ours = conn.mechanism
        if mechanism != ours.name:
            raise ZmtpError(f"the peer uses the {mechanism.decode('ascii', 'replace')} security mechanism, this socket "
                            f"{ours.name.decode()}", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                            zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        # the as-server byte is not checked: libzmq 4.3 always sends 0 there; a CURVE peer
        # in the wrong role fails the handshake's first command instead
        conn.stage = _HANDSHAKE
        for body in ours.start():
            conn.queue_frame(COMMAND, body)

    def _handshake_frames(self, conn: _Connection, data: bytes, i: int) -> int:
        while conn.stage == _HANDSHAKE:
            frames: list = []
            i, conn.need, _ = parse_frames(data, i, HANDSHAKE_FRAME_LIMIT, frames, one=True)
            if not frames:
                return i
            frame = frames[0]
            if type(frame) is not tuple or not frame[0] & COMMAND or frame[0] & MORE:
                raise ZmtpError("a message frame before the handshake completed", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                                zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND)
            for body in conn.mechanism.on_command(frame[1]):
                conn.queue_frame(COMMAND, body)
            if conn.mechanism.ready:
                self._on_ready(conn)
        return i

    def _on_ready(self, conn: _Connection) -> None:
        conn.stage = _READY
        if conn.connector is not None:
            conn.connector.renegotiated = False
        conn.next_ping = time.monotonic() + self.heartbeat.interval
        self._due(conn.next_ping)
        peer = conn.peer
        with self.lock:
            self._lb.add(peer)
            self.cond.notify_all()
        self._emit(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, conn.endpoint)

    def _message_frames(self, conn: _Connection, data: bytes, i: int) -> int:
        """Whole frames after the handshake: messages into the inbox, commands answered."""
        encrypted = conn.mechanism.name != b"NULL"
        overhead = 33 if encrypted else 0  # CURVE's MESSAGE: name, nonce, MAC and flags around the payload
        limit = (self.max_message_bytes if self.max_message_bytes is not None else HARD_FRAME_LIMIT) + overhead
        frames: list = []
        too_large = None
        try:
            i, conn.need, flagged = parse_frames(data, i, limit, frames)
        except FrameTooLarge as exc:  # what came before it is still delivered, then the connection closes
            too_large = ZmtpError(f"a message of {exc.size - overhead} bytes exceeds "
                                  f"max_message_bytes={self.max_message_bytes or HARD_FRAME_LIMIT}")
            flagged = 1
        if frames:
            if flagged or encrypted or conn.in_multipart:
                self._frames_in_order(conn, frames, encrypted)
            else:  # single-part messages only: the frames are the messages
                self._deliver(conn, frames)
        if too_large is not None:
            raise too_large
        return i

    def _frames_in_order(self, conn: _Connection, frames: list, encrypted: bool) -> None:
        """Frames with flags (``parse_frames``'s tuples) or sealed by CURVE, one by one:
        commands answered, multipart messages dropped whole (49/SCATTERGATHER), messages
        delivered (also those before a frame that fails)."""
        out: list[bytes] = []
        append = out.append
        in_multipart = conn.in_multipart
        decode = conn.mechanism.decode
        try:
            for frame in frames:
                if type(frame) is tuple:
                    flags, body = frame
                else:
                    flags, body = 0, frame
                if encrypted:
                    flags, body = decode(flags, body)
                if flags & COMMAND:
                    self._on_command(conn, body)
                    continue
                if flags & MORE or in_multipart:
                    # a multipart message: a single-part socket drops it whole (49/SCATTERGATHER)
                    in_multipart = bool(flags & MORE)
                    if not in_multipart:
                        self.discarded_multipart += 1
                    continue
                append(body)
        finally:
            conn.in_multipart = in_multipart
            if out:
                self._deliver(conn, out)

    def _deliver(self, conn: _Connection, messages: list[bytes]) -> None:
        peer = conn.peer
        if self.socket_type in (b"SCATTER", b"PUSH"):
            return  # a send-only socket ignores messages (a well-behaved peer sends none)
        with self.lock:
            paused = self._fq.deliver(peer, messages)
            if self.waiters:
                self.cond.notify()
        if paused:
            self._set_events(conn, (selectors.EVENT_WRITE if conn.out else 0))

    def _resume(self, conn: _Connection) -> None:
        peer = conn.peer
        with self.lock:
            peer.paused = False
            peer.resume_asked = False
        if conn.stage == _CLOSED:
            return
        self._set_events(conn, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0))
        if conn.pending and conn.pending_len >= conn.need:  # a whole frame was waiting
            data = b"".join(conn.pending)
            conn.pending, conn.pending_len = [], 0
            try:
                self._feed(conn, data)
            except ZmtpError as exc:
                self._fail(conn, exc)

    def _on_command(self, conn: _Connection, body: bytes) -> None:
        name, data = parse_command(body)
        if name == b"PING":
            self._on_ping(conn, data)
        elif name == b"ERROR":
            raise error_from_command(data, is_server=not conn.initiator)
        # PONG and commands of other socket types (SUBSCRIBE, CANCEL) need nothing

    def _on_ping(self, conn: _Connection, data: bytes) -> None:
        """RFC 37: a PING is a 2-byte TTL (deciseconds) and a context of at most 16 bytes,
        echoed in the PONG. The TTL is honoured: no traffic from the peer within it closes
        the connection (it is 16 bits, so at most 6553.5 s: nothing absurd can be asked).
        Answers stop while our replies pile up unread (a PING flood from a peer that does
        not read), so memory stays bounded; a malformed PING or a flood is logged once."""
        if len(data) < 2 or len(data) > 18:
            self._heartbeat_warning(conn, f"a malformed PING of {len(data)} bytes (RFC 37: a 2-byte TTL and "
                                          "at most 16 bytes of context); ignored")
            if len(data) < 2:
                return
        ttl = int.from_bytes(data[:2], "big") / 10.0
        if ttl > 0:
            conn.ttl_deadline = time.monotonic() + ttl
            self._due(conn.ttl_deadline)
        if conn.finished:
            return  # our sending side is shut down (a close waiting for acknowledgements)
        if conn.out_bytes < _MAX_PENDING_REPLY_BYTES:
            conn.queue_command(command(b"PONG", data[2:18]))
        else:
            self._heartbeat_warning(conn, "PINGs faster than it reads our PONGs; not answering until it reads")

    def _heartbeat_warning(self, conn: _Connection, what: str) -> None:
        if conn.heartbeat_warnings < _HEARTBEAT_WARNINGS:
            conn.heartbeat_warnings += 1
            log.warning("%s: the peer at %s sends %s", self.label, conn.address, what)

    # -- output -------------------------------------------------------------------------------

    def _flush(self, conn: _Connection) -> None:
        try:
            self._write(conn)
        except ZmtpError as exc:
            self._fail(conn, exc)
            return
        except OSError as exc:
            self._lost(conn, exc.errno or 0)
            return
        if conn.stage == _CLOSED:
            return
        wanted = self._read_events(conn) | (selectors.EVENT_WRITE if conn.out else 0)
        self._set_events(conn, wanted)

    def _refill(self, conn: _Connection) -> bool:
        """Take the next messages to send (orphans first) into the write buffer."""
        peer = conn.peer
        with self.lock:
            source = self.orphans if self.orphans else peer.outbox
            if not source:
                return False
            batch: list[bytes] = []
            size = 0
            while source and size < _WRITE_BATCH_BYTES:
                message = source.popleft()
                batch.append(message)
                size += len(message) if type(message) is not tuple else sum(map(len, message))
            if self.waiters:
                self.cond.notify_all()
        encode = None if conn.mechanism.name == b"NULL" else conn.mechanism.encode
        ends = encode_messages(batch, conn.out, conn.written, encode)
        offset = ends[-1]
        conn.out_bytes += offset - conn.written
        conn.inflight, conn.inflight_ends = batch, ends
        conn.batch_base = conn.sent_total
        return True

    def _write(self, conn: _Connection) -> None:
        if conn.stage == _CLOSED or conn.connecting:
            return
        while True:
            if not conn.out:
                if conn.inflight and conn.track_acks:  # written whole: unconfirmed until acknowledged
                    base = conn.batch_base
                    conn.unacked.extend(zip([base + end for end in conn.inflight_ends], conn.inflight))
                    conn.trim_acked()
                conn.inflight, conn.inflight_ends = [], []
                conn.written = 0
                if conn.stage != _READY or not self._refill(conn):
                    if self.waiters:  # a close() waiting for the queues to drain
                        with self.lock:
                            self.cond.notify_all()
                    return
            chunks = list(itertools.islice(conn.out, _IOV_MAX))
            try:
                sent = conn.sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                return
            conn.out_bytes -= sent
            conn.sent_total += sent
            if conn.inflight:
                conn.written += sent
            while sent:
                head = conn.out[0]
                if sent >= len(head):
                    sent -= len(head)
                    conn.out.popleft()
                else:
                    conn.out[0] = memoryview(head)[sent:]
                    sent = 0
            if conn.out:
                return  # a partial write: the kernel buffer is full, wait until writable

    # -- events -------------------------------------------------------------------------------

    def _emit(self, event: int, value: int, address: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event, value, address)
            except Exception:
                log.exception("%s: event callback failed", self.label)

    # -- mechanisms ---------------------------------------------------------------------------

    def new_mechanism(self, conn: _Connection):
        declare = lambda peer: self._declare(conn, peer)  # noqa: E731
        accept = lambda metadata: self._accept(conn, metadata)  # noqa: E731
        if self.curve is None:
            return NullMechanism(conn.initiator, declare, accept)
        from .curve import CurveClient, CurveServer
        keys = self._mechanism_keys
        if self.curve.is_server:
            allowed = keys["authorized"]
            authorize = (lambda key: True) if allowed is None else (lambda key: self._authorize(conn, key, allowed))
            return CurveServer(keys["public"], keys["secret"], authorize, declare, accept)
        return CurveClient(keys["public"], keys["secret"], keys["server"], declare, accept)

    _refused_logged: set = set()

    def _authorize(self, conn: _Connection, key: bytes, allowed: frozenset) -> bool:
        if key in allowed:
            return True
        from zmq.utils import z85
        text = z85.encode(key).decode()
        entry = (conn.address.rsplit(":", 1)[0], text)
        if entry not in self._refused_logged and len(self._refused_logged) < 10_000:
            self._refused_logged.add(entry)
            log.warning("CURVE: refused client key %s from %s (not in curveAuthorizedKeys)", text, conn.address)
        return False

    def _declare(self, conn: _Connection, peer: Optional[dict]) -> dict:
        conn.sent_metadata = True
        if peer is not None:
            kind = (peer.get("socket-type") or b"").upper()
            ours = self.peer_types.get(kind, self.socket_type)
        elif conn.connector is not None:
            ours = conn.connector.declare
        else:
            ours = self.socket_type
        conn.declared = ours
        return {"Socket-Type": ours}

    def _accept(self, conn: _Connection, metadata: dict) -> None:
        kind = socket_type_of(metadata)
        answer = self.peer_types.get(kind)
        declared = conn.declared
        if answer is not None and conn.connector is not None:
            conn.connector.declare = answer  # what this peer accepts, for the next attempts
        if answer is not None and declared is not None and declared != answer and conn.connector is not None:
            raise _Renegotiate(f"the peer is a {kind.decode('ascii', 'replace')[:20]}: announcing {answer.decode()}")
        if answer is None or (declared is not None and declared != answer):
            raise ZmtpError(
                f"socket type mismatch: a {kind.decode('ascii', 'replace')[:20]} peer cannot talk to this "
                f"{(declared or self.socket_type).decode()} socket",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA)
