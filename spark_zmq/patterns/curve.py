"""CURVE security for pattern sockets: CurveZMQ (RFC 26) with ZAP authentication (RFC 27).

Why this module: every socket the connector opens must be able to encrypt and to refuse
strangers, whichever side binds. ZeroMQ already does the cryptography (libzmq's CURVE
mechanism) and pyzmq already ships a ZAP handler (``zmq.auth``) and the certificate file
format that CZMQ's ``zcert`` writes, so this module only:

- loads keys from certificate files or Z85 text, with errors that say which file and why;
- describes one socket's security (``Curve``): a *server* holds its secret certificate
  and the public keys it accepts (or ``*``: any key, encryption without client
  authentication); a *client* holds its secret certificate and the server's public key;
- runs one ``zmq.auth`` authenticator per ZeroMQ context, with one ZAP domain per server
  socket, so two sockets in one process can accept different keys;
- counts and logs rejected handshakes (``HandshakeWatch``) from the socket's monitor: a
  CURVE client whose key is refused, a NULL (unencrypted) client, a client of the wrong
  server. Each distinct rejection is logged once; every one is counted.

Secret keys never appear in a ``repr`` or a log line.
"""

from __future__ import annotations

import errno
import glob
import itertools
import logging
import os
import stat
import struct
import threading
from dataclasses import dataclass, field
from typing import Optional, Union

import zmq
import zmq.auth
from zmq.auth.base import Authenticator
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

__all__ = [
    "ANY_KEY",
    "Curve",
    "CurveError",
    "HandshakeWatch",
    "KeyPair",
    "open_monitor",
    "load_authorized_keys",
    "load_public_key",
    "load_secret_certificate",
    "keygen",
]

log = logging.getLogger(__name__)

#: ``curveAuthorizedKeys=*``: accept any client key (encryption without client authentication)
ANY_KEY = "*"

# A certificate is a few hundred bytes; anything much larger is not one.
_MAX_CERTIFICATE_BYTES = 64 << 10
_Z85_KEY_LEN = 40


class CurveError(ValueError):
    """A key, certificate or combination of them is unusable; ``option`` names the option."""

    def __init__(self, message: str, option: Optional[str] = None) -> None:
        super().__init__(message)
        self.option = option


def _z85_key(text: bytes, what: str, option: Optional[str]) -> bytes:
    """``text`` checked as a 40-character Z85 CURVE key (returned as bytes)."""
    if len(text) != _Z85_KEY_LEN:
        raise CurveError(f"{what} is not a CURVE key: expected 40 Z85 characters, got {len(text)}", option)
    try:
        if len(z85.decode(text)) != 32:
            raise ValueError
    except (ValueError, KeyError, IndexError, TypeError, UnicodeError, struct.error):
        # struct.error: Z85 characters whose 5-character group is above 2**32 - 1 ('#####')
        raise CurveError(f"{what} is not a CURVE key: it is not valid Z85 text", option) from None
    return bytes(text)


_AUTHORIZED_HELP = ("give a set of the clients' Z85 public keys (40 characters each, e.g. "
                    f"frozenset({{keys.public_key}})) or {ANY_KEY!r} (ANY_KEY) to accept any client key; "
                    "load_authorized_keys(directory) reads the '*.key' certificates of a directory")


def _shown(text: bytes) -> str:
    """An entry of ``authorized`` safe to show: never a whole key (one could be a secret key
    put there by mistake), only enough to find it."""
    if len(text) <= 5:
        return repr(text.decode("ascii", "replace"))
    return f"{text[:5].decode('ascii', 'replace')!r}... ({len(text)} characters)"


def _check_authorized(value: object) -> Union[str, frozenset]:
    """``Curve.authorized`` checked: ``ANY_KEY`` itself, or a set of Z85 public keys, returned
    as a frozenset of 40-byte Z85 ``bytes`` (text given as ``str`` is encoded)."""
    option = "curveAuthorizedKeys"
    if isinstance(value, str):
        if value == ANY_KEY:
            return ANY_KEY
        # the text itself is not shown: it could be a key, even a secret one
        raise CurveError(f"Curve: authorized is a string other than {ANY_KEY!r} ({len(value)} characters, not "
                         f"shown); the only string accepted is {ANY_KEY!r}. "
                         f"{_AUTHORIZED_HELP[0].upper()}{_AUTHORIZED_HELP[1:]}", option)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise CurveError(f"Curve: authorized is a single {type(value).__name__} value, not a set of keys; "
                         f"{_AUTHORIZED_HELP}", option)
    if not isinstance(value, (set, frozenset, list, tuple)):
        raise CurveError(f"Curve: authorized must be a set of Z85 public keys or {ANY_KEY!r}, not of type "
                         f"{type(value).__name__}; {_AUTHORIZED_HELP}", option)
    keys = set()
    for entry in value:
        if isinstance(entry, str):
            text = entry.encode("ascii", "replace")
            if not entry.isascii():  # "?" for each other character could make valid Z85
                raise CurveError(f"Curve: the authorized key {_shown(text)} is not a CURVE key: it is not ASCII "
                                 "(Z85 text)", option)
        elif isinstance(entry, (bytes, bytearray, memoryview)):
            text = bytes(entry)
        else:
            raise CurveError(f"Curve: authorized holds a value of type {type(entry).__name__}, not a Z85 public key "
                             "(40 characters of text)", option)
        keys.add(_z85_key(text, f"Curve: the authorized key {_shown(text)}", option))
    return frozenset(keys)


def _read_certificate(path: str, option: Optional[str]) -> tuple[bytes, Optional[bytes]]:
    """``(public, secret or None)`` from a ZPL certificate file (pyzmq's reader)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise CurveError(f"cannot read the certificate file {path!r}: {exc.strerror}", option) from None
    if not stat.S_ISREG(info.st_mode):
        raise CurveError(f"the certificate file {path!r} is not a regular file", option)
    if info.st_size > _MAX_CERTIFICATE_BYTES:
        raise CurveError(
            f"{path!r} is {info.st_size} bytes, too large for a certificate file (a ZeroMQ certificate is a few "
            "hundred bytes: make one with 'spark-zmq keygen NAME')", option,
        )
    try:
        public, secret = zmq.auth.load_certificate(path)
    except OSError as exc:
        raise CurveError(f"cannot read the certificate file {path!r}: {exc}", option) from None
    except (ValueError, IndexError):
        raise CurveError(
            f"{path!r} is not a ZeroMQ certificate file (no 'public-key = \"...\"' line); make one with "
            "'spark-zmq keygen NAME', pyzmq's zmq.auth.create_certificates or CZMQ's zcert", option,
        ) from None
    public = _z85_key(public, f"the public key in {path!r}", option)
    if secret is not None:
        secret = _z85_key(secret, f"the secret key in {path!r}", option)
    return public, secret


def load_secret_certificate(path: str, option: Optional[str] = "curveCertificate") -> tuple[bytes, bytes]:
    """``(public, secret)`` Z85 keys from a secret certificate file (``NAME.key_secret``)."""
    public, secret = _read_certificate(path, option)
    if secret is None:
        raise CurveError(
            f"{path!r} holds only a public key; this option needs the secret certificate "
            f"(the '.key_secret' file of the pair, e.g. {os.path.basename(path) + '_secret'!r})", option,
        )
    if zmq.curve_public(secret) != public:
        raise CurveError(f"the secret certificate {path!r} is inconsistent: its public key does not match its "
                         "secret key", option)
    return public, secret


def load_public_key(value: str, option: Optional[str] = "curveServerKey") -> bytes:
    """A public key given as its 40-character Z85 text or as a certificate file."""
    text = value.strip()
    if len(text) == _Z85_KEY_LEN and not os.path.exists(text):
        return _z85_key(text.encode("ascii", "replace"), f"{text!r}", option)
    if not os.path.exists(text):
        raise CurveError(
            f"{value!r} is neither a 40-character Z85 public key nor an existing certificate file", option
        )
    return _read_certificate(text, option)[0]


def load_authorized_keys(value: str, option: Optional[str] = "curveAuthorizedKeys") -> Union[str, frozenset]:
    """``*`` (any key), or the public keys of every ``*.key`` certificate in a directory."""
    text = value.strip()
    if text == ANY_KEY:
        return ANY_KEY
    if not os.path.isdir(text):
        raise CurveError(
            f"{value!r} is not a directory; give a directory of public certificate files ('*.key') or '*' to "
            "accept any client key", option,
        )
    keys = set()
    for path in sorted(glob.glob(os.path.join(glob.escape(text), "*.key"))):
        keys.add(_read_certificate(path, option)[0])
    if not keys:
        raise CurveError(
            f"the directory {value!r} holds no public certificate ('*.key') file, so no client could connect; "
            "copy the clients' NAME.key files there, or give '*' to accept any client key", option,
        )
    return frozenset(keys)


def keygen(directory: str, name: str) -> tuple[str, str]:
    """Write a new key pair as ``NAME.key`` (public) and ``NAME.key_secret`` (mode 0600);
    returns both paths. Refuses to overwrite an existing pair."""
    if not name or os.sep in name or name in (".", ".."):
        raise ValueError(f"certificate name {name!r} must be a plain file name, without '{os.sep}'")
    base = os.path.join(directory, name)
    for path in (base + ".key", base + ".key_secret"):
        if os.path.lexists(path):
            raise FileExistsError(f"{path!r} exists; refusing to overwrite a key (delete it first)")
    os.makedirs(directory, exist_ok=True)
    old = os.umask(0o077)
    try:
        public_file, secret_file = zmq.auth.create_certificates(directory, name)
    finally:
        os.umask(old)
    os.chmod(public_file, 0o644)
    os.chmod(secret_file, 0o600)
    return public_file, secret_file


@dataclass(frozen=True)
class KeyPair:
    """A Z85 key pair (the secret is left out of ``repr``)."""

    public_key: bytes
    secret_key: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> "KeyPair":
        return cls(*zmq.curve_keypair())

    @classmethod
    def from_certificate(cls, path: str, option: Optional[str] = "curveCertificate") -> "KeyPair":
        return cls(*load_secret_certificate(path, option))


@dataclass(frozen=True)
class Curve:
    """The CURVE security of one socket.

    A server has ``authorized`` (``ANY_KEY`` or a set of Z85 public keys) and no
    ``server_key``; a client has ``server_key`` and no ``authorized``. Both have their
    own key pair. ``Curve.server(...)``/``Curve.client(...)`` build them.

    ``authorized`` is checked when the ``Curve`` is made: the only string it may be is
    ``ANY_KEY`` (``"*"``), and every key of a set must be 40 characters of valid Z85; a set
    (or list, tuple) is kept as a ``frozenset`` of Z85 ``bytes``, so ``authorized`` is
    either exactly ``ANY_KEY`` or such a frozenset (``isinstance(authorized, str)`` means
    any key).
    """

    public_key: bytes
    secret_key: bytes = field(repr=False)
    server_key: Optional[bytes] = None
    authorized: Union[str, frozenset, None] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.server_key is None) == (self.authorized is None):
            raise CurveError("a CURVE socket is either a client (server_key) or a server (authorized), not both")
        if self.authorized is not None:
            object.__setattr__(self, "authorized", _check_authorized(self.authorized))

    @classmethod
    def server(cls, keys: KeyPair, authorized: Union[str, frozenset]) -> "Curve":
        """A server with key pair ``keys`` accepting ``authorized`` client keys (a set of Z85
        public keys) or any key (``ANY_KEY``, ``"*"``); ``CurveError`` for anything else."""
        return cls(keys.public_key, keys.secret_key, authorized=authorized)

    @classmethod
    def client(cls, keys: KeyPair, server_key: bytes) -> "Curve":
        """A client with key pair ``keys`` of the server whose public key is ``server_key``."""
        return cls(keys.public_key, keys.secret_key, server_key=server_key)

    @property
    def is_server(self) -> bool:
        return self.server_key is None

    def describe(self) -> str:
        """Safe to log: the role and the public keys, never the secret."""
        if self.is_server:
            who = "any client key" if self.authorized == ANY_KEY else f"{len(self.authorized or ())} authorized keys"
            return f"CURVE server {self.public_key.decode()} accepting {who}"
        return f"CURVE client {self.public_key.decode()} of server {self.server_key.decode()}"  # type: ignore[union-attr]

    def apply(self, sock: zmq.Socket) -> Optional["_Registration"]:
        """Configure ``sock`` (before bind/connect); a server registers its ZAP domain with
        the authenticator of the socket's context (released by ``close``)."""
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)
        if not self.is_server:
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key)
            return None
        registration = _register(sock.context, self.authorized)  # type: ignore[arg-type]
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.ZAP_DOMAIN, registration.domain.encode())
        return registration


# -- ZAP: one zmq.auth authenticator per context, one domain per server socket ---------------


class _KeyPolicy:
    """A ``zmq.auth`` credentials provider: which client keys one server socket accepts."""

    def __init__(self, authorized: Union[str, frozenset], authenticator: "_Authenticator") -> None:
        self.authorized = authorized
        self.authenticator = authenticator
        self.logged: set[tuple[str, bytes]] = set()

    def callback(self, domain: str, client_key: bytes) -> bool:
        if self.authorized == ANY_KEY or client_key in self.authorized:
            return True
        peer = self.authenticator.peer_address
        if (peer, client_key) not in self.logged and len(self.logged) < 10_000:
            self.logged.add((peer, client_key))
            log.warning("CURVE: refused client key %s from %s (not in curveAuthorizedKeys)", client_key.decode(), peer)
        return False


ZAP_ENDPOINT = "inproc://zeromq.zap.01"


class _ReleasingZapEndpoint(Authenticator):
    """Unbinds the ZAP endpoint before pyzmq closes the handler's socket.

    Why: libzmq releases a closed socket's inproc names later, on its reaper thread, so a
    handler started on the same context right after the last one stopped could find
    ``inproc://zeromq.zap.01`` still taken (EADDRINUSE). ``unbind`` releases it at once.
    pyzmq's ``ThreadAuthenticator.stop`` calls this after joining its thread, so the
    socket is ours alone here."""

    def stop(self) -> None:
        if self.zap_socket is not None:
            try:
                self.zap_socket.unbind(ZAP_ENDPOINT)
            except zmq.ZMQError:
                pass  # never bound (start failed): nothing to release
        super().stop()


_pipe_ids = itertools.count(1)


class _Authenticator(ThreadAuthenticator, _ReleasingZapEndpoint):
    """pyzmq's ZAP handler, remembering the peer address of the request it is answering
    (so a refusal can be logged with it).

    Its control pipe gets a name never used before: pyzmq names it after ``id(self)``, and
    a new handler at the address of one just stopped found the old pipe's inproc name not
    yet released by libzmq's reaper thread (EADDRINUSE, seen in the 200-cycle test)."""

    peer_address = "?"

    def __init__(self, context: zmq.Context, log: logging.Logger) -> None:
        super().__init__(context, log=log)
        self.pipe_endpoint = f"inproc://spark-zmq-zap-pipe-{os.getpid()}-{next(_pipe_ids)}"

    async def handle_zap_message(self, msg: list[bytes]) -> None:
        self.peer_address = msg[3].decode("utf-8", "replace") if len(msg) > 3 else "?"
        await super().handle_zap_message(msg)


@dataclass
class _ContextAuth:
    authenticator: _Authenticator
    domains: set = field(default_factory=set)


_lock = threading.Lock()
_auths: dict[int, _ContextAuth] = {}
_domain_ids = itertools.count(1)


@dataclass
class _Registration:
    """A server socket's ZAP domain; ``release()`` when the socket closes."""

    context: zmq.Context
    domain: str

    def release(self) -> None:
        with _lock:
            entry = _auths.get(id(self.context))
            if entry is None or self.domain not in entry.domains:
                return
            entry.domains.discard(self.domain)
            entry.authenticator.credentials_providers.pop(self.domain, None)
            if entry.domains:
                return
            del _auths[id(self.context)]
        # the last server socket of this context is gone: stop the handler, so that the
        # context can terminate (its ZAP socket would keep Context.term() waiting)
        entry.authenticator.stop()


def _register(context: zmq.Context, authorized: Union[str, frozenset]) -> _Registration:
    with _lock:
        entry = _auths.get(id(context))
        if entry is None:
            authenticator = _Authenticator(context, log=logging.getLogger(__name__ + ".zap"))
            authenticator.start()
            entry = _auths[id(context)] = _ContextAuth(authenticator)
        domain = f"spark-zmq-{os.getpid()}-{next(_domain_ids)}"
        entry.authenticator.configure_curve_callback(domain, _KeyPolicy(authorized, entry.authenticator))
        entry.domains.add(domain)
        return _Registration(context, domain)


_secure_context: Optional[zmq.Context] = None


def secure_context() -> zmq.Context:
    """The process-wide context of CURVE server sockets that were given none.

    Why not ``zmq.Context.instance()``: a ZAP handler answers for every socket of its
    context, so installing ours there would start judging the handshakes of the
    application's own sockets."""
    global _secure_context
    with _lock:
        if _secure_context is None:
            _secure_context = zmq.Context()
        return _secure_context


# -- rejected handshakes ------------------------------------------------------------------------

HANDSHAKE_FAILURES = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def _failure_text(event: int, value: int, is_server: bool) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        if is_server:
            return f"a client's CURVE key was refused (ZAP status {value})"
        return f"the server refused this side's CURVE certificate (ZAP status {value}: not among its authorized keys)"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return ("the peer does not use this socket's security mechanism (CURVE on one side only?)" if is_server
                    else "the server does not use CURVE (security mechanism mismatch)")
        if value in (zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE):
            return ("a peer failed the CURVE key exchange" if is_server else
                    "the CURVE key exchange failed: curveServerKey is not the server's public key")
        if value == zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA:
            return "the peer's socket type cannot talk to this socket (e.g. a PUB where a GATHER or PULL belongs)"
        return f"ZMTP protocol error {value:#x} during the handshake"
    if value == errno.ETIMEDOUT:
        return "a peer did not complete the handshake in time (handshake_ivl), and was disconnected"
    return ("a peer dropped the connection during the handshake (a client without CURVE, or not a ZeroMQ peer)"
            if is_server else "the server closed the connection during the handshake (is curveServerKey the server's "
            "public key, and does the server use CURVE?)")


_monitor_ids = itertools.count(1)


def open_monitor(sock: zmq.Socket, events: int) -> zmq.Socket:
    """A PAIR socket receiving ``sock``'s monitor ``events``, with no high-water mark.

    Why not pyzmq's ``get_monitor_socket``: libzmq's I/O thread sends monitor events
    without ``ZMQ_DONTWAIT``, so when the monitor's queue is full (about 2,000 events, e.g.
    a flood of failed handshakes while nobody reads) it blocks, and every connection of
    the context stalls with it. An unlimited queue cannot block; its owner still reads
    it regularly (``HandshakeWatch.poll``), so it stays small.
    """
    address = f"inproc://spark-zmq-monitor-{os.getpid()}-{next(_monitor_ids)}"
    sock.monitor(address, events)
    monitor = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.RCVHWM, 0)  # before connect: the pipe's limit is fixed then
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.connect(address)
    return monitor


class HandshakeWatch:
    """Counts rejected handshakes from a socket monitor, and logs each kind once per endpoint.

    ``poll(timeout_s)`` reads what the monitor has (waiting up to ``timeout_s`` for the
    first event) and returns the other events it was asked to watch (e.g. a successful
    handshake), so one monitor serves both the caller and the security count.

    Its owner calls ``poll`` regularly, even while it waits for something else, so the
    monitor's queue (unlimited, see ``open_monitor``) stays small.
    """

    def __init__(self, monitor: zmq.Socket, *, is_server: bool, label: str = "") -> None:
        self.monitor = monitor
        self.is_server = is_server
        self.label = label
        self.rejected = 0
        #: the last rejection, as text (for error messages)
        self.last_rejection: Optional[str] = None
        self._logged: set[tuple[str, str]] = set()

    def poll(self, timeout_s: float = 0.0) -> list[tuple[int, int, str]]:
        others: list[tuple[int, int, str]] = []
        wait_ms = max(0, int(timeout_s * 1000))
        while self.monitor.poll(wait_ms):
            wait_ms = 0
            frames = self.monitor.recv_multipart()
            event, value = int.from_bytes(frames[0][:2], "little"), int.from_bytes(frames[0][2:6], "little")
            endpoint = frames[1].decode("utf-8", "replace") if len(frames) > 1 else "?"
            if event & HANDSHAKE_FAILURES:
                self._rejected(event, value, endpoint)
            else:
                others.append((event, value, endpoint))
        return others

    def failure_note(self) -> str:
        """``"; the CURVE handshake failed: <why>"`` once a handshake was rejected, else
        ``""``: what a client adds to a timeout's message, so a wrong key is not mistaken
        for a peer that is down."""
        self.poll()
        return f"; the CURVE handshake failed: {self.last_rejection}" if self.rejected else ""

    def _rejected(self, event: int, value: int, endpoint: str) -> None:
        self.rejected += 1
        text = _failure_text(event, value, self.is_server)
        self.last_rejection = f"{text} at {endpoint}"
        if (endpoint, text) not in self._logged and len(self._logged) < 1000:
            self._logged.add((endpoint, text))
            log.warning("%s%s: rejected handshake: %s (further ones are counted, not logged)",
                        self.label + " " if self.label else "", endpoint, text)
