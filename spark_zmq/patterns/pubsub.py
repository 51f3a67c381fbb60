"""29/PUBSUB: PUB, SUB, XPUB, XSUB.

libzmq carries the RFC's rules (per-subscriber queues, prefix matching on the first frame,
drop at the high-water mark, PUB never blocks). These classes add subscriptions given at
construction (``topics``), helpers to read and send subscription commands on XPUB/XSUB, and
the endpoint syntax: PUB/XPUB bind by default, SUB/XSUB connect by default.

A topic message is usually two frames, ``[topic, payload]``: ``send([topic, payload])`` on
the publisher, ``recv_multipart()`` on the subscriber (``recv()`` returns the payload).

Known libzmq behaviours this layer does not change (documented, tested where observable):

* A SUB/XSUB that *binds* sends its subscriptions to a publisher that connected to it only
  when its application next calls into it (receive or poll; zeromq/libzmq#2267). A
  subscriber that is being read from, like the connector's, is unaffected; one that sits
  idle receives nothing from such a publisher until it is read.
* A SUB/XSUB still delivers what it already holds from a publisher that has disconnected
  (29/PUBSUB says to discard it); as for PULL, received data is not thrown away.
* XPUB does not fair-queue upstream messages (29/PUBSUB says it SHALL): libzmq moves all of
  a readable peer's messages into one internal list at once, so they come out peer by
  peer. Nothing above libzmq can tell the peers apart to restore fairness.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Any, ClassVar

import zmq

from .base import PatternSocket
from .frames import topic_bytes, topics_list
from .socket_options import timeout_deadline
from .wires.contract import WireClass
from .wires.libzmq import LibzmqWire

__all__ = ["Pub", "Sub", "XPub", "XSub", "Topics"]

Topics = None | str | bytes | Iterable[str | bytes]


class Pub(PatternSocket):
    """Broadcast to matching subscribers; never blocks, drops for a subscriber whose queue
    is at the high-water mark (as the RFC requires). Binds by default."""

    socket_type: ClassVar[int] = zmq.PUB
    default_bind: ClassVar[bool] = True
    can_send: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000


class Sub(PatternSocket):
    """Receive messages whose first frame starts with one of ``topics`` (prefix match).

    ``topics``: a str/bytes prefix or an iterable of them; ``None`` or ``""`` = everything.
    Connects by default.
    """

    socket_type: ClassVar[int] = zmq.SUB
    default_bind: ClassVar[bool] = False
    can_recv: ClassVar[bool] = True

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return ("topics",)

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        self.topics: list[bytes] = []
        for topic in topics_list(options.get("topics")):
            sock.setsockopt(zmq.SUBSCRIBE, topic)
            self.topics.append(topic)

    def subscribe(self, topic: str | bytes) -> None:
        """Add a prefix subscription."""
        topic_b = topic_bytes(topic, "topic")
        self._libzmq_wire.set_option(zmq.SUBSCRIBE, topic_b)
        self.topics.append(topic_b)

    def unsubscribe(self, topic: str | bytes) -> None:
        """Remove a prefix subscription added earlier."""
        topic_b = topic_bytes(topic, "topic")
        self._libzmq_wire.set_option(zmq.UNSUBSCRIBE, topic_b)
        if topic_b in self.topics:
            self.topics.remove(topic_b)

    @property
    def _libzmq_wire(self) -> LibzmqWire:
        wire = self._wire
        assert isinstance(wire, LibzmqWire)  # ``Sub``'s wire
        return wire


class XPubWire(LibzmqWire):
    """The libzmq wire of an XPUB: data messages ``recv_subscription`` passed over are kept
    for the next receive, and with NODROP a send waits in short sleeps (see ``wait``)."""

    def configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        #: data messages recv_subscription() passed over, delivered first by recv().
        self.set_aside: deque[list[bytes]] = deque()
        self.nodrop = bool(options.get("nodrop"))

    def wait(self, event: int, deadline: float | None, what: str) -> None:
        """With NODROP, POLLOUT stays true while a subscriber is full (libzmq's XPUB
        always reports room), so a wait on it would spin: back off in short sleeps instead,
        after one zero-time poll that lets libzmq process "room again" commands."""
        if not (self.nodrop and event == zmq.POLLOUT):
            return super().wait(event, deadline, what)
        self.socket.poll(0, zmq.POLLOUT)
        self.state.check_during(what)
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"{self.label}.{what} timed out: a subscriber's queue is full (nodrop)")
        time.sleep(0.001 if deadline is None else max(0.0, min(0.001, deadline - time.monotonic())))

    def recv_one_nowait(self) -> list[bytes] | None:
        if self.set_aside:
            return self.set_aside.popleft()
        return super().recv_one_nowait()

    def recv_subscription(self, deadline: float | None) -> tuple[bool, bytes]:
        """The next subscription command by ``deadline``; data messages set aside."""
        self.acquire(deadline)
        try:
            while True:
                message = LibzmqWire.recv_one_nowait(self)
                if message is None:
                    self.wait(zmq.POLLIN, deadline, "recv_subscription")
                    continue
                if XPub._is_command(message):
                    return message[0][:1] == b"\x01", message[0][1:]
                self.set_aside.append(message)
        finally:
            self.lock.release()


class XPub(PatternSocket):
    """A PUB that delivers subscribe/unsubscribe commands to the application.

    ``recv()`` returns the next incoming message: a raw command (``b"\\x01" + topic`` or
    ``b"\\x00" + topic``) or a data message an XSUB peer sent upstream.
    ``recv_subscription()`` waits for the next command and decodes it to
    ``(subscribed, topic)``; data messages it passes over are kept, in order, for the next
    ``recv()`` (29/PUBSUB: XPUB SHALL deliver incoming messages to its application, so a
    helper must not swallow them). ``verbose=True`` passes duplicate subscriptions through
    too (ZMQ_XPUB_VERBOSE). ``nodrop=True`` (ZMQ_XPUB_NODROP) makes a send wait, or with
    ``timeout=0`` fail with ``TimeoutError``, while any subscriber's queue is full, instead
    of libzmq dropping the message for that subscriber unseen: the way to count drops.
    Binds by default.
    """

    socket_type: ClassVar[int] = zmq.XPUB
    wire_class: ClassVar[WireClass] = XPubWire
    default_bind: ClassVar[bool] = True
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True
    default_linger_ms: ClassVar[int] = 1000

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return ("verbose", "nodrop")

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        if options.get("verbose"):
            sock.setsockopt(zmq.XPUB_VERBOSE, 1)
        if options.get("nodrop"):
            sock.setsockopt(zmq.XPUB_NODROP, 1)

    @staticmethod
    def _is_command(message: list[bytes]) -> bool:
        return len(message) == 1 and message[0][:1] in (b"\x00", b"\x01")

    def recv_subscription(self, timeout: float | None = None) -> tuple[bool, bytes]:
        """Wait for the next subscription command: ``(True, topic)`` or ``(False, topic)``.

        ``timeout`` bounds the whole call (``TimeoutError``), however many data messages
        arrive meanwhile; those stay queued for ``recv()`` (in memory: an application that
        receives data upstream should call ``recv()`` too).
        """
        wire = self._wire
        assert isinstance(wire, XPubWire)  # ``XPub``'s wire
        return wire.recv_subscription(timeout_deadline(timeout))


class XSub(PatternSocket):
    """A SUB that sends messages and subscription commands upstream. Connects by default.

    Starts with no subscription unless ``topics`` is given; ``subscribe``/``unsubscribe``
    send the commands to every connected publisher.
    """

    socket_type: ClassVar[int] = zmq.XSUB
    default_bind: ClassVar[bool] = False
    can_send: ClassVar[bool] = True
    can_recv: ClassVar[bool] = True

    @classmethod
    def _extra_options(cls) -> tuple[str, ...]:
        return ("topics",)

    def _configure(self, sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
        # libzmq keeps an XSUB's subscriptions and replays them to every publisher that
        # attaches later, so they can be sent before bind/connect.
        if options.get("topics") is not None:
            for topic in topics_list(options["topics"]):
                sock.send(b"\x01" + topic)

    def subscribe(self, topic: str | bytes, timeout: float | None = None) -> None:
        self.send(b"\x01" + topic_bytes(topic, "topic"), timeout)

    def unsubscribe(self, topic: str | bytes, timeout: float | None = None) -> None:
        self.send(b"\x00" + topic_bytes(topic, "topic"), timeout)
