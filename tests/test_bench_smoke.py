"""The benchmark command still works (a seconds-scale smoke run; the real run is not a test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_smoke_run_writes_its_report(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "run.py"), "--smoke", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {r["scenario"].split()[0] for r in rows} == {"ingest-raw", "egress-raw"}
    assert all(r["connector_median"] > 0 and r["baseline_median"] > 0 for r in rows)
    assert "| scenario |" in (tmp_path / "report.md").read_text()
