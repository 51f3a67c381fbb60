"""The source's offsets: each channel's next message number, and the spool they number.

Spark checkpoints what the reader returns from ``initialOffset``/``latestOffset`` as JSON
(PySpark ``json.dumps`` the dict) and hands it back, decoded, to ``latestOffset``,
``partitions`` and ``commit``, also to a query restarted from that checkpoint by another
version of the connector. So the JSON is a stored format, fixed::

    {"0": 1200, "1": 980, "spool": "<spool id>"}

one key per ingest channel, in channel order (its next offset, Kafka's meaning), then
the id of the spool those numbers refer to, so that a checkpoint paired with another or a
recreated spool is detected. Checkpoints written before offsets carried a spool have no
``"spool"`` key. Spark compares offsets by their JSON text, so the same offsets must
always give the same text: ``ChannelOffsets`` is that codec, with the arithmetic the
planner and the reader do on offsets, as Spark's Kafka connector has ``KafkaSourceOffset``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import SparkZmqError

__all__ = ["ChannelOffsets", "OffsetsFormatError", "SPOOL_KEY"]

#: the key naming the spool, beside the channels' numeric keys
SPOOL_KEY = "spool"


class OffsetsFormatError(SparkZmqError, ValueError):
    """Offsets (from Spark's checkpoint) that are not this source's."""


class ChannelOffsets(Mapping[int, int]):
    """Channel -> next offset, immutable, plus the spool the offsets number (``None`` for
    checkpoints written before offsets carried one). A ``Mapping`` of the channels alone,
    so the planner's maths take it or any plain ``{channel: offset}``."""

    __slots__ = ("_by_channel", "spool")

    def __init__(self, by_channel: Mapping[int, int] | Mapping[str, int], spool: str | None = None) -> None:
        items: Iterable[tuple[int | str, int]] = by_channel.items()
        ordered = sorted(items, key=lambda item: int(item[0]))
        self._by_channel: dict[int, int] = {int(c): int(o) for c, o in ordered}
        self.spool: str | None = spool or None

    # -- the JSON Spark stores -----------------------------------------------------------------

    @classmethod
    def from_dict(cls, offsets: object) -> ChannelOffsets:
        """Offsets as PySpark hands them to the reader (the checkpoint's JSON, decoded)."""
        if isinstance(offsets, ChannelOffsets):
            return offsets
        if not isinstance(offsets, Mapping):
            raise cls._corrupt(offsets, "not a JSON object")
        channels: dict[int, int] = {}
        spool: str | None = None
        for key, value in offsets.items():
            if key == SPOOL_KEY:
                if value is not None and not isinstance(value, str):
                    raise cls._corrupt(offsets, f"{SPOOL_KEY!r} must be a spool id (a string), not {value!r}")
                spool = value or None
            elif isinstance(key, str) and key.isdigit() and key == str(int(key)):
                if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                    raise cls._corrupt(offsets, f"channel {key}'s offset must be a whole number >= 0, not {value!r}")
                channels[int(key)] = value
            else:
                raise cls._corrupt(offsets, f"unknown key {key!r} (expected channel numbers and {SPOOL_KEY!r})")
        if not channels:
            raise cls._corrupt(offsets, "no channel offsets")
        return cls(channels, spool)

    @classmethod
    def from_json(cls, text: str | bytes) -> ChannelOffsets:
        try:
            decoded = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise cls._corrupt(text, f"not JSON ({exc})") from None
        return cls.from_dict(decoded)

    def to_dict(self) -> dict[str, Any]:
        """What the reader returns to Spark: channels in order, then the spool (if any)."""
        out: dict[str, Any] = {str(c): o for c, o in self._by_channel.items()}
        if self.spool is not None:
            out[SPOOL_KEY] = self.spool
        return out

    def to_json(self) -> str:
        """The text Spark writes to its offset log (``json.dumps`` of ``to_dict``, as PySpark does)."""
        return json.dumps(self.to_dict())

    @staticmethod
    def _corrupt(offsets: object, why: str) -> OffsetsFormatError:
        text = offsets if isinstance(offsets, str) else _json_or_repr(offsets)
        if len(text) > 500:
            text = text[:500] + "..."
        return OffsetsFormatError(
            f"offsets {text} from Spark's checkpoint are not this source's offsets ({why}): expected "
            '{"0": <next offset>, ..., "spool": "<spool id>"}; the offset log under the checkpointLocation '
            "is corrupt or belongs to another source: use a new checkpointLocation"
        )

    # -- a mapping of the channels -------------------------------------------------------------

    def __getitem__(self, channel: int) -> int:
        return self._by_channel[channel]

    def __iter__(self) -> Iterator[int]:
        return iter(self._by_channel)

    def __len__(self) -> int:
        return len(self._by_channel)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChannelOffsets):
            return self._by_channel == other._by_channel and self.spool == other.spool
        return NotImplemented

    def __hash__(self) -> int:
        return hash((tuple(self._by_channel.items()), self.spool))

    def __repr__(self) -> str:
        return f"ChannelOffsets({self._by_channel}, spool={self.spool!r})"

    def __str__(self) -> str:
        """The channels as in messages: ``{0: 12, 1: 40}``."""
        return str(self._by_channel)

    # -- arithmetic ----------------------------------------------------------------------------

    def with_spool(self, spool: str | None) -> ChannelOffsets:
        return ChannelOffsets(self._by_channel, spool)

    def replace(self, channel: int, offset: int) -> ChannelOffsets:
        """These offsets with ``channel`` at ``offset``."""
        return ChannelOffsets({**self._by_channel, channel: offset}, self.spool)

    def at_least(self, floor: Mapping[int, int]) -> ChannelOffsets:
        """Each channel at the larger of its offset and ``floor``'s (channels ``floor``
        lacks unchanged)."""
        return ChannelOffsets({c: max(o, floor.get(c, o)) for c, o in self._by_channel.items()}, self.spool)

    def ranges_to(self, end: Mapping[int, int]) -> dict[int, tuple[int, int]]:
        """``[start, end)`` per channel of ``end``; a channel these offsets lack starts at its end."""
        return {c: (self.get(c, e), e) for c, e in end.items()}

    def count_to(self, end: Mapping[int, int]) -> int:
        """Offsets from these to ``end``, summed over ``end``'s channels (never negative per channel)."""
        return sum(max(0, hi - lo) for lo, hi in self.ranges_to(end).values())

    def to_channel_dict(self) -> dict[str, int]:
        """``{"<channel>": offset}``, as the ingest runtimes and the relays' wire take offsets."""
        return {str(c): o for c, o in self._by_channel.items()}


def _json_or_repr(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
