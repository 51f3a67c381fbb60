"""The wire's limit: libzmq's own C throughput test (``local_thr``/``remote_thr``, here
``bench/c/thr.c``), one PUSH process to one PULL process over loopback TCP, no Python.

Only where a C compiler and libzmq's headers and library are present (Debian:
``apt-get install libzmq3-dev``); ``missing()`` says why not otherwise, and the bench
reports that instead. The program is compiled into a temporary directory at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Optional

from common import HERE

NAME = "libzmq C local_thr/remote_thr"

_built: dict[str, str] = {}


def _compiler() -> Optional[str]:
    return next((path for path in map(shutil.which, ("cc", "gcc", "clang")) if path), None)


def missing() -> Optional[str]:
    """Why the C test cannot run here, or ``None`` when it can (a compiler, ``zmq.h``, and
    ``-lzmq`` links)."""
    cc = _compiler()
    if cc is None:
        return "no C compiler (install gcc or clang)"
    probe = subprocess.run([cc, "-E", "-x", "c", "-"], input="#include <zmq.h>\n", capture_output=True, text=True)
    if probe.returncode != 0:
        return "no zmq.h (install libzmq3-dev)"
    try:
        _build()
    except RuntimeError as e:
        return str(e)
    return None


def _build() -> str:
    """``bench/c/thr.c`` compiled (once per process) into a temporary directory."""
    if "thr" not in _built:
        out = os.path.join(tempfile.mkdtemp(prefix="spark-zmq-bench-thr-"), "thr")
        result = subprocess.run([_compiler(), "-O2", "-o", out, os.path.join(HERE, "c", "thr.c"), "-lzmq"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"bench/c/thr.c did not build: {result.stderr.strip()[-300:]}")
        _built["thr"] = out
    return _built["thr"]


def throughput(count: int, size: int) -> float:
    """Messages/s of ``count`` ``size``-byte messages from ``thr remote`` to ``thr local``,
    timed by the receiver from its first message to its last (as libzmq's local_thr)."""
    thr = _build()
    local = subprocess.Popen([thr, "local", "tcp://127.0.0.1:*", str(size), str(count)], stdout=subprocess.PIPE,
                             text=True)
    endpoint = local.stdout.readline().strip()
    remote = subprocess.run([thr, "remote", endpoint, str(size), str(count)], timeout=300)
    rate = local.stdout.readline().strip()
    if remote.returncode != 0 or local.wait(60) != 0 or not rate:
        raise RuntimeError(f"the C throughput test failed (remote exit {remote.returncode}, local {local.returncode})")
    local.stdout.close()
    return float(rate)
