"""A PULL socket on this package's ZMTP engine: the connector's receiving socket for ``pull``.

``Pull`` is libzmq's PULL through pyzmq: every message crosses from libzmq's I/O thread to
Python in its own ``recv`` call, plus a ``RCVMORE`` check, which is the least pyzmq costs
per message. ``ZmtpPull`` is PULL on the wire (any PUSH
peer, libzmq's included, accepts it) but runs on the engine that ``Gather`` uses
(``zmtp.engine``): frames are parsed out of whole reads of the TCP stream, and a batch
receive takes the inbox in one step: through Spark, one-row ingest runs faster on it and
spends less CPU a message over every process (docs/performance.md, "Measured design
choices", has the figures).

Otherwise it keeps ``Pull``'s contract: fair-queued input from PUSH peers (30/PIPELINE),
multipart messages delivered whole (``recv_values`` gives the first frame as the topic
and the rest joined as the value), a peer that sends a frame or a multipart message larger
than ``max_message_bytes`` disconnected, per-peer queues of ``hwm`` messages with
backpressure through TCP, and, as libzmq does, what a peer sent before it left is still
delivered. Where it differs, in the connector's favour: heartbeats time a silent peer out
even while this socket applies backpressure (libzmq would take the unread PONGs for
silence, so ``Pull`` has no ZMTP timeout; see ``heartbeat``), and a multipart message is
bounded as a whole (see ``zmtp.stream.StreamEngine._add_part``), where libzmq bounds each frame.

The connector (``wires.receiving_wire``) keeps ``Pull`` for ``inproc://`` (which reaches
only other sockets of this engine, not libzmq's) and with CURVE: libzmq decrypts in C on
its own I/O thread, while this engine makes one libsodium call a message from Python,
which costs more than the receive it saves (about half the rate on this socket, same
page).
"""

from __future__ import annotations

from typing import ClassVar

from .scattergather import ZmtpPatternSocket

__all__ = ["ZmtpPull"]


class ZmtpPull(ZmtpPatternSocket):
    """Fair-queued receiver from PUSH peers, multipart allowed. Binds by default;
    thread-safe."""

    zmtp_type: ClassVar[bytes] = b"PULL"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"PUSH": b"PULL"}
    default_bind: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
