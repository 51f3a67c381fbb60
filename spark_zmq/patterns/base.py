"""The base of every pattern class (``PatternSocket``): the API a socket shows, over a wire
that does its I/O; ``socket_options`` checks its arguments, ``frames`` its messages.

Why a layer over pyzmq at all: the connector needs the same few things from every socket
(CZMQ-style endpoints, validated options, ``TimeoutError`` instead of ``zmq.Again``, a
close that interrupts a blocked caller, batch receives for throughput). SCATTER/GATHER
(49/SCATTERGATHER) do not exist in pyzmq's bundled libzmq: ``scattergather`` builds them on
this package's own ZMTP engine (``zmtp``) behind the same API.

One API over two wires: ``PatternSocket`` checks the arguments, options, frames
(``_frames``, ``check_bytes_messages``) and timeouts (made deadlines here), keeps the
endpoints, the socket's lifetime (``deadlines.SocketState``: closing, closed), ``with`` and
``repr``, and hands the I/O to the wire its class names in ``wire_class``: ``LibzmqWire``
(``wires.libzmq``: a pyzmq socket, the default) or ``EngineWire`` (``wires.engine``: the ZMTP
engine, for ``Scatter``, ``Gather``, ``ZmtpPull``, ``ReroutingPush``). Both satisfy
``wires.contract.SocketWire`` and wait by the one rule of ``deadlines``.

Timeouts are in seconds (``None`` = wait forever, ``0`` = do not wait), as in ``queue.Queue``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import zmq

from .curve import Curve
from .deadlines import SendTimeoutError as SendTimeoutError  # (re-exported: it was defined here)
from .deadlines import SocketClosedError, SocketState
from .endpoints import Endpoint, EndpointsSpec
from .frames import Frames, Message, as_frame, check_bytes_messages, frame_len, too_large
from .handshakes import HandshakeWatch
from .heartbeat import Heartbeat
from .message_block import MessageBlock
from .socket_options import SocketOptions, check_common, timeout_deadline
from .wires.contract import SocketWire, WireClass
from .wires.libzmq import LibzmqWire

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PatternSocket", "SocketClosedError"]

#: ``with SomeSocket(...) as s``: ``s`` has the class it was made of
_Socket = TypeVar("_Socket", bound="PatternSocket")


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
    ``monitor`` counts its rejected handshakes in ``handshakes.rejected``. The type checker
    knows every option's name and type (``socket_options.SocketOptions``).
    """

    socket_type: ClassVar[int]
    default_bind: ClassVar[bool]
    can_send: ClassVar[bool] = False
    can_recv: ClassVar[bool] = False
    #: 49/SCATTERGATHER sockets refuse multipart messages.
    single_part: ClassVar[bool] = False
    default_linger_ms: ClassVar[int] = 0
    #: the wire that carries this class's I/O (``wires.contract.SocketWire``)
    wire_class: ClassVar[WireClass] = LibzmqWire

    #: libzmq's heartbeat timeout on this socket type (see ``heartbeat``: not for a receiver
    #: that applies backpressure, which would drop live peers with what their buffers hold)
    heartbeat_zmtp_timeout: ClassVar[bool] = True
    #: whether libzmq sends PINGs of its own on this socket (``Heartbeat.apply``)
    heartbeat_pings: ClassVar[bool] = True

    def __init__(
        self, endpoints: EndpointsSpec, *, hwm: int | None = None, **typed_options: Unpack[SocketOptions]
    ) -> None:
        self._state = state = SocketState(type(self).__name__)  # closed until the wire is open
        options: dict[str, Any] = dict(typed_options)
        hwm, curve = self._check_common(endpoints, hwm, options)
        self._wire: SocketWire = self.wire_class(self, state, hwm, curve, options)
        self.handshakes: HandshakeWatch | None = self._wire.handshakes
        state.closed = False
        try:
            self._bound: list[str] = []
            for endpoint in self._endpoints:
                bound = self._wire.attach(endpoint)
                if bound is not None:
                    self._bound.append(bound)
            self._wire.start()
        except BaseException:
            state.closed = True
            self._wire.abort()
            raise

    # -- construction helpers -------------------------------------------------------------

    def _check_common(
        self, endpoints: EndpointsSpec, hwm: int | None, options: dict[str, Any]
    ) -> tuple[int | None, Curve | None]:
        """Validate what every pattern class takes (option names, endpoints, ``hwm``,
        ``max_message_bytes``, ``curve``); sets ``_endpoints`` and ``max_message_bytes``,
        returns ``(hwm, curve)``."""
        checked = check_common(
            type(self).__name__,
            endpoints,
            hwm,
            options,
            self.default_bind,
            self.wire_class.extra_options + self._extra_options(),
        )
        self._endpoints: list[Endpoint] = checked.endpoints
        self.max_message_bytes: int | None = checked.max_message_bytes
        #: liveness of every connection (``heartbeat.Heartbeat``; the default is on)
        self.heartbeat: Heartbeat = checked.heartbeat
        return checked.hwm, checked.curve

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        """Options a subclass adds (e.g. ``topics`` for ``Sub``), besides its wire's."""
        return ()

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        """Subclass hook of a libzmq socket, run before bind/connect (subscriptions,
        socket-type options)."""

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
        return self._state.closed

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        """The underlying pyzmq socket, for monitors and options this layer does not wrap
        (``AttributeError`` on a socket of the ZMTP engine, which has none)."""
        return self._wire.zmq_socket

    @property
    def _socket(self) -> zmq.Socket[Any]:
        return self._wire.zmq_socket

    @property
    def monitor_socket(self) -> zmq.Socket[Any] | None:
        """The libzmq monitor's socket (``monitor`` or ``curve`` given), else ``None``."""
        wire = self._wire
        if not isinstance(wire, LibzmqWire):
            raise AttributeError(f"{type(self).__name__} has no libzmq monitor (see handshakes)")
        return wire.monitor_socket

    # -- counters (the wire's: ``wires.contract``; 0 on libzmq, which cannot keep them) -----

    @property
    def broken_connections(self) -> int:
        """Connections that ended other than by the peer's orderly close (a reset, a
        timeout, a protocol error), with whatever the peer had in flight on them."""
        return self._wire.broken_connections

    @property
    def lost_peers(self) -> int:
        """Connections that broke, since the socket was opened, while they held messages of
        this socket (queued, being written, or not yet acknowledged by the peer's TCP)."""
        return self._wire.lost_peers

    @property
    def resent(self) -> int:
        """Messages sent again, since the socket was opened, because the peer they were
        written to left before its TCP acknowledged them (tcp only)."""
        return self._wire.resent

    @property
    def unsent(self) -> int:
        """After ``close()``: messages the socket still held (never written to a peer)."""
        return self._wire.unsent

    @property
    def unconfirmed(self) -> int:
        """After ``close()`` with ``confirm=True``: messages written that no peer's TCP
        acknowledged."""
        return self._wire.unconfirmed

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

    def send(self, data: Frames, timeout: float | None = None) -> None:
        """Send one message (bytes-like, or a list of frames where the pattern allows).

        Blocks while no peer is available (``timeout`` seconds at most, then
        ``TimeoutError``); never discards what it cannot queue.
        """
        self._check_can_send()
        frames = self._frames(data)
        self._wire.send_frames(frames, timeout_deadline(timeout))

    def send_many(self, messages: Sequence[bytes], timeout: float | None = None) -> int:
        """Send single-frame ``bytes`` messages in order, under one lock round-trip: the
        sink's fast path. ``timeout`` bounds the wait for each message, as in ``send``;
        on ``TimeoutError`` the messages before it were sent (``sent`` attribute of the
        error says how many)."""
        self._check_send_many(messages)
        return self._wire.send_many(messages, timeout, timeout_deadline(timeout))

    # -- receiving ------------------------------------------------------------------------

    def recv_multipart(self, timeout: float | None = None) -> list[bytes]:
        """Receive one whole message as its list of frames."""
        batch = self.recv_batch(1, timeout)
        return batch[0]

    def recv(self, timeout: float | None = None) -> bytes:
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

    def recv_batch(
        self, max_messages: int, timeout: float | None = None, max_bytes: int | None = None
    ) -> list[list[bytes]]:
        """Wait up to ``timeout`` for one message, then take up to ``max_messages`` (and
        about ``max_bytes`` of frames, at least one message) that are already queued,
        without waiting again. One lock round-trip for many messages: this is the receive
        loop's fast path."""
        self._check_recv(max_messages)
        return self._wire.receive(max_messages, timeout_deadline(timeout), max_bytes)

    def recv_values(
        self, max_messages: int, timeout: float | None = None, max_bytes: int | None = None
    ) -> tuple[list[bytes], list[bytes | None] | None]:
        """Like ``recv_batch``, flattened for throughput: ``(values, topics)``.

        A one-frame message is a value (topic ``None``); a multi-frame message is
        ``[topic, payload...]``: its first frame is the topic and the rest, joined, the value.
        ``topics`` is ``None`` when every message had one frame. Why this exists: the
        connector's receivers spend their time here, and the wires read without a list per
        message (libzmq: ``recv_values_from``, frame by frame; the engine: its inbox in one
        step). Returns empty lists only when every message that arrived was discarded
        (multipart on a single-part socket).
        """
        self._check_recv(max_messages)
        return self._wire.receive_values(max_messages, timeout_deadline(timeout), max_bytes)

    def recv_block(self, max_messages: int, timeout: float | None = None, max_bytes: int | None = None) -> MessageBlock:
        """Like ``recv_values``, the values joined in one ``MessageBlock``: the receivers'
        fast path (the engine's runs of frames reach it without an object per message)."""
        self._check_recv(max_messages)
        return self._wire.receive_block(max_messages, timeout_deadline(timeout), max_bytes)

    def interrupt(self) -> None:
        """Make a receive blocked in another thread give up now with ``TimeoutError`` (and
        ``poll_recv`` return ``False``), as if its timeout had passed; later calls are not
        affected. Why: a loop that receives with a long timeout (a receiver, a service)
        waits in the kernel while idle, and its ``stop()`` interrupts it to look at its stop
        flag, instead of the loop waking up every few milliseconds to look."""
        self._wire.interrupt()

    def poll_recv(self, timeout: float | None = 0.0) -> bool:
        """Whether a message is ready to receive, waiting up to ``timeout`` seconds for one."""
        self._check_can_recv()
        return self._wire.wait_readable(timeout_deadline(timeout))

    # -- lifetime -------------------------------------------------------------------------

    def close(self, linger: int | None = None) -> None:
        """Close the socket; a call blocked in another thread raises ``SocketClosedError``.

        ``linger`` (ms) overrides the socket's linger for pending outgoing messages.
        """
        if self._state.closed:
            return
        self._wire.close(linger)

    def __enter__(self: _Socket) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self._state.closed:
                self._wire.abandon()
        except Exception:  # noqa: BLE001  (a finalizer at interpreter exit: nothing to tell, nowhere to raise)
            pass

    def __repr__(self) -> str:
        state = "closed" if self._state.closed else ",".join(map(str, self._endpoints))
        return f"<{type(self).__name__} {state}>"
