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

The parts, as libzmq splits them: ``codec`` (frames as bytes), ``policies`` (round-robin
and fair queueing), ``connection`` (one connection's state), ``stream`` (the protocol on a
connection: one ``StreamEngine`` object per connection), ``owner`` (the narrow interface
between such an object and its owner, and the settings it is given), ``sessions``
(listeners, connectors and connections: accepting, connecting, closing and re-routing; the
owner of every connection), ``security`` (each connection's mechanism, a
``mechanism.Mechanism``), ``state`` (what the application's calls and the I/O thread share
under the lock), ``poller`` (the I/O thread's loop). ``Engine`` is the sockets' only way
in: it makes the shared state, the loop and the session manager and holds them (it
inherits from none), waits on the shared state for the application and hands the session
manager what it needs when it is made. The modules import one way (engine -> sessions ->
stream -> connection -> codec), so each can be read without the ones above it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from ...deadlines import IDLE_SLICE_S, next_slice
from ...heartbeat import DEFAULT_HEARTBEAT, Heartbeat
from ...message_block import MessageRun
from .codec import HANDSHAKE_FRAME_LIMIT, EngineMessage
from .connection import READY, Peer
from .owner import Settings
from .poller import READ_PACING_S, Poller
from .sessions import Sessions
from .state import SharedState
from .stream import StreamEngine
from .wire import command

if TYPE_CHECKING:
    from ...curve import Curve

__all__ = ["Engine", "Peer", "HANDSHAKE_FRAME_LIMIT"]

log = logging.getLogger(__name__)

#: a caller waiting on the engine looks at its deadline and at ``check`` this often
_WAIT_SLICE_S = 0.1
#: a close waiting for TCP acknowledgements looks this often (they arrive without a wake-up)
_ACK_POLL_S = 0.005


class Engine:
    """One ZMTP socket's I/O thread and queues. The engine sockets' wire
    (``wires.engine.EngineWire``) holds one and calls ``send_round_robin``, ``receive``,
    ``wait_readable``, ``drain`` and ``release`` (each takes the lock itself); everything
    else is the engine's own. It holds the shared state (``SharedState``), the I/O thread's
    loop (``Poller``) and the session manager (``Sessions``), and keeps direct references
    to the objects its hot paths use (the lock, the policies).
    """

    def __init__(
        self,
        *,
        socket_type: bytes,
        peer_types: dict[bytes, bytes],
        label: str,
        hwm: int,
        max_message_bytes: int | None,
        reconnect_ivl_s: float = 0.1,
        handshake_ivl_s: float = 30.0,
        curve: Curve | None = None,
        heartbeat: Heartbeat = DEFAULT_HEARTBEAT,
        rcvbuf: int | None = None,
        sndbuf: int | None = None,
        immediate: bool = False,
        reconnect_ivl_max_s: float = 0.0,
        tcp_options: Sequence[tuple[int, int, int]] = (),
        on_event: Callable[[int, int, str], None] | None = None,
        multipart: bool = False,
        receive_only: bool = False,
    ) -> None:
        self.socket_type = socket_type
        #: a socket that only receives (PULL, GATHER): it PINGs a peer only after a whole
        #: interval of silence while reading, and with no TTL (``Connection.ping_due``)
        self.receive_only = receive_only
        #: received multipart messages are delivered (as tuples of frames), not dropped
        self.multipart = multipart
        self.peer_types = peer_types
        self.label = label
        self.hwm = hwm
        self.max_message_bytes = max_message_bytes
        self.reconnect_ivl_s = reconnect_ivl_s
        self.handshake_ivl_s = handshake_ivl_s
        self.curve = curve
        self.heartbeat = heartbeat
        # no TTL from a receive-only socket: libzmq arms a peer's TTL timer at each PING
        # and drops the connection when nothing follows within it, and such a socket stays
        # quiet for as long as its peer streams to it
        ping = command(b"PING", b"\x00\x00" if receive_only else heartbeat.ttl_field)
        #: acknowledged bytes past a PING that prove a live consumer: more than our own
        #: PINGs can account for within one timeout
        ack_liveness_bytes = 1024 + (int(heartbeat.timeout / heartbeat.interval) + 2) * 64 if heartbeat.enabled else 0
        self.rcvbuf, self.sndbuf = rcvbuf, sndbuf
        #: ZMQ_RECONNECT_IVL_MAX: a failing connect waits twice as long each time, up to this (0: no backoff)
        self.reconnect_ivl_max_s = reconnect_ivl_max_s
        #: socket options set on every TCP connection after the heartbeat's (the user's keepalive)
        self.tcp_options = list(tcp_options)
        self.immediate = immediate
        self.on_event = on_event
        #: what the application's calls share with the I/O thread; the objects that never
        #: change are held directly too (the hot paths take no extra step)
        self._state = state = SharedState(hwm)
        self.lock, self.cond, self._lb, self._fq, self.orphans = (
            state.lock,
            state.cond,
            state.lb,
            state.fq,
            state.orphans,
        )
        # a receive-only socket's loop pauses after a streaming turn: fewer, larger reads (poller.py)
        self._poller = Poller(self.lock, label, pace_s=READ_PACING_S if receive_only else 0.0)
        settings = Settings(
            socket_type=socket_type,
            peer_types=peer_types,
            label=label,
            max_message_bytes=max_message_bytes,
            multipart=multipart,
            receive_only=receive_only,
            heartbeat=heartbeat,
            ping=ping,
            ack_liveness_bytes=ack_liveness_bytes,
            handshake_ivl_s=handshake_ivl_s,
        )
        #: the listeners, connectors and connections, made with what they use
        self._sessions = Sessions(
            settings,
            state,
            self._poller,
            curve=curve,
            rcvbuf=rcvbuf,
            sndbuf=sndbuf,
            tcp_options=self.tcp_options,
            immediate=immediate,
            reconnect_ivl_s=reconnect_ivl_s,
            reconnect_ivl_max_s=reconnect_ivl_max_s,
            on_event=on_event,
        )
        #: every connection (the session manager's set, read here with the lock held)
        self._connections = self._sessions.connections
        self._thread = threading.Thread(target=self._run, name=f"zmtp-{label}", daemon=True)
        self._stopped = threading.Event()

    # -- set-up (application thread, before start) ------------------------------------------

    def bind(self, endpoint: str) -> str:
        """Listen on ``endpoint`` now (errors surface in the caller); returns the real address."""
        return self._sessions.listen(endpoint)

    def connect(self, endpoint: str) -> None:
        """Connect to ``endpoint`` (the I/O thread does, once started, and again whenever
        the connection ends)."""
        self._sessions.connect(endpoint)

    def start(self) -> None:
        self._thread.start()

    # -- application side -----------------------------------------------------------------

    def wake(self) -> None:
        """Make the I/O thread run its commands (lock held by the caller)."""
        self._poller.wake()

    def call_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the I/O thread (lock held by the caller)."""
        self._poller.call_soon(fn)

    @property
    def ready_peers(self) -> list[Peer]:
        """The peers a message may be queued to now, in round-robin order (lock held)."""
        return self._lb.peers

    def send_round_robin(
        self, messages: Iterable[EngineMessage], timeout: float | None, check: Callable[[], None]
    ) -> tuple[int, bool]:
        """Queue ``messages`` in order, each to the next ready peer whose queue has room,
        waiting while none has: at most ``timeout`` seconds for each message (``None``: no
        limit). Returns ``(messages queued, whether a wait timed out)``: on a timeout, those
        before the message that timed out were queued. ``check()`` runs before each turn of
        messages queued together and around each wait, and may raise (the socket was
        closed); what was queued is written all the same."""
        lb, hwm = self._lb, self.hwm
        sent = 0
        kick: dict[int, Peer] = {}
        batch = messages if isinstance(messages, list) else list(messages)
        total = len(batch)
        with self.lock:
            try:
                while sent < total:
                    check()
                    # whole turns at once while every peer has room: one Python step per
                    # peer instead of one per message, the same order (RoundRobin.take_turns)
                    queued, touched = lb.take_turns(batch, sent, hwm)
                    if queued:
                        for turned in touched:
                            kick[turned.id] = turned
                        sent += queued
                        continue
                    deadline = None
                    while True:
                        peer = lb.next_with_room(hwm)
                        if peer is not None:
                            peer.outbox.append(batch[sent])
                            kick[peer.id] = peer
                            break
                        for waiting in kick.values():
                            self._kick(waiting)
                        kick.clear()
                        if deadline is None and timeout is not None:
                            deadline = time.monotonic() + timeout
                        if not self._wait_until(deadline, check):
                            return sent, True
                        check()
                    sent += 1
            finally:
                for waiting in kick.values():
                    self._kick(waiting)
        return sent, False

    def receive(
        self, max_messages: int, max_bytes: int | None, deadline: float | None, check: Callable[[], None]
    ) -> list[EngineMessage | MessageRun]:
        """Up to ``max_messages`` received messages (and about ``max_bytes``), fair-queued
        over the peers, waiting until ``deadline`` (monotonic seconds; ``None``: no limit)
        for the first; ``[]`` when none came in time. ``check`` as in ``send_round_robin``.
        Runs of single-part messages split in bulk come as one ``MessageRun`` each."""
        with self.lock:
            while True:
                check()
                values = self._fq.take(max_messages, max_bytes, self._ask_resume)
                if values:
                    return values
                if not self._wait_until(deadline, check):
                    return []

    def wait_readable(self, deadline: float | None, check: Callable[[], None]) -> bool:
        """Whether a received message waits, waiting until ``deadline`` for one."""
        with self.lock:
            while not self._fq:
                if not self._wait_until(deadline, check):
                    return False
            return True

    def drain(self, deadline: float | None, confirm: bool) -> None:
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

    def wake_all(self) -> None:
        """Wake every caller waiting on the engine, to look again (``interrupt``)."""
        with self.lock:
            self.cond.notify_all()

    def _wait_until(self, deadline: float | None, check: Callable[[], None]) -> bool:
        """Wait (lock held) a slice for the I/O thread to change something, unless
        ``deadline`` passed (``False``); ``check()`` before and after: the sockets' one
        waiting rule (``deadlines.next_slice``), which the libzmq wire follows too. Its
        slices are long (``IDLE_SLICE_S``): the I/O thread notifies every change a caller
        waits for, and ``release`` (a close) and ``wake_all`` (an interrupt) notify too."""
        slice_s = next_slice(deadline, check, IDLE_SLICE_S)
        if slice_s is None:
            return False
        self.wait(slice_s)
        check()
        return True

    def _kick(self, peer: Peer) -> None:
        """Ask the I/O thread to write ``peer``'s outbox (lock held)."""
        conn = peer.conn
        if conn is not None and not conn.out:
            self.call_soon(cast(StreamEngine, conn).flush)

    def _ask_resume(self, peer: Peer) -> None:
        """``peer``'s inbox was drained below half its limit: read its connection again."""
        conn = peer.conn
        if conn is not None:
            self.call_soon(lambda: self._resume(cast(StreamEngine, conn)))

    def _resume(self, conn: StreamEngine) -> None:
        """Read ``conn`` again (I/O thread): its peer's inbox drained."""
        peer = conn.peer
        with self.lock:
            peer.paused = False
            peer.resume_asked = False
        conn.resume()

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
        state = self._state
        state.waiters += 1
        try:
            self.cond.wait(timeout_s)
        finally:
            state.waiters -= 1

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
            if conn.stage == READY and conn.track_acks:
                count += len(conn.unacked)
        if count:
            self.call_soon(lambda: self._trim_all(finish))
        return count

    def _trim_all(self, finish: bool = False) -> None:
        changed = False
        for conn in list(self._connections):
            if conn.stage == READY and conn.unacked:
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
        return sum(conn.out_bytes for conn in list(self._connections) if conn.stage == READY)

    def stop(self) -> None:
        """Stop the I/O thread and close every OS socket (no lock held)."""
        with self.lock:
            self._state.closing = True
            self.cond.notify_all()
            self.wake()
        if self._thread.ident is None:  # never started
            self._sessions.close_all()
        elif threading.current_thread() is not self._thread:
            self._stopped.wait(10)

    # -- the I/O thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            state = self._state
            self._poller.run(lambda: state.closing, self._sessions.tick)
        except BaseException:  # never expected: every callback is guarded
            log.exception("%s: the ZMTP I/O thread failed", self.label)
        finally:
            self._sessions.close_all()
            self._stopped.set()

    # -- the counters (kept in the shared state by the session manager; the wire reads them) --

    @property
    def heartbeat_timeouts(self) -> int:
        """Connections closed because the peer was silent past the heartbeat timeout or TTL."""
        return self._state.heartbeat_timeouts

    @property
    def broken_connections(self) -> int:
        """Connections that ended after their handshake other than by the peer's orderly close."""
        return self._state.broken_connections

    @property
    def sequence_gaps(self) -> int:
        """Connections closed because a CURVE stream skipped a message."""
        return self._state.sequence_gaps

    @property
    def discarded_multipart(self) -> int:
        """Received multipart messages dropped whole."""
        return self._state.discarded_multipart

    @property
    def resent(self) -> int:
        """Messages sent again because a peer's TCP never acknowledged them before it left."""
        return self._state.resent

    @property
    def lost_peers(self) -> int:
        """Peers whose connection broke after their handshake while they held messages of ours."""
        return self._state.lost_peers
