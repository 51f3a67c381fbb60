"""``committedOnly``'s decisions on disk: which run of each writing batch counts.

``Decisions`` maps ``(query_id, batch_id)`` to the runs its first commit record names and
keeps them in ``committed-runs-<spool id>.jsonl`` (JSON lines, appended and synced before
a batch planned with them goes to Spark). The file would gain a line per writing batch
forever, so ``compact`` rewrites it without the decisions no read can need any more (the
caller, ``RunSelector.compactable``, says which) once they outnumber the live ones by
``COMPACT_MARGIN`` lines.

What is compacted away is remembered as a *floor* per writing query: every batch of that
query up to its floor that has no decision here was decided and forgotten. A message of
such a batch, or another commit record of it, is settled on arrival (its rows dropped,
the record ignored: the first record stood), never held waiting for a record, and never
decided a second time.

Delivery within a committed run is once per ``spark_zmq.sequence``: the file also keeps, per
planned micro-batch of the reading query (its offsets), the offsets of the copies it skips
(a message of a committed run that arrived a second time, after the sink resent what a
broken connection had not acknowledged) and the sequences it delivered. A batch Spark runs
again is read with the same skips, and a copy arriving in a later batch, or after a
restart, finds its sequence taken. ``compact`` keeps the sequences of the live decisions
and the newest ``PLANS_KEPT`` plans (Spark re-runs only its newest batch).

The rewrite is crash-safe: the new content goes to ``<file>.compact``, synced, renamed over
the file (atomic), and the directory synced. A process killed at any step leaves either
the old file (every decision, the old floor) or the new one (the live decisions, the new
floor), each a correct answer for every batch Spark can still run; a leftover
``.compact`` file is removed on the next load.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

__all__ = ["BatchKey", "RunKey", "PlanKey", "Decisions", "Sequences", "COMPACT_MARGIN", "PLANS_KEPT"]

#: (query_id, batch_id): what a commit record decides
BatchKey = tuple[str, int]
#: (query_id, batch_id, partition): one committed run
RunKey = tuple[str, int, int]
#: a planned micro-batch of the reading query: its (channel, begin, end) triples
PlanKey = tuple[tuple[int, int, int], ...]

#: plans (and their skips) kept through a compaction: Spark re-runs only its newest batch
PLANS_KEPT = 4

#: ``compact`` rewrites the file once its dead lines exceed the live ones by this many
COMPACT_MARGIN = 1024


class Sequences:
    """A set of a run's sequences, small when they come mostly in order: every number
    below ``below``, and the ``others``."""

    def __init__(self) -> None:
        self.below = 0
        self.others: set[int] = set()

    def __contains__(self, sequence: object) -> bool:
        return isinstance(sequence, int) and (sequence < self.below or sequence in self.others)

    def add(self, sequence: int) -> None:
        if sequence < self.below:
            return
        self.others.add(sequence)
        while self.below in self.others:
            self.others.discard(self.below)
            self.below += 1

    def update(self, sequences: Iterable[int]) -> None:
        for sequence in sorted(sequences):
            self.add(sequence)


def ranges(sequences: Iterable[int]) -> list[list[int]]:
    """``[[first, last], ...]``: how sequences are written (mostly one range per run)."""
    out: list[list[int]] = []
    for s in sorted(sequences):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Decisions:
    """``(query_id, batch_id)`` -> the runs its first commit record names; append-only,
    kept in a file (``path``, JSON lines) when given. ``add`` of a settled batch is ignored
    (the first record stands); ``flush`` writes what was added and syncs it."""

    def __init__(self, path: str | None = None, margin: int = COMPACT_MARGIN) -> None:
        self.path = path
        self.margin = margin
        self._runs: dict[BatchKey, dict[int, str]] = {}
        #: batch -> partition -> messages its committed run sent (when the record says)
        self._counts: dict[BatchKey, dict[int, int]] = {}
        #: committed run -> the sequences delivered (by the plans below)
        self.taken: dict[RunKey, Sequences] = {}
        #: plan -> channel -> offsets of the copies it skips (newest last)
        self.plans: dict[PlanKey, dict[int, tuple[int, ...]]] = {}
        self._unwritten_plans: list[str] = []
        #: writing query -> the highest batch compacted away (see the module's docstring)
        self.floor: dict[str, int] = {}
        self._unwritten: list[BatchKey] = []
        #: lines in the file (decisions and the floor line)
        self.lines = 0
        if path is not None:
            if os.path.exists(path + ".compact"):  # a compaction killed before its rename
                os.unlink(path + ".compact")
            if os.path.exists(path):
                self._load(path)

    def _load(self, path: str) -> None:
        with open(path, "rb") as f:
            data = f.read()
        complete = data.rfind(b"\n") + 1
        for line in data[:complete].splitlines():
            entry = json.loads(line)
            self.lines += 1
            if "floor" in entry:
                self.floor.update({str(q): int(b) for q, b in entry["floor"].items()})
                continue
            if "plan" in entry:
                self._replay_plan(entry)
                continue
            key = (str(entry["query"]), int(entry["batch"]))
            if key not in self._runs:
                self._runs[key] = {int(p): str(a) for p, a in entry["runs"].items()}
                if "messages" in entry:
                    self._counts[key] = {int(p): int(n) for p, n in entry["messages"].items()}
        if complete < len(data):
            # a line torn by a crash mid-write: never returned to Spark (flush had not
            # finished), so it is read again from the spool
            with open(path, "r+b") as f:
                f.truncate(complete)

    def __contains__(self, key: object) -> bool:
        return key in self._runs

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[BatchKey]:
        return iter(self._runs)

    def settled(self, key: BatchKey) -> bool:
        """Whether ``key`` has its decision: held here, or compacted away (at or below its
        query's floor)."""
        # no floor is no floor: a default of -1 would settle every batch write (batch -1)
        # on arrival, its rows dropped and its record ignored
        floor = self.floor.get(key[0])
        return key in self._runs or (floor is not None and key[1] <= floor)

    def get(self, key: BatchKey) -> Mapping[int, str] | None:
        return self._runs.get(key)

    def counts(self, key: BatchKey) -> Mapping[int, int] | None:
        """partition -> messages of its committed run, when the record said."""
        return self._counts.get(key)

    def _replay_plan(self, entry: dict) -> None:
        plan = tuple((int(c), int(b), int(e)) for c, b, e in entry["plan"])
        self.plans[plan] = {int(c): tuple(int(o) for o in offsets) for c, offsets in entry.get("skip", {}).items()}
        for q, b, p, spans in entry.get("taken", []):
            self.taken.setdefault((str(q), int(b), int(p)), Sequences()).update(
                x for lo, hi in spans for x in range(int(lo), int(hi) + 1)
            )

    def add_plan(self, plan: PlanKey, skip: Mapping[int, Sequence[int]], taken: Mapping[RunKey, Iterable[int]]) -> None:
        """Remember a planned batch's skips and the sequences it delivered (``flush`` writes them)."""
        entry = {
            "plan": [list(t) for t in plan],
            "skip": {str(c): list(o) for c, o in skip.items() if o},
            "taken": [[q, b, p, ranges(seqs)] for (q, b, p), seqs in taken.items() if seqs],
        }
        self._replay_plan(json.loads(json.dumps(entry)))
        self._unwritten_plans.append(json.dumps(entry, separators=(",", ":")) + "\n")

    def as_mapping(self) -> Mapping[BatchKey, Mapping[int, str]]:
        return self._runs

    def add(self, key: BatchKey, runs: Mapping[int, str], counts: Mapping[int, int] | None = None) -> bool:
        if self.settled(key):
            return False
        self._runs[key] = dict(runs)
        if counts is not None:
            self._counts[key] = dict(counts)
        self._unwritten.append(key)
        return True

    def _line(self, key: BatchKey, runs: Mapping[int, str]) -> str:
        entry: dict = {"query": key[0], "batch": key[1], "runs": {str(p): a for p, a in sorted(runs.items())}}
        counts = self._counts.get(key)
        if counts is not None:
            entry["messages"] = {str(p): n for p, n in sorted(counts.items())}
        return json.dumps(entry, separators=(",", ":")) + "\n"

    def flush(self) -> None:
        if not self._unwritten and not self._unwritten_plans:
            return
        if self.path is not None:
            lines = "".join(self._line(k, self._runs[k]) for k in self._unwritten) + "".join(self._unwritten_plans)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self.lines += len(self._unwritten) + len(self._unwritten_plans)
        self._unwritten.clear()
        self._unwritten_plans.clear()

    def worth_compacting(self) -> bool:
        """Cheap test first: the file is big enough that compaction could pay."""
        return self.path is not None and self.lines > self.margin

    def compact(
        self, dead: Iterable[BatchKey], step: Callable[[str], None] | None = None, forget: Iterable[BatchKey] = ()
    ) -> bool:
        """Forget the ``dead`` decisions (none may be unwritten; each raises its query's floor)
        and the ``forget`` ones (no floor: a late message of theirs is undecided again) and
        rewrite the file without them, when its dead lines then exceed the live ones by ``margin``. ``step`` is called
        with each step's name before it is taken (``write``, ``fsync``, ``rename``,
        ``fsync-dir``), for tests that kill the process there. Returns whether it rewrote."""
        dead = [k for k in dead if k in self._runs and k not in self._unwritten]
        forget = [k for k in forget if k in self._runs and k not in self._unwritten and k not in set(dead)]
        live = len(self._runs) - len(dead) - len(forget)
        if self.path is None or not (dead or forget) or self.lines - live <= live + self.margin:
            return False
        floor = dict(self.floor)
        for q, b in dead:
            floor[q] = max(floor.get(q, b), b)
        gone = set(dead) | set(forget)
        taken = {run: seqs for run, seqs in self.taken.items() if (run[0], run[1]) not in gone}
        plans = dict(list(self.plans.items())[-PLANS_KEPT:])
        taken_lines = [
            [q, b, p, ([[0, x.below - 1]] if x.below else []) + ranges(x.others)] for (q, b, p), x in taken.items()
        ]
        kept_plans = [
            json.dumps(
                {
                    "plan": [list(t) for t in plan],
                    "skip": {str(c): list(o) for c, o in skip.items()},
                    "taken": [] if i else taken_lines,
                },
                separators=(",", ":"),
            )
            + "\n"
            for i, (plan, skip) in enumerate(plans.items())
        ]
        if not plans and taken:
            kept_plans = [json.dumps({"plan": [], "skip": {}, "taken": taken_lines}, separators=(",", ":")) + "\n"]
        content = (
            json.dumps({"floor": floor}, separators=(",", ":"))
            + "\n"
            + "".join(self._line(k, runs) for k, runs in self._runs.items() if k not in gone)
            + "".join(kept_plans)
        )
        temp = self.path + ".compact"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            if step:
                step("write")
            os.write(fd, content.encode())
            if step:
                step("fsync")
            os.fsync(fd)
        finally:
            os.close(fd)
        if step:
            step("rename")
        os.replace(temp, self.path)
        if step:
            step("fsync-dir")
        _fsync_dir(self.path)
        for key in gone:
            del self._runs[key]
            self._counts.pop(key, None)
        self.taken, self.plans = taken, plans
        self.floor = floor
        self.lines = live + 1 + len(kept_plans)
        return True
