"""``spark_zmq.request(df, endpoints, reply_schema=..., **options)``: the driver side.

Everything a user can get wrong is checked here, when the call is made, not in a task
an hour later: the options (the ``request`` table of ``spark_zmq.options``), the reply
schema against the format, a reply column whose name is already one of ``df``'s, the
``value`` column ``raw``/``text`` send. The plan is one ``mapInArrow`` (so it runs in the
executors, keeps no driver-side state and works on batch and streaming DataFrames
alike). For ``json``, Spark's own ``to_json`` makes each request before the call and
``from_json`` parses each reply after it, with ``mode`` and ``columnNameOfCorruptRecord``
meaning exactly what they mean for Spark's JSON reader.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, DataType, StringType, StructField, StructType

from ..options import OptionError, RequestOptions
from ..patterns.endpoints import EndpointsSpec
from ..sparkglue.schemas import arrow_schema
from .call import ServiceCall
from .codec import codec_for

__all__ = ["request"]

#: the columns ``json`` adds around the call (a DataFrame may not use these names)
REQUEST_COLUMN = "__spark_zmq_request"
REPLY_COLUMN = "__spark_zmq_reply"


def request(
    df: DataFrame, endpoints: EndpointsSpec, *, reply_schema: str | StructType | None = None, **options: Any
) -> DataFrame:
    """``df``'s columns followed by the reply's, one output row per input row, in input
    order, each row (or batch of rows, for ``arrow``) sent as a request to the ZeroMQ
    service at ``endpoints`` (workers, or a broker's frontend). See the README's
    "Calling services" for the options (keyword arguments, camelCase or snake_case, as in
    ``spark_zmq.options.REQUEST_OPTIONS``) and the guarantees: calls are at least once,
    so the service must be idempotent."""
    if not isinstance(df, DataFrame):
        raise TypeError(f"spark_zmq.request: df must be a pyspark DataFrame, not {type(df).__name__}")
    opts = RequestOptions.parse(_option_map(endpoints, options))
    reply = _reply_struct(reply_schema, opts)
    _check_names(df, reply, opts)
    if opts.format == "json":
        return _json_call(df, reply, opts)
    if opts.format in ("raw", "text"):
        _check_value_column(df, opts.format)
    codec = codec_for(
        opts.format,
        reply_schema=arrow_schema(reply),
        batch_rows=opts.batch_rows,
        max_reply_bytes=opts.max_message_bytes,
        request_column="value",
        corrupt_column=opts.corrupt_column,
    )
    call = ServiceCall(opts, codec, passthrough=list(range(len(df.columns))))
    return df.mapInArrow(call, StructType(df.schema.fields + reply.fields))


def _json_call(df: DataFrame, reply: StructType, opts: RequestOptions) -> DataFrame:
    taken = [c for c in df.columns if c in (REQUEST_COLUMN, REPLY_COLUMN)]
    if taken:
        raise ValueError(f"spark_zmq.request: column {taken[0]!r} is reserved by format 'json'; rename it")
    with_request = df.withColumn(REQUEST_COLUMN, F.to_json(F.struct(*[_ref(c) for c in df.columns])))
    reply_text = StructType([StructField(REPLY_COLUMN, StringType(), True)])
    codec = codec_for(
        "json",
        reply_schema=arrow_schema(reply_text),
        batch_rows=1,
        max_reply_bytes=opts.max_message_bytes,
        request_column=REQUEST_COLUMN,
        corrupt_column=None,
    )
    call = ServiceCall(opts, codec, passthrough=list(range(len(df.columns))))
    called = with_request.mapInArrow(call, StructType(df.schema.fields + reply_text.fields))
    parse = {"mode": opts.mode}
    if opts.corrupt_column:
        parse["columnNameOfCorruptRecord"] = opts.corrupt_column
    parsed = "__spark_zmq_parsed"
    return called.select(
        *[_ref(c) for c in df.columns], F.from_json(_ref(REPLY_COLUMN), reply, parse).alias(parsed)
    ).select(*[_ref(c) for c in df.columns], *[_ref(parsed, f.name) for f in reply.fields])


def _ref(*path: str) -> Column:
    """A column by its exact name, whatever characters it holds."""
    return F.col(".".join("`" + p.replace("`", "``") + "`" for p in path))


_SNAKE = re.compile(r"_([a-z0-9])")


def _option_map(endpoints: EndpointsSpec, options: dict[str, Any]) -> dict[str, str]:
    """``request()``'s keyword arguments as the option table's strings (``batch_rows=1000``
    and ``batchRows="1000"`` alike)."""
    if isinstance(endpoints, (list, tuple)):
        endpoints = ",".join(str(e) for e in endpoints)
    elif not isinstance(endpoints, str):
        raise OptionError(
            f"spark_zmq.request: endpoints must be a string or a list of strings, not {type(endpoints).__name__}",
            "endpoints",
        )
    raw: dict[str, str] = {"endpoints": endpoints}
    for key, value in options.items():
        name = _SNAKE.sub(lambda m: m.group(1).upper(), key)
        if value is None:
            continue
        if name.lower() in (k.lower() for k in raw):
            raise OptionError(f"spark_zmq.request: option {name!r} is given twice (as {key!r} too)", name)
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, os.PathLike):
            text = os.fspath(value)
        else:
            text = str(value)
        raw[name] = text
    return raw


def _reply_struct(reply_schema: str | StructType | None, opts: RequestOptions) -> StructType:
    fmt = opts.format
    if opts.corrupt_column is not None and opts.mode != "PERMISSIVE":
        raise OptionError(
            "spark_zmq.request: option 'columnNameOfCorruptRecord' applies to mode 'PERMISSIVE' "
            f"only; mode is {opts.mode!r}",
            "columnNameOfCorruptRecord",
        )
    if reply_schema is None:
        if fmt in ("arrow", "json"):
            raise OptionError(
                f"spark_zmq.request: format {fmt!r} needs reply_schema, the reply's columns (a DDL string such as "
                "'score double, label string', or a StructType)",
                "reply_schema",
            )
        reply = StructType([StructField("reply", BinaryType() if fmt == "raw" else StringType(), True)])
        if opts.corrupt_column:
            reply = reply.add(opts.corrupt_column, StringType(), True)
        return reply
    if isinstance(reply_schema, str):
        try:
            parsed: DataType = DataType.fromDDL(reply_schema)
        except Exception as exc:  # noqa: BLE001 - Spark's parse error, reworded with the argument's name
            raise OptionError(
                f"spark_zmq.request: reply_schema {reply_schema!r} is not a DDL schema: {exc}", "reply_schema"
            ) from None
        reply_schema = parsed if isinstance(parsed, StructType) else StructType([StructField("value", parsed)])
    if not isinstance(reply_schema, StructType) or not reply_schema.fields:
        raise OptionError(
            "spark_zmq.request: reply_schema must name at least one column (a DDL string or a StructType)",
            "reply_schema",
        )
    names = [f.name for f in reply_schema.fields]
    corrupt = opts.corrupt_column
    if corrupt is not None:
        field = next((f for f in reply_schema.fields if f.name == corrupt), None)
        if field is None or not isinstance(field.dataType, StringType):
            raise OptionError(
                f"spark_zmq.request: option 'columnNameOfCorruptRecord' = {corrupt!r} must be a string "
                f"column of reply_schema ({', '.join(names)})",
                "columnNameOfCorruptRecord",
            )
    if fmt in ("raw", "text"):
        values = [f for f in reply_schema.fields if f.name != corrupt]
        want = BinaryType() if fmt == "raw" else StringType()
        if len(values) != 1 or values[0].dataType != want:
            raise OptionError(
                f"spark_zmq.request: with format {fmt!r} the reply is one {want.simpleString()} column (plus the "
                f"corrupt-record column, if any); reply_schema has {reply_schema.simpleString()}",
                "reply_schema",
            )
    return reply_schema


def _check_names(df: DataFrame, reply: StructType, opts: RequestOptions) -> None:
    mine = {c.lower(): c for c in df.columns}
    clash = [f.name for f in reply.fields if f.name.lower() in mine]
    if clash:
        raise OptionError(
            f"spark_zmq.request: reply column(s) {', '.join(map(repr, clash))} clash with the DataFrame's columns "
            f"({', '.join(df.columns)}); rename them in reply_schema or in the DataFrame",
            "reply_schema",
        )
    seen: set[str] = set()
    for f in reply.fields:
        if f.name.lower() in seen:
            raise OptionError(f"spark_zmq.request: reply_schema names column {f.name!r} twice", "reply_schema")
        seen.add(f.name.lower())


def _check_value_column(df: DataFrame, fmt: str) -> None:
    field = next((f for f in df.schema.fields if f.name == "value"), None)
    if field is None or not isinstance(field.dataType, (BinaryType, StringType)):
        found = "it has none" if field is None else f"its 'value' is {field.dataType.simpleString()}"
        raise OptionError(
            f"spark_zmq.request: format {fmt!r} sends the 'value' column (binary or string) as each request; "
            f"{found} (columns: {', '.join(df.columns)}); use format 'json' or 'arrow' to send whole rows",
            "format",
        )
