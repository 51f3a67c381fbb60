"""The NULL security mechanism (RFC 23/37): no encryption, no authentication.

A mechanism is a sans-I/O state machine that the engine drives: ``start()`` after the
greetings are exchanged, ``on_command`` for each command frame until ``ready``, then
``encode``/``decode`` for every frame. The CURVE mechanism (``curve.py``) has the same
shape.

Who declares its socket type first: in NULL both peers send READY at once, and libzmq
does. This implementation lets the side that connected (the ``initiator``) send first and
makes the side that accepted wait for the peer's READY, so that (a) two of our sockets
never wait for each other and (b) an accepting socket can answer a peer in the type that
peer accepts (``declare`` sees the peer's metadata), which is how a GATHER also serves
PUSH peers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import zmq

from .wire import COMMAND, MORE, ZmtpError, command, encode_metadata, error_from_command, parse_command, parse_metadata

__all__ = ["NullMechanism", "Declare", "Accept"]

#: our metadata properties, given the peer's when they are known before we must declare
Declare = Callable[[dict[str, bytes] | None], dict[str, bytes]]
#: checks the peer's metadata (its Socket-Type above all); raises ``ZmtpError``
Accept = Callable[[dict[str, bytes]], None]


class NullMechanism:
    name: ClassVar[bytes] = b"NULL"
    as_server = False

    def __init__(self, initiator: bool, declare: Declare, accept: Accept) -> None:
        self.initiator = initiator
        self._declare = declare
        self._accept = accept
        self.ready = False
        self.peer_metadata: dict[str, bytes] = {}
        self._sent_ready = False

    def _ready_command(self, peer: dict[str, bytes] | None) -> bytes:
        self._sent_ready = True
        return command(b"READY", encode_metadata(self._declare(peer)))

    def start(self) -> list[bytes]:
        """Command bodies to send once the greetings are exchanged."""
        return [self._ready_command(None)] if self.initiator else []

    def on_command(self, body: bytes) -> list[bytes]:
        """One command frame of the handshake; returns the command bodies to send."""
        name, data = parse_command(body)
        if name == b"ERROR":
            raise error_from_command(data, is_server=not self.initiator)
        if name != b"READY" or self.ready:
            raise ZmtpError(
                f"unexpected command {name[:20]!r} during the NULL handshake",
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND,
            )
        self.peer_metadata = parse_metadata(data)
        self._accept(self.peer_metadata)
        out = [] if self._sent_ready else [self._ready_command(self.peer_metadata)]
        self.ready = True
        return out

    @staticmethod
    def encode(payload: bytes, more: bool = False) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of one message frame."""
        return (MORE if more else 0), payload

    @staticmethod
    def encode_command(body: bytes) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of a command after the handshake (PING, PONG)."""
        return COMMAND, body

    @staticmethod
    def decode(flags: int, body: bytes) -> tuple[int, bytes]:
        """``(MORE/COMMAND flags, payload)`` of a received frame."""
        return flags & (MORE | COMMAND), body
