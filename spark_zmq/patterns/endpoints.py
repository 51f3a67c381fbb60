"""Endpoint strings: ``@`` binds, ``>`` connects (the CZMQ convention).

Parsing happens before any socket exists so that a typo fails with a message that
names the offending text, instead of surfacing later as an opaque ``ZMQError`` (or,
for a connect, never surfacing at all: libzmq retries a bad address forever).

``check_ipc_bind`` exists because libzmq unlinks an ``ipc://`` path before binding it:
without the check, binding ``ipc:///some/file`` silently deletes that file. ``attach``
binds or connects a socket to one endpoint, with errors naming the socket and the address.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

__all__ = ["Endpoint", "parse_endpoints", "EndpointsSpec", "check_ipc_bind", "tcp_host_problem", "attach", "bind_error"]

_TRANSPORTS = ("tcp", "ipc", "inproc")
_VALID_FORMS = (
    "'@tcp://*:5555' (bind), '>tcp://host:5555' (connect), 'tcp://host:5555' "
    "(the pattern's default direction), 'ipc:///path', 'inproc://name'; "
    "several separated by commas"
)
_TCP_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(?P<port>\*|\d{1,5})$", re.ASCII)
_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]{1,253}", re.ASCII)
_IPV6_LITERAL = re.compile(r"\[[0-9A-Fa-f:.]+\]", re.ASCII)
#: the longest ``ipc://`` path the kernel accepts (``sun_path`` less its NUL terminator)
_IPC_PATH_MAX = 107 if sys.platform.startswith("linux") else 103


def tcp_host_problem(host: str) -> str | None:
    """Why ``host`` cannot be the host of a ``tcp://HOST:PORT`` address, or ``None``.

    A host name or IPv4 address (ASCII letters, digits, ``.``, ``-``, ``_``) or an IPv6
    address in brackets. ``*`` (all interfaces, binding only) is the caller's business.
    """
    if _HOST_NAME.fullmatch(host) or _IPV6_LITERAL.fullmatch(host):
        return None
    return (
        f"host {host!r} is not a host name or IP address (ASCII letters, digits, '.', '-', '_'; "
        "an IPv6 address in [brackets])"
    )


def _text_problem(text: str) -> str | None:
    """Control characters and unpaired surrogates cannot reach libzmq intact."""
    for ch in text:
        category = unicodedata.category(ch)
        if category == "Cc":
            return f"it contains the control character {ch!r}"
        if category == "Cs":
            return f"it contains {ch!r}, which is not valid UTF-8"
    return None


@dataclass(frozen=True)
class Endpoint:
    """One ZeroMQ address and whether this side binds or connects to it."""

    address: str
    bind: bool

    def __str__(self) -> str:
        return ("@" if self.bind else ">") + self.address


#: endpoints as the socket classes take them: a comma-separated string, or a sequence of
#: strings or ``Endpoint`` (whose ``str`` is its string)
EndpointsSpec = str | Sequence[str | Endpoint]


def _parse_one(text: str, default_bind: bool) -> Endpoint:
    raw = text.strip()
    bind = default_bind
    if raw.startswith("@"):
        bind, raw = True, raw[1:]
    elif raw.startswith(">"):
        bind, raw = False, raw[1:]
    transport, sep, rest = raw.partition("://")
    if not sep or transport not in _TRANSPORTS or not rest:
        raise ValueError(f"invalid ZeroMQ endpoint {text.strip()!r}: expected {_VALID_FORMS}")
    problem = _text_problem(rest)
    if problem:
        raise ValueError(f"invalid ZeroMQ endpoint {text.strip()!r}: {problem}")
    if transport == "ipc" and rest != "*" and len(rest.encode("utf-8")) > _IPC_PATH_MAX:
        raise ValueError(
            f"invalid ZeroMQ endpoint {text.strip()!r}: an ipc path is at most {_IPC_PATH_MAX} bytes "
            f"(the operating system's limit), this one has {len(rest.encode('utf-8'))}"
        )
    if transport == "tcp":
        match = _TCP_ADDRESS.match(rest)
        if match is None:
            raise ValueError(
                f"invalid ZeroMQ endpoint {text.strip()!r}: a tcp endpoint is tcp://HOST:PORT; expected {_VALID_FORMS}"
            )
        port = match.group("port")
        if port == "*":
            if not bind:
                raise ValueError(
                    f"invalid ZeroMQ endpoint {text.strip()!r}: port '*' (any free port) "
                    "only makes sense when binding ('@tcp://HOST:*')"
                )
        elif not 0 < int(port) < 65536:
            raise ValueError(f"invalid ZeroMQ endpoint {text.strip()!r}: port {port} is outside 1..65535")
        if match.group("host") == "*" and not bind:
            raise ValueError(
                f"invalid ZeroMQ endpoint {text.strip()!r}: host '*' (all interfaces) only "
                "makes sense when binding; to connect, name the host"
            )
        host_problem = None if match.group("host") == "*" else tcp_host_problem(match.group("host"))
        if host_problem:
            raise ValueError(f"invalid ZeroMQ endpoint {text.strip()!r}: {host_problem}")
    return Endpoint(address=raw, bind=bind)


def parse_endpoints(spec: EndpointsSpec, *, default_bind: bool) -> list[Endpoint]:
    """Parse ``"@tcp://*:5555,>tcp://peer:6000"`` (or a sequence of such strings).

    ``default_bind`` is the direction for entries without a prefix: sources bind for
    PULL/GATHER and connect for SUB, sinks always connect (the README's options tables).
    """
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode()
    if isinstance(spec, str):
        parts: Iterable[str] = spec.split(",")
    elif isinstance(spec, Sequence):
        parts = [p for item in spec for p in str(item).split(",")]
    else:
        raise TypeError(f"endpoints must be a string or a sequence of strings, not {type(spec).__name__}")
    endpoints = [_parse_one(p, default_bind) for p in parts if p.strip()]
    if not endpoints:
        raise ValueError(f"no ZeroMQ endpoint given (got {spec!r}): expected {_VALID_FORMS}")
    return endpoints


_FILE_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def check_ipc_bind(address: str, owner: str = "socket") -> None:
    """Refuse to bind ``address`` (``ipc://PATH``) where libzmq would destroy something.

    libzmq unlinks ``PATH`` before binding it. That is right for a socket file left behind
    by a crashed process, which is allowed; anything else that exists at ``PATH`` (a
    regular file, a directory, a symbolic link, whatever it points to) raises
    ``FileExistsError``, and a socket file that a live process still listens on raises
    ``OSError(EADDRINUSE)``, as a tcp port in use does. ``owner`` names the socket class
    in the message. ``ipc://*`` (a fresh name libzmq picks) and Linux abstract names
    (``ipc://@name``, no file) are not checked.
    """
    if not address.startswith("ipc://"):
        return
    path = address[len("ipc://") :]
    if path in ("", "*") or path.startswith("@"):
        return
    try:
        info = os.lstat(path)
    except (OSError, ValueError):  # absent (the normal case), or unreadable: bind reports it
        return
    if stat.S_ISSOCK(info.st_mode):
        if _socket_file_in_use(path):
            raise OSError(
                errno.EADDRINUSE,
                f"cannot bind {owner} to {address!r}: a live process listens on the socket file {path!r} "
                "(is another process or query already bound to it?)",
            )
        return  # stale, from a process that died: libzmq replaces it
    kind = next((name for test, name in _FILE_KINDS if test(info.st_mode)), "not a socket")
    raise FileExistsError(
        errno.EEXIST,
        f"cannot bind {owner} to {address!r}: {path!r} exists and is {kind}, not a socket file; "
        "ZeroMQ would delete it to bind. Remove it yourself or choose another ipc path",
    )


def bind_error(owner: str, address: str, code: int | None, reason: str) -> OSError:
    """The ``OSError`` for a failed bind, naming the socket class ``owner`` and the address."""
    return OSError(
        code,
        f"cannot bind {owner} to {address!r}: {reason}"
        + (" (is another process or query already bound to it?)" if code == zmq.EADDRINUSE else ""),
    )


def attach(sock: zmq.Socket[Any], endpoint: Endpoint, owner: str) -> str | None:
    """Bind or connect ``sock`` (of the socket class ``owner``) to ``endpoint``; returns the
    address bound (a ``*`` port resolved), ``None`` for a connect."""
    if endpoint.bind:
        # libzmq unlinks an ipc path before binding: never let it delete a user's file
        check_ipc_bind(endpoint.address, owner)
        try:
            sock.bind(endpoint.address)
        except zmq.ZMQError as exc:
            raise bind_error(owner, endpoint.address, exc.errno, exc.strerror) from exc
        return sock.getsockopt_string(zmq.LAST_ENDPOINT)
    try:
        sock.connect(endpoint.address)
    except zmq.ZMQError as exc:
        raise OSError(exc.errno, f"cannot connect {owner} to {endpoint.address!r}: {exc.strerror}") from exc
    return None


def _socket_file_in_use(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:  # ECONNREFUSED: nobody listens (stale); anything else: let bind decide
        return False
    finally:
        probe.close()
