"""30/PIPELINE: PUSH distributes round-robin, PULL fair-queues.

libzmq implements the RFC's queueing rules; these classes add the CZMQ endpoint syntax,
bounded waits and batch receives. Like libzmq sockets they are meant for one thread at a
time; use ``Scatter``/``Gather`` to share one socket between threads.

One deliberate deviation from 30/PIPELINE: the RFC says that when a peer disconnects, the
PULL socket SHALL destroy that peer's incoming queue and discard the messages in it.
libzmq instead delivers what a PULL already holds from a peer that has since gone away,
and this layer keeps that behaviour: docs/architecture.md ("Guarantees") promises that nothing the
connector has received is lost for ``pull``/``gather``, and a producer that sends its last
messages and exits would otherwise lose them. (A PUSH does follow the RFC: the queue of a
peer that disconnected from it is dropped, never rerouted to another peer.)
"""

from __future__ import annotations

from typing import ClassVar

import zmq

from .base import PatternSocket

__all__ = ["Push", "Pull"]


class Push(PatternSocket):
    """Round-robin to every connected PULL/GATHER peer; blocks when none can take a message.

    Connects by default. ``send(data, timeout=None)`` accepts bytes or a list of frames.
    """

    socket_type: ClassVar[int] = zmq.PUSH
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000


class Pull(PatternSocket):
    """Fair-queues from every connected PUSH/SCATTER peer. Binds by default."""

    socket_type: ClassVar[int] = zmq.PULL
    default_bind: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    heartbeat_zmtp_timeout: ClassVar[bool] = False  # backpressure: see heartbeat.py
    heartbeat_pings: ClassVar[bool] = False  # a producer's exit: see heartbeat.py
