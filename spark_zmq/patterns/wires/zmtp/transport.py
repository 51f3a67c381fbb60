"""Addresses for the ZMTP engine: ``tcp://``, ``ipc://`` and ``inproc://`` as OS sockets.

``tcp`` and ``ipc`` are what libzmq speaks on the network and on the local file system.
``inproc`` is this process's own namespace: libzmq's inproc pipes cannot be reached from
Python, so an ``inproc://name`` connection between two of our ZMTP sockets is a
``socketpair`` carrying ordinary ZMTP (``connect_inproc``).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Address", "parse_address", "listen", "register_inproc", "unregister_inproc", "connect_inproc"]


@dataclass(frozen=True)
class Address:
    transport: str  # "tcp", "ipc" or "inproc"
    host: str = ""  # tcp: name or IP ("" = all interfaces); ipc/inproc: path or name
    port: int = 0  # tcp only; 0 = the OS chooses

    def describe(self) -> str:
        if self.transport != "tcp":
            return f"{self.transport}://{self.host}"
        host = f"[{self.host}]" if ":" in self.host else (self.host or "0.0.0.0")
        return f"tcp://{host}:{self.port}"


def parse_address(address: str, bind: bool) -> Address:
    """An endpoint's address (already validated by ``endpoints.parse_endpoints``)."""
    transport, _, rest = address.partition("://")
    if transport == "tcp":
        host, _, port = rest.rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if host == "*":
            if not bind:
                raise ValueError(f"cannot connect to {address!r}: '*' is only valid when binding")
            host = ""
        if port in ("*", "!"):
            if not bind:
                raise ValueError(f"cannot connect to {address!r}: the port must be a number")
            number = 0
        else:
            number = int(port)
        return Address("tcp", host, number)
    if transport in ("ipc", "inproc"):
        return Address(transport, rest)
    raise ValueError(f"unsupported transport in {address!r}")


def listen(address: Address, backlog: int = 128) -> tuple[socket.socket, str]:
    """A non-blocking listening socket and the address it got (the port resolved)."""
    if address.transport == "tcp":
        infos = socket.getaddrinfo(
            address.host or "0.0.0.0", address.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, kind, proto, _, sockaddr = infos[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as libzmq does
            sock.bind(sockaddr)
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        host, port = sock.getsockname()[:2]
        return sock, Address("tcp", host, port).describe()
    if address.transport == "ipc":
        path = address.host
        if path == "*":  # a fresh name, as libzmq picks one
            path = os.path.join(tempfile.mkdtemp(prefix="spark-zmq-ipc-"), "socket")
        target = "\0" + path[1:] if path.startswith("@") else path
        if not path.startswith("@") and os.path.exists(path):
            os.unlink(path)  # libzmq does the same; endpoints.check_ipc_bind vetted the path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(target)
            sock.listen(backlog)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock, f"ipc://{path}"
    raise ValueError(f"cannot listen on {address.describe()}")


def connect_target(address: Address) -> tuple[int, str | tuple[Any, ...]]:
    """``(family, sockaddr)`` to connect to; resolves a tcp host name each time (DNS may change)."""
    if address.transport == "tcp":
        family, _, _, _, sockaddr = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)[0]
        return family, sockaddr
    path = address.host
    return socket.AF_UNIX, ("\0" + path[1:] if path.startswith("@") else path)


# -- inproc -----------------------------------------------------------------------------------

_inproc_lock = threading.Lock()
#: name -> the binder's "take this connected socket" callback
_inproc: dict[str, Callable[[socket.socket, str], None]] = {}


def register_inproc(name: str, accept: Callable[[socket.socket, str], None]) -> None:
    with _inproc_lock:
        if name in _inproc:
            raise OSError(98, f"inproc://{name} is already bound")
        _inproc[name] = accept


def unregister_inproc(name: str) -> None:
    with _inproc_lock:
        _inproc.pop(name, None)


def connect_inproc(name: str) -> socket.socket | None:
    """Our end of a new connection to the binder of ``inproc://name``, or ``None`` if nobody
    is bound there yet (the caller retries, as libzmq's inproc allows connect before bind)."""
    with _inproc_lock:
        accept = _inproc.get(name)
    if accept is None:
        return None
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    accept(theirs, f"inproc://{name}")
    return ours
