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
from typing import Optional

import numpy as np
import pyarrow as pa

from ..patterns import PatternSocket, SocketClosedError, socket_for
from ..patterns.endpoints import Endpoint
from .spool import SPOOL_SCHEMA, ChannelLog

__all__ = ["Receiver", "SpoolBudget", "open_channel_socket", "messages_to_batch"]

log = logging.getLogger(__name__)

_POLL_S = 0.1


class SpoolBudget:
    """The shared disk budget (``maxSpoolBytes``): receivers wait here while it is spent."""

    def __init__(self, max_bytes: int, logs: list[ChannelLog]) -> None:
        self.max_bytes = max_bytes
        self._logs = logs
        self._room = threading.Condition()
        self.waits = 0  # how many times a receiver had to stop reading (observable in tests)

    def used(self) -> int:
        return sum(log.size_bytes for log in self._logs)

    def wait_for_room(self, channel: ChannelLog, stop: threading.Event) -> None:
        if self.used() < self.max_bytes:
            return
        self.waits += 1
        # Close the active segment so a commit can delete it: otherwise the segment being
        # written could be the only one, never released, and the spool would stay full.
        channel.roll()
        with self._room:
            while not stop.is_set() and self.used() >= self.max_bytes:
                self._room.wait(_POLL_S)

    def released(self) -> None:
        with self._room:
            self._room.notify_all()


def open_channel_socket(pattern: str, endpoint: Endpoint, *, hwm: int, topics: list[str]) -> PatternSocket:
    """The socket of one channel. Opened on the caller's thread so that a bind error (port
    in use) surfaces in the Spark call that started the receivers, with its message."""
    cls = socket_for(pattern)
    options: dict = {"hwm": hwm, "linger": 0}
    if pattern == "sub":
        options["topics"] = topics or None
    return cls([str(endpoint)], **options)


def _decode_topics(topics: list[Optional[bytes]]) -> pa.Array:
    array = pa.array(topics, pa.binary())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if t is None else t.decode("utf-8", "replace") for t in topics], pa.string())


def _arrow_rows(value: bytes) -> int:
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(value))
        return max(1, sum(batch.num_rows for batch in reader))
    except (pa.ArrowInvalid, OSError):
        return 1  # malformed: the decoder reports it; count it as one row here


def messages_to_batch(
    values: list[bytes], topics: Optional[list[Optional[bytes]]], fmt: str, received_us: int
) -> pa.RecordBatch:
    """Turn received messages (as ``PatternSocket.recv_values`` returns them) into one
    spool batch. ``topics`` is ``None`` when every message had a single frame."""
    n = len(values)
    topic_array = pa.nulls(n, pa.string()) if topics is None else _decode_topics(topics)
    if fmt == "arrow":
        rows = pa.array([_arrow_rows(v) for v in values], pa.int32())
    else:
        rows = pa.array(np.ones(n, dtype=np.int32))
    timestamps = pa.array(np.full(n, received_us, dtype="datetime64[us]")).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [pa.array(values, pa.large_binary()), topic_array, timestamps, rows], schema=SPOOL_SCHEMA
    )


class Receiver:
    """Drains one channel's socket into its spool log on a daemon thread."""

    def __init__(
        self,
        socket: PatternSocket,
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
        self.error: Optional[BaseException] = None
        self.received = 0
        self.last_receive = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"zmq-receiver-{log.channel}", daemon=True)

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.budget.wait_for_room(self.log, self._stop)
                if self._stop.is_set():
                    break
                try:
                    values, topics = self.socket.recv_values(self.batch_messages, timeout=_POLL_S, max_bytes=self.batch_bytes)
                except TimeoutError:
                    continue
                if not values:  # only discarded (multipart on GATHER) messages arrived
                    continue
                now_us = time.time_ns() // 1000
                self.log.append(messages_to_batch(values, topics, self.fmt, now_us))
                self.received += len(values)
                self.last_receive = time.monotonic()
        except SocketClosedError:
            pass
        except BaseException as exc:  # surfaced to Spark by the stream reader
            log.exception("receiver of channel %d failed", self.log.channel)
            self.error = exc

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        self.socket.close(linger=0)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()
