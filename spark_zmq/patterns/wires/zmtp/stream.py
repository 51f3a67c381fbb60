"""ZMTP 3.1 on one connection (libzmq's stream engine): reading and writing its OS
socket, frames in both directions, commands (PING/PONG, ERROR) and heartbeats; the
greeting and the mechanism's handshake before them are ``handshake``'s.

``StreamEngine`` is one connection's protocol object: a ``handshake.Handshake`` (a
``Connection``, its state, that runs the handshake) with the methods that parse and write
its bytes. It gets the socket's settings when it is made
(``owner.Settings``) and reaches the socket only through ``owner.ConnectionOwner``
(deliver, take outgoing, ended with a reason, emit, due), as libzmq's stream engine talks to
its session: it reads no attribute of the engine, so the protocol can be read, and
tested, as one object, and no module of the engine imports another back. The hot paths
(``_read`` -> ``_feed`` -> ``_message_frames`` -> ``_frames_in_order``, and ``_flush`` ->
``_write`` -> ``_refill``) call the owner once per read or write batch, never per message,
through methods bound when the connection is made. Frames are parsed (a run of one size
in bulk) and encoded by ``codec`` alone.
"""

from __future__ import annotations

import errno
import itertools
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import zmq

from . import codec
from .codec import COMMAND, MORE, ParsedFrame, ZmtpError, parse_frames
from .connection import CLOSED, GREETING, HANDSHAKE, READY, Connector
from .handshake import Handshake
from .owner import EndReason, Renegotiate, socket_failed
from .wire import GREETING_SIZE, command, error_from_command, parse_command

if TYPE_CHECKING:
    from .mechanism import Mechanism
    from .owner import ConnectionOwner, Settings

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")

_READ_BYTES = 256 * 1024
#: a peer's PINGs are answered while less than this waits to be written (beyond it, a PING flood)
_MAX_PENDING_REPLY_BYTES = 64 * 1024
_IOV_MAX = 512
#: bytes a frame of a multipart message being assembled counts for beyond its body (a
#: Python ``bytes`` and its list slot), so empty frames cannot pile up without limit
PART_OVERHEAD = 64
#: PING flood and malformed heartbeat warnings: at most this many per connection
_HEARTBEAT_WARNINGS = 1


class StreamEngine(Handshake):
    """One connection's protocol (see the module's docstring): it registers its socket with
    ``selector`` itself and calls ``owner`` back; the owner drives it through
    ``start_greeting``, ``set_events``, ``flush``, ``fail``, ``heartbeat``, ``resume``,
    ``on_command`` and ``shutdown``."""

    def __init__(
        self,
        owner: ConnectionOwner,
        settings: Settings,
        selector: selectors.BaseSelector,
        sock: socket.socket,
        address: str,
        connector: Connector | None,
        endpoint: str,
        new_mechanism: Callable[[StreamEngine], Mechanism],
    ) -> None:
        self.owner = owner
        self.settings = settings
        self._selector = selector
        # bound once: the hot paths call them per read or write batch
        self._deliver_to = owner.deliver
        self._deliver_run = owner.deliver_run
        self._take = owner.take_outgoing
        self.multipart = settings.multipart
        #: a message (or a multipart message's frames with their overhead) larger than
        #: this closes the connection
        self.message_limit = (
            settings.max_message_bytes if settings.max_message_bytes is not None else codec.HARD_FRAME_LIMIT
        )
        super().__init__(sock, address, connector, endpoint, settings.handshake_ivl_s, lambda: new_mechanism(self))

    # -- reading and writing a connection ----------------------------------------------

    def on_io(self, mask: int) -> int:
        """The selector's callback: ``mask`` says what the socket is ready for. Returns the
        bytes read, which tell the loop whether the peer is streaming (``Poller``)."""
        if self.stage == CLOSED:
            return 0
        if self.connecting and mask & selectors.EVENT_WRITE:
            code = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                self.owner.ended(self, EndReason.CONNECT_FAILED)
                return 0
            self.connecting = False
            self.start_greeting()
        read = 0
        try:
            if mask & selectors.EVENT_READ:
                read = self._read()
            if self.stage != CLOSED:
                self.flush()  # replies, and (a new peer) what waits to be sent
        except ZmtpError as exc:
            self.fail(exc)
        except Exception:  # a bug of ours: never leave a connection out of step with its stream
            log.exception("%s: unexpected error on the connection of %s; closing it", self.settings.label, self.address)
            self.owner.ended(self, EndReason.INTERNAL_ERROR)
        return read

    def _read(self) -> int:
        """Read and parse what the socket holds, in a bounded number of reads; returns the bytes read."""
        read = 0
        for _ in range(16):  # bounded, so one busy peer cannot starve the others
            if self.peer.paused or self.stage == CLOSED:
                return read
            try:
                data = self.sock.recv(_READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return read
            except OSError as exc:
                self.owner.ended(self, *socket_failed(exc))
                return read
            if not data:
                self.owner.ended(self, EndReason.PEER_CLOSED)
                return read
            self.heard_from_peer(time.monotonic())
            read += len(data)
            self._feed(data)
            if len(data) < _READ_BYTES:
                return read
        return read

    def set_events(self, events: int) -> None:
        """Wait for ``events`` (``selectors.EVENT_*``) on the socket, and nothing else."""
        if self.stage == CLOSED or events == self.events:
            return
        if self.events == 0:
            self._selector.register(self.sock, events, self.on_io)
        elif events == 0:
            self._selector.unregister(self.sock)
        else:
            self._selector.modify(self.sock, events, self.on_io)
        self.events = events

    def shutdown(self) -> None:
        """The connection is over: out of the selector, its socket closed (the owner then
        settles its messages)."""
        self.stage = CLOSED
        try:
            if self.events:
                self._selector.unregister(self.sock)
        except (KeyError, ValueError):
            pass
        self.events = 0
        try:
            self.sock.close()
        except OSError:
            pass

    def fail(self, exc: ZmtpError, reason: EndReason = EndReason.PROTOCOL_ERROR) -> None:
        """The connection broke the protocol, was refused or (``reason``) timed out: the ERROR
        reply ``exc`` carries, if any, is written as it can be; the owner closes the connection."""
        if self.stage == CLOSED:
            return
        if isinstance(exc, Renegotiate):
            reason = EndReason.RENEGOTIATE
        elif exc.reply is not None:
            self.queue_frame(COMMAND, exc.reply)
            try:
                self._write()
            except OSError:
                pass
        self.owner.ended(self, reason, exc)

    # -- input: frames -----------------------------------------------------------------

    def _feed(self, data: bytes) -> None:
        if self.pending:
            self.pending.append(data)
            self.pending_len += len(data)
            if self.pending_len < self.need:
                return
            data = b"".join(self.pending)
            self.pending = []
            self.pending_len = 0
        i = 0
        if self.stage == GREETING:
            if len(data) < GREETING_SIZE:
                self.pending, self.pending_len, self.need = [data], len(data), GREETING_SIZE
                return
            self._on_greeting(data[:GREETING_SIZE])
            i = GREETING_SIZE
        if self.stage == HANDSHAKE:
            i = self._handshake_frames(data, i)
        if self.stage == READY and i < len(data):
            i = self._message_frames(data, i)
        if self.stage != CLOSED and i < len(data):
            rest = memoryview(data)[i:]  # no copy: joined with the next chunks once the frame is whole
            self.pending, self.pending_len = [rest], len(rest)

    def _message_frames(self, data: bytes, i: int) -> int:
        """Whole frames after the handshake: messages into the inbox, commands answered."""
        encrypted = self.mechanism.name != b"NULL"
        if not encrypted and not self.in_multipart:  # frames of one size back to back, split in bulk
            run, i = codec.plain_run(data, i, self.message_limit)
            if run is not None and self._deliver_run(self, run):
                self._pause()
        overhead = 33 if encrypted else 0  # CURVE's MESSAGE: name, nonce, MAC and flags around the payload
        frames: list[ParsedFrame] = []
        too_large = None
        try:
            i, self.need, flagged = parse_frames(data, i, self.message_limit + overhead, frames)
        except codec.FrameTooLarge as exc:  # what came before it is still delivered, then the connection closes
            too_large = ZmtpError(
                f"a message of {exc.size - overhead} bytes exceeds "
                f"max_message_bytes={self.settings.max_message_bytes or codec.HARD_FRAME_LIMIT}"
            )
            flagged = 1
        if frames:
            if flagged or encrypted or self.in_multipart:
                self._frames_in_order(frames, encrypted)
            elif self._deliver_to(self, cast("list[bytes]", frames), None):
                # single-part messages only: the frames are the messages (bodies alone)
                self._pause()
        if too_large is not None:
            raise too_large
        return i

    def _frames_in_order(self, frames: list[ParsedFrame], encrypted: bool) -> None:
        """Frames with flags (``parse_frames``'s tuples) or sealed by CURVE, one by one:
        commands to the owner, multipart messages dropped whole (49/SCATTERGATHER) or, on a
        socket that takes them (``multipart``), delivered as a tuple of their frames once
        the last one came; messages delivered (also those before a frame that fails)."""
        out: list[codec.EngineMessage] = []
        append = out.append
        in_multipart = self.in_multipart
        decode = self.mechanism.decode
        multipart = self.multipart
        joined = 0  # bytes of the multipart messages in ``out``, beyond len() of the tuples
        dropped = 0  # multipart messages dropped whole
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
                    self.owner.command(self, body)
                    continue
                if flags & MORE or in_multipart:
                    in_multipart = bool(flags & MORE)
                    if multipart:
                        self._add_part(body)
                        if not in_multipart:
                            append(tuple(self.parts))
                            joined += self.parts_bytes
                            self.parts, self.parts_bytes = [], 0
                    elif not in_multipart:
                        # a single-part socket drops a multipart message whole (49/SCATTERGATHER)
                        dropped += 1
                    continue
                append(body)
        finally:
            self.in_multipart = in_multipart
            if dropped:
                self.owner.discarded(dropped)
            if out and self._deliver_to(
                self, out, None if not joined else sum(len(m) if type(m) is not tuple else 0 for m in out) + joined
            ):
                self._pause()

    def _add_part(self, body: bytes) -> None:
        """One frame of a multipart message being assembled. The whole message is held
        until its last frame, so its size is bounded: its frames' bytes plus
        ``PART_OVERHEAD`` per frame (what a frame costs us in memory, so a stream of empty
        frames is bounded too) may not pass ``max_message_bytes`` (else 2 GiB); past it
        the connection closes, as for a frame that is too large."""
        self.parts.append(body)
        self.parts_bytes += len(body)
        self.parts_cost += len(body) + PART_OVERHEAD
        limit = self.message_limit
        if self.parts_cost > limit:
            parts = len(self.parts)
            self.parts, self.parts_bytes, self.parts_cost = [], 0, 0
            raise ZmtpError(
                f"a multipart message exceeds max_message_bytes={limit} at its frame {parts} "
                f"(its frames' bytes plus {PART_OVERHEAD} per frame count)"
            )

    def _pause(self) -> None:
        """The peer's inbox is full (backpressure): stop reading until the owner resumes us."""
        self.set_events(selectors.EVENT_WRITE if self.out else 0)

    def resume(self) -> None:
        """The peer's inbox drained (the owner cleared ``peer.paused``): read again, and
        feed what was already read, if a whole frame of it waits."""
        self.resumed = time.monotonic()  # its silence counts from now, not from the pause
        if self.stage == CLOSED:
            return
        self.set_events(selectors.EVENT_READ | (selectors.EVENT_WRITE if self.out else 0))
        if self.pending and self.pending_len >= self.need:  # a whole frame was waiting
            data = b"".join(self.pending)
            self.pending, self.pending_len = [], 0
            try:
                self._feed(data)
            except ZmtpError as exc:
                self.fail(exc)

    # -- commands and heartbeats -------------------------------------------------------

    def on_command(self, body: bytes) -> None:
        """A command the owner handed back (``ConnectionOwner.command``)."""
        name, data = parse_command(body)
        if name == b"PING":
            self._on_ping(data)
        elif name == b"ERROR":
            raise error_from_command(data, is_server=not self.initiator)
        # PONG and commands of other socket types (SUBSCRIBE, CANCEL) need nothing

    def _on_ping(self, data: bytes) -> None:
        """RFC 37: a PING is a 2-byte TTL (deciseconds) and a context of at most 16 bytes,
        echoed in the PONG. The TTL is honoured: no traffic from the peer within it closes
        the connection (it is 16 bits, so at most 6553.5 s: nothing absurd can be asked).
        Answers stop while our replies pile up unread (a PING flood from a peer that does
        not read), so memory stays bounded; a malformed PING or a flood is logged once."""
        if len(data) < 2 or len(data) > 18:
            self._heartbeat_warning(
                f"a malformed PING of {len(data)} bytes (RFC 37: a 2-byte TTL and at most 16 bytes of context); ignored"
            )
            if len(data) < 2:
                return
        ttl = int.from_bytes(data[:2], "big") / 10.0
        if ttl > 0:
            self.ttl_deadline = time.monotonic() + ttl
            self.owner.due(self.ttl_deadline)
        if self.finished:
            return  # our sending side is shut down (a close waiting for acknowledgements)
        if self.out_bytes < _MAX_PENDING_REPLY_BYTES:
            self.queue_command(command(b"PONG", data[2:18]))
        else:
            self._heartbeat_warning("PINGs faster than it reads our PONGs; not answering until it reads")

    def _heartbeat_warning(self, what: str) -> None:
        if self.heartbeat_warnings < _HEARTBEAT_WARNINGS:
            self.heartbeat_warnings += 1
            log.warning("%s: the peer at %s sends %s", self.settings.label, self.address, what)

    def heartbeat(self, now: float) -> float:
        """Send the PING that is due, drop the connection if its peer stayed silent past the
        timeout (after our PING) or past its own PING's TTL; returns the time to the next
        heartbeat event."""
        settings = self.settings
        expired = self.heartbeat_expired(now, settings.heartbeat, settings.ack_liveness_bytes)
        if expired is not None:
            self.owner.ended(
                self, EndReason.HEARTBEAT_TIMEOUT, ZmtpError(expired, zmq.EVENT_DISCONNECTED, errno.ETIMEDOUT)
            )
            return 1.0
        if (
            self.ping_due(now, settings.heartbeat, settings.receive_only)
            and self.out_bytes < _MAX_PENDING_REPLY_BYTES
            and not self.finished
        ):
            # (a peer that does not read what we queued gets no more PINGs, nor one whose
            # sending side we shut down at close; silence still counts from the first)
            self.queue_command(settings.ping)
            self.flush()
            if self.stage == CLOSED:
                return 1.0
        return self.next_heartbeat_in(now)

    # -- output ------------------------------------------------------------------------

    def flush(self) -> None:
        """Write what waits (replies, then the peer's messages) as far as the kernel takes
        it, and wait for the socket's events that are wanted now."""
        try:
            self._write()
        except ZmtpError as exc:
            self.fail(exc)
            return
        except OSError as exc:
            self.owner.ended(self, *socket_failed(exc))
            return
        if self.stage == CLOSED:
            return
        self.set_events((0 if self.peer.paused else selectors.EVENT_READ) | (selectors.EVENT_WRITE if self.out else 0))

    def _refill(self) -> bool:
        """Take the next messages to send from the owner into the write buffer."""
        batch = self._take(self.peer)
        if batch is None:
            return False
        mechanism = self.mechanism
        encode = None if mechanism.name == b"NULL" else mechanism.encode
        ends = codec.encode_messages(batch, self.out, self.written, encode, getattr(mechanism, "encode_batch", None))
        self.out_bytes += ends[-1] - self.written
        self.inflight, self.inflight_ends = batch, ends
        self.batch_base = self.sent_total
        return True

    def _write(self) -> None:
        if self.stage == CLOSED or self.connecting:
            return
        out = self.out
        while True:
            if not out:
                if self.inflight and self.track_acks:  # written whole: unconfirmed until acknowledged
                    base = self.batch_base
                    self.unacked.extend(zip(map(base.__add__, self.inflight_ends), self.inflight))
                    self.trim_acked()
                self.inflight, self.inflight_ends = [], []
                self.written = 0
                if self.stage != READY:
                    self.owner.written()  # a close() waiting for the queues to drain
                    return
                if not self._refill():
                    return
            chunks = list(itertools.islice(out, _IOV_MAX))
            try:
                sent = self.sock.sendmsg(chunks)
            except (BlockingIOError, InterruptedError):
                return
            self.out_bytes -= sent
            self.sent_total += sent
            if self.inflight:
                self.written += sent
            while sent:
                head = out[0]
                if sent >= len(head):
                    sent -= len(head)
                    out.popleft()
                else:
                    out[0] = memoryview(head)[sent:]
                    sent = 0
            if out:
                return  # a partial write: the kernel buffer is full, wait until writable
