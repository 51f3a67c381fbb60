"""Turn spooled messages into the Arrow record batches Spark receives (executor side).

Decoding happens in the read tasks, not in the receivers, so it runs in parallel on the
executors and the receivers only move bytes. Every output batch has exactly the Arrow
schema Spark derives from the DataFrame's schema (``to_arrow_schema``), which pyspark
checks before it accepts batches from ``read()``.

Malformed input follows Spark's JSON reader conventions (``mode``):
PERMISSIVE keeps the row (fields null, the raw text in ``columnNameOfCorruptRecord`` when
the schema has that column), DROPMALFORMED drops it, FAILFAST fails the query with the
message's channel, offset and a prefix of its content.

Messages come from anyone who can reach the socket, so no input may crash a worker or
reach Spark invalid:

- ``json``: a message is one JSON object, UTF-8, at most ``max_message_bytes``; anything
  else (``null``, ``42``, ``[]``, several objects, NUL bytes, invalid UTF-8) is malformed.
  The hot path parses a whole batch as newline-delimited JSON in pyarrow's C++ reader, so
  a vectorised screen (numpy over the Arrow offsets/data buffers) first admits only
  messages whose content is ``{...}`` on one line with no NUL: pyarrow's reader crashes on
  a top-level ``null`` that starts a block and silently nulls one elsewhere, and a line
  that starts with ``{`` can never be continued by the next message's line. The rest
  (pretty-printed objects, messages with CR/LF inside) are checked one by one with
  Python's ``json`` before pyarrow sees them, so for them nesting deeper than Python's
  recursion limit is malformed. A batch that fails to parse is bisected, so one bad
  message costs O(log n) parses, not n. Duplicate keys, numbers out of the column's
  range and JSON that Python and pyarrow disagree on are malformed too.
- ``arrow``: every message goes through ``arrow_guard.read_batches`` (caps checked from
  the metadata before decompression, full validation, bounded casts). Arrow has no
  corrupt-record column, so PERMISSIVE fails like FAILFAST. With ``includeHeaders`` the
  declared ``headers map<string,string>`` column is not read from the message but built
  from its schema's custom metadata (``headers_template``/``headers_column``: per output
  batch with pyarrow ``take``, no Python per row); since the metadata repeats on every
  row, rows x its bytes are capped like decompressed buffers, at ``max_body_bytes`` per
  message, and a message over the cap is malformed.
- ``text``: invalid UTF-8 is replaced (U+FFFD), as Spark does; only the invalid messages,
  found by bisecting Arrow's UTF-8 validation, are decoded in Python.

Output batches carry at most about ``_MAX_OUTPUT_BATCH_BYTES`` of message payload each.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.types import MapType, StringType, StructType

from ..ingest import arrow_guard
from ..options import OptionError
from ..schemas import arrow_schema

if TYPE_CHECKING:
    from ..options import SourceOptions

__all__ = [
    "Decoder",
    "MalformedMessageError",
    "decoder_for",
    "HEADERS_COLUMN",
    "ROW_KEY",
    "headers_template",
    "headers_column",
    "METADATA_COLUMNS",
]

# Spark hands Arrow batches to the JVM; keep each under this many payload bytes.
_MAX_OUTPUT_BATCH_BYTES = 64 << 20

# pyarrow's JSON reader block size when no message needs more (its default: 1 MiB blocks
# are parsed in parallel).
_MIN_JSON_BLOCK = 1 << 20
# Leading/trailing whitespace the vectorised screen strips before sending the message to
# the one-by-one check instead (JSON whitespace: space, tab, CR, LF).
_MAX_WS_ROUNDS = 8
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[0x20, 0x09, 0x0D, 0x0A]] = True
_OPEN, _CLOSE = ord("{"), ord("}")


class MalformedMessageError(ValueError):
    """A message does not parse in the declared format/schema (mode FAILFAST)."""


# -- includeHeaders: the message's custom metadata as a map column --------------------------

#: the declared column ``includeHeaders`` fills
HEADERS_COLUMN = "headers"
#: the key the source adds to every row's headers: the row's position in its message
ROW_KEY = "spark_zmq.row"
# bytes the row key's entry takes in one row: its text, the longest position (a 64-bit
# integer), their two int32 offsets, and the map's own offset
_ROW_ENTRY_BYTES = len(ROW_KEY) + 20 + 2 * 4 + 4


class _Headers:
    """One message's headers, decoded once: the metadata keys and values (without the
    row key) as string arrays; the bytes its metadata adds to each row (text and two
    int32 offsets per entry; 0 without metadata), and the bytes one row's map takes."""

    __slots__ = ("keys", "values", "metadata_bytes", "row_bytes")

    def __init__(self, keys: pa.Array, values: pa.Array) -> None:
        self.keys = keys
        self.values = values
        text = pc.sum(pc.binary_length(keys)).as_py() or 0
        text += pc.sum(pc.binary_length(values)).as_py() or 0
        self.metadata_bytes = int(text) + len(keys) * 2 * 4
        self.row_bytes = self.metadata_bytes + _ROW_ENTRY_BYTES


def headers_template(metadata: Optional[Mapping[bytes, bytes]]) -> _Headers:
    """A message's custom metadata as the keys and values every row's ``headers`` map
    starts with: decoded as UTF-8 with invalid bytes replaced (U+FFFD), never an error; a
    key the decoding makes equal to an earlier one keeps the later value; ``spark_zmq.row``
    is left out (the source sets it on each row, a sender cannot)."""
    entries: dict[str, str] = {}
    for key, value in (metadata or {}).items():
        entries[bytes(key).decode("utf-8", "replace")] = bytes(value).decode("utf-8", "replace")
    entries.pop(ROW_KEY, None)
    keys = pa.array(list(entries), pa.string())
    values = pa.array(list(entries.values()), pa.string())
    return _Headers(keys, values)


def headers_column(headers: _Headers, first_row: int, rows: int, map_type: pa.DataType) -> pa.MapArray:
    """The ``headers`` column of ``rows`` consecutive rows of one message, the first at
    position ``first_row``: each row's map is the metadata then ``spark_zmq.row``."""
    k = len(headers.keys)
    width = k + 1
    keys = pa.concat_arrays([headers.keys, pa.array([ROW_KEY], pa.string())])
    positions = pc.cast(pa.array(np.arange(first_row, first_row + rows, dtype=np.int64)), pa.string())
    texts = pa.concat_arrays([headers.values, positions])
    # row r, entry j: metadata entry j (j < k), else the row's position (texts[k + r])
    key_index = np.tile(np.arange(width, dtype=np.int64), rows)
    value_index = np.empty((rows, width), dtype=np.int64)
    value_index[:, :k] = np.arange(k, dtype=np.int64)
    value_index[:, k] = np.arange(k, k + rows, dtype=np.int64)
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32), pa.int32())
    return pa.MapArray.from_arrays(
        offsets, keys.take(pa.array(key_index)), texts.take(pa.array(value_index.ravel())), type=map_type
    )


def _names(names: list[str], limit: int = 12) -> str:
    if not names:
        return "no columns"
    return ", ".join(names[:limit]) + (f", ... ({len(names)} columns)" if len(names) > limit else "")


def _headers_field(fmt: str, schema: StructType) -> int:
    """The position of the declared ``headers map<string,string>`` column (includeHeaders)."""
    if fmt != "arrow":
        raise OptionError(
            f"option 'includeHeaders' applies to format 'arrow' only; format is {fmt!r}", "includeHeaders"
        )
    names = schema.fieldNames()
    found = [i for i, name in enumerate(names) if name == HEADERS_COLUMN]
    declare = (
        "Spark takes a declared schema as it is, so the column is declared, not added: "
        ".schema('id long, headers map<string,string>')"
    )
    if not found:
        near = [name for name in names if name.lower() == HEADERS_COLUMN]
        hint = f" (column {near[0]!r} differs in case; the name is exactly 'headers')" if near else ""
        raise OptionError(
            f"option 'includeHeaders' = true fills the column 'headers map<string,string>', which the declared "
            f"schema ({_names(names)}) lacks{hint}. {declare}; or set includeHeaders=false",
            "includeHeaders",
        )
    if len(found) > 1:
        raise OptionError(
            f"option 'includeHeaders': the declared schema has {len(found)} columns named 'headers'; declare one",
            "includeHeaders",
        )
    data_type = schema.fields[found[0]].dataType
    if not (isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType)
            and isinstance(data_type.valueType, StringType)):
        raise OptionError(
            f"option 'includeHeaders' = true fills the column 'headers', which must be declared "
            f"map<string,string>, not {data_type.simpleString()}; a message column named 'headers' cannot be "
            "read while includeHeaders is true",
            "includeHeaders",
        )
    return found[0]


#: the columns includeMetadata fills, last in the declared schema, as the raw format has them
METADATA_COLUMNS = (("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"))
_METADATA_DDL = "topic string, partition int, offset long, timestamp timestamp"


def _metadata_fields(fmt: str, schema: StructType) -> StructType:
    """The declared columns read from messages, once the includeMetadata columns (the last
    four, exactly ``METADATA_COLUMNS``) are checked and taken off."""
    if fmt not in ("json", "arrow"):
        raise OptionError(f"option 'includeMetadata' applies to formats 'json' and 'arrow'; format {fmt!r} has "
                          "these columns already", "includeMetadata")
    names = schema.fieldNames()
    tail = [(f.name, f.dataType.simpleString()) for f in schema.fields[-len(METADATA_COLUMNS):]]
    if len(names) < len(METADATA_COLUMNS) or tail != list(METADATA_COLUMNS):
        raise OptionError(
            f"option 'includeMetadata' = true fills the columns '{_METADATA_DDL}', which must be the last four of "
            f"the declared schema ({_names(names)}). Spark takes a declared schema as it is, so they are declared, "
            f"not added: .schema('sensor string, reading double, {_METADATA_DDL}'); or set includeMetadata=false",
            "includeMetadata",
        )
    data = schema.fields[: -len(METADATA_COLUMNS)]
    clash = [f.name for f in data if f.name.lower() in {name for name, _ in METADATA_COLUMNS}]
    if clash:
        raise OptionError(
            f"option 'includeMetadata': the message column {clash[0]!r} has the name of a metadata column "
            f"({', '.join(n for n, _ in METADATA_COLUMNS)}); rename it in the producer, or set includeMetadata=false",
            "includeMetadata",
        )
    return StructType(data)


def _preview(value: bytes, limit: int = 120) -> str:
    text = bytes(value[:limit]).decode("utf-8", "replace")
    return text + ("..." if len(value) > limit else "")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _offsets_and_data(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The n+1 offsets (int64) and the data bytes of a binary/large_binary array."""
    buffers = values.buffers()
    dtype = np.int64 if pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(buffers[1], dtype=dtype, count=values.offset + len(values) + 1)[values.offset :]
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, dtype=np.uint8)
    return offsets.astype(np.int64, copy=False), data


def _slices(values: pa.Array, limit: int) -> list[tuple[int, int]]:
    """Row ranges [start, stop) whose payload is at most ``limit`` bytes (one row at least)."""
    n = len(values)
    offsets, _ = _offsets_and_data(values)
    if offsets[-1] - offsets[0] <= limit:
        return [(0, n)]
    ranges = []
    start = 0
    while start < n:
        stop = int(np.searchsorted(offsets, offsets[start] + limit, side="right")) - 1
        stop = min(n, max(stop, start + 1))
        ranges.append((start, stop))
        start = stop
    return ranges


def _invalid_utf8(values: pa.Array) -> list[int]:
    """Indices of the messages that are not valid UTF-8, by bisecting Arrow's validation:
    O(k log n) C++ validations for k invalid messages, no Python per valid message."""
    text = pa.Array.from_buffers(pa.large_string() if pa.types.is_large_binary(values.type) else pa.string(),
                                 len(values), values.buffers(), offset=values.offset)
    bad: list[int] = []
    stack = [(0, len(values))]
    while stack:
        lo, hi = stack.pop()
        try:
            text.slice(lo, hi - lo).validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        if hi - lo == 1:
            bad.append(lo)
        else:
            mid = (lo + hi) // 2
            stack.append((mid, hi))
            stack.append((lo, mid))
    return bad


def _json_kind(text: bytes) -> str:
    """What a (stripped, non-object) message looks like, for the malformed reason."""
    head = text[:1]
    if head == b"[":
        return "an array"
    if head == b'"':
        return "a string"
    if text.startswith(b"null"):
        return "null"
    if text.startswith((b"true", b"false")):
        return "a boolean"
    if head in b"-0123456789" and head:
        return "a number"
    return "not JSON"


class Decoder:
    """Decode spool batches of one channel in one format into the output schema."""

    def __init__(
        self,
        fmt: str,
        schema: StructType,
        *,
        mode: str = "PERMISSIVE",
        corrupt_column: Optional[str] = None,
        max_message_bytes: int = 64 << 20,
        include_headers: bool = False,
        include_metadata: bool = False,
    ) -> None:
        self.fmt = fmt
        #: includeMetadata: the output schema (data columns + metadata); ``target`` and
        #: ``schema`` below are then the data columns only, what the messages hold
        self.output: Optional[pa.Schema] = arrow_schema(schema) if include_metadata else None
        if include_metadata:
            schema = _metadata_fields(fmt, schema)
        self.schema = schema
        self.target = arrow_schema(schema)
        # includeHeaders: where the headers column goes, and the columns read from messages
        self.headers_at: Optional[int] = _headers_field(fmt, schema) if include_headers else None
        self.message_target: Optional[pa.Schema] = self.target
        if self.headers_at is not None:
            self.headers_type = self.target.field(self.headers_at).type
            self.message_target = self.target.remove(self.headers_at)
            if not len(self.message_target):  # headers only: rows counted from the message as sent
                self.message_target = None
        self.mode = mode
        self.corrupt_column = corrupt_column if corrupt_column and corrupt_column in schema.fieldNames() else None
        self.max_message_bytes = max_message_bytes
        # arrow: decompressed bytes one message may take (and its casts may allocate)
        self.max_body_bytes = min(arrow_guard.MAX_DECOMPRESSED_BYTES, 16 * max_message_bytes)
        if fmt == "json":
            data_fields = [f for f in self.target if f.name != self.corrupt_column]
            self._json_schema = pa.schema(data_fields)
            # One line per message: the batched hot path (messages screened by _json_screen).
            self._line_options = pa_json.ParseOptions(
                explicit_schema=self._json_schema, unexpected_field_behavior="ignore", newlines_in_values=False
            )
            # Multi-line messages, each checked to be exactly one object by json.loads first.
            self._object_options = pa_json.ParseOptions(
                explicit_schema=self._json_schema, unexpected_field_behavior="ignore", newlines_in_values=True
            )
            try:
                pa_json.read_json(pa.BufferReader(b"{}"), parse_options=self._line_options,
                                  read_options=pa_json.ReadOptions(use_threads=False))
            except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise ValueError(
                    f"format 'json' cannot decode the declared schema: {_first_line(exc)}; "
                    "declare such columns as string and convert them in Spark"
                ) from None
        self.malformed = 0

    def decode(self, batch: pa.RecordBatch, channel: int, first_offset: int) -> Iterator[pa.RecordBatch]:
        if batch.num_rows == 0:
            return
        for start, stop in _slices(batch.column(0), _MAX_OUTPUT_BATCH_BYTES):
            piece = batch if (start, stop) == (0, batch.num_rows) else batch.slice(start, stop - start)
            if self.fmt in ("raw", "text"):
                yield from self._decode_columns(piece, channel, first_offset + start)
                continue
            decoded = (self._decode_json(piece, channel, first_offset + start) if self.fmt == "json"
                       else self._decode_arrow(piece, channel, first_offset + start))
            if self.output is None:
                for out, _ in decoded:
                    yield out
            else:
                for out, rows_from in decoded:
                    yield self._with_metadata(out, rows_from, piece, channel, first_offset + start)

    def _with_metadata(self, out: pa.RecordBatch, rows_from, piece: pa.RecordBatch, channel: int,
                       first: int) -> pa.RecordBatch:
        """``out`` with the includeMetadata columns appended: each row's message is
        ``rows_from`` (one message index for all rows, or one per row) within ``piece``."""
        n = out.num_rows
        index = np.full(n, rows_from, dtype=np.int64) if isinstance(rows_from, int) else rows_from
        taken = pa.array(index)
        columns = [piece.column(1).take(taken), pa.array(np.full(n, channel, dtype=np.int32)),
                   pa.array(index + first), piece.column(2).take(taken)]
        assert self.output is not None
        tail = self.output.types[-len(columns):]
        arrays = out.columns + [column.cast(kind) for column, kind in zip(columns, tail)]
        return pa.RecordBatch.from_arrays(arrays, schema=self.output)

    # -- raw / text ----------------------------------------------------------------------

    def _decode_columns(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[pa.RecordBatch]:
        n = batch.num_rows
        values = batch.column(0)
        value = self._to_text(values) if self.fmt == "text" else values
        columns = {
            "value": value,
            "topic": batch.column(1),
            "partition": pa.array(np.full(n, channel, dtype=np.int32)),
            "offset": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "timestamp": batch.column(2),
        }
        arrays = []
        for field in self.target:
            if field.name not in columns:
                raise ValueError(
                    f"column {field.name!r} is not produced by format {self.fmt!r}; "
                    f"its columns are {', '.join(columns)}"
                )
            arrays.append(columns[field.name].cast(field.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=self.target)

    @staticmethod
    def _to_text(values: pa.Array) -> pa.Array:
        """Messages as strings; invalid UTF-8 replaced (U+FFFD) as Spark's decode does."""
        try:
            return values.cast(pa.large_string())
        except pa.ArrowInvalid:
            pass
        bad = _invalid_utf8(values)
        pieces = []
        start = 0
        for i in bad:
            if i > start:
                pieces.append(values.slice(start, i - start).cast(pa.large_string()))
            value = values[i].as_py()
            pieces.append(pa.array([None if value is None else value.decode("utf-8", "replace")], pa.large_string()))
            start = i + 1
        if start < len(values):
            pieces.append(values.slice(start).cast(pa.large_string()))
        return pa.concat_arrays(pieces)

    # -- json ------------------------------------------------------------------------------

    def _malformed_error(self, channel: int, offset: int, value: Optional[bytes], reason: str) -> MalformedMessageError:
        return MalformedMessageError(
            f"malformed {self.fmt} message at channel {channel}, offset {offset} "
            f"(mode=FAILFAST): {reason}; message starts {_preview(value or b'')!r}"
        )

    def _json_screen(self, values: pa.Array) -> tuple[np.ndarray, int]:
        """Vectorised pre-check: which messages may go to the batched line parser (their
        content, without surrounding JSON whitespace, is ``{...}`` with no CR, LF or NUL;
        the batch is valid UTF-8 or the invalid ones are excluded), and the longest one."""
        offsets, data = _offsets_and_data(values)
        starts, ends = offsets[:-1].copy(), offsets[1:].copy()
        lengths = ends - starts
        ok = (lengths >= 2) & (lengths <= self.max_message_bytes)
        if values.null_count:
            ok &= values.is_valid().to_numpy(zero_copy_only=False)
        if not data.size:
            return ok & False, 0
        last = data.size - 1
        # strip leading, then trailing whitespace, a byte per round on the messages that have
        # it (usually none, or one trailing newline); more than a few: checked one by one
        for leading in (True, False):
            todo = np.flatnonzero(ok)
            for _ in range(_MAX_WS_ROUNDS):
                at = starts[todo] if leading else ends[todo] - 1
                todo = todo[(starts[todo] < ends[todo]) & _WHITESPACE[data[np.clip(at, 0, last)]]]
                if not todo.size:
                    break
                if leading:
                    starts[todo] += 1
                else:
                    ends[todo] -= 1
            else:
                ok[todo] = False
        ok &= ends - starts >= 2
        ok &= data[np.clip(starts, 0, last)] == _OPEN
        ok &= data[np.clip(ends - 1, 0, last)] == _CLOSE
        # CR, LF or NUL inside a message's content: not one line, or not JSON at all
        segment = data[offsets[0] : offsets[-1]]
        special = np.flatnonzero((segment == 0x0A) | (segment == 0x0D) | (segment == 0))
        if special.size:
            special += offsets[0]
            owner = np.searchsorted(offsets, special, side="right") - 1
            inside = (special >= starts[owner]) & (special < ends[owner]) | (data[special] == 0)
            ok[owner[inside]] = False
        try:
            values.cast(pa.large_string() if pa.types.is_large_binary(values.type) else pa.string())
        except pa.ArrowInvalid:
            ok[_invalid_utf8(values)] = False
        longest = int(lengths[ok].max()) if ok.any() else 0
        return ok, longest

    def _check_object(self, value: Optional[bytes]) -> Optional[str]:
        """Why a message that failed the screen is malformed, or None when it is one JSON
        object (then pyarrow may parse it: it cannot start a block with a non-object)."""
        if value is None:
            return "null message"
        if len(value) > self.max_message_bytes:
            return f"message of {len(value):,} bytes exceeds maxMessageBytes ({self.max_message_bytes:,})"
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"not valid UTF-8 (byte {exc.start})"
        stripped = value.strip(b" \t\r\n")
        if not stripped:
            return "empty message"
        if not stripped.startswith(b"{"):
            return f"the JSON value is {_json_kind(stripped)}, not an object"
        if b"\x00" in value:
            return "NUL byte in the message"
        try:
            parsed = json.loads(text)
        except RecursionError:
            return "JSON nested too deeply"
        except ValueError as exc:
            return f"not one JSON object: {exc}"
        if not isinstance(parsed, dict):  # unreachable after the '{' check, kept as the contract
            return "the JSON value is not an object"
        return None

    def _parse_groups(self, values: pa.Array, indices: np.ndarray, options: pa_json.ParseOptions,
                      block_size: int, found: list, bad: dict) -> None:
        """Parse the messages at ``indices`` as one newline-delimited text; bisect the
        parts that fail (or yield another row count) down to single malformed messages."""
        read_options = pa_json.ReadOptions(use_threads=True, block_size=block_size)
        everything = indices.size == len(values)
        stack = [indices]
        while stack:
            part = stack.pop()
            subset = values if everything and part is indices else values.take(pa.array(part))
            joined = pc.binary_join_element_wise(subset, pa.scalar(b"", subset.type), pa.scalar(b"\n", subset.type))
            size = _offsets_and_data(joined)[0][-1]
            text = joined.buffers()[2].slice(0, int(size))
            try:
                table = pa_json.read_json(pa.BufferReader(text), read_options=read_options, parse_options=options)
                if table.num_rows == part.size:
                    found.append((part, table))
                    continue
                reason = f"{table.num_rows} JSON values in one message, expected 1"
            except Exception as exc:  # noqa: BLE001 - whatever pyarrow raises, the part has a bad message
                reason = _first_line(exc)
            if part.size == 1:
                bad[int(part[0])] = reason
            else:
                middle = part.size // 2
                stack.append(part[middle:])
                stack.append(part[:middle])

    def _decode_json(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[tuple]:
        values = batch.column(0)
        n = len(values)
        fast, longest = self._json_screen(values)
        found: list = []  # (message indices, table) in index order within each group
        bad: dict[int, str] = {}
        fast_indices = np.flatnonzero(fast)
        if fast_indices.size:
            block = min(max(_MIN_JSON_BLOCK, longest + 64), 2**31 - 1)
            self._parse_groups(values, fast_indices, self._line_options, block, found, bad)
        if fast_indices.size < n:
            objects = []
            longest_object = 0
            for i in np.flatnonzero(~fast):
                value = values[int(i)].as_py()
                reason = self._check_object(value)
                if reason is None:
                    objects.append(int(i))
                    longest_object = max(longest_object, len(value))
                else:
                    bad[int(i)] = reason
            if objects:
                block = min(max(_MIN_JSON_BLOCK, longest_object + 64), 2**31 - 1)
                self._parse_groups(values, np.array(objects, dtype=np.int64), self._object_options, block, found, bad)
        if bad:
            self.malformed += len(bad)
            if self.mode == "FAILFAST":
                i = min(bad)
                raise self._malformed_error(channel, first + i, values[i].as_py(), bad[i])
        yield from self._assemble_json(values, found, bad)

    def _assemble_json(self, values: pa.Array, found: list, bad: dict) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
        """One output batch in message order: parsed rows, and (PERMISSIVE) a null row with
        the raw text in the corrupt-record column for each malformed message; with it, the
        message index of each row."""
        keep_bad = self.mode == "PERMISSIVE" and bad
        if not found and not keep_bad:
            return
        if len(found) == 1 and not keep_bad:
            table = found[0][1]
            order = None
            bad_rows = 0
            where = found[0][0]
        else:
            tables = [table for _, table in found]
            indices = [part for part, _ in found]
            bad_rows = 0
            if keep_bad:
                bad_indices = np.array(sorted(bad), dtype=np.int64)
                bad_rows = bad_indices.size
                tables.append(pa.table({f.name: pa.nulls(bad_rows, f.type) for f in self._json_schema}, schema=self._json_schema))
                indices.append(bad_indices)
            table = pa.concat_tables([t.select(self._json_schema.names).cast(self._json_schema) for t in tables])
            where = np.concatenate(indices)
            order = np.argsort(where, kind="stable")
            if np.array_equal(order, np.arange(order.size)):
                order = None
        corrupt = None
        if self.corrupt_column is not None:
            if bad_rows:
                texts = [None] * (table.num_rows - bad_rows) + [
                    (values[i].as_py() or b"").decode("utf-8", "replace") for i in sorted(bad)
                ]
                corrupt = pa.array(texts, pa.string())
            else:
                corrupt = pa.nulls(table.num_rows, pa.string())
        arrays = []
        for field in self.target:
            if field.name == self.corrupt_column:
                column = corrupt.cast(field.type)
            else:
                column = table.column(field.name).combine_chunks().cast(field.type)
            arrays.append(column if order is None else column.take(pa.array(order)))
        # each output row is one message: which one, for includeMetadata
        rows_from = np.asarray(where, dtype=np.int64) if order is None else np.asarray(where, dtype=np.int64)[order]
        yield pa.RecordBatch.from_arrays(arrays, schema=self.target), rows_from

    # -- arrow -----------------------------------------------------------------------------

    def _decode_arrow(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[tuple[pa.RecordBatch, int]]:
        """Each message's output batches, with the message's index in ``batch``."""
        values = batch.column(0)
        for i in range(len(values)):
            scalar = values[i]
            headers: Optional[_Headers] = None
            try:
                if not scalar.is_valid:
                    raise arrow_guard.MalformedArrowError("null message")
                if self.headers_at is None:
                    decoded = arrow_guard.read_batches(
                        scalar.as_buffer(), schema=self.target, max_body_bytes=self.max_body_bytes
                    )
                else:
                    decoded, headers = self._read_with_headers(scalar.as_buffer())
            except arrow_guard.MalformedArrowError as exc:
                # Arrow has no corrupt-record column to fall back on: anything but
                # DROPMALFORMED fails, so a schema mismatch is never silently nulled.
                self.malformed += 1
                if self.mode == "DROPMALFORMED":
                    continue
                raise MalformedMessageError(
                    f"arrow message at channel {channel}, offset {first + i} cannot be read as the "
                    f"declared schema ({self.target.to_string(show_schema_metadata=False).replace(chr(10), ', ')}): "
                    f"{exc}. Set mode=DROPMALFORMED to skip such messages."
                ) from None
            if headers is not None:
                for out in self._with_headers(decoded, headers):
                    yield out, i
                continue
            for out in decoded:
                if not out.num_rows:
                    continue
                size = out.nbytes
                if size <= _MAX_OUTPUT_BATCH_BYTES:
                    yield out, i
                    continue
                step = max(1, out.num_rows * _MAX_OUTPUT_BATCH_BYTES // size)
                for start in range(0, out.num_rows, step):
                    yield out.slice(start, step), i

    def _read_with_headers(self, buffer: pa.Buffer) -> tuple[list[pa.RecordBatch], _Headers]:
        """The message's batches (the declared columns but ``headers``) and its headers,
        checked: the metadata copied onto every row (rows x its bytes) is capped like the
        message's decompressed buffers. The row key's part is not counted: rows are
        capped already (``arrow_guard.MAX_ROWS``), and a message without metadata never
        becomes malformed because of includeHeaders."""
        message = arrow_guard.read_message(buffer, schema=self.message_target, max_body_bytes=self.max_body_bytes)
        headers = headers_template(message.metadata)
        rows = sum(b.num_rows for b in message.batches)
        total = rows * headers.metadata_bytes
        if total > self.max_body_bytes:
            raise arrow_guard.MalformedArrowError(
                f"its headers column would copy about {total:,} bytes of metadata ({len(headers.keys):,} entries, "
                f"{headers.metadata_bytes:,} bytes, onto each of {rows:,} rows), more than the "
                f"{self.max_body_bytes:,} bytes a message may (includeHeaders)"
            )
        return message.batches, headers

    def _with_headers(self, decoded: list[pa.RecordBatch], headers: _Headers) -> Iterator[pa.RecordBatch]:
        """Output batches of one message with its headers column inserted, each at most
        about ``_MAX_OUTPUT_BATCH_BYTES``; ``spark_zmq.row`` counts across its batches."""
        position = 0
        for out in decoded:
            rows = out.num_rows
            if not rows:
                continue
            data = [] if self.message_target is None else out.columns
            size = (out.nbytes if data else 0) + rows * headers.row_bytes
            step = rows if size <= _MAX_OUTPUT_BATCH_BYTES else max(1, rows * _MAX_OUTPUT_BATCH_BYTES // size)
            for start in range(0, rows, step):
                n = min(step, rows - start)
                arrays = [column.slice(start, n) for column in data]
                arrays.insert(self.headers_at, headers_column(headers, position + start, n, self.headers_type))
                yield pa.RecordBatch.from_arrays(arrays, schema=self.target)
            position += rows


def decoder_for(options: "SourceOptions", schema: StructType) -> Decoder:
    """The decoder a source's options call for (stream and bounded batch reads alike)."""
    return Decoder(options.format, schema, mode=options.mode, corrupt_column=options.corrupt_column,
                   max_message_bytes=options.max_message_bytes, include_headers=options.include_headers,
                   include_metadata=options.include_metadata)
