"""The jobs users run with spark-submit, run the same way, on real sockets."""

from __future__ import annotations

import os
import subprocess
import sys

import pyspark
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_SUBMIT = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")


def _submit(*args: str, timeout: float = 280) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPARK_CONF_DIR=os.path.join(ROOT, "conf"), PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.run([SPARK_SUBMIT, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_spark_submit_quickstart_exits_zero_and_prints_its_summary():
    result = _submit("jobs/quickstart.py", "--messages", "3000", "--rate", "5000")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "spark-zmq quickstart" in out
    assert "rows in       3000" in out
    assert "lag              0" in out
    rows_out = int(out.split("rows out")[1].split()[0])
    assert 1 <= rows_out <= 8
    assert out.count("readings, average") == rows_out


def test_quickstart_rejects_bad_arguments_with_usage_not_a_traceback():
    result = subprocess.run([sys.executable, "jobs/quickstart.py", "--messages", "zero"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "usage:" in result.stderr and "Traceback" not in result.stderr
