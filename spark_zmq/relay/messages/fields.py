"""The fields of the relay's control requests and answers: how each kind is read and checked.

A request's fields are checked as the relay has always checked them (``bad request: ...``
errors naming the field); an answer's as what a relay of this protocol sends (errors
naming the field, which the client puts after the relay's name).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, overload

from ...errors import SparkZmqError
from ...ingest.loss import LostRange
from ...options import reader_name_problem
from ..protocol import PROTOCOL

__all__ = [
    "Wire",
    "Hint",
    "ProtocolMismatch",
    "reply_id",
    "int63",
    "reader_name",
    "session_of",
    "channel_key",
    "need",
    "integer",
    "real",
    "text",
    "flag",
    "json_list",
    "integers",
    "texts",
    "json_object",
    "hint",
    "protocol_of",
    "WireLoss",
]

#: a JSON object as ``json.loads`` gives it
Wire = Mapping[str, Any]
#: where an offset lies in a spool: ``(segment file name, byte position)``, a read task's hint
Hint = tuple[str, int]
#: one past the highest offset (int64)
_INT63 = 1 << 63
#: a channel key of a JSON object: decimal, below 100000 (``"0"``, ``"12"``)
_KEY_DIGITS = 5


class ProtocolMismatch(SparkZmqError, ValueError):
    """The relay speaks another protocol: nothing else it says can be read."""


def reply_id(wire: Wire) -> int | str | None:
    """The ``"id"`` an answer echoes: the request's, when it is a number or a string."""
    value = wire.get("id")
    return value if isinstance(value, (int, str)) else None


# -- a request's fields: checked as the relay checks them ------------------------------------------


@overload
def int63(wire: Wire, key: str, *, optional: Literal[False] = False) -> int: ...
@overload
def int63(wire: Wire, key: str, *, optional: bool) -> int | None: ...
def int63(wire: Wire, key: str, *, optional: bool = False) -> int | None:
    value = wire.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _INT63:
        raise ValueError(f"bad request: {key!r:.40} must be an integer from 0 to 2^63-1")
    return value


def reader_name(wire: Wire, key: str, default: str | None = None) -> str:
    """A reader's name from ``wire[key]`` (``default`` when absent), or a clear error."""
    name = wire.get(key, default)
    problem = reader_name_problem(name)
    if problem is not None:
        raise ValueError(f"bad request: {key!r}: {problem}")
    return cast(str, name)  # a valid reader name (``reader_name_problem`` said nothing)


def session_of(value: object) -> str | None:
    """A lease session's id (1 to 64 characters), ``None`` when ``value`` is not one."""
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def channel_key(key: object) -> int | None:
    """The channel a JSON object's key names (``"3"``), ``None`` when it names none."""
    if isinstance(key, str) and 0 < len(key) <= _KEY_DIGITS and key.isascii() and key.isdigit():
        return int(key)
    return None


# -- an answer's fields: what the relay sent, checked ---------------------------------------------


def need(wire: Wire, key: str) -> Any:
    """``wire[key]``, which an answer must have."""
    if key not in wire:
        raise ValueError(f"no {key!r}")
    return wire[key]


def integer(value: object, key: str) -> int:
    """Every integer an answer carries counts or numbers something: 0 to 2^63-1."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _INT63:
        raise ValueError(f"{key!r} must be an integer from 0 to 2^63-1, not {value!r:.60}")
    return value


def real(value: object, key: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be a number, not {value!r:.60}")
    return value  # an int stays one: read back, it is written as it came


def text(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string, not {value!r:.60}")
    return value


def flag(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key!r} must be true or false, not {value!r:.60}")
    return value


def json_list(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{key!r} must be a list, not {value!r:.60}")
    return value


def integers(value: object, key: str) -> list[int]:
    return [integer(v, key) for v in json_list(value, key)]


def texts(value: object, key: str) -> list[str]:
    return [text(v, key) for v in json_list(value, key)]


def json_object(value: object, key: str) -> Wire:
    if not isinstance(value, dict):
        raise ValueError(f"{key!r} must be an object, not {value!r:.60}")
    return value


def hint(value: object, key: str) -> Hint | None:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)):
        raise ValueError(f"{key!r} must be null or [segment, position], not {value!r:.60}")
    return value[0], integer(value[1], key)


def protocol_of(wire: Wire) -> int:
    """The relay's protocol, when it is this connector's (else nothing else is read)."""
    protocol = wire.get("protocol")
    if type(protocol) is not int or protocol != PROTOCOL:
        raise ProtocolMismatch(
            f"speaks protocol {protocol!r}, this connector {PROTOCOL}: run the same spark-zmq version on both sides"
        )
    return PROTOCOL


@dataclass(frozen=True)
class WireLoss:
    """A loss as protocol 1 carries it, ``[first, end, words]``: the relay's offsets and its
    own words for them (naming its channel and spool file), which the reader keeps."""

    first: int
    end: int
    words: str

    @classmethod
    def of(cls, lost: LostRange, within: tuple[int, int] | None = None) -> WireLoss:
        """``lost``, its words narrowed to ``within`` (the range asked about) when given."""
        return cls(lost.first, lost.end, (lost.within(*within) if within is not None else lost).describe())

    def lost_range(self, channel: int, label: str) -> LostRange:
        """The reader's loss record: the query's ``channel``, the relay named after its words."""
        return LostRange(channel, self.first, self.end, text=f"{self.words} ({label})")

    def to_wire(self) -> list[Any]:
        return [self.first, self.end, self.words]

    @classmethod
    def from_wire(cls, value: object, key: str) -> WireLoss:
        if not (isinstance(value, list) and len(value) == 3):
            raise ValueError(f"{key!r} must hold losses [first, end, words], not {value!r:.60}")
        return cls(integer(value[0], key), integer(value[1], key), text(value[2], key))
