"""The relay's control requests, one type per op: ``to_wire`` is what the query sends,
``from_wire`` what the relay reads (``bad request: ...`` naming the field), and ``answer``
reads the relay's answer to it; ``Envelope`` is a whole request, with who sends it.

``from_wire`` holds every check that needs nothing but the request (types, ranges, int64
bounds, reader names, ``MAX_ADVANCE``), so what a stranger sends malformed is refused
before it claims a lease or registers a reader; the checks that need the relay (the
channels it has, the offsets it has written) are the service's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from ..operator import token_problem
from ..protocol import MAX_ADVANCE, Op
from ..readers import DEFAULT_READER
from .answers import (
    AttachAnswer,
    AtTimeAnswer,
    CountAnswer,
    DescribeAnswer,
    Done,
    EndWithinAnswer,
    HelloAnswer,
    LocateAnswer,
    LostAnswer,
    ReadersAnswer,
    StateAnswer,
)
from .fields import Wire, channel_key, int63, reader_name, reply_id, session_of

__all__ = [
    "Request",
    "Envelope",
    "REQUESTS",
    "HelloRequest",
    "AttachRequest",
    "DetachRequest",
    "StateRequest",
    "StartRequest",
    "CountRequest",
    "EndWithinRequest",
    "LostRequest",
    "AdvanceRequest",
    "LocateRequest",
    "ReleaseRequest",
    "DescribeRequest",
    "AtTimeRequest",
    "ReadersRequest",
    "RemoveReaderRequest",
]

A = TypeVar("A")


class Request(Generic[A]):
    """A control request's own fields (an ``Envelope`` says who sends it); ``A``: its answer."""

    op: ClassVar[Op]
    #: whether it needs the reader's lease (all but ``hello``, ``readers``, ``remove_reader``)
    leased: ClassVar[bool] = True
    #: the answer's type (``A``), which reads the relay's answer (``from_wire``)
    answer_type: ClassVar[type[Any]]

    def to_wire(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_wire(cls, wire: Wire) -> Request[Any]:
        return cls()

    def answer(self, wire: Wire) -> A:
        """The relay's answer to this request, read (``ValueError`` naming what is wrong)."""
        answer: A = self.answer_type.from_wire(wire)
        return answer


@dataclass(frozen=True)
class HelloRequest(Request[HelloAnswer]):
    """What the relay is (no lease needed)."""

    op = Op.HELLO
    leased = False
    answer_type = HelloAnswer


@dataclass(frozen=True)
class AttachRequest(Request[AttachAnswer]):
    """Claim the reader's lease, registering the reader the first time."""

    op = Op.ATTACH
    answer_type = AttachAnswer


@dataclass(frozen=True)
class DetachRequest(Request[Done]):
    """Give the reader's lease up."""

    op = Op.DETACH
    answer_type = Done


@dataclass(frozen=True)
class StateRequest(Request[StateAnswer]):
    """The relay's state (and a renewal of the lease: the reader's heartbeat)."""

    op = Op.STATE
    answer_type = StateAnswer


@dataclass(frozen=True)
class StartRequest(Request[StateAnswer]):
    """Let a receiver process receive (the reader has checked its checkpoint)."""

    op = Op.START
    answer_type = StateAnswer


@dataclass(frozen=True)
class ReadersRequest(Request[ReadersAnswer]):
    """The registered readers (no lease needed: ``spark-zmq relay-readers``)."""

    op = Op.READERS
    leased = False
    answer_type = ReadersAnswer


@dataclass(frozen=True)
class RemoveReaderRequest(Request[ReadersAnswer]):
    """Unregister the reader ``name``: refused while another query holds it, and unless the
    request holds its lease, comes with its CURVE key or carries the relay's ``operator``
    token (``spark_zmq.relay.operator``)."""

    name: str
    operator: str | None = None
    op = Op.REMOVE_READER
    leased = False

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, **({"operator": self.operator} if self.operator is not None else {})}

    @classmethod
    def from_wire(cls, wire: Wire) -> RemoveReaderRequest:
        operator = wire.get("operator")
        if operator is not None and token_problem(operator) is not None:
            raise ValueError(f"bad request: 'operator': {token_problem(operator)}")
        return cls(reader_name(wire, "name"), operator)

    answer_type = ReadersAnswer


@dataclass(frozen=True)
class CountRequest(Request[CountAnswer]):
    """Messages and bytes in ``[start, end)`` of a channel."""

    channel: int
    start: int
    end: int
    op = Op.COUNT

    def to_wire(self) -> dict[str, Any]:
        return {"channel": self.channel, "start": self.start, "end": self.end}

    @classmethod
    def from_wire(cls, wire: Wire) -> CountRequest:
        return cls(int63(wire, "channel"), int63(wire, "start"), int63(wire, "end"))

    answer_type = CountAnswer


@dataclass(frozen=True)
class EndWithinRequest(Request[EndWithinAnswer]):
    """The end of the longest prefix of ``[start, end)`` within ``rows`` and ``bytes``
    (``None``: no limit; sent as ``null``)."""

    channel: int
    start: int
    end: int
    rows: int | None = None
    bytes: int | None = None
    op = Op.END_WITHIN

    def to_wire(self) -> dict[str, Any]:
        return {"channel": self.channel, "start": self.start, "end": self.end, "rows": self.rows, "bytes": self.bytes}

    @classmethod
    def from_wire(cls, wire: Wire) -> EndWithinRequest:
        return cls(
            int63(wire, "channel"),
            int63(wire, "start"),
            int63(wire, "end"),
            int63(wire, "rows", optional=True),
            int63(wire, "bytes", optional=True),
        )

    answer_type = EndWithinAnswer


@dataclass(frozen=True)
class LostRequest(Request[LostAnswer]):
    """The losses within ``[start, end)`` of a channel."""

    channel: int
    start: int
    end: int
    op = Op.LOST

    def to_wire(self) -> dict[str, Any]:
        return {"channel": self.channel, "start": self.start, "end": self.end}

    @classmethod
    def from_wire(cls, wire: Wire) -> LostRequest:
        return cls(int63(wire, "channel"), int63(wire, "start"), int63(wire, "end"))

    answer_type = LostAnswer


@dataclass(frozen=True)
class AdvanceRequest(Request[Done]):
    """Renumber a recreated spool's channel from ``offset`` (the checkpoint's), at most
    ``MAX_ADVANCE``: room below 2^63 for the offsets that follow."""

    channel: int
    offset: int
    op = Op.ADVANCE

    def to_wire(self) -> dict[str, Any]:
        return {"channel": self.channel, "offset": self.offset}

    @classmethod
    def from_wire(cls, wire: Wire) -> AdvanceRequest:
        channel, offset = int63(wire, "channel"), int63(wire, "offset")
        if offset > MAX_ADVANCE:
            raise ValueError(
                f"bad request: 'offset' {offset} of 'advance' is past {MAX_ADVANCE} (2^62), the "
                "highest a channel's numbering may continue from"
            )
        return cls(channel, offset)

    answer_type = Done


@dataclass(frozen=True)
class LocateRequest(Request[LocateAnswer]):
    """Where ``offset`` of a channel lies in the spool: a read task's hint."""

    channel: int
    offset: int
    op = Op.LOCATE

    def to_wire(self) -> dict[str, Any]:
        return {"channel": self.channel, "offset": self.offset}

    @classmethod
    def from_wire(cls, wire: Wire) -> LocateRequest:
        return cls(int63(wire, "channel"), int63(wire, "offset"))

    answer_type = LocateAnswer


@dataclass(frozen=True)
class ReleaseRequest(Request[StateAnswer]):
    """The reader has committed ``offsets`` (channel -> offset)."""

    offsets: dict[int, int]
    op = Op.RELEASE

    def to_wire(self) -> dict[str, Any]:
        return {"offsets": {str(c): offset for c, offset in self.offsets.items()}}

    @classmethod
    def from_wire(cls, wire: Wire) -> ReleaseRequest:
        offsets = wire.get("offsets")
        if not isinstance(offsets, dict):
            raise ValueError("bad request: 'offsets' must be an object {channel: offset}")
        out = {}
        for key in offsets:
            offset = int63(offsets, key)
            channel = channel_key(key)
            if channel is None:
                raise ValueError(f"bad request: channel {key!r:.20} of 'offsets' is not a channel number")
            out[channel] = offset
        return cls(out)

    answer_type = StateAnswer


@dataclass(frozen=True)
class DescribeRequest(Request[DescribeAnswer]):
    """For several channels' ranges at once (channel -> ``(start, end)``): what ``count``,
    ``lost`` and ``locate`` answer for each."""

    ranges: dict[int, tuple[int, int]]
    op = Op.DESCRIBE

    def to_wire(self) -> dict[str, Any]:
        return {"ranges": {str(c): [start, end] for c, (start, end) in self.ranges.items()}}

    @classmethod
    def from_wire(cls, wire: Wire) -> DescribeRequest:
        ranges = wire.get("ranges")
        if not isinstance(ranges, dict):
            raise ValueError("bad request: 'ranges' must be an object {channel: [start, end]}")
        out = {}
        for key, bounds in ranges.items():
            channel = channel_key(key)
            if channel is None or not isinstance(bounds, list) or len(bounds) != 2:
                raise ValueError(f"bad request: range {key!r:.20}: {bounds!r:.60} (not {{channel: [start, end]}})")
            out[channel] = (int63({"start": bounds[0]}, "start"), int63({"end": bounds[1]}, "end"))
        return cls(out)

    answer_type = DescribeAnswer


@dataclass(frozen=True)
class AtTimeRequest(Request[AtTimeAnswer]):
    """Each channel's first offset received at or after ``timestamp`` (ms since the epoch)."""

    timestamp: int
    op = Op.AT_TIME

    def to_wire(self) -> dict[str, Any]:
        return {"timestamp": self.timestamp}

    @classmethod
    def from_wire(cls, wire: Wire) -> AtTimeRequest:
        return cls(int63(wire, "timestamp"))

    answer_type = AtTimeAnswer


#: each op's request type
REQUESTS: dict[Op, type[Request[Any]]] = {
    cls.op: cls
    for cls in (
        HelloRequest,
        AttachRequest,
        DetachRequest,
        StateRequest,
        StartRequest,
        CountRequest,
        EndWithinRequest,
        LostRequest,
        AdvanceRequest,
        LocateRequest,
        ReleaseRequest,
        DescribeRequest,
        AtTimeRequest,
        ReadersRequest,
        RemoveReaderRequest,
    )
}


@dataclass(frozen=True)
class Envelope:
    """One control request as sent: its fields (``request``), the reader it is made for, the
    session whose lease it claims (``None`` for a request that needs none), and the id its
    answer echoes."""

    request: Request[Any]
    reader: str = DEFAULT_READER
    session: str | None = None
    id: int | str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "op": self.request.op.value,
            "id": self.id,
            "session": self.session,
            "reader": self.reader,
            **self.request.to_wire(),
        }

    @classmethod
    def from_wire(cls, wire: Wire) -> Envelope:
        """Checked in the relay's order: the op, the reader, the session (when the op needs
        the lease), then the op's own fields."""
        try:
            op = Op(wire.get("op"))
        except (ValueError, TypeError):
            raise ValueError(f"bad request: unknown op {wire.get('op')!r:.60}") from None
        kind = REQUESTS[op]
        reader = reader_name(wire, "reader", DEFAULT_READER)
        session = session_of(wire.get("session"))
        if kind.leased and session is None:
            raise ValueError("bad request: 'session' must be a string of 1 to 64 characters")
        return cls(kind.from_wire(wire), reader, session, reply_id(wire))
