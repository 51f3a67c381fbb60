"""What pattern sockets send, receive and subscribe with: frames, messages and topics.

``as_frame`` and ``topics_list`` check what callers give, with a ``TypeError`` naming the
value and what is valid; ``flatten`` turns received messages into ``(values, topics)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import zmq

__all__ = [
    "Message",
    "Frames",
    "as_frame",
    "frame_len",
    "too_large",
    "check_bytes_messages",
    "short_repr",
    "flatten",
    "topic_bytes",
    "topics_list",
]

Message = bytes | bytearray | memoryview
Frames = Message | Sequence[Message]


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_frame(data: Any, what: str) -> Message:
    """``data`` as a bytes-like frame, or a ``TypeError`` naming the value and what is valid."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data
    if isinstance(data, zmq.Frame):
        return data.buffer
    if isinstance(data, str):
        raise TypeError(
            f"{what} must be bytes-like (bytes, bytearray, memoryview), not str {short_repr(data)}; "
            f"encode it first, e.g. {data[:20]!r}.encode()"
        )
    raise TypeError(
        f"{what} must be bytes-like (bytes, bytearray, memoryview), not {type(data).__name__} {short_repr(data)}"
    )


def frame_len(frame: Message) -> int:
    """A frame's size in bytes."""
    return frame.nbytes if isinstance(frame, memoryview) else len(frame)


def too_large(size: int, limit: int) -> ValueError:
    """The error for a frame of ``size`` bytes on a socket whose ``max_message_bytes`` is ``limit``."""
    return ValueError(
        f"message of {size} bytes exceeds max_message_bytes={limit}; peers with the same limit would disconnect"
    )


def check_bytes_messages(messages: Sequence[bytes], limit: int | None) -> None:
    """What ``send_many`` takes, checked before anything is sent: ``bytes`` messages of at
    most ``limit`` bytes (``None``: any size)."""
    for message in messages:
        if type(message) is not bytes:
            as_frame(message, "each message")  # raises for non-bytes-like values
            raise TypeError(f"send_many takes bytes messages, not {type(message).__name__}; use send()")
        if limit is not None and len(message) > limit:
            raise too_large(len(message), limit)


def flatten(
    messages: list[list[bytes]], discard_multipart: Callable[[], None] | None = None
) -> tuple[list[bytes], list[bytes | None] | None]:
    """``recv_values``'s ``(values, topics)`` of whole messages. With ``discard_multipart``
    (a single-part socket) a multipart message is dropped and reported to it instead."""
    values: list[bytes] = []
    topics: list[bytes | None] | None = None
    for message in messages:
        if len(message) > 1:
            if discard_multipart is not None:
                discard_multipart()
                continue
            if topics is None:
                topics = [None] * len(values)
            topics.append(message[0])
            values.append(message[1] if len(message) == 2 else b"".join(message[1:]))
        else:
            if topics is not None:
                topics.append(None)
            values.append(message[0])
    return values, topics


def topic_bytes(topic: object, option: str = "topics") -> bytes:
    """One subscription prefix as bytes (``str`` is UTF-8 encoded); ``TypeError`` for anything
    else than str or a bytes-like object."""
    if isinstance(topic, str):
        return topic.encode("utf-8")
    if isinstance(topic, (bytes, bytearray, memoryview)):
        return bytes(topic)
    raise TypeError(
        f"{option} entries must be str or bytes (a subscription prefix), not {type(topic).__name__} {short_repr(topic)}"
    )


def topics_list(topics: None | str | bytes | Iterable[str | bytes], option: str = "topics") -> list[bytes]:
    """Normalise ``topics`` (a str/bytes prefix, an iterable of them, or None = everything)."""
    if topics is None:
        return [b""]
    if isinstance(topics, (str, bytes, bytearray, memoryview)):
        return [topic_bytes(topics, option)]
    try:
        entries = list(topics)
    except TypeError:
        raise TypeError(
            f"{option} must be a str or bytes prefix or a list of them (None = everything), "
            f"not {type(topics).__name__} {short_repr(topics)}"
        ) from None
    return [topic_bytes(t, option) for t in entries] or [b""]
