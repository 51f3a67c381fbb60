"""ZMTP 3.1 on one connection (libzmq's stream engine): reading and writing its OS
socket, the greeting, the mechanism's handshake, frames in both directions, commands
(PING/PONG, ERROR) and heartbeats.

``_Stream`` is a part of ``Engine``, split off by concern: its methods run on the I/O
thread and use the engine's state (queues, policies, counters, the poller), and the
engine's connection management (``sessions``) calls them and is called back. Frames are
parsed and encoded by ``codec`` alone.
"""

from __future__ import annotations

import errno
import itertools
import logging
import selectors
import socket
import time
from typing import TYPE_CHECKING, Any, Optional, Sequence, cast

import zmq

from .codec import (
    COMMAND, HANDSHAKE_FRAME_LIMIT, HARD_FRAME_LIMIT, MORE, FrameTooLarge, EngineMessage, ParsedFrame, ZmtpError,
    encode_messages, parse_frames,
)
from .connection import CLOSED, GREETING, HANDSHAKE, READY, Connection
from .null import NullMechanism
from .wire import GREETING_SIZE, command, error_from_command, greeting, parse_command, parse_greeting, socket_type_of

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.zmtp.engine")

_READ_BYTES = 256 * 1024
_WRITE_BATCH_BYTES = 256 * 1024
#: messages taken from a peer's queue per step of a refill (the batch may pass
#: _WRITE_BATCH_BYTES by at most one run's worth)
_REFILL_RUN = 64
#: a peer's PINGs are answered while less than this is waiting to be written; beyond it a
#: PING flood from a peer that does not read would grow the queue without bound
_MAX_PENDING_REPLY_BYTES = 64 * 1024
_IOV_MAX = 512
#: bytes a frame of a multipart message being assembled counts for beyond its body (a
#: Python ``bytes`` and its list slot), so empty frames cannot pile up without limit
PART_OVERHEAD = 64
#: PING flood and malformed heartbeat warnings: at most this many per connection
_HEARTBEAT_WARNINGS = 1


class _Renegotiate(ZmtpError):
    """The peer told us its socket type after we announced ours (we had to speak first) and
    wants the other answer (a PUSH peer needs a PULL, not a GATHER): not a refusal. The
    connection is closed and opened again at once, announcing what the peer accepts, and
    the endpoint keeps its queue."""


if TYPE_CHECKING:
    from .parts import EngineParts, Mechanism
else:
    EngineParts = object


class _Stream(EngineParts):
    """The ZMTP protocol handling of ``Engine`` (see the module's docstring)."""

    # -- reading and writing a connection ----------------------------------------------

    def _on_io(self, conn: Connection, mask: int) -> None:
        if conn.stage == CLOSED:
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
            if conn.stage != CLOSED:
                self._flush(conn)  # replies, and (a new peer) what waits to be sent
        except ZmtpError as exc:
            self._fail(conn, exc)
        except Exception:  # a bug of ours: never leave a connection out of step with its stream
            log.exception("%s: unexpected error on the connection of %s; closing it", self.label, conn.address)
            self._close(conn, requeue=True)

    def _read(self, conn: Connection) -> None:
        for _ in range(16):  # bounded, so one busy peer cannot starve the others
            if conn.peer.paused or conn.stage == CLOSED:
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
            conn.heard_from_peer(time.monotonic())
            self._feed(conn, data)
            if len(data) < _READ_BYTES:
                return

    def _set_events(self, conn: Connection, events: int) -> None:
        if conn.stage == CLOSED or events == conn.events:
            return
        if conn.events == 0:
            self._selector.register(conn.sock, events, lambda mask, c=conn: self._on_io(c, mask))
        elif events == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, events, lambda mask, c=conn: self._on_io(c, mask))
        conn.events = events

    def _read_events(self, conn: Connection) -> int:
        return 0 if conn.peer.paused else selectors.EVENT_READ

    # -- input: greeting, handshake, frames --------------------------------------------

    def _start_greeting(self, conn: Connection) -> None:
        conn.start_ack_tracking()
        data = greeting(conn.mechanism.name, conn.mechanism.as_server)
        conn.out.append(data)
        conn.out_bytes += len(data)
        self._emit(zmq.EVENT_CONNECTED if conn.initiator else zmq.EVENT_ACCEPTED, 0, conn.endpoint)

    def _feed(self, conn: Connection, data: bytes) -> None:
        if conn.pending:
            conn.pending.append(data)
            conn.pending_len += len(data)
            if conn.pending_len < conn.need:
                return
            data = b"".join(conn.pending)
            conn.pending = []
            conn.pending_len = 0
        i = 0
        if conn.stage == GREETING:
            if len(data) < GREETING_SIZE:
                conn.pending, conn.pending_len, conn.need = [data], len(data), GREETING_SIZE
                return
            self._on_greeting(conn, data[:GREETING_SIZE])
            i = GREETING_SIZE
        if conn.stage == HANDSHAKE:
            i = self._handshake_frames(conn, data, i)
        if conn.stage == READY and i < len(data):
            i = self._message_frames(conn, data, i)
        if conn.stage != CLOSED and i < len(data):
            rest = memoryview(data)[i:]  # no copy: joined with the next chunks once the frame is whole
            conn.pending, conn.pending_len = [rest], len(rest)

    def _on_greeting(self, conn: Connection, data: bytes) -> None:
        version, mechanism, _ = parse_greeting(data)
        ours = conn.mechanism
        if mechanism != ours.name:
            raise ZmtpError(f"the peer uses the {mechanism.decode('ascii', 'replace')} security mechanism, this socket "
                            f"{ours.name.decode()}", zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                            zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        # the as-server byte is not checked: libzmq 4.3 always sends 0 there; a CURVE peer
        # in the wrong role fails the handshake's first command instead
        conn.stage = HANDSHAKE
        for body in ours.start():
            conn.queue_frame(COMMAND, body)

    def _handshake_frames(self, conn: Connection, data: bytes, i: int) -> int:
        while conn.stage == HANDSHAKE:
            frames: list[ParsedFrame] = []
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

    def _on_ready(self, conn: Connection) -> None:
        conn.stage = READY
        if conn.connector is not None:
            conn.connector.renegotiated = False
            conn.connector.backoff_s = None  # reconnect_ivl_max's backoff starts over
            conn.connector.failed_handshakes = 0
        conn.next_ping = time.monotonic() + self.heartbeat.interval
        self._due(conn.next_ping)
        peer = conn.peer
        with self.lock:
            self._lb.add(peer)
            self.cond.notify_all()
        self._emit(zmq.EVENT_HANDSHAKE_SUCCEEDED, 0, conn.endpoint)

    def _message_frames(self, conn: Connection, data: bytes, i: int) -> int:
        """Whole frames after the handshake: messages into the inbox, commands answered."""
        encrypted = conn.mechanism.name != b"NULL"
        overhead = 33 if encrypted else 0  # CURVE's MESSAGE: name, nonce, MAC and flags around the payload
        limit = (self.max_message_bytes if self.max_message_bytes is not None else HARD_FRAME_LIMIT) + overhead
        frames: list[ParsedFrame] = []
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
            else:  # single-part messages only: the frames are the messages (bodies alone)
                self._deliver(conn, cast("list[bytes]", frames))
        if too_large is not None:
            raise too_large
        return i

    def _frames_in_order(self, conn: Connection, frames: list[ParsedFrame], encrypted: bool) -> None:
        """Frames with flags (``parse_frames``'s tuples) or sealed by CURVE, one by one:
        commands answered, multipart messages dropped whole (49/SCATTERGATHER) or, on a
        socket that takes them (``multipart``), delivered as a tuple of their frames once
        the last one came; messages delivered (also those before a frame that fails)."""
        out: list[EngineMessage] = []
        append = out.append
        in_multipart = conn.in_multipart
        decode = conn.mechanism.decode
        multipart = self.multipart
        joined = 0  # bytes of the multipart messages in ``out``, beyond len() of the tuples
        # a frame is exactly bytes or a (flags, body) tuple: ``type(f) is tuple`` does not
        # narrow the other case for mypy
        each: list[Any] = frames
        try:
            for frame in each:
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
                    in_multipart = bool(flags & MORE)
                    if multipart:
                        self._add_part(conn, body)
                        if not in_multipart:
                            append(tuple(conn.parts))
                            joined += conn.parts_bytes
                            conn.parts, conn.parts_bytes = [], 0
                    elif not in_multipart:
                        # a single-part socket drops a multipart message whole (49/SCATTERGATHER)
                        self.discarded_multipart += 1
                    continue
                append(body)
        finally:
            conn.in_multipart = in_multipart
            if out:
                self._deliver(conn, out, None if not joined else
                              sum(len(m) if type(m) is not tuple else 0 for m in out) + joined)

    def _add_part(self, conn: Connection, body: bytes) -> None:
        """One frame of a multipart message being assembled. The whole message is held
        until its last frame, so its size is bounded: its frames' bytes plus
        ``PART_OVERHEAD`` per frame (what a frame costs us in memory, so a stream of empty
        frames is bounded too) may not pass ``max_message_bytes`` (else 2 GiB); past it
        the connection closes, as for a frame that is too large."""
        conn.parts.append(body)
        conn.parts_bytes += len(body)
        conn.parts_cost += len(body) + PART_OVERHEAD
        limit = self.max_message_bytes if self.max_message_bytes is not None else HARD_FRAME_LIMIT
        if conn.parts_cost > limit:
            parts = len(conn.parts)
            conn.parts, conn.parts_bytes, conn.parts_cost = [], 0, 0
            raise ZmtpError(f"a multipart message exceeds max_message_bytes={limit} at its frame {parts} "
                            f"(its frames' bytes plus {PART_OVERHEAD} per frame count)")

    def _deliver(self, conn: Connection, messages: Sequence[EngineMessage], nbytes: Optional[int] = None) -> None:
        """Queue ``messages`` (``bytes``, or tuples of frames on a ``multipart`` socket, whose
        bytes the caller counts in ``nbytes``) in the peer's inbox."""
        peer = conn.peer
        if self.socket_type in (b"SCATTER", b"PUSH"):
            return  # a send-only socket ignores messages (a well-behaved peer sends none)
        with self.lock:
            paused = self._fq.deliver(peer, messages, nbytes)
            if self.waiters:
                self.cond.notify()
        if paused:
            self._set_events(conn, (selectors.EVENT_WRITE if conn.out else 0))

    def _resume(self, conn: Connection) -> None:
        peer = conn.peer
        with self.lock:
            peer.paused = False
            peer.resume_asked = False
        conn.resumed = time.monotonic()  # its silence counts from now, not from the pause
        if conn.stage == CLOSED:
            return
        self._set_events(conn, selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0))
        if conn.pending and conn.pending_len >= conn.need:  # a whole frame was waiting
            data = b"".join(conn.pending)
            conn.pending, conn.pending_len = [], 0
            try:
                self._feed(conn, data)
            except ZmtpError as exc:
                self._fail(conn, exc)

    # -- commands and heartbeats -------------------------------------------------------

    def _on_command(self, conn: Connection, body: bytes) -> None:
        name, data = parse_command(body)
        if name == b"PING":
            self._on_ping(conn, data)
        elif name == b"ERROR":
            raise error_from_command(data, is_server=not conn.initiator)
        # PONG and commands of other socket types (SUBSCRIBE, CANCEL) need nothing

    def _on_ping(self, conn: Connection, data: bytes) -> None:
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

    def _heartbeat_warning(self, conn: Connection, what: str) -> None:
        if conn.heartbeat_warnings < _HEARTBEAT_WARNINGS:
            conn.heartbeat_warnings += 1
            log.warning("%s: the peer at %s sends %s", self.label, conn.address, what)

    def _heartbeat(self, conn: Connection, now: float) -> float:
        """Send the PING that is due, drop a connection whose peer stayed silent past the
        timeout (after our PING) or past its own PING's TTL; returns the time to the next
        heartbeat event of ``conn``."""
        expired = conn.heartbeat_expired(now, self.heartbeat, self._ack_liveness_bytes)
        if expired is not None:
            self.heartbeat_timeouts += 1
            self._fail(conn, ZmtpError(expired, zmq.EVENT_DISCONNECTED, errno.ETIMEDOUT))
            return 1.0
        if conn.ping_due(now, self.heartbeat, self.receive_only) and conn.out_bytes < _MAX_PENDING_REPLY_BYTES and not conn.finished:
            # (a peer that does not read what we queued gets no more PINGs, nor one whose
            # sending side we shut down at close; silence still counts from the first)
            conn.queue_command(self._ping)
            self._flush(conn)
            if conn.stage == CLOSED:
                return 1.0
        return conn.next_heartbeat_in(now)

    # -- output ------------------------------------------------------------------------

    def _flush(self, conn: Connection) -> None:
        try:
            self._write(conn)
        except ZmtpError as exc:
            self._fail(conn, exc)
            return
        except OSError as exc:
            self._lost(conn, exc.errno or 0)
            return
        if conn.stage == CLOSED:
            return
        wanted = self._read_events(conn) | (selectors.EVENT_WRITE if conn.out else 0)
        self._set_events(conn, wanted)

    def _refill(self, conn: Connection) -> bool:
        """Take the next messages to send (orphans first) into the write buffer."""
        peer = conn.peer
        with self.lock:
            source = self.orphans if self.orphans else peer.outbox
            if not source:
                return False
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
        encode = None if conn.mechanism.name == b"NULL" else conn.mechanism.encode
        ends = encode_messages(batch, conn.out, conn.written, encode, getattr(conn.mechanism, "encode_batch", None))
        offset = ends[-1]
        conn.out_bytes += offset - conn.written
        conn.inflight, conn.inflight_ends = batch, ends
        conn.batch_base = conn.sent_total
        return True

    def _write(self, conn: Connection) -> None:
        if conn.stage == CLOSED or conn.connecting:
            return
        while True:
            if not conn.out:
                if conn.inflight and conn.track_acks:  # written whole: unconfirmed until acknowledged
                    base = conn.batch_base
                    conn.unacked.extend(zip(map(base.__add__, conn.inflight_ends), conn.inflight))
                    conn.trim_acked()
                conn.inflight, conn.inflight_ends = [], []
                conn.written = 0
                if conn.stage != READY or not self._refill(conn):
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

    # -- mechanisms --------------------------------------------------------------------

    def new_mechanism(self, conn: Connection) -> Mechanism:
        declare = lambda peer: self._declare(conn, peer)  # noqa: E731
        accept = lambda metadata: self._accept(conn, metadata)  # noqa: E731
        if self.curve is None:
            return NullMechanism(conn.initiator, declare, accept)
        from .curve import CurveClient, CurveServer
        keys = self._mechanism_keys
        assert keys is not None  # prepared from ``curve`` (Engine._prepare_curve)
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

    def _declare(self, conn: Connection, peer: Optional[dict[str, bytes]]) -> dict[str, bytes]:
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

    def _accept(self, conn: Connection, metadata: dict[str, bytes]) -> None:
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
