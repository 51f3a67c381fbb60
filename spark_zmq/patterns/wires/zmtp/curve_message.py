"""CURVE after the handshake: every frame sealed in a MESSAGE command (RFC 26 in ZMTP 3.1).

``CurveMechanism`` is what ``curve``'s client and server share: the MESSAGE codec (the
data path), its short nonces counted in sequence (``CurveSequenceError``) and the
handshake's common plumbing. See ``curve`` for the mechanism as a whole.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import ClassVar

import zmq
from nacl.bindings import crypto_box_easy_afternm, crypto_box_open_afternm
from nacl.exceptions import CryptoError

from .codec import Chunk, encode_messages
from .curve_batch import seal_frames
from .null import Accept, Declare
from .wire import COMMAND, MORE, ZmtpError

__all__ = [
    "CurveMechanism",
    "CurveSequenceError",
    "KEY_SIZE",
    "SHORT_NONCE",
    "CLIENT_MESSAGE_PREFIX",
    "SERVER_MESSAGE_PREFIX",
    "check_key",
    "protocol_error",
]

KEY_SIZE = 32

_MESSAGE = b"\x07MESSAGE"
_MESSAGE_MIN = 33  # name 8, nonce 8, box >= 17 (MAC + flags)
CLIENT_MESSAGE_PREFIX = b"CurveZMQMESSAGEC"
SERVER_MESSAGE_PREFIX = b"CurveZMQMESSAGES"

#: a short nonce: 8 bytes, big-endian
SHORT_NONCE = struct.Struct(">Q")
_pack = SHORT_NONCE.pack
_unpack_from = SHORT_NONCE.unpack_from
_MAX_NONCE = (1 << 64) - 1

# first byte of a MESSAGE box: the flags (libzmq's msg_t::more = 1, msg_t::command = 2)
_FLAG_BYTES = (b"\x00", b"\x01")
_COMMAND_FLAG_BYTE = b"\x02"
# inner flags -> the frame flags ``decode`` reports (wire.MORE, wire.COMMAND, as NullMechanism)
_INNER_TO_FRAME = (0, MORE, COMMAND, MORE | COMMAND)

_PROTOCOL = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL

_FAILED = "failed"  # the state after any error (the handshake's states are curve's)


def protocol_error(text: str, value: int) -> ZmtpError:
    """A ``ZmtpError`` reported as ``EVENT_HANDSHAKE_FAILED_PROTOCOL`` with ``value`` (a
    ``PROTOCOL_ERROR_ZMTP_*``), as libzmq's monitor reports the same failure."""
    return ZmtpError(text, _PROTOCOL, value)


class CurveSequenceError(ZmtpError):
    """A MESSAGE whose short nonce is not the previous one plus one: the connection must
    close (``event`` ``EVENT_HANDSHAKE_FAILED_PROTOCOL``, ``value``
    ``PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE``, as libzmq reports a replay).

    ``expected`` and ``received`` are the short nonces. A replay (``received < expected``:
    ``replay`` is true, ``missing`` 0) is refused before its box is opened, as libzmq does;
    a gap (``missing = received - expected`` MESSAGEs deleted in transit or tampered with)
    only once the MESSAGE proved authentic."""

    def __init__(self, expected: int, received: int) -> None:
        self.expected = expected
        self.received = received
        self.replay = received < expected
        self.missing = 0 if self.replay else received - expected
        if self.replay:
            text = (
                f"MESSAGE short nonce {received}, expected {expected}: replayed or reordered "
                "(its nonce was already used)"
            )
        else:
            text = (
                f"MESSAGE short nonce {received}, expected {expected}: {self.missing} "
                f"message{'s' if self.missing != 1 else ''} missing: deleted in transit or tampered with"
            )
        super().__init__(text, _PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE)


def check_key(value: bytes, what: str) -> bytes:
    """A 32-byte key argument, checked (the message never shows the key)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"the CURVE {what} must be 32 raw bytes, not {type(value).__name__}")
    raw = bytes(value)
    if len(raw) != KEY_SIZE:
        raise ValueError(
            f"the CURVE {what} must be 32 raw bytes, got {len(raw)} (decode Z85 text with zmq.utils.z85.decode first)"
        )
    return raw


class CurveMechanism:
    """What both sides share: the MESSAGE codec after the handshake (``curve.CurveClient``
    and ``curve.CurveServer`` add the handshakes)."""

    __slots__ = (
        "ready",
        "peer_metadata",
        "sequence_gaps",
        "missing_messages",
        "replays",
        "_public",
        "_secret",
        "_declare",
        "_accept",
        "_state",
        "_key",
        "_precom",
        "_tx_prefix",
        "_rx_prefix",
        "_tx_nonce",
        "_rx_nonce",
        "__weakref__",
    )

    name: ClassVar[bytes] = b"CURVE"
    as_server: ClassVar[bool] = False

    def __init__(
        self,
        public_key: bytes,
        secret_key: bytes,
        declare: Declare,
        accept: Accept,
        tx_prefix: bytes,
        rx_prefix: bytes,
        state: str,
    ) -> None:
        self._public = check_key(public_key, "public key")
        #: our long-term secret key (s or c), forgotten once the handshake is over
        self._secret: bytes | None = check_key(secret_key, "secret key")
        self.ready = False
        self.peer_metadata: dict[str, bytes] = {}
        self._declare = declare
        self._accept = accept
        self._state = state
        # crypto_box_beforenm(peer's C'/S', our c'/s'): ``_precom`` during the handshake,
        # ``_key`` only once ready, so that encode/decode need no other state check
        self._precom: bytes | None = None
        self._key: bytes | None = None
        self._tx_prefix = tx_prefix
        self._rx_prefix = rx_prefix
        self._tx_nonce = 1  # next short nonce we send (libzmq starts at 1)
        self._rx_nonce = 0  # last short nonce the peer sent (INITIATE's, READY's, a MESSAGE's)
        #: authentic MESSAGEs whose nonce skipped ahead (0 or 1: the connection closes on the
        #: first), how many MESSAGEs those gaps skipped, and MESSAGEs refused as replayed or
        #: reordered (checked before the box, as libzmq does: a forged old nonce counts too)
        self.sequence_gaps = 0
        self.missing_messages = 0
        self.replays = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._state}>"

    # -- handshake plumbing ---------------------------------------------------------------

    def on_command(self, body: bytes) -> list[bytes]:
        """One command frame of the handshake; returns the command bodies to send."""
        try:
            return self._on_command(bytes(body))
        except BaseException:
            self._fail()
            raise

    def _on_command(self, body: bytes) -> list[bytes]:  # pragma: no cover - overridden
        raise NotImplementedError

    def _fail(self) -> None:
        self.ready = False
        self._state = _FAILED
        self._key = self._precom = None
        self._forget()

    def _forget(self) -> None:
        """Drop the handshake's secrets (overridden)."""

    def _next_nonce(self) -> bytes:
        nonce = self._tx_nonce
        if nonce > _MAX_NONCE:  # 2**64 commands on one connection: RFC 26 forbids more
            raise protocol_error("short nonces exhausted", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        self._tx_nonce = nonce + 1
        return _pack(nonce)

    def _unexpected(self, body: bytes) -> ZmtpError:
        name = body[1 : 1 + body[0]] if body else b""
        return protocol_error(
            f"unexpected command {name[:20]!r} while {self._state} (CURVE)", zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND
        )

    # -- after the handshake: the hot path --------------------------------------------------

    def encode(self, payload: bytes, more: bool = False) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of one message frame: a MESSAGE command in a plain
        data frame (frame flags 0, as libzmq sends it; MORE travels inside the box)."""
        key = self._key
        if key is None:
            raise protocol_error("CURVE encode before the handshake is done", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        nonce = self._tx_nonce
        self._tx_nonce = nonce + 1
        short = _pack(nonce)  # struct.error past 2**64-1: unreachable (RFC 26 forbids it)
        # the "easy" box: the same bytes as crypto_box_afternm without its zero padding and
        # the copies that strip it (1.7 against 2.0 us for 100 B here); opening stays on
        # open_afternm, which measured the faster of the two
        return 0, _MESSAGE + short + crypto_box_easy_afternm(
            _FLAG_BYTES[1 if more else 0] + payload, self._tx_prefix + short, key
        )

    def encode_batch(self, payloads: Sequence[bytes]) -> tuple[bytes, list[int]]:
        """The ZMTP frames ``encode`` gives for each of ``payloads`` (single-frame messages,
        no MORE), in order and joined, with each message's end in the joined bytes: the
        engine's batched send path. Sealed by ``curve_batch`` (the box per message, the rest
        over the whole batch) where libsodium is reachable, else one message at a time."""
        key = self._key
        if key is None:
            raise protocol_error("CURVE encode before the handshake is done", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        sealed = seal_frames(payloads, key, self._tx_prefix, self._tx_nonce)
        if sealed is not None:
            self._tx_nonce += len(payloads)
            return sealed
        nonce, prefix, flag, seal, pack = (
            self._tx_nonce,
            self._tx_prefix,
            _FLAG_BYTES[0],
            crypto_box_easy_afternm,
            _pack,
        )
        bodies: list[bytes] = []
        append = bodies.append
        for payload in payloads:
            short = pack(nonce)
            nonce += 1
            append(_MESSAGE + short + seal(flag + payload, prefix + short, key))
        self._tx_nonce = nonce
        chunks: list[Chunk] = []
        ends = encode_messages(bodies, chunks, 0)
        return b"".join(chunks), ends

    def encode_command(self, body: bytes) -> tuple[int, bytes]:
        """``(frame flags, frame body)`` of a command after the handshake (PING, PONG): the
        command body sealed in a MESSAGE with the COMMAND flag inside the box."""
        key = self._key
        if key is None:
            raise protocol_error("CURVE encode before the handshake is done", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        short = self._next_nonce()
        return 0, _MESSAGE + short + crypto_box_easy_afternm(_COMMAND_FLAG_BYTE + body, self._tx_prefix + short, key)

    def decode(self, flags: int, body: bytes) -> tuple[int, bytes]:
        """``(MORE/COMMAND flags, payload)`` of a received frame (a MESSAGE command); the
        flags are ``wire.MORE``/``wire.COMMAND`` as ``NullMechanism.decode`` reports them,
        taken from inside the box (the frame's own flags carry nothing under CURVE).

        The short nonce must be the last one accepted plus one, else ``CurveSequenceError``
        (a ``ZmtpError``): a replay is refused before the box is opened, as libzmq does; a
        gap only once the box proved authentic, so that only a real deletion counts in
        ``sequence_gaps`` (a forged nonce fails the box: ``CRYPTOGRAPHIC``)."""
        if len(body) < _MESSAGE_MIN or body[:8] != _MESSAGE or self._key is None:
            raise self._bad_message(body)
        nonce = _unpack_from(body, 8)[0]
        if nonce <= self._rx_nonce:  # libzmq's check, before the box (and its code: INVALID_SEQUENCE)
            self.replays += 1
            raise CurveSequenceError(self._rx_nonce + 1, nonce)
        try:
            plain = crypto_box_open_afternm(body[16:], self._rx_prefix + body[8:16], self._key)
        except CryptoError:
            raise protocol_error(
                "cannot open a MESSAGE box (wrong key or altered)", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
            ) from None
        if nonce != self._rx_nonce + 1:
            # authentic, so its sender did number the skipped MESSAGEs: they were deleted
            # on the way (stricter than libzmq); a forged nonce failed the box above
            self.sequence_gaps += 1
            self.missing_messages += nonce - self._rx_nonce - 1
            raise CurveSequenceError(self._rx_nonce + 1, nonce)
        self._rx_nonce = nonce  # only once authentic and in sequence: a forged nonce cannot move it
        return _INNER_TO_FRAME[plain[0] & 0x03], plain[1:]

    def _bad_message(self, body: bytes) -> ZmtpError:
        """Why ``body`` is not a MESSAGE we can open, in libzmq's order of checks."""
        if self._key is None:
            return protocol_error("CURVE decode before the handshake is done", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        size = len(body)
        if size <= 1 or size <= body[0]:
            return protocol_error("malformed command frame", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED)
        if size < 8 or body[:8] != _MESSAGE:
            return protocol_error(
                "expected a MESSAGE command after the CURVE handshake", zmq.PROTOCOL_ERROR_ZMTP_UNEXPECTED_COMMAND
            )
        return protocol_error(
            f"MESSAGE command of {size} bytes, at least {_MESSAGE_MIN} expected",
            zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_MESSAGE,
        )
