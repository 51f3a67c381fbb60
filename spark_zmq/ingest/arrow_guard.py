"""Read Arrow IPC messages from untrusted senders: check, then decode, then validate.

Why this module exists: an ``arrow`` message on a socket is whatever its sender made it,
and pyarrow's stream reader trusts the message metadata. Before this guard, one hostile
message could segfault a Python worker, allocate the gigabytes a 2 KB compressed buffer
claims to decompress to, hand Spark a batch with non-monotonic offsets or invalid UTF-8,
or raise an exception class nobody caught (which, on the receiver thread, lost the whole
receive batch with it). Reading a message therefore happens in three steps:

1. **Metadata, before anything is decompressed** (``_inspect``). The stream is walked with
   pyarrow's own ``MessageReader`` (so the messages checked are exactly the ones the
   stream reader decodes next; bodies are zero-copy slices of the message), and each
   message's flatbuffer metadata is read with the small bounds-checked reader below:
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

3. **Conversion to the declared schema** (when ``schema`` is given): columns are matched
   by name (a missing or duplicated name is malformed), NOT NULL top-level columns must
   have no nulls, every cast's output is fully validated too (pyarrow 26's cast from
   list_view to list makes invalid arrays: top-level list views are converted here
   instead), and before each cast an upper bound of the bytes it allocates is
   computed from the validated arrays without materialising anything (a dictionary, view,
   list-view or null column can expand without limit when cast: a 16-byte string view
   can stand for a 2 GiB string, a null column of 10 million rows weighs nothing). The
   bound for all batches of a message is capped at ``max_cast_bytes`` (defaults to
   ``max_body_bytes``).

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

import struct
from typing import NamedTuple, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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

#: rows one message may hold, over all its record batches (also each dictionary's size)
MAX_ROWS = 10_000_000
#: bytes all buffers of one message may take once decompressed
MAX_DECOMPRESSED_BYTES = 1 << 30
#: IPC messages (schema + dictionaries + record batches) in one ZeroMQ message
MAX_IPC_MESSAGES = 10_000

BytesLike = Union[bytes, bytearray, memoryview, pa.Buffer]

_READ_OPTIONS = pa.ipc.IpcReadOptions(use_threads=False)
# type ids of the types that hold string/binary views or child arrays
_NESTED_OR_VIEW_IDS = frozenset(t.id for t in (
    pa.string_view(), pa.binary_view(), pa.list_(pa.int8()), pa.large_list(pa.int8()), pa.list_(pa.int8(), 1),
    pa.list_view(pa.int8()), pa.large_list_view(pa.int8()), pa.map_(pa.int8(), pa.int8()), pa.struct([]),
    pa.dictionary(pa.int8(), pa.int8()), pa.run_end_encoded(pa.int32(), pa.int8()),
    pa.sparse_union([]), pa.dense_union([]),
))

# Message.fbs / Schema.fbs: union tags of Message.header, compression enums
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
_CODECS = {0: "LZ4_FRAME", 1: "ZSTD"}
_CONTINUATION = 0xFFFFFFFF


class MalformedArrowError(ValueError):
    """An Arrow message that must not be decoded (the reason says why)."""


class _Bad(Exception):
    """Internal: the flatbuffer reader found an out-of-bounds or inconsistent field."""


# -- a minimal, bounds-checked flatbuffer reader (only what Message/RecordBatch need) ------

_U8 = struct.Struct("<B")
_I16 = struct.Struct("<h")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")


def _read(fmt: struct.Struct, buf: BytesLike, end: int, pos: int) -> int:
    if pos < 0 or pos + fmt.size > end:
        raise _Bad(f"field at byte {pos} is outside the {end}-byte metadata")
    return fmt.unpack_from(buf, pos)[0]


def _table(buf: BytesLike, end: int, pos: int) -> tuple[int, int, int]:
    """(table position, vtable position, vtable size) of the table at ``pos``."""
    vtable = pos - _read(_I32, buf, end, pos)
    size = _read(_U16, buf, end, vtable)
    if size < 4 or size % 2 or vtable + size > end:
        raise _Bad("corrupt flatbuffer vtable")
    return pos, vtable, size


def _field(buf: BytesLike, end: int, table: tuple[int, int, int], slot: int) -> int:
    """Absolute position of a table field's data; 0 when the field is absent (default)."""
    pos, vtable, size = table
    entry = 4 + 2 * slot
    if entry + 2 > size:
        return 0
    offset = _read(_U16, buf, end, vtable + entry)
    return pos + offset if offset else 0


def _scalar(buf: BytesLike, end: int, table: tuple[int, int, int], slot: int, fmt: struct.Struct, default: int = 0) -> int:
    pos = _field(buf, end, table, slot)
    return _read(fmt, buf, end, pos) if pos else default


def _target(buf: BytesLike, end: int, table: tuple[int, int, int], slot: int) -> int:
    """Position an offset field points to (a table or a vector); 0 when absent."""
    pos = _field(buf, end, table, slot)
    return pos + _read(_U32, buf, end, pos) if pos else 0


def _struct_vector(buf: BytesLike, end: int, pos: int, width: int) -> tuple[int, int]:
    """(count, first element position) of a vector of fixed-size structs."""
    if not pos:
        return 0, 0
    count = _read(_U32, buf, end, pos)
    if pos + 4 + count * width > end:
        raise _Bad("vector runs past the end of the metadata")
    return count, pos + 4


def _message_header(buf: BytesLike, end: int) -> tuple[int, tuple[int, int, int], int]:
    """(header type, header table, bodyLength) of a Message flatbuffer."""
    message = _table(buf, end, _read(_U32, buf, end, 0))
    header_type = _scalar(buf, end, message, 1, _U8)
    header_pos = _target(buf, end, message, 2)
    body_length = _scalar(buf, end, message, 3, _I64)
    if not header_pos:
        raise _Bad("message has no header")
    return header_type, _table(buf, end, header_pos), body_length


# -- count_rows: the receiver thread's row count --------------------------------------------


def count_rows(message: BytesLike) -> int:
    """The rows an Arrow IPC stream message claims (its record batch lengths, summed), from
    the framing and metadata only: nothing is decompressed or allocated. Never raises; a
    message that cannot be framed, or claims more than ``MAX_ROWS``, counts as 1 row (the
    decoder reports it later). Messages claiming 0 rows also count 1, since admission
    control must make progress."""
    try:
        return _count_rows(message)
    except Exception:  # noqa: BLE001 - any input, any failure: 1, never an exception
        return 1


def _count_rows(buf: BytesLike) -> int:
    end = len(buf)
    pos = 0
    rows = 0
    messages = 0
    while pos + 4 <= end:
        length = _U32.unpack_from(buf, pos)[0]
        pos += 4
        if length == _CONTINUATION:
            if pos + 4 > end:
                return 1
            length = _U32.unpack_from(buf, pos)[0]
            pos += 4
        if length == 0:  # end-of-stream marker
            break
        if length > 0x7FFFFFFF or pos + length > end:
            return 1
        metadata = memoryview(buf)[pos : pos + length]
        header_type, header, body_length = _message_header(metadata, length)
        if body_length < 0 or (messages == 0 and header_type != _SCHEMA):
            return 1
        if header_type == _RECORD_BATCH:
            batch_rows = _scalar(metadata, length, header, 0, _I64)
            if batch_rows < 0:
                return 1
            rows += batch_rows
            if rows > MAX_ROWS:
                return 1
        messages += 1
        if messages > MAX_IPC_MESSAGES:
            return 1
        pos += length + body_length
        if pos > end:
            return 1
    if messages == 0:
        return 1
    return max(1, rows)


# -- read_batches: the decoder's checked read ---------------------------------------------


class ArrowMessage(NamedTuple):
    """What ``read_message`` returns: the checked batches and the schema's custom metadata."""

    batches: list[pa.RecordBatch]
    #: the stream schema's custom metadata, raw bytes as sent; empty when it has none
    metadata: dict[bytes, bytes]


def read_batches(
    message: BytesLike,
    *,
    schema: Optional[pa.Schema] = None,
    max_rows: int = MAX_ROWS,
    max_body_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_cast_bytes: Optional[int] = None,
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
    schema: Optional[pa.Schema] = None,
    max_rows: int = MAX_ROWS,
    max_body_bytes: int = MAX_DECOMPRESSED_BYTES,
    max_cast_bytes: Optional[int] = None,
) -> ArrowMessage:
    """``read_batches``, and the stream schema's custom metadata with the batches: the same
    checks, in the same order, with the same errors."""
    buffer = message if isinstance(message, pa.Buffer) else pa.py_buffer(message)
    try:
        _inspect(buffer, max_rows, max_body_bytes)
        reader = pa.ipc.open_stream(buffer, options=_READ_OPTIONS)
        nested = any(t.id in _NESTED_OR_VIEW_IDS for t in reader.schema.types)
        plan = None if schema is None else _plan(reader.schema, schema)
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
            batches.append(batch if plan is None else _conform(batch, plan, schema, budget))
        return ArrowMessage(batches, dict(reader.schema.metadata or {}))
    except MalformedArrowError:
        raise
    except _Bad as exc:
        raise MalformedArrowError(f"corrupt IPC metadata: {exc}") from None
    except RecursionError:
        raise MalformedArrowError("nesting too deep") from None
    except Exception as exc:  # noqa: BLE001 - any failure of any kind is a malformed message
        raise MalformedArrowError(_reason(exc)) from None


def _view_bytes(array: pa.Array) -> int:
    """Bytes the string/binary views in ``array`` (at any depth) reference. Full
    validation checks each view's UTF-8, and a cast copies each: 16 bytes of view can
    stand for 2 GiB of data, so this is bounded before either happens."""
    t = array.type
    if t.id not in _NESTED_OR_VIEW_IDS:
        return 0
    if _is_view(t):
        return _checked_views(array)
    if pa.types.is_dictionary(t):
        return _view_bytes(array.dictionary)
    if pa.types.is_run_end_encoded(t):
        return _view_bytes(array.values)
    if pa.types.is_map(t):
        return _view_bytes(array.keys) + _view_bytes(array.items)
    if _is_list_like(t):
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
        if (not sizes.size or index.min() < 0 or index.max() >= sizes.size or offset.min() < 0
                or (offset + lengths[outside] > sizes[index]).any()):
            raise MalformedArrowError("a string/binary view (null or not) points outside its data buffers")
    return int(lengths.sum())


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _inspect(buffer: pa.Buffer, max_rows: int, max_body_bytes: int) -> None:
    reader = pa.ipc.MessageReader.open_stream(buffer)
    rows = 0
    body_bytes = 0
    count = 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        count += 1
        if count > MAX_IPC_MESSAGES:
            raise MalformedArrowError(f"more than {MAX_IPC_MESSAGES} IPC messages in one message")
        metadata = message.metadata
        end = metadata.size
        header_type, header, _ = _message_header(metadata, end)
        if count == 1:
            if header_type != _SCHEMA:
                raise MalformedArrowError("the IPC stream does not start with a schema")
            if _scalar(metadata, end, header, 0, _I16) != 0:
                raise MalformedArrowError("big-endian Arrow data is not accepted; send little-endian")
            continue
        if header_type == _RECORD_BATCH:
            batch_rows, decompressed = _check_batch(metadata, end, header, message.body, max_rows, max_body_bytes)
            rows += batch_rows
            if rows > max_rows:
                raise MalformedArrowError(f"the message holds more than {max_rows:,} rows (the limit per message)")
        elif header_type == _DICTIONARY_BATCH:
            data = _target(metadata, end, header, 1)
            if not data:
                raise MalformedArrowError("dictionary batch without data")
            _, decompressed = _check_batch(metadata, end, _table(metadata, end, data), message.body, max_rows, max_body_bytes)
        else:
            raise MalformedArrowError(f"unexpected IPC message type {message.type!r} after the schema")
        body_bytes += decompressed
        if body_bytes > max_body_bytes:
            raise MalformedArrowError(
                f"the message's buffers take more than {max_body_bytes:,} bytes decompressed (the limit per message)"
            )
    if count == 0:
        raise MalformedArrowError("empty IPC stream")


def _check_batch(
    metadata: pa.Buffer, end: int, batch: tuple[int, int, int], body: Optional[pa.Buffer], max_rows: int, max_body_bytes: int
) -> tuple[int, int]:
    """(rows, decompressed bytes) of one RecordBatch table, after checking it."""
    length = _scalar(metadata, end, batch, 0, _I64)
    if length < 0 or length > max_rows:
        raise MalformedArrowError(f"a batch claims {length:,} rows (at most {max_rows:,} per message)")
    body_size = 0 if body is None else body.size
    n_nodes, nodes_at = _struct_vector(metadata, end, _target(metadata, end, batch, 1), 16)
    if n_nodes:
        lengths, null_counts = _int64_pairs(metadata, nodes_at, n_nodes)
        if _smallest(lengths) < 0 or _smallest(null_counts) < 0:
            raise MalformedArrowError("negative length or null count in the field metadata")
    n_buffers, buffers_at = _struct_vector(metadata, end, _target(metadata, end, batch, 2), 16)
    if not n_buffers:
        return length, 0
    offsets, lengths = _int64_pairs(metadata, buffers_at, n_buffers)
    if _smallest(offsets) < 0 or _smallest(lengths) < 0 or _exceeds(offsets, lengths, body_size):
        raise MalformedArrowError(f"a buffer lies outside the {body_size:,}-byte message body")
    compression_at = _target(metadata, end, batch, 3)
    if not compression_at:
        return length, _total(lengths)
    compression = _table(metadata, end, compression_at)
    codec = _scalar(metadata, end, compression, 0, _U8)
    method = _scalar(metadata, end, compression, 1, _U8)
    if codec not in _CODECS or method != 0:
        raise MalformedArrowError(f"unsupported body compression (codec {codec}, method {method})")
    if isinstance(lengths, np.ndarray):
        sizes = _compressed_sizes_np(body, offsets, lengths)
    else:
        sizes = []
        for offset, size in zip(offsets, lengths):
            if size:
                if size < 8:
                    raise MalformedArrowError("a compressed buffer is shorter than its 8-byte length prefix")
                claimed = _I64.unpack_from(body, offset)[0]
                sizes.append(size - 8 if claimed == -1 else claimed)
    if not len(sizes):
        return length, 0
    if _smallest(sizes) < 0:
        raise MalformedArrowError("a compressed buffer claims a negative uncompressed length")
    largest = int(sizes.max()) if isinstance(sizes, np.ndarray) else max(sizes)
    if largest > max_body_bytes:
        raise MalformedArrowError(
            f"a compressed buffer claims {largest:,} bytes decompressed (at most {max_body_bytes:,} per message)"
        )
    return length, _total(sizes)  # no overflow: each <= max_body_bytes, fewer than 2**28 of them


def _int64_pairs(buf: BytesLike, at: int, count: int):
    """The ``count`` (first, second) int64 pairs at ``at`` (bounds already checked): tuples
    for the usual few (numpy costs microseconds per call), numpy arrays for many."""
    if count <= 64:
        values = struct.unpack_from(f"<{2 * count}q", buf, at)
        return values[0::2], values[1::2]
    values = np.frombuffer(buf, dtype="<i8", count=2 * count, offset=at)
    return values[0::2], values[1::2]


def _smallest(values) -> int:
    return int(values.min()) if isinstance(values, np.ndarray) else min(values)


def _total(values) -> int:
    return int(values.sum()) if isinstance(values, np.ndarray) else sum(values)


def _exceeds(offsets, lengths, size: int) -> bool:
    """Whether any span (offsets >= 0, lengths >= 0) ends past ``size``."""
    if isinstance(offsets, np.ndarray):
        return bool((lengths > size - offsets).any())
    return any(n > size - o for o, n in zip(offsets, lengths))


def _compressed_sizes_np(body: pa.Buffer, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    used = lengths > 0
    if (lengths[used] < 8).any():
        raise MalformedArrowError("a compressed buffer is shorter than its 8-byte length prefix")
    starts = offsets[used]
    if not starts.size:
        return starts
    raw = np.frombuffer(body, dtype=np.uint8)
    prefixes = raw[starts[:, None] + np.arange(8)].copy().view("<i8").ravel()
    prefixes[prefixes == -1] = lengths[used][prefixes == -1] - 8
    return prefixes


# -- conversion to the declared schema, with an allocation bound ---------------------------

#: bytes a number, date, time or decimal may take as text (decimal256 has 76 digits)
_TEXT_WIDTH = 96


def _plan(source: pa.Schema, target: pa.Schema) -> list[int]:
    """The message column each target field is read from, by name."""
    names = source.names
    positions: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        positions.setdefault(name, []).append(i)
    missing = [name for name in target.names if name not in positions]
    if missing:
        raise MalformedArrowError(f"columns {missing} of the declared schema are missing (message has {names})")
    plan = []
    for name in target.names:
        found = positions[name]
        if len(found) > 1:
            raise MalformedArrowError(f"column {name!r} appears {len(found)} times in the message")
        plan.append(found[0])
    return plan


def _conform(batch: pa.RecordBatch, plan: list[int], schema: pa.Schema, budget: list) -> pa.RecordBatch:
    columns = []
    for index, field in zip(plan, schema):
        column = batch.column(index)
        if column.type != field.type:
            cost = _cast_cost(column, field.type)
            budget[0] -= cost
            if budget[0] < 0:
                raise MalformedArrowError(
                    f"converting column {field.name!r} from {column.type} to {field.type} would take about "
                    f"{cost:,} bytes, more than the message may (its rows or values expand when cast)"
                )
            source = column.type
            if pa.types.is_list_view(source) or pa.types.is_large_list_view(source):
                column = _list_view_as_list(column)
            column = column.cast(field.type)
            try:  # casts are Arrow code on hostile data too: check what they made
                column.validate(full=True)
            except pa.ArrowException as exc:
                raise MalformedArrowError(
                    f"converting column {field.name!r} from {source} to {field.type} gave an invalid array: {_reason(exc)}"
                ) from None
        if not field.nullable and column.null_count:
            raise MalformedArrowError(f"column {field.name!r} is declared NOT NULL but has {column.null_count} nulls")
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _list_view_as_list(array: pa.Array) -> pa.Array:
    """A list_view column as a list column (the same values, gathered in row order).
    pyarrow 26's cast from list_view to list leaves the offsets buffer one entry short,
    an invalid array; nested list views still go through the cast, and its output check."""
    n = len(array)
    large = pa.types.is_large_list_view(array.type)
    sizes = array.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
    starts = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    valid = None
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        sizes[~valid] = 0
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    index = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, sizes)
    values = array.values.take(pa.array(index))
    field = array.type.value_field
    cls, list_type, offset_type = (
        (pa.LargeListArray, pa.large_list(field), pa.int64()) if large else (pa.ListArray, pa.list_(field), pa.int32())
    )
    mask = None if valid is None else pa.array(~valid)
    return cls.from_arrays(pa.array(offsets, offset_type), values, type=list_type, mask=mask)


def _is_binary_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_binary(t) or pa.types.is_string(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)
        or pa.types.is_binary_view(t) or pa.types.is_string_view(t) or pa.types.is_fixed_size_binary(t)
    )


def _is_view(t: pa.DataType) -> bool:
    return pa.types.is_binary_view(t) or pa.types.is_string_view(t)


def _is_list_like(t: pa.DataType) -> bool:
    return (
        pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t) or pa.types.is_large_list_view(t) or pa.types.is_map(t)
    )


def _width(t: pa.DataType) -> int:
    """Bytes per element of a new array of type ``t`` (offsets, validity; not string data)."""
    if pa.types.is_null(t):
        return 0
    if pa.types.is_struct(t):
        return 1 + sum(_width(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_fixed_size_list(t):
        return 1 + t.list_size * _width(t.value_type)
    if pa.types.is_dictionary(t):
        return 1 + _width(t.index_type)
    if pa.types.is_fixed_size_binary(t):
        return 1 + t.byte_width
    if pa.types.is_boolean(t):
        return 1
    try:
        return 1 + max(1, t.bit_width // 8)
    except (ValueError, TypeError, AttributeError):
        return 17  # offsets (and sizes, for views) of variable-size types


def _value_type(t: pa.DataType) -> pa.DataType:
    if pa.types.is_map(t):
        return pa.struct([t.key_field, t.item_field])
    return t.value_type


def _list_values(array: pa.Array) -> pa.Array:
    if pa.types.is_map(array.type):
        return pa.StructArray.from_arrays([array.keys, array.items], fields=[array.type.key_field, array.type.item_field])
    return array.values


def _view_lengths(array: pa.Array) -> np.ndarray:
    views = array.buffers()[1]
    if views is None or not len(array):
        return np.zeros(0, dtype=np.int64)
    lengths = np.frombuffer(views, dtype="<i4", count=4 * (array.offset + len(array)))[0::4][array.offset :]
    return lengths.astype(np.int64)


def _data_bytes(array: pa.Array) -> int:
    """Bytes of string/binary data the array references (views: counted per view)."""
    if not len(array):
        return 0
    if _is_view(array.type):
        return int(_view_lengths(array).sum())
    if pa.types.is_fixed_size_binary(array.type):
        return len(array) * array.type.byte_width
    total = pc.sum(pc.binary_length(array)).as_py()
    return int(total or 0)


def _max_entry(values: pa.Array, target: pa.DataType) -> int:
    """Upper bound of the bytes one entry of ``values`` takes once cast to ``target``."""
    if not len(values):
        return 0
    source = values.type
    if _is_binary_like(source):
        if _is_view(source):
            longest = int(_view_lengths(values).max(initial=0))
        elif pa.types.is_fixed_size_binary(source):
            longest = source.byte_width
        else:
            longest = int(pc.max(pc.binary_length(values)).as_py() or 0)
        return _width(target) + (longest if _is_binary_like(target) else 0)
    if pa.types.is_null(source) or source.num_fields == 0:
        return _width(target) + (_TEXT_WIDTH if _is_binary_like(target) else 0)
    # nested entries: the whole array bounds any one entry of it
    return _width(target) + _cast_cost(values, target) + values.get_total_buffer_size()


def _cast_cost(array: pa.Array, target: pa.DataType) -> int:
    """Upper bound of the bytes ``array.cast(target)`` allocates, computed without
    materialising anything. 0 when nothing is converted."""
    source = array.type
    n = len(array)
    if source == target:
        return 0
    if pa.types.is_null(source):
        return n * _width(target)
    if pa.types.is_dictionary(source):
        return n * _max_entry(array.dictionary, target)
    if pa.types.is_run_end_encoded(source):
        return n * _max_entry(array.values, target)
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        total = n
        for i in range(target.num_fields):
            field = target.field(i)
            index = source.get_field_index(field.name)
            total += _cast_cost(array.field(index), field.type) if index >= 0 else n * _width(field.type)
        return total
    if _is_list_like(source) and _is_list_like(target):
        values = _list_values(array)
        value_type = _value_type(target)
        if pa.types.is_list_view(source) or pa.types.is_large_list_view(source):
            sizes = array.sizes.to_numpy(zero_copy_only=False).astype(np.int64)
            if array.null_count:
                sizes[~array.is_valid().to_numpy(zero_copy_only=False)] = 0
            elements = int(np.clip(sizes, 0, None).sum())
            return n * _width(target) + elements * _max_entry(values, value_type)
        return n * _width(target) + _cast_cost(values, value_type)
    if _is_binary_like(source):
        if _is_binary_like(target):
            return n * _width(target) + _data_bytes(array)
        return n * _width(target)
    if _is_binary_like(target):
        return n * (_width(target) + _TEXT_WIDTH)
    return n * _width(target)


def message_layout(message: bytes) -> list[dict]:
    """Where the metadata fields of each IPC message of ``message`` (an Arrow stream) are,
    for fuzzers and tests that rewrite them: per message ``type`` (1 schema, 2 dictionary
    batch, 3 record batch), ``meta`` and ``body`` (positions), and for batches
    ``length_at`` (the row count), ``nodes`` and ``buffers`` (positions of the field nodes
    and ``(position, offset, length)`` of the buffer entries) and ``compressed``; for a
    schema, ``table`` (its flatbuffer table: position, vtable, size, relative to ``meta``)
    and ``fields_at`` (its ``fields`` vector, relative to ``meta``). It stops at the first
    message it cannot walk; it validates nothing (``check_stream`` does)."""
    out = []
    pos = 0
    end = len(message)
    while pos + 8 <= end:
        length = struct.unpack_from("<I", message, pos)[0]
        pos += 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from("<I", message, pos)[0]
            pos += 4
        if length == 0 or pos + length > end:
            break
        meta = memoryview(message)[pos : pos + length]
        header_type, header, body_length = _message_header(meta, length)
        body = pos + length
        entry: dict = {"type": header_type, "body": body, "meta": pos}
        batch: Optional[tuple[int, int, int]] = header
        if header_type == 1:
            entry["table"] = header
            entry["fields_at"] = _target(meta, length, header, 1)
        if header_type == 2:
            data = _target(meta, length, header, 1)
            batch = _table(meta, length, data) if data else None
        if header_type in (2, 3) and batch:
            entry["length_at"] = _field(meta, length, batch, 0)
            count, at = _struct_vector(meta, length, _target(meta, length, batch, 1), 16)
            entry["nodes"] = [pos + at + 16 * i for i in range(count)]
            count, at = _struct_vector(meta, length, _target(meta, length, batch, 2), 16)
            entry["buffers"] = [(pos + at + 16 * i, *struct.unpack_from("<qq", meta, at + 16 * i))
                                for i in range(count)]
            entry["compressed"] = bool(_target(meta, length, batch, 3))
        out.append(entry)
        pos = body + body_length
    return out
