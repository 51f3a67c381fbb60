"""The data source's options: declared once, in one table, and everything else derived.

Why one table: an option's name, type, range, default and documentation used to live in
four places (the parser, the unknown-option check, the README and the class docstring)
and drifted apart. Here each option is one ``OptionSpec`` row of ``SOURCE_OPTIONS`` or
``SINK_OPTIONS``; that row drives parsing, range checks, the "unknown option" error (which
lists the valid names and the closest one), the options reference ``docs/options.md``
(``python -m spark_zmq.options --write-docs``; a test fails when they differ) and the
manual that ``help(ZmqDataSource)`` shows.

The modules: ``table`` (the rows, gathered from ``source_table``, ``sink_table`` and
``request_table``, made from ``shared_rows``), ``spec`` (what a row is, ``OptionError``, shared
limits), ``kinds`` (one value per kind), ``parse`` (a whole map), ``curve_rules`` (the
CURVE options together), ``spool_dir`` (``spoolDir``'s default), ``validated`` (the
option classes) and ``docs`` (the options page, manual, command line). Import from this
package: it re-exports what callers use.

Every check happens when the DataFrame is defined, not when the first message arrives,
and every error is an ``OptionError`` naming the option, the value and what is valid.
Spark passes option keys case-insensitively, so lookups here lower-case them. Numeric
limits are what libzmq and Python accept: a ZeroMQ socket option is a C ``int`` (so at
most 2^31-1), an offset or byte count a signed 64-bit integer.
"""

from __future__ import annotations

from .curve_rules import check_curve, curve_of
from .docs import main, manual, markdown_table, readme_block, update_readme
from .kinds import READER_NAME_VALID, is_wildcard_address, reader_name_problem
from .parse import parse_table
from .spec import INT32_MAX, INT64_MAX, Default, GiB, KiB, MiB, OptionError, OptionSpec, TiB
from .spool_dir import default_spool_dir
from .table import (
    FORMATS,
    MAX_REQUEST_ROWS,
    MAX_SECONDS,
    MODES,
    REQUEST_OPTIONS,
    SINK_OPTIONS,
    SINK_PATTERNS,
    SOURCE_OPTIONS,
    SOURCE_PATTERNS,
)
from .validated import RequestOptions, SinkOptions, SourceOptions

__all__ = [
    "check_curve",
    "curve_of",
    "SourceOptions",
    "SinkOptions",
    "RequestOptions",
    "REQUEST_OPTIONS",
    "OptionError",
    "OptionSpec",
    "SOURCE_OPTIONS",
    "SINK_OPTIONS",
    "default_spool_dir",
    "markdown_table",
    "manual",
    "readme_block",
    "update_readme",
    "main",
    "parse_table",
    "reader_name_problem",
    "is_wildcard_address",
    "READER_NAME_VALID",
    "Default",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "INT32_MAX",
    "INT64_MAX",
    "MAX_SECONDS",
    "MAX_REQUEST_ROWS",
    "SOURCE_PATTERNS",
    "SINK_PATTERNS",
    "FORMATS",
    "MODES",
]
