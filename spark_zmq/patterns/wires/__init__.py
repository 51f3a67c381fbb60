"""The wires: the I/O beneath the pattern sockets, and which one carries each data pattern.

This package holds the two wires a pattern socket runs on, apart from the socket API
(``spark_zmq.patterns``: the sockets, their options, limits and deadlines) that sits on
them: ``libzmq`` (libzmq's sockets through pyzmq), ``engine`` over ``zmtp`` (the package's
own ZMTP 3.1 engine, in Python), and ``contract``, what every wire offers the sockets and
what the ingest and the sink may hold. Here too is the connector's one place for choosing
a wire. ``receiving_wire`` (the source's ``pull``, ``gather``, ``sub``) and ``sending_wire`` (the
sink's ``push``, ``scatter``, ``pub``) make the socket of a pattern, attached to its
endpoints, and return it as the contract's ``ReceivingWire`` or ``SendingWire``
(``contract``), so the ingest and the sink never name a socket class.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..endpoints import EndpointsSpec, parse_endpoints

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..socket_options import HwmSocketOptions
    from .contract import ReceivingWire, SendingWire

__all__ = ["RECEIVING_PATTERNS", "SENDING_PATTERNS", "receiving_wire", "sending_wire"]

RECEIVING_PATTERNS = ("pull", "gather", "sub")
SENDING_PATTERNS = ("push", "scatter", "pub")


def receiving_wire(pattern: str, endpoints: EndpointsSpec, **options: Unpack[HwmSocketOptions]) -> ReceivingWire:
    """The receiving socket of ``pattern`` on ``endpoints``; ``options`` are the socket
    class's (``hwm``, ``linger``, ``curve``, ``heartbeat``, ``tuning``, ``rcvbuf``,
    ``max_message_bytes``, ``topics`` for ``sub``...).

    * ``pull``: the package's engine (``ZmtpPull``, PULL on the wire): it parses frames out
      of whole reads instead of one pyzmq ``recv`` per message (faster and cheaper through
      Spark: docs/performance.md, "Measured design choices"), bounds a multipart
      message as a whole, and times out a silent peer even under backpressure. Two cases
      stay on libzmq's ``Pull``: CURVE, which libzmq decrypts in C on its I/O thread while
      the engine calls libsodium once a message from Python (about half the rate on the
      engine, same page), and ``inproc://`` endpoints, which only libzmq's own sockets reach.
    * ``gather``: the engine (``Gather``): libzmq's GATHER is a draft socket, absent from
      pyzmq's libzmq.
    * ``sub``: libzmq (``Sub``): libzmq keeps the subscriptions and matches the topics.
    """
    # the socket classes stand on the wires: imported here, not when a wire is first imported
    from ..pipeline import Pull
    from ..pubsub import Sub
    from ..scattergather import Gather
    from ..zmtppull import ZmtpPull

    name = pattern.lower()
    if name == "pull":
        if options.get("curve") is None and not any(
            e.address.startswith("inproc://") for e in parse_endpoints(endpoints, default_bind=True)
        ):
            return ZmtpPull(endpoints, **options)
        return Pull(endpoints, **options)
    if name == "gather":
        return Gather(endpoints, **options)
    if name == "sub":
        return Sub(endpoints, **options)
    raise ValueError(f"{pattern!r} is not a receiving data pattern; valid patterns: {', '.join(RECEIVING_PATTERNS)}")


def sending_wire(pattern: str, endpoints: EndpointsSpec, **options: Unpack[HwmSocketOptions]) -> SendingWire:
    """The sending socket of ``pattern`` on ``endpoints``; ``options`` are the socket
    class's (``hwm``, ``linger``, ``curve``, ``heartbeat``, ``tuning``, ``immediate``,
    ``monitor``; ``confirm`` and ``handshake_ivl`` for ``push`` and ``scatter``; ``nodrop``,
    ``verbose`` and ``context`` for ``pub``).

    * ``push``: the engine (``ReroutingPush``, PUSH on the wire): when a consumer's
      connection breaks, what the socket still held for it, and what the consumer's TCP
      had not acknowledged, goes to the consumers still there (or to the same endpoint
      when it comes back), counted in ``resent`` and ``lost_peers``; with ``confirm=True``
      ``close`` waits for the consumers' TCP acknowledgements and counts what had none.
      libzmq's PUSH drops such a queue (``ZMQ_IMMEDIATE``) or keeps it for a peer that may
      never return, and tells nobody.
    * ``scatter``: the engine (``Scatter``), for the same reasons, and because libzmq's
      SCATTER is a draft socket, absent from pyzmq's libzmq.
    * ``pub``: libzmq's XPUB (``XPub``), PUB on the wire: it shows the subscriptions
      (``recv``), so a sender can wait for subscribers, and with ``nodrop`` it refuses a
      message a full subscriber cannot take instead of dropping it unseen.
    """
    from ..pubsub import XPub
    from ..reroutingpush import ReroutingPush
    from ..scattergather import Scatter

    name = pattern.lower()
    if name == "push":
        return ReroutingPush(endpoints, **options)
    if name == "scatter":
        return Scatter(endpoints, **options)
    if name == "pub":
        return XPub(endpoints, **options)
    raise ValueError(f"{pattern!r} is not a sending data pattern; valid patterns: {', '.join(SENDING_PATTERNS)}")
