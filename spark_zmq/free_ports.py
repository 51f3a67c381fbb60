"""TCP ports free on this host now, chosen where no outgoing connection can take them.

The quick-start job, the benchmarks and the tests pick ports for endpoints that a Spark
process or a child binds a moment later. A port from ``bind(("127.0.0.1", 0))`` comes
from the kernel's ephemeral range, the range outgoing connections draw their source
ports from: in the moment between choosing it and binding it, any ``connect()`` on the
host (Spark's own, a ZeroMQ socket reconnecting) may be given it, and the bind then fails
with "Address already in use". A ZeroMQ socket that keeps reconnecting to an ephemeral
port nobody listens on may even be given that very port as its source and connect to
itself (TCP simultaneous open). No connection gets a source port outside the range
unless it asks, so the ports here come from below it.
"""

from __future__ import annotations

import random
import socket

#: Linux's default first ephemeral port, for systems without ``/proc``
_DEFAULT_EPHEMERAL_LOW = 32768
#: the lowest port chosen (above the well-known and most registered service ports)
_LOWEST = 20000


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (``net.ipv4.ip_local_port_range``)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def free_tcp_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now, below the ephemeral range.

    Each is checked free by binding it; all are held together while they are chosen, so
    they differ, and released before returning (whoever uses them binds them next)."""
    low, high = _LOWEST, ephemeral_low()
    if high - low < 1000:
        low = 1024
    held: list[socket.socket] = []
    try:
        for _ in range(1000 * count):
            if len(held) == count:
                break
            candidate = socket.socket()
            try:
                candidate.bind((host, random.randrange(low, high)))
            except OSError:
                candidate.close()
                continue
            held.append(candidate)
        if len(held) < count:
            raise RuntimeError(f"no {count} free TCP ports on {host} in {low}..{high - 1}")
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """One TCP port free on ``host`` now, below the ephemeral range (``free_tcp_ports``)."""
    return free_tcp_ports(1, host)[0]
