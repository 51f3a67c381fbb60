"""The broker's defaults and the bounds on its memory, in one place for the broker, its
command line and its tests.

Why apart from ``broker``: the CLI's flags take their defaults from here (never typed in
again), and the sizing of libzmq's queues in front of the broker and toward each client
(``frontend_rcvhwm``, ``frontend_sndhwm``) are rules of their own, with their reasons.
"""

from __future__ import annotations

from typing import Optional

__all__ = ["DEFAULT_HWM", "DEFAULT_REPLY_TIMEOUT", "DEFAULT_MAX_HELD_BYTES", "DEFAULT_MAX_WAITING_BYTES",
           "DEFAULT_REQUEST_TTL", "DEFAULT_HOLD_LIMIT", "FRONTEND_QUEUE_BYTES", "FRONTEND_RCVHWM_MIN",
           "FRONTEND_SNDHWM_MIN", "frontend_rcvhwm", "frontend_sndhwm"]

#: the bytes held replies may take by default
DEFAULT_MAX_HELD_BYTES = 256 << 20
#: requests that may wait for a worker (``hwm``)
DEFAULT_HWM = 1000
#: seconds a reply waits for a client that is not reading (``reply_timeout``)
DEFAULT_REPLY_TIMEOUT = 30.0
#: the bytes waiting requests may take by default (beyond: backpressure), as many as held replies
DEFAULT_MAX_WAITING_BYTES = DEFAULT_MAX_HELD_BYTES
#: the bytes libzmq may queue per client connection in front of the broker, and toward the client
#: (see ``frontend_rcvhwm``, ``frontend_sndhwm``)
FRONTEND_QUEUE_BYTES = 8 << 20
#: the frontend's RCVHWM is never below this (see ``frontend_rcvhwm``)
FRONTEND_RCVHWM_MIN = 4
#: the frontend's SNDHWM is never below this (see ``frontend_sndhwm``)
FRONTEND_SNDHWM_MIN = 8
#: seconds a request may wait for a worker by default (``spark_zmq.request``'s default timeout)
DEFAULT_REQUEST_TTL = 30.0
#: seconds a worker may hold a request by default before it counts as lost (``spark_zmq.request``'s
#: default timeout x (retries + 1): its client has given up by then)
DEFAULT_HOLD_LIMIT = 90.0


def frontend_rcvhwm(hwm: int, max_message_bytes: Optional[int]) -> int:
    """The frontend's RCVHWM: how many requests libzmq queues per client connection before
    the broker reads them.

    Why not ``hwm``: what the broker has read is bounded by ``max_waiting_bytes``, but libzmq
    reads on while the broker does not, up to RCVHWM messages per connection (one more
    waits decoded in libzmq's I/O thread), each up to ``max_message_bytes``: with ``hwm``
    1000 and 64 MiB messages, 64 GB per client before the broker's own bound is even
    looked at. So the queue is sized in bytes: as many messages as ``FRONTEND_QUEUE_BYTES``
    holds of the largest accepted, at least ``FRONTEND_RCVHWM_MIN`` (libzmq refills a
    queue once half of it is read: two keeps one message ready while the next is decoded),
    at most ``hwm``. With 64 MiB messages that is 2 per connection (libzmq holds at most 3
    × 64 MiB per client); with messages of at most 64 KiB, 128 (small requests keep
    flowing in batches). Without ``max_message_bytes`` a message's size is unknown, and
    the least queue is taken. With the queue toward each client (``frontend_sndhwm``) the
    broker's memory is about ``max_waiting_bytes`` + ``max_held_bytes`` + (RCVHWM + 1 +
    SNDHWM + 1) × ``max_message_bytes`` for each client connection (and the sockets' kernel
    buffers, outside the process)."""
    if max_message_bytes is None:
        return min(hwm, FRONTEND_RCVHWM_MIN)
    return min(hwm, max(FRONTEND_RCVHWM_MIN, FRONTEND_QUEUE_BYTES // max_message_bytes))


def frontend_sndhwm(hwm: int, max_message_bytes: Optional[int]) -> int:
    """The frontend's SNDHWM: how many replies libzmq queues per client connection that the
    client has not read yet.

    Why not ``hwm``: the broker sends a reply without blocking and holds it itself only when
    libzmq's queue toward its client is full; what it holds is bounded (``max_held_bytes``,
    ``client_hwm``, ``reply_timeout``), but libzmq's queue takes SNDHWM replies first (one
    more is being written), each up to ``max_message_bytes``: with ``hwm`` 1000, a client
    that sends 1 MiB requests to an echo service and never reads would have the broker keep
    1,000 MiB for it. So the queue is sized in bytes like the frontend's receive queue
    (``frontend_rcvhwm``): as many replies as ``FRONTEND_QUEUE_BYTES`` holds of the largest
    accepted, at least ``FRONTEND_SNDHWM_MIN``, at most ``hwm``; without
    ``max_message_bytes``, the least. A client that stops reading then makes the broker
    hold its replies, bounded as above, once (SNDHWM + 1) × ``max_message_bytes`` wait in
    libzmq.

    Why the minimum is small: a client that reads its replies keeps libzmq's queue nearly
    empty, since libzmq's I/O thread writes replies out to the connection as they come; the
    socket learns of it from commands it processes on its own schedule, and the broker has
    it process them before it takes a queue as full (``Broker._send_now``). Measured
    (``bench/broker_queues.py``, 100 B requests, two echo workers): MEASURED."""
    if max_message_bytes is None:
        return min(hwm, FRONTEND_SNDHWM_MIN)
    return min(hwm, max(FRONTEND_SNDHWM_MIN, FRONTEND_QUEUE_BYTES // max_message_bytes))
