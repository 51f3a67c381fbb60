"""Rows to request bodies and replies to columns, one class per ``format``.

A *unit* is what one output batch is made of: for ``arrow``, up to ``batchRows`` rows sent
as one request; for ``json``, ``raw`` and ``text``, one input batch whose rows are sent one
request each. A unit keeps its input rows until every one of its replies is in, then
becomes one output batch: its input columns followed by the reply's.

Replies come from services this project does not control, so each one is checked before
it becomes a column: an Arrow reply goes through the same guard as the source's ``arrow``
messages (a stream claiming a billion rows, a decompression bomb or invalid UTF-8 is
refused before anything is allocated) and must have exactly the request's row count; a
``text`` or ``json`` reply must be UTF-8; every reply must be one frame. A reply that does
not fit raises ``ReplyMismatch`` with the reason; the caller applies ``mode``.

Workers made with ``spark_zmq.worker.serve`` answer a request whose handler failed with
two frames, ``[b"ERROR", message]``: that is a reply that does not fit, with the worker's
message as the reason.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from ..arrow.guard import MalformedArrowError, read_batches
from ..errors import SparkZmqError
from ..requestreply.worker import is_error_reply

__all__ = ["ReplyMismatch", "Unit", "RowCodec", "ArrowCodec", "ValueCodec", "codec_for"]

#: how much of a bad reply an error message quotes
_QUOTE = 80


class ReplyMismatch(SparkZmqError, ValueError):
    """A reply that does not fit its request; the message says why."""


def _single_frame(frames: Sequence[bytes]) -> bytes:
    if is_error_reply(frames):
        text = bytes(frames[1])[:1000].decode("utf-8", "replace")
        raise ReplyMismatch(f"the service answered with an error: {text}")
    if len(frames) != 1:
        raise ReplyMismatch(f"a reply of {len(frames)} frames (one frame was expected)")
    return frames[0]


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReplyMismatch(f"the reply is not UTF-8 (byte {exc.start}: {body[:_QUOTE]!r})") from None


@dataclass
class Unit:
    """Input rows waiting for their replies (``bodies[i]`` answers into ``replies[i]``)."""

    rows: pa.RecordBatch
    #: where these rows start in the task's input, for error messages
    first_row: int
    bodies: list[bytes]
    #: for one-row-per-request units: the rows that were sent (nulls are not)
    sent_rows: list[int] | None = None
    replies: list = field(default_factory=list)
    #: whether this unit holds the last rows of its input batch (the caller joins a
    #: batch's units back into one output batch: see ``ServiceCall``)
    closes_batch: bool = True

    @property
    def complete(self) -> bool:
        return len(self.replies) == len(self.bodies)

    def describe(self, body: int) -> str:
        """Which input rows request ``body`` of this unit carried."""
        if self.sent_rows is None:
            return f"rows {self.first_row}..{self.first_row + self.rows.num_rows - 1}"
        return f"row {self.first_row + self.sent_rows[body]}"


class RowCodec:
    """What every format does: cut input into units, turn a unit's replies into columns."""

    #: the reply columns this codec appends (the corrupt-record column included)
    reply_fields: list[pa.Field]

    def units(self, batch: pa.RecordBatch, first_row: int) -> Iterator[Unit]:
        raise NotImplementedError

    def reply(self, frames: Sequence[bytes], unit: Unit) -> object:
        """One reply, checked and decoded (``ReplyMismatch`` if it does not fit)."""
        raise NotImplementedError

    def misfit(self, reason: str, unit: Unit) -> object:
        """What a reply that does not fit becomes in ``PERMISSIVE`` mode."""
        raise NotImplementedError

    def columns(self, unit: Unit) -> list[pa.Array]:
        """The reply columns of a complete unit, one entry per row of ``unit.rows``."""
        raise NotImplementedError

    def finish(self, unit: Unit, passthrough: Sequence[int]) -> pa.RecordBatch:
        """The output batch: the input columns at ``passthrough``, then the reply's."""
        arrays = [unit.rows.column(i) for i in passthrough] + self.columns(unit)
        names = [unit.rows.schema.field(i).name for i in passthrough] + [f.name for f in self.reply_fields]
        return pa.RecordBatch.from_arrays(arrays, names=names)


class ArrowCodec(RowCodec):
    """``arrow``: up to ``batch_rows`` rows per request, as one Arrow IPC stream; the reply
    one stream with as many rows, holding the reply schema's columns (by name; extra
    columns are ignored; types are cast, within the guard's bounds)."""

    def __init__(
        self, reply_schema: pa.Schema, batch_rows: int, max_reply_bytes: int, corrupt_column: str | None = None
    ) -> None:
        self.corrupt_column = corrupt_column
        self.expected = pa.schema([f for f in reply_schema if f.name != corrupt_column])
        self.reply_fields = list(reply_schema)
        self.batch_rows = batch_rows
        # the guard's bound on what a reply may decompress and cast to, as for the source
        self.max_body_bytes = min(1 << 30, 16 * max_reply_bytes)

    def units(self, batch: pa.RecordBatch, first_row: int) -> Iterator[Unit]:
        for start in range(0, batch.num_rows, self.batch_rows):
            rows = batch.slice(start, self.batch_rows)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as writer:
                writer.write_batch(rows)
            yield Unit(
                rows,
                first_row + start,
                [sink.getvalue().to_pybytes()],
                closes_batch=start + self.batch_rows >= batch.num_rows,
            )

    def reply(self, frames: Sequence[bytes], unit: Unit) -> object:
        body = _single_frame(frames)
        want = unit.rows.num_rows
        try:
            batches = read_batches(body, schema=self.expected, max_rows=want, max_body_bytes=self.max_body_bytes)
        except MalformedArrowError as exc:
            raise ReplyMismatch(f"the reply is not a fitting Arrow stream: {exc}") from None
        got = sum(b.num_rows for b in batches)
        if got != want:
            raise ReplyMismatch(f"a reply of {got} rows to a request of {want} rows")
        return pa.Table.from_batches(batches, schema=self.expected).combine_chunks()

    def misfit(self, reason: str, unit: Unit) -> object:
        return reason

    def columns(self, unit: Unit) -> list[pa.Array]:
        (reply,) = unit.replies
        n = unit.rows.num_rows
        out = []
        for f in self.reply_fields:
            if f.name == self.corrupt_column:
                out.append(pa.array([reply if isinstance(reply, str) else None] * n, pa.string()))
            elif isinstance(reply, str):
                out.append(pa.nulls(n, f.type))
            else:
                column = reply.column(f.name)
                out.append(column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks))
        return out


class ValueCodec(RowCodec):
    """One row per request: ``raw`` and ``text`` send the ``value`` column (a null value is
    not sent; its reply is null), ``json`` sends the row as a JSON object that Spark made.
    The reply is one column: ``binary`` for ``raw``, UTF-8 ``string`` for ``text`` and
    ``json``. For ``json`` Spark parses it after the call, with ``mode`` and the
    corrupt-record column of its own: a reply that does not fit becomes the reason's text,
    which is not JSON, so Spark's parser treats it as the malformed record it is."""

    def __init__(
        self,
        request_column: str,
        reply_schema: pa.Schema,
        text_reply: bool,
        corrupt_column: str | None = None,
        misfit_as_reply: bool = False,
    ) -> None:
        self.request_column = request_column
        self.text_reply = text_reply
        self.corrupt_column = corrupt_column
        self.misfit_as_reply = misfit_as_reply
        self.reply_fields = list(reply_schema)

    def units(self, batch: pa.RecordBatch, first_row: int) -> Iterator[Unit]:
        values = batch.column(batch.schema.get_field_index(self.request_column))
        python = values.to_pylist()
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            bodies = [v.encode("utf-8") for v in python if v is not None]
        else:
            bodies = [v for v in python if v is not None]
        sent = [i for i, v in enumerate(python) if v is not None] if values.null_count else list(range(len(python)))
        yield Unit(batch, first_row, bodies, sent_rows=sent)

    def reply(self, frames: Sequence[bytes], unit: Unit) -> object:
        body = bytes(_single_frame(frames))
        return _utf8(body) if self.text_reply else body

    def misfit(self, reason: str, unit: Unit) -> object:
        return f"spark-zmq: {reason}" if self.misfit_as_reply else _Misfit(reason)

    def columns(self, unit: Unit) -> list[pa.Array]:
        n = unit.rows.num_rows
        values: list = [None] * n
        corrupt: list = [None] * n
        for row, reply in zip(unit.sent_rows or (), unit.replies):
            if isinstance(reply, _Misfit):
                corrupt[row] = reply.reason
            else:
                values[row] = reply
        return [pa.array(corrupt if f.name == self.corrupt_column else values, f.type) for f in self.reply_fields]


@dataclass(frozen=True)
class _Misfit:
    reason: str


def codec_for(
    fmt: str,
    *,
    reply_schema: pa.Schema,
    batch_rows: int,
    max_reply_bytes: int,
    request_column: str,
    corrupt_column: str | None,
) -> RowCodec:
    """The codec of ``fmt``. ``reply_schema`` is the reply columns as the output holds
    them; for ``json`` it is the one string column Spark parses afterwards."""
    if fmt == "arrow":
        return ArrowCodec(reply_schema, batch_rows, max_reply_bytes, corrupt_column)
    if fmt == "json":
        return ValueCodec(request_column, reply_schema, text_reply=True, misfit_as_reply=True)
    return ValueCodec(request_column, reply_schema, text_reply=fmt == "text", corrupt_column=corrupt_column)
