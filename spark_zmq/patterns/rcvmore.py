"""A cheap ``ZMQ_RCVMORE`` check for the receive hot path.

Why: a receiver must ask, after every frame, whether more frames of the same message
follow (a multipart message is one message, never several). pyzmq's ``Socket.get`` builds
a ``SocketOption`` enum on every call, which costs about 2.5 us: four times the ``recv``
of a 100-byte message, and most of a one-row receiver's time. The same question asked of
libzmq directly costs about 1 us.

How: ``zmq_getsockopt`` is called through ctypes on ``Socket.underlying`` (the libzmq
socket's address, pyzmq's documented hook for other bindings) in the libzmq library
pyzmq itself loaded, found in the process's memory map. ``ctypes.PyDLL`` keeps the GIL for
the call: it never blocks, and releasing the GIL per message would hand it to another
thread each time. The result is checked against pyzmq's own answer once per socket;
wherever any of this is unavailable (another platform, a libzmq we cannot find or that
answers differently) the check falls back to ``Socket.get``.

The caller must not use the returned function after closing the socket: the address is
then freed. ``PatternSocket`` calls it only under its lock, right after a ``recv``.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from typing import Any, cast

import zmq

__all__ = ["rcvmore_check"]

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _libzmq_getsockopt() -> Callable[..., int] | None:
    """``zmq_getsockopt`` of the libzmq pyzmq loaded, or ``None``."""
    paths = _loaded_libzmq_paths()
    if len(paths) != 1:
        return None
    try:
        return ctypes.PyDLL(paths[0]).zmq_getsockopt  # already loaded: the same library
    except (OSError, AttributeError) as exc:
        log.debug("spark-zmq: cannot use %s for RCVMORE: %s", paths[0], exc)
        return None


def _loaded_libzmq_paths() -> list[str]:
    """The libzmq shared libraries mapped into this process (Linux), after pyzmq's import."""
    try:
        with open("/proc/self/maps") as maps:
            found = {line.split()[-1] for line in maps if "libzmq" in line and "/" in line}
    except OSError:
        return []
    return sorted(found)


def rcvmore_check(sock: zmq.Socket[Any]) -> Callable[[], int]:
    """A function returning ``ZMQ_RCVMORE`` of ``sock`` (non-zero: more frames follow)."""
    # ZMQ_RCVMORE is an int option (``sock.get`` is typed for every option)
    fallback = cast("Callable[[], int]", functools.partial(sock.get, zmq.RCVMORE))
    getsockopt = _libzmq_getsockopt()
    if getsockopt is None:
        return fallback
    handle = ctypes.c_void_p(sock.underlying)
    value = ctypes.c_int(0)
    size = ctypes.c_size_t(ctypes.sizeof(value))
    value_ref, size_ref = ctypes.byref(value), ctypes.byref(size)
    option = ctypes.c_int(zmq.RCVMORE.value)

    def rcvmore() -> int:
        # libzmq writes sizeof(int) back into ``size`` for an int option: no reset needed.
        if getsockopt(handle, option, value_ref, size_ref) != 0:
            return fallback()  # raises pyzmq's error for this socket
        return value.value

    # The same library and socket? Read an int option both ways before trusting it.
    kind = ctypes.c_int(-1)
    kind_size = ctypes.c_size_t(ctypes.sizeof(kind))
    if getsockopt(
        handle, ctypes.c_int(zmq.TYPE.value), ctypes.byref(kind), ctypes.byref(kind_size)
    ) != 0 or kind.value != sock.get(zmq.TYPE):
        log.debug("spark-zmq: libzmq found by path disagrees with pyzmq; RCVMORE via pyzmq")
        return fallback
    return rcvmore
