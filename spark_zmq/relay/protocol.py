"""The relay's control protocol: what a query's driver and a relay both need to agree on.

Requests are JSON objects ``{"op": ..., "id": ..., "session": ..., **fields}`` sent by a
DEALER to the relay's ROUTER (``[b"", request]``); replies are ``[b"ok", json]`` or
``[b"error", json]``, the JSON echoing ``"id"`` so a client that resent a request can drop
stale answers. Every op is idempotent, so a request may be resent freely.
"""

from __future__ import annotations

import enum

__all__ = ["Op", "PROTOCOL", "LEASE_TTL_S", "REQUEST_BYTES", "QUEUE", "MAX_ADVANCE"]

#: the control protocol's version: a reader refuses a relay that speaks another
PROTOCOL = 1
#: a reader that has not renewed its claim for this long loses it (see ``lease``)
LEASE_TTL_S = 10.0
#: the largest request the relay accepts (control requests carry an offset per channel)
REQUEST_BYTES = 64 << 10
#: the highest offset ``advance`` accepts: room below 2^63 for the offsets that follow
MAX_ADVANCE = 1 << 62
#: replies queued for one peer at most (later ones are dropped; the peer resends)
QUEUE = 16


class Op(str, enum.Enum):
    """A control request's ``"op"``."""

    #: what the relay is (no lease needed): protocol, spool id, channels, format, whether
    #: held; never where its spool is (``attach`` tells the lease holder that)
    HELLO = "hello"
    #: claim the lease and describe the relay with its state
    ATTACH = "attach"
    #: give the lease up
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
    #: free the spool below the committed offsets
    RELEASE = "release"
    #: for several channels' ranges at once: messages, bytes, losses and the read hint of
    #: each (``COUNT``, ``LOST`` and ``LOCATE`` in one round trip per micro-batch)
    DESCRIBE = "describe"
    #: each channel's first offset received at or after ``"timestamp"`` (ms since the
    #: epoch), with the freed offsets received at or after it: option ``startingTimestamp``
    AT_TIME = "at_time"
