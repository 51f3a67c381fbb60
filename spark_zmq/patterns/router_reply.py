"""A ROUTER server's reply, tried once: sent, or dropped and counted.

Why: a ROUTER-fronted server (the driver's spool fetch service, a relay's ``--listen`` port,
a REP worker, ``spark_zmq.worker``) serves all its clients from one thread. A client that
sends requests and reads no reply fills its queue; a send that waited for room there would
hold every other client, and the server's shutdown, for as long as that client likes. So
a reply is tried once without waiting (a mandatory ROUTER refuses it at once when its peer's
queue is full or the peer is gone, see ``Router``) and otherwise dropped: counted, the
first drop logged and then at most one line a minute with the count, so a client that reads
nothing cannot flood the log either. A client that reads again resends its request.
"""

from __future__ import annotations

import logging
import time

from .reqrep import Router

__all__ = ["ReplyDrops", "LOG_EVERY_S", "CLOSE_LINGER_MS"]

#: at most one log line about dropped replies this often (seconds)
LOG_EVERY_S = 60.0

#: the linger (ms) a ROUTER server closes with. Why not 0: libzmq 4.3.5 aborts the process
#: ("Resource temporarily unavailable (src/session_base.cpp:233)", zeromq/libzmq#3442) when
#: a connection fails while its session is stalled inside a multipart reply (a client that
#: stopped reading partway through a fetch reply's Arrow frame, which is not its last) and
#: the closed socket's pipe already refuses the rest of it. With linger 0 the pipe refuses at
#: once, just when a stopping query's readers close their connections; within a linger the
#: session may still read it, so a connection that fails then only ends. A client that reads
#: gets what was queued for it; one that does not is cut off when the linger ends (the same
#: gap then reopens for one command round trip of libzmq's reaper: narrower, not closed).
CLOSE_LINGER_MS = 1000


class ReplyDrops:
    """Sends a server's replies once each, counting those dropped (``count``); ``owner``
    names the server in its log lines."""

    def __init__(self, owner: str, logger: logging.Logger) -> None:
        self.owner = owner
        self._log = logger
        #: replies dropped because their peer's queue was full or the peer was gone
        self.count = 0
        self._logged: float | None = None  # when a drop was last logged (monotonic)

    def send(self, router: Router, frames: list[bytes]) -> bool:
        """Send ``frames`` (``[identity, ...]``) at once, or drop them; whether they were sent.
        ``SocketClosedError`` (the server is closing) is the caller's."""
        try:
            router.send(frames, timeout=0)
            return True
        except (TimeoutError, ConnectionError):
            # the peer has a full queue of unread replies already, or is gone: never queue more
            self.dropped()
            return False

    def dropped(self) -> None:
        """Count one dropped reply and log it (the first, then at most one line a minute)."""
        self.count += 1
        now = time.monotonic()
        if self._logged is None or now - self._logged >= LOG_EVERY_S:
            self._logged = now
            self._log.warning(
                "%s: dropped a reply to a peer that reads none of those queued for it, or is gone "
                "(%d dropped so far; a client that reads again resends)",
                self.owner,
                self.count,
            )
