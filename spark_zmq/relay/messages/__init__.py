"""The relay's control requests and answers as named types, and their JSON (``protocol``).

One type per op's request (``requests``) and per op's answer (``answers``), each with its
``to_wire`` (the JSON object it is on the wire) and ``from_wire`` (that object read back,
checked), here and nowhere else: the relay (``server``) reads a request once into a typed
value and dispatches on its type, the query (``client.RelayClient.ask``) reads an answer
once into one. A field is named, typed and checked in one place, so adding one is a change
here plus the code that uses it, not a string key on each side.

The bytes on the wire are protocol 1's: keys, their order and their JSON types are the
ones every build of this protocol sends, so each side talks to the other's older builds
(and tests send raw requests through ``RelayClient.call``, as an adversary would).
"""

from __future__ import annotations

from .answers import (
    AttachAnswer,
    AtTimeAnswer,
    CountAnswer,
    DescribeAnswer,
    Done,
    EndWithinAnswer,
    HelloAnswer,
    LeaseRefused,
    LocateAnswer,
    LostAnswer,
    RangeDescription,
    ReaderEntry,
    ReadersAnswer,
    RelayDescription,
    Retention,
    StateAnswer,
    TimeStart,
)
from .fields import Hint, ProtocolMismatch, Wire, WireLoss, reply_id
from .requests import (
    REQUESTS,
    AdvanceRequest,
    AttachRequest,
    AtTimeRequest,
    CountRequest,
    DescribeRequest,
    DetachRequest,
    EndWithinRequest,
    Envelope,
    HelloRequest,
    LocateRequest,
    LostRequest,
    ReadersRequest,
    ReleaseRequest,
    RemoveReaderRequest,
    Request,
    StartRequest,
    StateRequest,
)

__all__ = [
    "Wire",
    "Hint",
    "ProtocolMismatch",
    "reply_id",
    "WireLoss",
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
