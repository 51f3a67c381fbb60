"""``spark-zmq relay``: the receivers and the spool of a source, as a service of their own.

A relay owns what a query's driver owns with ``endpoints``: one receiving socket and
receiver per endpoint (a channel), the hardened spool and its disk budget. It runs
whether or not a query reads it, so ingest keeps going while a Spark driver restarts, and
it can run on the producers' hosts, so ingest spreads over hosts and cores. When its spool
is full it stops reading: ZeroMQ's high-water marks fill and PUSH producers block.

A query talks to it over ZeroMQ request-reply (DEALER to ROUTER, the Guide's chapter 3) on
one ``--listen`` port:
- its driver sends control requests (``protocol``: JSON objects whose ``"op"`` is an
  ``Op``, each read once into its named type, ``messages``, which also checks everything
  a request can be checked for without the relay) under a reader's name (option ``relayReader``) and that name's lease
  (``readers``, ``lease``): several queries read one relay under different names, one
  query at a time under each;
- its executors fetch ``[start, end)`` of a channel exactly as they fetch from a driver
  (``spark_zmq.ingest.fetch``), unless they see the relay's spool directory, then they read it.
Every reply is ``[b"ok", json]`` or ``[b"error", text]``; control replies echo the
request's ``"id"`` so a client that resends after a timeout can drop stale answers.
The answers built from the spool and the readers (``hello``, ``readers``, the state, the
descriptions, the ops about one channel's offsets) are ``spool_answers``'s.

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
past a channel's latest offset, an ``advance`` past ``MAX_ADVANCE``. Under CURVE a reader
name is bound to the key that registered it (``readers``): control requests and fetches
for it under another key are refused. ``remove_reader`` needs the reader's lease, its key
or the operator token the relay writes into its spool directory (``operator``).

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
from typing import Any

from ..ingest.config import IngestConfig
from ..ingest.runtime import IngestRuntime
from ..ingest.spool_server import FREED, SpoolServer, bind_first, loss_reply
from ..patterns import Router
from ..patterns.curve import Curve
from .messages import (
    AdvanceRequest,
    AttachAnswer,
    AttachRequest,
    AtTimeAnswer,
    AtTimeRequest,
    CountRequest,
    DescribeRequest,
    DetachRequest,
    Done,
    EndWithinRequest,
    Envelope,
    HelloRequest,
    LeaseRefused,
    LocateRequest,
    LostRequest,
    ReadersRequest,
    ReleaseRequest,
    RemoveReaderRequest,
    StartRequest,
    StateRequest,
    TimeStart,
    WireLoss,
    reply_id,
)
from .operator import create_token, token_matches
from .protocol import LEASE_TTL_S, QUEUE, REQUEST_BYTES, RETENTION_CHECK_S
from .readers import Readers
from .spool_answers import Answer, SpoolAnswers

__all__ = ["Relay"]

log = logging.getLogger(__name__)


class Relay(SpoolAnswers):
    """Receivers + spool (an ``IngestRuntime``) + the ROUTER that serves them to its readers (one query at a
    time under each reader name), + the retention that bounds what lagging readers hold."""

    def __init__(
        self,
        config: IngestConfig,
        listen: str | list[str],
        *,
        listen_curve: Curve | None = None,
        lease_ttl_s: float = LEASE_TTL_S,
        start_receivers: bool = True,
        retention_bytes: int | None = None,
        retention_s: float | None = None,
        bind_reader_keys: bool = True,
    ) -> None:
        self.config = config
        #: bind reader names to their CURVE keys (``readers``); a query's own receiver
        #: process does not: its keys are made anew by each run of the query it serves
        self.bind_reader_keys = bind_reader_keys
        self.control_requests = 0
        #: what the spool may hold for readers that lag (``None``: no limit but maxSpoolBytes)
        self.retention_bytes = retention_bytes
        #: how old a held message may get, in seconds (``None``: no limit)
        self.retention_s = retention_s
        self._free_lock = threading.Lock()  # one freeing at a time (commits, retention)
        #: each reader's channels' latest offsets at the last request of the query holding its
        #: lease: what arrived later, no query of that name was there to see (``_handle``)
        self._attended: dict[str, list[int]] = {}
        self.ingest = IngestRuntime(config)
        spool = self.ingest.spool
        try:
            self.readers = Readers(
                spool.spool_dir, len(spool.channels), lambda: [c.earliest for c in spool.channels], ttl_s=lease_ttl_s
            )
            #: the secret that ``spark-zmq relay-readers --relay-spool-dir`` reads to act as the operator
            self.operator_token = create_token(spool.spool_dir)
        except BaseException:
            self.ingest.stop()
            raise
        try:
            # ``listen``: one endpoint, or candidates of which the first free one is bound
            # (a query's receiver process under option spoolServerPort)
            candidates = [listen] if isinstance(listen, str) else list(listen)
            router = bind_first(
                candidates,
                lambda endpoint: Router(
                    [endpoint],
                    hwm=QUEUE,
                    linger=0,
                    mandatory=True,
                    max_request_bytes=REQUEST_BYTES,
                    curve=listen_curve,
                    heartbeat=config.heartbeat,
                ),
                what="the receiver process's fetch port",
            )
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
            spool.spool_dir,
            spool_id=spool.spool_id,
            channels=len(spool.channels),
            locate=lambda channel, offset: spool.channels[channel].locate(offset),
            router=router,
            control=self._control,
            authorize=self._authorize_fetch,
            peer_keys=bind_reader_keys,  # (then ``_answer`` and ``_authorize_fetch`` get ``None``)
        )
        self._stopping = threading.Event()
        self._keeper: threading.Thread | None = None
        if retention_bytes is not None or retention_s is not None:
            self._keeper = threading.Thread(target=self._keep, name="zmq-relay-retention", daemon=True)
            self._keeper.start()

    # -- control requests ------------------------------------------------------------------------

    def _control(self, request: dict[str, Any], peer_key: str | None = None) -> list[bytes]:
        self.control_requests += 1
        try:
            body = self._answer(Envelope.from_wire(request), peer_key).to_wire()
            status = b"ok"
        except ValueError as exc:
            body, status = {"error": str(exc)}, b"error"
        except Exception as exc:  # never let one request end the service
            log.exception("relay: request %r failed", request.get("op"))
            body, status = {"error": f"the relay failed to answer {request.get('op')!r}: {exc!r}"}, b"error"
        body["id"] = reply_id(request)
        return [status, json.dumps(body).encode()]

    def _answer(self, envelope: Envelope, peer_key: str | None = None) -> Answer:
        """The answer to a request ``Envelope.from_wire`` has checked, from the client whose
        CURVE key is ``peer_key`` (``None`` without CURVE or ``bind_reader_keys``); a
        ``ValueError`` is answered as an error: a refusal or what is wrong with the request."""
        request, reader, session = envelope.request, envelope.reader, envelope.session
        if isinstance(request, HelloRequest):  # no lease: what a client needs to know before it claims one
            return self._hello(reader)
        if isinstance(request, ReadersRequest):  # no lease: ``spark-zmq relay-readers``
            return self._list_readers()
        if isinstance(request, RemoveReaderRequest):
            refusal = self.readers.remove(
                request.name, session, peer_key, operator=token_matches(self.operator_token, request.operator)
            )
            if refusal is not None:
                raise ValueError(f"refused: {refusal}")
            self._free_committed()
            return self._list_readers()
        if session is None:  # ``Envelope.from_wire`` gives every request that needs the lease one
            raise ValueError("bad request: 'session' must be a string of 1 to 64 characters")
        if isinstance(request, DetachRequest):
            if self.readers.held_by(reader, session):
                self._attend(reader)
            self.readers.release_lease(reader, session)
            return Done()
        lease_refusal = self.readers.claim(reader, session, peer_key)  # ReaderBoundError: another key's name
        if lease_refusal is not None:  # a clear refusal, not a failure
            return LeaseRefused(lease_refusal.idle_s, lease_refusal.lapses_in_s, reader)
        attended = self._attended.get(reader)
        self._attend(reader)
        if isinstance(request, AttachRequest):
            log.info("relay: read by session %s as reader %r", session, reader)
            # ``attended``: where the last query of this name left (a receiver process a
            # query left lingering took what came after for the next one: startingOffsets=latest)
            return AttachAnswer(self._describe(reader), self._state(reader), attended)
        if isinstance(request, StateRequest):
            return self._state(reader)
        if isinstance(request, StartRequest):
            self.ingest.start()
            return self._state(reader)
        if isinstance(request, ReleaseRequest):
            channels = self.ingest.spool.channels
            for channel, offset in request.offsets.items():
                if channel >= len(channels):
                    raise ValueError(f"bad request: channel {str(channel)!r} (the relay has {len(channels)} channels)")
                self._within_written(channel, offset)
            self.readers.commit(reader, request.offsets)
            self._free_committed()
            return self._state(reader)
        if isinstance(request, DescribeRequest):
            return self._describe_ranges(request)
        if isinstance(request, AtTimeRequest):
            starts = self.ingest.start_at_time(request.timestamp)
            return AtTimeAnswer(
                [
                    TimeStart(offset, None if lost is None else WireLoss.of(lost))
                    for offset, lost in (starts[c] for c in sorted(starts))
                ]
            )
        if isinstance(request, (CountRequest, EndWithinRequest, LostRequest, AdvanceRequest, LocateRequest)):
            return self._channel_op(request, reader)
        raise ValueError(f"bad request: unknown op {request.op.value!r}")  # an op this relay has no answer for

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

    def enforce_retention(self, now_us: int | None = None) -> dict[int, int]:
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
            held = sum(size for c, segments in enumerate(ages) for _, size, _, _ in segments[freeing[c] :])
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
                        log.warning(
                            "relay: retention freed offsets %d..%d of channel %d that reader %r had not "
                            "committed: its query reports them lost (failOnDataLoss)",
                            reader["committed"][c],
                            offset,
                            c,
                            reader["name"],
                        )
            with self._free_lock:
                self.ingest.release({str(c): offset for c, offset in upto.items()})
        for c in roll:
            logs[c].roll()
        return upto

    def _authorize_fetch(self, request: dict[str, Any], peer_key: str | None = None) -> str | list[bytes] | None:
        """Why a fetch request may not be served (``None``: it may): it must name a session
        that holds a reader's lease (or held it last, nobody having claimed it since) under
        the CURVE key the reader is bound to, and end within what the channel's spool has
        written."""
        if not self.readers.may_fetch(request.get("session"), peer_key):
            return (
                "refused: a fetch must name the session that holds this relay's lease (the reading query's); "
                "this one does not"
            )
        channel, start, end = request.get("channel"), request.get("start"), request.get("end")
        channels = self.ingest.spool.channels
        if (
            isinstance(channel, int)
            and 0 <= channel < len(channels)
            and isinstance(end, int)
            and end > channels[channel].next_offset
        ):
            return (
                f"bad request: offsets up to {end} of channel {channel} are past what the spool has written "
                f"(latest {channels[channel].next_offset})"
            )
        if (
            isinstance(channel, int)
            and 0 <= channel < len(channels)
            and isinstance(start, int)
            and start < channels[channel].earliest
            and not request.get("skipLoss")
        ):
            # what a reader that lagged meets after retention (said as any freed offsets are)
            freed = min(channels[channel].earliest, end) if isinstance(end, int) else channels[channel].earliest
            return loss_reply(
                channel,
                start,
                freed,
                FREED,
                "were freed from the relay's spool before this reader "
                "read them (its retention, --retention-bytes or --retention-seconds, or every registered "
                "reader had committed them). Set failOnDataLoss=false to skip such offsets",
            )
        return None

    def _attend(self, reader: str) -> None:
        self._attended[reader] = [c.next_offset for c in self.ingest.spool.channels]

    # -- life ------------------------------------------------------------------------------------

    def failed(self) -> str | None:
        """A receiver's failure, if one stopped (the relay exits then, for its supervisor)."""
        errors = self._errors()
        return errors[0] if errors else None

    def stop(self, drain: bool = True) -> None:
        """Drain what the sockets hold into the spool (unless it is gone), then close everything."""
        self._stopping.set()
        if self._keeper is not None:
            self._keeper.join(5)
        self.server.close()
        self.ingest.stop(drain=drain)
