"""Rejected handshakes, counted and logged from a socket's monitor (``HandshakeWatch``).

A CURVE client whose key is refused, a NULL (unencrypted) client, a client of the wrong
server, a peer that is not a ZeroMQ peer at all: each distinct rejection is logged once,
every one is counted. ``open_monitor``
makes the monitor socket, with no queue limit that could stall libzmq's I/O thread.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
from typing import Any

import zmq

__all__ = ["HANDSHAKE_FAILURES", "HandshakeWatch", "open_monitor"]

# the logger of ``curve``, where this was written first: logging configured for it still applies
log = logging.getLogger("spark_zmq.patterns.curve")

HANDSHAKE_FAILURES = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def _failure_text(event: int, value: int, is_server: bool, curve: bool = True) -> str:
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        if is_server:
            return f"a client's CURVE key was refused (ZAP status {value})"
        return f"the server refused this side's CURVE certificate (ZAP status {value}: not among its authorized keys)"
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return (
                "the peer does not use this socket's security mechanism (CURVE on one side only?)"
                if is_server
                else "the server does not use CURVE (security mechanism mismatch)"
            )
        if value in (zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC, zmq.PROTOCOL_ERROR_ZMTP_KEY_EXCHANGE):
            return (
                "a peer failed the CURVE key exchange"
                if is_server
                else "the CURVE key exchange failed: curveServerKey is not the server's public key"
            )
        if value == zmq.PROTOCOL_ERROR_ZMTP_INVALID_METADATA:
            return "the peer's socket type cannot talk to this socket (e.g. a PUB where a GATHER or PULL belongs)"
        return f"ZMTP protocol error {value:#x} during the handshake"
    if value == errno.ETIMEDOUT:
        return "a peer did not complete the handshake in time (handshake_ivl), and was disconnected"
    if not curve:
        return (
            "the peer closed the connection during the handshake: not a ZeroMQ peer, or one that does not "
            "accept this socket type"
        )
    return (
        "a peer dropped the connection during the handshake (a client without CURVE, or not a ZeroMQ peer)"
        if is_server
        else "the server closed the connection during the handshake (is curveServerKey the server's "
        "public key, and does the server use CURVE?)"
    )


_monitor_ids = itertools.count(1)


def open_monitor(sock: zmq.Socket[Any], events: int) -> zmq.Socket[Any]:
    """A PAIR socket receiving ``sock``'s monitor ``events``, with no high-water mark.

    Why not pyzmq's ``get_monitor_socket``: libzmq's I/O thread sends monitor events
    without ``ZMQ_DONTWAIT``, so when the monitor's queue is full (about 2,000 events, e.g.
    a flood of failed handshakes while nobody reads) it blocks, and every connection of
    the context stalls with it. An unlimited queue cannot block; its owner still reads
    it regularly (``HandshakeWatch.poll``), so it stays small.
    """
    address = f"inproc://spark-zmq-monitor-{os.getpid()}-{next(_monitor_ids)}"
    sock.monitor(address, events)
    monitor: zmq.Socket[Any] = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.RCVHWM, 0)  # before connect: the pipe's limit is fixed then
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.connect(address)
    return monitor


class HandshakeWatch:
    """Counts rejected handshakes from a socket monitor, and logs each kind once per endpoint.

    ``poll(timeout_s)`` reads what the monitor has (waiting up to ``timeout_s`` for the
    first event) and returns the other events it was asked to watch (e.g. a successful
    handshake), so one monitor serves both the caller and the security count.

    Its owner calls ``poll`` regularly, even while it waits for something else, so the
    monitor's queue (unlimited, see ``open_monitor``) stays small.
    """

    def __init__(self, monitor: zmq.Socket[Any], *, is_server: bool, label: str = "", curve: bool = True) -> None:
        self.monitor = monitor
        self.is_server = is_server
        #: whether the socket uses CURVE (a failure without it is never about keys)
        self.curve = curve
        self.label = label
        self.rejected = 0
        #: the last rejection, as text (for error messages)
        self.last_rejection: str | None = None
        self._logged: set[tuple[str, str]] = set()

    def poll(self, timeout_s: float = 0.0) -> list[tuple[int, int, str]]:
        others: list[tuple[int, int, str]] = []
        wait_ms = max(0, int(timeout_s * 1000))
        while self.monitor.poll(wait_ms):
            wait_ms = 0
            frames = self.monitor.recv_multipart()
            event, value = int.from_bytes(frames[0][:2], "little"), int.from_bytes(frames[0][2:6], "little")
            endpoint = frames[1].decode("utf-8", "replace") if len(frames) > 1 else "?"
            if event & HANDSHAKE_FAILURES:
                self._rejected(event, value, endpoint)
            else:
                others.append((event, value, endpoint))
        return others

    def failure_note(self) -> str:
        """``"; the CURVE handshake failed: <why>"`` once a handshake was rejected, else
        ``""``: what a client adds to a timeout's message, so a wrong key is not mistaken
        for a peer that is down."""
        self.poll()
        if not self.rejected:
            return ""
        return f"; the {'CURVE ' if self.curve else ''}handshake failed: {self.last_rejection}"

    def _rejected(self, event: int, value: int, endpoint: str) -> None:
        self.rejected += 1
        text = _failure_text(event, value, self.is_server, self.curve)
        self.last_rejection = f"{text} at {endpoint}"
        if (endpoint, text) not in self._logged and len(self._logged) < 1000:
            self._logged.add((endpoint, text))
            log.warning(
                "%s%s: rejected handshake: %s (further ones are counted, not logged)",
                self.label + " " if self.label else "",
                endpoint,
                text,
            )
