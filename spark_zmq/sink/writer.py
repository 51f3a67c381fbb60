"""The Spark writer classes: one socket per write task, Arrow batches in, messages out.

Arrow writers (``DataSourceArrowWriter``/``DataSourceStreamArrowWriter``) hand each task
its rows as ``pyarrow.RecordBatch``es, so rows never become Python ``Row`` objects on the
way to the wire. The Spark-facing parts are here: the writer classes, ``task_header``
(which task this is, from ``TaskContext``) and the driver's commit and report. The task
itself (``_write_task``) only joins an encoder (``encoders``, chosen by the options) to
a sender (``send.py``) and reads nothing of Spark, so it runs in a test on real sockets
without a Spark session.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..options import SinkOptions
from ..sparkglue.schemas import arrow_schema
from ..task_gc import freeze_long_lived
from . import commit_record
from .encoders import Encoder, TaskHeader, TopicEncoder, check_schema, encoder_for
from .encoders.base import T
from .send import TaskSender

__all__ = ["ZmqBatchWriter", "ZmqStreamWriter", "SinkCommit"]

log = logging.getLogger(__name__)


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task sent (reported on the driver)."""

    partition: int
    messages: int
    rows: int
    #: pub: messages dropped at a subscriber's high-water mark (0 for push/scatter)
    dropped: int = 0
    #: handshakes that failed on the task's socket: with CURVE, refused keys (ours or a peer's);
    #: without, peers that closed the connection during the handshake or cannot talk to it
    rejected_handshakes: int = 0
    #: push/scatter: consumers whose connection broke while the task wrote
    lost_peers: int = 0
    #: push/scatter: messages sent again because a consumer that left had not acknowledged them
    resent: int = 0
    #: the run of the task (its ``spark_zmq.attempt_id``) and the query (or batch write) it wrote for
    attempt_id: str = ""
    query_id: str = ""


def task_header(batch_id: int | None, write_id: str) -> TaskHeader:
    """The dedup keys every Arrow message of this task carries (before its ``sequence`` and
    ``last``): which query (or batch write), micro-batch, partition and task attempt. A
    batch write (``write_id``) is batch -1 of its own query, also inside a streaming query's
    ``foreachBatch`` (whose micro-batch may write more than once): its driver's record
    names exactly that."""
    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    if write_id:
        query_id, batch_id = write_id, -1
    else:
        query_id = (context.getLocalProperty("sql.streaming.queryId") if context else None) or ""
    if batch_id is None and context is not None:
        batch_id = int(context.getLocalProperty("streaming.sql.batchId") or -1)
    return {
        "query_id": query_id,
        "batch_id": batch_id if batch_id is not None else -1,
        "partition": partition,
        "attempt": context.attemptNumber() if context else 0,
        # Spark's attempt number starts again at 0 in a new stage attempt or after a query
        # restart re-runs the batch: this id tells every run of a task apart
        "attempt_id": uuid.uuid4().hex,
    }


def _write_task(
    options: SinkOptions,
    batches: Iterator[pa.RecordBatch],
    header: TaskHeader,
    sender_factory: Callable[[SinkOptions], TaskSender] = TaskSender,
) -> SinkCommit:
    """Send one task's rows: wait for a peer before the first row, encode each batch and
    send it, then send what the encoder held back and flush. Nothing here reads Spark:
    ``header`` says which task this is (``task_header`` on an executor), so a test drives
    it with plain batches and a real sender."""
    encoder = encoder_for(options, header)
    sender = sender_factory(options)
    try:
        if isinstance(encoder, TopicEncoder):
            rows = _send_all(encoder, sender.send, batches, sender)
        else:
            rows = _send_all(encoder, sender.send_payloads, batches, sender)
        rejected = sender.rejected_handshakes
        sender.flush_and_close()
    except BaseException:
        sender.abort()
        raise
    return SinkCommit(
        header["partition"],
        sender.sent,
        rows,
        sender.dropped,
        rejected,
        sender.lost_peers,
        sender.resent,
        header["attempt_id"],
        header["query_id"],
    )


def _send_all(
    encoder: Encoder[T], send: Callable[[list[T]], None], batches: Iterator[pa.RecordBatch], sender: TaskSender
) -> int:
    """Encode and send every batch in order (empty ones skipped); returns the rows sent."""
    rows = 0
    first = True
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if first:
            sender.wait_for_peers()
            first = False
        messages = encoder.encode(batch)
        if messages:
            send(messages)
        rows += batch.num_rows
    rest = encoder.finish()
    if rest:
        send(rest)
    return rows


def _commit(
    options: SinkOptions,
    schema: StructType,
    messages: list,
    batch_id: int,
    what: str,
    recent: commit_record.RecentBatches | None = None,
) -> None:
    """On the driver, once every task succeeded: tell the consumers which run of each task
    Spark kept (``commit_record``; a streaming write's record also names its query's
    ``recent`` batches, so it repairs a record lost before it), then log what the tasks sent."""
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    if commit_record.wanted(options) and commits:
        runs = commit_record.runs_of(commits)
        earlier = recent.remember(commits[0].query_id, batch_id, runs) if recent is not None else None
        record = commit_record.commit_record(arrow_schema(schema), commits[0].query_id, batch_id, runs, earlier)
        commit_record.send_commit_record(options, record, what)
    _report(messages, what, curve=options.curve is not None)


def _report(messages: list, what: str, curve: bool) -> None:
    """Log, on the driver, what the tasks sent; pub drops as a warning with their count."""
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    sent, dropped = sum(m.messages for m in commits), sum(m.dropped for m in commits)
    log.info("zmq sink: %s: %d messages sent by %d tasks", what, sent, len(commits))
    rejected = sum(m.rejected_handshakes for m in commits)
    if rejected and curve:
        log.warning(
            "zmq sink: %s: %d CURVE handshakes were rejected (peers without an authorized key, or without "
            "CURVE); the write tasks' logs name them",
            what,
            rejected,
        )
    elif rejected:
        # without CURVE a handshake fails when the peer closes the connection before it
        # completes (not a ZeroMQ peer, a socket type that cannot talk to ours, a consumer
        # going away), or takes longer than the engine's handshake interval
        log.warning(
            "zmq sink: %s: %d handshakes with peers failed (peers that are not ZeroMQ peers, of a socket "
            "type that cannot talk to the sink's, or that closed the connection or took too long during the "
            "handshake); the write tasks' logs name them",
            what,
            rejected,
        )
    lost, resent = sum(m.lost_peers for m in commits), sum(m.resent for m in commits)
    if lost:
        log.warning(
            "zmq sink: %s: %d consumer connections broke during the write; %d messages they had not "
            "acknowledged were sent again to the consumers still there (what a consumer's host had "
            "acknowledged but its application had not read when it died is beyond reach)",
            what,
            lost,
            resent,
        )
    if dropped:
        log.warning(
            "zmq sink: %s: pub dropped %d of %d messages: a subscriber's queue was at its high-water "
            "mark (raise option 'hwm', or use pattern 'push' where every message must arrive)",
            what,
            dropped,
            sent + dropped,
        )


class ZmqBatchWriter(DataSourceArrowWriter):
    """``df.write.format("zmq").mode("append")``."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.schema = schema
        self.write_id = f"write-{uuid.uuid4()}"  # tells apart the messages of two writes

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        freeze_long_lived()
        return _write_task(self.options, iterator, task_header(None, self.write_id))

    def commit(self, messages: list) -> None:
        _commit(self.options, self.schema, messages, -1, "write")

    def abort(self, messages: list) -> None:
        """A task failed for good, so Spark gives the write up: tell the consumers that no run
        of it counts (an empty commit record), so a deduplicating consumer drops what the
        tasks sent instead of holding it. The write never runs again under this id (a retry
        is a new write), unlike a streaming micro-batch, whose abort sends nothing."""
        if commit_record.wanted(self.options):
            record = commit_record.commit_record(arrow_schema(self.schema), self.write_id, -1, {})
            commit_record.send_commit_record(self.options, record, "aborted write")
        log.warning(
            "zmq sink: write aborted; the messages its tasks sent are named by no run (an empty commit "
            "record), so committedOnly readers drop them"
        )


class ZmqStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("zmq")``: at least once (a retried task may resend)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_schema(options, schema)
        self.options = options
        self.schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        freeze_long_lived()
        return _write_task(self.options, iterator, task_header(None, ""))

    def commit(self, messages: list, batchId: int) -> None:
        _commit(self.options, self.schema, messages, batchId, f"batch {batchId}", commit_record.RecentBatches())

    def abort(self, messages: list, batchId: int) -> None:
        log.warning("zmq sink: batch %d aborted; messages already sent stay sent (at-least-once)", batchId)
