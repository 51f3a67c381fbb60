"""What a connection asks of its security mechanism (libzmq's ``mechanism_t``).

A mechanism is a sans-I/O state machine, one per connection, made by ``security.Security``
when the connection is: the connection's protocol (``stream.StreamEngine``) writes the
greeting with its ``name`` and ``as_server``, feeds it the handshake's command frames until
it is ``ready``, and then passes every frame through ``encode``/``decode``. ``null.NullMechanism``
(RFC 23/37) and ``curve.CurveClient``/``curve.CurveServer`` (RFC 26) are the three; they
inherit nothing from ``Mechanism``, which is a static type only (mypy checks that each
satisfies it where ``security`` returns it): calling a mechanism costs what it did.

One more method is looked up rather than required, because only CURVE has it:
``encode_batch(payloads) -> (frames, ends)`` (``curve_message.CurveMechanism.encode_batch``),
``encode`` over a whole write batch of single-frame messages at once; the write path takes
it with ``getattr(mechanism, "encode_batch", None)`` once per batch and otherwise encodes
message by message (``codec.encode_messages``).
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Mechanism"]


class Mechanism(Protocol):
    """The security mechanism of one connection, as the engine drives it (see the module's
    docstring). Every error a peer's bytes cause is a ``codec.ZmtpError`` carrying the
    monitor event and value libzmq reports for it; the connection closes on it."""

    @property
    def name(self) -> bytes:
        """The mechanism's name in the greeting (``b"NULL"``, ``b"CURVE"``), compared with
        the peer's (libzmq's ``options.mechanism``, checked in
        ``stream_engine_base_t::select_handshake_fun``). ``b"NULL"`` also tells the engine
        that frames travel as they are: ``encode``/``decode`` are then skipped on the data path."""
        ...

    @property
    def as_server(self) -> bool:
        """The greeting's as-server byte (libzmq's ``options.as_server``)."""
        ...

    @property
    def ready(self) -> bool:
        """The handshake completed: the connection is READY (libzmq's ``mechanism_t::status()``
        returning ``ready``); set by the ``on_command`` call that completed it."""
        ...

    def start(self) -> list[bytes]:
        """The command bodies to send once the greetings are exchanged, before any command
        came from the peer (NULL's READY as the initiator, CURVE's HELLO; none for the side
        that waits): the first ``next_handshake_command`` calls of libzmq's ``mechanism_t``."""
        ...

    def on_command(self, body: bytes) -> list[bytes]:
        """One command frame of the handshake (``body`` the frame's bytes); returns the
        command bodies to send in answer (libzmq's ``process_handshake_command`` followed
        by ``next_handshake_command``). Checks the peer's metadata through the ``accept``
        callback it was made with (``StreamEngine.accept_metadata``) and raises
        ``ZmtpError`` on anything it refuses (a ``Renegotiate`` too)."""
        ...

    def encode(self, payload: bytes, more: bool = False) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of one message frame after the handshake, MORE
        when ``more`` (libzmq's ``mechanism_t::encode``)."""
        ...

    def encode_command(self, body: bytes) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of a command after the handshake (PING, PONG): the
        COMMAND flag on the frame (NULL) or inside the box (CURVE)."""
        ...

    def decode(self, flags: int, body: bytes) -> tuple[int, bytes]:
        """``(flags, payload)`` of a received frame after the handshake, ``flags`` holding
        only ``codec.MORE`` and ``codec.COMMAND`` (libzmq's ``mechanism_t::decode``);
        raises ``ZmtpError`` for a frame it cannot open or that is out of sequence."""
        ...
