"""``spark-zmq relay``: the receivers and the spool of a source, as a service of their own.

A relay owns what a query's driver owns with ``endpoints``: one receiving socket and
receiver per endpoint (a channel), the hardened spool and its disk budget. It runs
whether or not a query reads it, so ingest keeps going while a Spark driver restarts, and
it can run on the producers' hosts, so ingest spreads over hosts and cores. When its spool
is full it stops reading: ZeroMQ's high-water marks fill and PUSH producers block.

A query talks to it over ZeroMQ request-reply (DEALER to ROUTER, the Guide's chapter 3) on
one ``--listen`` port:
- its driver sends control requests (``protocol``: JSON objects whose ``"op"`` is an
  ``Op``) under a lease (``lease``) that lets one query at a time read the relay;
- its executors fetch ``[start, end)`` of a channel exactly as they fetch from a driver
  (``spark_zmq.ingest.fetch``), unless they see the relay's spool directory, then they read it.
Every reply is ``[b"ok", json]`` or ``[b"error", text]``; control replies echo the
request's ``"id"`` so a client that resends after a timeout can drop stale answers.

With ``--curve-certificate``, ``--curve-authorized-keys`` makes the receiving sockets CURVE
servers that accept only the producers' keys, and ``--reader-authorized-keys`` makes the
listening port one that accepts only the queries' keys (a producer's key never reads);
without CURVE, anyone who reaches ``--listen`` can read the spool, so bind it to an address
only the Spark cluster reaches.

Every request on ``--listen`` but ``hello`` is checked against the lease: control requests
claim or renew it, and a fetch must name the session that holds it (the reader passes its
session to its read tasks). Offsets beyond what the spool has written are refused: a fetch
or a ``release`` past a channel's latest offset, an ``advance`` past ``MAX_ADVANCE``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Optional, Union

from ..options import SourceOptions
from ..patterns import Router
from ..patterns.curve import Curve
from ..ingest.fetch import SpoolServer, bind_first
from ..ingest.runtime import IngestRuntime, describe_range
from .lease import Lease
from .protocol import LEASE_TTL_S, MAX_ADVANCE, PROTOCOL, QUEUE, REQUEST_BYTES, Op

__all__ = ["Relay"]

log = logging.getLogger(__name__)



def _int(request: dict, key: str, *, optional: bool = False) -> Optional[int]:
    value = request.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << 63):
        raise ValueError(f"bad request: {key!r} must be an integer from 0 to 2^63-1")
    return value


class Relay:
    """Receivers + spool (an ``IngestRuntime``) + the ROUTER that serves them to one query."""

    def __init__(self, options: SourceOptions, listen: Union[str, list[str]], *, listen_curve: Optional[Curve] = None,
                 lease_ttl_s: float = LEASE_TTL_S, start_receivers: bool = True) -> None:
        self.options = options
        self.lease = Lease(lease_ttl_s)
        self.control_requests = 0
        self._lock = threading.Lock()  # control requests against the reader's stop
        self.ingest = IngestRuntime(options)
        try:
            # ``listen``: one endpoint, or candidates of which the first free one is bound
            # (a query's receiver process under option spoolServerPort)
            candidates = [listen] if isinstance(listen, str) else list(listen)
            router = bind_first(candidates, lambda endpoint: Router(
                [endpoint], hwm=QUEUE, linger=0, mandatory=True, max_request_bytes=REQUEST_BYTES,
                curve=listen_curve, heartbeat=options.heartbeat), what="the receiver process's fetch port")
        except BaseException:
            self.ingest.stop()
            raise
        self.listen = router.last_endpoint or candidates[0]
        # A standalone relay numbers on from where its spool is: it has no checkpoint to
        # wait for. A query's own receiver process (start_receivers=False) waits for the
        # query's "start", sent once the reader has checked its checkpoint against the
        # spool, as receiver threads do (a recreated spool learns the checkpoint's
        # numbering first); libzmq queues what arrives meanwhile.
        if start_receivers:
            self.ingest.start()
        spool = self.ingest.spool
        self.server = SpoolServer(
            spool.spool_dir, spool_id=spool.spool_id, channels=len(spool.channels),
            locate=lambda channel, offset: spool.channels[channel].locate(offset),
            router=router, control=self._control, authorize=self._authorize_fetch,
        )

    # -- control requests ------------------------------------------------------------------------

    def _control(self, request: dict) -> list[bytes]:
        self.control_requests += 1
        reply_id = request.get("id")
        try:
            body = self._handle(request)
            status = b"ok"
        except ValueError as exc:
            body, status = {"error": str(exc)}, b"error"
        except Exception as exc:  # never let one request end the service
            log.exception("relay: request %r failed", request.get("op"))
            body, status = {"error": f"the relay failed to answer {request.get('op')!r}: {exc!r}"}, b"error"
        body["id"] = reply_id if isinstance(reply_id, (int, str)) else None
        return [status, json.dumps(body).encode()]

    def _handle(self, request: dict) -> dict[str, Any]:
        try:
            op = Op(request.get("op"))
        except ValueError:
            raise ValueError(f"bad request: unknown op {request.get('op')!r}") from None
        if op is Op.HELLO:  # no lease: what a client needs to know before it claims one
            return self._hello()
        session = request.get("session")
        if not isinstance(session, str) or not 0 < len(session) <= 64:
            raise ValueError("bad request: 'session' must be a string of 1 to 64 characters")
        if op is Op.DETACH:
            self.lease.release(session)
            return {}
        refusal = self.lease.claim(session)
        if refusal is not None:  # a clear refusal, not a failure
            return {"refused": {"idle": refusal.idle_s, "lapses": refusal.lapses_in_s}}
        if op is Op.ATTACH:
            log.info("relay: read by session %s", session)
            return {**self._describe(), **self._state()}
        if op is Op.STATE:
            return self._state()
        if op is Op.START:
            self.ingest.start()
            return self._state()
        if op is Op.RELEASE:
            offsets = request.get("offsets")
            if not isinstance(offsets, dict):
                raise ValueError("bad request: 'offsets' must be an object {channel: offset}")
            self.ingest.release({str(k): self._written(_int(offsets, k), k) for k in offsets})
            return self._state()
        if op is Op.DESCRIBE:
            return self._describe_ranges(request)
        if op is Op.AT_TIME:
            starts = self.ingest.start_at_time(_int(request, "timestamp"))
            return {"starts": [[offset, None if lost is None else [lost.first, lost.end, lost.describe()]]
                               for offset, lost in (starts[c] for c in sorted(starts))]}
        return self._channel_op(op, request)

    def _describe_ranges(self, request: dict) -> dict[str, Any]:
        """``{"ranges": {"<channel>": [start, end]}}`` -> per channel ``rows``, ``bytes``,
        ``lost`` (protocol 1's ``[first, end, words]``) and ``at`` (as ``LOCATE``)."""
        ranges = request.get("ranges")
        channels = self.ingest.spool.channels
        if not isinstance(ranges, dict) or len(ranges) > len(channels):
            raise ValueError("bad request: 'ranges' must be an object {channel: [start, end]}")
        out: dict[str, Any] = {}
        for key, bounds in ranges.items():
            channel = int(key) if isinstance(key, str) and key.isdigit() and len(key) < 6 else len(channels)
            if channel >= len(channels) or not isinstance(bounds, list) or len(bounds) != 2:
                raise ValueError(f"bad request: range {key!r}: {bounds!r} (the relay has {len(channels)} channels)")
            start, end = _int({"start": bounds[0]}, "start"), _int({"end": bounds[1]}, "end")
            info = describe_range(channels[channel], start, end)
            out[str(channel)] = {"rows": info.rows, "bytes": info.bytes, "at": list(info.hint) or None,
                                 "lost": [[r.first, r.end, r.within(start, end).describe()] for r in info.lost]}
        return {"ranges": out}

    def _channel_op(self, op: Op, request: dict) -> dict[str, Any]:
        """The ops about one channel's offsets."""
        channels = self.ingest.spool.channels
        channel = _int(request, "channel")
        if channel >= len(channels):
            raise ValueError(f"bad request: channel {channel} (the relay has {len(channels)} channels)")
        log_ = channels[channel]
        if op is Op.ADVANCE:
            offset = _int(request, "offset")
            if offset > MAX_ADVANCE:
                raise ValueError(f"bad request: 'offset' {offset} of 'advance' is past {MAX_ADVANCE} (2^62), the "
                                 "highest a channel's numbering may continue from")
            log_.advance_to(offset)
            return {}
        if op is Op.LOCATE:
            where = log_.locate(_int(request, "offset"))
            return {"at": list(where) if where else None}
        start, end = _int(request, "start"), _int(request, "end")
        index = log_.snapshot()
        if op is Op.COUNT:
            rows, nbytes = index.count_between(start, end)
            return {"rows": rows, "bytes": nbytes}
        if op is Op.END_WITHIN:
            return {"end": index.end_within(start, end, _int(request, "rows", optional=True),
                                            _int(request, "bytes", optional=True))}
        assert op is Op.LOST, op
        # protocol 1's form of a loss, whatever the reader's type for it: [first, end, words]
        return {"lost": [[r.first, r.end, r.within(start, end).describe()] for r in index.lost_within(start, end)]}

    def _written(self, offset: int, channel: object) -> int:
        """``offset`` when a channel's spool has written that far, else a clear error."""
        channels = self.ingest.spool.channels
        index = int(channel) if isinstance(channel, str) and channel.isdigit() and len(channel) < 6 else -1
        if not 0 <= index < len(channels):
            raise ValueError(f"bad request: channel {channel!r} (the relay has {len(channels)} channels)")
        latest = channels[index].next_offset
        if offset > latest:
            raise ValueError(f"bad request: offset {offset} of channel {index} is past what the spool has written "
                             f"(latest {latest})")
        return offset

    def _authorize_fetch(self, request: dict) -> Optional[str]:
        """Why a fetch request may not be served (``None``: it may): it must name the session
        that holds the lease, and end within what the channel's spool has written."""
        if not self.lease.holds(request.get("session")):
            return ("refused: a fetch must name the session that holds this relay's lease (the reading query's); "
                    "this one does not")
        channel, end = request.get("channel"), request.get("end")
        channels = self.ingest.spool.channels
        if isinstance(channel, int) and 0 <= channel < len(channels) and isinstance(end, int) \
                and end > channels[channel].next_offset:
            return (f"bad request: offsets up to {end} of channel {channel} are past what the spool has written "
                    f"(latest {channels[channel].next_offset})")
        return None

    def _hello(self) -> dict[str, Any]:
        """What anyone who reaches ``--listen`` may know: never where the spool is."""
        spool = self.ingest.spool
        return {"protocol": PROTOCOL, "spool": spool.spool_id, "channels": len(spool.channels),
                "format": self.options.format, "held": self.lease.unheld_for() is None,
                "controlRequests": self.control_requests}

    def _describe(self) -> dict[str, Any]:
        spool = self.ingest.spool
        return {
            "protocol": PROTOCOL, "spool": spool.spool_id, "channels": len(spool.channels),
            "spoolDir": spool.spool_dir, "owner": spool.owner_id, "format": self.options.format,
            "pattern": self.options.pattern, "endpoints": [str(e) for e in self.options.endpoints],
            "held": self.lease.unheld_for() is None,
            #: control requests answered so far (what planning a micro-batch costs in round trips)
            "controlRequests": self.control_requests,
        }

    def _state(self) -> dict[str, Any]:
        spool = self.ingest.spool
        errors = []
        for receiver in self.ingest.receivers:
            if receiver.error is not None:
                errors.append(f"channel {receiver.log.channel} ({self.options.endpoints[receiver.log.channel]}): "
                              f"{receiver.error!r}")
        last = max([r.last_receive for r in self.ingest.receivers], default=time.monotonic())
        return {
            "latest": [c.next_offset for c in spool.channels], "earliest": [c.earliest for c in spool.channels],
            "errors": errors, "idle": time.monotonic() - last,
            "rejected": self.ingest.rejected_handshakes(),
            "broken": self.ingest.broken_connections(),
        }

    # -- life ------------------------------------------------------------------------------------

    def failed(self) -> Optional[str]:
        """A receiver's failure, if one stopped (the relay exits then, for its supervisor)."""
        errors = self._state()["errors"]
        return errors[0] if errors else None

    def stop(self, drain: bool = True) -> None:
        """Drain what the sockets hold into the spool (unless it is gone), then close everything."""
        self.server.close()
        self.ingest.stop(drain=drain)
