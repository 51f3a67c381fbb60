"""Read Arrow IPC messages from untrusted senders: check, then decode, then validate.

Why this module exists: an ``arrow`` message on a socket is whatever its sender made it,
and pyarrow's stream reader trusts the message metadata. Before this guard, one hostile
message could segfault a Python worker, allocate the gigabytes a 2 KB compressed buffer
claims to decompress to, hand Spark a batch with non-monotonic offsets or invalid UTF-8,
or raise an exception class nobody caught (which, on the receiver thread, lost the whole
receive batch with it). Reading a message therefore happens in three steps:

1. **Metadata, before anything is decompressed** (``ipc``). The stream is walked with
   pyarrow's own ``MessageReader`` (so the messages checked are exactly the ones the
   stream reader decodes next; bodies are zero-copy slices of the message), and each
   message's flatbuffer metadata is read with a small bounds-checked reader there:
   pyarrow exposes ``Message.metadata`` as bytes but none of its fields. Checked:

   - the stream starts with a schema; the schema is little-endian (pyarrow byte-swaps
     big-endian buffers *before* validating them, so they are refused, not swapped);
   - at most ``MAX_IPC_MESSAGES`` IPC messages (schema, dictionaries, batches);
   - every record batch and dictionary batch has ``0 <= length <= max_rows`` and the
     record batches together at most ``max_rows`` rows (``MAX_ROWS`` = 10,000,000);
   - every buffer ``(offset, length)`` lies inside the message body;
   - body compression, when present, is LZ4_FRAME or ZSTD with method BUFFER, and every
     non-empty compressed buffer is at least 8 bytes, its little-endian int64 prefix
     (the uncompressed length) being -1 (stored uncompressed) or >= 0;
   - the bytes all buffers of all batches and dictionaries take once decompressed (the
     prefixes; the lengths for uncompressed buffers) total at most ``max_body_bytes``
     (``MAX_DECOMPRESSED_BYTES`` = 1 GiB; the decoder passes
     ``min(1 GiB, 16 x maxMessageBytes)``). No ratio cap: columnar data legitimately
     compresses 100-1000x.

2. **Decoding** with ``pyarrow.ipc.open_stream`` (single-threaded: Spark already runs a
   task per core), then ``RecordBatch.validate(full=True)`` on every batch: offsets,
   UTF-8, dictionary indices, child lengths, run ends. Before the full validation, the
   bytes string/binary views reference are summed and capped at ``max_body_bytes``: a
   16-byte view can stand for 2 GiB, and validation checks the UTF-8 of each view, so a
   2 KB message of a million views of one 64 KiB string cost 2 s of CPU, and longer
   ones would hang the task. Null views must be well-formed too (length >= 0, inside
   their data buffer): validation skips them but pyarrow's cast copies them.

3. **Conversion to the declared schema** (``conform``; when ``schema`` is given):
   columns are matched by name (a missing or duplicated name is malformed), NOT NULL
   top-level columns must have no nulls, every cast's output is fully validated too
   (pyarrow 26's cast from list_view to list makes invalid arrays: top-level list views
   are converted here instead), and before each cast an upper bound of the bytes it
   allocates is computed from the validated arrays without materialising anything (a
   dictionary, view, list-view or null column can expand without limit when cast: a
   16-byte string view can stand for a 2 GiB string, a null column of 10 million rows
   weighs nothing). The bound for all batches of a message is capped at ``max_cast_bytes``
   (defaults to ``max_body_bytes``).

Any failure of any kind in any step raises ``MalformedArrowError`` with the reason.

``read_message`` is the same read that also returns the schema's custom metadata (the
sink's ``spark_zmq.*`` keys; the source's ``includeHeaders``). It is a dictionary pyarrow
parsed (and its flatbuffer verifier checked) with the schema in step 2, nothing read by
hand; its size is bounded by the message's, and its use is the caller's to bound.

``count_rows`` runs on the receiver thread for every arrow message (admission control
counts rows, not messages), so it reads only the framing and the record batch lengths,
never raises, and costs a few microseconds.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from .conform import column_plan, conform, is_list_like, is_view
from .ipc import (
    MAX_DECOMPRESSED_BYTES,
    MAX_IPC_MESSAGES,
    MAX_ROWS,
    BytesLike,
    CorruptMetadataError,
    MalformedArrowError,
    check_stream,
    error_reason,
    message_layout,
    rows_claimed,
)

__all__ = [
    "message_layout",
    "MAX_ROWS",
    "MAX_DECOMPRESSED_BYTES",
    "MAX_IPC_MESSAGES",
    "MalformedArrowError",
    "ArrowMessage",
    "count_rows",
    "read_batches",
    "read_message",
]

_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)
# type ids of the types that hold string/binary views or child arrays
_NESTED_OR_VIEW_IDS = frozenset(
    t.id
    for t in (
        pa.string_view(),
        pa.binary_view(),
        pa.list_(pa.int8()),
        pa.large_list(pa.int8()),
        pa.list_(pa.int8(), 1),
        pa.list_view(pa.int8()),
        pa.large_list_view(pa.int8()),
        pa.map_(pa.int8(), pa.int8()),
        pa.struct([]),
        pa.dictionary(pa.int8(), pa.int8()),
        pa.run_end_encoded(pa.int32(), pa.int8()),
        pa.sparse_union([]),
        pa.dense_union([]),
    )
)


# -- count_rows: the receiver thread's row count --------------------------------------------


def count_rows(message: BytesLike) -> int:
    """The rows an Arrow IPC stream message claims (its record batch lengths, summed), from
    the framing and metadata only: nothing is decompressed or allocated. Never raises; a
    message that cannot be framed, or claims more than ``MAX_ROWS``, counts as 1 row (the
    decoder reports it later). Messages claiming 0 rows also count 1, since admission
    control must make progress."""
    try:
        return rows_claimed(message)
    except Exception:  # noqa: BLE001 - any input, any failure: 1, never an exception
        return 1


# -- read_batches: the decoder's checked read ---------------------------------------------


class ArrowMessage(NamedTuple):
    """What ``read_message`` returns: the checked batches and the schema's custom metadata."""

    batches: list[pa.RecordBatch]
    #: the stream schema's custom metadata, raw bytes as sent; empty when it has none
    metadata: dict[bytes, bytes]


def read_batches(
    message: BytesLike,
    *,
    schema: pa.Schema | None = None,
    max_rows: int = MAX_ROWS,
    max_body_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_cast_bytes: int | None = None,
) -> list[pa.RecordBatch]:
    """The record batches of one Arrow IPC stream message, checked (see the module
    docstring), fully validated and, when ``schema`` is given, converted to it. Raises
    ``MalformedArrowError`` naming the reason for any input that fails any of it."""
    return read_message(
        message, schema=schema, max_rows=max_rows, max_body_bytes=max_body_bytes, max_cast_bytes=max_cast_bytes
    ).batches


def read_message(
    message: BytesLike,
    *,
    schema: pa.Schema | None = None,
    max_rows: int = MAX_ROWS,
    max_body_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_cast_bytes: int | None = None,
) -> ArrowMessage:
    """``read_batches``, and the stream schema's custom metadata with the batches: the same
    checks, in the same order, with the same errors."""
    buffer = message if isinstance(message, pa.Buffer) else pa.py_buffer(message)
    try:
        check_stream(buffer, max_rows, max_body_bytes)
        reader = pa.ipc.open_stream(buffer, options=_READ_OPTIONS)
        nested = any(t.id in _NESTED_OR_VIEW_IDS for t in reader.schema.types)
        plan = None if schema is None else column_plan(reader.schema, schema)
        budget = [max_body_bytes if max_cast_bytes is None else max_cast_bytes]
        batches = []
        referenced = 0
        for batch in reader:
            if nested:
                batch.validate()  # cheap: buffer sizes, so the view lengths below can be read
                referenced += sum(_view_bytes(column) for column in batch.columns)
                if referenced > max_body_bytes:
                    raise MalformedArrowError(
                        f"string/binary views reference more than {max_body_bytes:,} bytes (the limit per message)"
                    )
            batch.validate(full=True)
            batches.append(batch if plan is None else conform(batch, plan, schema, budget))
        return ArrowMessage(batches, dict(reader.schema.metadata or {}))
    except MalformedArrowError:
        raise
    except CorruptMetadataError as exc:
        raise MalformedArrowError(f"corrupt IPC metadata: {exc}") from None
    except RecursionError:
        raise MalformedArrowError("nesting too deep") from None
    except Exception as exc:  # noqa: BLE001 - any failure of any kind is a malformed message
        raise MalformedArrowError(error_reason(exc)) from None


def _view_bytes(array: pa.Array) -> int:
    """Bytes the string/binary views in ``array`` (at any depth) reference. Full
    validation checks each view's UTF-8, and a cast copies each: 16 bytes of view can
    stand for 2 GiB of data, so this is bounded before either happens."""
    t = array.type
    if t.id not in _NESTED_OR_VIEW_IDS:
        return 0
    if is_view(t):
        return _checked_views(array)
    if pa.types.is_dictionary(t):
        return _view_bytes(array.dictionary)
    if pa.types.is_run_end_encoded(t):
        return _view_bytes(array.values)
    if pa.types.is_map(t):
        return _view_bytes(array.keys) + _view_bytes(array.items)
    if is_list_like(t):
        return _view_bytes(array.values)
    if pa.types.is_struct(t) or pa.types.is_union(t):
        return sum(_view_bytes(array.field(i)) for i in range(t.num_fields))
    return 0


def _checked_views(array: pa.Array) -> int:
    """Bytes a string/binary view array references, after checking that every view, null
    or not, has a length >= 0 and (when not inline) lies inside its data buffer. Arrow's
    validation skips null slots, but pyarrow 26's cast from string_view to string copies
    them too: a null view of negative length made it segfault."""
    n = len(array)
    if not n:
        return 0
    buffers = array.buffers()
    views = np.frombuffer(buffers[1], dtype="<i4", count=4 * (array.offset + n))[4 * array.offset :].reshape(n, 4)
    lengths = views[:, 0].astype(np.int64)
    if lengths.min() < 0:
        raise MalformedArrowError("a string/binary view has a negative length")
    outside = lengths > 12  # longer values live in a data buffer: (length, prefix, buffer, offset)
    if outside.any():
        sizes = np.array([0 if b is None else b.size for b in buffers[2:]], dtype=np.int64)
        index, offset = views[outside, 2], views[outside, 3].astype(np.int64)
        if (
            not sizes.size
            or index.min() < 0
            or index.max() >= sizes.size
            or offset.min() < 0
            or (offset + lengths[outside] > sizes[index]).any()
        ):
            raise MalformedArrowError("a string/binary view (null or not) points outside its data buffers")
    return int(lengths.sum())
