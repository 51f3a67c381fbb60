"""``tools/fuzz.py`` runs, finds nothing in a few seconds per target, and would report a
crash, a hang or an unclear exception if there were one; its ``zmtp`` target would report a
Gather that loses, invents or reorders messages, or stops delivering."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import fuzz  # noqa: E402

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def test_fuzz_every_target_for_a_few_seconds_finds_nothing(tmp_path):
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "fuzz.py"),
            "--target",
            "all",
            "--seconds",
            "8",
            "--seed",
            "20260522",
            "--memory-mb",
            "1024",
            "--out",
            str(tmp_path / "findings"),
        ],
        capture_output=True,
        text=True,
        timeout=150,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert "findings: 0" in output
    tried = dict(
        (t, int(n.replace(",", "")))
        for t, n in re.findall(r"(json|arrow-count|arrow|text|zmtp) ([\d,]+)", output.split("inputs tried:")[1])
    )
    assert set(tried) == set(fuzz.TARGETS) and all(n > 0 for n in tried.values()), output
    assert not (tmp_path / "findings").exists()
    assert time.monotonic() - started < 60


def _case(name: str) -> fuzz.Case:
    return fuzz.Case("text", name, [b"x"], {"format": "raw"})


def test_the_runner_reports_crashes_hangs_and_unclear_outcomes(monkeypatch, tmp_path):
    def run_case(case):
        if case.kind == "crash":
            os.kill(os.getpid(), 11)
        if case.kind == "hang":
            time.sleep(60)
        if case.kind == "unclear":
            raise fuzz.Unclear("not a documented error")

    monkeypatch.setattr(fuzz, "run_case", run_case)
    found = fuzz.run_group([_case("ok"), _case("unclear"), _case("ok"), _case("crash"), _case("ok")], 256 << 20, 5)
    assert [(i, what) for i, what, _ in found] == [(1, "unclear"), (3, "crash")]
    assert "SIGSEGV" in found[1][2]
    found = fuzz.run_group([_case("ok"), _case("hang")], 256 << 20, 1)
    assert [(i, what) for i, what, _ in found] == [(1, "hang")]


def test_saved_cases_replay(tmp_path):
    case = fuzz.Case(
        "json",
        "batch",
        [b"null", b'{"id": 1}'],
        {"mode": "FAILFAST", "corrupt": False, "max_message_bytes": 1 << 20, "valid": [1]},
    )
    finding = fuzz._save(str(tmp_path), "json", "unclear", "example", [case])
    assert fuzz.Case.load(Path(finding.path).read_bytes()) == case
    assert fuzz.replay(finding.path) == 0  # decoded as the contract says: FAILFAST raised at offset 0


def _zmtp_case(seed: int, kind: str) -> fuzz.Case:
    rng = random.Random(seed)
    while True:
        case = fuzz.gen_zmtp(rng)
        if case.kind == kind and (case.params.get("expect") or kind != "null-valid"):
            return case


@pytest.mark.timeout(60)
def test_the_zmtp_target_checks_what_the_gather_delivers(monkeypatch, tmp_path):
    """In this process (no fork): a valid stream passes and replays from its saved file; a
    Gather that drops a message, or whose I/O thread fails on every input, is a finding."""
    from spark_zmq.patterns.wires.zmtp import sessions, stream

    try:
        case = _zmtp_case(1, "null-valid")
        fuzz.run_case(case)
        finding = fuzz._save(str(tmp_path), "zmtp", "unclear", "example", [case])
        assert fuzz.Case.load(Path(finding.path).read_bytes()) == case
        assert fuzz.replay(finding.path) == 0
        for kind in ("curve-session", "huge-size", "garbage"):
            fuzz.run_case(_zmtp_case(2, kind))

        deliver = sessions.Sessions.deliver
        monkeypatch.setattr(
            sessions.Sessions, "deliver", lambda self, conn, messages, nbytes: deliver(self, conn, messages[1:], None)
        )
        with pytest.raises(fuzz.Unclear, match="delivered"):
            fuzz.run_case(case)
        monkeypatch.setattr(sessions.Sessions, "deliver", deliver)

        def broken(self, data):
            raise RuntimeError("a bug in the engine")

        monkeypatch.setattr(stream.StreamEngine, "_feed", broken)
        monkeypatch.setattr(fuzz, "ZMTP_DEADLINE_S", 1.5)
        with pytest.raises(
            fuzz.Unclear,
            match="stopped delivering|logged an error|did not deliver|0 successful and 0 failed handshakes",
        ):
            fuzz.run_case(_zmtp_case(3, "garbage"))
    finally:
        monkeypatch.undo()
        fuzz.zmtp_reset()
