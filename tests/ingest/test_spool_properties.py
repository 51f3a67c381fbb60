"""The spool's log against a model, under random sequences of operations (Hypothesis).

Operations: append k messages (each message's bytes are a globally unique id; segments
are small, so appends also start new segments by size), roll,
release_before(x) for x up to what was appended, restart (close and reopen: recovery),
and advance_to(next_offset + d) (a checkpoint ahead of the spool). A model maps every
offset ever given out to its message. After every step:

- every offset at or above the highest release point reads back as exactly its message,
  by offset, with and without the ``locate`` hint; offsets never given out (skipped by
  ``advance_to``) are a DataLossError, never some other message;
- whatever the spool still indexes (also below the release point) is the original message;
- ``next_offset`` is what the model says: it never decreases, across restarts too;
- the index and the directory agree: one index entry per segment file, segments and
  entries ordered and disjoint, entries inside their segment's range;
- a segment file name never comes back once it is gone, and no seq is reused;
- the newest segment ever created is never deleted;
- the index's row counts agree with the model;
- directories are 0700 and files 0600.

No Spark, no sockets.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from spool_faults import batch, check_index, read_dict, runs, segment_names
from zmqtest import examples

from spark_zmq.ingest.loss import DataLossError
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.spool_layout import parse_segment_name
from spark_zmq.ingest.spool_reader import read_range, skip_loss

pytestmark = pytest.mark.timeout(90)


def _fast_base() -> str:
    """A scratch directory on tmpfs when there is one (fsync-free, fast), else /tmp."""
    for candidate in ("/dev/shm", None):
        if candidate is None or (os.path.isdir(candidate) and os.access(candidate, os.W_OK)):
            return tempfile.mkdtemp(prefix="spool-prop-", dir=candidate)
    raise AssertionError("unreachable")


class SpoolMachine(RuleBasedStateMachine):
    #: small segments (a record here is 400-700 bytes), so size-based rolls happen too
    SEGMENT_BYTES = 2048

    def __init__(self) -> None:
        super().__init__()
        self.base = _fast_base()
        self.dir = os.path.join(self.base, "spool")
        self.spool = Spool(self.dir, 1, max_bytes=1 << 20)
        self.log.segment_bytes = self.SEGMENT_BYTES  # so appends also roll by size
        self.spool_id = self.spool.spool_id
        self.model: dict[int, bytes] = {}  # offset -> message, for every offset ever given out
        self.next = 0  # the model's next offset
        self.released = 0  # the highest release_before point
        self.ids = 0
        self.names_ever: set[str] = set()
        self.seq_names: dict[int, str] = {}
        self.gone: set[str] = set()
        self.restarts = 0

    @property
    def log(self):
        return self.spool.channels[0]

    def teardown(self) -> None:
        try:
            self.spool.close()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    # -- operations -----------------------------------------------------------------------

    @rule(k=st.integers(1, 6), size=st.integers(0, 40))
    def append(self, k: int, size: int) -> None:
        values = [b"id-%06d:" % (self.ids + i) + b"x" * size for i in range(k)]
        self.ids += k
        first = self.log.next_offset
        assert first == self.next
        self.log.append(batch(values))
        assert self.log.next_offset == first + k
        for i, v in enumerate(values):
            self.model[first + i] = v
        self.next = first + k

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(pick=st.integers(0, 1 << 20))
    def release_before(self, pick: int) -> None:
        x = pick % (self.next + 1)
        before = {s.name: (s.first, s.end) for s in self.log.segments}
        newest = self.log.segments[-1].name if self.log.segments else None
        self.log.release_before(x)
        after = {s.name for s in self.log.segments}
        for name, (_first, end) in before.items():
            if name not in after:
                assert end <= x, f"release_before({x}) deleted {name}, which holds offsets up to {end}"
                assert name != newest, f"release_before({x}) deleted the newest segment {name}"
        self.released = max(self.released, x)

    @rule()
    def restart(self) -> None:
        self.spool.close()
        self.spool = Spool(self.dir, 1, max_bytes=1 << 20)
        self.log.segment_bytes = self.SEGMENT_BYTES
        self.restarts += 1
        assert self.spool.spool_id == self.spool_id, "the spool's identity changed across a restart"
        assert self.log.lost == [], f"a clean restart reported lost offsets: {self.log.lost}"

    @rule(d=st.integers(-3, 6))
    def advance_to(self, d: int) -> None:
        target = self.log.next_offset + d
        self.log.advance_to(target)
        self.next = max(self.next, target)

    # -- invariants -------------------------------------------------------------------------

    @invariant()
    def numbering(self) -> None:
        assert self.log.next_offset == self.next, (self.log.next_offset, self.next)
        assert self.spool.latest() == {"0": self.next}
        # the spool never claims to have dropped an offset that was not released
        assert self.log.earliest <= min((o for o in self.model if o >= self.released), default=self.next)

    @invariant()
    def held_offsets_read_back(self) -> None:
        held = {o: v for o, v in self.model.items() if o >= self.released}
        for lo, hi in runs(held):
            expected = {o: held[o] for o in range(lo, hi)}
            assert read_dict(self.dir, lo, hi, self.spool_id) == expected, (lo, hi)
            hint = self.log.locate(lo)
            assert hint is not None, f"locate({lo}) found no record for a held offset"
            assert read_dict(self.dir, lo, hi, self.spool_id, hint=hint) == expected, (lo, hi, hint)
        # offsets skipped by advance_to are a loss, never another message
        start = self.released
        for lo, hi in runs(o for o in range(start, self.next) if o not in self.model):
            with pytest.raises(DataLossError):
                list(read_range(self.dir, 0, lo, hi, spool_id=self.spool_id))
        assert self.log.locate(self.next) is None

    @invariant()
    def nothing_readable_is_wrong(self) -> None:
        low = min((s.first for s in self.log.segments), default=0)
        got = read_dict(self.dir, low, self.next, self.spool_id, on_loss=skip_loss)
        for offset, value in got.items():
            assert self.model.get(offset) == value, f"offset {offset} reads {value!r}, model {self.model.get(offset)!r}"
        indexed = {o for e in self.log.entries for o in range(e.first, e.end)}
        assert indexed == set(got), "the index and the files disagree on what is readable"
        rows, _ = self.log.snapshot().count_between(self.released, self.next)
        assert rows == sum(1 for o in self.model if o >= self.released)

    @invariant()
    def files(self) -> None:
        check_index(self.log, self.dir)
        names = set(segment_names(self.dir))
        assert not (names & self.gone), f"segment names came back after being deleted: {names & self.gone}"
        for name in names:
            seq = parse_segment_name(name)[1]
            assert self.seq_names.setdefault(seq, name) == name, f"seq {seq} reused: {name}, {self.seq_names[seq]}"
        self.gone |= self.names_ever - names
        self.names_ever |= names
        if self.seq_names:
            newest = self.seq_names[max(self.seq_names)]
            assert newest in names, f"the newest segment {newest} was deleted"
        for root, _dirs, filenames in os.walk(self.dir):
            assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700, root
            for f in filenames:
                assert stat.S_IMODE(os.lstat(os.path.join(root, f)).st_mode) == 0o600, f


SpoolMachine.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_spool_against_a_model = SpoolMachine.TestCase
