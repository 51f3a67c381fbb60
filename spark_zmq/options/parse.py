"""Parsing a whole option map against one side's table: case-insensitive keys, unknown
options, defaults, and the checks that involve more than one option.

Why here: Spark hands the data source a case-insensitive map of strings; this is the one
place that turns it into ``{attr: value}`` for ``SourceOptions``, ``SinkOptions`` and
``RequestOptions``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from .curve_rules import check_curve
from .kinds import PARSERS, parse_endpoints_value, parse_zmq_options
from .spec import OptionError, OptionSpec, quote
from .table import TABLES

__all__ = ["parse_table", "KAFKA_OPTIONS"]

# Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})


def _lower(options: Mapping[Any, Any], side: str) -> dict[str, str | None]:
    """Keys lower-cased (Spark's keys are case-insensitive); two spellings of one key with
    different values are an error rather than a silent choice."""
    out: dict[str, str | None] = {}
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


#: Spark's Kafka source and sink options, as Kafka's docs spell them: the spark-zmq option that does
#: the same (``None``: nothing does yet), and why, for the error an unknown option gets
#: (docs/coming-from-kafka.md has the whole comparison).
KAFKA_OPTIONS: dict[str, tuple[str | None, str]] = {
    "kafka.bootstrap.servers": ("endpoints", "where to receive or send (or 'relays' to read standalone relays)"),
    "subscribe": ("topics", "subscription prefixes, with pattern 'sub'"),
    "subscribePattern": ("topics", "subscription prefixes, with pattern 'sub' (prefixes, not regular expressions)"),
    "assign": ("endpoints", "each endpoint is one channel, Spark's partition"),
    "maxOffsetsPerTrigger": ("maxRowsPerTrigger", "rows per micro-batch at most"),
    "minOffsetsPerTrigger": ("minRowsPerTrigger", "rows a micro-batch waits for, up to 'maxTriggerDelay'"),
    "startingOffsetsByTimestamp": ("startingTimestamp", "one receive time for every channel"),
    "startingOffsetsByTimestampStrategy": (None, "a time after every message held starts at what arrives next"),
    "endingOffsets": (None, "a bounded read ends after 'maxMessages' or 'timeout' seconds of silence"),
    "endingTimestamp": (None, "a bounded read ends after 'maxMessages' or 'timeout' seconds of silence"),
    "endingOffsetsByTimestamp": (None, "a bounded read ends after 'maxMessages' or 'timeout' seconds of silence"),
    "maxRecordsPerPartition": (
        None,
        "read tasks are cut by messages and bytes (docs/source.md, Read tasks); 'minPartitions' asks for more tasks",
    ),
    "kafkaConsumer.pollTimeoutMs": ("fetchTimeout", "how long a read task waits for a silent spool server"),
    "fetchOffset.numRetries": ("relayTimeout", "how long the driver waits for a silent relay"),
    "fetchOffset.retryIntervalMs": ("relayTimeout", "how long the driver waits for a silent relay"),
    "groupIdPrefix": ("relayReader", "with 'relays', the name a query reads a relay under, with its own position"),
    "kafka.group.id": ("relayReader", "with 'relays', the name a query reads a relay under, with its own position"),
    "kafka.security.protocol": (
        "curveCertificate",
        "CURVE: 'curveCertificate', 'curveServerKey', 'curveAuthorizedKeys'",
    ),
    "kafka.max.partition.fetch.bytes": ("maxBytesPerTrigger", "payload bytes per micro-batch at most"),
    "kafka.fetch.max.bytes": ("maxBytesPerTrigger", "payload bytes per micro-batch at most"),
    "kafka.max.request.size": ("maxMessageBytes", "the largest message accepted"),
    "kafka.receive.buffer.bytes": ("receiveBufferBytes", "the receiving socket's kernel buffer"),
    "kafka.request.timeout.ms": ("sendTimeoutMs", "how long a write task waits for an absent or full peer"),
    "kafka.delivery.timeout.ms": ("sendTimeoutMs", "how long a write task waits for an absent or full peer"),
    "kafka.heartbeat.interval.ms": ("heartbeatInterval", "ZMTP heartbeats, in seconds"),
    "kafka.session.timeout.ms": ("heartbeatTimeout", "ZMTP heartbeats, in seconds"),
}
_KAFKA_SPELLING = {name.lower(): name for name in KAFKA_OPTIONS}


def _shown(name: str) -> str:
    """An unknown option's name as the error shows it: as the user spelled it, or, when it
    arrives lower-cased (Spark lower-cases a data source's option keys), as Kafka spells it."""
    return _KAFKA_SPELLING.get(name, name) if name == name.lower() else name


def _suggestion(name: str, table: tuple[OptionSpec, ...]) -> str:
    """What to say about the unknown option ``name``: Kafka's counterpart, else the closest
    valid name, else nothing."""
    names = {spec.key: spec.name for spec in table}
    kafka_name = _KAFKA_SPELLING.get(name.lower())
    if kafka_name is not None:
        counterpart, why = KAFKA_OPTIONS[kafka_name]
        if counterpart is None:
            return f" (a Kafka option without a counterpart here: {why})"
        if counterpart.lower() in names:
            return f" (Kafka's option; here {counterpart!r}: {why})"
        return " (a Kafka option of the other side, with no counterpart on this one)"
    if name.lower().startswith("kafka."):
        return " (a Kafka client setting; ZeroMQ's socket options are 'zmq.<name>', see docs/options.md)"
    close = difflib.get_close_matches(name.lower(), list(names), n=1, cutoff=0.6)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def _check_known(options: Mapping[Any, Any], opts: dict[str, str | None], side: str) -> None:
    table = TABLES[side]
    known = {spec.key for spec in table}
    spelled = {str(key).lower(): _shown(str(key)) for key in options}
    unknown = [spelled[k] for k in sorted(opts) if k not in known and k not in _SPARK_KEYS and not k.startswith("zmq.")]
    if unknown:
        parts = [quote(name) + _suggestion(name, table) for name in unknown]
        raise OptionError(
            f"unknown {side} option(s) {', '.join(parts)}; valid options: {', '.join(spec.name for spec in table)}",
            unknown[0],
        )


def parse_table(side: str, options: Mapping[Any, Any]) -> dict[str, Any]:
    """Parse and check ``options`` against the ``side`` table; returns ``{attr: value}``."""
    table = TABLES[side]
    opts = _lower(options, side)
    _check_known(options, opts, side)
    parsed: dict[str, Any] = {}
    for spec in table:
        raw = opts.get(spec.key)
        if spec.kind == "endpoints":
            parsed[spec.attr] = parse_endpoints_value(spec, raw, parsed, opts.get("relays"))
        elif spec.kind == "zmq":
            parsed[spec.attr] = parse_zmq_options(spec, opts)
        elif raw is None or (not raw.strip() and spec.attr != "topic"):
            default = spec.default_for(parsed)
            parsed[spec.attr] = list(default) if isinstance(default, tuple) else default
        else:
            parsed[spec.attr] = PARSERS[spec.kind](spec, raw)
    pattern, fmt = parsed.get("pattern"), parsed["format"]
    for spec in table:
        if spec.only_for and pattern not in spec.only_for and parsed[spec.attr] not in (None, [], ()):
            raise OptionError(
                f"option {spec.name!r} only applies to pattern {', '.join(map(repr, spec.only_for))}, not {pattern!r}",
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
    if parsed.get("metrics_address") is not None:
        from ..metrics import parse_address

        try:
            parse_address(parsed["metrics_address"])
        except ValueError:
            raise OptionError(
                f"option 'metricsAddress' = {parsed['metrics_address']!r} is not valid: expected "
                "HOST:PORT, e.g. '0.0.0.0:9108' (port 0: any free port)",
                "metricsAddress",
            ) from None
    if parsed.get("relays") and parsed["curve_certificate"] is not None and parsed["curve_server_key"] is None:
        raise OptionError(
            "with option 'relays' the query is a CURVE client of its relays: give 'curveServerKey' (the relays' "
            "public key) with 'curveCertificate', not 'curveAuthorizedKeys'",
            "curveServerKey",
        )
    if opts.get("relayreader") is not None and not parsed.get("relays"):
        raise OptionError(
            "option 'relayReader' names this query's reader on its relays: it needs option 'relays' "
            "(a query that receives on its own 'endpoints' has no relay to name itself to)",
            "relayReader",
        )
    return parsed
