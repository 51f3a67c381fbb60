"""Liveness of connections: ZMTP 3.1 heartbeats (RFC 37's PING/PONG) and TCP keepalive.

Why: ZeroMQ reconnects a connection that *breaks*, but a peer that goes silent without
closing (a NAT or firewall that forgot the flow, a host that lost power, a half-open TCP
connection) breaks nothing: a receiver that only reads waits forever and a sender's
unacknowledged messages stay with the dead peer. Every socket of this package therefore
sends a PING every ``interval`` seconds, asks the peer to drop the connection when it hears
nothing from us for ``ttl`` seconds (the PING's TTL), and drops the connection itself when
it hears nothing from the peer for ``timeout`` seconds after a PING. A broken connection is
then handled like any other: a connecting socket reconnects, a sender re-routes.

TCP keepalive and ``TCP_USER_TIMEOUT`` (libzmq's ``ZMQ_TCP_MAXRT``) are the second line: the
kernel drops a connection whose peer host stops acknowledging what we send (our PINGs
included) within ``timeout``, whatever the application on either side does.

Receiving sockets are careful in two ways, because a producer must never lose what its
buffers hold to our heartbeats:

- a receiver applying backpressure stops reading, so its peer's answers wait unread:
  silence is not counted then. libzmq's PULL cannot be told so and would drop a live
  producer, so ``Pull`` sets no ZMTP timeout (``zmtp_timeout=False`` in
  :meth:`Heartbeat.apply`); the package's engine simply does not judge a peer it holds back;
- a byte of ours that sits unread in a producer when it exits (a PING that arrived after
  its I/O thread last read) makes the producer's kernel reset the connection instead of
  closing it, and a reset destroys what both kernels still buffer: the producer's
  untransmitted data and our unread data, megabytes when the receiver was holding it
  back. So the engine's receive-only sockets (``ZmtpPull``, ``Gather``) PING only a peer
  that has been silent for a whole interval while they read (one that sends is alive, one
  silent that long has nothing in flight), with no TTL (libzmq drops a connection when
  nothing follows a PING within its TTL, and these sockets stay quiet while a peer
  streams); and libzmq's ``Pull``, whose PINGs go out on a timer whatever the peer does,
  sends none (``pings=False``): it answers its peers' PINGs, and TCP keepalive watches
  the host.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import Any

import zmq

__all__ = ["Heartbeat", "DEFAULT_HEARTBEAT", "RECEIVER_HEARTBEAT", "NO_HEARTBEAT", "MAX_TTL_S"]

#: the PING's TTL field is 16 bits of deciseconds (RFC 37)
MAX_TTL_S = 6553.5
#: seconds: upper bound of every heartbeat setting (a day), so the milliseconds fit an ``int``
MAX_HEARTBEAT_S = 86_400.0


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat settings in seconds. ``interval`` 0 disables heartbeats (and keepalive)."""

    interval: float = 2.0
    timeout: float = 10.0
    ttl: float = 10.0

    def __post_init__(self) -> None:
        for name, low_ok in (("interval", True), ("timeout", False), ("ttl", True)):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or (value == 0 and not low_ok)
                or value > MAX_HEARTBEAT_S
            ):
                zero = ">= 0" if low_ok else "> 0"
                raise ValueError(
                    f"heartbeat {name} must be a number of seconds {zero} and <= {MAX_HEARTBEAT_S:g}, not {value!r}"
                )
        if self.ttl > MAX_TTL_S:
            raise ValueError(
                f"heartbeat ttl must be <= {MAX_TTL_S} s (a PING carries it in 16 bits of "
                f"deciseconds), not {self.ttl!r}"
            )

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @property
    def ttl_field(self) -> bytes:
        """The PING's TTL field: deciseconds, big-endian 16 bits (0 = no TTL)."""
        return int(round(self.ttl * 10)).to_bytes(2, "big")

    @staticmethod
    def _ms(seconds: float) -> int:
        return max(1, int(round(seconds * 1000)))

    def apply(self, sock: zmq.Socket[Any], *, zmtp_timeout: bool = True, pings: bool = True) -> None:
        """Set libzmq's heartbeat and keepalive options on ``sock`` (before bind/connect);
        with ``pings=False`` only keepalive and the kernel's timeout (see the module)."""
        if not self.enabled:
            return
        if pings:
            sock.setsockopt(zmq.HEARTBEAT_IVL, self._ms(self.interval))
            # 0 = no timeout (libzmq's default -1 would mean "the interval")
            sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, self._ms(self.timeout) if zmtp_timeout else 0)
            if self.ttl > 0:
                # libzmq sends TTL in deciseconds and rejects values that do not fit 16 bits
                sock.setsockopt(zmq.HEARTBEAT_TTL, min(int(self.ttl * 1000) // 100 * 100, 6_553_500))
        sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
        idle, intvl, count = self.keepalive
        sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, idle)
        sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, intvl)
        sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, count)
        if hasattr(zmq, "TCP_MAXRT"):
            sock.setsockopt(zmq.TCP_MAXRT, self._ms(self.timeout))

    @property
    def keepalive(self) -> tuple[int, int, int]:
        """TCP keepalive (idle s, probe interval s, probes): dead after about ``timeout`` idle."""
        idle = max(1, int(math.ceil(self.timeout)))
        intvl = max(1, int(math.ceil(self.timeout / 3)))
        return idle, intvl, 3

    def configure_tcp(self, sock: socket.socket) -> None:
        """Keepalive and ``TCP_USER_TIMEOUT`` on one of our own TCP sockets (the ZMTP engine)."""
        if not self.enabled or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return
        idle, intvl, count = self.keepalive
        options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
        for name, value in (
            ("TCP_KEEPIDLE", idle),
            ("TCP_KEEPINTVL", intvl),
            ("TCP_KEEPCNT", count),
            ("TCP_USER_TIMEOUT", self._ms(self.timeout)),
        ):
            if hasattr(socket, name):
                options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
        for level, option, value in options:
            try:
                sock.setsockopt(level, option, value)
            except OSError:
                pass  # a platform without one of them keeps the others


#: what every socket of this package uses unless told otherwise (see the README's "Liveness")
DEFAULT_HEARTBEAT = Heartbeat()
#: what the source's receiving sockets use unless told otherwise. Why a timeout this long:
#: ZeroMQ has no acknowledgements, so closing a producer's connection destroys what its
#: kernel and ours still hold (a producer that sent during a network outage has it all in
#: its send buffer, and its kernel resends it once the path is back, unless we closed).
#: A path that is silent for a minute or two, then comes back, must cost nothing; TCP's
#: own retransmissions back off to 120 s, so a blink of two minutes may stay silent for
#: nearly four. The interval stays short (PINGs keep a NAT's or firewall's state of an
#: idle connection alive), and a peer whose host came back without the connection (a
#: reboot, a NAT that forgot it) answers our next PING with a reset, noticed at once.
RECEIVER_HEARTBEAT = Heartbeat(interval=2.0, timeout=300.0, ttl=300.0)
#: no heartbeats, no keepalive: the socket notices only connections that break
NO_HEARTBEAT = Heartbeat(interval=0.0)


def heartbeat_option(value: Heartbeat | None) -> Heartbeat:
    """The ``heartbeat`` option of a pattern socket: a ``Heartbeat``, or ``None`` for the default."""
    if value is None:
        return DEFAULT_HEARTBEAT
    if not isinstance(value, Heartbeat):
        raise TypeError(
            f"option 'heartbeat' must be a spark_zmq.patterns.Heartbeat (or None for the default "
            f"{DEFAULT_HEARTBEAT}), not {type(value).__name__}"
        )
    return value
