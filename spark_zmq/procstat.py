"""What Linux's ``/proc`` says about a process: alive, parent, start time, command line,
environment, and which processes listen on a TCP port.

One place reads ``/proc/<pid>/stat`` because its second field (the command name, in
parentheses) may itself hold spaces and parentheses: every later field is counted from
the last ``)``. Each function answers "unknown" (``None``, ``False``, ``-1``, ``[]``) for a
process that is gone or a system without ``/proc``, never raises.
"""

from __future__ import annotations

import os

__all__ = ["pids", "is_alive", "parent_of", "start_ticks", "cmdline", "environ", "listening_on"]

#: ``/proc/net/tcp``'s state of a listening socket
_TCP_LISTEN = "0A"


def pids() -> list[int] | None:
    """The pids of the processes running now (their ``/proc`` entries), or ``None`` when
    ``/proc`` cannot be listed."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return None


def _fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` from the third (the state) on; ``[]`` if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    fields = _fields(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X")


def parent_of(pid: int) -> int | None:
    """The parent's pid, or ``None``."""
    fields = _fields(pid)
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (tells a reused pid from the
    process it once was), or ``-1``."""
    fields = _fields(pid)
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return -1


def cmdline(pid: int) -> list[bytes]:
    """The command line's arguments, or ``[]``."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def environ(pid: int) -> dict[str, str]:
    """The environment ``pid`` started with (readable for our own user's processes), or ``{}``."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return {}
    pairs = (entry.decode("utf-8", "replace").partition("=") for entry in entries if b"=" in entry)
    return {name: value for name, _, value in pairs}


def listening_on(port: int) -> list[int] | None:
    """The pids holding a TCP socket that listens on ``port`` (any address), as far as this
    user may see their descriptors; ``None`` when ``/proc`` cannot tell (no such files). What
    a bind error cannot say: who has the port."""
    inodes: set[str] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _TCP_LISTEN and fields[1].rsplit(":", 1)[-1] == f"{port:04X}":
                inodes.add(fields[9])
    if not seen:
        return None
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    running = pids()
    if running is None:
        return None
    for pid in running:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    holders.append(pid)
                    break
            except OSError:
                continue
    return holders
