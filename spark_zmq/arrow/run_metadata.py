"""The ``spark_zmq.*`` keys of an Arrow message's schema metadata: written by the sink, read by
the source's ``committedOnly`` and by the CLI's ``consume``, spelled here once.

Why one module: the sink names each Arrow message's run (which writing query, micro-batch,
partition and attempt sent it, its place in the run) and sends a commit record naming the
runs Spark kept; a reader that spells a key differently from the writer silently sees
every message as untagged. Each side used its own string literals; now both take these.

The keys (values are UTF-8 text):

* data messages: ``query_id``, ``batch_id``, ``partition``, ``attempt``, ``attempt_id``,
  ``sequence`` (0, 1, ... within the run) and ``last`` (``true`` on the run's last message);
* a commit record: ``query_id``, ``batch_id``, ``commit`` (JSON ``{"<partition>":
  {"attempt_id": ..., "messages": N}}``) and, from a streaming write, ``recent`` (the same
  of the query's earlier micro-batches, by batch id).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "PREFIX",
    "QUERY_ID",
    "BATCH_ID",
    "PARTITION",
    "ATTEMPT",
    "ATTEMPT_ID",
    "SEQUENCE",
    "LAST",
    "COMMIT",
    "RECENT",
    "encode",
    "decode",
    "is_commit_record",
]

#: every key's prefix in the schema's custom metadata
PREFIX = "spark_zmq."

QUERY_ID = "query_id"
BATCH_ID = "batch_id"
PARTITION = "partition"
ATTEMPT = "attempt"
ATTEMPT_ID = "attempt_id"
SEQUENCE = "sequence"
LAST = "last"
COMMIT = "commit"
RECENT = "recent"

_COMMIT_KEY = (PREFIX + COMMIT).encode()


def encode(metadata: Mapping[str, object]) -> dict[bytes, bytes]:
    """``metadata`` (keys without the prefix, values anything ``str`` renders) as schema
    metadata entries."""
    return {(PREFIX + key).encode(): str(value).encode() for key, value in metadata.items()}


def decode(metadata: Mapping[bytes, bytes] | Mapping[str, str] | None) -> dict[str, str]:
    """The ``spark_zmq.*`` entries of a schema's metadata, keys without the prefix; other
    entries, and entries that are not UTF-8, are left out (any sender may add its own)."""
    found: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        try:
            name = key.decode() if isinstance(key, bytes) else str(key)
            if name.startswith(PREFIX):
                found[name[len(PREFIX) :]] = value.decode() if isinstance(value, bytes) else str(value)
        except UnicodeDecodeError:
            continue
    return found


def is_commit_record(metadata: Mapping[bytes, bytes] | None) -> bool:
    """Whether a message with this schema metadata is the sink's commit record (no rows)."""
    return _COMMIT_KEY in (metadata or {})
