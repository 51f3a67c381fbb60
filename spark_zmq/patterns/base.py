"""The base of every pattern class (``PatternSocket``): making the socket, bounded waits,
sending, receiving, closing; ``socket_options`` checks its arguments, ``frames`` its messages.

Why a layer over pyzmq at all: the connector needs the same few things from every socket
(CZMQ-style endpoints, validated options, ``TimeoutError`` instead of ``zmq.Again``, a
close that interrupts a blocked caller, batch receives for throughput). SCATTER/GATHER
(49/SCATTERGATHER) do not exist in pyzmq's bundled libzmq: ``scattergather`` builds them on
this package's own ZMTP engine (``zmtp``) behind the same API.

Timeouts are in seconds (``None`` = wait forever, ``0`` = do not wait), as in ``queue.Queue``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar, Optional, Sequence, TypeVar

import zmq

from .curve import Curve, secure_context
from .endpoints import Endpoint, EndpointsSpec, attach
from .frames import Frames, Message, as_frame, check_bytes_messages, flatten, frame_len, too_large
from .handshakes import HANDSHAKE_FAILURES, HandshakeWatch, open_monitor
from .heartbeat import Heartbeat
from .rcvmore import rcvmore_check
from .recv_values import recv_values_from
from .socket_options import apply_tuning, check_common, set_common_options, timeout_deadline

__all__ = ["PatternSocket", "SocketClosedError"]

# A blocked call re-checks for close() at least this often (seconds), so close() from
# another thread never waits on a call that would otherwise block forever.
_WAIT_SLICE_S = 0.1

# Frames at least this large (immutable ``bytes`` only) are handed to libzmq without a copy.
_ZERO_COPY_MIN_BYTES = 65536

# send/recv flags as plain ints: pyzmq's constants are ``IntFlag`` members, and combining
# them (``NOBLOCK | SNDMORE``) builds a new enum member each time, 2 us per frame here
_NOBLOCK = int(zmq.NOBLOCK)
_NOBLOCK_SNDMORE = int(zmq.NOBLOCK | zmq.SNDMORE)

#: ``with SomeSocket(...) as s``: ``s`` has the class it was made of
_Socket = TypeVar("_Socket", bound="PatternSocket")


class SocketClosedError(RuntimeError):
    """The socket was closed (possibly by another thread) while a call used it."""


class SendTimeoutError(TimeoutError):
    """``send_many`` waited ``timeout`` for room for one message: the ``sent`` messages
    before it were queued, the rest were not (a caller resumes from ``messages[sent:]``)."""

    def __init__(self, message: str, sent: int) -> None:
        super().__init__(message)
        self.sent = sent


class PatternSocket:
    """Base of ``Push``, ``Pull``, ``Scatter``, ``Gather``, ``Pub``, ``Sub``, ``XPub``, ``XSub``.

    ``Cls(endpoints, *, hwm=None, **options)``; options are ``linger`` (ms, default 0 for
    receivers and 1000 for senders), ``reconnect_ivl`` (ms), ``max_message_bytes``
    (ZMQ_MAXMSGSIZE: a peer sending more is disconnected by libzmq; ``send`` refuses it
    with ``ValueError``), ``immediate`` (ZMQ_IMMEDIATE: queue only to completed
    connections), ``rcvbuf``/``sndbuf`` (kernel buffers, bytes) and ``context`` (a
    ``zmq.Context``; by default the process-wide ``zmq.Context.instance()`` so that
    ``inproc://`` works between instances in one process), ``monitor`` (ZMQ_EVENT_* bits
    to watch: ``handshakes.poll()`` returns them) and ``curve`` (a ``curve.Curve``: CURVE
    encryption, as a client or as a ZAP-authenticating server; a server given no context
    gets a context of its own, see ``curve.secure_context``). A socket with ``curve`` or
    ``monitor`` counts its rejected handshakes in ``handshakes.rejected``.
    """

    socket_type: ClassVar[int]
    default_bind: ClassVar[bool]
    can_send: ClassVar[bool] = False
    can_recv: ClassVar[bool] = False
    #: 49/SCATTERGATHER sockets refuse multipart messages.
    single_part: ClassVar[bool] = False
    default_linger_ms: ClassVar[int] = 0

    #: libzmq's heartbeat timeout on this socket type (see ``heartbeat``: not for a receiver
    #: that applies backpressure, which would drop live peers with what their buffers hold)
    heartbeat_zmtp_timeout: ClassVar[bool] = True
    #: whether libzmq sends PINGs of its own on this socket (``Heartbeat.apply``)
    heartbeat_pings: ClassVar[bool] = True

    def __init__(self, endpoints: EndpointsSpec, *, hwm: Optional[int] = None, **options: Any) -> None:
        self._closed = True  # until the socket exists, so __del__/close are safe
        hwm, curve = self._check_common(endpoints, hwm, options)
        context = options.get("context") or (
            secure_context() if curve is not None and curve.is_server else zmq.Context.instance()
        )
        self._zap = None
        self._lock = threading.Lock()
        self._socket: zmq.Socket[Any] = context.socket(self.socket_type)
        self._closed = False
        # only receiving sockets ask (the check probes the socket once when it is made)
        self._rcvmore = rcvmore_check(self._socket) if self.can_recv else None
        try:
            sock = self._socket
            set_common_options(sock, options, hwm, self.max_message_bytes, self.default_linger_ms)
            self.heartbeat.apply(sock, zmtp_timeout=self.heartbeat_zmtp_timeout, pings=self.heartbeat_pings)
            self._configure(sock, options)
            apply_tuning(sock, options)
            if curve is not None:
                self._zap = curve.apply(sock)
            # A monitor must exist before bind/connect, or it misses the first events.
            events = int(options.get("monitor") or 0) | (HANDSHAKE_FAILURES if curve is not None else 0)
            self.monitor_socket: Optional[zmq.Socket[Any]] = open_monitor(sock, events) if events else None
            self.handshakes: Optional[HandshakeWatch] = (
                HandshakeWatch(self.monitor_socket, is_server=curve is None or curve.is_server,
                               label=type(self).__name__, curve=curve is not None)
                if self.monitor_socket is not None else None
            )
            self._bound: list[str] = []
            for endpoint in self._endpoints:
                bound = attach(sock, endpoint, type(self).__name__)
                if bound is not None:
                    self._bound.append(bound)
        except BaseException:
            self._release(linger=0)
            self._closed = True
            raise

    # -- construction helpers -------------------------------------------------------------

    def _check_common(
        self, endpoints: EndpointsSpec, hwm: Optional[int], options: dict[str, Any]
    ) -> tuple[Optional[int], Optional[Curve]]:
        """Validate what every pattern class takes (option names, endpoints, ``hwm``,
        ``max_message_bytes``, ``curve``); sets ``_endpoints`` and ``max_message_bytes``,
        returns ``(hwm, curve)``."""
        checked = check_common(type(self).__name__, endpoints, hwm, options, self.default_bind, self._extra_options())
        self._endpoints: list[Endpoint] = checked.endpoints
        self.max_message_bytes: Optional[int] = checked.max_message_bytes
        #: liveness of every connection (``heartbeat.Heartbeat``; the default is on)
        self.heartbeat: Heartbeat = checked.heartbeat
        return checked.hwm, checked.curve

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        """Options a subclass adds (e.g. ``topics`` for ``Sub``)."""
        return ()

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        """Subclass hook, run before bind/connect (subscriptions, socket-type options)."""

    # -- introspection ----------------------------------------------------------------------

    @property
    def endpoints(self) -> list[Endpoint]:
        """The parsed endpoints, as given."""
        return list(self._endpoints)

    @property
    def bound_addresses(self) -> list[str]:
        """Actual addresses of the bound endpoints (a ``*`` port resolved to the real one)."""
        return list(self._bound)

    @property
    def last_endpoint(self) -> str:
        """The last bound address, e.g. ``tcp://127.0.0.1:49152`` after binding ``tcp://127.0.0.1:*``."""
        if not self._bound:
            raise ValueError(f"{type(self).__name__} has no bound endpoint")
        return self._bound[-1]

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        """The underlying pyzmq socket, for monitors and options this layer does not wrap."""
        return self._socket

    # -- waiting --------------------------------------------------------------------------

    def _acquire(self, deadline: Optional[float]) -> None:
        if deadline is None:
            while not self._lock.acquire(timeout=_WAIT_SLICE_S):
                self._check_open()
        else:
            if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{type(self).__name__}: timed out waiting for another thread using the socket")
        if self._closed:
            self._lock.release()
            self._check_open()

    def _check_open(self) -> None:
        if self._closed or self._closing:
            raise SocketClosedError(f"{type(self).__name__} is closed")

    def _wait(self, event: int, deadline: Optional[float], what: str) -> None:
        """Poll (lock held) until ``event`` is ready, the deadline passes, or close() is called.

        The socket is polled at least once, even when the deadline has already passed
        (``timeout=0``): libzmq throttles command processing in a non-blocking send, so a
        peer's "queue has room again" (activate_write) may still be pending when the send
        fails with EAGAIN, and only a poll processes it. Raising ``TimeoutError`` without that
        poll made ``send(timeout=0)`` fail spuriously right after a receiver drained the
        queue (30/PIPELINE: a peer whose queue is not full is available).
        """
        while True:
            if deadline is None:
                slice_s = _WAIT_SLICE_S
            else:
                slice_s = min(_WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
            if self._socket.poll(int(slice_s * 1000) if slice_s > 0 else 0, event):
                return
            if self._closing:
                raise SocketClosedError(f"{type(self).__name__} was closed during {what}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{type(self).__name__}.{what} timed out{self._timeout_hint(what)}")

    def _timeout_hint(self, what: str) -> str:
        if what == "send":
            return f" (no peer available on {', '.join(map(str, self._endpoints))})"
        return ""

    _closing = False

    # -- sending --------------------------------------------------------------------------

    def _frames(self, data: Frames) -> list[Message]:
        if isinstance(data, (list, tuple)):
            if self.single_part:
                raise ValueError(
                    f"{type(self).__name__} sends single-part messages only (49/SCATTERGATHER); "
                    f"got a {type(data).__name__} of {len(data)} frames"
                )
            if not data:
                raise ValueError("cannot send a message with no frames")
            frames = [as_frame(f, f"frame {i} of the message") for i, f in enumerate(data)]
        else:
            frames = [as_frame(data, "the message")]
        if self.max_message_bytes is not None:
            for frame in frames:
                if frame_len(frame) > self.max_message_bytes:
                    raise too_large(frame_len(frame), self.max_message_bytes)
        return frames

    def _check_can_send(self) -> None:
        if not self.can_send:
            raise TypeError(f"{type(self).__name__} only receives; it has no send()")

    def _check_send_many(self, messages: Sequence[bytes]) -> None:
        """What ``send_many`` takes, checked before anything is sent: ``bytes`` messages
        within ``max_message_bytes``."""
        self._check_can_send()
        check_bytes_messages(messages, self.max_message_bytes)

    def send(self, data: Frames, timeout: Optional[float] = None) -> None:
        """Send one message (bytes-like, or a list of frames where the pattern allows).

        Blocks while no peer is available (``timeout`` seconds at most, then
        ``TimeoutError``); never discards what it cannot queue.
        """
        self._check_can_send()
        frames = self._frames(data)
        deadline = timeout_deadline(timeout)
        self._acquire(deadline)
        try:
            self._send_locked(frames, deadline)
        finally:
            self._lock.release()

    def send_many(self, messages: Sequence[bytes], timeout: Optional[float] = None) -> int:
        """Send single-frame ``bytes`` messages in order, under one lock round-trip: the
        sink's fast path. ``timeout`` bounds the wait for each message, as in ``send``;
        on ``TimeoutError`` the messages before it were sent (``sent`` attribute of the
        error says how many)."""
        self._check_send_many(messages)
        self._acquire(timeout_deadline(timeout))
        sent = 0
        try:
            send, NOBLOCK = self._socket.send, _NOBLOCK
            for message in messages:
                while True:
                    try:
                        send(message, NOBLOCK, copy=len(message) < _ZERO_COPY_MIN_BYTES)
                        break
                    except zmq.Again:
                        try:
                            self._wait(zmq.POLLOUT, timeout_deadline(timeout), "send")
                        except TimeoutError as exc:
                            raise SendTimeoutError(str(exc), sent) from None
                sent += 1
            return sent
        finally:
            self._lock.release()

    def _send_locked(self, frames: list[Message], deadline: Optional[float]) -> None:
        """Queue one whole message without blocking libzmq; wait (bounded) while no peer
        can take it.

        Only an immutable ``bytes`` frame is sent zero-copy: libzmq keeps referencing a
        zero-copy buffer until the message leaves the process, so a ``bytearray`` or
        ``memoryview`` the caller reuses after ``send`` returned would change (or, when
        resized, break) a message already accepted. The RFCs say a sender SHALL NOT modify
        outgoing messages, so mutable buffers are copied at send time.
        """
        sock = self._socket
        last = len(frames) - 1
        while True:
            i = 0
            try:
                for i, frame in enumerate(frames):
                    zero_copy = type(frame) is bytes and len(frame) >= _ZERO_COPY_MIN_BYTES
                    sock.send(frame, _NOBLOCK_SNDMORE if i < last else _NOBLOCK, copy=not zero_copy)
                return
            except zmq.Again:
                if i == 0:  # no peer can take it: wait (bounded) until one can
                    self._wait(zmq.POLLOUT, deadline, "send")
                # else: once a message's first frame is accepted libzmq accepts the rest
                # (the high-water mark counts whole messages), except when the pipe it was
                # going to is terminated in between (its peer left): libzmq then drops the
                # frames written so far and answers EAGAIN, meaning "send the whole message
                # again"

    # -- receiving ------------------------------------------------------------------------

    def recv_multipart(self, timeout: Optional[float] = None) -> list[bytes]:
        """Receive one whole message as its list of frames."""
        batch = self.recv_batch(1, timeout)
        return batch[0]

    def recv(self, timeout: Optional[float] = None) -> bytes:
        """Receive one message and return its body: the only frame, or the last frame of a
        multi-frame message (the payload of a ``[topic, payload]`` message). Use
        ``recv_multipart`` to see every frame."""
        return self.recv_multipart(timeout)[-1]

    def _check_can_recv(self) -> None:
        if not self.can_recv:
            raise TypeError(f"{type(self).__name__} only sends; it has no recv()")

    def _check_recv(self, max_messages: int) -> None:
        """A batch receive's arguments."""
        self._check_can_recv()
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages!r}")

    def _start_recv(self, max_messages: int, timeout: Optional[float]) -> Optional[float]:
        """Check a batch receive's arguments and take the lock; returns the deadline."""
        self._check_recv(max_messages)
        deadline = timeout_deadline(timeout)
        self._acquire(deadline)
        return deadline

    def recv_batch(
        self, max_messages: int, timeout: Optional[float] = None, max_bytes: Optional[int] = None
    ) -> list[list[bytes]]:
        """Wait up to ``timeout`` for one message, then take up to ``max_messages`` (and
        about ``max_bytes`` of frames, at least one message) that are already queued,
        without waiting again. One lock round-trip for many messages: this is the receive
        loop's fast path."""
        deadline = self._start_recv(max_messages, timeout)
        try:
            return self._recv_batch_locked(max_messages, deadline, max_bytes)
        finally:
            self._lock.release()

    def _recv_batch_locked(
        self, max_messages: int, deadline: Optional[float], max_bytes: Optional[int] = None
    ) -> list[list[bytes]]:
        out: list[list[bytes]] = []
        recv_one = self._recv_one_nowait
        while True:
            message = recv_one()
            if message is not None:
                out.append(message)
                break
            self._wait(zmq.POLLIN, deadline, "recv")
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

    def recv_values(
        self, max_messages: int, timeout: Optional[float] = None, max_bytes: Optional[int] = None
    ) -> tuple[list[bytes], Optional[list[Optional[bytes]]]]:
        """Like ``recv_batch``, flattened for throughput: ``(values, topics)``.

        A one-frame message is a value (topic ``None``); a multi-frame message is
        ``[topic, payload...]``: its first frame is the topic and the rest, joined, the value.
        ``topics`` is ``None`` when every message had one frame. Why this exists: the
        connector's receivers spend their time here, and the loop (``recv_values_from``) reads
        frame by frame with no list per message. Returns empty lists only when every message
        that arrived was discarded (multipart on a single-part socket).
        """
        deadline = self._start_recv(max_messages, timeout)
        try:
            if type(self)._recv_one_nowait is not PatternSocket._recv_one_nowait:
                # a subclass filters or sets messages aside there (XPub): one receive path,
                # so no hook is bypassed; the frame-by-frame fast path is for the rest
                messages = self._recv_batch_locked(max_messages, deadline, max_bytes)
                return flatten(messages, self._discard_multipart if self.single_part else None)
            more = self._rcvmore
            assert more is not None  # a receiving socket (``can_recv``) has the check
            return recv_values_from(self._socket, more, max_messages, max_bytes,
                                    lambda: self._wait(zmq.POLLIN, deadline, "recv"),
                                    self._discard_multipart if self.single_part else None)
        finally:
            self._lock.release()

    def poll_recv(self, timeout: Optional[float] = 0.0) -> bool:
        """Whether a message is ready to receive, waiting up to ``timeout`` seconds for one."""
        self._check_can_recv()
        deadline = timeout_deadline(timeout)
        self._acquire(deadline)
        try:
            try:
                self._wait(zmq.POLLIN, deadline, "recv")
                return True
            except TimeoutError:
                return False
        finally:
            self._lock.release()

    def _discard_multipart(self) -> None:
        """Called when a single-part socket drained a multipart message (GATHER)."""

    def _recv_one_nowait(self) -> Optional[list[bytes]]:
        """One whole message or ``None`` if nothing is queued (subclasses filter here)."""
        sock = self._socket
        try:
            frames = [sock.recv(_NOBLOCK)]
        except zmq.Again:
            return None
        more = self._rcvmore
        assert more is not None  # a receiving socket (``can_recv``) has the check
        while more():  # (a message's parts arrive together: the rest is there)
            frames.append(sock.recv(_NOBLOCK))
        return frames

    # -- lifetime -------------------------------------------------------------------------

    def close(self, linger: Optional[int] = None) -> None:
        """Close the socket; a call blocked in another thread raises ``SocketClosedError``.

        ``linger`` (ms) overrides the socket's linger for pending outgoing messages.
        """
        if self._closed:
            return
        self._closing = True
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release(linger)

    def _release(self, linger: Optional[int]) -> None:
        """Close the monitor, the socket and (CURVE server) its ZAP domain, in that order:
        the domain's handler may stop with it, and must outlive the socket's handshakes."""
        monitor: Optional[zmq.Socket[Any]] = self.__dict__.get("monitor_socket")
        if monitor is not None:
            self._socket.disable_monitor()
            monitor.close(0)
        self._socket.close(linger=linger)
        if self._zap is not None:
            self._zap.release()

    def __enter__(self: _Socket) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._closed:
                self._socket.close(linger=0)
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else ",".join(map(str, self._endpoints))
        return f"<{type(self).__name__} {state}>"
