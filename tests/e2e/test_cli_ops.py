"""Operating the services from a shell: ``spark-zmq --version``, ``spark-zmq ping`` and the
servers' refusals and warnings about CURVE, on real sockets and real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import spark_zmq

pytestmark = pytest.mark.timeout(120)

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def _declared_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        found = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_version_is_the_one_pyproject_declares():
    result = _cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spark-zmq {_declared_version()}"
    assert spark_zmq.__version__ == _declared_version()


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(spark_zmq.__file__), "py.typed"))
