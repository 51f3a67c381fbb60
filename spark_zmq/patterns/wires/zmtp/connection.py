"""One connection of the ZMTP engine and the queues it serves (libzmq's session and pipe).

* ``Peer``: the queues of one peer (``outbox`` to send, ``inbox`` received), which outlive
  a connection when they belong to a connect endpoint (49/SCATTERGATHER);
* ``Connector``: a connect endpoint, which reconnects and keeps its peer's queue;
* ``Connection``: one OS socket speaking ZMTP: stage, input and output buffers, the write
  in progress, TCP acknowledgement tracking and the heartbeat clock.

They hold state and answer questions about it; the protocol on a connection
(``stream.StreamEngine``, a ``Connection`` that also reads and writes it) and its owner
(``sessions``) do the I/O and decide what to do with the answers. This module imports
neither of them, so the state sits below both.
"""

from __future__ import annotations

import collections
import itertools
import socket
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...heartbeat import Heartbeat
from . import transport
from .codec import COMMAND, Chunk, EngineMessage, frame_header
from .wire import GREETING_SIZE

if TYPE_CHECKING:  # pragma: no cover
    from .mechanism import Mechanism

__all__ = ["Peer", "Connector", "Connection", "GREETING", "HANDSHAKE", "READY", "CLOSED"]

#: a connection's stages, in order
GREETING, HANDSHAKE, READY, CLOSED = range(4)

_NATIVE_U64 = struct.Struct("=Q")  # kernel structures are in the host's byte order
#: ``struct tcp_info`` (linux/tcp.h): ``tcpi_bytes_acked`` (u64) sits at this offset, after
#: 8 bytes of u8 fields, 24 u32 fields and two u64 pacing rates; Linux 4.1 and later
_TCP_INFO_BYTES_ACKED = 120
_TCP_INFO_SIZE = 128
_HAS_TCP_INFO = hasattr(socket, "TCP_INFO")
#: how many heartbeat timeouts a peer that answers nothing may be kept for its host's TCP
#: acknowledgements of our data alone
_ACK_LIVENESS_TIMEOUTS = 3

_ids = itertools.count(1)


class Peer:
    """One connection's queues and state (shared by the I/O thread and the app's calls)."""

    __slots__ = ("id", "inbox", "inbox_count", "inbox_bytes", "outbox", "paused", "resume_asked", "conn")

    def __init__(self) -> None:
        self.id = next(_ids)
        #: received messages: ``bytes``, tuples of frames, or runs of single-part messages
        #: (``MessageRun``), so ``inbox_count`` counts the messages
        self.inbox: collections.deque[Any] = collections.deque()
        self.inbox_count = 0
        self.inbox_bytes = 0
        self.outbox: collections.deque[EngineMessage] = collections.deque()
        self.paused = False
        self.resume_asked = False
        self.conn: Connection | None = None


class Connector:
    """A connect endpoint: (re)connects after ``reconnect_ivl`` whenever it has no connection.

    ``declare`` is the socket type this side announces when it must speak first (NULL as
    the connecting side, or as a CURVE client): this socket's own type at first; if a peer
    closed a handshake on it, or told us its type, the next attempt uses what that peer
    accepts (a PUSH peer needs a PULL, not a GATHER)."""

    def __init__(self, endpoint: str, address: transport.Address, declare: bytes) -> None:
        self.endpoint = endpoint
        self.address = address
        self.declare = declare
        self.conn: Connection | None = None
        #: the queue of this endpoint, kept whether or not it is connected (49/SCATTERGATHER)
        self.peer = Peer()
        #: a renegotiation of the socket type was retried at once since the last handshake:
        #: the next waits the reconnect interval (a peer whose type depends on ours would
        #: otherwise make us reconnect in a tight loop)
        self.renegotiated = False
        #: the wait before the next reconnect under ZMQ_RECONNECT_IVL_MAX's backoff (None: the interval)
        self.backoff_s: float | None = None
        #: the inproc connect failed for lack of file descriptors (logged once until it works)
        self.inproc_failing = False
        #: handshakes that failed in a row at this endpoint (a peer that is not a ZeroMQ
        #: peer, refuses our type or our key): each doubles the wait before the next try
        self.failed_handshakes = 0


class Connection:
    """One OS socket speaking ZMTP with one peer: its stage, buffers, write in progress,
    TCP acknowledgement tracking and heartbeat clock (the engine's I/O thread alone
    touches it, except ``out`` and ``inflight``, which the application's calls read)."""

    def __init__(
        self,
        sock: socket.socket,
        address: str,
        connector: Connector | None,
        endpoint: str,
        handshake_ivl_s: float,
        new_mechanism: Callable[[], Mechanism],
    ) -> None:
        self.sock = sock
        self.address = address
        #: what events name, as libzmq's monitor does: the bound address (for accepted
        #: connections) or the connect endpoint, so a log line per endpoint stays one line
        self.endpoint = endpoint
        self.connector = connector
        self.initiator = connector is not None
        self.peer = connector.peer if connector is not None else Peer()
        self.stage = GREETING
        self.connecting = False
        self.mechanism = new_mechanism()
        self.pending: list[Chunk] = []
        self.pending_len = 0
        self.need = GREETING_SIZE
        self.out: collections.deque[Chunk] = collections.deque()
        self.out_bytes = 0
        # the messages of the write in progress, with the offset at which each one ends
        self.inflight: list[EngineMessage] = []
        self.inflight_ends: list[int] = []
        self.written = 0
        #: tcp only: bytes written to the kernel on this connection, where the current write
        #: batch started, the peer kernel's acknowledgement count at the start (1 for the
        #: SYN of a connecting side), and the messages written whole but not yet
        #: acknowledged as (end offset, message), oldest first
        self.track_acks = _HAS_TCP_INFO and sock.family in (socket.AF_INET, socket.AF_INET6)
        self.sent_total = 0
        self.batch_base = 0
        self.acked_base: int | None = None
        self.unacked: collections.deque[tuple[int, EngineMessage]] = collections.deque()
        #: the sending side was shut down (``finish``): the peer acknowledges a FIN at once
        self.finished = False
        self.in_multipart = False
        #: a multipart message being assembled (sockets that take them): its frames so far,
        #: their bytes, and their cost against the size limit (``StreamEngine._add_part``)
        self.parts: list[bytes] = []
        self.parts_bytes = 0
        self.parts_cost = 0
        self.deadline = time.monotonic() + handshake_ivl_s
        self.events = 0
        self.sent_metadata = False
        #: the handshake failed: what this peer's queue holds goes to other peers
        self.refused = False
        self.retry_now = False
        self.declared: bytes | None = None
        #: heartbeats (monotonic seconds): when the next PING goes out, when a PING is
        #: unanswered for too long (``None``: nothing awaited), when the peer's PING TTL
        #: runs out without traffic from it (``None``: no TTL asked)
        self.next_ping = 0.0
        self.ping_deadline: float | None = None
        self.ttl_deadline: float | None = None
        self.acked_at_ping: int | None = None
        #: when the peer last sent anything, and when we last resumed reading it after
        #: backpressure (monotonic seconds)
        self.heard = time.monotonic()
        self.resumed = 0.0
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
        if self.stage == READY:
            flags, payload = self.mechanism.encode_command(body)
            self.queue_frame(flags, payload)
        else:
            self.queue_frame(COMMAND, body)

    # -- acknowledgements (tcp) ------------------------------------------------------------

    def _kernel_acked(self) -> int | None:
        """Bytes of ours the peer's TCP acknowledged (it also answers after a reset)."""
        try:
            info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
        except OSError:
            return None
        if len(info) < _TCP_INFO_BYTES_ACKED + 8:
            return None
        acked: int = _NATIVE_U64.unpack_from(info, _TCP_INFO_BYTES_ACKED)[0]
        return acked

    def start_ack_tracking(self) -> None:
        """Before the first byte is written: what the counter says now counts as zero."""
        if self.track_acks:
            self.acked_base = self._kernel_acked()
            if self.acked_base is None:
                self.track_acks = False

    def confirmed(self) -> int | None:
        """Offset up to which the peer's TCP acknowledged what we wrote (``None``: unknown)."""
        if not self.track_acks or self.acked_base is None:
            return None
        acked = self._kernel_acked()
        return None if acked is None else acked - self.acked_base

    def trim_acked(self, acked: int | None = None) -> None:
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
        if unacked[-1][0] <= acked:  # all of it (a consumer that keeps up): no step per message
            unacked.clear()
            return
        while unacked[0][0] <= acked:
            unacked.popleft()

    # -- heartbeat clock (RFC 37) -----------------------------------------------------------

    def heard_from_peer(self, now: float) -> None:
        """Any traffic from the peer answers our PING and renews its TTL (RFC 37)."""
        self.heard = now
        self.ping_deadline = None
        self.ttl_deadline = None

    def heartbeat_expired(self, now: float, heartbeat: Heartbeat, ack_liveness_bytes: int) -> str | None:
        """Why the peer counts as gone at ``now`` (silent past the timeout after our PING,
        or past the TTL of its own PING), or ``None``."""
        if self.peer.paused:
            # we stopped reading (backpressure): the peer's answers wait unread in the
            # kernel, so its silence means nothing; judge it again once we read
            if self.ping_deadline is not None:
                self.ping_deadline = now + heartbeat.timeout
            if self.ttl_deadline is not None:
                self.ttl_deadline = max(self.ttl_deadline, now + heartbeat.timeout)
            return None
        if self.ping_deadline is not None and now >= self.ping_deadline:
            acked = self.confirmed() if self.track_acks else None
            if (
                acked is not None
                and self.acked_at_ping is not None
                and acked - self.acked_at_ping > ack_liveness_bytes
                and now - self.heard < _ACK_LIVENESS_TIMEOUTS * heartbeat.timeout
            ):
                # the peer's host took more of our data since the PING (more than our
                # PINGs alone): a consumer busy reading a long queue, not a dead one;
                # for a while only: a host that acknowledges but whose application never
                # answers (stopped, hung, a userspace middlebox) is dead all the same
                self.ping_deadline = None
                return None
            return f"no traffic from the peer for {heartbeat.timeout:g} s after a heartbeat PING (heartbeatTimeout)"
        if self.ttl_deadline is not None and now >= self.ttl_deadline:
            return "no traffic from the peer within the TTL of its own heartbeat PING"
        return None

    def ping_due(self, now: float, heartbeat: Heartbeat, silent_only: bool = False) -> bool:
        """Whether our next PING is due; if so, the one after it is scheduled and, unless an
        answer is already awaited, the peer's silence counts from now.

        ``silent_only`` (receive-only sockets): a PING is due only once the peer has been
        silent for a whole interval while we read it. A peer that sends is alive, and bytes
        of ours sitting unread in a producer when it exits make its kernel reset the
        connection, destroying what both kernels buffer: so never while it streams to us
        or while we hold it back (it may have a full send buffer then)."""
        if now < self.next_ping:
            return False
        if silent_only:
            quiet_since = max(self.heard, self.resumed)
            if self.peer.paused or now - quiet_since < heartbeat.interval:
                self.next_ping = now + heartbeat.interval if self.peer.paused else quiet_since + heartbeat.interval
                return False
        self.next_ping = now + heartbeat.interval
        if self.ping_deadline is None:
            self.ping_deadline = now + heartbeat.timeout
            self.acked_at_ping = self.confirmed() if self.track_acks else None
        return True

    def next_heartbeat_in(self, now: float) -> float:
        """Seconds until this connection's next heartbeat event (a PING, a deadline)."""
        nearest = self.next_ping
        for deadline in (self.ping_deadline, self.ttl_deadline):
            if deadline is not None:
                nearest = min(nearest, deadline)
        return max(0.0, nearest - now)
