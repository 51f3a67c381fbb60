"""Parsing a whole option map against one side's table: case-insensitive keys, unknown
options, defaults, and the checks that involve more than one option.

Why here: Spark hands the data source a case-insensitive map of strings; this is the one
place that turns it into ``{attr: value}`` for ``SourceOptions``, ``SinkOptions`` and
``RequestOptions``.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .curve_rules import check_curve
from .kinds import PARSERS, parse_endpoints_value
from .spec import OptionError, quote
from .table import TABLES

__all__ = ["parse_table"]

# Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})


def _lower(options: Mapping[Any, Any], side: str) -> dict[str, Optional[str]]:
    """Keys lower-cased (Spark's keys are case-insensitive); two spellings of one key with
    different values are an error rather than a silent choice."""
    out: dict[str, Optional[str]] = {}
    spelled: dict[str, str] = {}
    for key, value in options.items():
        name, text = str(key), (None if value is None else str(value))
        lower = name.lower()
        if lower in out and out[lower] != text:
            raise OptionError(
                f"{side} option {quote(lower)} is given twice with different values "
                f"({quote(spelled[lower])} = {quote(str(out[lower]))}, {quote(name)} = {quote(str(text))}); "
                "option names are case-insensitive",
                lower,
            )
        out[lower], spelled[lower] = text, name
    return out


def _check_known(opts: dict[str, Optional[str]], side: str) -> None:
    table = TABLES[side]
    known = {spec.key for spec in table}
    unknown = sorted(k for k in opts if k not in known and k not in _SPARK_KEYS)
    if unknown:
        raise OptionError(
            f"unknown {side} option(s) {', '.join(map(quote, unknown))}; "
            f"valid options: {', '.join(spec.name for spec in table)}",
            unknown[0],
        )


def parse_table(side: str, options: Mapping[Any, Any]) -> dict[str, Any]:
    """Parse and check ``options`` against the ``side`` table; returns ``{attr: value}``."""
    table = TABLES[side]
    opts = _lower(options, side)
    _check_known(opts, side)
    parsed: dict[str, Any] = {}
    for spec in table:
        raw = opts.get(spec.key)
        if spec.kind == "endpoints":
            parsed[spec.attr] = parse_endpoints_value(spec, raw, parsed, opts.get("relays"))
        elif raw is None or (not raw.strip() and spec.attr != "topic"):
            default = spec.default_for(parsed)
            parsed[spec.attr] = list(default) if isinstance(default, tuple) else default
        else:
            parsed[spec.attr] = PARSERS[spec.kind](spec, raw)
    pattern, fmt = parsed.get("pattern"), parsed["format"]
    for spec in table:
        if spec.only_for and pattern not in spec.only_for and parsed[spec.attr] not in (None, [], ()):
            raise OptionError(
                f"option {spec.name!r} only applies to pattern {', '.join(map(repr, spec.only_for))}, "
                f"not {pattern!r}",
                spec.name,
            )
        if spec.only_formats and fmt not in spec.only_formats and parsed[spec.attr] not in (None, [], (), False):
            raise OptionError(
                f"option {spec.name!r} applies to format {', '.join(map(repr, spec.only_formats))} only; "
                f"format is {fmt!r} (set option 'format' to {spec.only_formats[0]!r}, or leave {spec.name!r} "
                "unset or false)",
                spec.name,
            )
    check_curve(parsed)
    if parsed.get("relays") and parsed["curve_certificate"] is not None and parsed["curve_server_key"] is None:
        raise OptionError(
            "with option 'relays' the query is a CURVE client of its relays: give 'curveServerKey' (the relays' "
            "public key) with 'curveCertificate', not 'curveAuthorizedKeys'", "curveServerKey",
        )
    return parsed
