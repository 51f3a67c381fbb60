"""Turn spooled messages into the Arrow record batches Spark receives (executor side).

Decoding happens in the read tasks, not in the receivers, so it runs in parallel on the
executors and the receivers only move bytes. Every output batch has exactly the Arrow
schema Spark derives from the DataFrame's schema (``to_arrow_schema``), which pyspark
checks before it accepts batches from ``read()``.

One decoder per format, each in its own module: ``raw`` and ``text`` (``raw.py``),
``json`` (``json.py``), ``arrow`` (``arrow.py``, with ``headers.py`` for
includeHeaders); what they share is in ``base.py``. What the declared schema must look
like is ``source/schema_contract.py``. Messages come from anyone who can reach the
socket, so no input may crash a worker or reach Spark invalid: a message that does not
decode is malformed (``MalformedMessageError``) and follows ``mode``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql.types import StructType

from ..schema_contract import HEADERS_COLUMN, METADATA_COLUMNS
from .arrow import ArrowDecoder
from .base import DecodeError, Decoder, MalformedMessageError, SchemaMismatchError
from .headers import ROW_KEY, headers_column, headers_template
from .json import JsonDecoder
from .raw import RawDecoder, TextDecoder

if TYPE_CHECKING:
    from ...options import SourceOptions

__all__ = [
    "Decoder",
    "RawDecoder",
    "TextDecoder",
    "JsonDecoder",
    "ArrowDecoder",
    "DECODERS",
    "DecodeError",
    "MalformedMessageError",
    "SchemaMismatchError",
    "decoder_for",
    "make_decoder",
    "HEADERS_COLUMN",
    "ROW_KEY",
    "headers_template",
    "headers_column",
    "METADATA_COLUMNS",
]

#: format -> its decoder
DECODERS: dict[str, type[Decoder]] = {cls.fmt: cls for cls in (RawDecoder, TextDecoder, JsonDecoder, ArrowDecoder)}


def make_decoder(fmt: str, schema: StructType, **settings: Any) -> Decoder:
    """The decoder of format ``fmt`` for the declared ``schema``; ``settings`` are the
    keyword arguments of ``Decoder`` (mode, corrupt_column, max_message_bytes,
    include_headers, include_metadata)."""
    try:
        cls = DECODERS[fmt]
    except KeyError:
        raise ValueError(f"no decoder for format {fmt!r}; formats are {', '.join(DECODERS)}") from None
    return cls(schema, **settings)


def decoder_for(options: SourceOptions, schema: StructType) -> Decoder:
    """The decoder a source's options call for (stream and bounded batch reads alike).
    Made on the driver first, so that a schema the options cannot fill fails there."""
    return make_decoder(
        options.format,
        schema,
        mode=options.mode,
        corrupt_column=options.corrupt_column,
        max_message_bytes=options.max_message_bytes,
        include_headers=options.include_headers,
        include_metadata=options.include_metadata,
    )
