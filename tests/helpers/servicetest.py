"""Service workers in their own processes, for the request-reply tests.

``ServiceWorker.start("--format", "arrow", "--bind", "tcp://127.0.0.1:*")`` runs
tests/scripts/rep_worker.py (plain pyzmq, no spark_zmq code), ``ServiceWorker.serve(...)``
tests/scripts/serve_worker.py (``spark_zmq.worker.serve``); both return once the worker has
bound or connected; ``wait_for("HOLDING")`` waits for a line it prints, so a test can kill it at
an exact moment without sleeping.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

WORKER = Path(__file__).resolve().parents[1] / "scripts" / "rep_worker.py"
SERVE = Path(__file__).resolve().parents[1] / "scripts" / "serve_worker.py"


class ServiceWorker:
    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.endpoint = self.wait_for("READY").split()[1]

    @classmethod
    def start(cls, *args: str, script: Path = WORKER) -> ServiceWorker:
        """tests/scripts/rep_worker.py (plain pyzmq) with ``args``."""
        proc = subprocess.Popen(
            [sys.executable, str(script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return cls(proc)

    @classmethod
    def serve(cls, *args: str) -> ServiceWorker:
        """tests/scripts/serve_worker.py (``spark_zmq.worker.serve``) with ``args``."""
        return cls.start(*args, script=SERVE)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put("")

    def wait_for(self, prefix: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"worker printed no {prefix!r} line within {timeout} s (saw {self.seen[-5:]})")
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line == "" and self.proc.poll() is not None:
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) before {prefix!r}: {self.proc.stderr.read()[-2000:]}"
                )
            self.seen.append(line)
            if line.startswith(prefix):
                return line

    def served(self) -> int:
        """Requests answered so far, as far as its output has been read."""
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except queue.Empty:
                break
        counts = [int(line.split()[1]) for line in self.seen if line.startswith("SERVED")]
        return max(counts, default=0)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=30)

    def __enter__(self) -> ServiceWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream:
                stream.close()


def collect_in_thread(df) -> tuple[threading.Thread, dict]:
    """``df.collect()`` on a thread: ``result["rows"]`` or ``result["error"]`` once joined."""
    result: dict = {}

    def run() -> None:
        try:
            result["rows"] = df.collect()
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result
