"""The broker's defaults and the bounds on its memory, in one place for the broker, its
command line and its tests.

Why apart from ``broker``: the CLI's flags take their defaults from here (never typed in
again), and the sizing of libzmq's queues in front of the broker and toward each client
(``frontend_rcvhwm``, ``frontend_sndhwm``) are rules of their own, with their reasons.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_HWM",
    "DEFAULT_REPLY_TIMEOUT",
    "DEFAULT_MAX_HELD_BYTES",
    "DEFAULT_MAX_WAITING_BYTES",
    "DEFAULT_REQUEST_TTL",
    "DEFAULT_HOLD_LIMIT",
    "FRONTEND_QUEUE_BYTES",
    "FRONTEND_RCVHWM_MIN",
    "FRONTEND_SNDHWM_MIN",
    "frontend_rcvhwm",
    "frontend_sndhwm",
]

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


def frontend_rcvhwm(hwm: int, max_message_bytes: int | None) -> int:
    """The frontend's RCVHWM: how many requests libzmq queues per client connection before
    the broker reads them.

    Why not ``hwm``: what the broker has read is bounded by ``max_waiting_bytes``, but libzmq
    reads on while the broker does not, up to RCVHWM messages per connection (one more
    waits decoded in libzmq's I/O thread), each up to ``max_message_bytes``: with ``hwm``
    1000 and 64 MiB messages, 64 GB per client before the broker's own bound is even
    looked at. So the queue is sized in bytes: as many messages as ``FRONTEND_QUEUE_BYTES``
    holds of the largest accepted, at least ``FRONTEND_RCVHWM_MIN``, at most ``hwm``. With
    64 MiB messages that is 4 per connection (libzmq holds at most 5 × 64 MiB per client);
    with messages of at most 64 KiB, 128 (small requests keep flowing in batches). Without
    ``max_message_bytes`` a message's size is unknown, and the least queue is taken.

    Why the minimum is 4: libzmq's I/O thread stops reading a connection whose queue is
    full and reads on once the socket has taken half of it, so a short queue costs a
    thread wake-up every message or two, and the least queue applies to every deployment
    whose ``max_message_bytes`` is above 2 MiB (the CLI's default is 64 MiB), however small
    its requests are. Measured (``bench/broker_queues.py --workers 0``: one client sends
    50,000 requests of 100 B to a broker with no worker, medians of 5 and 3 runs): the
    broker takes 52,000-53,000 requests/s with RCVHWM 2, 62,000-63,000 with 3 or 4, 72,000
    with 8, 85,000 with 64 and 89,000 with 1000; through four echo workers, 64 or 512 in
    flight, the rates with 2 are 2-9 % below those with 3, 4 or 8, within the runs' spread.
    4 takes back 10,000 requests/s of that for two messages more per connection.

    With the queue toward each client (``frontend_sndhwm``) the broker's memory is about
    ``max_waiting_bytes`` + ``max_held_bytes`` + (RCVHWM + 1 + SNDHWM + 1) ×
    ``max_message_bytes`` for each client connection (and the sockets' kernel buffers,
    outside the process)."""
    if max_message_bytes is None:
        return min(hwm, FRONTEND_RCVHWM_MIN)
    return min(hwm, max(FRONTEND_RCVHWM_MIN, FRONTEND_QUEUE_BYTES // max_message_bytes))


def frontend_sndhwm(hwm: int, max_message_bytes: int | None) -> int:
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

    Why the minimum is 8: a client that reads its replies keeps libzmq's queue nearly
    empty, since libzmq's I/O thread writes replies out to the connection as they come; but
    the socket learns of it only from commands it processes on its own schedule (when
    sending, about once a millisecond), so the broker has it process them before it takes a
    queue as full (``Broker._send_now``), and the queue must still take a burst of replies
    the workers answered together. Measured (``bench/broker_queues.py``: one client
    pipelining 10,000 requests of 100 B through echo workers, RCVHWM 2; medians of 3 or 5
    runs): with SNDHWM 8, 16 or 1000 no send found a queue full, with two or four workers
    and 8, 16 or 64 requests in flight; with 4, up to 98 sends of 10,000 did (four workers),
    with 2 up to 568, with 1 up to 4,154 (the reply held, sent again at the client's next
    request or 10 ms later). Throughput with SNDHWM 8 was within the runs' spread of 1000's
    (four workers, 64 in flight: 7,012 and 7,055 requests/s; 16 in flight: 6,637 and 6,925,
    and with RCVHWM 4, 7,406 and 7,637). The second look is what lets the queue be short:
    without it, SNDHWM 8 served 2,547 requests/s (405-595 sends of 10,000 found a queue
    full; four workers, 16 in flight) against 7,341 with 1000."""
    if max_message_bytes is None:
        return min(hwm, FRONTEND_SNDHWM_MIN)
    return min(hwm, max(FRONTEND_SNDHWM_MIN, FRONTEND_QUEUE_BYTES // max_message_bytes))
