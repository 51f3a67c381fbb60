"""The commit record: after Spark committed a write, which run of each task counts.

A task's Arrow messages name their run (``spark_zmq.attempt_id``), but a run's messages
cannot say whether Spark kept it: Spark's Python writer sees an upstream failure as a
normal end of its input, so a run that Spark then throws away can look complete, ``last``
flag included. Only the driver knows, once every task succeeded: its ``commit`` sends
one more Arrow message to every consumer endpoint, with no rows and the data's own
schema (so a reader of the data, such as this connector's source, decodes it as nothing),
whose metadata says which run of each partition Spark committed:

* ``spark_zmq.query_id``, ``spark_zmq.batch_id`` as on the data messages;
* ``spark_zmq.commit``: JSON ``{"<partition>": {"attempt_id": "...", "messages": N}}``;
* ``spark_zmq.recent`` (a streaming write): JSON ``{"<batch_id>": <its commit>}``, the
  runs of the writing query's ``RECENT_BATCHES`` micro-batches before this one (those the
  driver committed and remembers, ``RecentBatches``). A record is sent once; one lost on
  the way (no consumer took it, or the connection broke) is repaired by the next: a
  consumer that never got batch ``b``'s record decides ``b`` by the next record's
  ``recent``.

A batch write that Spark aborts (a task failed for good) sends the same record naming no
run (``{}``): none of its messages counts, and the write never runs again under its id.

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
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence

import pyarrow as pa

from ..arrow import run_metadata
from ..options import SinkOptions
from .encoders import arrow_message
from .send import TaskSender

__all__ = ["commit_record", "send_commit_record", "COMMIT_RECORD_TIMEOUT_MS", "RECENT_BATCHES", "RecentBatches"]

log = logging.getLogger(__name__)

#: how long the driver waits for each endpoint's consumer to take the record
COMMIT_RECORD_TIMEOUT_MS = 5000

#: how many earlier micro-batches of its query a record names (``spark_zmq.recent``)
RECENT_BATCHES = 8

#: partition -> (attempt_id, messages sent)
Runs = Mapping[int, tuple[str, int]]


def _commit_json(runs: Runs) -> dict:
    return {str(p): {"attempt_id": a, "messages": n} for p, (a, n) in sorted(runs.items())}


def commit_record(
    schema: pa.Schema, query_id: str, batch_id: int, runs: Runs, recent: Mapping[int, Runs] | None = None
) -> bytes:
    """The record's bytes: ``runs`` maps partition -> (attempt_id, messages sent);
    ``recent`` the same of earlier micro-batches of the query."""
    empty = pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    metadata: dict[str, object] = {
        run_metadata.QUERY_ID: query_id,
        run_metadata.BATCH_ID: batch_id,
        run_metadata.COMMIT: json.dumps(_commit_json(runs), separators=(",", ":")),
    }
    if recent:
        metadata[run_metadata.RECENT] = json.dumps(
            {str(b): _commit_json(r) for b, r in sorted(recent.items())}, separators=(",", ":")
        )
    return arrow_message(empty, metadata)


class RecentBatches:
    """What a streaming write's driver committed lately, per writing query: the ``recent``
    of its next records. Spark makes a new writer for each commit (and may run it in
    another Python worker), so it is kept in a file of the driver's, one per query, in a
    directory only this user may use (``directory``; by default ``spark-zmq-sink-<uid>``
    under the temporary directory). A file that cannot be read or written costs only the
    repair: the record is sent without ``recent`` and a warning logged."""

    def __init__(self, directory: str | None = None, keep: int = RECENT_BATCHES) -> None:
        self.directory = directory or os.path.join(tempfile.gettempdir(), f"spark-zmq-sink-{os.getuid()}")
        self.keep = keep

    def _path(self, query_id: str) -> str:
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        info = os.lstat(self.directory)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{self.directory} is not a directory of this user's alone")
        return os.path.join(self.directory, hashlib.sha256(query_id.encode()).hexdigest()[:32] + ".json")

    def remember(self, query_id: str, batch_id: int, runs: Runs) -> dict[int, dict[int, tuple[str, int]]]:
        """Note ``batch_id``'s runs; returns the remembered runs of the query's earlier batches."""
        try:
            path = self._path(query_id)
        except OSError as exc:
            log.warning(
                "zmq sink: the runs of the query's earlier micro-batches could not be kept or read (%s); "
                "this commit record names only its own batch, so a record lost on the way is not repaired "
                "by it",
                exc,
            )
            return {}
        known: dict[int, dict[int, tuple[str, int]]] = {}
        try:
            if os.path.exists(path):
                with open(path) as f:
                    for b, r in json.load(f).items():
                        known[int(b)] = {int(p): (str(a), int(n)) for p, (a, n) in r.items()}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning(
                "zmq sink: the runs of the query's earlier micro-batches could not be read from %s (%s); "
                "this commit record names only its own batch, so a record lost on the way is not repaired "
                "by it",
                path,
                exc,
            )
            known = {}
        try:
            recent = {b: r for b, r in known.items() if b < batch_id}
            recent = dict(sorted(recent.items())[-self.keep :])
            known = {**recent, batch_id: dict(runs)}
            temp = f"{path}.{os.getpid()}.tmp"
            with open(temp, "w") as f:
                json.dump({str(b): {str(p): list(x) for p, x in r.items()} for b, r in known.items()}, f)
            os.replace(temp, path)
            return recent
        except OSError as exc:
            log.warning(
                "zmq sink: the runs of the query's micro-batches could not be kept in %s (%s); the next "
                "commit record will not name this batch",
                path,
                exc,
            )
            return recent


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
            log.warning(
                "zmq sink: %s: the commit record (which run of each task Spark kept) did not reach %s: %s; "
                "a consumer there that deduplicates by it keeps holding this batch's messages",
                what,
                endpoint,
                exc,
            )
        except BaseException:
            sender.abort()
            raise
    return delivered


def wanted(options: SinkOptions) -> bool:
    return options.format == "arrow" and options.pattern in ("push", "scatter")


def runs_of(commits: Sequence) -> dict[int, tuple[str, int]]:
    return {c.partition: (c.attempt_id, c.messages) for c in commits}
