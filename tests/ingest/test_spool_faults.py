"""The spool under faults: torn files, flipped bits, SIGKILL at every system call, a full
disk, and files planted by someone else. No Spark.

What every test here holds the spool to (its contract): an offset is never given to two
messages, a message that was not released is never deleted, a corrupt or truncated file
is a DataLossError naming the offsets (and a file) or, with ``skip_loss``, skipped, never a
renumbering; recovery never raises on damaged data, never indexes one file twice and
never reuses a segment name; the directory is private and symlinks planted in it are not
followed.

The crash and disk-full writers run in forkserver children (see ``spool_faults``).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass

import pytest
import spool_faults
from spool_faults import batch, check_index, read_dict, runs

from spark_zmq.ingest.loss import DataLossError
from spark_zmq.ingest.spool import Spool, SpoolSecurityError
from spark_zmq.ingest.spool_format import RECORD_HEADER_SIZE, SEGMENT_HEADER_SIZE, encode_record_header
from spark_zmq.ingest.spool_layout import segment_name
from spark_zmq.ingest.spool_reader import read_range, skip_loss

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def fast_dir(tmp_path):
    """A scratch directory on tmpfs when there is one (these tests copy and recover
    thousands of small spools), else pytest's tmp_path."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        path = tempfile.mkdtemp(prefix="spool-faults-", dir="/dev/shm")
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield str(tmp_path)


# -- a small spool to damage ---------------------------------------------------------------------


@dataclass
class Rec:
    segment: str  # file name
    first: int
    end: int
    position: int  # byte position of its header
    stop: int  # byte position after its body


@dataclass
class Built:
    dir: str
    spool_id: str
    messages: dict  # offset -> message
    records: list  # Rec, in offset order
    segments: list  # file names, oldest first
    sizes: dict  # file name -> bytes
    next_offset: int

    def in_segment(self, name: str) -> list:
        return [r for r in self.records if r.segment == name]


def build(root: str, groups=((2, 1, 3), (1, 2, 2))) -> Built:
    """A spool of one channel: one segment per group, one record per count in the group."""
    spool_dir = os.path.join(root, "orig")
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    messages, n = {}, 0
    for g, group in enumerate(groups):
        if g:
            log.roll()
        for count in group:
            values = [b"orig-%03d-" % (n + i) + b"z" * ((n + i) % 5) for i in range(count)]
            for i, v in enumerate(values):
                messages[log.next_offset + i] = v
            log.append(batch(values))
            n += count
    records = []
    for e in log.entries:
        records.append(Rec(e.segment.name, e.first, e.end, e.position, 0))
    for r, nxt in zip(records, records[1:] + [None]):
        r.stop = (
            nxt.position
            if nxt is not None and nxt.segment == r.segment
            else next(s.size for s in log.segments if s.name == r.segment)
        )
    built = Built(
        spool_dir,
        spool.spool_id,
        messages,
        records,
        [s.name for s in log.segments],
        {s.name: s.size for s in log.segments},
        log.next_offset,
    )
    spool.close()
    for name in built.segments:  # the layout the tests damage: header, records back to back
        assert os.path.getsize(seg_path(spool_dir, name)) == built.sizes[name]
        recs = built.in_segment(name)
        assert recs[0].position == SEGMENT_HEADER_SIZE and recs[-1].stop == built.sizes[name]
        assert all(r.stop - r.position > RECORD_HEADER_SIZE for r in recs)
    return built


def seg_path(spool_dir: str, name: str) -> str:
    return os.path.join(spool_dir, "ch-0", name)


def damaged_copy(built: Built, dst: str, name: str, damage) -> str:
    shutil.copytree(built.dir, dst)
    path = seg_path(dst, name)
    damage(path)
    return dst


def truncate_to(length: int):
    return lambda path: os.truncate(path, length)


def flip(position: int, mask: int):
    def damage(path: str) -> None:
        with open(path, "r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ mask]))

    return damage


def loss_offsets(message: str) -> tuple[int, int]:
    match = re.search(r"offsets (\d+)\.\.(\d+)", message)
    assert match, f"a DataLossError that names no offsets: {message}"
    return int(match.group(1)), int(match.group(2))


def check_append_after_recovery(log, spool_dir: str, spool_id: str, readable: dict) -> None:
    """New messages get offsets that no readable old message has, nor any offset recovery
    reported lost (a lost offset was given to a message: reusing it is a renumbering),
    and read back; the old ones still read the same."""
    first = log.next_offset
    assert all(o < first for o in readable), (first, max(readable, default=None))
    assert all(r.end <= first for r in log.lost), f"new offsets from {first} would reuse lost ones: {log.lost}"
    log.append(batch([b"new-0", b"new-1"]))
    assert read_dict(spool_dir, first, first + 2, spool_id) == {first: b"new-0", first + 1: b"new-1"}
    for lo, hi in runs(readable):
        assert read_dict(spool_dir, lo, hi, spool_id) == {o: readable[o] for o in range(lo, hi)}


# -- a. truncation at every byte ------------------------------------------------------------------


@pytest.mark.slow  # a fault matrix: every byte, every system call
@pytest.mark.parametrize("which", ["last", "middle"])
def test_truncation_at_every_byte_loses_only_the_torn_records_and_never_renumbers(fast_dir, which):
    built = build(os.path.join(fast_dir, "b"))
    name = built.segments[-1] if which == "last" else built.segments[0]
    size = built.sizes[name]
    inside = {o for r in built.in_segment(name) for o in range(r.first, r.end)}
    others = {o: v for o, v in built.messages.items() if o not in inside}
    for length in range(size + 1):
        where = f"{which} segment {name} truncated to {length} of {size} bytes"
        spool_dir = damaged_copy(built, os.path.join(fast_dir, f"t{length}"), name, truncate_to(length))
        complete = [r for r in built.in_segment(name) if length >= SEGMENT_HEADER_SIZE and r.stop <= length]
        expected = dict(others)
        for r in complete:
            expected.update({o: built.messages[o] for o in range(r.first, r.end)})
        torn = [o for o in built.messages if o not in expected]
        spool = Spool(spool_dir, 1)  # recovery never raises
        try:
            log = spool.channels[0]
            check_index(log, spool_dir)
            indexed = {o for e in log.entries for o in range(e.first, e.end)}
            assert indexed == set(expected), f"{where}: index holds {sorted(indexed)}, expected {sorted(expected)}"
            got = read_dict(spool_dir, 0, built.next_offset, built.spool_id, on_loss=skip_loss)
            assert got == expected, where
            complete_end = max([r.end for r in complete] + [min(r.first for r in built.in_segment(name))])
            assert log.next_offset >= complete_end, where
            assert log.next_offset >= max(expected) + 1, where
            if which == "middle":
                assert log.next_offset == built.next_offset, where  # the newer segment carries it
            if torn:
                lo, hi = min(torn), max(torn) + 1
                with pytest.raises(DataLossError) as error:
                    list(read_range(spool_dir, 0, 0, built.next_offset, spool_id=built.spool_id))
                first, _ = loss_offsets(str(error.value))
                assert first == lo, (where, str(error.value))
                if which == "middle":
                    # the gap shows at the next segment: the error names a segment file
                    assert ".seg" in str(error.value) and "ch-0" in str(error.value), (where, str(error.value))
                    assert loss_offsets(str(error.value)) == (lo, hi), (where, str(error.value))
            else:
                assert list(read_range(spool_dir, 0, 0, built.next_offset, spool_id=built.spool_id))
            check_append_after_recovery(log, spool_dir, built.spool_id, expected)
            new_end = log.next_offset
        finally:
            spool.close()
        # and a second recovery, now that a newer segment follows the torn one
        spool = Spool(spool_dir, 1)
        try:
            log = spool.channels[0]
            check_index(log, spool_dir)
            assert log.next_offset == new_end, where
            got = read_dict(spool_dir, 0, new_end, built.spool_id, on_loss=skip_loss)
            assert {o: v for o, v in got.items() if o < new_end - 2} == expected, where
        finally:
            spool.close()
        shutil.rmtree(spool_dir)


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_loss_at_the_tail_of_an_older_segment_names_that_segment(fast_dir, damage):
    built = build(os.path.join(fast_dir, "b"))
    name = built.segments[0]
    last = built.in_segment(name)[-1]
    how = truncate_to(last.stop - 7) if damage == "truncated" else flip(last.position + 20, 1)
    spool_dir = damaged_copy(built, os.path.join(fast_dir, "t"), name, how)
    spool = Spool(spool_dir, 1)
    try:
        for lo, hi in [(0, built.next_offset), (last.first, last.end)]:
            with pytest.raises(DataLossError) as error:
                list(read_range(spool_dir, 0, lo, hi, spool_id=built.spool_id))
            assert loss_offsets(str(error.value)) == (last.first, last.end), str(error.value)
            assert name in str(error.value), f"reading {lo}..{hi}: {error.value}"
        lost = spool.channels[0].lost
        assert [(r.first, r.end, os.path.basename(r.path)) for r in lost] == [(last.first, last.end, name)], lost
    finally:
        spool.close()


# -- b. corrupt bytes -------------------------------------------------------------------------------


def _corrupt_positions(built: Built, name: str, stride: int) -> list[int]:
    """Every byte of every header, a stride of the bodies."""
    positions = set(range(SEGMENT_HEADER_SIZE))
    for r in built.in_segment(name):
        positions.update(range(r.position, r.position + RECORD_HEADER_SIZE))
        positions.update(range(r.position + RECORD_HEADER_SIZE, r.stop, stride))
    return sorted(p for p in positions if p < built.sizes[name])


@pytest.mark.slow  # a fault matrix: every byte, every system call
@pytest.mark.parametrize("which", ["last", "middle"])
def test_a_flipped_bit_anywhere_is_a_loss_never_another_message(fast_dir, which):
    built = build(os.path.join(fast_dir, "b"))
    name = built.segments[-1] if which == "last" else built.segments[0]
    outcomes = {"no effect": 0, "in .lost": 0, "error on read": 0, "beyond next_offset": 0, "error names no file": 0}
    for position in _corrupt_positions(built, name, stride=1):
        mask = 1 << (position % 8)
        where = f"{which} segment {name}, bit {mask:#04x} of byte {position} flipped"
        spool_dir = damaged_copy(built, os.path.join(fast_dir, f"c{position}"), name, flip(position, mask))
        spool = Spool(spool_dir, 1)  # recovery never raises
        try:
            log = spool.channels[0]
            check_index(log, spool_dir)
            top = max(log.next_offset, built.next_offset)
            got = read_dict(spool_dir, 0, top, built.spool_id, on_loss=skip_loss)
            for offset, value in got.items():
                assert built.messages.get(offset) == value, f"{where}: offset {offset} reads {value!r}"
            indexed = {o for e in log.entries for o in range(e.first, e.end)}
            assert indexed == set(got), f"{where}: the index and the reader disagree"
            for lost in log.lost:
                assert lost.path == seg_path(spool_dir, name), (where, lost)
                assert all(built.messages.get(o) is not None for o in range(lost.first, lost.end)), (where, lost)
            missing = [o for o in built.messages if o not in got]
            if not missing:
                outcomes["no effect"] += 1
            for lo, hi in runs(missing):
                if all(any(r.first <= o < r.end for r in log.lost) for o in range(lo, hi)):
                    outcomes["in .lost"] += 1
                    continue
                with pytest.raises(DataLossError) as error:
                    list(read_range(spool_dir, 0, lo, hi, spool_id=built.spool_id))
                message = str(error.value)
                assert loss_offsets(message)[0] == lo, (where, message)
                if lo >= log.next_offset:
                    # the damaged record was the newest one: recovery took it for a torn tail
                    # (a write a crash cut short), so its offsets are no longer the spool's
                    outcomes["beyond next_offset"] += 1
                elif ".seg" in message:
                    outcomes["error on read"] += 1
                else:
                    outcomes["error names no file"] += 1
            check_append_after_recovery(log, spool_dir, built.spool_id, got)
        finally:
            spool.close()
        shutil.rmtree(spool_dir)
    # recovery found the damage (it lists the offsets as lost), and no error ever failed to name its file
    assert outcomes["in .lost"] and not outcomes["error names no file"], outcomes


def test_recovery_keeps_and_reports_a_segment_whose_record_header_is_corrupt(fast_dir):
    built = build(os.path.join(fast_dir, "b"), groups=((3,), (1,)))
    name = built.segments[0]
    spool_dir = damaged_copy(built, os.path.join(fast_dir, "c"), name, flip(SEGMENT_HEADER_SIZE + 12, 1))
    spool = Spool(spool_dir, 1)
    try:
        log = spool.channels[0]
        assert os.path.exists(seg_path(spool_dir, name)), f"recovery deleted {name}, which held offsets 0..3"
        assert [(r.first, r.end, os.path.basename(r.path)) for r in log.lost] == [(0, 3, name)], log.lost
    finally:
        spool.close()


def test_a_message_that_embeds_a_record_header_cannot_replace_other_offsets(fast_dir):
    evil = batch([b"FORGED"]).serialize()
    forged = encode_record_header(1, 1, evil) + evil.to_pybytes()  # claims offset 1
    spool_dir = os.path.join(fast_dir, "s")
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    log.append(batch([forged]))  # offset 0: a peer sent bytes that look like a record
    log.append(batch([b"real-1"]))
    log.append(batch([b"real-2"]))
    path = log.segments[-1].path
    spool_id = spool.spool_id
    spool.close()
    flip(SEGMENT_HEADER_SIZE + 20, 1)(path)  # one bit of offset 0's record header
    spool = Spool(spool_dir, 1)
    try:
        got = read_dict(spool_dir, 0, 3, spool_id, on_loss=skip_loss)
        assert got.get(1, b"real-1") == b"real-1", f"offset 1 reads {got.get(1)!r}"
        assert 0 not in got or got[0] == forged
    finally:
        spool.close()


# -- c. SIGKILL at every system call ----------------------------------------------------------------


@pytest.mark.slow  # a fault matrix: every byte, every system call
@pytest.mark.parametrize("mode", ["before", "half"])
def test_sigkill_at_every_system_call_loses_nothing_published(fast_dir, mode):
    """The writer's script is killed before its k-th system call (``before``) or halfway
    through it (``half``: half of the bytes of a write reach the file), for every k until
    the script completes; after each, recovery must give back everything published and
    not released, unrenumbered, and continue numbering after it."""
    rows = spool_faults.crash_matrix(fast_dir, modes=(mode,))
    steps = [step for _, _, step, _ in rows]
    assert rows[-1][2] == "(script completed)"
    for call in ("open(", "writev(", "write(", "fsync(", "remove(", "replace(", "ftruncate(", "mkdir("):
        assert any(s.startswith(call) for s in steps), f"no crash at a {call}...) step: {steps}"
    # (print the matrix with: python tests/helpers/spool_faults.py)
    assert all(result.startswith("ok") for *_, result in rows)


# -- d. disk full ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [4096, 64 + 300])
def test_a_full_disk_fails_the_append_publishes_nothing_and_recovers(fast_dir, limit):
    spool_dir = os.path.join(fast_dir, "spool")
    report_path = os.path.join(fast_dir, "report")
    ctx = spool_faults.forkserver_context()
    code = spool_faults.run_child(ctx, spool_faults.disk_full_child, (spool_dir, limit, report_path))
    lines = open(report_path).read().splitlines()
    assert code == 0, "the disk-full writer failed: " + "\n".join(lines[-5:])
    assert lines[-1] == "DONE 0"
    failures = [line for line in lines if line.startswith("F ")]
    assert len(failures) == 2, lines
    report = spool_faults.parse_report(report_path)
    assert report.published
    spool = Spool(spool_dir, 1)
    try:
        log = spool.channels[0]
        check_index(log, spool_dir)
        assert log.lost == []
        assert log.next_offset == max(report.published) + 1
        # every published message, no gap (the failed appends left no offsets behind)
        assert sorted(report.published) == list(range(len(report.published)))
        assert read_dict(spool_dir, 0, log.next_offset, spool.spool_id) == report.published
        check_append_after_recovery(log, spool_dir, spool.spool_id, report.published)
    finally:
        spool.close()


# -- e. permissions and planted symlinks ---------------------------------------------------------------


def _modes(spool_dir: str) -> dict:
    out = {}
    for root, _dirs, files in os.walk(spool_dir):
        out[root] = stat.S_IMODE(os.lstat(root).st_mode)
        for f in files:
            out[os.path.join(root, f)] = stat.S_IMODE(os.lstat(os.path.join(root, f)).st_mode)
    return out


def test_directories_are_0700_and_files_0600_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        spool_dir = str(tmp_path / "a" / "spool")
        spool = Spool(spool_dir, 2)
        spool.channels[0].append(batch([b"x"]))
        spool.channels[0].roll()
        spool.channels[0].append(batch([b"y"]))
        spool.channels[1].advance_to(5)
        spool.close()
        spool = Spool(spool_dir, 2)  # and after a recovery
        spool.channels[1].append(batch([b"z"]))
        spool.close()
    finally:
        os.umask(old)
    modes = _modes(spool_dir)
    assert {p for p in modes if p.endswith(".seg")}, modes
    for path, mode in modes.items():
        expected = 0o700 if os.path.isdir(path) else 0o600
        assert mode == expected, f"{path} has mode {mode:o}, not {expected:o}"
    assert stat.S_IMODE(os.stat(tmp_path / "a").st_mode) == 0o700  # a parent it had to create


def test_an_existing_spool_directory_open_to_others_is_made_private(tmp_path):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o755)
    (spool_dir / "ch-0").mkdir(mode=0o755)
    os.chmod(spool_dir, 0o755)
    os.chmod(spool_dir / "ch-0", 0o777)
    Spool(str(spool_dir), 1).close()
    assert stat.S_IMODE(os.stat(spool_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(spool_dir / "ch-0").st_mode) == 0o700


@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlink_in_place_of_the_spool_directory_is_refused(tmp_path, dangling):
    target = tmp_path / "elsewhere"
    if not dangling:
        target.mkdir(mode=0o700)
    link = tmp_path / "spool"
    os.symlink(target, link)
    with pytest.raises(SpoolSecurityError, match="symbolic link"):
        Spool(str(link), 1)
    if dangling:
        assert not os.path.lexists(target), "the spool created the symlink's target"
    else:
        assert os.listdir(target) == [], "the spool wrote through the symlink"


def test_a_symlink_in_place_of_a_channel_directory_is_refused(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    os.symlink(target, spool_dir / "ch-0")
    with pytest.raises(SpoolSecurityError, match="symbolic link"):
        Spool(str(spool_dir), 1)
    assert os.listdir(target) == []


# the file names as they are on disk, on purpose (spool_layout spells them for the code)
@pytest.mark.parametrize("name", ["LOCK", "SPOOL_ID", "OWNER"])
def test_a_symlink_planted_at_a_spool_file_is_not_followed(tmp_path, name):
    """LOCK is opened with O_NOFOLLOW: a planted link makes Spool() raise SpoolSecurityError
    naming the path. SPOOL_ID/OWNER are written to a temporary file and renamed over the
    link (so the link is replaced, its target untouched)."""
    target = tmp_path / "precious"
    target.write_bytes(b"precious data")
    os.chmod(target, 0o644)
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    os.symlink(target, spool_dir / name)
    if name == "LOCK":
        with pytest.raises(SpoolSecurityError) as error:
            Spool(str(spool_dir), 1)
        assert "LOCK" in str(error.value) and "symbolic link" in str(error.value), error.value
    else:
        spool = Spool(str(spool_dir), 1)
        spool.channels[0].append(batch([b"m"]))
        spool.close()
        assert not os.path.islink(spool_dir / name)
    assert target.read_bytes() == b"precious data"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644


def test_a_symlink_planted_at_a_temporary_file_name_is_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"precious data")
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir(mode=0o700)
    os.symlink(target, spool_dir / f".OWNER.{os.getpid()}.tmp")
    os.symlink(target, spool_dir / f".SPOOL_ID.{os.getpid()}.tmp")
    Spool(str(spool_dir), 1).close()
    assert target.read_bytes() == b"precious data"


def test_a_symlink_planted_at_the_next_segment_name_is_not_followed(tmp_path):
    """The next segment's name is predictable (<next offset>-<next seq>.seg). Creating it
    uses O_CREAT|O_EXCL, so the link is never followed: the roll that would create it raises
    FileExistsError, nothing is published, and the next append uses the following seq.
    The planted link then makes reads that reach it, and the next recovery, raise
    OSError(ELOOP) naming it (the spool does not open until it is removed)."""
    target = tmp_path / "precious"
    target.write_bytes(b"precious data")
    spool_dir = str(tmp_path / "spool")
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    log.append(batch([b"m-0"]))
    planted = os.path.join(spool_dir, "ch-0", segment_name(log.next_offset, 1))
    os.symlink(target, planted)
    try:
        log.roll()
    except FileExistsError as exc:
        assert exc.filename == planted
    assert log.next_offset == 1
    log.append(batch([b"m-1"]))
    assert log.next_offset == 2
    assert all(not os.path.islink(s.path) for s in log.segments), [s.name for s in log.segments]
    assert target.read_bytes() == b"precious data"
    with pytest.raises(OSError) as error:
        list(read_range(spool_dir, 0, 0, 2, spool_id=spool.spool_id))
    assert error.value.errno == errno.ELOOP
    spool.close()
    with pytest.raises(OSError) as error:
        Spool(spool_dir, 1)
    assert error.value.errno == errno.ELOOP and os.path.basename(planted) in str(error.value)
    assert target.read_bytes() == b"precious data"
    os.remove(planted)  # removing the link is all it takes
    spool = Spool(spool_dir, 1)
    try:
        assert read_dict(spool_dir, 0, 2, spool.spool_id) == {0: b"m-0", 1: b"m-1"}
    finally:
        spool.close()


def test_a_symlink_planted_at_the_segment_name_after_a_restart_is_not_followed(tmp_path):
    target = tmp_path / "precious"
    target.write_bytes(b"precious data")
    spool_dir = str(tmp_path / "spool")
    spool = Spool(spool_dir, 1)
    spool.channels[0].append(batch([b"m-0"]))
    spool.close()
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    planted = os.path.join(spool_dir, "ch-0", segment_name(1, 1))  # what the first append creates
    os.symlink(target, planted)
    with pytest.raises(FileExistsError):
        log.append(batch([b"lost?"]))
    assert log.next_offset == 1  # nothing published
    log.append(batch([b"m-1"]))
    assert log.next_offset == 2
    os.remove(planted)
    assert read_dict(spool_dir, 0, 2, spool.spool_id) == {0: b"m-0", 1: b"m-1"}
    spool.close()
    assert target.read_bytes() == b"precious data"


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_spool_under_a_directory_others_may_write_is_refused(tmp_path, mode):
    """Whoever may write a directory above the spool can rename the spool aside and plant a
    symbolic link to a directory of theirs in its place after the spool's own checks: the
    spool refuses such a place, naming the directory and its mode, and creates nothing."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    with pytest.raises(SpoolSecurityError, match=rf"others may write \(mode 0{mode:o}"):
        Spool(str(shared / "spool"), 1)
    assert os.listdir(shared) == []


def test_a_spool_under_a_sticky_shared_directory_is_accepted(tmp_path):
    """The sticky bit (as on /tmp) keeps other users from renaming what is ours."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    Spool(str(shared / "spool"), 1).close()


def test_a_spool_under_another_users_directory_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 54321, 54321)
    with pytest.raises(SpoolSecurityError, match="belongs to uid 54321"):
        Spool(str(theirs / "spool"), 1)
