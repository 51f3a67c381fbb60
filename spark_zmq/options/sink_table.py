"""The sink's options table: every option of ``df.writeStream/write.format("zmq")``, one
``OptionSpec`` row each.

Why its own module: each side's rows are a table of their own, made from the pieces they
share (``shared_rows``); ``table`` gathers the three tables.
"""

from __future__ import annotations

from typing import Any

from .shared_rows import ENDPOINTS_VALID, FORMATS, SINK_PATTERNS, curve_specs, heartbeat_specs, zmq_spec
from .spec import INT32_MAX, OptionSpec

__all__ = ["SINK_OPTIONS"]


def _snk(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="sink", kind=kind, attr=attr, doc=doc, **kw)


#: Every option of ``df.writeStream/write.format("zmq")``.
SINK_OPTIONS: tuple[OptionSpec, ...] = (
    _snk(
        "pattern",
        "choice",
        "pattern",
        "The ZeroMQ pattern that sends: round-robin `push` or `scatter` "
        "(single-part only), or `pub` (counted drops at a subscriber's high-water mark).",
        default="push",
        default_doc="`push`",
        choices=SINK_PATTERNS,
    ),
    _snk(
        "endpoints",
        "endpoints",
        "endpoints",
        "Where to send; every write task connects unless an entry starts with `@`.",
        required=True,
        default_doc="required",
        valid_doc=ENDPOINTS_VALID,
    ),
    _snk(
        "format",
        "choice",
        "format",
        "How rows become messages: `raw` (a `value` column, binary or string), "
        "`text`, `json` (each row one JSON object), `arrow` (many rows per message).",
        default="raw",
        default_doc="`raw`",
        choices=FORMATS,
    ),
    _snk(
        "topic",
        "string",
        "topic",
        "Fixed topic (else a `topic` column), sent as `[topic, payload]`.",
        default_doc="none",
        valid_doc="UTF-8 text",
        only_for=("pub",),
    ),
    _snk(
        "rowsPerMessage",
        "int",
        "rows_per_message",
        "Rows per Arrow message at most.",
        default=10_000,
        default_doc="10000",
        minimum=1,
        maximum=INT32_MAX,
    ),
    _snk(
        "sendTimeoutMs",
        "int",
        "send_timeout_ms",
        "Milliseconds a write task waits for an absent or full peer (and for the final flush) before it fails.",
        default=30_000,
        default_doc="30000",
        minimum=1,
        maximum=INT32_MAX,
        range_note="ZMQ_LINGER is an `int`",
    ),
    _snk(
        "hwm",
        "int",
        "hwm",
        "ZeroMQ send high-water mark per peer, in messages.",
        default=1000,
        default_doc="1000",
        minimum=1,
        maximum=INT32_MAX,
        range_note="0 would make ZeroMQ's queue unlimited and memory unbounded",
    ),
    *curve_specs(_snk),
    *heartbeat_specs(_snk, "sink"),
    zmq_spec(_snk),
)
