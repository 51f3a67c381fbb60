"""The handler of ``spark_zmq.worker.serve`` in a process of its own, so that a request
whose handler never returns costs one ``handler_timeout`` and not the worker.

Why a process: a thread cannot be killed, so a handler stuck in a loop (or in a C call)
would hold its worker for good, and a client resending the same poison request would take
the next worker, and the next. A child process can be killed: at the deadline the worker
kills it, answers the request with an error reply, and forks a new one.

How: the child is forked from the worker (so the handler and whatever it loaded, a model,
need not be picklable and are shared copy-on-write) and talks to it over a pipe: the worker
sends ``(request number, body frames)``, the child answers with the reply frames. The child
never touches ZeroMQ. It ignores SIGINT (the worker decides when it ends), and is killed
when the worker's process dies (Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import time
import warnings
from collections.abc import Callable
from multiprocessing.connection import Connection

__all__ = ["HandlerProcess"]

Answer = Callable[[int, list[bytes]], list[bytes]]

#: seconds a child asked to end may take before it is killed
_END_S = 1.0


def _open_fds() -> set[int]:
    try:
        return {int(fd) for fd in os.listdir("/proc/self/fd")}
    except OSError:
        return set()


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the child still ends when the pipe closes


def _child(conn: Connection, answer: Answer) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    while True:
        try:
            number, body = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(answer(number, body))


class HandlerProcess:
    """One child process running ``answer(request number, body) -> reply frames``.

    A child keeps the descriptors the process had when this object was made (the handler's
    files and connections) and closes every later one: those are the worker's ZeroMQ
    connections, which must close when the worker closes them, not when a child ends."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer
        self._keep = _open_fds()
        self.started = 0
        self.busy = False
        self.pid: int | None = None
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads: the child runs no ZeroMQ)
            pid = os.fork()
        if pid == 0:  # the child
            code = 0
            try:
                ours.close()
                keep = self._keep | {theirs.fileno()}
                for fd in _open_fds() - keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                _child(Connection(theirs.detach()), self._answer)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self._conn = Connection(ours.detach())
        self.pid = pid
        self.started += 1

    def submit(self, number: int, body: list[bytes]) -> None:
        if self.pid is None:
            self._start()  # the one killed at the last deadline
        self.busy = True
        self._conn.send((number, body))

    def wait(self, timeout: float) -> list[bytes] | None:
        """The reply, if it came within ``timeout`` seconds; ``ChildProcessError`` when the
        child ended without one (the handler crashed the process, or called ``exit``): a new
        child is started."""
        if not self._conn.poll(max(0.0, timeout)):
            return None
        try:
            reply: list[bytes] | None = self._conn.recv()
        except (EOFError, OSError):
            code = self._end(kill=True)
            raise ChildProcessError(
                f"the handler's process ended without answering ({code}); a new one takes the next request"
            ) from None
        self.busy = False
        return reply

    def kill(self) -> None:
        """Kill the child (its handler did not return in time); the next ``submit`` forks a
        new one (so the error reply goes out first)."""
        self._end(kill=True)

    def close(self) -> None:
        """End the child: at once if a handler runs, else once it reads the closed pipe."""
        if self.pid is not None:
            self._end(kill=self.busy)

    def _end(self, kill: bool) -> str:
        pid, self.pid = self.pid, None
        self.busy = False
        self._conn.close()
        if pid is None:
            return "no process"
        if kill:
            _kill(pid)
        deadline = time.monotonic() + _END_S
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return _status_text(status)
            if time.monotonic() >= deadline:
                _kill(pid)
                return _status_text(os.waitpid(pid, 0)[1])
            time.sleep(0.01)

    def __repr__(self) -> str:
        return f"<HandlerProcess pid {self.pid} (started {self.started})>"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"
