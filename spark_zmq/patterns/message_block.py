"""Many received messages as one buffer and their offsets: what a receiver takes in bulk.

Why: a receiver spools what it receives as an Arrow batch, whose binary column *is* a
buffer of the values joined and an array of offsets. A list of one ``bytes`` object per
message, made on the way only to be joined again, cost the receiving process more than
the rest of its work at 100-byte messages. ``MessageBlock`` is that column's shape: the
engine's receive (``zmtp``) fills it from runs of frames split in bulk out of the TCP
stream (``MessageRun``), with no Python object per message; any other wire fills it from
the values it received (``from_values``).

``MessageRun`` is the engine's half: single-part messages of one read, their bodies joined,
kept as one item in a peer's inbox and split only where a receive takes part of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["MessageBlock", "MessageRun"]

BytesLike = bytes | bytearray | memoryview


def _slices(data: BytesLike, offsets: np.ndarray) -> list[bytes]:
    """One ``bytes`` per message of ``data`` cut at ``offsets``."""
    whole, ends = bytes(data), offsets.tolist()
    return [whole[ends[j] : ends[j + 1]] for j in range(len(ends) - 1)]


def _ends(values: Sequence[BytesLike], base: int = 0) -> np.ndarray:
    """Where each of ``values`` ends once they are joined after ``base`` bytes."""
    ends = np.cumsum(np.fromiter(map(len, values), np.int64, len(values)))
    ends += base
    return ends


class MessageRun:
    """``count`` single-part messages: their bodies joined in ``data``, message ``j`` from
    ``offsets[j]`` to ``offsets[j + 1]`` (``offsets`` starts at 0, ``count + 1`` of them).
    ``data`` may be a ``memoryview`` of a larger buffer (a run split by a receive)."""

    __slots__ = ("data", "offsets", "count", "nbytes")

    def __init__(self, data: BytesLike, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets
        self.count = len(offsets) - 1
        self.nbytes = int(offsets[-1])

    def split(self, k: int) -> tuple[MessageRun, MessageRun]:
        """The first ``k`` messages (``0 < k < count``) and the rest, without copying bodies."""
        cut = int(self.offsets[k])
        view = memoryview(self.data)
        return (MessageRun(view[:cut], self.offsets[: k + 1]), MessageRun(view[cut:], self.offsets[k:] - cut))

    def fitting(self, max_bytes: int) -> int:
        """How many leading messages fit in ``max_bytes`` (at least one)."""
        return max(1, int(np.searchsorted(self.offsets, max_bytes, side="right")) - 1)

    def messages(self) -> list[bytes]:
        """One ``bytes`` per message: for callers that want a list (``recv``, ``recv_batch``)."""
        return _slices(self.data, self.offsets)


@dataclass(frozen=True)
class MessageBlock:
    """Received messages in order: values joined in ``data``, value ``j`` from
    ``offsets[j]`` to ``offsets[j + 1]`` (int64, ``count + 1`` of them, from 0); ``topics``
    as ``recv_values`` gives them (``None`` when every message had one frame)."""

    data: BytesLike
    offsets: np.ndarray
    topics: list[bytes | None] | None = None

    @property
    def count(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])

    def values(self) -> list[bytes]:
        """One ``bytes`` per message."""
        return _slices(self.data, self.offsets)

    @classmethod
    def from_values(cls, values: Sequence[BytesLike], topics: list[bytes | None] | None = None) -> MessageBlock:
        """The block of ``values`` (as ``recv_values`` returns them): joined once."""
        return cls(b"".join(values), np.concatenate([np.zeros(1, np.int64), _ends(values)]), topics)

    @classmethod
    def from_items(cls, items: Sequence[bytes | MessageRun]) -> MessageBlock:
        """The block of single-part messages and runs of them, in order (an engine's take)."""
        if len(items) == 1 and type(items[0]) is MessageRun:
            run = items[0]
            return cls(run.data, run.offsets)
        datas: list[BytesLike] = []
        ends: list[np.ndarray] = [np.zeros(1, np.int64)]  # each piece's message ends, from 0 on
        base = 0
        loose: list[bytes] = []  # single messages since the last run

        def flush_loose() -> None:
            nonlocal base
            if loose:
                datas.extend(loose)
                ends.append(_ends(loose, base))
                base = int(ends[-1][-1])
                loose.clear()

        for item in items:
            if type(item) is MessageRun:
                flush_loose()
                datas.append(item.data)
                ends.append(item.offsets[1:] + base)
                base += item.nbytes
            else:
                loose.append(item)  # type: ignore[arg-type]
        flush_loose()
        return cls(b"".join(datas), np.concatenate(ends))
