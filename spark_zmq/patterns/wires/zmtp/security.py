"""The security mechanism of each new connection of one ZMTP engine: NULL, or CURVE with
the socket's keys (decoded once, for every connection) and its policy on client keys.

The session manager (``sessions``) asks for one mechanism per connection it makes; the
connection answers what to declare and what to accept of the peer's metadata, the socket
decides who may connect. A refused client key is logged once per host and key.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .null import NullMechanism

if TYPE_CHECKING:
    from ...curve import Curve
    from .connection import Connection
    from .mechanism import Mechanism
    from .stream import StreamEngine

__all__ = ["Security"]

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")

#: refused CURVE client keys logged per socket at most (each (host, key) once)
_REFUSED_LOGGED_MAX = 10_000


def _prepare_curve(curve: Curve | None) -> dict[str, Any] | None:
    """The socket's CURVE keys, decoded once for every connection's mechanism."""
    if curve is None:
        return None
    from zmq.utils import z85

    keys: dict[str, Any] = {"public": z85.decode(curve.public_key), "secret": z85.decode(curve.secret_key)}
    if curve.is_server:
        authorized = curve.authorized
        assert authorized is not None  # a server has it (``Curve.__post_init__``)
        keys["authorized"] = None if isinstance(authorized, str) else frozenset(z85.decode(k) for k in authorized)
    else:
        assert curve.server_key is not None  # a client has one (``Curve.__post_init__``)
        keys["server"] = z85.decode(curve.server_key)
    return keys


class Security:
    """One socket's security (``curve``: ``None`` for NULL): it holds the keys and the
    policy on client keys and makes each connection's mechanism (``new_mechanism``)."""

    def __init__(self, curve: Curve | None) -> None:
        self._curve = curve
        self._keys = _prepare_curve(curve)
        #: (host, key) of the CURVE clients refused and logged: each once per socket, as the
        #: libzmq sockets' ZAP handler does (``curve._KeyPolicy``)
        self._refused_logged: set[tuple[str, str]] = set()

    def new_mechanism(self, conn: StreamEngine) -> Mechanism:
        """The security mechanism of a new connection: the socket holds the keys and the
        policy on client keys; the connection answers what to declare and accept."""
        declare, accept = conn.declare_metadata, conn.accept_metadata
        if self._curve is None:
            return NullMechanism(conn.initiator, declare, accept)
        from .curve import CurveClient, CurveServer

        keys = self._keys
        assert keys is not None  # prepared from ``curve`` (``_prepare_curve``)
        if self._curve.is_server:
            allowed = keys["authorized"]
            authorize = (lambda key: True) if allowed is None else (lambda key: self._authorize(conn, key, allowed))
            return CurveServer(keys["public"], keys["secret"], authorize, declare, accept)
        return CurveClient(keys["public"], keys["secret"], keys["server"], declare, accept)

    def _authorize(self, conn: Connection, key: bytes, allowed: frozenset[bytes]) -> bool:
        if key in allowed:
            return True
        from zmq.utils import z85

        text = z85.encode(key).decode()
        entry = (conn.address.rsplit(":", 1)[0], text)
        if entry not in self._refused_logged and len(self._refused_logged) < _REFUSED_LOGGED_MAX:
            self._refused_logged.add(entry)
            log.warning("CURVE: refused client key %s from %s (not in curveAuthorizedKeys)", text, conn.address)
        return False
