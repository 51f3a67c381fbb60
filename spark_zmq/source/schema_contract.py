"""What a read's schema must look like, per format and option: the source's side of the
contract whose write side is ``sink/encoders/schema.py`` (``check_schema``).

- ``raw``, ``text``: the fixed schema of ``sparkglue.schemas.fixed_schema`` (``value`` binary or
  string, then ``topic``, ``partition``, ``offset``, ``timestamp``); a declared schema may
  name only those columns (checked as the messages are decoded).
- ``json``, ``arrow``: the declared ``.schema(...)`` (without one, ``default_schema``
  refuses the read), which Spark takes as it is: columns the options fill are declared,
  never added. ``columnNameOfCorruptRecord`` (json) takes effect only when the schema
  has that column. The json decoder refuses column types pyarrow's JSON reader cannot
  produce (``decoders/json.py``).
- ``includeMetadata`` (json, arrow): the last four columns are exactly
  ``METADATA_COLUMNS``, and no message column has one of their names.
- ``includeHeaders`` (arrow): one column ``headers map<string,string>`` anywhere.

The readers check these on the driver (``decoder_for`` when the reader is made),
so a wrong schema fails the query before any task runs; they name the option whose
column is wrong, hence ``OptionError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.types import MapType, StringType, StructType

from ..options import OptionError
from ..sparkglue.schemas import arrow_schema, fixed_schema

if TYPE_CHECKING:
    from ..options import SourceOptions

__all__ = [
    "HEADERS_COLUMN",
    "METADATA_COLUMNS",
    "ReadLayout",
    "default_schema",
    "read_layout",
    "headers_field",
    "metadata_fields",
]

#: the declared column ``includeHeaders`` fills
HEADERS_COLUMN = "headers"

#: the columns includeMetadata fills, last in the declared schema, as the raw format has them
METADATA_COLUMNS = (("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"))
_METADATA_DDL = "topic string, partition int, offset long, timestamp timestamp"


def _names(names: list[str], limit: int = 12) -> str:
    if not names:
        return "no columns"
    return ", ".join(names[:limit]) + (f", ... ({len(names)} columns)" if len(names) > limit else "")


def default_schema(options: SourceOptions) -> StructType:
    """The schema of a read that declares none: the fixed one of ``raw``/``text``; the
    other formats need ``.schema(...)`` (``OptionError`` with an example to copy)."""
    schema = fixed_schema(options.format)
    if schema is None:
        example, extra = "sensor string, reading double", ""
        if options.include_headers:  # Spark takes a declared schema as it is: headers included
            example += ", headers map<string,string>"
            extra = " and, for option 'includeHeaders', the column it fills"
        raise OptionError(
            f"format {options.format!r} needs the schema of the messages{extra}: "
            f"spark.readStream.format('zmq').schema('{example}')..."
        )
    return schema


def headers_field(fmt: str, schema: StructType) -> int:
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
    if not (
        isinstance(data_type, MapType)
        and isinstance(data_type.keyType, StringType)
        and isinstance(data_type.valueType, StringType)
    ):
        raise OptionError(
            f"option 'includeHeaders' = true fills the column 'headers', which must be declared "
            f"map<string,string>, not {data_type.simpleString()}; a message column named 'headers' cannot be "
            "read while includeHeaders is true",
            "includeHeaders",
        )
    return found[0]


def metadata_fields(fmt: str, schema: StructType) -> StructType:
    """The declared columns read from messages, once the includeMetadata columns (the last
    four, exactly ``METADATA_COLUMNS``) are checked and taken off."""
    if fmt not in ("json", "arrow"):
        raise OptionError(
            f"option 'includeMetadata' applies to formats 'json' and 'arrow'; format {fmt!r} has these columns already",
            "includeMetadata",
        )
    names = schema.fieldNames()
    tail = [(f.name, f.dataType.simpleString()) for f in schema.fields[-len(METADATA_COLUMNS) :]]
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


@dataclass(frozen=True)
class ReadLayout:
    """Where each declared column comes from, as the decoders need it.

    ``output``: the Arrow schema of the batches Spark receives, when includeMetadata
    appends columns to what the messages hold (else ``None``: ``target`` is the output).
    ``schema``/``target``: the columns the decoder produces from messages (Spark/Arrow).
    ``headers_at``: includeHeaders' column position in ``target`` (else ``None``), of
    type ``headers_type``; ``message_target``: the columns read from a message, ``None``
    when ``headers`` is the only one (rows are then counted from the message as sent).
    ``corrupt_column``: columnNameOfCorruptRecord when the schema has it, else ``None``.
    """

    output: pa.Schema | None
    schema: StructType
    target: pa.Schema
    headers_at: int | None
    headers_type: pa.DataType | None
    message_target: pa.Schema | None
    corrupt_column: str | None


def read_layout(
    fmt: str,
    schema: StructType,
    *,
    include_headers: bool = False,
    include_metadata: bool = False,
    corrupt_column: str | None = None,
) -> ReadLayout:
    """The layout of ``schema`` for format ``fmt``, checked (``OptionError`` naming the
    option when a column it fills is missing or wrong)."""
    output = arrow_schema(schema) if include_metadata else None
    if include_metadata:
        schema = metadata_fields(fmt, schema)
    target = arrow_schema(schema)
    headers_at = headers_field(fmt, schema) if include_headers else None
    headers_type: pa.DataType | None = None
    message_target: pa.Schema | None = target
    if headers_at is not None:
        headers_type = target.field(headers_at).type
        message_target = target.remove(headers_at)
        if not len(message_target):
            message_target = None
    corrupt = corrupt_column if corrupt_column and corrupt_column in schema.fieldNames() else None
    return ReadLayout(output, schema, target, headers_at, headers_type, message_target, corrupt)
