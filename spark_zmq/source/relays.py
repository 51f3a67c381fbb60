"""A query's ingest when it reads relays (option ``relays``) instead of binding endpoints.

``RelayIngest`` gives the stream reader what ``LocalIngest`` gives it (channels with
their offsets and index, the spool's identity, release, drain) for the channels of one
or more relays (``spark_zmq.relay``), numbered one after another in the order of the
``relays`` option: relay A's channels 0..a-1 are the query's partitions 0..a-1, relay B's
channel 0 is partition a, and so on. The offsets Spark checkpoints name the relays' spools
(``"spool": "<id of A>,<id of B>"``), so a checkpoint paired with a recreated relay spool is
detected as for a local spool.

Each read task reads its range from the relay that holds it: directly from the relay's
spool directory when the task sees it (a relay on the executor's host), else over the
relay's port, authenticated with the query's CURVE keys when the relay runs CURVE.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from ..ingest.fetch import FetchAccess
from ..ingest.loss import LostRange
from ..ingest.runtime import RangeInfo
from ..options import SourceOptions
from ..relay.client import RelayBusyError, RelayClient, RelayError
from ..relay.messages import (
    AdvanceRequest,
    AttachAnswer,
    AttachRequest,
    AtTimeRequest,
    CountRequest,
    DescribeRequest,
    DetachRequest,
    EndWithinRequest,
    LocateRequest,
    LostRequest,
    ReleaseRequest,
    StartRequest,
    StateAnswer,
    StateRequest,
)
from ..relay.processes import ReceiverProcesses, ReceiverTarget
from ..relay.protocol import LEASE_TTL_S
from .driver_host import fetch_service_host
from .locality import needs_fetch_service
from .partitions import SpoolRange

__all__ = ["RelayIngest", "RelayError", "RelayBusyError"]

log = logging.getLogger(__name__)

#: how often the reader renews its claims on its relays (well inside the lease's ttl)
HEARTBEAT_S = LEASE_TTL_S / 5
#: a relay's state answered this recently (seconds) is used again instead of asked again.
#: Why: one ``latestOffset`` of Spark's looks at the state three times within a millisecond
#: or two (the failure check, the release, the latest offsets), and Spark calls it every
#: 10 ms (``pollingDelay``) while nothing arrives, so an idle query cost its receiver
#: process about 280 requests a second, 5% of a core. An answer this young is as good a
#: snapshot of offsets that only grow, and Spark's next poll asks again.
STATE_REUSE_S = 0.005


class _RelayLink:
    """One relay as the query sees it: its client, its description, its latest state."""

    def __init__(self, target: ReceiverTarget, client: RelayClient, attached: AttachAnswer, first_channel: int) -> None:
        self.target = target
        self.address = target.address
        self.client = client
        self.description = attached.relay
        self.spool_id = attached.relay.spool
        self.spool_dir = attached.relay.spool_dir
        self.owner = attached.relay.owner
        self.channels = attached.relay.channels
        self.first_channel = first_channel
        #: each channel's latest offset when the last query of this reader name left
        self.attended_until = attached.attended_until
        self._state: StateAnswer = attached.state
        #: when ``state`` was answered (``time.monotonic()``)
        self.answered_at = time.monotonic()
        #: the offsets of the last release this reader sent, by the relay's channel
        self.released: dict[int, int] = {}

    @property
    def state(self) -> StateAnswer:
        """The relay's latest answer about its channels."""
        return self._state

    @state.setter
    def state(self, answer: StateAnswer) -> None:
        self._state = answer
        self.answered_at = time.monotonic()


class RelayChannel:
    """One relay channel with the attributes the reader uses of a ``ChannelLog``; offsets
    come from the state its relay last reported (asked again at a reader call once older than
    ``STATE_REUSE_S``)."""

    def __init__(self, relay: _RelayLink, local: int) -> None:
        self.relay = relay
        self.local = local
        self.channel = relay.first_channel + local

    @property
    def next_offset(self) -> int:
        return self.relay.state.latest[self.local]

    @property
    def earliest(self) -> int:
        return self.relay.state.earliest[self.local]

    def snapshot(self) -> RelayIndex:
        """The channel's index, which lives in the relay: every question put to it is a
        round trip (a spool's ``snapshot`` is a copy in memory)."""
        return RelayIndex(self)

    def advance_to(self, offset: int) -> None:
        self.relay.client.ask(AdvanceRequest(self.local, int(offset)))


class RelayIndex:
    """A relay channel's index as the planner reads one (``planner.ChannelIndex``), each
    answer asked of the relay (``COUNT``, ``END_WITHIN``, ``LOST``) when it is read. The
    reader asks for many channels at once with ``RelayIngest.describe`` instead."""

    def __init__(self, channel: RelayChannel) -> None:
        self.relay = channel.relay
        self.local = channel.local
        self.channel = channel.channel

    def count_between(self, start: int, end: int) -> tuple[int, int]:
        if end <= start:
            return 0, 0
        answer = self.relay.client.ask(CountRequest(self.local, int(start), int(end)))
        return answer.rows, answer.bytes

    def end_within(self, start: int, limit: int, max_rows: int | None, max_bytes: int | None) -> int:
        if max_rows is None and max_bytes is None:
            return limit
        return self.relay.client.ask(EndWithinRequest(self.local, int(start), int(limit), max_rows, max_bytes)).end

    def lost_within(self, start: int, end: int) -> list[LostRange]:
        """The relay's losses in ``[start, end)``. The wire carries ``[first, end, words]``
        per loss (protocol 1), the words naming the relay's channel and file: they are kept
        as they are, with the relay named after them."""
        if end <= start:
            return []
        answer = self.relay.client.ask(LostRequest(self.local, int(start), int(end)))
        return [loss.lost_range(self.channel, self.relay.target.label) for loss in answer.lost]


class RelayIngest:
    """The channels of the ``relays`` a query reads, under one lease session."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.session = uuid.uuid4().hex
        self.relays: list[_RelayLink] = []
        self.channels: list[RelayChannel] = []
        self.processes: ReceiverProcesses | None = None
        #: whether the channels receive: standalone relays always do; receiver processes
        #: from ``start`` on
        self.started = not (options.receivers == "processes" and not options.relays)
        try:
            if options.relays:
                targets = [ReceiverTarget(address, options.curve, f"relay at {address}") for address in options.relays]
            else:  # receivers=processes: relays of our own, one per endpoint
                host = (
                    fetch_service_host(options.spool_server_host)
                    if needs_fetch_service(options.spool_access)
                    else "127.0.0.1"
                )
                self.processes = ReceiverProcesses(options, host)
                targets = self.processes.targets
            for target in targets:
                client = RelayClient(
                    target.address,
                    self.session,
                    curve=target.curve,
                    timeout_s=options.relay_timeout,
                    label=target.label,
                    reader=options.relay_reader,
                    watch=self.processes.raise_if_failed if self.processes is not None else None,
                )
                try:
                    attached = self._attach(client)
                except RelayBusyError as busy:
                    client.close()
                    if self.processes is None:
                        raise
                    raise RuntimeError(
                        f"spool directory {options.spool_dir!r} is in use by another running query (its "
                        f"{target.label} serves that query); stop it, or give this query its own 'spoolDir' "
                        "option"
                    ) from busy
                except BaseException:
                    client.close()
                    raise
                relay = _RelayLink(target, client, attached, len(self.channels))
                self.relays.append(relay)
                self.channels.extend(RelayChannel(relay, c) for c in range(relay.channels))
        except BaseException:
            self.stop(force=True)
            raise
        #: startingOffsets=latest: what arrives after the query starts. A receiver process
        #: this query started has not received yet (``start``), so this is where its spool
        #: ended; one an earlier query left lingering took what came after that query, in
        #: place of the producers' queues, so this query begins where that one left.
        self.start_offsets = self.latest()
        if self.processes is not None:
            taken = 0
            for view in self.channels:
                mark = view.relay.attended_until
                if mark is not None:
                    key = str(view.channel)
                    begin = max(min(mark[view.local], self.start_offsets[key]), view.earliest)
                    taken += self.start_offsets[key] - begin
                    self.start_offsets[key] = begin
            if taken:
                log.info(
                    "startingOffsets=latest: the query begins where the previous query of spool directory %s "
                    "left, with what its lingering receivers took since (%d offsets)",
                    options.spool_dir,
                    taken,
                )
        self._stopping = threading.Event()
        self._heartbeat = threading.Thread(target=self._renew, name="zmq-relay-lease", daemon=True)
        self._heartbeat.start()

    def _attach(self, client: RelayClient) -> AttachAnswer:
        """Claim the relay; a holder that has stopped renewing (a driver that was killed)
        is waited out, a live one is an error at once. A relay of another protocol is
        refused as its answer is read (``AttachAnswer.from_wire``)."""
        deadline = time.monotonic() + LEASE_TTL_S + self.options.relay_timeout
        last_idle = -1.0
        while True:
            try:
                attached = client.ask(AttachRequest())
                break
            except RelayBusyError as busy:
                # A live holder renews every HEARTBEAT_S: watch it for a little longer than
                # that. Renewed meanwhile (idle went down): a live query, an error at once.
                # Silent past 1.5 heartbeats: a dead one (a killed driver): wait it out.
                if busy.idle_s < last_idle or time.monotonic() + busy.lapses_in_s > deadline:
                    raise
                last_idle = busy.idle_s
                if busy.idle_s > 1.5 * HEARTBEAT_S:
                    log.warning(
                        "the relay at %s is claimed by a reader silent for %.1f s (a stopped query?); "
                        "waiting %.1f s for its claim to lapse",
                        client.address,
                        busy.idle_s,
                        busy.lapses_in_s,
                    )
                    time.sleep(min(busy.lapses_in_s + 0.05, HEARTBEAT_S))
                else:
                    time.sleep(HEARTBEAT_S / 8)
        spooled = attached.relay.format
        if (spooled == "arrow") != (self.options.format == "arrow"):
            raise RelayError(
                f"the relay at {client.address} spools format {spooled!r} but this query reads "
                f"{self.options.format!r}: Arrow messages are counted by rows, others by messages, so start the "
                f"relay with '--format {self.options.format}'"
            )
        return attached

    def _renew(self) -> None:
        clients: dict[str, RelayClient | None] = {relay.address: None for relay in self.relays}
        try:
            while not self._stopping.wait(HEARTBEAT_S):
                for relay in self.relays:
                    client = clients.get(relay.address)
                    if client is None:
                        client = clients[relay.address] = RelayClient(
                            relay.address,
                            self.session,
                            curve=relay.target.curve,
                            timeout_s=HEARTBEAT_S,
                            reader=self.options.relay_reader,
                        )
                    try:
                        client.ask(StateRequest())
                    except RelayError:
                        pass  # the reader's own next call reports it
        finally:
            for client in clients.values():
                if client is not None:
                    client.close()

    # -- what the stream reader uses ----------------------------------------------------------

    @property
    def spool_id(self) -> str:
        return ",".join(relay.spool_id for relay in self.relays)

    @property
    def where(self) -> str:
        """The spool(s), for messages."""
        if self.processes is not None:
            return f"{self.options.spool_dir!r} (receiver processes)"
        return "of the relays " + ", ".join(relay.address for relay in self.relays)

    @property
    def channel_names(self) -> list[str]:
        if self.processes is not None:
            return [str(endpoint) for endpoint in self.options.endpoints]
        return [f"{relay.address} channel {c}" for relay in self.relays for c in range(relay.channels)]

    def start(self) -> None:
        """Let receiver processes receive, once the reader has checked the checkpoint
        (standalone relays receive already; for them this changes nothing)."""
        for relay in self.relays:
            relay.state = relay.client.ask(StartRequest())
        self.started = True

    def _refresh(self) -> None:
        for relay in self.relays:
            if time.monotonic() - relay.answered_at >= STATE_REUSE_S:
                relay.state = relay.client.ask(StateRequest())

    def raise_if_failed(self) -> None:
        if self.processes is not None:
            self.processes.raise_if_failed()
        self._refresh()
        for relay in self.relays:
            if relay.state.errors:
                raise RuntimeError(f"the {relay.target.label} has a failed receiver: " + "; ".join(relay.state.errors))

    def latest(self) -> dict[str, int]:
        self._refresh()
        return {str(c.channel): c.next_offset for c in self.channels}

    def earliest(self) -> dict[str, int]:
        return {str(c.channel): c.earliest for c in self.channels}

    def start_at_time(self, timestamp_ms: int) -> dict[int, tuple[int, LostRange | None]]:
        """Each channel's first offset received at or after ``timestamp_ms``, with the freed
        offsets that were: one ``AT_TIME`` per relay."""
        out: dict[int, tuple[int, LostRange | None]] = {}
        for relay in self.relays:
            try:
                starts = relay.client.ask(AtTimeRequest(int(timestamp_ms))).starts
            except RelayError as exc:
                if "unknown op" in str(exc):
                    raise RelayError(
                        f"the {relay.target.label} runs an older spark-zmq that cannot find an offset by "
                        "time (option 'startingTimestamp'): upgrade it, or use 'startingOffsets'"
                    ) from None
                raise
            for local, start in enumerate(starts):
                channel = relay.first_channel + local
                out[channel] = (
                    start.offset,
                    None if start.lost is None else start.lost.lost_range(channel, relay.target.label),
                )
        return out

    def release(self, end: dict[str, int]) -> None:
        for relay in self.relays:
            offsets = {
                c: int(end[str(relay.first_channel + c)])
                for c in range(relay.channels)
                if str(relay.first_channel + c) in end
            }
            if offsets and offsets != relay.released:  # (the same release again would free nothing)
                relay.state = relay.client.ask(ReleaseRequest(offsets))
                relay.released = offsets

    def drain_until_idle(self, idle_s: float) -> None:
        while True:
            self.raise_if_failed()
            wait = idle_s - min(relay.state.idle for relay in self.relays)
            if wait <= 0:
                return
            time.sleep(min(wait, 0.05))

    def broken_connections(self) -> int:
        return sum(relay.state.broken for relay in self.relays)

    def rejected_handshakes(self) -> int:
        return sum(relay.state.rejected for relay in self.relays)

    def describe(self, ranges: dict[int, tuple[int, int]]) -> dict[int, RangeInfo]:
        """``RangeInfo`` of each channel's range: one ``DESCRIBE`` per relay holding any
        (a relay that does not know the op answers it with ``COUNT``, ``LOST``, ``LOCATE``)."""
        out: dict[int, RangeInfo] = {}
        by_relay: dict[int, dict[int, tuple[int, int]]] = {}
        for channel, (lo, hi) in ranges.items():
            view = self.channels[channel]
            by_relay.setdefault(id(view.relay), {})[view.local] = (int(lo), int(hi))
        for relay in self.relays:
            asked = by_relay.get(id(relay))
            if not asked:
                continue
            try:
                described = relay.client.ask(DescribeRequest(asked)).ranges
            except RelayError as exc:
                if "unknown op" not in str(exc):
                    raise
                described = None  # a relay of before DESCRIBE
            for local, (lo, hi) in asked.items():
                channel = relay.first_channel + local
                view = self.channels[channel]
                if described is None:
                    index = view.snapshot()
                    rows, nbytes = index.count_between(lo, hi)
                    at = relay.client.ask(LocateRequest(view.local, lo)).at
                    out[channel] = RangeInfo(rows, nbytes, index.lost_within(lo, hi), tuple(at or ()))
                    continue
                got = described.get(local)
                if got is None:
                    raise RelayError(f"the {relay.target.label} answered 'describe' without channel {local}'s range")
                out[channel] = got.range_info(channel, relay.target.label)
        return out

    def spool_range(self, channel: int, start: int, end: int, hint: tuple | None = None) -> SpoolRange:
        view = self.channels[channel]
        relay = view.relay
        where = hint if hint is not None else relay.client.ask(LocateRequest(view.local, int(start))).at
        curve = relay.target.curve
        access = FetchAccess(
            relay.address,
            curve.server_key if curve is not None else None,
            curve.public_key if curve is not None else None,
            curve.secret_key if curve is not None else None,
            server_name=f"the {relay.target.label}",
            session=relay.client.session,
            is_relay=True,
        )
        return SpoolRange(
            relay.spool_dir,
            channel,
            start,
            end,
            relay.owner,
            access,
            tuple(where or ()),
            relay.spool_id,
            spool_channel=view.local,
        )

    def stop(self, force: bool = False) -> None:
        """Detach from every relay; receiver processes linger for a restarted query
        (``receiverLingerSeconds``) unless ``force``."""
        stopping = getattr(self, "_stopping", None)
        if stopping is not None:
            stopping.set()
            self._heartbeat.join(HEARTBEAT_S + 1)
        for relay in self.relays:
            try:
                relay.client.ask(DetachRequest(), timeout_s=1.0)
            except RuntimeError:
                pass  # silent, or a receiver process that exited (its watch says so)
            relay.client.close()
        self.relays = []
        if self.processes is not None:
            self.processes.stop(force=force)
