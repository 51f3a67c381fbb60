"""``SocketTuning``: the libzmq socket options a user may set (the data source's ``zmq.*``
options), applied the same way on libzmq sockets and on this package's ZMTP engine.

Why one object: the options are declared once (``TUNING_FIELDS``, with libzmq's option
and its unit), and each wire applies them in one place: ``apply`` on a libzmq socket
(after the package's own settings, so the user's word wins), ``engine_options`` and
``tcp_options`` for the engine. ``None`` leaves a setting at the package's (or libzmq's)
default.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, fields
from typing import Any

import zmq

__all__ = ["SocketTuning"]


@dataclass(frozen=True)
class SocketTuning:
    """Socket options, in libzmq's units: milliseconds, seconds for keepalive, bytes."""

    reconnect_ivl_ms: int | None = None
    reconnect_ivl_max_ms: int | None = None
    handshake_ivl_ms: int | None = None
    ipv6: bool | None = None
    immediate: bool | None = None
    tcp_keepalive_idle_s: int | None = None
    tcp_keepalive_intvl_s: int | None = None
    tcp_keepalive_cnt: int | None = None
    sndbuf: int | None = None
    rcvbuf: int | None = None

    def apply(self, sock: zmq.Socket[Any]) -> None:
        """Set what is given on a libzmq socket (before bind/connect)."""
        for name, option in _LIBZMQ.items():
            value = getattr(self, name)
            if value is not None:
                sock.setsockopt(option, int(value))
        if any(v is not None for v in (self.tcp_keepalive_idle_s, self.tcp_keepalive_intvl_s, self.tcp_keepalive_cnt)):
            sock.setsockopt(zmq.TCP_KEEPALIVE, 1)

    def engine_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` of an engine socket (``ZmtpPatternSocket``) with what is given here
        in their place: reconnect and handshake intervals, kernel buffers, immediate."""
        out = dict(options)
        for name, key in (
            ("reconnect_ivl_ms", "reconnect_ivl"),
            ("handshake_ivl_ms", "handshake_ivl"),
            ("sndbuf", "sndbuf"),
            ("rcvbuf", "rcvbuf"),
            ("immediate", "immediate"),
        ):
            if getattr(self, name) is not None:
                out[key] = getattr(self, name)
        return out

    def tcp_options(self) -> list[tuple[int, int, int]]:
        """The keepalive settings for one of the engine's TCP sockets (after the heartbeat's)."""
        out = []
        for name, opt in (
            ("tcp_keepalive_idle_s", "TCP_KEEPIDLE"),
            ("tcp_keepalive_intvl_s", "TCP_KEEPINTVL"),
            ("tcp_keepalive_cnt", "TCP_KEEPCNT"),
        ):
            if getattr(self, name) is not None and hasattr(socket, opt):
                out.append((socket.IPPROTO_TCP, getattr(socket, opt), int(getattr(self, name))))
        if out:
            out.insert(0, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
        return out

    @property
    def given(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))


#: each field's libzmq option
_LIBZMQ = {
    "reconnect_ivl_ms": zmq.RECONNECT_IVL,
    "reconnect_ivl_max_ms": zmq.RECONNECT_IVL_MAX,
    "handshake_ivl_ms": zmq.HANDSHAKE_IVL,
    "ipv6": zmq.IPV6,
    "immediate": zmq.IMMEDIATE,
    "tcp_keepalive_idle_s": zmq.TCP_KEEPALIVE_IDLE,
    "tcp_keepalive_intvl_s": zmq.TCP_KEEPALIVE_INTVL,
    "tcp_keepalive_cnt": zmq.TCP_KEEPALIVE_CNT,
    "sndbuf": zmq.SNDBUF,
    "rcvbuf": zmq.RCVBUF,
}
