"""The wire's limit: libzmq's own C throughput test (``local_thr``/``remote_thr``, here
``bench/c/thr.c``), one PUSH process to one PULL process over loopback TCP, no Python.

Needs a C compiler. It builds against the system's libzmq where its headers are present
(Debian: ``apt-get install libzmq3-dev``), else against the libzmq that pyzmq's wheel
bundles (``pyzmq.libs/libzmq-*.so``), declared by ``bench/c/zmq_abi.h``; ``missing()``
says why not when neither works, and the bench reports that instead. The program is
compiled into a temporary directory at run time; ``library()`` says which libzmq it used.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import tempfile
import threading

from common import HERE, Producer

NAME = "libzmq C local_thr/remote_thr"

_built: dict[str, str] = {}


def _compiler() -> str | None:
    return next((path for path in map(shutil.which, ("cc", "gcc", "clang")) if path), None)


def _bundled_libzmq() -> str | None:
    """The libzmq shared library inside pyzmq's wheel, if this pyzmq bundles one."""
    import zmq

    site = os.path.dirname(os.path.dirname(zmq.__file__))
    found = sorted(glob.glob(os.path.join(site, "pyzmq.libs", "libzmq*.so*")))
    return found[0] if found else None


@functools.cache
def _link_args(cc: str) -> tuple[str, ...] | None:
    """How to build against a libzmq: the system's (``zmq.h``, ``-lzmq``) or pyzmq's
    (probed once: ``missing()`` and ``_build()`` both ask)."""
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input="#include <zmq.h>\n", capture_output=True, text=True)
    if probe.returncode == 0:
        return ("-lzmq",)
    bundled = _bundled_libzmq()
    if bundled is None:
        return None
    libdir = os.path.dirname(bundled)
    return ("-DTHR_ZMQ_ABI", bundled, f"-Wl,-rpath,{libdir}")


def missing() -> str | None:
    """Why the C test cannot run here, or ``None`` when it can (a compiler, and a libzmq
    to build against: the system's headers and library, or pyzmq's bundled library)."""
    cc = _compiler()
    if cc is None:
        return "no C compiler (install gcc or clang)"
    if _link_args(cc) is None:
        return "no zmq.h (install libzmq3-dev) and no libzmq bundled with pyzmq"
    try:
        _build()
    except RuntimeError as e:
        return str(e)
    return None


def _build() -> str:
    """``bench/c/thr.c`` compiled (once per process) into a temporary directory."""
    if "thr" not in _built:
        cc = _compiler()
        link = _link_args(cc) or ("-lzmq",)
        out = os.path.join(tempfile.mkdtemp(prefix="spark-zmq-bench-thr-"), "thr")
        result = subprocess.run(
            [cc, "-O2", "-o", out, os.path.join(HERE, "c", "thr.c"), *link], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(f"bench/c/thr.c did not build: {result.stderr.strip()[-300:]}")
        _built["library"] = "pyzmq's bundled libzmq" if "-DTHR_ZMQ_ABI" in link else "the system's libzmq"
        _built["thr"] = out
    return _built["thr"]


def consumer_command(count: int) -> list[str]:
    """``thr sink``: the egress scenarios' consumer of ``count`` messages of any size (see
    ``bench/c/thr.c``), a CURVE server when the environment gives it a key. Call after
    ``missing()`` returned ``None``."""
    return [_build(), "sink", "tcp://127.0.0.1:*", str(count)]


def library() -> str:
    """Which libzmq the C test was built against (after ``missing()`` returned ``None``)."""
    return _built.get("library", "")


def reap(proc: subprocess.Popen, timeout: float) -> tuple[int, float]:
    """``proc``'s exit code and the CPU seconds it used (user + system, its I/O threads
    included), from ``wait4``'s resource usage; killed after ``timeout`` seconds."""
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return proc.returncode, usage.ru_utime + usage.ru_stime


def throughput(count: int, size: int, cpu: dict | None = None) -> float:
    """Messages/s of ``count`` ``size``-byte messages from ``thr remote`` to ``thr local``,
    timed by the receiver from its first message to its last (as libzmq's local_thr).
    ``cpu``: a dict to fill with each side's CPU per message, ``sender_us_per_msg`` and
    ``receiver_us_per_msg``: the least a sender and a receiver of these messages cost."""
    thr = _build()
    local = subprocess.Popen(
        [thr, "local", "tcp://127.0.0.1:*", str(size), str(count)], stdout=subprocess.PIPE, text=True
    )
    endpoint = local.stdout.readline().strip()
    remote = subprocess.Popen([thr, "remote", endpoint, str(size), str(count)])
    remote_exit, remote_cpu = reap(remote, 300)
    rate = local.stdout.readline().strip()
    local_exit, local_cpu = reap(local, 60)
    local.stdout.close()
    if remote_exit != 0 or local_exit != 0 or not rate:
        raise RuntimeError(f"the C throughput test failed (remote exit {remote_exit}, local {local_exit})")
    if cpu is not None:
        cpu.update({"sender_us_per_msg": remote_cpu / count * 1e6, "receiver_us_per_msg": local_cpu / count * 1e6})
    return float(rate)


class CProducer(Producer):
    """``thr remote``: libzmq's C PUSH sending ``count`` one-row messages of ``arg`` bytes to
    ``endpoint``, a ``common.Producer`` whose process is C: the cheapest sender there is, so
    an ingest run with it measures the receiving side against the wire's limit instead of
    against what a Python sender can offer. With ``THR_WAIT_GO`` it speaks ``Producer``'s
    protocol (``ready`` once connected, sends on ``go``), so a CPU snapshot taken before
    ``go`` finds it, by name, among the producers."""

    def __init__(self, endpoint: str, count: int, kind: str, arg: float) -> None:
        if kind != "raw":
            raise ValueError(f"libzmq's C producer sends one-row messages (raw), not {kind}")
        self.proc = subprocess.Popen(
            [_build(), "remote", endpoint, str(int(arg)), str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "THR_WAIT_GO": "1"},
        )

    def wait(self, timeout: float = 120) -> None:
        super().wait(timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"libzmq's C producer (thr remote) exited with {self.proc.returncode}")
