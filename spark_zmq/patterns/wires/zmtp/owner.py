"""What one connection's protocol (``stream.StreamEngine``) sees of the socket that owns it:
the settings it is given when it is made, and the few calls it makes back.

libzmq gives each connection its own engine object behind a small interface to its
session; this module is that interface. The protocol object parses and writes one
connection's bytes on its own; whatever touches the socket's shared state (the queues
under the lock, the round-robin and fair-queue policies, the counters, the other
connections, reconnecting) is the owner's, reached only through ``ConnectionOwner``.
So the protocol never reads an attribute of the engine, and the modules import one way:
``engine`` -> ``sessions`` -> ``stream`` -> ``handshake`` -> ``connection``, each of them -> ``owner``
(which imports only ``codec``, and ``connection`` for the type checker). However a
connection ends, its owner hears it once, from ``ConnectionOwner.ended`` with an
``EndReason`` (libzmq's ``engine_error(reason)``).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import zmq

from ...message_block import MessageRun
from .codec import ZmtpError

if TYPE_CHECKING:
    from ...heartbeat import Heartbeat
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
    the endpoint keeps its queue (``EndReason.RENEGOTIATE``)."""


class EndReason(enum.Enum):
    """Why a connection ended, as its protocol tells its owner (``ConnectionOwner.ended``):
    libzmq's ``stream_engine_base_t::error_reason_t`` (``protocol_error``,
    ``connection_error``, ``timeout_error``), named finer where the owner acts differently.
    Whatever the reason, the messages the connection held go back to the socket (its
    endpoint's queue, or the socket's orphans), a connect endpoint reconnects and, for a
    connection past its handshake, the monitor gets ``EVENT_DISCONNECTED`` and a peer that
    left holding messages of ours counts in ``lost_peers``."""

    #: the peer closed the connection (end of stream; no ``exc``). libzmq: ``connection_error``.
    #: This and ``CONNECTION_BROKEN`` during the handshake: the peer refused it or is no
    #: ZeroMQ peer (``EVENT_HANDSHAKE_FAILED_NO_DETAIL``; a CURVE connector tries the other
    #: socket type next)
    PEER_CLOSED = "peer closed"
    #: the OS socket failed (ECONNRESET, EPIPE, ...: ``exc.value`` is the errno); counted in
    #: ``broken_connections`` once READY. libzmq: ``connection_error``
    CONNECTION_BROKEN = "connection broken"
    #: the peer broke ZMTP or was refused (``exc``: what libzmq's monitor reports; its ERROR
    #: reply, if any, was sent): during the handshake, that monitor event and a longer wait
    #: before a connect endpoint's next try; after it, counted in ``broken_connections`` (and a
    #: CURVE gap in ``sequence_gaps``) and logged. libzmq: ``protocol_error``
    PROTOCOL_ERROR = "protocol error"
    #: the peer told us its socket type after we announced ours and wants the other answer
    #: (``exc`` a ``Renegotiate``): not a failure, the endpoint reconnects at once and keeps
    #: its queue. libzmq has none (it refuses the handshake: ``protocol_error``)
    RENEGOTIATE = "renegotiate"
    #: the greeting and handshake took longer than ``handshake_ivl`` (``exc``; then as
    #: ``PROTOCOL_ERROR``). libzmq: ``timeout_error`` (its handshake timer)
    HANDSHAKE_TIMEOUT = "handshake timeout"
    #: the peer stayed silent past the heartbeat timeout after our PING, or past its own
    #: PING's TTL (``exc``); counted in ``heartbeat_timeouts``, then as ``PROTOCOL_ERROR``.
    #: libzmq: ``timeout_error``
    HEARTBEAT_TIMEOUT = "heartbeat timeout"
    #: a non-blocking connect failed (no ``exc``; no event, no log: the endpoint retries).
    #: libzmq: its connecter's failure, before an engine exists
    CONNECT_FAILED = "connect failed"
    #: an unexpected exception of ours on the connection (logged where it was caught; no
    #: ``exc``): the connection is closed rather than left out of step with its stream.
    #: libzmq has none
    INTERNAL_ERROR = "internal error"


def socket_failed(exc: OSError) -> tuple[EndReason, ZmtpError | None]:
    """Why a connection whose OS socket raised ``exc`` ended: ``CONNECTION_BROKEN`` with its
    errno (``ZmtpError.value``), or, without one, ``PEER_CLOSED``."""
    code = exc.errno
    if not code:
        return EndReason.PEER_CLOSED, None
    return EndReason.CONNECTION_BROKEN, ZmtpError(
        f"connection broken: {os.strerror(code)}", zmq.EVENT_DISCONNECTED, code
    )


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

    def ended(self, conn: Connection, reason: EndReason, exc: ZmtpError | None = None) -> None:
        """``conn`` is over, for ``reason`` (``exc``: what happened, where the reason has one;
        see ``EndReason``): the owner closes it, settles its messages and decides whether
        and when its endpoint reconnects (libzmq's ``i_engine`` reporting
        ``engine_error(reason)`` to its session). The first call closes the connection; a
        later one for the same connection does nothing."""
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
