"""The client side of the broker: its frontend socket (``BrokerFrontend``) and ``ClientSide``, a
part of ``Broker`` that reads clients' requests and returns, holds or drops their replies.

Why its own module: what the broker owes clients (replies in order, held while a client is not
reading, refusals once a client that reads nothing has too many waiting; see ``broker``'s
docstring) is a job apart from the loop and from the worker side (``broker_workers``); the
per-client queues it works on are ``broker_clients``.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar

import zmq

from ..patterns.reqrep import Router
from .broker_stats import delimiter
from .broker_workers import READ_BATCH

if TYPE_CHECKING:
    from .broker_clients import ClientQueues, Frames

__all__ = ["BrokerFrontend", "ClientSide", "LOGGED_CLIENTS"]

log = logging.getLogger("spark_zmq.requestreply.broker")

#: clients whose refusals are logged (one line each); later ones are only counted
LOGGED_CLIENTS = 1000


class BrokerFrontend(Router):
    """The broker's frontend: read only while the broker has room, so no ZMTP timeout (a
    peer whose PONG waits unread behind a full queue is alive; see ``heartbeat``).
    ``rcvhwm``/``sndhwm``: its receive and send high-water marks (``defaults.frontend_rcvhwm``,
    ``defaults.frontend_sndhwm``), at most ``hwm``."""

    heartbeat_zmtp_timeout: ClassVar[bool] = False

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return super()._extra_options() + ("rcvhwm", "sndhwm")

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        super()._configure(sock, options)
        if options.get("rcvhwm") is not None:
            # before bind/connect: each connection's queue takes the value when it is made
            sock.setsockopt(zmq.RCVHWM, options["rcvhwm"])
        if options.get("sndhwm") is not None:
            sock.setsockopt(zmq.SNDHWM, options["sndhwm"])


class ClientSide:
    """The frontend half of ``Broker``: its methods work on the broker's per-client queues
    (``_clients``), its frontend socket and counters."""

    # what this part uses of ``Broker``, which sets it (annotations only: nothing at run time)
    _frontend: Router
    _clients: ClientQueues
    _refusals_logged: set[bytes]
    reply_timeout: float
    replies_returned: int
    replies_undeliverable: int
    malformed: int
    requests_refused: int

    if TYPE_CHECKING:

        def _recv(self, sock: zmq.Socket[Any], side: str) -> Frames | None: ...
        def _dispatch(self) -> None: ...

    def _return(self, payload: Frames) -> None:
        """Send a reply ``[envelope..., b"", reply...]`` to its client, or hold it while
        the client is not reading (behind the replies held for it already, so each client
        gets its replies in the order the workers sent them)."""
        client = payload[0].bytes
        if not self._clients.has_held(client) and self._try_send(payload):
            return
        if self.reply_timeout == 0:
            self.replies_undeliverable += 1  # holding is off
            return
        now = time.monotonic()
        if not self._clients.hold(client, payload, sum(len(f) for f in payload), now + self.reply_timeout, now):
            self._undeliverable(
                client,
                f"the replies held for clients that are not reading take "
                f"{self._clients.held_bytes:,} bytes (max_held_bytes)",
            )

    def _try_send(self, payload: Frames) -> bool:
        """One attempt: True once sent (or dropped because its client is gone), False when
        the client's queue is full."""
        # counted before the send: whoever sees the reply arrive sees it counted
        self.replies_returned += 1
        try:
            self._send_now(payload)
            return True
        except zmq.ZMQError as exc:
            self.replies_returned -= 1
            if exc.errno == zmq.EAGAIN:
                return False
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            # the client is gone: it resends if it comes back and still wants the reply
            self.replies_undeliverable += 1
            return True

    def _send_now(self, payload: Frames) -> None:
        """Send without blocking; a queue found full is tried once more after the socket has
        processed libzmq's commands (what its I/O thread wrote out: ``defaults.frontend_sndhwm``)."""
        front = self._frontend.zmq_socket
        try:
            front.send_multipart(payload, zmq.NOBLOCK, copy=False)
        except zmq.Again:
            front.getsockopt(zmq.EVENTS)
            front.send_multipart(payload, zmq.NOBLOCK, copy=False)

    def _retry(self, client: bytes, now: float) -> None:
        """Try a client's held replies again; drop those held for ``reply_timeout``."""
        for payload in self._clients.retry(client, now, self._try_send):
            self._undeliverable(payload[0].bytes, f"it read nothing for {self.reply_timeout:g} s")

    def _undeliverable(self, client: bytes, why: str) -> None:
        self.replies_undeliverable += 1
        if self.replies_undeliverable <= 10:
            log.warning(
                "Broker: dropped a reply to client %r: %s%s",
                client,
                why,
                " (further ones are counted, not logged)" if self.replies_undeliverable == 10 else "",
            )

    # -- frontend: clients ------------------------------------------------------------------

    def _read_frontend(self, front: zmq.Socket[Any]) -> None:
        for _ in range(READ_BATCH):
            if not self._clients.room():
                return
            frames = self._recv(front, "frontend")
            if frames is None:
                return
            if not frames:
                continue
            at = delimiter(frames, start=1)
            if at is None or at == len(frames) - 1:
                self.malformed += 1
                if self.malformed <= 10:
                    log.warning(
                        "Broker: dropped a request from client %r: not [envelope, b'', body]%s",
                        frames[0].bytes,
                        " (further ones are counted, not logged)" if self.malformed == 10 else "",
                    )
                continue
            client = frames[0].bytes
            if self._clients.has_held(client):
                self._retry(client, time.monotonic())  # it is alive: maybe reading again
            if not self._clients.add(client, (time.monotonic(), frames)):
                self._refused(client)
                continue
            self._dispatch()

    def _refused(self, client: bytes) -> None:
        self.requests_refused += 1
        if client not in self._refusals_logged and len(self._refusals_logged) < LOGGED_CLIENTS:
            self._refusals_logged.add(client)
            clients = self._clients
            log.warning(
                "Broker: refused a request of client %r: it reads no reply, and it has %d requests waiting "
                "(client_hwm), or all clients that read no reply have %d requests (the larger of hwm and "
                "client_hwm) or %d bytes (half of max_waiting_bytes) waiting; further ones of this client "
                "are counted, not logged",
                client,
                clients.client_hwm,
                clients.stalled_hwm,
                clients.stalled_max_bytes or 0,
            )
