"""One write task's socket: connect, wait for peers, send with a bound, flush before commit.

The pattern layer chooses the wire (``patterns.wires.sending_wire``) and the sender holds
the socket as the contract's ``SendingWire``. ``push`` and ``scatter`` run on the pattern
layer's own ZMTP engine: when a consumer's connection breaks mid-write, what the task still
held for it, and what the consumer's TCP had not acknowledged, goes to the consumers still
there (or to the same endpoint when it comes back). A task commits only once every message
was acknowledged by a consumer's TCP (the socket's ``unsent`` and ``unconfirmed`` after
``close``), within ``sendTimeoutMs``; otherwise it fails, saying how many were not, and
Spark retries.

``pub`` runs on libzmq's XPUB, with a ZeroMQ context per task: ``Context.term()`` is how
libzmq tells a sender that its queued messages have left the process.
"""

from __future__ import annotations

import errno
import time

import zmq

from ..errors import SparkZmqError
from ..options import SinkOptions
from ..patterns import SendingWire, SendTimeoutError, sending_wire

__all__ = ["TaskSender", "SinkTimeoutError", "SinkBindError"]


class SinkTimeoutError(SparkZmqError, TimeoutError):
    """A write task could not hand its messages to a peer within ``sendTimeoutMs``."""

    retriable = True  # a peer may connect or drain: Spark's task retry sends again


class SinkBindError(SparkZmqError, OSError):
    """A write task could not bind an address of option ``endpoints``: it is in use, most
    often by another write task of the same DataFrame on this host."""


def bind_conflict(options: SinkOptions, exc: OSError) -> SinkBindError | None:
    """The clear error for a bind that failed because its address is in use, or None.

    Why the sink says more than "address in use": every write task opens its own socket, so
    an endpoint that binds takes one task, hence one partition, per host; the usual cause is
    the DataFrame's other partitions, and Spark's Python writer never tells the driver how
    many there are, so only the task that loses the race can say so."""
    binds = [e for e in options.endpoints if e.bind]
    if exc.errno != errno.EADDRINUSE or not binds:
        return None
    named = [e for e in binds if e.address in str(exc)] or binds
    addresses = ", ".join(e.address for e in named)
    return SinkBindError(
        errno.EADDRINUSE,
        (
            f"option 'endpoints' binds {addresses} ('@'), and this write task cannot: the address is in use, by "
            "another write task of this DataFrame on this host or by another process. Each write task opens its "
            "own socket, so a bind endpoint takes one partition per host: write df.coalesce(1) (or "
            "df.repartition(1)), or connect instead (an endpoint without '@', or '>tcp://...') to a bound consumer "
            f"or a broker. ({exc.strerror or exc})"
        ),
    )


class TaskSender:
    """Sends a task's messages over one socket, round-robin (push/scatter) or broadcast (pub)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.timeout_s = options.send_timeout_ms / 1000.0
        self.where = ", ".join(map(str, options.endpoints))
        self.context: zmq.Context | None = None
        common: dict = {"hwm": options.hwm, "linger": options.send_timeout_ms, "heartbeat": options.heartbeat}
        if options.curve is not None:
            common["curve"] = options.curve
        if options.tuning is not None:  # the zmq.* options, over the choices below
            common["tuning"] = options.tuning
        self.socket: SendingWire
        try:
            self._open(options, common)
        except OSError as exc:
            if self.context is not None:
                self.context.term()
            clear = bind_conflict(options, exc)
            if clear is None:
                raise
            raise clear from exc
        self.sent = 0
        #: pub only: messages dropped because a subscriber's queue was at the high-water mark
        self.dropped = 0

    def _open(self, options: SinkOptions, common: dict) -> None:
        """The task's socket (``self.socket``), bound and connected to every endpoint."""
        endpoints = [str(e) for e in options.endpoints]
        if options.pattern == "pub":
            # XPUB is PUB on the wire; it also shows us the subscriptions, so we can wait
            # for subscribers before publishing (PUB/SUB's slow-joiner problem). NODROP
            # makes libzmq tell us when a subscriber is full, so the drop is ours and counted.
            self.context = zmq.Context()
            self.socket = sending_wire("pub", endpoints, nodrop=True, context=self.context, **common)
        else:
            # immediate: queue only to peers whose handshake completed, so an absent peer
            # blocks the send (and times out with a clear error) instead of filling a queue
            # nobody reads; a peer that leaves hands its queue back to the others.
            # confirm: close() waits until the consumers' TCP acknowledged every message.
            self.socket = sending_wire(
                options.pattern,
                endpoints,
                immediate=True,
                confirm=True,
                monitor=zmq.EVENT_HANDSHAKE_SUCCEEDED,
                **common,
            )

    def wait_for_peers(self) -> None:
        """Wait until every connect endpoint has a peer (up to 5 s, so the load spreads
        round-robin), then go on with whoever is there; fail if nobody came within
        ``sendTimeoutMs``. A peer counts once its handshake completed (push/scatter, from
        the socket monitor) or once it subscribed (pub, from the XPUB's subscriptions)."""
        expected = sum(1 for e in self.options.endpoints if not e.bind) or 1
        deadline = time.monotonic() + self.timeout_s
        spread_deadline = time.monotonic() + min(5.0, self.timeout_s)
        if self.options.pattern == "pub":
            what, next_peer = "subscribed", self._next_subscription
        else:
            what, next_peer = "accepted a connection", self._next_handshake
        seen = 0
        while seen < expected:
            now = time.monotonic()
            if seen and now >= spread_deadline:
                return
            if now >= deadline:
                raise SinkTimeoutError(
                    f"no ZeroMQ peer {what} at {self.where} within sendTimeoutMs="
                    f"{self.options.send_timeout_ms}; is the consumer running?" + self._rejection_note()
                )
            if next_peer((spread_deadline if seen else deadline) - now):
                seen += 1

    def _next_handshake(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        watch = self.socket.handshakes
        assert watch is not None  # push/scatter sockets are made with a monitor (``__init__``)
        while True:
            if watch.poll(max(0.001, deadline - time.monotonic())):
                return True
            if time.monotonic() >= deadline:
                return False

    def _check_rejections(self) -> None:
        if self.socket.handshakes is not None:
            self.socket.handshakes.poll()

    @property
    def rejected_handshakes(self) -> int:
        """Handshakes that failed on this task's socket (CURVE), so far."""
        self._check_rejections()
        return self.socket.handshakes.rejected if self.socket.handshakes is not None else 0

    def _rejection_note(self) -> str:
        """Why no peer counts, when CURVE refused one: the last rejection, and how many."""
        self._check_rejections()
        watch = self.socket.handshakes
        if watch is None or not watch.rejected:
            return ""
        if self.options.curve is None:  # scatter: a peer of the wrong socket type, for one
            return f" handshakes failed {watch.rejected} times; the last one: {watch.last_rejection}"
        return (
            f" CURVE handshakes failed {watch.rejected} times; the last one: {watch.last_rejection} "
            "(check curveCertificate, curveServerKey and the server's authorized keys)"
        )

    def _next_subscription(self, wait_s: float) -> bool:
        try:
            self.socket.recv(timeout=max(0.001, wait_s))
            return True
        except TimeoutError:
            return False

    def send(self, messages: list[tuple[bytes | None, bytes]]) -> None:
        """Send ``(topic, payload)`` messages (``pub``); topicless ones go through the batch path.

        ``pub`` never waits: as PUB does at the high-water mark, a message that a full
        subscriber cannot take is dropped, but here for every subscriber (XPUB_NODROP
        refuses it whole) and counted in ``dropped``, never silently."""
        # Read the socket monitor on every call: libzmq's I/O thread blocks on a monitor
        # whose queue is full, which would stall this context's every connection.
        self._check_rejections()
        if self.options.pattern == "pub":
            for topic, payload in messages:
                try:
                    self.socket.send([topic or b"", payload], timeout=0)
                    self.sent += 1
                except TimeoutError:
                    self.dropped += 1
            return
        if all(topic is None for topic, _ in messages):
            self.send_payloads([payload for _, payload in messages])
            return
        try:
            for topic, payload in messages:
                self.socket.send(payload if topic is None else [topic, payload], timeout=self.timeout_s)
                self.sent += 1
        except TimeoutError:
            raise self._timed_out() from None

    def send_payloads(self, payloads: list[bytes]) -> None:
        """Send single-part messages in order, through the socket's batch path (``push``
        and ``scatter``, whatever the format: one call per batch of rows, no tuple per message)."""
        self._check_rejections()
        try:
            self.sent += self.socket.send_many(payloads, timeout=self.timeout_s)
        except SendTimeoutError as exc:
            self.sent += exc.sent
            raise self._timed_out() from None

    def _timed_out(self) -> SinkTimeoutError:
        return SinkTimeoutError(
            f"no ZeroMQ peer at {self.where} took a message within sendTimeoutMs="
            f"{self.options.send_timeout_ms} ({self.sent} sent by this task so far); "
            "the consumers are absent or not keeping up" + self._rejection_note()
        )

    @property
    def lost_peers(self) -> int:
        """push/scatter: consumer connections that broke while this task wrote."""
        return self.socket.lost_peers

    @property
    def resent(self) -> int:
        """push/scatter: messages sent again because a consumer that left had not
        acknowledged them (tcp)."""
        return self.socket.resent

    def flush_and_close(self) -> None:
        """Return once every message reached a consumer (push/scatter: acknowledged by its
        TCP; pub: left the process); fail if that takes longer than ``sendTimeoutMs``."""
        started = time.monotonic()
        self.socket.close()
        if self.context is not None:
            self.context.term()
            if self.sent and time.monotonic() - started >= self.timeout_s * 0.95:
                raise SinkTimeoutError(
                    f"could not flush {self.sent} messages to {self.where} within sendTimeoutMs="
                    f"{self.options.send_timeout_ms}; some may not have been delivered"
                )
            return
        sock = self.socket  # push or scatter (pub returned above): the engine counts both
        unsent = sock.unsent
        if unsent:
            raise SinkTimeoutError(
                f"{unsent} of the {self.sent} messages this task queued for {self.where} were not sent within "
                f"sendTimeoutMs={self.options.send_timeout_ms} (no consumer took them)"
            )
        unconfirmed = sock.unconfirmed
        if unconfirmed:
            raise SinkTimeoutError(
                f"{unconfirmed} of the {self.sent} messages this task sent to {self.where} were not acknowledged "
                f"by a consumer's host within sendTimeoutMs={self.options.send_timeout_ms} (a consumer stopped "
                "reading); the task fails so that Spark sends them again"
            )

    def abort(self) -> None:
        self.socket.close(linger=0)
        if self.context is not None:
            self.context.term()
