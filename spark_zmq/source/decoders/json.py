"""Format ``json``: each message one JSON object, parsed into the declared columns.

A message is one JSON object, UTF-8, at most ``max_message_bytes``; anything else
(``null``, ``42``, ``[]``, several objects, NUL bytes, invalid UTF-8) is malformed and
follows ``mode`` as Spark's JSON reader does: PERMISSIVE keeps the row (fields null, the
raw text in ``columnNameOfCorruptRecord`` when the schema has that column), DROPMALFORMED
drops it, FAILFAST fails the query with the message's channel, offset and a prefix of
its content.

The hot path parses a whole batch as newline-delimited JSON in pyarrow's C++ reader, so
a vectorised screen (numpy over the Arrow offsets/data buffers) first admits only
messages whose content is ``{...}`` on one line with no NUL: pyarrow's reader crashes on
a top-level ``null`` that starts a block and silently nulls one elsewhere, and a line
that starts with ``{`` can never be continued by the next message's line. The rest
(pretty-printed objects, messages with CR/LF inside) are checked one by one with
Python's ``json`` before pyarrow sees them, so for them nesting deeper than Python's
recursion limit is malformed. A batch that fails to parse is bisected, so one bad
message costs O(log n) parses, not n. Duplicate keys, numbers out of the column's range
and JSON that Python and pyarrow disagree on are malformed too.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from pyspark.sql.types import StructType

from .base import Decoder, MalformedMessageError, RowsFrom, _first_line, _invalid_utf8, _offsets_and_data, _preview

__all__ = ["JsonDecoder"]

log = logging.getLogger(__name__)

# pyarrow's reader on a value whose JSON type does not fit the column's, e.g. an epoch
# number in a timestamp column: "JSON parse error: Column(/ts) changed from string to
# number in row 0" (it names what it expected for the column, not the declared type)
_TYPE_CHANGED = re.compile(r"Column\((/[^)]*)\) changed from (\w+) to (\w+)")
# the row of a parse error within the part parsed, which says nothing to the user
_IN_ROW = re.compile(r" in row \d+")

# pyarrow's JSON reader block size when no message needs more (its default: 1 MiB blocks
# are parsed in parallel).
_MIN_JSON_BLOCK = 1 << 20
# Leading/trailing whitespace the vectorised screen strips before sending the message to
# the one-by-one check instead (JSON whitespace: space, tab, CR, LF).
_MAX_WS_ROUNDS = 8
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[0x20, 0x09, 0x0D, 0x0A]] = True
_OPEN, _CLOSE = ord("{"), ord("}")


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


class JsonDecoder(Decoder):
    """``json``: the declared columns; the corrupt-record column is filled, not parsed.

    The declared schema is tried on an empty object first, so that a column type
    pyarrow's JSON reader cannot produce fails when the reader is made, not per message.
    """

    fmt = "json"

    def __init__(self, schema: StructType, **settings: Any) -> None:
        super().__init__(schema, **settings)
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
            pa_json.read_json(
                pa.BufferReader(b"{}"),
                parse_options=self._line_options,
                read_options=pa_json.ReadOptions(use_threads=False),
            )
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ValueError(
                f"format 'json' cannot decode the declared schema: {_first_line(exc)}; "
                "declare such columns as string and convert them in Spark"
            ) from None

    def _declared_type(self, path: str) -> str | None:
        """The declared Spark type of the column at pyarrow's JSON ``path`` (``/a/b``)."""
        kind: Any = self.schema
        for name in path.strip("/").split("/"):
            fields = getattr(kind, "fields", None)
            match = [f for f in fields or () if f.name == name]
            if not match:
                return None
            kind = match[0].dataType
        return kind.simpleString()

    def _explain(self, reason: str) -> str:
        """``reason`` with a type mismatch told in the schema's terms: the column, its
        declared type and the JSON value's type."""
        found = _TYPE_CHANGED.search(reason)
        if found is None:
            return reason
        path, json_type = found.group(1), found.group(3)
        declared = self._declared_type(path)
        if declared is None:
            return reason
        column = path.strip("/").replace("/", ".")
        article = "an" if json_type[:1] in "aeiou" else "a"
        return f"column {column!r} is declared {declared} but the JSON value is {article} {json_type}"

    def _warn_malformed(self, bad: dict, n: int, channel: int, first: int) -> None:
        """One warning per spool batch for the messages that became null rows (PERMISSIVE)
        or were dropped (DROPMALFORMED), with the count of each reason."""
        reasons = Counter(_IN_ROW.sub("", reason) for reason in bad.values())
        told = "; ".join(
            f"{reason} ({count:,} message{'s' if count > 1 else ''})" for reason, count in reasons.most_common(3)
        )
        more = f"; and {len(reasons) - 3} other reason(s)" if len(reasons) > 3 else ""
        outcome = "became null rows" if self.mode == "PERMISSIVE" else "were dropped"
        log.warning(
            "format json, mode=%s: %s of %s messages of channel %s (offsets %s to %s) %s: %s%s",
            self.mode,
            f"{len(bad):,}",
            f"{n:,}",
            channel,
            first,
            first + n - 1,
            outcome,
            told,
            more,
        )

    def _malformed_error(self, channel: int, offset: int, value: bytes | None, reason: str) -> MalformedMessageError:
        return MalformedMessageError(
            f"malformed {self.fmt} message at channel {channel}, offset {offset} "
            f"(mode=FAILFAST): {reason}; message starts {_preview(value or b'')!r}",
            channel,
            offset,
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

    def _check_object(self, value: bytes | None) -> str | None:
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

    def _parse_groups(
        self,
        values: pa.Array,
        indices: np.ndarray,
        options: pa_json.ParseOptions,
        block_size: int,
        found: list,
        bad: dict,
    ) -> None:
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
                reason = self._explain(_first_line(exc))
            if part.size == 1:
                bad[int(part[0])] = reason
            else:
                middle = part.size // 2
                stack.append(part[middle:])
                stack.append(part[:middle])

    def _messages(self, batch: pa.RecordBatch, channel: int, first: int) -> Iterator[tuple[pa.RecordBatch, RowsFrom]]:
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
                first_bad = min(bad)
                raise self._malformed_error(channel, first + first_bad, values[first_bad].as_py(), bad[first_bad])
            self._warn_malformed(bad, n, channel, first)
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
                tables.append(
                    pa.table({f.name: pa.nulls(bad_rows, f.type) for f in self._json_schema}, schema=self._json_schema)
                )
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
                assert corrupt is not None  # made above when there is a corrupt-record column
                column = corrupt.cast(field.type)
            else:
                column = table.column(field.name).combine_chunks().cast(field.type)
            arrays.append(column if order is None else column.take(pa.array(order)))
        # each output row is one message: which one, for includeMetadata
        rows_from = np.asarray(where, dtype=np.int64) if order is None else np.asarray(where, dtype=np.int64)[order]
        yield pa.RecordBatch.from_arrays(arrays, schema=self.target), rows_from
