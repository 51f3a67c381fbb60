"""The relay's control protocol: what a query's driver and a relay both need to agree on.

Requests are JSON objects ``{"op": ..., "id": ..., "session": ..., **fields}`` sent by a
DEALER to the relay's ROUTER (``[b"", request]``). A request names the reader it is made
for in ``"reader"`` (option ``relayReader``; a request without one is the reader
``default``, as older connectors send them); replies are ``[b"ok", json]`` or
``[b"error", json]``, the JSON echoing ``"id"`` so a client that resent a request can drop
stale answers. Every op is idempotent, so a request may be resent freely. Each op's
request and answer, field by field, is a type of ``messages``.
"""

from __future__ import annotations

import enum

__all__ = ["Op", "PROTOCOL", "LEASE_TTL_S", "REQUEST_BYTES", "QUEUE", "MAX_ADVANCE", "RETENTION_CHECK_S"]

#: the control protocol's version: a reader refuses a relay that speaks another
PROTOCOL = 1
#: a reader that has not renewed its claim for this long loses it (see ``lease``)
LEASE_TTL_S = 10.0
#: the largest request the relay accepts (control requests carry an offset per channel)
REQUEST_BYTES = 64 << 10
#: the highest offset ``advance`` accepts: room below 2^63 for the offsets that follow
MAX_ADVANCE = 1 << 62
#: how often a relay with --retention-bytes or --retention-seconds looks at what it holds
RETENTION_CHECK_S = 0.5
#: replies queued for one peer at most (later ones are dropped; the peer resends)
QUEUE = 16


class Op(str, enum.Enum):
    """A control request's ``"op"``."""

    #: what the relay is (no lease needed): protocol, spool id, channels, format, whether
    #: held; never where its spool is (``attach`` tells the lease holder that)
    HELLO = "hello"
    #: claim the reader's lease (registering the reader the first time) and describe the
    #: relay with its state
    ATTACH = "attach"
    #: give the reader's lease up
    DETACH = "detach"
    #: each channel's latest and earliest offsets, receiver errors, idle seconds
    STATE = "state"
    #: let a receiver process receive (the reader has checked its checkpoint)
    START = "start"
    #: messages and bytes in ``[start, end)`` of a channel
    COUNT = "count"
    #: the end of the longest prefix of ``[start, end)`` within row and byte limits
    END_WITHIN = "end_within"
    #: lost ranges within ``[start, end)``
    LOST = "lost"
    #: renumber a recreated spool's channel from ``offset`` (the checkpoint's)
    ADVANCE = "advance"
    #: where an offset lies in the spool (segment, position): a read task's hint
    LOCATE = "locate"
    #: the reader has committed these offsets: the spool is freed below what every
    #: registered reader has committed
    RELEASE = "release"
    #: for several channels' ranges at once: messages, bytes, losses and the read hint of
    #: each (``COUNT``, ``LOST`` and ``LOCATE`` in one round trip per micro-batch)
    DESCRIBE = "describe"
    #: each channel's first offset received at or after ``"timestamp"`` (ms since the
    #: epoch), with the freed offsets received at or after it: option ``startingTimestamp``
    AT_TIME = "at_time"
    #: the registered readers, their committed offsets and whether a query holds them (no
    #: lease needed: ``spark-zmq relay-readers``)
    READERS = "readers"
    #: unregister the reader ``"name"`` (refused while a query holds it)
    REMOVE_READER = "remove_reader"
