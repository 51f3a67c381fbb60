"""``procstat.pids``: the one list of running processes read from ``/proc`` (what the relay's
lingering-receiver check, ``listening_on`` and the tests' process helpers use)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spark_zmq import procstat

pytestmark = pytest.mark.timeout(30)


def test_pids_holds_this_process_and_a_child_while_it_runs_and_not_after():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        running = procstat.pids()
        assert running is not None and os.getpid() in running and child.pid in running
        assert all(isinstance(pid, int) for pid in running)
    finally:
        child.communicate(timeout=10)
    assert child.pid not in (procstat.pids() or [])
