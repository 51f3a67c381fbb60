"""A PUSH socket that never forgets what it holds when a peer leaves.

libzmq's PUSH drops the queue of a peer whose connection breaks when ``ZMQ_IMMEDIATE`` is
set, and without it keeps filling the queue of a peer that may never come back; neither
tells the application. ``ReroutingPush`` is PUSH on the wire (any PULL peer, libzmq's
included, accepts it) but runs on this package's ZMTP engine (``zmtp.engine``), which:

* re-routes a departed peer's queue, the part of the write in progress that did not reach
  the kernel whole, and (over tcp) what the peer's TCP never acknowledged, to the peers
  still there, or to the same endpoint when it comes back;
* counts what it re-sent (``resent``) and the peers it lost (``lost_peers``);
* with ``confirm=True``, makes ``close()`` wait until the peers' TCP acknowledged every
  message, and reports ``unsent`` (never written) and ``unconfirmed`` (written, never
  acknowledged) afterwards.

What stays beyond reach: messages a peer's host acknowledged but its application had not
read when it died (its kernel receive buffer and its receive queue). ZMTP has no
application-level acknowledgements.
"""

from __future__ import annotations

from typing import ClassVar

from .scattergather import ZmtpPatternSocket

__all__ = ["ReroutingPush"]


class ReroutingPush(ZmtpPatternSocket):
    """Round-robin sender to PULL peers (multipart allowed) that re-routes a departed peer's
    messages instead of dropping them. Connects by default; thread-safe."""

    zmtp_type: ClassVar[bytes] = b"PUSH"
    peer_types: ClassVar[dict[bytes, bytes]] = {b"PULL": b"PUSH"}
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000
