"""49/SCATTERGATHER on the wire: SCATTER and GATHER sockets that real peers accept.

pyzmq's bundled libzmq is built without the draft API, so it has no SCATTER or GATHER
socket, and libzmq gives no way to announce another socket type: a libzmq SCATTER refuses
a PULL peer's handshake (and the other way round). So these two classes do not use libzmq
at all: they speak ZMTP 3.1 themselves (``spark_zmq.patterns.wires.zmtp``: greeting, NULL and
CURVE mechanisms, framing, PING/PONG), on an I/O thread of their own per socket, over
``tcp://``, ``ipc://`` and ``inproc://`` (between two of these sockets in one process).
The other route, a libzmq built with the draft API, would not install with ``pip`` on a
fresh machine.

What they promise (49/SCATTERGATHER and the connector's rules):

* thread safety: one instance may be shared by many threads; every send and receive is
  one atomic call on one whole message;
* single-part only: ``Scatter.send`` raises ``ValueError`` for a list/tuple of frames;
  ``Gather`` discards a multipart message from a non-conforming peer whole (every part)
  and counts it in ``discarded_multipart``;
* a ``Scatter`` sends round-robin to GATHER peers and, for compatibility, to PULL peers
  (it announces itself as PUSH to those); a ``Gather`` fair-queues from SCATTER peers and
  PUSH peers (announcing PULL to them);
* a peer counts only once its handshake completed: a refused peer, or one that never
  completes the handshake, is never a delivery (``send`` blocks, then ``TimeoutError``);
* per-peer queues limited by ``hwm`` (default 1000 messages), backpressure through TCP
  when a GATHER's queue is full;
* where they differ from the RFC, to lose nothing: a ``Gather`` still delivers what it
  received from a peer that left, and a ``Scatter`` re-routes the queue of a peer that
  left to the other peers instead of discarding it (see ``zmtp.engine``).

The socket classes here only declare what they are (their ZMTP type and the peers they
talk to) and name their wire: ``ZmtpPatternSocket`` is a ``PatternSocket`` (the API: checks,
endpoints, timeouts, close, ``with``) whose ``wire_class`` is ``wires.engine.EngineWire``.
"""

from __future__ import annotations

from typing import ClassVar

from .base import PatternSocket
from .wires.contract import WireClass
from .wires.engine import EngineWire
from .wires.zmtp.engine import Engine

__all__ = ["Scatter", "Gather"]


class ZmtpPatternSocket(PatternSocket):
    """A ``PatternSocket`` whose wire is this package's ZMTP engine, not a libzmq socket.

    It keeps the ``PatternSocket`` API (``send``, ``send_many``, ``recv``, ``recv_batch``,
    ``recv_values``, ``poll_recv``, ``close``, ``handshakes``...) and its options, plus
    ``handshake_ivl`` (ms, default 30,000: a peer that has not completed its handshake by
    then is disconnected) and ``confirm`` (default ``False``: with ``True``, ``close()`` also
    waits, within the linger period, until the peers' TCP acknowledged every message, and
    counts what it did not in ``unconfirmed``). ``context`` is accepted and unused (there
    is no libzmq context); ``immediate`` makes a connect endpoint count only once its
    handshake completed. ``zmq_socket`` raises ``AttributeError``: there is no libzmq socket."""

    zmtp_type: ClassVar[bytes]
    #: a peer's Socket-Type -> the type this socket announces to it
    peer_types: ClassVar[dict[bytes, bytes]]
    socket_type: ClassVar[int] = -1
    wire_class: ClassVar[WireClass] = EngineWire

    @property
    def _engine_wire(self) -> EngineWire:
        wire = self._wire
        assert isinstance(wire, EngineWire)  # the ``wire_class`` of every engine socket
        return wire

    @property
    def _engine(self) -> Engine:
        """The engine itself, for tests that look inside it."""
        return self._engine_wire.engine

    @property
    def discarded_multipart(self) -> int:
        """Multipart messages dropped whole since the socket was opened."""
        return self._engine_wire.discarded_multipart


class Scatter(ZmtpPatternSocket):
    """Thread-safe round-robin sender of single-part messages to GATHER (and PULL) peers.
    Connects by default."""

    zmtp_type: ClassVar[bytes] = b"SCATTER"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"GATHER": b"SCATTER", b"PULL": b"PUSH"}
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    single_part: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000


class Gather(ZmtpPatternSocket):
    """Thread-safe fair-queued receiver of single-part messages from SCATTER (and PUSH)
    peers. Binds by default."""

    zmtp_type: ClassVar[bytes] = b"GATHER"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"SCATTER": b"GATHER", b"PUSH": b"PULL"}
    default_bind: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    single_part: ClassVar[bool] = True
