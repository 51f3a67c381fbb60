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

The rewrite is crash-safe: the new content goes to ``<file>.compact``, synced, renamed over
the file (atomic), and the directory synced. A process killed at any step leaves either
the old file (every decision, the old floor) or the new one (the live decisions, the new
floor), each a correct answer for every batch Spark can still run; a leftover
``.compact`` file is removed on the next load.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Iterable, Iterator, Mapping, Optional

__all__ = ["BatchKey", "Decisions", "COMPACT_MARGIN"]

#: (query_id, batch_id): what a commit record decides
BatchKey = tuple[str, int]

#: ``compact`` rewrites the file once its dead lines exceed the live ones by this many
COMPACT_MARGIN = 1024


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

    def __init__(self, path: Optional[str] = None, margin: int = COMPACT_MARGIN) -> None:
        self.path = path
        self.margin = margin
        self._runs: dict[BatchKey, dict[int, str]] = {}
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
            key = (str(entry["query"]), int(entry["batch"]))
            self._runs.setdefault(key, {int(p): str(a) for p, a in entry["runs"].items()})
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

    def get(self, key: BatchKey) -> Optional[Mapping[int, str]]:
        return self._runs.get(key)

    def as_mapping(self) -> Mapping[BatchKey, Mapping[int, str]]:
        return self._runs

    def add(self, key: BatchKey, runs: Mapping[int, str]) -> bool:
        if self.settled(key):
            return False
        self._runs[key] = dict(runs)
        self._unwritten.append(key)
        return True

    @staticmethod
    def _line(key: BatchKey, runs: Mapping[int, str]) -> str:
        return json.dumps({"query": key[0], "batch": key[1], "runs": {str(p): a for p, a in sorted(runs.items())}},
                          separators=(",", ":")) + "\n"

    def flush(self) -> None:
        if not self._unwritten:
            return
        if self.path is not None:
            lines = "".join(self._line(k, self._runs[k]) for k in self._unwritten)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, lines.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            self.lines += len(self._unwritten)
        self._unwritten.clear()

    def worth_compacting(self) -> bool:
        """Cheap test first: the file is big enough that compaction could pay."""
        return self.path is not None and self.lines > self.margin

    def compact(self, dead: Iterable[BatchKey], step: Optional[Callable[[str], None]] = None) -> bool:
        """Forget the ``dead`` decisions (none may be unwritten) and rewrite the file without
        them, when its dead lines then exceed the live ones by ``margin``. ``step`` is called
        with each step's name before it is taken (``write``, ``fsync``, ``rename``,
        ``fsync-dir``), for tests that kill the process there. Returns whether it rewrote."""
        dead = [k for k in dead if k in self._runs and k not in self._unwritten]
        live = len(self._runs) - len(dead)
        if self.path is None or not dead or self.lines - live <= live + self.margin:
            return False
        floor = dict(self.floor)
        for q, b in dead:
            floor[q] = max(floor.get(q, b), b)
        gone = set(dead)
        content = json.dumps({"floor": floor}, separators=(",", ":")) + "\n" + "".join(
            self._line(k, runs) for k, runs in self._runs.items() if k not in gone)
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
        self.floor = floor
        self.lines = live + 1
        return True
