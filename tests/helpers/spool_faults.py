"""Helpers for the spool's fault-injection tests (test_spool_faults.py).

The crash and disk-full writers run in child processes started by a multiprocessing
"forkserver" (preloaded with pyarrow and the spool, so a child starts in milliseconds). A
child patches the ``os`` functions the spool calls *in its own process only*, counts them,
and kills itself with SIGKILL at step ``k``. It reports what it did to a file, through the
unpatched ``os.write``, one line per event, written before (intent) and after (publish)
every spool operation, so the parent knows what was published when the child died:

    A <first> <hex msg> ...   an append of these messages at <first> is about to start
    P <first> <count>         that append returned: its offsets are published
    RS <x> / RD <x>           release_before(x) started / returned
    V <x>                     advance_to(x) returned
    C <name>                  a segment file was created (os.open with O_CREAT returned)
    K <k> <mode> <call>       killed at step k (the step's system call, described)
    DONE <steps>              the script completed after <steps> counted system calls

``python tests/helpers/spool_faults.py`` prints the crash matrix (every k, both modes).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.spool_layout import channel_dir, list_segments, parse_segment_name
from spark_zmq.ingest.spool_reader import read_range

#: the os functions the spool's durability depends on; a crash can happen before any of them
PATCHED = ("open", "write", "writev", "pwrite", "fsync", "ftruncate", "remove", "unlink", "replace", "mkdir")
#: the ones a crash can interrupt halfway (part of the bytes written)
WRITES = ("write", "writev", "pwrite")


def batch(values: list[bytes]) -> pa.RecordBatch:
    return messages_to_batch(values, None, "raw", 0)


def values_of(pairs) -> list[tuple[int, bytes]]:
    """``(offset, message)`` of every message read_range yielded."""
    out = []
    for first, b in pairs:
        for i, v in enumerate(b.column(0).to_pylist()):
            out.append((first + i, v))
    return out


def read_dict(spool_dir: str, start: int, end: int, spool_id: str | None = None, on_loss=None, hint=None) -> dict:
    kwargs = {"spool_id": spool_id}
    if on_loss is not None:
        kwargs["on_loss"] = on_loss
    got = values_of(read_range(spool_dir, 0, start, end, hint, **kwargs))
    offsets = [o for o, _ in got]
    assert offsets == sorted(set(offsets)), f"read_range yielded offsets out of order or twice: {offsets}"
    return dict(got)


def segment_names(spool_dir: str, channel: int = 0) -> list[str]:
    return [name for _, _, name in list_segments(channel_dir(spool_dir, channel))]


def check_index(log, spool_dir: str) -> None:
    """One index entry per file, files and index agree, entries ordered and disjoint."""
    names = [s.name for s in log.segments]
    paths = [s.path for s in log.segments]
    assert len(set(paths)) == len(paths), f"a file has two index entries: {names}"
    assert sorted(names) == segment_names(spool_dir, log.channel), (names, segment_names(spool_dir, log.channel))
    keys = [(s.first, s.seq) for s in log.segments]
    assert keys == sorted(keys) and len({s.seq for s in log.segments}) == len(keys), keys
    for a, b in zip(log.segments, log.segments[1:]):
        assert a.end <= b.first, f"segments {a.name} [{a.first},{a.end}) and {b.name} overlap"
    seg_ids = {id(s) for s in log.segments}
    previous_end = None
    for e in log.entries:
        assert id(e.segment) in seg_ids, f"entry [{e.first},{e.end}) names a segment not in the index"
        assert e.segment.first <= e.first and e.end <= e.segment.end, (e.first, e.end, e.segment)
        assert previous_end is None or e.first >= previous_end, "index entries overlap"
        previous_end = e.end
    assert log._firsts == [e.first for e in log.entries]


# -- the crash writer ----------------------------------------------------------------------------


class _Killer:
    """Counts the patched system calls of this process; SIGKILLs itself at step ``k``."""

    def __init__(self, k: int, mode: str, report_fd: int) -> None:
        self.k, self.mode, self.report_fd, self.count = k, mode, report_fd, 0
        self.real = {name: getattr(os, name) for name in PATCHED}

    def say(self, line: str) -> None:
        self.real["write"](self.report_fd, (line + "\n").encode())

    def install(self) -> None:
        for name in PATCHED:
            setattr(os, name, self._wrap(name))

    def uninstall(self) -> None:
        for name, fn in self.real.items():
            setattr(os, name, fn)

    def _wrap(self, name: str) -> Callable:
        real = self.real[name]

        def wrapper(*args, **kwargs):
            step = self.count
            self.count += 1
            if step == self.k:
                self._die(name, args)
            result = real(*args, **kwargs)
            if name == "open" and len(args) > 1 and args[1] & os.O_CREAT and str(args[0]).endswith(".seg"):
                self.say(f"C {os.path.basename(str(args[0]))}")
            return result

        return wrapper

    def _die(self, name: str, args: tuple) -> None:
        self.say(f"K {self.k} {self.mode} {describe(name, args)}")
        if self.mode == "half" and name in WRITES:
            if name == "writev":
                data = b"".join(bytes(b) for b in args[1])
            else:
                data = bytes(args[1])
            part = data[: len(data) // 2]
            if name == "pwrite":
                self.real["pwrite"](args[0], part, args[2])
            else:
                self.real["write"](args[0], part)
        os.kill(os.getpid(), signal.SIGKILL)


def describe(name: str, args: tuple) -> str:
    """A short text for the system call a crash interrupts (for the matrix)."""

    def fd_name(fd: int) -> str:
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{fd}")) or "/"
        except OSError:
            return f"fd{fd}"

    def base(path) -> str:
        return os.path.basename(os.fsdecode(path))

    if name == "open":
        flags = args[1] if len(args) > 1 else 0
        kinds = [f for f in ("O_CREAT", "O_EXCL", "O_DIRECTORY") if flags & getattr(os, f)]
        return f"open({base(args[0])}{', ' + '|'.join(kinds) if kinds else ''})"
    if name in ("write", "pwrite"):
        return f"{name}({fd_name(args[0])}, {len(memoryview(args[1]))}B)"
    if name == "writev":
        return f"writev({fd_name(args[0])}, {sum(len(memoryview(b)) for b in args[1])}B)"
    if name in ("fsync", "ftruncate"):
        return f"{name}({fd_name(args[0])}{', %d' % args[1] if name == 'ftruncate' else ''})"
    if name == "replace":
        return f"replace({base(args[0])} -> {base(args[1])})"
    return f"{name}({base(args[0])})"


class _Script:
    """The writer's fixed script: what it publishes goes to the report."""

    def __init__(self, spool_dir: str, say: Callable[[str], None]) -> None:
        self.dir, self.say, self.n = spool_dir, say, 0
        self.spool: Spool | None = None

    def open(self) -> None:
        self.spool = Spool(self.dir, 1, fsync=True)

    @property
    def log(self):
        return self.spool.channels[0]

    def append(self, count: int) -> None:
        values = [b"w-%d" % (self.n + i) for i in range(count)]
        self.n += count
        first = self.log.next_offset
        self.say("A %d %s" % (first, " ".join(v.hex() for v in values)))
        self.log.append(batch(values))
        assert self.log.next_offset == first + count
        self.say(f"P {first} {count}")

    def release_before(self, offset: int) -> None:
        self.say(f"RS {offset}")
        self.log.release_before(offset)
        self.say(f"RD {offset}")

    def advance_to(self, offset: int) -> None:
        self.log.advance_to(offset)
        self.say(f"V {offset}")

    def run(self) -> None:
        self.open()
        self.append(2)
        self.append(1)
        self.log.roll()
        self.append(3)
        self.release_before(3)  # deletes the first segment ([0, 3))
        self.append(1)
        self.spool.close()
        self.open()  # recovery
        self.append(2)
        self.advance_to(self.log.next_offset + 5)  # a checkpoint ahead of the spool
        self.append(2)
        self.log.roll()
        self.append(1)
        self.release_before(self.log.next_offset - 1)
        self.advance_to(self.log.next_offset + 3)  # an empty newest segment carries this
        self.spool.close()
        self.open()
        self.log.roll()  # nothing to roll: no segment is open yet
        self.append(1)
        self.log.roll()  # an empty newest segment again, and a stop
        self.spool.close()
        self.open()
        self.append(1)
        self.spool.close()


def crash_child(spool_dir: str, k: int, mode: str, report_path: str) -> None:
    """Run the script in this (child) process, SIGKILLed at counted system call ``k``."""
    fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    killer = _Killer(k, mode, fd)
    killer.install()
    try:
        _Script(spool_dir, killer.say).run()
    finally:
        killer.uninstall()
    killer.say(f"DONE {killer.count}")
    os.close(fd)


@dataclass
class Report:
    intended: dict = field(default_factory=dict)  # offset -> message an append tried to write
    published: dict = field(default_factory=dict)  # offset -> message whose append returned
    release_started: int = 0
    release_done: int = 0
    advanced: int = 0
    created: list = field(default_factory=list)
    killed: str | None = None
    done: int | None = None

    @property
    def published_end(self) -> int:
        return max([o + 1 for o in self.published] + [self.advanced, 0])


def parse_report(path: str) -> Report:
    report = Report()
    pending: dict[int, list[bytes]] = {}
    with open(path) as f:
        for line in f:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind == "A":
                first, *hexes = rest.split(" ")
                values = [bytes.fromhex(h) for h in hexes]
                pending[int(first)] = values
                for i, v in enumerate(values):
                    report.intended[int(first) + i] = v
            elif kind == "P":
                first, count = map(int, rest.split())
                values = pending.pop(first)
                assert len(values) == count
                for i, v in enumerate(values):
                    report.published[first + i] = v
            elif kind == "RS":
                report.release_started = max(report.release_started, int(rest))
            elif kind == "RD":
                report.release_done = max(report.release_done, int(rest))
            elif kind == "V":
                report.advanced = max(report.advanced, int(rest))
            elif kind == "C":
                report.created.append(rest)
            elif kind == "K":
                report.killed = rest
            elif kind == "DONE":
                report.done = int(rest)
    return report


def runs(offsets) -> list[tuple[int, int]]:
    """Maximal runs ``[lo, hi)`` of consecutive offsets."""
    out: list[list[int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1][1] = o + 1
        else:
            out.append([o, o + 1])
    return [(a, b) for a, b in out]


def check_after_crash(spool_dir: str, report: Report) -> str:
    """Recover the spool the child left and check the contract; returns a short summary."""
    left = segment_names(spool_dir)
    spool = Spool(spool_dir, 1)  # recovery: must not raise
    recovered = spool.channels[0].next_offset
    spool.close()
    # the newest segment carries the numbering: recovery never deletes it, and a second
    # recovery (no write in between) numbers from the same offset
    if left:
        assert max(left, key=lambda n: parse_segment_name(n)[1]) in segment_names(spool_dir), "newest segment deleted"
    spool = Spool(spool_dir, 1)
    try:
        assert spool.channels[0].next_offset == recovered, (spool.channels[0].next_offset, recovered)
        log = spool.channels[0]
        check_index(log, spool_dir)
        assert log.lost == [], f"a SIGKILL lost data mid-file: {log.lost}"
        # Nothing published is renumbered, nothing readable is a message never written there.
        for e in log.entries:
            got = read_dict(spool_dir, e.first, e.end, spool.spool_id)
            for offset, value in got.items():
                assert report.intended.get(offset) == value, (
                    f"offset {offset} reads {value!r}, but the writer wrote {report.intended.get(offset)!r} there"
                )
        # Every offset published and not released is readable, with its message.
        held = {o: v for o, v in report.published.items() if o >= report.release_started}
        for lo, hi in runs(held):
            got = read_dict(spool_dir, lo, hi, spool.spool_id, hint=log.locate(lo))
            assert got == {o: held[o] for o in range(lo, hi)}, (lo, hi, got)
        # Numbering continues at or after everything published (and every advance_to).
        before = log.next_offset
        assert before >= report.published_end, (before, report.published_end)
        readable_end = max((e.end for e in log.entries), default=0)
        assert before >= readable_end
        log.append(batch([b"after-crash"]))
        assert log.next_offset == before + 1
        new = log.segments[-1]
        created_seqs = [parse_segment_name(n)[1] for n in report.created]
        assert new.name not in report.created, f"segment name {new.name} reused"
        assert new.seq > max(created_seqs, default=-1), (new.name, report.created)
        assert read_dict(spool_dir, before, before + 1, spool.spool_id) == {before: b"after-crash"}
        check_index(log, spool_dir)
    finally:
        spool.close()
    # A second recovery (of the recovered spool) keeps it all too.
    spool = Spool(spool_dir, 1)
    try:
        log = spool.channels[0]
        check_index(log, spool_dir)
        assert log.next_offset == before + 1
        assert read_dict(spool_dir, before, before + 1, spool.spool_id) == {before: b"after-crash"}
    finally:
        spool.close()
    return f"ok: published {len(report.published)}, recovered next {before}, lost none"


def forkserver_context():
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    # pandas too: building a spool batch (its timestamp column) imports it, 0.3 s a child
    ctx.set_forkserver_preload(
        ["pyarrow", "numpy", "pandas", "spark_zmq.ingest.spool", "spark_zmq.ingest.receiver", "spool_faults"]
    )
    return ctx


def run_child(ctx, target, args, timeout: float = 30.0) -> int:
    process = ctx.Process(target=target, args=args)
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        raise AssertionError(f"child {target.__name__}{args} hung")
    return process.exitcode


def crash_matrix(base: str, ctx=None, modes=("before", "half"), max_steps: int = 400) -> list[tuple]:
    """Run the script killed at every step, in every mode; ``(mode, k, step, result)`` rows."""
    ctx = ctx or forkserver_context()
    rows = []
    for mode in modes:
        for k in range(max_steps):
            spool_dir = os.path.join(base, f"{mode}-{k}", "spool")
            report_path = os.path.join(base, f"{mode}-{k}.report")
            os.makedirs(os.path.dirname(spool_dir))
            code = run_child(ctx, crash_child, (spool_dir, k, mode, report_path))
            if not os.path.exists(report_path):
                raise AssertionError(f"the crash writer (step {k}, {mode}) did not start: exit code {code}")
            report = parse_report(report_path)
            if report.done is not None:
                assert code == 0, code
                rows.append((mode, k, "(script completed)", check_after_crash(spool_dir, report)))
                shutil.rmtree(os.path.dirname(spool_dir))
                break
            assert code == -signal.SIGKILL, f"child at step {k} ({mode}) exited with {code}, not SIGKILL"
            step = report.killed.split(" ", 2)[2]
            try:
                result = check_after_crash(spool_dir, report)
            except BaseException as exc:
                raise AssertionError(f"after SIGKILL at step {k} ({mode}: {step}): {exc}") from exc
            rows.append((mode, k, step, result))
            shutil.rmtree(os.path.dirname(spool_dir))
        else:
            raise AssertionError(f"the script did not complete within {max_steps} steps")
    return rows


# -- the disk-full writer -----------------------------------------------------------------------


def disk_full_child(spool_dir: str, limit: int, report_path: str) -> None:
    """Append under RLIMIT_FSIZE=limit until an append fails; check it published nothing;
    raise the limit; append again. Published appends go to the report (A/P lines)."""
    fd = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def say(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    try:
        _disk_full(spool_dir, limit, say)
    except BaseException as exc:
        import traceback

        say("ERR " + " | ".join(traceback.format_exception(exc)[-3:]).replace("\n", " "))
        raise
    say("DONE 0")
    os.close(fd)


def _disk_full(spool_dir: str, limit: int, say) -> None:
    import errno
    import resource

    script = _Script(spool_dir, say)
    script.open()
    log = script.log
    script.append(3)  # a segment exists before the disk fills
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    failures = 0
    for _ in range(10_000):
        before, entries = log.next_offset, len(log.entries)
        try:
            script.append(5)
        except OSError as exc:
            assert exc.errno in (errno.EFBIG, errno.ENOSPC), exc
            assert log.next_offset == before, "a failed append published offsets"
            assert len(log.entries) == entries, "a failed append added an index entry"
            assert log.locate(before) is None
            # the partial record was cut off: the file the append wrote to (a new segment, or
            # the open one) ends where its last published record does
            segment = log.segments[-1]
            on_disk = os.stat(segment.path).st_size
            assert on_disk == segment.size, (segment.name, on_disk, segment.size)
            assert segment.end == before
            say(f"F {before} {exc.errno}")
            failures += 1
            if failures == 1:
                # a second attempt at the same limit: a new segment, which has room again
                continue
            break
    else:
        raise AssertionError("the file size limit never failed an append")
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    script.append(4)  # works again
    script.append(2)
    script.spool.close()


if __name__ == "__main__":  # print the crash matrix
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import spool_faults  # the importable copy, which the forkserver's children run

    base = tempfile.mkdtemp(prefix="spool-crash-")
    try:
        for mode, k, step, result in spool_faults.crash_matrix(base):
            print(f"{mode:6} k={k:3d}  {step:55} {result}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
