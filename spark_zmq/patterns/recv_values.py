"""The receive loop the connector's receivers spend their time in: ``(values, topics)``
read frame by frame off a libzmq socket.

Why a loop of its own: per message it costs one ``recv`` and one RCVMORE check (through
ctypes, see ``rcvmore``), with no list per message, where receiving whole messages and
flattening them (``frames.flatten``) builds a list for every one. The libzmq wire
(``LibzmqWire.receive_values``, behind ``PatternSocket.recv_values``) takes the socket's
lock, then calls this; the wire keeps the waiting (``LibzmqWire.wait``: bounded,
interrupted by ``close``), the loop only decides when to wait and what a message becomes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import zmq

__all__ = ["recv_values_from"]

# a plain int: pyzmq's constants are ``IntFlag`` members (see ``base``)
_NOBLOCK = int(zmq.NOBLOCK)


def recv_values_from(
    sock: zmq.Socket[Any],
    more: Callable[[], int],
    max_messages: int,
    max_bytes: int | None,
    wait: Callable[[], None],
    discard_multipart: Callable[[], None] | None = None,
) -> tuple[list[bytes], list[bytes | None] | None]:
    """Up to ``max_messages`` messages (and about ``max_bytes`` of values, at least one
    message) from ``sock``: ``wait()`` until the first arrives (it raises ``TimeoutError``
    at the caller's deadline), then only what is already queued.

    A one-frame message is a value (topic ``None``); a multi-frame one is ``[topic,
    payload...]``: its first frame is the topic and the rest, joined, the value. ``topics``
    is ``None`` when every message had one frame. With ``discard_multipart`` (a single-part
    socket) a multipart message is dropped and reported to it instead, so the lists are
    empty only when every message that arrived was dropped. ``more`` is the socket's
    RCVMORE check (``rcvmore.rcvmore_check``)."""
    values: list[bytes] = []
    topics: list[bytes | None] | None = None
    limit = max_bytes if max_bytes is not None else 1 << 62
    size = 0
    received_any = False
    recv, NOBLOCK = sock.recv, _NOBLOCK
    while len(values) < max_messages and size < limit:
        try:
            frame = recv(NOBLOCK)
        except zmq.Again:
            if received_any:
                break
            wait()
            continue
        received_any = True
        if more():
            rest = sock.recv_multipart()  # a message's parts arrive together
            if discard_multipart is not None:
                discard_multipart()
                continue
            if topics is None:
                topics = [None] * len(values)
            topics.append(frame)
            frame = rest[0] if len(rest) == 1 else b"".join(rest)
        elif topics is not None:
            topics.append(None)
        values.append(frame)
        size += len(frame)
    return values, topics
