"""The commit record: after Spark committed a write, which run of each task counts.

A task's Arrow messages name their run (``spark_zmq.attempt_id``), but a run's messages
cannot say whether Spark kept it: Spark's Python writer sees an upstream failure as a
normal end of its input, so a run that Spark then throws away can look complete, ``last``
flag included. Only the driver knows, once every task succeeded: its ``commit`` sends
one more Arrow message to every consumer endpoint, with no rows and the data's own
schema (so a reader of the data, such as this connector's source, decodes it as nothing),
whose metadata says which run of each partition Spark committed:

* ``spark_zmq.query_id``, ``spark_zmq.batch_id`` as on the data messages;
* ``spark_zmq.commit``: JSON ``{"<partition>": {"attempt_id": "...", "messages": N}}``.

A consumer delivers the messages of those runs and drops every other run of the same
tasks (``docs/examples/dedup_consumer.py``). Sent for ``format=arrow`` with ``push`` and
``scatter`` to each connect endpoint, after Spark committed: a consumer that is gone by
then (one that stopped after the rows it wanted) must not turn a delivered write into a
failed one, so an endpoint where no consumer takes the record within
``COMMIT_RECORD_TIMEOUT_MS`` (or ``sendTimeoutMs`` if shorter) gets a warning in the
driver's log instead; a deduplicating consumer there keeps holding that batch's runs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Sequence

import pyarrow as pa

from ..options import SinkOptions
from .encoders import arrow_message
from .send import TaskSender

__all__ = ["commit_record", "send_commit_record", "COMMIT_RECORD_TIMEOUT_MS"]

log = logging.getLogger(__name__)

#: how long the driver waits for each endpoint's consumer to take the record
COMMIT_RECORD_TIMEOUT_MS = 5000


def commit_record(schema: pa.Schema, query_id: str, batch_id: int, runs: dict[int, tuple[str, int]]) -> bytes:
    """The record's bytes: ``runs`` maps partition -> (attempt_id, messages sent)."""
    empty = pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    committed = {str(p): {"attempt_id": a, "messages": n} for p, (a, n) in sorted(runs.items())}
    return arrow_message(empty, {"query_id": query_id, "batch_id": batch_id,
                                 "commit": json.dumps(committed, separators=(",", ":"))})


def send_commit_record(options: SinkOptions, record: bytes, what: str) -> int:
    """Send ``record`` once to every connect endpoint (each consumer needs it), waiting for
    each consumer's TCP to acknowledge it; returns how many endpoints took it."""
    timeout_ms = min(options.send_timeout_ms, COMMIT_RECORD_TIMEOUT_MS)
    delivered = 0
    for endpoint in options.endpoints:
        if endpoint.bind:
            continue  # a bound sink endpoint is a task's own: the driver cannot reach its peers
        sender = TaskSender(dataclasses.replace(options, endpoints=[endpoint], send_timeout_ms=timeout_ms))
        try:
            sender.wait_for_peers()
            sender.send([(None, record)])
            sender.flush_and_close()
            delivered += 1
        except TimeoutError as exc:
            sender.abort()
            log.warning("zmq sink: %s: the commit record (which run of each task Spark kept) did not reach %s: %s; "
                        "a consumer there that deduplicates by it keeps holding this batch's messages",
                        what, endpoint, exc)
        except BaseException:
            sender.abort()
            raise
    return delivered


def wanted(options: SinkOptions) -> bool:
    return options.format == "arrow" and options.pattern in ("push", "scatter")


def runs_of(commits: Sequence) -> dict[int, tuple[str, int]]:
    return {c.partition: (c.attempt_id, c.messages) for c in commits}
