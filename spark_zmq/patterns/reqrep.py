"""Request-reply (the Guide's chapter 3): REQ, REP, DEALER, ROUTER.

The connector uses DEALER to ROUTER for executors that fetch spool ranges from the driver
(an asynchronous client-server: many DEALER clients, one ROUTER server that replies to
whichever identity asked). REQ/REP are the strict lock-step pair; DEALER/ROUTER are their
asynchronous versions: a ROUTER prefixes every received message with the sender's
identity frame and routes a reply by its first frame; a DEALER round-robins requests and
fair-queues replies. Envelopes: a REQ-compatible request is ``[identity, b"", body...]``
at the ROUTER.
"""

from __future__ import annotations

from typing import Any, ClassVar

import zmq

from .base import PatternSocket
from .frames import Message
from .socket_options import positive_int, timeout_deadline
from .wires.contract import WireClass
from .wires.libzmq import LibzmqWire

__all__ = ["Req", "Rep", "Dealer", "Router"]


class Req(PatternSocket):
    """Lock-step client: send one request, then receive its reply. Connects by default."""

    socket_type: ClassVar[int] = zmq.REQ
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True


class Rep(PatternSocket):
    """Lock-step server: receive one request, then send its reply. Binds by default."""

    socket_type: ClassVar[int] = zmq.REP
    default_bind: ClassVar[bool] = True
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True


class Dealer(PatternSocket):
    """Asynchronous client: requests go round-robin, replies are fair-queued. Connects by default."""

    socket_type: ClassVar[int] = zmq.DEALER
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True


class RouterWire(LibzmqWire):
    """A ROUTER's libzmq wire: with ``mandatory``, a reply to no connected identity is a
    ``ConnectionError`` naming it, not libzmq's bare EHOSTUNREACH."""

    def send_locked(self, frames: list[Message], deadline: float | None) -> None:
        try:
            super().send_locked(frames, deadline)
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            raise ConnectionError(
                f"Router: no connected peer has identity {bytes(frames[0])!r} (mandatory routing refuses the reply)"
            ) from None

    def receive_request(self, deadline: float | None) -> tuple[list[bytes], str | None]:
        """One whole message and the ZAP user id of the connection it came on (``User-Id``:
        under CURVE, the client's public key in Z85, as ``zmq.auth`` names it), or ``None``
        when no ZAP handler authenticated it (no CURVE)."""
        self.acquire(deadline)
        try:
            sock = self.socket
            while True:
                try:
                    first = sock.recv(zmq.NOBLOCK, copy=False)
                    break
                except zmq.Again:
                    self.wait(zmq.POLLIN, deadline, "recv")
            frames = [first.bytes]
            more = first.more
            while more:  # a message's parts arrive together: the rest is there
                part = sock.recv(zmq.NOBLOCK, copy=False)
                frames.append(part.bytes)
                more = part.more
            try:
                found = first.get("User-Id")
                user: str | None = found if isinstance(found, str) else None
            except zmq.ZMQError:  # no such property: nobody authenticated the connection
                user = None
            return frames, user
        finally:
            self.lock.release()


class Router(PatternSocket):
    """Asynchronous server: ``recv_multipart()`` returns ``[identity, ...]``; a reply sent as
    ``[identity, ...]`` goes to that peer. ``mandatory=True`` (ZMQ_ROUTER_MANDATORY) makes a
    reply to a vanished or full peer an error instead of a silent drop. ``max_request_bytes``
    bounds what it receives (ZMQ_MAXMSGSIZE: libzmq disconnects a peer that sends more)
    without bounding its replies, unlike ``max_message_bytes``. Binds by default."""

    socket_type: ClassVar[int] = zmq.ROUTER
    wire_class: ClassVar[WireClass] = RouterWire
    default_bind: ClassVar[bool] = True
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return ("mandatory", "max_request_bytes")

    def recv_request(self, timeout: float | None = None) -> tuple[list[bytes], str | None]:
        """``recv_multipart`` and who sent it: the ZAP user id of its connection (under CURVE
        the client's Z85 public key; ``None`` without CURVE). What a server that binds
        names or state to a client key needs, as the relay binds reader names."""
        self._check_can_recv()
        wire = self._wire
        assert isinstance(wire, RouterWire)  # ``wire_class``
        return wire.receive_request(timeout_deadline(timeout))

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        if options.get("mandatory"):
            sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if options.get("max_request_bytes") is not None:
            # before bind: a listener copies the socket's options when it is created
            sock.setsockopt(zmq.MAXMSGSIZE, positive_int("max_request_bytes", options["max_request_bytes"]))
