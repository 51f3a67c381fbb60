"""The relay's answers, one type per op's answer: ``to_wire`` is what the relay sends,
``from_wire`` what the query reads back (``ValueError`` naming the field it cannot read).

The fields a relay of an earlier build of protocol 1 may leave out (a receiver's errors,
counters, the reader's committed offsets, ``attendedUntil``) read as their defaults; the
description of a relay (``hello``, ``attach``) is read only from a relay of this
connector's protocol (``ProtocolMismatch`` otherwise), since nothing else it says can be.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...ingest.runtime import RangeInfo
from ..protocol import PROTOCOL
from ..readers import DEFAULT_READER
from .fields import (
    Hint,
    Wire,
    WireLoss,
    channel_key,
    flag,
    hint,
    integer,
    integers,
    json_list,
    json_object,
    need,
    protocol_of,
    real,
    text,
    texts,
)

__all__ = [
    "Done",
    "LeaseRefused",
    "HelloAnswer",
    "RelayDescription",
    "StateAnswer",
    "AttachAnswer",
    "CountAnswer",
    "EndWithinAnswer",
    "LostAnswer",
    "LocateAnswer",
    "RangeDescription",
    "DescribeAnswer",
    "TimeStart",
    "AtTimeAnswer",
    "ReaderEntry",
    "Retention",
    "ReadersAnswer",
]


@dataclass(frozen=True)
class Done:
    """The answer of ``detach`` and ``advance``: nothing but that it was done."""

    def to_wire(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_wire(cls, wire: Wire) -> Done:
        return cls()


@dataclass(frozen=True)
class LeaseRefused:
    """Another session holds the reader's lease: it renewed it ``idle`` s ago, and it lapses
    in ``lapses`` s unless renewed (the client raises it as ``RelayBusyError``)."""

    idle: float
    lapses: float
    reader: str

    def to_wire(self) -> dict[str, Any]:
        return {"refused": {"idle": self.idle, "lapses": self.lapses, "reader": self.reader}}

    @classmethod
    def from_wire(cls, wire: Wire, reader: str) -> LeaseRefused:
        """``reader``: the one asked for, when the relay does not say."""
        refused = json_object(need(wire, "refused"), "refused")
        return cls(
            real(need(refused, "idle"), "idle"),
            real(need(refused, "lapses"), "lapses"),
            text(refused.get("reader", reader), "reader"),
        )


@dataclass(frozen=True)
class HelloAnswer:
    """What anyone who reaches the relay may know: never where its spool is."""

    spool: str
    channels: int
    format: str
    held: bool
    control_requests: int = 0
    protocol: int = PROTOCOL

    def to_wire(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "spool": self.spool,
            "channels": self.channels,
            "format": self.format,
            "held": self.held,
            "controlRequests": self.control_requests,
        }

    @classmethod
    def from_wire(cls, wire: Wire) -> HelloAnswer:
        protocol = protocol_of(wire)
        return cls(
            text(need(wire, "spool"), "spool"),
            integer(need(wire, "channels"), "channels"),
            text(need(wire, "format"), "format"),
            flag(wire.get("held", False), "held"),
            integer(wire.get("controlRequests", 0), "controlRequests"),
            protocol,
        )


@dataclass(frozen=True)
class RelayDescription:
    """What the lease holder learns of the relay on ``attach``: where its spool is, whose it is."""

    spool: str
    channels: int
    spool_dir: str
    owner: str
    format: str
    pattern: str
    endpoints: list[str]
    held: bool
    reader: str
    #: control requests answered so far (what planning a micro-batch costs in round trips)
    control_requests: int = 0
    protocol: int = PROTOCOL

    def to_wire(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "spool": self.spool,
            "channels": self.channels,
            "spoolDir": self.spool_dir,
            "owner": self.owner,
            "format": self.format,
            "pattern": self.pattern,
            "endpoints": self.endpoints,
            "held": self.held,
            "reader": self.reader,
            "controlRequests": self.control_requests,
        }

    @classmethod
    def from_wire(cls, wire: Wire) -> RelayDescription:
        protocol = protocol_of(wire)
        return cls(
            text(need(wire, "spool"), "spool"),
            integer(need(wire, "channels"), "channels"),
            text(need(wire, "spoolDir"), "spoolDir"),
            text(need(wire, "owner"), "owner"),
            text(need(wire, "format"), "format"),
            text(wire.get("pattern", ""), "pattern"),
            texts(wire.get("endpoints", []), "endpoints"),
            flag(wire.get("held", False), "held"),
            text(wire.get("reader", DEFAULT_READER), "reader"),
            integer(wire.get("controlRequests", 0), "controlRequests"),
            protocol,
        )


@dataclass(frozen=True)
class StateAnswer:
    """Each channel's latest and earliest offsets, the receivers' errors, seconds since the
    last message, handshakes refused, connections broken, and the reader's committed offsets
    (the answer of ``state``, ``start`` and ``release``)."""

    latest: list[int]
    earliest: list[int]
    errors: list[str] = field(default_factory=list)
    idle: float = 0.0
    rejected: int = 0
    broken: int = 0
    committed: list[int] | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "latest": self.latest,
            "earliest": self.earliest,
            "errors": self.errors,
            "idle": self.idle,
            "rejected": self.rejected,
            "broken": self.broken,
            "committed": self.committed,
        }

    @classmethod
    def from_wire(cls, wire: Wire) -> StateAnswer:
        committed = wire.get("committed")
        return cls(
            integers(need(wire, "latest"), "latest"),
            integers(need(wire, "earliest"), "earliest"),
            texts(wire.get("errors", []), "errors"),
            real(need(wire, "idle"), "idle"),
            integer(wire.get("rejected", 0), "rejected"),
            integer(wire.get("broken", 0), "broken"),
            None if committed is None else integers(committed, "committed"),
        )


@dataclass(frozen=True)
class AttachAnswer:
    """The relay and its state for the reader that claimed it, and ``attended_until``: each
    channel's latest offset when the last query of this reader name left (``None``: none
    has), what a receiver process left lingering took since (``startingOffsets=latest``)."""

    relay: RelayDescription
    state: StateAnswer
    attended_until: list[int] | None = None

    def to_wire(self) -> dict[str, Any]:
        return {**self.relay.to_wire(), **self.state.to_wire(), "attendedUntil": self.attended_until}

    @classmethod
    def from_wire(cls, wire: Wire) -> AttachAnswer:
        attended = wire.get("attendedUntil")
        return cls(
            RelayDescription.from_wire(wire),
            StateAnswer.from_wire(wire),
            None if attended is None else integers(attended, "attendedUntil"),
        )


@dataclass(frozen=True)
class CountAnswer:
    """Messages (Arrow rows) and payload bytes in the range asked."""

    rows: int
    bytes: int

    def to_wire(self) -> dict[str, Any]:
        return {"rows": self.rows, "bytes": self.bytes}

    @classmethod
    def from_wire(cls, wire: Wire) -> CountAnswer:
        return cls(integer(need(wire, "rows"), "rows"), integer(need(wire, "bytes"), "bytes"))


@dataclass(frozen=True)
class EndWithinAnswer:
    """The end of the longest prefix of the range asked within its limits."""

    end: int

    def to_wire(self) -> dict[str, Any]:
        return {"end": self.end}

    @classmethod
    def from_wire(cls, wire: Wire) -> EndWithinAnswer:
        return cls(integer(need(wire, "end"), "end"))


@dataclass(frozen=True)
class LostAnswer:
    """The losses within the range asked, their words narrowed to it."""

    lost: list[WireLoss]

    def to_wire(self) -> dict[str, Any]:
        return {"lost": [loss.to_wire() for loss in self.lost]}

    @classmethod
    def from_wire(cls, wire: Wire) -> LostAnswer:
        return cls([WireLoss.from_wire(v, "lost") for v in json_list(need(wire, "lost"), "lost")])


@dataclass(frozen=True)
class LocateAnswer:
    """Where the offset asked lies in the spool (``None``: not spooled)."""

    at: Hint | None

    def to_wire(self) -> dict[str, Any]:
        return {"at": list(self.at) if self.at else None}

    @classmethod
    def from_wire(cls, wire: Wire) -> LocateAnswer:
        return cls(hint(need(wire, "at"), "at"))


@dataclass(frozen=True)
class RangeDescription:
    """One channel's range in a ``describe`` answer: what ``count``, ``lost`` and ``locate``
    answer for it."""

    rows: int
    bytes: int
    at: Hint | None
    lost: list[WireLoss]

    @classmethod
    def of(cls, info: RangeInfo, start: int, end: int) -> RangeDescription:
        """The relay's ``RangeInfo`` of ``[start, end)``, its losses' words narrowed to it."""
        at = (str(info.hint[0]), int(info.hint[1])) if len(info.hint) == 2 else None
        return cls(info.rows, info.bytes, at, [WireLoss.of(r, (start, end)) for r in info.lost])

    def range_info(self, channel: int, label: str) -> RangeInfo:
        """As the reader's planning reads it: the query's ``channel``, the relay named in losses."""
        return RangeInfo(
            self.rows, self.bytes, [loss.lost_range(channel, label) for loss in self.lost], tuple(self.at or ())
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "bytes": self.bytes,
            "at": list(self.at) if self.at else None,
            "lost": [loss.to_wire() for loss in self.lost],
        }

    @classmethod
    def from_wire(cls, value: object) -> RangeDescription:
        wire = json_object(value, "ranges")
        return cls(
            integer(need(wire, "rows"), "rows"),
            integer(need(wire, "bytes"), "bytes"),
            hint(need(wire, "at"), "at"),
            [WireLoss.from_wire(v, "lost") for v in json_list(need(wire, "lost"), "lost")],
        )


@dataclass(frozen=True)
class DescribeAnswer:
    """Each channel's range asked, described (channels of the relay)."""

    ranges: dict[int, RangeDescription]

    def to_wire(self) -> dict[str, Any]:
        return {"ranges": {str(c): description.to_wire() for c, description in self.ranges.items()}}

    @classmethod
    def from_wire(cls, wire: Wire) -> DescribeAnswer:
        out = {}
        for key, value in json_object(need(wire, "ranges"), "ranges").items():
            channel = channel_key(key)
            if channel is None:
                raise ValueError(f"'ranges' must be keyed by channel, not {key!r:.60}")
            out[channel] = RangeDescription.from_wire(value)
        return cls(out)


@dataclass(frozen=True)
class TimeStart:
    """Where a channel starts at a time: its first offset received then or later, and the
    freed offsets that were (``None``: none)."""

    offset: int
    lost: WireLoss | None = None

    def to_wire(self) -> list[Any]:
        return [self.offset, None if self.lost is None else self.lost.to_wire()]

    @classmethod
    def from_wire(cls, value: object) -> TimeStart:
        if not (isinstance(value, list) and len(value) == 2):
            raise ValueError(f"'starts' must hold [offset, loss], not {value!r:.60}")
        return cls(integer(value[0], "starts"), None if value[1] is None else WireLoss.from_wire(value[1], "starts"))


@dataclass(frozen=True)
class AtTimeAnswer:
    """Each channel's start at the time asked, in channel order."""

    starts: list[TimeStart]

    def to_wire(self) -> dict[str, Any]:
        return {"starts": [start.to_wire() for start in self.starts]}

    @classmethod
    def from_wire(cls, wire: Wire) -> AtTimeAnswer:
        return cls([TimeStart.from_wire(v) for v in json_list(need(wire, "starts"), "starts")])


@dataclass(frozen=True)
class ReaderEntry:
    """One registered reader: its committed offsets, when it registered (ms since the epoch),
    whether a query holds it and how long ago that query renewed its claim, and per channel
    what it has yet to read (``behind``) and what was freed before it committed it (``lost``)."""

    name: str
    committed: list[int]
    registered: int
    held: bool
    idle: float | None
    behind: list[int]
    lost: list[int]

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "committed": self.committed,
            "registered": self.registered,
            "held": self.held,
            "idle": self.idle,
            "behind": self.behind,
            "lost": self.lost,
        }

    @classmethod
    def from_wire(cls, value: object) -> ReaderEntry:
        wire = json_object(value, "readers")
        idle = wire.get("idle")
        return cls(
            text(need(wire, "name"), "name"),
            integers(need(wire, "committed"), "committed"),
            integer(wire.get("registered", 0), "registered"),
            flag(wire.get("held", False), "held"),
            None if idle is None else real(idle, "idle"),
            integers(wire.get("behind", []), "behind"),
            integers(wire.get("lost", []), "lost"),
        )


@dataclass(frozen=True)
class Retention:
    """What a relay keeps for readers that lag: bytes and seconds (``None``: no limit)."""

    bytes: int | None = None
    seconds: float | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "seconds": self.seconds}

    @classmethod
    def from_wire(cls, value: object) -> Retention:
        wire = json_object(value, "retention")
        held, seconds = wire.get("bytes"), wire.get("seconds")
        return cls(
            None if held is None else integer(held, "bytes"), None if seconds is None else real(seconds, "seconds")
        )


@dataclass(frozen=True)
class ReadersAnswer:
    """The registered readers, each channel's latest and earliest offsets, the spool's id,
    the relay's retention and the bytes its spool holds (``readers``, ``remove_reader``)."""

    readers: list[ReaderEntry]
    latest: list[int]
    earliest: list[int]
    spool: str
    retention: Retention
    bytes: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "readers": [r.to_wire() for r in self.readers],
            "latest": self.latest,
            "earliest": self.earliest,
            "spool": self.spool,
            "retention": self.retention.to_wire(),
            "bytes": self.bytes,
        }

    @classmethod
    def from_wire(cls, wire: Wire) -> ReadersAnswer:
        return cls(
            [ReaderEntry.from_wire(v) for v in json_list(need(wire, "readers"), "readers")],
            integers(need(wire, "latest"), "latest"),
            integers(need(wire, "earliest"), "earliest"),
            text(need(wire, "spool"), "spool"),
            Retention.from_wire(wire.get("retention", {})),
            integer(need(wire, "bytes"), "bytes"),
        )
