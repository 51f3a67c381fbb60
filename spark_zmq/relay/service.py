"""``spark-zmq relay``: the receivers and the spool of a source, as a service of their own.

A relay owns what a query's driver owns with ``endpoints``: one receiving socket and
receiver per endpoint (a channel), the hardened spool and its disk budget. It runs
whether or not a query reads it, so ingest keeps going while a Spark driver restarts, and
it can run on the producers' hosts, so ingest spreads over hosts and cores. When its spool
is full it stops reading: ZeroMQ's high-water marks fill and PUSH producers block.

A query talks to it over ZeroMQ request-reply (DEALER to ROUTER, the Guide's chapter 3) on
one ``--listen`` port:
- its driver sends control requests (``protocol``: JSON objects whose ``"op"`` is an
  ``Op``) under a reader's name (option ``relayReader``) and that name's lease
  (``readers``, ``lease``): several queries read one relay under different names, one
  query at a time under each;
- its executors fetch ``[start, end)`` of a channel exactly as they fetch from a driver
  (``spark_zmq.ingest.fetch``), unless they see the relay's spool directory, then they read it.
Every reply is ``[b"ok", json]`` or ``[b"error", text]``; control replies echo the
request's ``"id"`` so a client that resends after a timeout can drop stale answers.

With ``--curve-certificate``, ``--curve-authorized-keys`` makes the receiving sockets CURVE
servers that accept only the producers' keys, and ``--reader-authorized-keys`` makes the
listening port one that accepts only the queries' keys (a producer's key never reads);
without CURVE, anyone who reaches ``--listen`` can read the spool, so bind it to an address
only the Spark cluster reaches.

Every request on ``--listen`` but ``hello``, ``readers`` and ``remove_reader`` is checked
against a lease: control requests claim or renew their reader's, and a fetch must name a
session that holds one (the reader passes its session to its read tasks). Offsets beyond
what the spool has written are refused, naming the channel, the offset and the latest: a
fetch, a ``release``, ``count``, ``end_within``, ``lost``, ``locate`` or ``describe``
past a channel's latest offset, an ``advance`` past ``MAX_ADVANCE``.

What is freed: a segment once every registered reader has committed past it (with no
reader registered, commits free nothing), or once ``retention_bytes`` (what the spool may
hold for readers that lag) or ``retention_s`` (how old a message may get) force it; a
reader behind what retention freed finds its offsets gone, which its query reports as
data loss (``failOnDataLoss``), as for any freed offsets.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Literal, Optional, Union, cast, overload

from ..options import SourceOptions, reader_name_problem
from ..patterns import Router
from ..patterns.curve import Curve
from ..ingest.fetch import SpoolServer, bind_first
from ..ingest.runtime import IngestRuntime, describe_range
from .protocol import LEASE_TTL_S, MAX_ADVANCE, PROTOCOL, QUEUE, REQUEST_BYTES, RETENTION_CHECK_S, Op
from .readers import DEFAULT_READER, Readers

__all__ = ["Relay"]

log = logging.getLogger(__name__)



@overload
def _int(request: dict[str, Any], key: str, *, optional: Literal[False] = False) -> int: ...
@overload
def _int(request: dict[str, Any], key: str, *, optional: bool) -> Optional[int]: ...
def _int(request: dict[str, Any], key: str, *, optional: bool = False) -> Optional[int]:
    value = request.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < (1 << 63):
        raise ValueError(f"bad request: {key!r} must be an integer from 0 to 2^63-1")
    return value


def _reader(request: dict[str, Any], key: str, default: Optional[str] = None) -> str:
    """A reader's name from ``request[key]`` (``default`` when absent), or a clear error."""
    name = request.get(key, default)
    problem = reader_name_problem(name)
    if problem is not None:
        raise ValueError(f"bad request: {key!r}: {problem}")
    return cast(str, name)  # a valid reader name (``reader_name_problem`` said nothing)


class Relay:
    """Receivers + spool (an ``IngestRuntime``) + the ROUTER that serves them to its readers (one query at a
    time under each reader name), + the retention that bounds what lagging readers hold."""

    def __init__(self, options: SourceOptions, listen: Union[str, list[str]], *, listen_curve: Optional[Curve] = None,
                 lease_ttl_s: float = LEASE_TTL_S, start_receivers: bool = True, retention_bytes: Optional[int] = None,
                 retention_s: Optional[float] = None) -> None:
        self.options = options
        self.control_requests = 0
        #: what the spool may hold for readers that lag (``None``: no limit but maxSpoolBytes)
        self.retention_bytes = retention_bytes
        #: how old a held message may get, in seconds (``None``: no limit)
        self.retention_s = retention_s
        self._free_lock = threading.Lock()  # one freeing at a time (commits, retention)
        #: each reader's channels' latest offsets at the last request of the query holding its
        #: lease: what arrived later, no query of that name was there to see (``_handle``)
        self._attended: dict[str, list[int]] = {}
        self.ingest = IngestRuntime(options)
        spool = self.ingest.spool
        try:
            self.readers = Readers(spool.spool_dir, len(spool.channels),
                                   lambda: [c.earliest for c in spool.channels], ttl_s=lease_ttl_s)
        except BaseException:
            self.ingest.stop()
            raise
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
        self._stopping = threading.Event()
        self._keeper: Optional[threading.Thread] = None
        if retention_bytes is not None or retention_s is not None:
            self._keeper = threading.Thread(target=self._keep, name="zmq-relay-retention", daemon=True)
            self._keeper.start()

    # -- control requests ------------------------------------------------------------------------

    def _control(self, request: dict[str, Any]) -> list[bytes]:
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

    def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            op = Op(request.get("op"))
        except ValueError:
            raise ValueError(f"bad request: unknown op {request.get('op')!r}") from None
        reader = _reader(request, "reader", DEFAULT_READER)
        if op is Op.HELLO:  # no lease: what a client needs to know before it claims one
            return self._hello(reader)
        if op is Op.READERS:  # no lease: ``spark-zmq relay-readers``
            return self._list_readers()
        if op is Op.REMOVE_READER:
            refusal = self.readers.remove(_reader(request, "name"))
            if refusal is not None:
                raise ValueError(f"refused: {refusal}")
            self._free_committed()
            return self._list_readers()
        session = request.get("session")
        if not isinstance(session, str) or not 0 < len(session) <= 64:
            raise ValueError("bad request: 'session' must be a string of 1 to 64 characters")
        if op is Op.DETACH:
            if self.readers.held_by(reader, session):
                self._attend(reader)
            self.readers.release_lease(reader, session)
            return {}
        lease_refusal = self.readers.claim(reader, session)
        if lease_refusal is not None:  # a clear refusal, not a failure
            return {"refused": {"idle": lease_refusal.idle_s, "lapses": lease_refusal.lapses_in_s, "reader": reader}}
        attended = self._attended.get(reader)
        self._attend(reader)
        if op is Op.ATTACH:
            log.info("relay: read by session %s as reader %r", session, reader)
            # ``attendedUntil``: where the last query of this name left (a receiver process a
            # query left lingering took what came after for the next one: startingOffsets=latest)
            return {**self._describe(reader), **self._state(reader), "attendedUntil": attended}
        if op is Op.STATE:
            return self._state(reader)
        if op is Op.START:
            self.ingest.start()
            return self._state(reader)
        if op is Op.RELEASE:
            offsets = request.get("offsets")
            if not isinstance(offsets, dict):
                raise ValueError("bad request: 'offsets' must be an object {channel: offset}")
            self.readers.commit(reader, {int(k): self._written(_int(offsets, k), k) for k in offsets})
            self._free_committed()
            return self._state(reader)
        if op is Op.DESCRIBE:
            return self._describe_ranges(request)
        if op is Op.AT_TIME:
            starts = self.ingest.start_at_time(_int(request, "timestamp"))
            return {"starts": [[offset, None if lost is None else [lost.first, lost.end, lost.describe()]]
                               for offset, lost in (starts[c] for c in sorted(starts))]}
        return self._channel_op(op, request)

    def _describe_ranges(self, request: dict[str, Any]) -> dict[str, Any]:
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
            self._within_written(channel, start, end)
            info = describe_range(channels[channel], start, end)
            out[str(channel)] = {"rows": info.rows, "bytes": info.bytes, "at": list(info.hint) or None,
                                 "lost": [[r.first, r.end, r.within(start, end).describe()] for r in info.lost]}
        return {"ranges": out}

    def _channel_op(self, op: Op, request: dict[str, Any]) -> dict[str, Any]:
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
            offset = _int(request, "offset")
            self._within_written(channel, offset)
            where = log_.locate(offset)
            return {"at": list(where) if where else None}
        start, end = _int(request, "start"), _int(request, "end")
        self._within_written(channel, start, end)
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
        self._within_written(index, offset)
        return offset

    def _within_written(self, channel: int, *offsets: int) -> None:
        """Refuse offsets past what ``channel``'s spool has written, naming the highest asked
        and the latest. Answered, they would read as zero messages, no loss and no place: a
        batch planned over them would hold nothing, and its offsets would name other
        messages once those arrive. No reader needs them: it plans up to the latest the
        relay reported, and moves a checkpoint that is ahead of a recreated spool past it
        with ``advance`` after counting only what the spool holds."""
        latest = self.ingest.spool.channels[channel].next_offset
        asked = max(offsets)
        if asked > latest:
            raise ValueError(f"bad request: offset {asked} of channel {channel} is past what the spool has written "
                             f"(latest {latest})")

    # -- freeing ---------------------------------------------------------------------------------

    def _free_committed(self) -> None:
        """Free what every registered reader has committed (nothing with no reader)."""
        positions = self.readers.minimum()
        if positions is not None:
            with self._free_lock:
                self.ingest.release({str(c): offset for c, offset in enumerate(positions)})

    def _keep(self) -> None:
        while not self._stopping.wait(RETENTION_CHECK_S):
            try:
                self.enforce_retention()
            except Exception:  # never let retention end the service; said in the log
                log.exception("relay: enforcing retention failed")

    def enforce_retention(self, now_us: Optional[int] = None) -> dict[int, int]:
        """Free the oldest segments past ``retention_s`` or beyond ``retention_bytes``,
        whoever has not committed them (they are logged). Returns what was freed below,
        per channel. Segments are freed whole: one being written is first closed (the
        next check frees it)."""
        logs = self.ingest.spool.channels
        ages = [log_.segment_ages() for log_ in logs]
        upto: dict[int, int] = {}
        freeing = [0] * len(logs)  # per channel: how many leading segments retention frees
        roll: set[int] = set()
        if self.retention_s is not None:
            cutoff = (now_us if now_us is not None else int(time.time() * 1e6)) - int(self.retention_s * 1e6)
            for c, segments in enumerate(ages):
                for end, _size, _oldest, newest in segments[:-1]:
                    if newest >= cutoff:
                        break
                    upto[c], freeing[c] = end, freeing[c] + 1
                if segments and 0 < segments[-1][2] < cutoff:
                    roll.add(c)  # the one being written holds messages past retention
        if self.retention_bytes is not None:
            held = sum(size for c, segments in enumerate(ages) for _, size, _, _ in segments[freeing[c]:])
            excess = held - self.retention_bytes
            while excess > 0:
                heads = [(ages[c][freeing[c]][2], c) for c in range(len(logs)) if freeing[c] < len(ages[c]) - 1]
                if not heads:
                    roll.update(c for c, segments in enumerate(ages) if segments and segments[-1][2] > 0)
                    break
                _, c = min(heads)
                end, size, _, _ = ages[c][freeing[c]]
                upto[c], freeing[c] = end, freeing[c] + 1
                excess -= size
        if upto:
            for reader in self.readers.describe():
                for c, offset in sorted(upto.items()):
                    if reader["committed"][c] < offset:
                        log.warning("relay: retention freed offsets %d..%d of channel %d that reader %r had not "
                                    "committed: its query reports them lost (failOnDataLoss)",
                                    reader["committed"][c], offset, c, reader["name"])
            with self._free_lock:
                self.ingest.release({str(c): offset for c, offset in upto.items()})
        for c in roll:
            logs[c].roll()
        return upto

    def _authorize_fetch(self, request: dict[str, Any]) -> Optional[str]:
        """Why a fetch request may not be served (``None``: it may): it must name a session
        that holds a reader's lease (or held it last, nobody having claimed it since), and end
        within what the channel's spool has written."""
        if not self.readers.may_fetch(request.get("session")):
            return ("refused: a fetch must name the session that holds this relay's lease (the reading query's); "
                    "this one does not")
        channel, start, end = request.get("channel"), request.get("start"), request.get("end")
        channels = self.ingest.spool.channels
        if isinstance(channel, int) and 0 <= channel < len(channels) and isinstance(end, int) \
                and end > channels[channel].next_offset:
            return (f"bad request: offsets up to {end} of channel {channel} are past what the spool has written "
                    f"(latest {channels[channel].next_offset})")
        if isinstance(channel, int) and 0 <= channel < len(channels) and isinstance(start, int) \
                and start < channels[channel].earliest and not request.get("skipLoss"):
            # what a reader that lagged meets after retention (said as any freed offsets are)
            freed = min(channels[channel].earliest, end) if isinstance(end, int) else channels[channel].earliest
            return (f"DataLossError: offsets {start}..{freed} of channel {channel} were freed from the relay's spool "
                    "before this reader read them (its retention, --retention-bytes or --retention-seconds, or "
                    "every registered reader had committed them). Set failOnDataLoss=false to skip such offsets")
        return None

    def _hello(self, reader: str) -> dict[str, Any]:
        """What anyone who reaches ``--listen`` may know: never where the spool is."""
        spool = self.ingest.spool
        return {"protocol": PROTOCOL, "spool": spool.spool_id, "channels": len(spool.channels),
                "format": self.options.format, "held": self.readers.held(reader),
                "controlRequests": self.control_requests}

    def _list_readers(self) -> dict[str, Any]:
        """The registered readers, with what each has yet to read (``behind``: messages
        between its committed offset and the latest, per channel) and the offsets freed
        before it committed them (``lost``), and the relay's retention."""
        channels = self.ingest.spool.channels
        latest, earliest = [c.next_offset for c in channels], [c.earliest for c in channels]
        readers = self.readers.describe()
        for reader in readers:
            reader["behind"] = [channels[c].snapshot().count_between(max(offset, earliest[c]), latest[c])[0]
                                if latest[c] > offset else 0 for c, offset in enumerate(reader["committed"])]
            reader["lost"] = [max(0, earliest[c] - offset) for c, offset in enumerate(reader["committed"])]
        return {"readers": readers, "latest": latest, "earliest": earliest, "spool": self.ingest.spool.spool_id,
                "retention": {"bytes": self.retention_bytes, "seconds": self.retention_s},
                "bytes": sum(c.size_bytes for c in channels)}

    def _attend(self, reader: str) -> None:
        self._attended[reader] = [c.next_offset for c in self.ingest.spool.channels]

    def _describe(self, reader: str) -> dict[str, Any]:
        spool = self.ingest.spool
        return {
            "protocol": PROTOCOL, "spool": spool.spool_id, "channels": len(spool.channels),
            "spoolDir": spool.spool_dir, "owner": spool.owner_id, "format": self.options.format,
            "pattern": self.options.pattern, "endpoints": [str(e) for e in self.options.endpoints],
            "held": self.readers.held(reader), "reader": reader,
            #: control requests answered so far (what planning a micro-batch costs in round trips)
            "controlRequests": self.control_requests,
        }

    def _state(self, reader: Optional[str] = None) -> dict[str, Any]:
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
            **({"committed": self.readers.committed(reader)} if reader is not None else {}),
        }

    # -- life ------------------------------------------------------------------------------------

    def failed(self) -> Optional[str]:
        """A receiver's failure, if one stopped (the relay exits then, for its supervisor)."""
        errors = self._state()["errors"]
        return errors[0] if errors else None

    def stop(self, drain: bool = True) -> None:
        """Drain what the sockets hold into the spool (unless it is gone), then close everything."""
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join(5)
        self.server.close()
        self.ingest.stop(drain=drain)
