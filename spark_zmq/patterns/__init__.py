"""ZeroMQ messaging patterns for the connector, usable without Spark.

``Push``/``Pull`` (30/PIPELINE), ``Scatter``/``Gather`` (49/SCATTERGATHER, real SCATTER and
GATHER sockets on the wire through this package's own ZMTP engine, because pyzmq's libzmq
lacks draft sockets), ``ReroutingPush`` (PUSH on that engine: a departed peer's messages go
to the peers still there instead of being dropped), ``ZmtpPull`` (PULL on that engine: less
work per message than libzmq through pyzmq, multipart bounded as a whole), ``Pub``/``Sub``/
``XPub``/``XSub`` (29/PUBSUB), ``Req``/``Rep``/``Dealer``/``Router`` (request-reply, the
Guide's chapter 3). The Guide's request-reply applications built on these sockets (``Client``,
``Broker``, the service worker) are the package ``spark_zmq.requestreply``; ``Client``,
``RequestTimeoutError``, ``Broker`` and ``BrokerStats`` can also be imported from here, and
are loaded on first use (``import spark_zmq.patterns`` loads none of them).
``receiving_wire``/``sending_wire`` choose the
socket of a data pattern for the connector, as the contract ``ReceivingWire``/``SendingWire``
(``wires.contract``) that both wires satisfy. Every socket class is
``Cls(endpoints, *, hwm=None, **options)`` with ``send(data, timeout=None)``, ``recv(timeout=None)``, ``close()`` and ``with`` support;
timeouts are seconds and raise the built-in ``TimeoutError``.

This package never imports Spark.
"""

from typing import TYPE_CHECKING, Any

from .base import PatternSocket, SendTimeoutError, SocketClosedError
from .endpoints import Endpoint, parse_endpoints
from .heartbeat import DEFAULT_HEARTBEAT, NO_HEARTBEAT, Heartbeat
from .pipeline import Pull, Push
from .pubsub import Pub, Sub, XPub, XSub
from .reqrep import Dealer, Rep, Req, Router
from .reroutingpush import ReroutingPush
from .scattergather import Gather, Scatter
from .wires import receiving_wire, sending_wire
from .wires.contract import ReceivingWire, SendingWire
from .zmtppull import ZmtpPull

if TYPE_CHECKING:
    from ..requestreply.broker import Broker, BrokerStats
    from ..requestreply.client import Client, RequestTimeoutError

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


def __getattr__(name: str) -> Any:
    """``Client``, ``RequestTimeoutError``, ``Broker`` and ``BrokerStats`` of
    ``spark_zmq.requestreply``, imported on first use: the socket API never loads the
    broker or the client, and the pattern layer imports no layer above it at import time."""
    if name in ("Broker", "BrokerStats"):
        from ..requestreply import broker as module
    elif name in ("Client", "RequestTimeoutError"):
        from ..requestreply import client as module  # type: ignore[no-redef]
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def socket_for(pattern: str) -> type[PatternSocket]:
    """The class for a pattern name (``"pull"``, ``"gather"``, ...), with a clear error."""
    try:
        return PATTERNS[pattern.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown ZeroMQ pattern {pattern!r}; valid patterns: {', '.join(PATTERNS)}") from None


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
