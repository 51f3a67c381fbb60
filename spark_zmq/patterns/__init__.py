"""ZeroMQ messaging patterns for the connector, usable without Spark.

``Push``/``Pull`` (30/PIPELINE), ``Scatter``/``Gather`` (49/SCATTERGATHER, real SCATTER and
GATHER sockets on the wire through this package's own ZMTP engine, because pyzmq's libzmq
lacks draft sockets), ``ReroutingPush`` (PUSH on that engine: a departed peer's messages go
to the peers still there instead of being dropped), ``ZmtpPull`` (PULL on that engine: less
work per message than libzmq through pyzmq, multipart bounded as a whole), ``Pub``/``Sub``/
``XPub``/``XSub`` (29/PUBSUB), ``Req``/``Rep``/``Dealer``/``Router`` (request-reply, the
Guide's chapter 3) and ``Client``, the Guide's asynchronous client over a DEALER (request
ids, replies in any order, resends on silence) and ``Broker``, the Guide's load-balancing
broker between such clients and REQ workers. ``receiving_wire``/``sending_wire`` choose the
socket of a data pattern for the connector, as the contract ``ReceivingWire``/``SendingWire``
(``wire_contract``) that both wires satisfy. Every socket class is
``Cls(endpoints, *, hwm=None, **options)`` with ``send(data, timeout=None)``, ``recv(timeout=None)``, ``close()`` and ``with`` support;
timeouts are seconds and raise the built-in ``TimeoutError``.

This package never imports Spark.
"""

from .base import PatternSocket, SendTimeoutError, SocketClosedError
from .broker import Broker, BrokerStats
from .client import Client, RequestTimeoutError
from .endpoints import Endpoint, parse_endpoints
from .heartbeat import DEFAULT_HEARTBEAT, NO_HEARTBEAT, Heartbeat
from .pipeline import Pull, Push
from .pubsub import Pub, Sub, XPub, XSub
from .reqrep import Dealer, Rep, Req, Router
from .reroutingpush import ReroutingPush
from .scattergather import Gather, Scatter
from .wire_contract import ReceivingWire, SendingWire
from .wires import receiving_wire, sending_wire
from .zmtppull import ZmtpPull

PATTERNS: dict[str, type[PatternSocket]] = {
    "push": Push,
    "pull": Pull,
    "scatter": Scatter,
    "gather": Gather,
    "pub": Pub,
    "sub": Sub,
    "xpub": XPub,
    "xsub": XSub,
    "req": Req,
    "rep": Rep,
    "dealer": Dealer,
    "router": Router,
}


def socket_for(pattern: str) -> type[PatternSocket]:
    """The class for a pattern name (``"pull"``, ``"gather"``, ...), with a clear error."""
    try:
        return PATTERNS[pattern.lower()]
    except (KeyError, AttributeError):
        raise ValueError(
            f"unknown ZeroMQ pattern {pattern!r}; valid patterns: {', '.join(PATTERNS)}"
        ) from None


__all__ = [
    "Broker",
    "BrokerStats",
    "Client",
    "RequestTimeoutError",
    "DEFAULT_HEARTBEAT",
    "Dealer",
    "Endpoint",
    "Gather",
    "Heartbeat",
    "NO_HEARTBEAT",
    "PATTERNS",
    "PatternSocket",
    "Pub",
    "Pull",
    "Push",
    "ReceivingWire",
    "ReroutingPush",
    "Rep",
    "Req",
    "Router",
    "Scatter",
    "SendTimeoutError",
    "SendingWire",
    "SocketClosedError",
    "Sub",
    "XPub",
    "XSub",
    "ZmtpPull",
    "parse_endpoints",
    "receiving_wire",
    "sending_wire",
    "socket_for",
]
