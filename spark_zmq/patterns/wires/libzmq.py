"""The libzmq wire: a socket's I/O through one pyzmq socket (``wires.contract.SocketWire``).

It owns what only libzmq has: the pyzmq socket and the lock that makes one call at a time
use it (pyzmq sockets are not thread-safe), the poll-based wait (``deadlines``' rule: poll a
slice, look at ``closing`` and the deadline), sending without blocking libzmq, the receive
loop (``recv_values.recv_values_from``), and at close the monitor, the socket and a CURVE
server's ZAP domain. The API class (``base.PatternSocket``) checks the arguments, frames
and timeouts before it calls in, and keeps the endpoints and the socket's lifetime.

A class whose socket needs more than this wire does (``XPub``: subscriptions set aside and
``nodrop``; ``Router``: mandatory routing) sets a subclass of ``LibzmqWire`` as its
``wire_class``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import zmq

from ..curve import Curve, secure_context
from ..deadlines import IDLE_SLICE_S, SendTimeoutError, SocketState, first_slice, next_slice
from ..deadlines import WAIT_SLICE_S as _WAIT_SLICE_S
from ..endpoints import Endpoint, attach
from ..frames import Message, flatten
from ..handshakes import HANDSHAKE_FAILURES, HandshakeWatch, open_monitor
from ..message_block import MessageBlock
from ..rcvmore import rcvmore_check
from ..recv_values import recv_values_from
from ..socket_options import apply_tuning, set_common_options, timeout_deadline

if TYPE_CHECKING:
    from .contract import LibzmqSocketSpec

__all__ = ["LibzmqWire"]

# Frames at least this large (immutable ``bytes`` only) are handed to libzmq without a copy.
_ZERO_COPY_MIN_BYTES = 65536

# send/recv flags as plain ints: pyzmq's constants are ``IntFlag`` members, and combining
# them (``NOBLOCK | SNDMORE``) builds a new enum member each time, a cost per frame
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_SNDMORE = int(zmq.NOBLOCK | zmq.SNDMORE)

# the first pause before retrying a message the socket refused although it said it had room
# (``LibzmqWire.wait_for_room``); each next one doubles, up to a wait slice
_REFUSED_FIRST_S = 0.001


class LibzmqWire:
    """One pyzmq socket of ``owner``'s ``socket_type``, configured (common options,
    heartbeat, the class's ``_configure``, tuning, CURVE, monitor) but not yet attached."""

    #: options this wire takes beyond the common ones
    extra_options: ClassVar[tuple[str, ...]] = ()
    #: libzmq tells its application nothing of what these count (``wires.contract``)
    broken_connections: ClassVar[int] = 0
    lost_peers: ClassVar[int] = 0
    resent: ClassVar[int] = 0
    unsent: ClassVar[int] = 0
    unconfirmed: ClassVar[int] = 0

    def __init__(
        self, owner: LibzmqSocketSpec, state: SocketState, hwm: int | None, curve: Curve | None, options: dict[str, Any]
    ) -> None:
        self.state = state
        self.label = state.label
        self.send_hint = f" (no peer available on {', '.join(map(str, owner.endpoints))})"
        context = options.get("context") or (
            secure_context() if curve is not None and curve.is_server else zmq.Context.instance()
        )
        self.zap = None
        self.monitor_socket: zmq.Socket[Any] | None = None
        self.handshakes: HandshakeWatch | None = None
        self.lock = threading.Lock()
        #: written by ``close`` and ``interrupt`` to wake a wait, which polls it beside the
        #: socket (so a wait need not wake up every slice to look); ``_wake_lock`` keeps a
        #: write off the descriptors once ``release`` closed them (their numbers get reused)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._wake_lock = threading.Lock()
        self._pollers: dict[int, zmq.Poller] = {}
        self.socket: zmq.Socket[Any] = context.socket(owner.socket_type)
        #: a single-part socket reports a multipart message it dropped here (none on libzmq)
        self.discard_multipart = self._discard_multipart if owner.single_part else None
        #: a subclass filters or sets messages aside in ``recv_one_nowait`` (XPub): then
        #: ``receive_values`` takes that path too, so no hook is bypassed
        self.filtered = type(self).recv_one_nowait is not LibzmqWire.recv_one_nowait
        #: a subclass whose ``wait`` for POLLOUT paces itself (XPub with NODROP: libzmq's XPUB
        #: always reports room) is waited on for every refusal, not backed off here
        self.own_wait = type(self).wait is not LibzmqWire.wait
        try:
            sock = self.socket
            # only receiving sockets ask (the check probes the socket once when it is made)
            self.rcvmore = rcvmore_check(sock) if owner.can_recv else None
            set_common_options(sock, options, hwm, owner.max_message_bytes, owner.default_linger_ms)
            owner.heartbeat.apply(sock, zmtp_timeout=owner.heartbeat_zmtp_timeout, pings=owner.heartbeat_pings)
            owner._configure(sock, options)
            self.configure(sock, options)
            apply_tuning(sock, options)
            if curve is not None:
                self.zap = curve.apply(sock)
            # A monitor must exist before bind/connect, or it misses the first events.
            events = int(options.get("monitor") or 0) | (HANDSHAKE_FAILURES if curve is not None else 0)
            self.monitor_socket = open_monitor(sock, events) if events else None
            if self.monitor_socket is not None:
                self.handshakes = HandshakeWatch(
                    self.monitor_socket,
                    is_server=curve is None or curve.is_server,
                    label=self.label,
                    curve=curve is not None,
                )
        except BaseException:
            self.release(linger=0)
            raise

    def configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        """Subclass hook, run before bind/connect, after the socket class's ``_configure``."""

    # -- attaching ------------------------------------------------------------------------

    def attach(self, endpoint: Endpoint) -> str | None:
        return attach(self.socket, endpoint, self.label)

    def start(self) -> None:
        """Nothing to start: libzmq's I/O thread runs already."""

    def abort(self) -> None:
        """Undo a construction that failed after the socket was made."""
        self.release(linger=0)

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        return self.socket

    # -- waiting --------------------------------------------------------------------------

    def acquire(self, deadline: float | None) -> None:
        """Take the socket's lock by ``deadline``; interrupted by ``close``."""
        state = self.state
        if deadline is None:
            while not self.lock.acquire(timeout=_WAIT_SLICE_S):
                state.check_open()
        else:
            if not self.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{self.label}: timed out waiting for another thread using the socket")
        if state.closed:
            self.lock.release()
            state.check_open()

    def wait(self, event: int, deadline: float | None, what: str) -> None:
        """Poll (lock held) until ``event`` is ready, the deadline passes, close() is called or
        (a receive) interrupt().

        The socket is polled at least once, even when the deadline has already passed
        (``timeout=0``): libzmq throttles command processing in a non-blocking send, so a
        peer's "queue has room again" (activate_write) may still be pending when the send
        fails with EAGAIN, and only a poll processes it. Raising ``TimeoutError`` without that
        poll made ``send(timeout=0)`` fail spuriously right after a receiver drained the
        queue (30/PIPELINE: a peer whose queue is not full is available).
        """
        state = self.state
        began = state.interrupts
        poller = self._pollers.get(event)
        if poller is None:  # the socket and the wake-up pipe, polled together from the first look
            poller = self._pollers[event] = zmq.Poller()
            poller.register(self.socket, event)
            poller.register(self._wake_r, zmq.POLLIN)
        check = (
            partial(state.check_receiving, began, what) if event == zmq.POLLIN else partial(state.check_during, what)
        )
        slice_s: float | None = first_slice(deadline)
        while slice_s is not None:
            ready = dict(poller.poll(int(slice_s * 1000)))
            if ready.get(self.socket, 0) & event:
                return
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    pass
            slice_s = next_slice(deadline, check, IDLE_SLICE_S)
        raise TimeoutError(f"{self.label}.{what} timed out{self.send_hint if what == 'send' else ''}")

    def wake(self) -> None:
        """Wake a wait in progress (``close``, ``interrupt``): it looks at once."""
        with self._wake_lock:
            if self._wake_w >= 0:
                try:
                    os.write(self._wake_w, b"\0")
                except OSError:  # the pipe is full: a wake-up is already pending
                    pass

    def interrupt(self) -> None:
        """A receive waiting now gives up with ``TimeoutError`` (``SocketState.check_receiving``)."""
        self.state.interrupts += 1
        self.wake()

    def wait_for_room(self, deadline: float | None, refusals: int) -> None:
        """Wait (lock held) after a send was refused (EAGAIN) ``refusals`` times before this
        one; ``TimeoutError`` at ``deadline``, ``SocketClosedError`` once ``close()`` starts.

        The first refusal polls for POLLOUT (``wait``). A refusal after that poll said the
        socket has room means the poll cannot tell: a ROUTER (``ROUTER_MANDATORY``) is
        writable while any one peer's queue has room, and a message to a peer whose queue is
        full is refused however often it is retried. Polling again would return at once and
        make the retry loop spin a core, never looking at the deadline or at ``close()``
        (one client that sent requests and read no reply held a relay's serving thread, and
        its shutdown, for good). So from the second refusal on the deadline and ``closing``
        are checked before every retry, and the retries back off (``_REFUSED_FIRST_S``
        doubling up to a wait slice), each after a zero-time poll that lets libzmq take in
        the peer's "room again".
        """
        if refusals == 0 or self.own_wait:
            self.wait(zmq.POLLOUT, deadline, "send")
            return
        self.state.check_during("send")
        pause = min(_REFUSED_FIRST_S * (1 << min(refusals - 1, 16)), _WAIT_SLICE_S)
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{self.label}.send timed out (the socket has room, but not for this message: "
                    f"the peer it goes to has not taken what is queued for it)"
                )
            pause = min(pause, remaining)
        time.sleep(pause)
        self.socket.poll(0, zmq.POLLOUT)

    def wait_readable(self, deadline: float | None) -> bool:
        self.acquire(deadline)
        try:
            try:
                self.wait(zmq.POLLIN, deadline, "recv")
                return True
            except TimeoutError:
                return False
        finally:
            self.lock.release()

    # -- sending --------------------------------------------------------------------------

    def send_frames(self, frames: list[Message], deadline: float | None) -> None:
        self.acquire(deadline)
        try:
            self.send_locked(frames, deadline)
        finally:
            self.lock.release()

    def send_many(self, messages: Sequence[bytes], timeout: float | None, deadline: float | None) -> int:
        self.acquire(deadline)
        sent = 0
        try:
            send, NOBLOCK = self.socket.send, _NOBLOCK
            for message in messages:
                refusals = 0
                message_deadline = timeout_deadline(timeout)
                while True:
                    try:
                        send(message, NOBLOCK, copy=len(message) < _ZERO_COPY_MIN_BYTES)
                        break
                    except zmq.Again:
                        try:
                            self.wait_for_room(message_deadline, refusals)
                        except TimeoutError as exc:
                            raise SendTimeoutError(str(exc), sent) from None
                        refusals += 1
                sent += 1
            return sent
        finally:
            self.lock.release()

    def send_locked(self, frames: list[Message], deadline: float | None) -> None:
        """Queue one whole message without blocking libzmq; wait (bounded) while no peer
        can take it.

        Only an immutable ``bytes`` frame is sent zero-copy: libzmq keeps referencing a
        zero-copy buffer until the message leaves the process, so a ``bytearray`` or
        ``memoryview`` the caller reuses after ``send`` returned would change (or, when
        resized, break) a message already accepted. The RFCs say a sender SHALL NOT modify
        outgoing messages, so mutable buffers are copied at send time.

        The deadline holds even while the socket says it has room: a ROUTER's POLLOUT means
        *some* peer can take a message, not the one this message is routed to
        (``wait_for_room``), so a reply to a peer that reads nothing fails at its deadline
        (``timeout=0``: at once) instead of retrying forever.
        """
        sock = self.socket
        last = len(frames) - 1
        refusals = 0
        while True:
            i = 0
            try:
                for i, frame in enumerate(frames):
                    zero_copy = type(frame) is bytes and len(frame) >= _ZERO_COPY_MIN_BYTES
                    sock.send(frame, _NOBLOCK_SNDMORE if i < last else _NOBLOCK, copy=not zero_copy)
                return
            except zmq.Again:
                if i == 0:  # no peer can take it: wait (bounded) until one can
                    self.wait_for_room(deadline, refusals)
                    refusals += 1
                # else: once a message's first frame is accepted libzmq accepts the rest
                # (the high-water mark counts whole messages), except when the pipe it was
                # going to is terminated in between (its peer left): libzmq then drops the
                # frames written so far and answers EAGAIN, meaning "send the whole message
                # again"

    # -- receiving ------------------------------------------------------------------------

    def receive(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> list[list[bytes]]:
        self.acquire(deadline)
        try:
            return self.receive_locked(max_messages, deadline, max_bytes)
        finally:
            self.lock.release()

    def receive_locked(
        self, max_messages: int, deadline: float | None, max_bytes: int | None = None
    ) -> list[list[bytes]]:
        out: list[list[bytes]] = []
        recv_one = self.recv_one_nowait
        while True:
            message = recv_one()
            if message is not None:
                out.append(message)
                break
            self.wait(zmq.POLLIN, deadline, "recv")
        if max_bytes is None:
            while len(out) < max_messages:
                message = recv_one()
                if message is None:
                    break
                out.append(message)
            return out
        size = sum(map(len, out[0]))
        while len(out) < max_messages and size < max_bytes:
            message = recv_one()
            if message is None:
                break
            out.append(message)
            size += sum(map(len, message))
        return out

    def receive_block(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> MessageBlock:
        """``receive_values`` joined: libzmq hands messages over one by one anyway."""
        values, topics = self.receive_values(max_messages, deadline, max_bytes)
        return MessageBlock.from_values(values, topics)

    def receive_values(
        self, max_messages: int, deadline: float | None, max_bytes: int | None
    ) -> tuple[list[bytes], list[bytes | None] | None]:
        """The frame-by-frame loop (``recv_values_from``), or whole messages flattened
        when a subclass filters them (``filtered``)."""
        self.acquire(deadline)
        try:
            if self.filtered:
                return flatten(self.receive_locked(max_messages, deadline, max_bytes), self.discard_multipart)
            more = self.rcvmore
            assert more is not None  # a receiving socket (``can_recv``) has the check
            return recv_values_from(
                self.socket,
                more,
                max_messages,
                max_bytes,
                lambda: self.wait(zmq.POLLIN, deadline, "recv"),
                self.discard_multipart,
            )
        finally:
            self.lock.release()

    def _discard_multipart(self) -> None:
        """Called when a single-part socket drained a multipart message (none on libzmq)."""

    def recv_one_nowait(self) -> list[bytes] | None:
        """One whole message or ``None`` if nothing is queued (subclasses filter here)."""
        sock = self.socket
        try:
            frames = [sock.recv(_NOBLOCK)]
        except zmq.Again:
            return None
        more = self.rcvmore
        assert more is not None  # a receiving socket (``can_recv``) has the check
        while more():  # (a message's parts arrive together: the rest is there)
            frames.append(sock.recv(_NOBLOCK))
        return frames

    def set_option(self, option: int, value: Any) -> None:
        """Set a socket option between calls (under the lock; interrupted by ``close``)."""
        self.acquire(None)
        try:
            self.socket.setsockopt(option, value)
        finally:
            self.lock.release()

    # -- lifetime -------------------------------------------------------------------------

    def close(self, linger: int | None) -> None:
        """Mark the socket closing (a blocked call raises at its next look), then close it
        once the lock is free; ``linger`` (ms) overrides the socket's linger."""
        state = self.state
        state.closing = True
        self.wake()
        with self.lock:
            if not state.closed:
                state.closed = True
                self.release(linger)

    def release(self, linger: int | None) -> None:
        """Close the monitor, the socket and (CURVE server) its ZAP domain, in that order:
        the domain's handler may stop with it, and must outlive the socket's handshakes."""
        if self.monitor_socket is not None:
            self.socket.disable_monitor()
            self.monitor_socket.close(0)
        self.socket.close(linger=linger)
        if self.zap is not None:
            self.zap.release()
        self._close_wake()

    def _close_wake(self) -> None:
        with self._wake_lock:
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1

    def abandon(self) -> None:
        """The socket was dropped unclosed (``__del__``): close it without waiting."""
        self.socket.close(linger=0)
        self._close_wake()
