"""CPU load beside a test, to check that timing-sensitive tests hold on a busy machine.

Why: CI machines run several jobs (and Spark's JVMs) at once, so a test whose peers are
other processes (node, pyzmq, a stopped process) sees them scheduled late, handshakes that
take hundreds of milliseconds, and signals that land after the next line of the test has
already run. A test that only passes on an idle machine assumed an ordering nobody
promised. ``busy_processes`` starts processes that spin on the CPU, so such a test can be
run (by hand, or from a test through the ``busy`` fixture) under the load it meets in CI::

    from loadhelper import busy_processes

    with busy_processes(2):
        ...  # the timing-sensitive part

    # or, in a test module:
    from loadhelper import busy  # noqa: F401  (a fixture)

    def test_something(busy): ...

The spinners are always killed on exit, also when the body raises (or is interrupted).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

__all__ = ["busy_processes", "busy", "SPIN"]

#: what each busy process runs: a pure-Python spin loop, one core each
SPIN = "while True: pass"


@contextlib.contextmanager
def busy_processes(n: int = 2) -> Iterator[list[subprocess.Popen]]:
    """Run ``n`` child processes that each spin one CPU core for the duration of the block;
    yields them (their ``pid`` for logs). Killed and reaped on exit, whatever happened."""
    if n < 0:
        raise ValueError(f"n must be >= 0, not {n!r}")
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(n):
            spinners.append(
                subprocess.Popen(
                    [sys.executable, "-c", SPIN],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield spinners
    finally:
        for spinner in spinners:
            if spinner.poll() is None:
                spinner.kill()
        for spinner in spinners:
            try:
                spinner.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignored
                pass


@pytest.fixture
def busy() -> Iterator[list[subprocess.Popen]]:
    """Two CPU-spinning processes beside the test (see the module's docstring)."""
    with busy_processes(2) as spinners:
        yield spinners
