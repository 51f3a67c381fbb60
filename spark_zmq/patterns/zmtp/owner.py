"""What one connection's protocol (``stream.StreamEngine``) sees of the socket that owns it:
the settings it is given when it is made, and the few calls it makes back.

libzmq gives each connection its own engine object behind a small interface to its
session; this module is that interface. The protocol object parses and writes one
connection's bytes on its own; whatever touches the socket's shared state (the queues
under the lock, the round-robin and fair-queue policies, the counters, the other
connections, reconnecting) is the owner's, reached only through ``ConnectionOwner``.
So the protocol never reads an attribute of the engine, and the modules import one way:
``engine`` -> ``sessions`` -> ``stream`` -> ``connection``, each of them -> ``owner``
(which imports only ``codec``, and ``connection`` for the type checker).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..message_block import MessageRun
from .codec import ZmtpError

if TYPE_CHECKING:
    from ..heartbeat import Heartbeat
    from .codec import EngineMessage
    from .connection import Connection, Peer


@dataclass(frozen=True)
class Settings:
    """The socket's settings a connection's protocol reads: fixed for the socket's life,
    made once by the engine and shared by its connections."""

    #: our ZMTP socket type, and what we answer each peer type with (``Engine.peer_types``)
    socket_type: bytes
    peer_types: dict[bytes, bytes]
    #: the socket's name in log lines
    label: str
    #: the largest message taken (``None``: the codec's hard limit)
    max_message_bytes: int | None
    #: received multipart messages are delivered (as tuples of frames), not dropped
    multipart: bool
    #: the socket only receives (PULL, GATHER): PINGs only after a whole interval of silence
    receive_only: bool
    heartbeat: Heartbeat
    #: the PING command this socket sends (its TTL field depends on ``receive_only``)
    ping: bytes
    #: acknowledged bytes past a PING that prove a live consumer
    ack_liveness_bytes: int
    #: how long a connection has for its greeting and handshake
    handshake_ivl_s: float


class Renegotiate(ZmtpError):
    """The peer told us its socket type after we announced ours (we had to speak first) and
    wants the other answer (a PUSH peer needs a PULL, not a GATHER): not a refusal. The
    connection is closed and opened again at once, announcing what the peer accepts, and
    the endpoint keeps its queue (``ConnectionOwner.failed``)."""


class ConnectionOwner(Protocol):
    """The calls a connection's protocol makes to its owner (the engine's sessions). All
    run on the I/O thread; the owner takes the lock where the application shares state."""

    def deliver(self, conn: Connection, messages: Sequence[EngineMessage], nbytes: int | None) -> bool:
        """Queue received ``messages`` in ``conn``'s peer's inbox (``nbytes``: their bytes
        when some are tuples of frames, else ``None``); ``True`` when the inbox is now full
        and ``conn`` must stop reading (the owner resumes it once the inbox drained)."""
        ...

    def deliver_run(self, conn: Connection, run: MessageRun) -> bool:
        """As ``deliver``, for single-part messages split in bulk (``codec.plain_run``)."""
        ...

    def take_outgoing(self, peer: Peer) -> list[EngineMessage] | None:
        """The next messages to write to ``peer``'s connection (what the socket holds of
        broken connections first), about one write batch; ``None`` when there are none
        (callers waiting for the queues to drain are told)."""
        ...

    def written(self) -> None:
        """A connection wrote everything it had and takes nothing more now (it is not
        ready): callers waiting for the queues to drain look again."""
        ...

    def peer_ready(self, conn: Connection) -> None:
        """``conn`` completed its handshake: its peer may be sent to."""
        ...

    def command(self, conn: Connection, body: bytes) -> None:
        """A command frame arrived after the handshake. The owner sees every command first
        (where libzmq's session sees SUBSCRIBE and CANCEL) and hands the ones it does not
        take back to the connection (``StreamEngine.on_command``: PING, ERROR)."""
        ...

    def lost(self, conn: Connection, code: int) -> None:
        """The peer closed ``conn`` (``code`` 0) or it broke (an errno)."""
        ...

    def failed(self, conn: Connection, exc: ZmtpError) -> None:
        """``conn`` broke the protocol or was refused (its ERROR reply, if any, was sent)."""
        ...

    def expired(self, conn: Connection, exc: ZmtpError) -> None:
        """The peer of ``conn`` stayed silent past the heartbeat timeout or its PING's TTL."""
        ...

    def abort(self, conn: Connection, *, quiet: bool = False) -> None:
        """Close ``conn`` (a failed connect, ``quiet``; an error of ours): its messages go
        back to the socket."""
        ...

    def discarded(self, count: int) -> None:
        """``count`` multipart messages were dropped whole (a socket that takes single
        parts only, 49/SCATTERGATHER)."""
        ...

    def emit(self, event: int, value: int, address: str) -> None:
        """A socket-monitor event (``zmq.EVENT_*``) for ``address``."""
        ...

    def due(self, at: float) -> None:
        """A clock of the connection (handshake deadline, heartbeat, TTL) was set to
        ``at`` (monotonic seconds): the owner looks at the connection no later."""
        ...
