"""Endpoint strings: ``@`` binds, ``>`` connects (the CZMQ convention).

Parsing happens before any socket exists so that a typo fails with a message that
names the offending text, instead of surfacing later as an opaque ``ZMQError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence, Union

__all__ = ["Endpoint", "parse_endpoints", "EndpointsSpec"]

EndpointsSpec = Union[str, Sequence[str]]

_TRANSPORTS = ("tcp", "ipc", "inproc")
_VALID_FORMS = (
    "'@tcp://*:5555' (bind), '>tcp://host:5555' (connect), 'tcp://host:5555' "
    "(the pattern's default direction), 'ipc:///path', 'inproc://name'; "
    "several separated by commas"
)
_TCP_ADDRESS = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(?P<port>\*|\d{1,5})$")


@dataclass(frozen=True)
class Endpoint:
    """One ZeroMQ address and whether this side binds or connects to it."""

    address: str
    bind: bool

    def __str__(self) -> str:
        return ("@" if self.bind else ">") + self.address


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
    if transport == "tcp":
        match = _TCP_ADDRESS.match(rest)
        if match is None:
            raise ValueError(
                f"invalid ZeroMQ endpoint {text.strip()!r}: a tcp endpoint is tcp://HOST:PORT; "
                f"expected {_VALID_FORMS}"
            )
        port = match.group("port")
        if port == "*":
            if not bind:
                raise ValueError(
                    f"invalid ZeroMQ endpoint {text.strip()!r}: port '*' (any free port) "
                    "only makes sense when binding ('@tcp://HOST:*')"
                )
        elif not 0 < int(port) < 65536:
            raise ValueError(
                f"invalid ZeroMQ endpoint {text.strip()!r}: port {port} is outside 1..65535"
            )
        if match.group("host") == "*" and not bind:
            raise ValueError(
                f"invalid ZeroMQ endpoint {text.strip()!r}: host '*' (all interfaces) only "
                "makes sense when binding; to connect, name the host"
            )
    return Endpoint(address=raw, bind=bind)


def parse_endpoints(spec: EndpointsSpec, *, default_bind: bool) -> list[Endpoint]:
    """Parse ``"@tcp://*:5555,>tcp://peer:6000"`` (or a sequence of such strings).

    ``default_bind`` is the direction for entries without a prefix: sources bind for
    PULL/GATHER and connect for SUB, sinks always connect (DESIGN.md section 2).
    """
    if isinstance(spec, (bytes, bytearray)):
        spec = spec.decode()
    if isinstance(spec, str):
        parts: Iterable[str] = spec.split(",")
    elif isinstance(spec, Sequence):
        parts = [p for item in spec for p in str(item).split(",")]
    else:
        raise TypeError(
            f"endpoints must be a string or a sequence of strings, not {type(spec).__name__}"
        )
    endpoints = [_parse_one(p, default_bind) for p in parts if p.strip()]
    if not endpoints:
        raise ValueError(f"no ZeroMQ endpoint given (got {spec!r}): expected {_VALID_FORMS}")
    return endpoints
