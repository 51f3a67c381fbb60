"""What the read side of ``committedOnly`` reads of a message: the sink's tags, and the cut.

Why apart from the planner (``committed.py`` and its ``run_selector.py``): a read task needs only this (reading a
message's ``spark_zmq.*`` metadata from its Arrow schema, ``keep`` and ``kept_slices``, and
the small picklable form of the decisions the driver hands it), while the planner's
bookkeeping (``RunSelector``, ``CommittedOnly``) runs on the driver alone. No Spark, no
sockets.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from ..arrow import run_metadata
from .decisions import BatchKey
from .decoders.base import MalformedMessageError, _offsets_and_data

__all__ = [
    "Tag",
    "tag_of",
    "read_tag",
    "message_tags",
    "keep",
    "kept_slices",
    "kept_batches",
    "encode_reading",
    "decode_reading",
    "encode_decisions",
    "decode_decisions",
]


@dataclass(frozen=True)
class Tag:
    """What the sink's metadata says of one message: ``data`` of run (``key``,
    ``partition``, ``attempt_id``), a commit ``record`` of ``key`` naming ``runs``
    (partition -> attempt_id), or ``untagged`` (``why``: what is missing)."""

    kind: str
    key: BatchKey | None = None
    partition: int = -1
    attempt_id: str = ""
    runs: Mapping[int, str] | None = None
    why: str = ""
    #: data: the message's ``spark_zmq.sequence`` within its run (-1: it has none)
    sequence: int = -1
    #: record: partition -> how many messages its committed run sent
    messages: Mapping[int, int] | None = None
    #: record: earlier batches of the same writing query it also decides (``spark_zmq.recent``):
    #: batch -> (runs, messages)
    recent: Mapping[BatchKey, tuple[Mapping[int, str], Mapping[int, int] | None]] | None = None


def _untagged(why: str) -> Tag:
    return Tag("untagged", why=why)


def tag_of(metadata: Mapping[bytes, bytes] | None) -> Tag:
    """The tag of a message whose Arrow schema has this custom metadata."""
    meta = run_metadata.decode(metadata)
    if run_metadata.QUERY_ID not in meta or run_metadata.BATCH_ID not in meta:
        return _untagged(
            "it has no spark_zmq.query_id and spark_zmq.batch_id metadata (it was not written by a "
            "spark-zmq sink with format=arrow)"
        )
    try:
        key = (meta[run_metadata.QUERY_ID], int(meta[run_metadata.BATCH_ID]))
    except ValueError:
        return _untagged(f"its spark_zmq.batch_id {meta['batch_id'][:40]!r} is not a number")
    if run_metadata.COMMIT in meta:
        try:
            runs, counts = _commit_of(json.loads(meta[run_metadata.COMMIT]))
            recent = {
                (key[0], int(b)): _commit_of(c) for b, c in json.loads(meta.get(run_metadata.RECENT, "{}")).items()
            }
        except (ValueError, TypeError, KeyError, AttributeError):
            return _untagged(
                "its spark_zmq.commit (or spark_zmq.recent) metadata is not the sink's commit record "
                '({"<partition>": {"attempt_id": ..., "messages": N}})'
            )
        # the sink names at most RECENT_BATCHES (8) earlier batches: more is not the sink's
        earlier = dict(sorted((k, v) for k, v in recent.items() if k[1] < key[1])[-8:])
        return Tag("record", key, runs=runs, messages=counts, recent=earlier or None)
    if run_metadata.PARTITION not in meta or run_metadata.ATTEMPT_ID not in meta:
        return _untagged("it has no spark_zmq.partition and spark_zmq.attempt_id metadata")
    try:
        partition = int(meta[run_metadata.PARTITION])
    except ValueError:
        return _untagged(f"its spark_zmq.partition {meta['partition'][:40]!r} is not a number")
    try:
        sequence = int(meta.get(run_metadata.SEQUENCE, "-1"))
    except ValueError:
        sequence = -1
    return Tag("data", key, partition=partition, attempt_id=meta[run_metadata.ATTEMPT_ID], sequence=sequence)


def _commit_of(committed: Mapping) -> tuple[dict[int, str], dict[int, int] | None]:
    """(partition -> attempt_id, partition -> messages or None) of one commit's JSON."""
    runs = {int(p): str(run["attempt_id"]) for p, run in committed.items()}
    counts = {int(p): int(run["messages"]) for p, run in committed.items() if "messages" in run}
    return runs, counts if len(counts) == len(runs) else None


_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)


def read_tag(message: object) -> Tag:
    """The tag of one spooled message: only its stream's schema is read (flatbuffers that
    Arrow verifies), never a record batch. Bytes that are no Arrow stream are untagged."""
    try:
        buffer = message if isinstance(message, pa.Buffer) else pa.py_buffer(message)
        schema = pa.ipc.open_stream(buffer, options=_READ_OPTIONS).schema
    except Exception as exc:  # noqa: BLE001 - any bytes: untagged, never an exception
        return _untagged(
            f"it is not an Arrow IPC stream ({str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__})"
        )
    return tag_of(schema.metadata)


def message_tags(batch: pa.RecordBatch) -> Iterator[Tag]:
    """The tag of each message of a spool batch (zero-copy slices of its message column)."""
    values = batch.column(0)
    offsets, _ = _offsets_and_data(values)
    data = values.buffers()[2]
    valid = None if values.null_count == 0 else values.is_valid().to_pylist()
    for i in range(len(values)):
        if valid is not None and not valid[i]:
            yield _untagged("it is null")
            continue
        start = int(offsets[i])
        yield read_tag(data.slice(start, int(offsets[i + 1]) - start) if data is not None else pa.py_buffer(b""))


def keep(tag: Tag, decisions: Mapping[BatchKey, Mapping[int, str]]) -> bool:
    """Whether a message reaches Spark: data of the run its batch's record names."""
    if tag.kind != "data" or tag.key is None:
        return False
    runs = decisions.get(tag.key)
    return runs is not None and runs.get(tag.partition) == tag.attempt_id


def kept_slices(
    batch: pa.RecordBatch,
    first: int,
    channel: int,
    decisions: Mapping[BatchKey, Mapping[int, str]],
    mode: str,
    skip: Collection[int] = (),
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The contiguous pieces of a spool batch (``first``: its first offset) whose messages
    reach Spark, each with its first offset; the offsets in ``skip`` (``RunSelector.skips``:
    copies of a sequence delivered already) never do. An untagged message is malformed:
    skipped with ``DROPMALFORMED``, else a ``MalformedMessageError`` naming it and
    ``committedOnly``."""
    run_start: int | None = None
    for i, tag in enumerate(message_tags(batch)):
        if tag.kind == "untagged" and mode != "DROPMALFORMED":
            raise MalformedMessageError(
                f"arrow message at channel {channel}, offset {first + i} lacks the spark-zmq sink's metadata that "
                f"committedOnly=true needs: {tag.why}. committedOnly reads only what a spark-zmq sink wrote "
                "(format=arrow, pattern push or scatter); set mode=DROPMALFORMED to skip such messages.",
                channel,
                first + i,
            )
        if keep(tag, decisions) and first + i not in skip:
            if run_start is None:
                run_start = i
            continue
        if run_start is not None:
            yield first + run_start, batch.slice(run_start, i - run_start)
            run_start = None
    if run_start is not None:
        yield first + run_start, batch.slice(run_start)


def kept_batches(
    batches: Iterable[tuple[int, pa.RecordBatch]], channel: int, encoded: Sequence, mode: str
) -> Iterator[tuple[int, pa.RecordBatch]]:
    """A read task's spool batches cut down to the messages of the committed runs, each
    sequence once (``encoded``: ``encode_reading``)."""
    decisions, skip = decode_reading(encoded)
    for first, batch in batches:
        yield from kept_slices(batch, first, channel, decisions, mode, skip)


def encode_reading(decisions: Mapping[BatchKey, Mapping[int, str]], skip: Iterable[int]) -> tuple:
    """What a read task needs (``SpoolRange.committed_runs``): the decisions of its batches
    and the offsets it skips."""
    return (encode_decisions(decisions), tuple(sorted(skip)))


def decode_reading(encoded: Sequence) -> tuple[dict[BatchKey, dict[int, str]], frozenset[int]]:
    if not encoded:
        return {}, frozenset()
    decisions, skip = encoded
    return decode_decisions(decisions), frozenset(int(o) for o in skip)


def encode_decisions(decisions: Mapping[BatchKey, Mapping[int, str]]) -> tuple:
    """A small picklable form of decisions."""
    return tuple((q, b, tuple(sorted(runs.items()))) for (q, b), runs in sorted(decisions.items()))


def decode_decisions(encoded: Sequence) -> dict[BatchKey, dict[int, str]]:
    return {(q, int(b)): dict(runs) for q, b, runs in encoded}
