"""A load generator: numbered sensor readings sent over ZeroMQ at a chosen rate.

Why it lives in the package, beside the command line: the ``spark-zmq produce`` command, the example jobs, their
tests and the benchmarks all need the same realistic, checkable stream, and copies of a
producer loop drift apart. Every message carries a sequence number (``seq``) so that a
consumer can prove it saw each message exactly once.

Formats, one message each:

* ``raw``: ``seq`` as 8 big-endian bytes, padded with ``x`` to ``size`` bytes;
* ``text``: ``"<seq>,<sensor>,<ts>,<reading>"`` (UTF-8);
* ``json``: ``{"seq", "sensor", "ts", "reading"}``;
* ``arrow``: an Arrow IPC stream of ``rows_per_message`` readings with columns
  ``seq`` (int64), ``sensor`` (string), ``ts`` (float64, epoch seconds), ``reading`` (float64).

With ``pattern="pub"`` each message goes out as ``[topic, payload]``, topics taken in turn
from ``topics``. With ``curve`` (a ``spark_zmq.patterns.curve.Curve``) the socket uses
CURVE security; a CURVE client whose every handshake the server refused fails fast with
``HandshakeRejectedError`` instead of lingering over messages that can never leave. This
module never imports Spark.
"""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import zmq

from ..errors import SparkZmqError
from ..patterns import Heartbeat, Pub, Push, Scatter, SendTimeoutError, parse_endpoints
from ..patterns.curve import Curve

__all__ = ["FORMATS", "PATTERNS", "HandshakeRejectedError", "LoadResult", "payloads", "produce", "ARROW_SCHEMA"]

FORMATS = ("raw", "text", "json", "arrow")
PATTERNS = {"push": Push, "scatter": Scatter, "pub": Pub}
SENSORS = tuple(f"sensor-{i:02d}" for i in range(8))
ARROW_SCHEMA = pa.schema(
    [("seq", pa.int64()), ("sensor", pa.string()), ("ts", pa.float64()), ("reading", pa.float64())]
)
_SEQ = struct.Struct(">q")


class NoPeerError(SparkZmqError, ConnectionError):
    """No peer completed a connection within ``peer_wait`` seconds of the last send: what
    was queued for one was dropped when the socket closed."""

    retriable = True  # a peer may come up


class HandshakeRejectedError(SparkZmqError, ConnectionError):
    """Every CURVE handshake of the producer was rejected, so nothing it sent can arrive.

    Why an error rather than a result: ZeroMQ queues messages before the handshake, so
    without this check a refused client would report them sent and then drop them."""


@dataclass(frozen=True)
class LoadResult:
    """What a run sent: messages, rows (= messages except for ``arrow``), payload bytes, seconds;
    with CURVE, how many handshakes were rejected and the last reason (``None`` if none)."""

    messages: int
    rows: int
    bytes: int
    seconds: float
    rejected_handshakes: int = 0
    last_rejection: str | None = None

    @property
    def rate(self) -> float:
        """Messages per second over the run."""
        return self.messages / self.seconds if self.seconds > 0 else float("inf")


def _check(format: str, size: int, rows_per_message: int) -> None:
    if format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; valid formats: {', '.join(FORMATS)}")
    if size < _SEQ.size:
        raise ValueError(f"size must be >= {_SEQ.size} bytes (the sequence number), got {size}")
    if rows_per_message < 1:
        raise ValueError(f"rows_per_message must be >= 1, got {rows_per_message}")


def payloads(
    format: str, count: int, *, size: int = 100, rows_per_message: int = 1000, start: int = 0, seed: int = 7
) -> Iterator[tuple[bytes, int]]:
    """``count`` messages of ``format`` as ``(payload, rows)``, sequence numbers from ``start``.

    Readings are random (seeded, so reruns send the same values) around 20.0.
    """
    _check(format, size, rows_per_message)
    rng = random.Random(seed)
    if format == "raw":
        pad = b"x" * (size - _SEQ.size)
        for seq in range(start, start + count):
            yield _SEQ.pack(seq) + pad, 1
    elif format in ("text", "json"):
        for seq in range(start, start + count):
            sensor, reading = SENSORS[seq % len(SENSORS)], round(rng.gauss(20.0, 5.0), 2)
            if format == "text":
                yield f"{seq},{sensor},{time.time():.6f},{reading}".encode(), 1
            else:
                yield json.dumps({"seq": seq, "sensor": sensor, "ts": time.time(), "reading": reading}).encode(), 1
    else:
        sensors = pa.array([SENSORS[i % len(SENSORS)] for i in range(rows_per_message)])
        for message in range(count):
            first = start + message * rows_per_message
            batch = pa.record_batch(
                [
                    pa.array(range(first, first + rows_per_message), pa.int64()),
                    sensors,
                    pa.array([time.time()] * rows_per_message, pa.float64()),
                    pa.array([round(rng.gauss(20.0, 5.0), 2) for _ in range(rows_per_message)]),
                ],
                schema=ARROW_SCHEMA,
            )
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, ARROW_SCHEMA) as writer:
                writer.write_batch(batch)
            yield sink.getvalue().to_pybytes(), rows_per_message


# how often a CURVE client whose send waits checks whether every endpoint refused it
_REFUSAL_CHECK_S = 0.25


class _Handshakes:
    """A CURVE socket's handshake outcomes so far: ``accepted`` (from the monitor's events)
    and the watch's rejections, against the number of endpoints."""

    def __init__(self, watch, peers: int) -> None:
        self.watch, self.peers, self.accepted = watch, peers, 0

    def poll(self, timeout: float = 0.0) -> None:
        """Take the monitor's pending events, waiting up to ``timeout`` seconds for one."""
        self.accepted += len(self.watch.poll(timeout))

    @property
    def all_refused(self) -> bool:
        """Every endpoint refused the client and none accepted it: nothing queued can leave."""
        return not self.accepted and self.watch.rejected >= self.peers

    def error(self, messages: int) -> HandshakeRejectedError:
        return HandshakeRejectedError(
            f"{self.watch.rejected} CURVE handshake(s) rejected and none accepted, so none of the {messages} "
            f"messages can be delivered; last: {self.watch.last_rejection}"
        )


def produce(
    endpoints: str,
    *,
    pattern: str = "push",
    format: str = "json",
    count: int = 1000,
    rate: float | None = None,
    size: int = 100,
    rows_per_message: int = 1000,
    topics: Sequence[str] = ("sensors",),
    hwm: int = 10_000,
    send_timeout: float | None = None,
    start: int = 0,
    linger: float = 30.0,
    peer_wait: float = 300.0,
    on_progress: Callable[[int], None] | None = None,
    stop: Callable[[], bool] | None = None,
    curve: Curve | None = None,
    heartbeat: Heartbeat | None = None,
) -> LoadResult:
    """Send ``count`` messages to ``endpoints`` (push/scatter connect and pub binds by
    default; ``@``/``>`` choose) and return what was sent (``seconds`` includes waiting for
    delivery). ``rate`` (messages/s) paces the load; ``None`` sends as fast as ZeroMQ takes it. ``push`` and ``scatter`` block while peers are absent or full (at most
    ``send_timeout`` seconds per message, then ``TimeoutError``); ``pub`` drops for slow
    subscribers, as PUB does. ``on_progress(sent)`` is called every few hundred messages;
    ``stop()`` returning true ends the run early. The socket lingers up to ``linger`` seconds
    on close so that queued messages still leave (libzmq drops them after that).

    ``push`` and ``scatter`` queue up to ``hwm`` messages before any peer is there (a
    producer started before the query that binds). A run whose messages no peer has taken
    yet waits up to ``peer_wait`` seconds after its last send for its first peer, and only
    then lingers; with no peer by then it raises ``NoPeerError``, saying the queued messages
    were dropped, instead of reporting them sent.

    ``curve`` makes the socket a CURVE client or server. A client that has seen no
    successful handshake by its last send waits (up to ``peer_wait``, as above) for the
    handshakes to end, since nothing it queued can leave before one does; if every endpoint refused it,
    the run ends at once with ``HandshakeRejectedError``. Rejections are counted in the
    result either way.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown pattern {pattern!r} for producing; valid patterns: {', '.join(PATTERNS)}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0 messages/s (or None for as fast as possible), got {rate}")
    _check(format, size, rows_per_message)
    # parsed here for a clear error before any socket exists
    peers = len(parse_endpoints(endpoints, default_bind=PATTERNS[pattern].default_bind))
    topic_bytes = [t.encode() for t in topics] or [b""]
    messages = rows = total_bytes = 0
    started = time.monotonic()
    # An own context: terminating it is what waits (up to ``linger``) for queued messages
    # to leave; a process that exits without it drops them.
    context = zmq.Context()
    client = curve is not None and not curve.is_server
    # the monitor tells when a peer is there (a handshake succeeded) and, with CURVE, which refused
    waits_for_peer = pattern != "pub"
    options: dict = {"curve": curve} if curve is not None else {}
    if curve is not None or waits_for_peer:
        options["monitor"] = zmq.EVENT_HANDSHAKE_SUCCEEDED
    options["heartbeat"] = heartbeat
    rejected, last_rejection = 0, None
    try:
        with PATTERNS[pattern](
            endpoints, hwm=hwm, linger=int(linger * 1000), reconnect_ivl=50, context=context, **options
        ) as sock:
            outcomes = _Handshakes(sock.handshakes, peers) if sock.handshakes is not None else None
            refusals = outcomes if client else None

            def send_all(batch: list[bytes]) -> None:
                """``send_many``; for a CURVE client, in slices that end with the refusal
                instead of blocking for good: a refused connection never takes what is queued."""
                if refusals is None:
                    sock.send_many(batch, timeout=send_timeout)
                    return
                deadline = None if send_timeout is None else time.monotonic() + send_timeout
                while batch:
                    slice_s = (
                        _REFUSAL_CHECK_S
                        if deadline is None
                        else min(_REFUSAL_CHECK_S, max(0.0, deadline - time.monotonic()))
                    )
                    try:
                        sock.send_many(batch, timeout=slice_s)
                        return
                    except SendTimeoutError as exc:
                        sent = exc.sent
                        batch = batch[sent:]
                        if sent and send_timeout is not None:
                            # send_timeout bounds the wait for each message, as send_many's does
                            deadline = time.monotonic() + send_timeout
                        refusals.poll()
                        if refusals.all_refused:
                            sock.close(linger=0)
                            raise refusals.error(messages) from None
                        if deadline is not None and time.monotonic() >= deadline:
                            raise

            try:
                batch: list[bytes] = []
                for payload, payload_rows in payloads(
                    format, count, size=size, rows_per_message=rows_per_message, start=start
                ):
                    if pattern == "pub":
                        sock.send([topic_bytes[messages % len(topic_bytes)], payload])
                    elif rate is None:
                        batch.append(payload)
                        if len(batch) >= 256:
                            send_all(batch)
                            batch = []
                    else:
                        send_all([payload])
                    messages += 1
                    rows += payload_rows
                    total_bytes += len(payload)
                    if messages % 256 == 0:
                        if outcomes is not None:
                            outcomes.poll()
                        if on_progress is not None:
                            on_progress(messages)
                        if stop is not None and stop():
                            break
                    if rate is not None:
                        ahead = started + messages / rate - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)  # pacing the load, not synchronisation
                if batch:
                    send_all(batch)
            except TimeoutError:
                # the run has failed: what is still queued gets send_timeout to leave, not the
                # whole linger (a peer that took nothing for that long is unlikely to take it)
                if send_timeout is not None:
                    sock.close(linger=int(min(linger, send_timeout) * 1000))
                raise
            if outcomes is not None:
                outcomes.poll()
                stopped = False
                if waits_for_peer and not outcomes.accepted and messages:
                    # queued messages leave only once a peer is there: wait for the first (a
                    # query still starting) up to peer_wait, then linger for the delivery; a
                    # CURVE refusal that comes meanwhile (a busy server) is still reported
                    deadline = time.monotonic() + peer_wait
                    while (
                        not outcomes.accepted and not (client and outcomes.all_refused) and time.monotonic() < deadline
                    ):
                        outcomes.poll(min(0.5, max(0.0, deadline - time.monotonic())))
                        if stop is not None and stop():
                            stopped = True
                            break
                rejected, last_rejection = outcomes.watch.rejected, outcomes.watch.last_rejection
                if client and outcomes.all_refused:
                    sock.close(linger=0)  # nothing queued can ever leave: do not linger over it
                    raise outcomes.error(messages)
                if waits_for_peer and not outcomes.accepted and messages and not stopped:
                    sock.close(linger=0)
                    raise NoPeerError(
                        f"no peer connected to {endpoints} within {peer_wait:g} s of the last send (peer_wait): the "
                        f"{messages} messages queued for one were dropped; start the receiving side first, or wait "
                        "longer"
                    )
                sock.close(linger=int(linger * 1000))
    finally:
        context.term()
    if on_progress is not None:
        on_progress(messages)
    return LoadResult(messages, rows, total_bytes, time.monotonic() - started, rejected, last_rejection)
