"""The source with executors as separate processes (Spark local-cluster mode).

Read tasks run in executor JVMs with their own Python workers, so the messages can only
reach them through the spool, never through the driver's memory. A separate script runs
its own SparkSession (local-cluster cannot share the test session).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "cluster_stream.py")


def test_stream_read_with_executors_in_separate_processes(free_port, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            SCRIPT,
            f"tcp://127.0.0.1:{free_port}",
            str(tmp_path / "spool"),
            str(tmp_path / "ckpt"),
            "20000",
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    outcome = json.loads(lines[-1][len("RESULT ") :])
    assert outcome == {"rows": 20000, "offsets": 20000, "values": 20000, "tasks": 4, "executors": 2, "exception": None}
