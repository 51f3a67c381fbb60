"""The CURVE security mechanism (RFC 26/CurveZMQ inside RFC 37/ZMTP 3.1), as libzmq 4.3.5 speaks it.

Two sans-I/O state machines with the interface of ``NullMechanism`` (``null.py``), on the
MESSAGE codec both share (``curve_message.CurveMechanism``):

* ``CurveClient`` sends HELLO, answers the server's WELCOME with INITIATE (long-term key,
  vouch and our metadata), then checks the server's READY;
* ``CurveServer`` answers HELLO with WELCOME (its short-term key and a cookie sealed with a
  per-connection random cookie key), then checks INITIATE (cookie, short nonce, initiate
  box, vouch), the client's metadata and the client's long-term key, and sends READY.

After the handshake every frame, data or command (PING/PONG), travels as a MESSAGE command
in a plain data frame: ``\\x07MESSAGE``, an 8-byte short nonce and a box of one flags byte
(MORE=1, COMMAND=2) plus the payload, sealed with the key precomputed from both short-term
keys (``crypto_box_beforenm``). Short nonces count up by exactly one in each direction, the
handshake's commands included, as libzmq numbers them: the client's HELLO is 1, its
INITIATE 2 and its first MESSAGE 3; the server's READY is 1 and its first MESSAGE 2. So
the MESSAGE expected next is always the last accepted short nonce (INITIATE's or READY's,
then each MESSAGE's) plus one, and any other closes the connection with a
``CurveSequenceError`` (*stricter than libzmq*, which only refuses a nonce not above the
last one): a lower or equal one is a replay (or reordering), a higher one means MESSAGEs
were deleted in transit, which the boxes alone cannot reveal (each opens on its own).

Every byte a peer sends is checked here: anything malformed, truncated, replayed, of the
wrong size or wrongly encrypted raises ``ZmtpError`` (and nothing else) carrying the
``zmq.PROTOCOL_ERROR_ZMTP_*`` value libzmq's monitor reports for the same failure, so both
kinds of sockets explain failures with one set of texts. The few places where this module
is stricter than libzmq 4.3.5, as RFC 26 asks ("the server SHALL validate all fields"), are
marked *stricter than libzmq* below (zero HELLO padding and signature, INITIATE nonce above
HELLO's, a vouch naming this server, consecutive MESSAGE nonces); a peer that follows RFC 26,
as libzmq's own CURVE client does, passes them. One reported value differs on purpose: a WELCOME of the wrong
size is ``MALFORMED_COMMAND_WELCOME`` (libzmq 4.3.5 reports ``CRYPTOGRAPHIC`` for it).

Why the server checks the client's key itself, without ZAP (RFC 27): libzmq asks a ZAP
handler over an inproc socket and waits for its reply, a round trip through another thread
for every handshake. Here the engine's socket already holds the set of authorized keys, so
``authorize(client_public_key)`` answers at once (after ``accept`` has checked the
client's metadata; libzmq asks ZAP first); a refusal is reported exactly as libzmq reports
a ZAP status 400 (``EVENT_HANDSHAKE_FAILED_AUTH``, value 400, and an ERROR "400"
command for the peer, which its own monitor reports the same way).

Keys are 32 raw bytes (decode Z85 text with ``zmq.utils.z85.decode`` before calling). No key,
secret or public, ever appears in a ``repr`` or an error message; the references to the
long-term and short-term secrets and to the cookie key are dropped as soon as the handshake
ends (Python cannot wipe the memory itself).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import ClassVar

import zmq
from nacl.bindings import (
    crypto_box,
    crypto_box_afternm,
    crypto_box_beforenm,
    crypto_box_keypair,
    crypto_box_open,
    crypto_box_open_afternm,
    crypto_secretbox,
    crypto_secretbox_open,
    randombytes,
)
from nacl.exceptions import CryptoError

from .curve_message import (
    CLIENT_MESSAGE_PREFIX,
    SERVER_MESSAGE_PREFIX,
    SHORT_NONCE,
    CurveMechanism,
    check_key,
    protocol_error,
)
from .null import Accept, Declare
from .wire import ZmtpError, encode_metadata, error_command, error_from_command, parse_metadata

__all__ = ["CurveClient", "CurveServer", "Authorize"]

#: decides whether a client's long-term public key (32 raw bytes) may connect
Authorize = Callable[[bytes], bool]

_HELLO = b"\x05HELLO"
_WELCOME = b"\x07WELCOME"
_INITIATE = b"\x08INITIATE"
_READY = b"\x05READY"
_ERROR = b"\x05ERROR"

_HELLO_SIZE = 200  # name 6, version 2, padding 72, C' 32, nonce 8, box 80
_WELCOME_SIZE = 168  # name 8, long nonce 16, box 144
_INITIATE_MIN = 257  # name 9, cookie 96, nonce 8, box >= 144
_READY_MIN = 30  # name 6, nonce 8, box >= 16
_VERSION = b"\x01\x00"
_PADDING = bytes(72)
_SIGNATURE = bytes(64)

_HELLO_PREFIX = b"CurveZMQHELLO---"
_INITIATE_PREFIX = b"CurveZMQINITIATE"
_READY_PREFIX = b"CurveZMQREADY---"
_WELCOME_LONG = b"WELCOME-"
_COOKIE_LONG = b"COOKIE--"
_VOUCH_LONG = b"VOUCH---"

_unpack_from = SHORT_NONCE.unpack_from

# states
_START, _EXPECT_WELCOME, _EXPECT_READY = "start", "expecting WELCOME", "expecting READY"
_EXPECT_HELLO, _EXPECT_INITIATE = "expecting HELLO", "expecting INITIATE"
_READY_STATE = "ready"  # (the failed state is curve_message's)


def _check_structure(body: bytes) -> None:
    """libzmq's ``check_basic_command_structure``: a name size, and a name that fits."""
    if len(body) <= 1 or len(body) <= body[0]:
        raise protocol_error("malformed command frame", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_UNSPECIFIED)


def _open(box: bytes, nonce: bytes, public: bytes, secret: bytes, what: str) -> bytes:
    try:
        return crypto_box_open(box, nonce, public, secret)
    except CryptoError:
        raise protocol_error(f"cannot open the {what}", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) from None


def _open_afternm(box: bytes, nonce: bytes, key: bytes, what: str) -> bytes:
    try:
        return crypto_box_open_afternm(box, nonce, key)
    except CryptoError:
        raise protocol_error(f"cannot open the {what}", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) from None


def _precompute(public: bytes, secret: bytes) -> bytes:
    """The connection key; libsodium refuses a weak (low-order) peer key, which only a
    hostile peer sends."""
    try:
        return crypto_box_beforenm(public, secret)
    except CryptoError:
        raise protocol_error("the peer's short-term key is unusable", zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE) from None


class CurveClient(CurveMechanism):
    """The CURVE client (``as_server = False``): knows the server's long-term public key."""

    __slots__ = ("_server", "_cn_public", "_cn_secret")

    as_server: ClassVar[bool] = False

    def __init__(
        self, public_key: bytes, secret_key: bytes, server_key: bytes, declare: Declare, accept: Accept
    ) -> None:
        super().__init__(public_key, secret_key, declare, accept, CLIENT_MESSAGE_PREFIX, SERVER_MESSAGE_PREFIX, _START)
        self._server = check_key(server_key, "server key")
        # our short-term key pair (C', c'): one per connection, never stored
        self._cn_public: bytes
        self._cn_secret: bytes | None
        self._cn_public, self._cn_secret = crypto_box_keypair()

    def _forget(self) -> None:
        self._secret = self._cn_secret = None

    def start(self) -> list[bytes]:
        """Command bodies to send once the greetings are exchanged: HELLO."""
        if self._state != _START:
            raise protocol_error("CURVE client started twice", zmq.PROTOCOL_ERROR_ZMTP_UNSPECIFIED)
        short = self._next_nonce()
        assert self._cn_secret is not None  # forgotten only once the handshake is over
        try:
            signature = crypto_box(_SIGNATURE, _HELLO_PREFIX + short, self._server, self._cn_secret)
        except CryptoError:  # a weak (low-order) server key, given by our own configuration
            self._fail()
            raise protocol_error("the CURVE server key is unusable", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) from None
        self._state = _EXPECT_WELCOME
        return [_HELLO + _VERSION + _PADDING + self._cn_public + short + signature]

    def _on_command(self, body: bytes) -> list[bytes]:
        _check_structure(body)
        if body.startswith(_WELCOME) and self._state == _EXPECT_WELCOME:
            return self._on_welcome(body)
        if body.startswith(_READY) and self._state == _EXPECT_READY:
            return self._on_ready(body)
        if body.startswith(_ERROR) and self._state in (_EXPECT_WELCOME, _EXPECT_READY):
            self._on_error(body)
        raise self._unexpected(body)

    def _on_error(self, body: bytes) -> None:
        # ERROR = name, reason size, reason; a 3-digit reason is a ZAP status code
        if len(body) < 7 or body[6] > len(body) - 7:
            raise protocol_error("malformed ERROR command", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_ERROR)
        raise error_from_command(body[6:], is_server=False)

    def _on_welcome(self, body: bytes) -> list[bytes]:
        if len(body) != _WELCOME_SIZE:
            # libzmq 4.3.5 reports this one as PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC
            raise protocol_error(
                f"WELCOME command of {len(body)} bytes, expected {_WELCOME_SIZE}",
                zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_WELCOME,
            )
        # the keys are forgotten only once the handshake is over (this step comes before)
        assert self._cn_secret is not None and self._secret is not None
        # Box [S' + cookie](S->C')
        plain = _open(
            body[24:], _WELCOME_LONG + body[8:24], self._server, self._cn_secret, "WELCOME box (wrong server key?)"
        )
        server_cn, cookie = plain[:32], plain[32:128]
        self._precom = _precompute(server_cn, self._cn_secret)
        # vouch = Box [C',S](C->S'), under a random long nonce
        vouch_nonce = randombytes(16)
        try:
            vouch = crypto_box(self._cn_public + self._server, _VOUCH_LONG + vouch_nonce, server_cn, self._secret)
        except CryptoError:
            raise protocol_error(
                "the server's short-term key is unusable", zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE
            ) from None
        # we declare before we know the server's metadata: it comes in READY
        metadata = encode_metadata(self._declare(None))
        short = self._next_nonce()
        box = crypto_box_afternm(self._public + vouch_nonce + vouch + metadata, _INITIATE_PREFIX + short, self._precom)
        self._state = _EXPECT_READY
        return [_INITIATE + cookie + short + box]

    def _on_ready(self, body: bytes) -> list[bytes]:
        if len(body) < _READY_MIN:
            raise protocol_error(
                f"READY command of {len(body)} bytes, at least {_READY_MIN} expected",
                zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_READY,
            )
        short = body[6:14]
        assert self._precom is not None  # set by WELCOME, which this step comes after
        plain = _open_afternm(body[14:], _READY_PREFIX + short, self._precom, "READY box")
        metadata = parse_metadata(plain)  # ZmtpError(INVALID_METADATA) if malformed
        self.peer_metadata = metadata
        self._accept(metadata)
        self._rx_nonce = _unpack_from(short)[0]
        self._state = _READY_STATE
        self._key, self._precom = self._precom, None
        self._forget()
        self.ready = True
        return []


class CurveServer(CurveMechanism):
    """The CURVE server (``as_server = True``): knows its own long-term key pair and decides,
    with ``authorize``, which client long-term public keys may connect."""

    __slots__ = ("_authorize", "_cn_client", "_cn_public", "_cn_secret", "_cookie_key", "peer_key")

    as_server: ClassVar[bool] = True

    def __init__(
        self, public_key: bytes, secret_key: bytes, authorize: Authorize, declare: Declare, accept: Accept
    ) -> None:
        super().__init__(
            public_key, secret_key, declare, accept, SERVER_MESSAGE_PREFIX, CLIENT_MESSAGE_PREFIX, _EXPECT_HELLO
        )
        self._authorize = authorize
        self._cn_client: bytes | None = None  # C'
        self._cn_public: bytes | None = None  # S'
        self._cn_secret: bytes | None = None  # s'
        self._cookie_key: bytes | None = None  # t, one per connection
        #: the client's long-term public key (C), once the handshake succeeded
        self.peer_key: bytes | None = None

    def _forget(self) -> None:
        self._secret = self._cn_secret = self._cookie_key = None

    @staticmethod
    def start() -> list[bytes]:
        """Command bodies to send once the greetings are exchanged: none, the client speaks first."""
        return []

    def _on_command(self, body: bytes) -> list[bytes]:
        _check_structure(body)
        if self._state == _EXPECT_HELLO and body.startswith(_HELLO):
            return self._on_hello(body)
        if self._state == _EXPECT_INITIATE and body.startswith(_INITIATE):
            return self._on_initiate(body)
        raise self._unexpected(body)  # a client never sends ERROR (RFC 26)

    def _on_hello(self, body: bytes) -> list[bytes]:
        if len(body) != _HELLO_SIZE:
            raise protocol_error(
                f"HELLO command of {len(body)} bytes, expected {_HELLO_SIZE}",
                zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_HELLO,
            )
        if body[6:8] != _VERSION:
            raise protocol_error(
                f"CurveZMQ version {body[6]}.{body[7]}, expected 1.0", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_HELLO
            )
        if body[8:80] != _PADDING:  # stricter than libzmq (which ignores the padding)
            raise protocol_error(
                "HELLO anti-amplification padding is not zero", zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_HELLO
            )
        cn_client, short = body[80:112], body[112:120]
        assert self._secret is not None  # forgotten only once the handshake is over
        # signature = Box [64 * %x0](C'->S): proves the client knows our public key
        signature = _open(
            body[120:200],
            _HELLO_PREFIX + short,
            cn_client,
            self._secret,
            "HELLO signature box (the client has the wrong server key?)",
        )
        if signature != _SIGNATURE:  # stricter than libzmq
            raise protocol_error("HELLO signature box does not hold 64 zeros", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        self._rx_nonce = _unpack_from(short)[0]
        self._cn_client = cn_client
        self._cn_public, self._cn_secret = crypto_box_keypair()
        # cookie = long nonce + Box [C' + s'](t), t a fresh random key for this connection
        self._cookie_key = randombytes(32)
        cookie_nonce = randombytes(16)
        cookie = cookie_nonce + crypto_secretbox(
            cn_client + self._cn_secret, _COOKIE_LONG + cookie_nonce, self._cookie_key
        )
        welcome_nonce = randombytes(16)
        box = crypto_box(self._cn_public + cookie, _WELCOME_LONG + welcome_nonce, cn_client, self._secret)
        self._state = _EXPECT_INITIATE
        return [_WELCOME + welcome_nonce + box]

    def _on_initiate(self, body: bytes) -> list[bytes]:
        if len(body) < _INITIATE_MIN:
            raise protocol_error(
                f"INITIATE command of {len(body)} bytes, at least {_INITIATE_MIN} expected",
                zmq.PROTOCOL_ERROR_ZMTP_MALFORMED_COMMAND_INITIATE,
            )
        # set by HELLO, which this step comes after; forgotten only once the handshake is over
        assert self._cookie_key is not None and self._cn_client is not None and self._cn_secret is not None
        # the cookie: only we could have sealed it, for this connection's C' and s'
        try:
            cookie = crypto_secretbox_open(body[25:105], _COOKIE_LONG + body[9:25], self._cookie_key)
        except CryptoError:
            raise protocol_error("cannot open the INITIATE cookie", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC) from None
        if not hmac.compare_digest(cookie, self._cn_client + self._cn_secret):
            raise protocol_error("the INITIATE cookie is not this connection's", zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        self._cookie_key = None  # RFC 26: discard the cookie key once INITIATE is valid
        short = body[105:113]
        nonce = _unpack_from(short)[0]
        if nonce <= self._rx_nonce:  # stricter than libzmq (RFC 26: "SHALL verify")
            raise protocol_error(
                f"INITIATE short nonce {nonce} is not above HELLO's {self._rx_nonce}",
                zmq.PROTOCOL_ERROR_ZMTP_INVALID_SEQUENCE,
            )
        key = _precompute(self._cn_client, self._cn_secret)
        # Box [C + vouch + metadata](C'->S')
        plain = _open_afternm(body[113:], _INITIATE_PREFIX + short, key, "INITIATE box")
        client_key, vouch_nonce, vouch_box = plain[:32], plain[32:48], plain[48:128]
        # vouch = Box [C',S](C->S'): the owner of C vouches for C', for this server
        vouch = _open(vouch_box, _VOUCH_LONG + vouch_nonce, client_key, self._cn_secret, "INITIATE vouch box")
        if not hmac.compare_digest(vouch[:32], self._cn_client):
            raise protocol_error("the vouch is for another short-term key", zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE)
        if not hmac.compare_digest(vouch[32:], self._public):  # stricter than libzmq
            raise protocol_error("the vouch is for another server", zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE)
        self._rx_nonce = nonce
        metadata = parse_metadata(plain[128:])  # ZmtpError(INVALID_METADATA) if malformed
        self.peer_metadata = metadata
        self._accept(metadata)
        if not self._authorize(client_key):
            # what libzmq does when its ZAP handler answers 400: ERROR "400", then close
            raise ZmtpError(
                "the client's CURVE key is not authorized",
                zmq.EVENT_HANDSHAKE_FAILED_AUTH,
                400,
                reply=error_command("400"),
            )
        self.peer_key = client_key
        # we declare knowing the client's metadata (a GATHER answers a PUSH as a PULL)
        ready_metadata = encode_metadata(self._declare(metadata))
        short = self._next_nonce()
        ready = _READY + short + crypto_box_afternm(ready_metadata, _READY_PREFIX + short, key)
        self._state = _READY_STATE
        self._key = key
        self._forget()
        self.ready = True
        return [ready]
