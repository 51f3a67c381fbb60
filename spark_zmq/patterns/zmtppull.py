"""A PULL socket on this package's ZMTP engine: the connector's receiving socket for ``pull``.

``Pull`` is libzmq's PULL through pyzmq: every message crosses from libzmq's I/O thread to
Python in its own ``recv`` call, plus a ``RCVMORE`` check, which is the least pyzmq costs
per message (about 0.6 us at 100 bytes here). ``ZmtpPull`` is PULL on the wire (any PUSH
peer, libzmq's included, accepts it) but runs on the engine that ``Gather`` uses
(``zmtp.engine``): frames are parsed out of whole reads of the TCP stream, and a batch
receive takes the inbox in one step. Measured through Spark (one-row ingest, 100 bytes,
1 M messages from a bare pyzmq PUSH process, three runs each, in turn): 461 k msgs/s with
``Pull``, 587 k with this socket, and 3.5 -> 2.3 us of CPU per message over every process.

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
which costs more than the receive it saves (one-row ingest at 100 B with CURVE through
Spark: 467 k msgs/s on libzmq, 236 k on this socket).
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
