"""The broker's counters (``BrokerStats``) and what it checks of the messages it relays.

Kept apart from the loop (``broker``) so that each module stays readable: these are plain
values and pure functions, no sockets.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import zmq

from ..patterns.curve import Curve

__all__ = [
    "BrokerStats",
    "warn_shared_keys",
    "is_reply",
    "envelope",
    "delimiter",
    "PING",
    "PONG",
    "pong",
    "answered_probe",
]

log = logging.getLogger("spark_zmq.requestreply.broker")


@dataclass(frozen=True)
class BrokerStats:
    """A snapshot of a broker's counters."""

    #: workers waiting for a request
    workers_idle: int
    #: workers that announced themselves and are still connected (idle or holding a request)
    workers_known: int
    #: requests received and not yet given to a worker (at most ``hwm``)
    requests_waiting: int
    #: requests a worker holds (sent to it, reply not yet back)
    requests_in_flight: int
    #: requests sent to a worker, in all
    requests_forwarded: int
    #: replies sent back to their client, in all
    replies_returned: int
    #: messages dropped because they were not what a client or worker may send
    malformed: int
    #: replies dropped because their client was gone, or did not read for ``reply_timeout``
    replies_undeliverable: int
    #: requests a worker took with it when it disconnected (clients resend them)
    requests_lost: int
    #: workers that disconnected or could no longer be reached
    workers_gone: int
    #: CURVE handshakes refused on either side
    handshakes_rejected: int
    #: replies kept for a client that is not reading now (its queue in the broker is full)
    replies_held: int = 0
    #: replies dropped because they did not come from the worker holding that request
    replies_unexpected: int = 0
    #: requests dropped because their client already had ``client_hwm`` waiting while it read no reply
    requests_refused: int = 0
    #: bytes of the replies held
    held_bytes: int = 0
    #: messages dropped whole for too many frames or too many bytes in all (``max_frames``,
    #: ``max_message_bytes``)
    messages_oversize: int = 0
    #: workers that came back on a new connection with the same routing id, and were served again
    workers_reconnected: int = 0
    #: requests dropped because they waited longer than ``request_ttl`` for a worker
    requests_expired: int = 0
    #: workers holding a request longer than ``hold_limit`` (each such request counted in ``requests_lost``)
    workers_overdue: int = 0
    #: bytes of the requests waiting (all frames; at most about ``max_waiting_bytes``)
    waiting_bytes: int = 0

    def line(self) -> str:
        """One line for a log or a terminal."""
        return (
            f"workers {self.workers_idle} idle / {self.workers_known} known; requests {self.requests_waiting} "
            f"waiting, {self.requests_in_flight} in flight; {self.requests_forwarded} forwarded, "
            f"{self.replies_returned} returned, {self.replies_held} held, {self.requests_refused} refused, "
            f"{self.requests_lost} lost with a worker, "
            f"{self.replies_undeliverable} undeliverable, {self.replies_unexpected} unexpected, {self.malformed} malformed, "
            f"{self.messages_oversize} oversize, {self.workers_reconnected} workers reconnected, "
            f"{self.requests_expired} expired, {self.workers_overdue} workers overdue, "
            f"{self.handshakes_rejected} handshakes rejected"
        )


#: a liveness probe (``spark-zmq ping``): the one body frame a client sends to ask "are you
#: serving?". It is a relay's ``hello`` request as it is, so a relay answers it unchanged;
#: the broker (on its frontend) and a REP worker answer it themselves, without a worker or a
#: handler, with ``[PONG, json]`` (``pong``).
PING = b'{"op":"hello","id":"spark-zmq-ping"}'
#: the first frame of the answer to ``PING`` (a relay's "ok" status, the same word)
PONG = b"ok"


def pong(service: str, **facts: int) -> list[bytes]:
    """The answer to ``PING`` of a broker or worker: ``[PONG, {"service": ..., **facts}]``."""
    return [PONG, json.dumps({"service": service, **facts}, separators=(",", ":")).encode()]


def answered_probe(front: zmq.Socket[Any], frames: Sequence[zmq.Frame], stats: Callable[[], BrokerStats]) -> bool:
    """Whether client message ``frames`` (``[envelope..., b"", body]``) is a ``PING``; then the
    broker answers it itself, no worker involved, with ``pong`` (dropped if the client's
    queue is full: it asks again)."""
    at = delimiter(frames, start=1)
    if at is None or at != len(frames) - 2 or frames[-1].bytes != PING:
        return False
    now = stats()
    try:
        front.send_multipart(
            [
                *frames[: at + 1],
                *pong("broker", workers=now.workers_known, idle=now.workers_idle, waiting=now.requests_waiting),
            ],
            zmq.NOBLOCK,
        )
    except zmq.ZMQError:
        pass
    return True


def warn_shared_keys(front: Curve | None, back: Curve | None) -> None:
    """A key accepted on both sides can take requests as a worker and answer other clients'
    requests: each side should authorize its own kind of peer (logged, not refused: the
    caller may mean it, e.g. a test)."""
    if front is None or back is None or not front.is_server or not back.is_server:
        return
    if isinstance(back.authorized, str):
        shared = "every"  # ANY_KEY: whoever reaches the backend may be a worker
    else:
        assert back.authorized is not None  # a server has it (``Curve.__post_init__``)
        shared = str(len(back.authorized & front.authorized)) if isinstance(front.authorized, frozenset) else "every"
    if shared != "0":
        log.warning(
            "Broker: %s key accepted on the frontend (clients) is accepted on the backend (workers) too: "
            "such a client can take other clients' requests and answer them; give each side its own "
            "authorized keys",
            shared,
        )


def is_reply(payload: Sequence[zmq.Frame | bytes]) -> bool:
    """``[envelope (at least one frame)..., b"", reply (at least one frame)...]``."""
    at = delimiter(payload)
    return at is not None and 0 < at < len(payload) - 1


def envelope(frames: Sequence[zmq.Frame | bytes]) -> tuple[bytes, ...]:
    """The frames before the first empty one, as bytes (what a reply must carry back)."""
    out = []
    for frame in frames:
        if len(frame) == 0:
            break
        out.append(frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame))
    return tuple(out)


def delimiter(frames: Sequence[zmq.Frame | bytes], start: int = 0) -> int | None:
    """The index of the first empty frame at or after ``start``, or None."""
    for i in range(start, len(frames)):
        if len(frames[i]) == 0:
            return i
    return None
