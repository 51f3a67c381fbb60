"""The planning rule of ``committedOnly`` (``RunSelector``): per channel, the end offset a
micro-batch may take (below the first message of a batch without a decision), the runs
each batch delivers and the copies it skips, and when a batch without a commit record is
released or a decision forgotten or compacted away.

Why its own module: the rule is pure (no Spark, no sockets, the clock passed in) and is
tested on its own; ``committed`` (``CommittedOnly``) is the stream reader's glue around it,
which scans the spool, keeps the decisions on disk and annotates the read tasks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping

from .decisions import BatchKey, Decisions, RunKey
from .run_tags import Tag

__all__ = ["RunSelector", "HOLD_LIMIT_SECONDS", "RELEASE_AFTER_BATCHES", "FORGET_AFTER_SECONDS"]

# the logger of ``committed``, where this was written first: logging configured for it still applies
log = logging.getLogger("spark_zmq.source.committed")

#: a batch without a decision this long after its first message was seen is released: decided
#: as "no run committed", its messages skipped, logged and counted (``released_messages``)
HOLD_LIMIT_SECONDS = 900.0

#: a batch is released when a record of a batch of the same writing query this many batches
#: later arrives without naming it: every record names its query's ``RECENT_BATCHES`` (8)
#: earlier ones, so a record of the batch and the records naming it were all lost, or the
#: writing query never committed it
RELEASE_AFTER_BATCHES = 9

#: a decision whose record Spark committed past, with no message of its batch left to read,
#: is forgotten this long after it was made (without a floor): what bounds the decisions a
#: batch write, or a record of a batch nobody wrote (forged), leaves behind
FORGET_AFTER_SECONDS = 900.0


class _Channel:
    """What the selector knows of one channel."""

    def __init__(self, cursor: int) -> None:
        #: the next offset to look at
        self.cursor = cursor
        #: undecided batch -> its first offset on this channel
        self.undecided: dict[BatchKey, int] = {}
        #: (first offset, batch key or None) where the batch of consecutive data messages changes
        self.spans: list[tuple[int, BatchKey | None]] = []
        #: since when (monotonic) this channel has been held, and the batches already warned of
        self.held_since: float | None = None
        self.warned: set[BatchKey] = set()
        #: (offset, key) of the commit records observed and not yet released, in order
        self.records: list[tuple[int, BatchKey]] = []
        #: writing query -> its newest batch whose commit record Spark committed past here
        self.passed: dict[str, int] = {}
        #: offset -> (batch, partition, attempt_id, sequence) of each data message observed
        #: and not yet released: what ``skips`` deduplicates
        self.data: dict[int, tuple[BatchKey, int, str, int]] = {}


class RunSelector:
    """The planning rule over the messages' tags, per channel, in offset order.

    ``observe`` each message once (any interleaving of channels); ``end`` is the offset a
    batch may end at: below the first data message whose batch has no decision.
    ``decisions_within`` names the decisions a read task of ``[lo, hi)`` needs."""

    def __init__(self, decisions: Decisions | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.decisions = decisions if decisions is not None else Decisions()
        self.channels: dict[int, _Channel] = {}
        self.clock = clock
        #: undecided batch -> when its first message was seen (by this driver)
        self.first_seen: dict[BatchKey, float] = {}
        #: decision -> when this driver made or loaded it (``forgettable``)
        self.decided_at: dict[BatchKey, float] = dict.fromkeys(self.decisions, clock())
        #: the batches a data message of which was seen (those loaded from disk: assumed)
        self.seen_data: set[BatchKey] = set(self.decisions)
        #: batches released undecided, the messages of them skipped, and records that
        #: named other runs than the decision that stood (a forged record, or a forged first one)
        self.released_batches = 0
        self.released_messages = 0
        #: the batches this driver released (their later messages count as released too)
        self.released: set[BatchKey] = set()
        self.conflicting_records = 0

    def channel(self, channel: int, start: int) -> _Channel:
        """The channel's state, starting at ``start`` when it is new."""
        state = self.channels.get(channel)
        if state is None:
            state = self.channels[channel] = _Channel(start)
        return state

    def observe(self, channel: int, offset: int, tag: Tag) -> None:
        state = self.channels[channel]
        assert offset >= state.cursor, (offset, state.cursor)
        key = tag.key if tag.kind == "data" else None
        if not state.spans or state.spans[-1][1] != key:
            state.spans.append((offset, key))
        if tag.kind == "record" and tag.key is not None and tag.runs is not None:
            self._decide(channel, offset, tag.key, tag.runs, tag.messages)
            for earlier, (runs, counts) in sorted((tag.recent or {}).items()):
                # a record lost on the way is repaired by this one (the first decision stands)
                self._decide(channel, offset, earlier, runs, counts)
            state.records.append((offset, tag.key))
            query, batch = tag.key
            for held in [k for k in self.first_seen if k[0] == query and k[1] <= batch - RELEASE_AFTER_BATCHES]:
                self.release_batch(
                    held,
                    f"a record of batch {batch} of the same writing query arrived, and neither "
                    f"its record nor the {RELEASE_AFTER_BATCHES - 1} records after it named it",
                )
        elif key is not None:
            state.data[offset] = (key, tag.partition, tag.attempt_id, tag.sequence)
            self.seen_data.add(key)
            if not self.decisions.settled(key):
                self.first_seen.setdefault(key, self.clock())
                state.undecided.setdefault(key, offset)
            elif key in self.released:
                self.released_messages += 1  # a straggler of a released batch
        state.cursor = offset + 1

    def _decide(
        self, channel: int, offset: int, key: BatchKey, runs: Mapping[int, str], counts: Mapping[int, int] | None
    ) -> None:
        if self.decisions.add(key, runs, counts):
            self.decided_at[key] = self.clock()
            self.first_seen.pop(key, None)
            return
        stood = self.decisions.get(key)
        if stood is not None and stood != {} and dict(stood) != dict(runs):
            self.conflicting_records += 1
            log.warning(
                "committedOnly: the commit record at channel %d, offset %d names other runs of batch %d of "
                "query %s than the record that decided it: the first stands, and the rows of the runs only "
                "this one names are not delivered. Two records disagree only when one is not the writing "
                "query's (a sender without CURVE can forge one) or the writing query committed the batch "
                "again after a restart",
                channel,
                offset,
                key[1],
                key[0],
            )
        elif stood == {}:
            log.warning(
                "committedOnly: the commit record at channel %d, offset %d of batch %d of query %s came after "
                "the batch was released without one: its rows were skipped (counted as lost)",
                channel,
                offset,
                key[1],
                key[0],
            )

    def release_batch(self, key: BatchKey, why: str) -> None:
        """Decide ``key`` as "no run committed": its messages are skipped, logged and counted."""
        if not self.decisions.add(key, {}):
            return
        self.first_seen.pop(key, None)
        self.decided_at[key] = self.clock()
        self.released.add(key)
        held = sum(1 for state in self.channels.values() for k, *_ in state.data.values() if k == key)
        self.released_batches += 1
        self.released_messages += held
        log.warning(
            "committedOnly: released batch %d of query %s without a commit record (%s): its %d message(s) "
            "received so far, and any that follow, are skipped and counted as lost",
            key[1],
            key[0],
            why,
            held,
        )

    def release_stale(self) -> list[BatchKey]:
        """Release the batches held longer than ``HOLD_LIMIT_SECONDS``; returns them."""
        now = self.clock()
        stale = [k for k, since in self.first_seen.items() if now - since >= HOLD_LIMIT_SECONDS]
        for key in stale:
            self.release_batch(key, f"none arrived within {HOLD_LIMIT_SECONDS:.0f} s of its first message")
        return stale

    def skip_to(self, channel: int, offset: int) -> None:
        """Offsets below ``offset`` hold nothing more to observe (lost or never written)."""
        state = self.channels[channel]
        state.cursor = max(state.cursor, offset)

    def end(self, channel: int) -> int:
        state = self.channels[channel]
        for key in [k for k in state.undecided if self.decisions.settled(k)]:
            del state.undecided[key]
        return min(state.undecided.values(), default=state.cursor)

    def holding(self, channel: int) -> list[tuple[BatchKey, int]]:
        """The undecided batches holding ``channel``, with their first offsets, oldest first."""
        self.end(channel)
        return sorted(self.channels[channel].undecided.items(), key=lambda item: item[1])

    def decisions_within(self, channel: int, lo: int, hi: int) -> dict[BatchKey, dict[int, str]]:
        """The decisions of every batch with a data message in ``[lo, hi)`` of ``channel``
        (all observed and decided: ``hi <= end(channel)``)."""
        spans = self.channels[channel].spans
        out: dict[BatchKey, dict[int, str]] = {}
        for i, (first, key) in enumerate(spans):
            stop = spans[i + 1][0] if i + 1 < len(spans) else self.channels[channel].cursor
            if key is None or stop <= lo or first >= hi:
                continue
            runs = self.decisions.get(key)
            if runs is None and self.decisions.settled(key):
                continue  # compacted away: a straggler of a batch decided long ago, dropped
            if runs is None:
                raise RuntimeError(
                    f"committedOnly: channel {channel} offsets {lo}..{hi} hold batch {key[1]} of query "
                    f"{key[0]}, which has no commit record"
                )
            out[key] = dict(runs)
        return out

    def skips(self, begin: Mapping[int, int], end: Mapping[int, int]) -> dict[int, tuple[int, ...]]:
        """Per channel, the offsets in ``[begin, end)`` of the messages of committed runs that
        do not reach Spark although ``keep`` says they would: a copy of a sequence already
        delivered (here or by an earlier batch), or a sequence beyond the run's message count
        in its record. Decided once per planned batch and kept with the decisions (written
        by ``decisions.flush``), so a batch Spark runs again, on this driver or after a
        restart, skips the same copies. Channels are walked in order, each in offset order:
        the first copy a walk meets is the one delivered."""
        plan = tuple(sorted((int(c), int(begin.get(c, e)), int(e)) for c, e in end.items()))
        known = self.decisions.plans.get(plan)
        if known is not None:
            return dict(known)
        skip: dict[int, list[int]] = {}
        taken: dict[RunKey, set[int]] = {}
        for channel, lo, hi in plan:
            state = self.channels.get(channel)
            if state is None or hi <= lo:
                continue
            for offset, (key, partition, attempt, sequence) in state.data.items():
                if not lo <= offset < hi:
                    continue
                runs = self.decisions.get(key)
                if runs is None or runs.get(partition) != attempt or sequence < 0:
                    continue  # not delivered anyway (``keep``), or a message that cannot be told apart
                run = (key[0], key[1], partition)
                count = (self.decisions.counts(key) or {}).get(partition)
                seen = self.decisions.taken.get(run, ())
                if (count is not None and sequence >= count) or sequence in seen or sequence in taken.get(run, ()):
                    skip.setdefault(channel, []).append(offset)
                else:
                    taken.setdefault(run, set()).add(sequence)
        if skip or taken:
            self.decisions.add_plan(plan, skip, taken)
        return {c: tuple(o) for c, o in skip.items()}

    def release(self, channel: int, offset: int) -> None:
        """Forget the spans wholly below ``offset`` (Spark committed past them)."""
        state = self.channels.get(channel)
        if state is None:
            return
        for below in [o for o in state.data if o < offset]:
            del state.data[below]
        while state.records and state.records[0][0] < offset:
            _, (query, batch) = state.records.pop(0)
            state.passed[query] = max(state.passed.get(query, batch), batch)
        spans = state.spans
        i = 0
        while i + 1 < len(spans) and spans[i + 1][0] <= offset:
            i += 1
        if i:
            del spans[:i]

    def compactable(self) -> list[BatchKey]:
        """The decisions no read can need any more: on every channel, Spark committed past
        a commit record of a later batch of the same writing query (the spool freed it, and
        Spark re-runs no batch below). The writing query sends a batch's data before Spark
        commits it and the next batch's record only after that batch committed, so the
        batch's messages lie below that record on every channel; and it runs the batch no
        more, since Spark starts a batch only once the one before is in its commit log. No
        older batch of that query may be undecided on any channel either: the floor that
        compaction leaves must not settle a batch still waiting for its record."""
        if not self.channels:
            return []
        waiting: dict[str, float] = {}
        for state in self.channels.values():
            for q, b in state.undecided:
                if not self.decisions.settled((q, b)):  # (``end`` forgets the decided ones lazily)
                    waiting[q] = min(waiting.get(q, math.inf), b)
        return [
            (q, b)
            for q, b in self.decisions
            if b < waiting.get(q, math.inf)
            and all(q in state.passed and state.passed[q] > b for state in self.channels.values())
        ]

    def forgettable(self) -> list[BatchKey]:
        """The decisions to forget without a floor (``FORGET_AFTER_SECONDS``): made that long
        ago, their records all committed past by Spark, no message of their batch left to read
        on any channel, and either a batch write's (batch -1: no later batch of its query
        ever comes to compact it, and a write never runs again under its id) or one of a
        batch no data message of which was seen (a forged record). A streaming batch with
        data keeps its decision until ``compactable`` (the writing query may commit it again
        after a restart, and its second record must find the first standing), unless it was
        released without a record (nothing of it was delivered). A message of a
        forgotten batch arriving later still is held, and released by ``HOLD_LIMIT_SECONDS``."""
        now = self.clock()
        pending = {
            k
            for state in self.channels.values()
            for k in [*(key for _, key in state.records), *(d[0] for d in state.data.values())]
        }
        return [
            k
            for k in self.decisions
            if k not in pending
            and (k[1] == -1 or k not in self.seen_data or self.decisions.get(k) == {})
            and now - self.decided_at.get(k, now) >= FORGET_AFTER_SECONDS
        ]

    def compact(self, step: Callable[[str], None] | None = None) -> bool:
        """``Decisions.compact`` of what ``compactable`` and ``forgettable`` name, when the
        file has grown enough for it to be worth the scan."""
        if not self.decisions.worth_compacting():
            return False
        dead = self.compactable()
        forget = [k for k in self.forgettable() if k not in set(dead)]
        done = self.decisions.compact(dead, step, forget)
        if done:
            for key in [*dead, *forget]:
                self.decided_at.pop(key, None)
                self.seen_data.discard(key)
                self.released.discard(key)
        return done
