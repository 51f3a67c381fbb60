"""The wire contract: what the connector's ingest and sink use of a data socket.

Two wires carry the data patterns: libzmq through pyzmq (``PatternSocket`` and its
classes: ``Pull``, ``Sub``, ``XPub``...) and the package's own ZMTP engine (``zmtp``:
``ZmtpPull``, ``Gather``, ``Scatter``, ``ReroutingPush``). ``wires.receiving_wire`` and
``wires.sending_wire`` choose the wire for each pattern and return the socket as a
``ReceivingWire`` or a ``SendingWire``: the ingest (``ingest.receiver``, ``source.batch``)
and the sink (``sink.send``) hold these types and nothing more concrete, and mypy checks
that every class the factories return satisfies them.

What every data socket guarantees, whichever wire carries it:

* It is attached when it is made: every endpoint is bound (``@``) or connected (``>``)
  before the factory returns. A bind or connect that fails raises ``OSError`` naming the
  address (a port in use: ``errno.EADDRINUSE``), and nothing of the socket stays open.
* Timeouts are seconds, as in ``queue.Queue``: ``None`` waits without limit, ``0`` does
  not wait (but looks once). A wait that runs out raises the built-in ``TimeoutError``.
* ``close`` may come from any thread: a call blocked in another thread then raises
  ``SocketClosedError`` within a tenth of a second, and so does every later call.
  ``close`` again does nothing.
* Counters start at 0 when the socket is opened and only grow; reading one takes no lock.
  A wire that cannot observe what a counter counts reports 0: libzmq tells its application
  nothing of broken connections, lost peers, or what its queues held at close.
* Events: ``handshakes`` is the socket's monitor, present when the socket was made with
  ``curve`` or with ``monitor`` (``ZMQ_EVENT_*`` bits), else ``None``.
  ``handshakes.poll(timeout_s)`` returns the watched events that came (waiting up to
  ``timeout_s`` for the first), and counts and logs rejected handshakes
  (``handshakes.rejected``, the last one's text in ``handshakes.last_rejection``). Its owner
  polls it regularly, even while it waits for something else: a libzmq monitor's queue has
  no limit.

``PatternSocket`` reads the counters from its wire, and the libzmq wire reports 0 for each.

Inside a socket the same promises are split in two. The API class (``base.PatternSocket``)
checks arguments, options, frames and timeouts (a timeout becomes a deadline there), keeps
the endpoints and the socket's lifetime (``deadlines.SocketState``), and hands the I/O to
its wire, a ``SocketWire``: ``wires.libzmq.LibzmqWire`` (a pyzmq socket) or
``wires.engine.EngineWire`` (this package's ZMTP engine). A socket class picks its wire with
``wire_class`` (a ``WireClass``); mypy checks that both wires satisfy ``SocketWire``, and both
wait by the one rule of ``deadlines`` (a slice at a time, ``SocketClosedError`` once the
socket is closing, ``TimeoutError`` past the deadline, at least one look first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..endpoints import Endpoint
from ..frames import Frames, Message
from ..handshakes import HandshakeWatch
from ..message_block import MessageBlock

if TYPE_CHECKING:
    import zmq

    from ..curve import Curve
    from ..deadlines import SocketState
    from ..heartbeat import Heartbeat

__all__ = [
    "EngineSocketSpec",
    "LibzmqSocketSpec",
    "ReceivingWire",
    "SendingWire",
    "SocketSpec",
    "SocketWire",
    "Wire",
    "WireClass",
]


class Wire(Protocol):
    """What a receiving and a sending data socket have in common."""

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints it was attached to, as given."""
        ...

    @property
    def bound_addresses(self) -> list[str]:
        """The addresses it bound (a ``*`` port resolved to the real one)."""
        ...

    @property
    def closed(self) -> bool: ...

    @property
    def handshakes(self) -> HandshakeWatch | None:
        """The socket's events and rejected handshakes (see the module's docstring)."""
        ...

    @property
    def broken_connections(self) -> int:
        """Connections that ended other than by the peer's orderly close (a reset, a
        timeout, a heartbeat timeout, a protocol error), with whatever the peer had in
        flight on them. Counted on the engine; 0 on libzmq."""
        ...

    def close(self, linger: int | None = None) -> None:
        """Close the socket. ``linger`` (ms) bounds how long a sender still waits for what
        it holds to leave (``0``: drop it at once, ``-1``: no limit, ``None``: the socket's
        own linger); a receiver's queue is discarded, so a receiver drains it first."""
        ...


class ReceivingWire(Wire, Protocol):
    """A data socket the ingest receives on: ``pull``, ``gather``, ``sub``."""

    def recv_values(
        self, max_messages: int, timeout: float | None = None, max_bytes: int | None = None
    ) -> tuple[list[bytes], list[bytes | None] | None]:
        """Wait up to ``timeout`` for a message, then take what is already queued without
        waiting again: up to ``max_messages`` messages (``>= 1``, else ``ValueError``) and
        about ``max_bytes`` of values (at least one message).

        Returns ``(values, topics)``: a one-frame message is a value (topic ``None``); a
        multi-frame one is ``[topic, payload...]``, its first frame the topic and the rest,
        joined, the value. ``topics`` is ``None`` when every message had one frame.
        ``TimeoutError`` when no message came in time; empty lists when every message that
        came was discarded (a multipart message on ``gather``, which is single-part).
        """
        ...

    def recv_block(self, max_messages: int, timeout: float | None = None, max_bytes: int | None = None) -> MessageBlock:
        """As ``recv_values``, the values joined in one ``MessageBlock`` (what a spool batch's
        column is made of): the receivers' fast path, with no object per message where the
        wire splits frames in bulk (the package's engine)."""
        ...

    def poll_recv(self, timeout: float | None = 0.0) -> bool:
        """Whether a message waits to be received, waiting up to ``timeout`` seconds for
        one (``False`` then, never ``TimeoutError``)."""
        ...

    def interrupt(self) -> None:
        """A receive blocked in another thread gives up now with ``TimeoutError``
        (``poll_recv``: ``False``), as at its timeout; later calls are not affected."""
        ...


class SendingWire(Wire, Protocol):
    """A data socket the sink sends on: ``push``, ``scatter``, ``pub``."""

    def send(self, data: Frames, timeout: float | None = None) -> None:
        """Queue one message: bytes-like, or a list of frames where the pattern has
        multipart messages (``push``, ``pub``; ``scatter`` raises ``ValueError``). Blocks
        while no peer can take it (``pub`` made with ``nodrop``: while a subscriber's queue
        is full), ``timeout`` seconds at most, then ``TimeoutError``: what cannot be queued
        is never dropped unseen. A frame over ``max_message_bytes`` raises ``ValueError``."""
        ...

    def send_many(self, messages: Sequence[bytes], timeout: float | None = None) -> int:
        """Queue single-frame ``bytes`` messages in order (the sink's fast path; all are
        checked before the first is queued) and return how many: all of them. ``timeout``
        bounds the wait for each message, as in ``send``; on ``SendTimeoutError`` (a
        ``TimeoutError``) the messages before it were queued, and its ``sent`` says how many."""
        ...

    def recv(self, timeout: float | None = None) -> bytes:
        """The next message a peer sent upstream: on ``pub`` (XPUB) a subscription
        (``b"\\x01" + topic``) or an unsubscription (``b"\\x00" + topic``), which the sink
        waits for before it publishes. ``push`` and ``scatter`` have no upstream messages:
        ``TypeError``."""
        ...

    @property
    def lost_peers(self) -> int:
        """Connections that broke while they held messages of this socket (queued, being
        written, or not yet acknowledged by the peer's TCP). Counted on the engine; 0 on
        libzmq."""
        ...

    @property
    def resent(self) -> int:
        """Messages sent again to another peer (or the same endpoint once it came back)
        because the peer they were written to left before its TCP acknowledged them.
        Counted on the engine; 0 on libzmq, which drops or keeps such a queue unseen."""
        ...

    @property
    def unsent(self) -> int:
        """After ``close``: messages the socket still held, never written to a peer.
        Counted on the engine; 0 on libzmq (``zmq.Context.term`` is how libzmq tells that
        its queued messages left the process)."""
        ...

    @property
    def unconfirmed(self) -> int:
        """After ``close`` of a socket made with ``confirm=True`` (the engine's option):
        messages written that no peer's TCP acknowledged within the linger. 0 otherwise."""
        ...


class SocketWire(Protocol):
    """The I/O half of a socket, behind its API class (``base.PatternSocket``).

    The API class has checked every argument before it calls in: ``frames`` are checked
    frames, ``messages`` checked ``bytes``, ``max_messages >= 1``. A ``deadline`` is
    ``time.monotonic()`` seconds (``None``: no limit); a wait looks at least once, raises
    ``SocketClosedError`` once the socket is closing and ``TimeoutError`` past the deadline
    (``deadlines``). Counters and events are the contract's (``Wire``).
    """

    #: the socket's events and rejected handshakes, or ``None`` (see ``Wire.handshakes``)
    handshakes: HandshakeWatch | None

    # -- open / attach: made configured by its ``WireClass``, then attached and started --

    def attach(self, endpoint: Endpoint) -> str | None:
        """Bind (the real address is returned) or connect ``endpoint``; an ``OSError``
        naming the address when that fails."""
        ...

    def start(self) -> None:
        """Begin the I/O, once every endpoint is attached."""
        ...

    def abort(self) -> None:
        """Release what was made when attaching or starting failed."""
        ...

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        """The pyzmq socket, or ``AttributeError`` on a wire that has none."""
        ...

    # -- sending --

    def send_frames(self, frames: list[Message], deadline: float | None) -> None:
        """Queue one whole message, waiting until ``deadline`` while no peer can take it."""
        ...

    def send_many(self, messages: Sequence[bytes], timeout: float | None, deadline: float | None) -> int:
        """Queue single-frame messages in order: ``timeout`` bounds the wait for each one
        (``SendTimeoutError`` with ``sent``), ``deadline`` is the first's."""
        ...

    # -- receiving --

    def receive(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> list[list[bytes]]:
        """Wait until ``deadline`` for one message, then take up to ``max_messages`` (and
        about ``max_bytes``) already queued, each as its list of frames."""
        ...

    def receive_values(
        self, max_messages: int, deadline: float | None, max_bytes: int | None
    ) -> tuple[list[bytes], list[bytes | None] | None]:
        """As ``receive``, flattened to ``(values, topics)`` (``ReceivingWire.recv_values``)."""
        ...

    def interrupt(self) -> None:
        """A receive waiting now raises ``TimeoutError`` (``SocketState.check_receiving``)."""
        ...

    def receive_block(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> MessageBlock:
        """As ``receive_values``, as one ``MessageBlock`` (``ReceivingWire.recv_block``)."""
        ...

    def wait_readable(self, deadline: float | None) -> bool:
        """Whether a message waits, waiting until ``deadline`` for one."""
        ...

    # -- close --

    def close(self, linger: int | None) -> None:
        """Let a sender's queue leave within ``linger`` ms (``None``: the socket's own),
        set the socket's state ``closing`` (a blocked call raises at its next look), and
        release everything, setting the state ``closed`` (the libzmq wire does both under
        its lock, once the call holding it let go)."""
        ...

    def abandon(self) -> None:
        """The socket was dropped unclosed (``__del__``): release it without waiting."""
        ...

    # -- counters (``Wire``, ``SendingWire``; 0 where the wire cannot tell) --

    @property
    def broken_connections(self) -> int: ...

    @property
    def lost_peers(self) -> int: ...

    @property
    def resent(self) -> int: ...

    @property
    def unsent(self) -> int: ...

    @property
    def unconfirmed(self) -> int: ...


class SocketSpec(Protocol):
    """What a wire reads of the socket it is made for: the socket class's declarations and
    the options the API class checked. A protocol, not the API class, so that a wire never
    imports the class that holds it."""

    @property
    def endpoints(self) -> list[Endpoint]: ...

    @property
    def can_recv(self) -> bool: ...

    @property
    def can_send(self) -> bool: ...

    @property
    def single_part(self) -> bool: ...

    @property
    def default_linger_ms(self) -> int: ...

    @property
    def max_message_bytes(self) -> int | None: ...

    @property
    def heartbeat(self) -> Heartbeat: ...


class LibzmqSocketSpec(SocketSpec, Protocol):
    """What the libzmq wire reads besides: the libzmq socket type, how libzmq's heartbeats
    apply to it, and the class's hook run before bind/connect (subscriptions...)."""

    @property
    def socket_type(self) -> int: ...

    @property
    def heartbeat_zmtp_timeout(self) -> bool: ...

    @property
    def heartbeat_pings(self) -> bool: ...

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None: ...


class EngineSocketSpec(SocketSpec, Protocol):
    """What the engine wire reads besides: the ZMTP socket type it announces, and the type
    it announces to each kind of peer it accepts."""

    @property
    def zmtp_type(self) -> bytes: ...

    @property
    def peer_types(self) -> dict[bytes, bytes]: ...


class WireClass(Protocol):
    """What a socket class names as its ``wire_class``: the options the wire adds to the
    common ones, and how to make one for a socket whose arguments were checked."""

    @property
    def extra_options(self) -> tuple[str, ...]: ...

    def __call__(
        self, owner: Any, state: SocketState, hwm: int | None, curve: Curve | None, options: dict[str, Any]
    ) -> SocketWire: ...
