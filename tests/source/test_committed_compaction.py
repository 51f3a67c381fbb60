"""committedOnly's decisions file is compacted, without Spark: the decisions of writing
batches no read can need any more leave ``committed-runs-<spool id>.jsonl``, what is left
answers every batch Spark can still run as before, and a process killed at any step of the
rewrite leaves a file that does. (The property test in ``test_committed_only.py`` runs
the same compaction against every arrival order and restart.)"""

from __future__ import annotations

import json
import os
import signal

import pytest

from spark_zmq.source.committed import RunSelector, Tag
from spark_zmq.source.decisions import Decisions

pytestmark = pytest.mark.timeout(60)


def feed(selector: RunSelector, batches: range, query: str = "q", channel: int = 0) -> None:
    """Each writing batch's data message and commit record on ``channel``, in order; Spark
    commits past each record as it comes (``release``)."""
    state = selector.channel(channel, 0)
    for b in batches:
        selector.observe(channel, state.cursor, Tag("data", (query, b), 0, f"run-{b}"))
        selector.observe(channel, state.cursor, Tag("record", (query, b), runs={0: f"run-{b}"}))
        selector.decisions.flush()
        selector.release(channel, state.cursor)


def file_lines(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_dead_decisions_leave_the_file_once_they_outnumber_the_live_by_the_margin(tmp_path):
    path = str(tmp_path / "committed-runs-s.jsonl")
    selector = RunSelector(Decisions(path, margin=4))
    feed(selector, range(5))
    assert not selector.compact(), "5 lines, 4 dead: within the margin"
    feed(selector, range(5, 12))
    assert selector.compact()
    lines = file_lines(path)
    # the newest batch stays (its writer might still run it again), with the floor line
    assert lines == [{"floor": {"q": 10}}, {"query": "q", "batch": 11, "runs": {"0": "run-11"}}]
    again = Decisions(path)
    assert again.floor == {"q": 10} and again.get(("q", 11)) == {0: "run-11"}
    # a compacted batch is settled: another record of it is not a decision, its late data
    # neither holds the channel nor reaches Spark
    assert again.settled(("q", 3)) and not again.add(("q", 3), {0: "other"})
    reread = RunSelector(again)
    reread.channel(0, 100)
    reread.observe(0, 100, Tag("data", ("q", 3), 0, "other"))
    assert reread.end(0) == 101 and reread.decisions_within(0, 100, 101) == {}


def test_a_batch_still_in_reach_of_spark_or_behind_an_undecided_one_is_kept(tmp_path):
    path = str(tmp_path / "committed-runs-s.jsonl")
    selector = RunSelector(Decisions(path, margin=0))
    selector.channel(1, 0)
    # channel 1 holds query q's batch 0 with no record yet; query w's batches are done
    selector.observe(1, 0, Tag("data", ("q", 0), 0, "a"))
    feed(selector, range(1, 6), "q")
    feed(selector, range(12), "w")
    selector.release(1, 0)  # Spark has not passed a later record on channel 1: nothing of q or w goes
    assert selector.compactable() == []
    # channel 1 gets the records; Spark committed past them
    state = selector.channels[1]
    for b in range(12):
        selector.observe(1, state.cursor, Tag("record", ("w", b), runs={0: f"run-{b}"}))
    selector.release(1, state.cursor)
    # w's older batches go, q's stay behind its undecided batch 0, each query's newest stays
    assert sorted(selector.compactable()) == [("w", b) for b in range(11)]
    assert selector.compact()  # 11 dead lines, 6 live
    assert Decisions(path).floor == {"w": 10} and len(Decisions(path)) == 6


STEPS = ("write", "fsync", "rename", "fsync-dir")


@pytest.mark.parametrize("step", STEPS)
def test_a_compaction_killed_at_any_step_leaves_the_old_or_the_new_file(tmp_path, step):
    path = str(tmp_path / "committed-runs-s.jsonl")
    selector = RunSelector(Decisions(path, margin=2))
    feed(selector, range(8))
    decided = {("q", b): {0: f"run-{b}"} for b in range(8)}
    with open(path, "rb") as f:
        old = f.read()
    pid = os.fork()
    if pid == 0:  # the child compacts and is killed (SIGKILL, no clean-up) before ``step``

        def die(at: str) -> None:
            if at == step:
                os.kill(os.getpid(), signal.SIGKILL)

        try:
            selector.compact(step=die)
        finally:
            os._exit(3)  # not reached when killed
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    after = Decisions(path)
    assert not os.path.exists(path + ".compact"), "the half-written compaction is removed on load"
    with open(path, "rb") as f:
        now = f.read()
    if step in ("write", "fsync", "rename"):
        assert now == old and after.floor == {}
    else:  # renamed: the new file, whether or not its directory entry was synced
        assert after.floor == {"q": 6} and len(after) == 1
    # either way every batch is settled, and the ones Spark can still need have their runs
    for key, runs in decided.items():
        assert after.settled(key)
        assert after.get(key) in (runs, None) and (after.get(key) == runs or key[1] <= after.floor["q"])
    assert after.get(("q", 7)) == {0: "run-7"}
    # and the file takes new decisions as before
    assert after.add(("q", 8), {0: "run-8"})
    after.flush()
    assert Decisions(path).get(("q", 8)) == {0: "run-8"}


def test_without_a_fault_the_compaction_is_complete(tmp_path):
    path = str(tmp_path / "committed-runs-s.jsonl")
    selector = RunSelector(Decisions(path, margin=2))
    feed(selector, range(8))
    seen: list[str] = []
    assert selector.compact(step=seen.append)
    assert seen == list(STEPS) and not os.path.exists(path + ".compact")
    assert file_lines(path) == [{"floor": {"q": 6}}, {"query": "q", "batch": 7, "runs": {"0": "run-7"}}]
