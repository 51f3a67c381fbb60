"""The start of ZMTP 3.1 on one connection (libzmq's ``zmtp_engine_t`` handshake): our
greeting, the peer's, the mechanism's handshake commands until it is ready, and the
socket types each side declares (libzmq's ``mechanism_t::check_socket_type``).

``Handshake`` is a ``Connection`` with the methods that run before the first message;
``stream.StreamEngine``, the connection's protocol object, is one, and feeds it the bytes
it reads until the stage is ``READY``. Apart from the message stream because it runs once
per connection, not per message: the hot paths stay in ``stream``. Like the protocol
object, it reaches the socket only through ``owner.ConnectionOwner``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import zmq

from . import codec
from .codec import COMMAND, MORE, ParsedFrame, ZmtpError, parse_frames
from .connection import HANDSHAKE, READY, Connection
from .owner import Renegotiate
from .wire import greeting, parse_greeting, socket_type_of

if TYPE_CHECKING:
    from .owner import ConnectionOwner, Settings


class Handshake(Connection):
    """One connection up to its first message (see the module's docstring): the protocol
    object that inherits it (``stream.StreamEngine``) sets ``owner`` and ``settings``."""

    owner: ConnectionOwner
    settings: Settings

    # -- input: greeting, handshake ----------------------------------------------------

    def start_greeting(self) -> None:
        """The socket is connected: our greeting goes first."""
        self.start_ack_tracking()
        data = greeting(self.mechanism.name, self.mechanism.as_server)
        self.out.append(data)
        self.out_bytes += len(data)
        self.owner.emit(zmq.EVENT_CONNECTED if self.initiator else zmq.EVENT_ACCEPTED, 0, self.endpoint)

    def _on_greeting(self, data: bytes) -> None:
        version, mechanism, _ = parse_greeting(data)
        ours = self.mechanism
        if mechanism != ours.name:
            raise ZmtpError(
                f"the peer uses the {mechanism.decode('ascii', 'replace')} security mechanism, this socket "
                f"{ours.name.decode()}",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH,
            )
        # the as-server byte is not checked: libzmq 4.3 always sends 0 there; a CURVE peer
        # in the wrong role fails the handshake's first command instead
        self.stage = HANDSHAKE
        for body in ours.start():
            self.queue_frame(COMMAND, body)

    def _handshake_frames(self, data: bytes, i: int) -> int:
        while self.stage == HANDSHAKE:
            frames: list[ParsedFrame] = []
            i, self.need, _ = parse_frames(data, i, codec.HANDSHAKE_FRAME_LIMIT, frames, one=True)
            if not frames:
                return i
            frame = frames[0]
            if type(frame) is not tuple or not frame[0] & COMMAND or frame[0] & MORE:
                raise ZmtpError(
                    "a message frame before the handshake completed",
                    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND,
                )
            for body in self.mechanism.on_command(frame[1]):
                self.queue_frame(COMMAND, body)
            if self.mechanism.ready:
                self._on_ready()
        return i

    def _on_ready(self) -> None:
        self.stage = READY
        connector = self.connector
        if connector is not None:
            connector.renegotiated = False
            connector.backoff_s = None  # reconnect_ivl_max's backoff starts over
            connector.failed_handshakes = 0
        self.next_ping = time.monotonic() + self.settings.heartbeat.interval
        self.owner.due(self.next_ping)
        self.owner.peer_ready(self)

    # -- the mechanism's questions -----------------------------------------------------

    def declare_metadata(self, peer: dict[str, bytes] | None) -> dict[str, bytes]:
        """The metadata we announce (``Socket-Type``), given the peer's if it spoke first."""
        self.sent_metadata = True
        settings = self.settings
        if peer is not None:
            kind = (peer.get("socket-type") or b"").upper()
            ours = settings.peer_types.get(kind, settings.socket_type)
        elif self.connector is not None:
            ours = self.connector.declare
        else:
            ours = settings.socket_type
        self.declared = ours
        return {"Socket-Type": ours}

    def accept_metadata(self, metadata: dict[str, bytes]) -> None:
        """Check the peer's metadata: its socket type must be one ours talks to."""
        settings = self.settings
        kind = socket_type_of(metadata)
        answer = settings.peer_types.get(kind)
        declared = self.declared
        if answer is not None and self.connector is not None:
            self.connector.declare = answer  # what this peer accepts, for the next attempts
        if answer is not None and declared is not None and declared != answer and self.connector is not None:
            raise Renegotiate(f"the peer is a {kind.decode('ascii', 'replace')[:20]}: announcing {answer.decode()}")
        if answer is None or (declared is not None and declared != answer):
            raise ZmtpError(
                f"socket type mismatch: a {kind.decode('ascii', 'replace')[:20]} peer cannot talk to this "
                f"{(declared or settings.socket_type).decode()} socket",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA,
            )
