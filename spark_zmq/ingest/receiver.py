"""Receivers: one socket and one thread per ingest channel, for the life of the query.

Why sockets live as long as the query: closing a PULL socket discards its queue
(30/PIPELINE), so a socket per micro-batch would lose messages at every boundary. The
receiver drains its socket in batches into the spool; when the spool is full it stops
reading, ZeroMQ's high-water marks fill, and PUSH producers block: backpressure instead
of loss. Memory stays bounded: one batch in flight (``batch_bytes``) plus ZeroMQ's queue
(``hwm`` messages).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..patterns import ReceivingWire, SocketClosedError, receiving_wire
from ..patterns.curve import Curve
from ..patterns.deadlines import IDLE_SLICE_S
from ..patterns.endpoints import Endpoint
from ..patterns.heartbeat import Heartbeat
from ..patterns.message_block import MessageBlock
from ..patterns.tuning import SocketTuning
from .batches import block_to_batch, messages_to_batch
from .spool import ChannelLog
from .spool_budget import SpoolBudget

__all__ = ["Receiver", "open_channel_socket", "messages_to_batch"]

log = logging.getLogger(__name__)

#: how long a receive waits for a message before the loop looks around (CURVE's handshake
#: count): a socket's idle slice, since ``stop`` interrupts it, so an idle receiver sleeps
#: in the kernel meanwhile
_POLL_S = IDLE_SLICE_S


def open_channel_socket(
    pattern: str,
    endpoint: Endpoint,
    *,
    hwm: int,
    topics: list[str],
    max_message_bytes: int | None = None,
    curve: Curve | None = None,
    heartbeat: Heartbeat | None = None,
    rcvbuf: int | None = None,
    tuning: SocketTuning | None = None,
) -> ReceivingWire:
    """The socket of one channel. Opened on the caller's thread so that a bind error (port
    in use) surfaces in the Spark call that started the receivers, with its message.
    ``max_message_bytes``: a peer that sends a larger frame (or, on the engine's ``pull``,
    a larger multipart message) is disconnected, as libzmq's ZMQ_MAXMSGSIZE does.
    ``curve``: CURVE security (the socket then counts rejected handshakes). Which wire
    serves the pattern (the package's engine or libzmq) is the pattern layer's choice
    (``patterns.wires.receiving_wire``)."""
    options: dict[str, Any] = {"hwm": hwm, "linger": 0, "heartbeat": heartbeat, "rcvbuf": rcvbuf}
    if max_message_bytes is not None:
        options["max_message_bytes"] = max_message_bytes
    if curve is not None:
        options["curve"] = curve
    if tuning is not None:  # the zmq.* options
        options["tuning"] = tuning
    if pattern == "sub":
        options["topics"] = topics or None
    return receiving_wire(pattern, [str(endpoint)], **options)


class Receiver:
    """Drains one channel's socket into its spool log on a daemon thread.

    Nothing a peer sends can stop it: the spool batch is built from bytes without parsing
    them (an Arrow message's row count is read from its metadata, and a malformed one
    counts as one row for the decoder to report). What can stop a write is the disk: a
    failed append (disk full) publishes nothing, and the receiver keeps the batch, stops
    reading (so ZeroMQ's high-water mark holds producers back) and retries, logging the
    failure once. A stop drains what the socket already holds into the spool before it
    closes the socket, since closing discards a receiving socket's queue.
    """

    #: how long the receiver waits before retrying a failed append (disk full)
    retry_s = 1.0
    #: after a receive that emptied the socket, the least time from one spool write's start
    #: to the next. Why: at a modest rate the socket empties after every few messages, and a
    #: write per few messages (an Arrow batch, a record, an index entry each) cost the
    #: receiving process more CPU than the messages (docs/performance.md, "Measured design
    #: choices"). 2 ms is far below a micro-batch's
    #: duration; a receive cut short by ``batch_messages`` (the socket still holds more)
    #: or ``batch_bytes`` never waits, so a fast producer is not held back.
    min_write_interval_s = 0.002

    def __init__(
        self,
        socket: ReceivingWire,
        log: ChannelLog,
        budget: SpoolBudget,
        fmt: str,
        *,
        batch_messages: int = 10_000,
        batch_bytes: int = 8 << 20,
    ) -> None:
        self.socket = socket
        self.log = log
        self.budget = budget
        self.fmt = fmt
        self.batch_messages = batch_messages
        self.batch_bytes = batch_bytes
        self.error: BaseException | None = None
        #: the error of the last failed append while it keeps failing (cleared on success)
        self.write_error: OSError | None = None
        self.last_receive = time.monotonic()
        #: records this receiver appended to the spool (a write per received batch)
        self.writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"zmq-receiver-{log.channel}", daemon=True)

    def start(self) -> Receiver:
        # silence counts from the start: what waited in the socket before it is not idleness
        # (a Trigger.AvailableNow drain reads this across a process boundary, via the relay)
        self.last_receive = time.monotonic()
        self._thread.start()
        return self

    def _spool(self, block: MessageBlock) -> None:
        """Append one received batch, retrying while the disk refuses it (until a stop)."""
        batch = block_to_batch(block, self.fmt, time.time_ns() // 1000)
        while True:
            try:
                self.log.append(batch)
            except OSError as exc:
                if self.write_error is None:
                    log.error(
                        "channel %d: cannot write to the spool (%s); holding %d messages and retrying every "
                        "%.0f s, producers are held back meanwhile",
                        self.log.channel,
                        exc,
                        block.count,
                        self.retry_s,
                    )
                self.write_error = exc
                if self._stop.wait(self.retry_s):
                    raise
                continue
            if self.write_error is not None:
                log.warning("channel %d: the spool accepts writes again", self.log.channel)
                self.write_error = None
            return

    @property
    def broken_connections(self) -> int:
        """Connections of this channel that broke (not closed in order by their producer),
        with what the producer had in flight on them; counted on the package's engine
        (``pull`` without CURVE, ``gather``), 0 on libzmq's sockets, which do not say."""
        return self.socket.broken_connections

    @property
    def rejected_handshakes(self) -> int:
        """Handshakes this channel's socket refused or failed (CURVE), so far."""
        return self.socket.handshakes.rejected if self.socket.handshakes is not None else 0

    def _run(self) -> None:
        watch = self.socket.handshakes
        written_at = float("-inf")  # when the last spool write started
        emptied = False  # whether the last receive took everything the socket held
        try:
            while not self._stop.is_set():
                room = self.budget.wait_for_room(self.log, self._stop, idle=watch.poll if watch is not None else None)
                if self._stop.is_set():
                    break
                if watch is not None:
                    watch.poll()  # count and log rejected handshakes (CURVE)
                pause = written_at + self.min_write_interval_s - time.monotonic()
                if emptied and pause > 0 and self._stop.wait(pause):
                    break  # (the messages that came meanwhile are the stop's drain's)
                try:
                    # at most the room left (payload bytes; the record adds its framing)
                    limit = min(self.batch_bytes, room)
                    block = self.socket.recv_block(self.batch_messages, timeout=_POLL_S, max_bytes=limit)
                except TimeoutError:
                    emptied = False  # nothing came for a while: the next message is written at once
                    continue
                if not block.count:  # only discarded (multipart on GATHER) messages arrived
                    continue
                # cut short by neither limit: the socket was empty
                emptied = block.count < self.batch_messages and block.nbytes < limit
                written_at = time.monotonic()
                self._spool(block)
                self.writes += 1
                self.last_receive = time.monotonic()
        except SocketClosedError:
            pass
        except BaseException as exc:  # surfaced to Spark by the stream reader
            log.exception("receiver of channel %d failed", self.log.channel)
            self.error = exc

    def drain(self, quiet_s: float = 0.05, limit_s: float = 2.0) -> int:
        """Spool what the socket holds, and what libzmq's I/O thread still moves in from the
        network behind it, until nothing arrives for ``quiet_s`` (at most ``limit_s`` in
        all, since a producer may never stop); returns the count."""
        drained = 0
        deadline = time.monotonic() + limit_s
        while True:
            wait = min(quiet_s, deadline - time.monotonic())
            if wait <= 0:
                return drained
            try:
                block = self.socket.recv_block(self.batch_messages, timeout=wait, max_bytes=self.batch_bytes)
            except (TimeoutError, SocketClosedError):
                return drained
            if not block.count:
                continue
            self.log.append(block_to_batch(block, self.fmt, time.time_ns() // 1000))
            drained += block.count

    def stop(self, timeout: float = 5.0, drain: bool = True) -> None:
        """Stop receiving, spool what the socket already holds (``drain``), then close it."""
        self._stop.set()
        self.socket.interrupt()  # the thread may wait in a receive
        self._thread.join(timeout)
        try:
            if drain and not self._thread.is_alive() and self.error is None:
                drained = self.drain()
                if drained:
                    log.info("channel %d: spooled %d queued messages before closing", self.log.channel, drained)
        except OSError as exc:
            log.error("channel %d: could not spool the socket's queue at stop (%s); it is lost", self.log.channel, exc)
        finally:
            self.socket.close(linger=0)
