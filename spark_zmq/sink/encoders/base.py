"""What every format's encoder shares: the two shapes a message leaves in, and the
column that routes a row instead of travelling in it.

The shape follows the pattern, not the format: ``push`` and ``scatter`` send single-part
messages only, so their encoders (``PayloadEncoder``) yield bare payloads, one ``bytes``
per message, which the socket sends in one batch call with no tuple per message; ``pub``
sends ``[topic, payload]``, so its encoders (``TopicEncoder``) yield pairs. The write
task hands each shape to the sender's method for it, so no ``None`` ever has to say
"the other path".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, Generic, TypeVar

import pyarrow as pa

__all__ = ["Encoder", "PayloadEncoder", "TopicEncoder", "Message", "payload_columns", "routes_by_column"]

#: (topic frame or None, payload): one ``pub`` message
Message = tuple[bytes | None, bytes]

#: what one encoded message is: a bare payload, or a ``Message``
T = TypeVar("T", bytes, Message)


class Encoder(ABC, Generic[T]):
    """One write task's rows in one format, as messages in order.

    ``encode`` is called once per Arrow batch Spark hands the task (never with an empty
    one) and returns the messages ready to send; ``finish`` once after the last batch,
    returning what an encoder held back (the Arrow encoder keeps its latest message until
    it knows whether another follows, so the last can say so). An encoder lives for one
    task and is not shared between threads.
    """

    fmt: ClassVar[str]

    @abstractmethod
    def encode(self, batch: pa.RecordBatch) -> list[T]:
        """The messages of ``batch``, to be sent before those of the next batch."""

    def finish(self) -> list[T]:
        """What is left to send once every batch was encoded."""
        return []


class PayloadEncoder(Encoder[bytes]):
    """Single-part messages, for ``push`` and ``scatter``."""


class TopicEncoder(Encoder[Message]):
    """``(topic, payload)`` messages, for ``pub``."""


def routes_by_column(pattern: str, topic: str | None) -> bool:
    """Whether a ``topic`` column, when the DataFrame has one, is each row's topic (and so
    not part of the payload): ``pub`` without a fixed ``topic`` option. Elsewhere a column
    named ``topic`` is data like any other."""
    return pattern == "pub" and topic is None


def payload_columns(batch: pa.RecordBatch, drop_topic: bool) -> pa.RecordBatch:
    """``batch`` without its ``topic`` column when that column routes the rows."""
    if drop_topic and "topic" in batch.schema.names:
        return batch.drop_columns(["topic"])
    return batch


#: either shape, as ``encoder_for`` returns it
AnyEncoder = PayloadEncoder | TopicEncoder
