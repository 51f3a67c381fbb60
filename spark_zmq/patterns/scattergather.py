"""49/SCATTERGATHER on pyzmq, whose bundled libzmq has no draft sockets.

On the wire SCATTER is PUSH and GATHER is PULL (the RFC only changes the API), so any
ZeroMQ PUSH/PULL peer interoperates with them. What this module adds is the API contract:

* thread safety: one instance may be shared by many threads; every send and receive is
  one atomic call on one whole message (a lock serialises access to the libzmq socket);
* single-part only: ``Scatter.send`` raises ``ValueError`` for a list/tuple of frames;
  ``Gather`` discards a multipart message from a non-conforming peer whole (every part)
  and counts it in ``discarded_multipart``; no part of it is ever delivered.

Like ``Pull`` (see ``spark_zmq.patterns.pipeline``), a ``Gather`` still delivers the messages
it already holds from a peer that has disconnected, where the RFC says to discard them:
DESIGN.md section 3 forbids losing received data.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import zmq

from .base import PatternSocket

__all__ = ["Scatter", "Gather"]


class Scatter(PatternSocket):
    """Thread-safe round-robin sender of single-part messages. Connects by default."""

    socket_type: ClassVar[int] = zmq.PUSH
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    single_part: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000


class Gather(PatternSocket):
    """Thread-safe fair-queued receiver of single-part messages. Binds by default."""

    socket_type: ClassVar[int] = zmq.PULL
    default_bind: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    single_part: ClassVar[bool] = True

    #: multipart messages dropped whole since the socket was opened (read under no lock:
    #: an int assignment is atomic in CPython).
    discarded_multipart: int = 0

    def _discard_multipart(self) -> None:
        self.discarded_multipart += 1

    def _recv_one_nowait(self) -> Optional[list[bytes]]:
        sock = self._socket
        while True:
            try:
                frame = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return None
            if not sock.rcvmore:
                return [frame]
            # A non-conforming peer sent a multipart message: drain every remaining part
            # (libzmq delivers a message's parts atomically, so they are all queued now).
            while sock.rcvmore:
                sock.recv()
            self.discarded_multipart += 1
