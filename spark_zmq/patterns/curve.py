"""CURVE security for pattern sockets: CurveZMQ (RFC 26) with ZAP authentication (RFC 27).

Why this module: every socket the connector opens must be able to encrypt and to refuse
strangers, whichever side binds. ZeroMQ already does the cryptography (libzmq's CURVE
mechanism) and pyzmq already ships a ZAP handler (``zmq.auth``), so this module only:

- describes one socket's security (``Curve``): a *server* holds its secret certificate
  and the public keys it accepts (or ``*``: any key, encryption without client
  authentication); a *client* holds its secret certificate and the server's public key;
- runs one ``zmq.auth`` authenticator per ZeroMQ context, with one ZAP domain per server
  socket, so two sockets in one process can accept different keys.

The keys themselves (Z85 text, certificate files, key pairs) are ``curve_keys``; rejected
handshakes are counted and logged by ``handshakes``. Secret keys never appear in a
``repr`` or a log line.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zmq

from .curve_keys import ANY_KEY, CurveError, KeyPair, check_authorized

if TYPE_CHECKING:  # imported when the first CURVE server socket registers: pyzmq's ZAP thread
    # brings asyncio and ssl, which a process without CURVE (every receiver by default) never needs
    from .zap_handler import ZapHandler

__all__ = ["Curve", "secure_context"]

log = logging.getLogger(__name__)


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
    server_key: bytes | None = None
    authorized: str | frozenset[bytes] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.server_key is None) == (self.authorized is None):
            raise CurveError("a CURVE socket is either a client (server_key) or a server (authorized), not both")
        if self.authorized is not None:
            object.__setattr__(self, "authorized", check_authorized(self.authorized))

    @classmethod
    def server(cls, keys: KeyPair, authorized: str | frozenset[bytes]) -> Curve:
        """A server with key pair ``keys`` accepting ``authorized`` client keys (a set of Z85
        public keys) or any key (``ANY_KEY``, ``"*"``); ``CurveError`` for anything else."""
        return cls(keys.public_key, keys.secret_key, authorized=authorized)

    @classmethod
    def client(cls, keys: KeyPair, server_key: bytes) -> Curve:
        """A client with key pair ``keys`` of the server whose public key is ``server_key``."""
        return cls(keys.public_key, keys.secret_key, server_key=server_key)

    @property
    def is_server(self) -> bool:
        return self.server_key is None

    def describe(self) -> str:
        """Safe to log: the role and the public keys, never the secret."""
        if self.server_key is None:  # a server (``is_server``)
            who = "any client key" if self.authorized == ANY_KEY else f"{len(self.authorized or ())} authorized keys"
            return f"CURVE server {self.public_key.decode()} accepting {who}"
        return f"CURVE client {self.public_key.decode()} of server {self.server_key.decode()}"

    def apply(self, sock: zmq.Socket[Any]) -> _Registration | None:
        """Configure ``sock`` (before bind/connect); a server registers its ZAP domain with
        the authenticator of the socket's context (released by ``close``)."""
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.secret_key)
        if self.server_key is not None:  # a client (``is_server``: it has none)
            sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_key)
            return None
        assert self.authorized is not None  # a server has it (``__post_init__``)
        registration = _register(sock.context, self.authorized)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.ZAP_DOMAIN, registration.domain.encode())
        return registration


# -- ZAP: one zmq.auth authenticator per context, one domain per server socket ---------------


class _KeyPolicy:
    """A ``zmq.auth`` credentials provider: which client keys one server socket accepts."""

    def __init__(self, authorized: str | frozenset[bytes], authenticator: ZapHandler) -> None:
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


@dataclass
class _ContextAuth:
    authenticator: ZapHandler
    domains: set[str] = field(default_factory=set)


_lock = threading.Lock()
_auths: dict[int, _ContextAuth] = {}
_domain_ids = itertools.count(1)


@dataclass
class _Registration:
    """A server socket's ZAP domain; ``release()`` when the socket closes."""

    context: zmq.Context[Any]
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


def _register(context: zmq.Context[Any], authorized: str | frozenset[bytes]) -> _Registration:
    with _lock:
        entry = _auths.get(id(context))
        if entry is None:
            from .zap_handler import ZapHandler

            authenticator = ZapHandler(context, log=logging.getLogger(__name__ + ".zap"))
            authenticator.start()
            entry = _auths[id(context)] = _ContextAuth(authenticator)
        domain = f"spark-zmq-{os.getpid()}-{next(_domain_ids)}"
        entry.authenticator.configure_curve_callback(domain, _KeyPolicy(authorized, entry.authenticator))
        entry.domains.add(domain)
        return _Registration(context, domain)


_secure_context: zmq.Context[Any] | None = None


def secure_context() -> zmq.Context[Any]:
    """The process-wide context of CURVE server sockets that were given none.

    Why not ``zmq.Context.instance()``: a ZAP handler answers for every socket of its
    context, so installing ours there would start judging the handshakes of the
    application's own sockets."""
    global _secure_context
    with _lock:
        if _secure_context is None:
            _secure_context = zmq.Context()
        return _secure_context
