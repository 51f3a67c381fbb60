"""``spark.read.format("zmq")``: a bounded read of what arrives now.

Receives on the driver while Spark plans the read, until ``maxMessages`` messages or
``timeout`` seconds without a message, whichever first, then hands the messages to the
read tasks inside their partitions. A ZeroMQ stream cannot be re-read, so every action
that plans the DataFrame again receives again: ``cache()`` it to reuse one read.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..ingest.batches import messages_to_batch
from ..ingest.receiver import open_channel_socket
from ..ingest.spool_format import SPOOL_SCHEMA
from ..options import SourceOptions
from ..task_gc import freeze_long_lived
from .decoders import decoder_for
from .partitions import InlineMessages
from .read_task import decoded_rows

__all__ = ["ZmqBatchReader", "receive_bounded"]

_MESSAGES_PER_PARTITION = 50_000


def _numbered(first_offset: int, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(first offset, batch)`` of consecutive batches starting at ``first_offset``."""
    offset = first_offset
    for batch in batches:
        yield offset, batch
        offset += batch.num_rows


def receive_bounded(options: SourceOptions) -> list[tuple[list[bytes], list[bytes | None] | None]]:
    """Messages per channel, until ``max_messages`` in all or ``timeout`` s of silence."""
    sockets = [
        open_channel_socket(
            options.pattern,
            endpoint,
            hwm=options.hwm,
            topics=options.topics,
            max_message_bytes=options.max_message_bytes,
            curve=options.curve,
            heartbeat=options.heartbeat,
            rcvbuf=options.receive_buffer_bytes,
            tuning=options.tuning,
        )
        for endpoint in options.endpoints
    ]
    values: list[list[bytes]] = [[] for _ in sockets]
    topics: list[list[bytes | None] | None] = [None for _ in sockets]
    try:
        total = 0
        idle_deadline = time.monotonic() + options.timeout
        while total < options.max_messages:
            remaining = idle_deadline - time.monotonic()
            if remaining <= 0:
                break
            for socket in sockets:
                if socket.handshakes is not None:
                    socket.handshakes.poll()  # see HandshakeWatch: a monitor must be read
            got = 0
            for channel, socket in enumerate(sockets):
                if total + got >= options.max_messages:
                    break
                try:
                    new_values, new_topics = socket.recv_values(options.max_messages - total - got, timeout=0)
                except TimeoutError:
                    continue
                if new_topics is not None or topics[channel] is not None:
                    old = topics[channel] or [None] * len(values[channel])
                    topics[channel] = old + (new_topics or [None] * len(new_values))
                values[channel].extend(new_values)
                got += len(new_values)
            if got:
                total += got
                idle_deadline = time.monotonic() + options.timeout
                continue
            # nothing anywhere: wait for the next message, a slice of each socket in turn
            # (sockets of two kinds, libzmq's and the ZMTP engine's, share no poller)
            wait_s = min(0.1, remaining) / len(sockets)
            for socket in sockets:
                if socket.poll_recv(wait_s):
                    break
    finally:
        for socket in sockets:
            if socket.handshakes is not None:
                socket.handshakes.poll()  # logs the kinds of rejected handshakes (CURVE)
            socket.close(linger=0)
    return list(zip(values, topics))


def _to_ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SPOOL_SCHEMA) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


class ZmqBatchReader(DataSourceReader):
    """Bounded batch read; partitions carry the received messages."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        decoder_for(options, schema)  # validate early

    def partitions(self) -> Sequence[InputPartition]:
        now_us = time.time_ns() // 1000
        parts: list[InputPartition] = []
        for channel, (values, topics) in enumerate(receive_bounded(self.options)):
            pieces = max(self.options.min_partitions or 1, math.ceil(len(values) / _MESSAGES_PER_PARTITION))
            step = max(1, math.ceil(len(values) / pieces))
            for lo in range(0, len(values), step):
                piece_topics = None if topics is None else topics[lo : lo + step]
                batch = messages_to_batch(values[lo : lo + step], piece_topics, self.options.format, now_us)
                parts.append(InlineMessages(channel, lo, _to_ipc(batch)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, InlineMessages):  # Spark's placeholder when nothing arrived
            return
        freeze_long_lived()
        yield from decoded_rows(
            decoder_for(self.options, self.schema),
            partition.channel,
            _numbered(partition.first_offset, pa.ipc.open_stream(pa.py_buffer(partition.ipc))),
        )
