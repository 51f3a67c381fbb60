"""The request's options table: every option of ``spark_zmq.request(df, endpoints, ...)``,
one ``OptionSpec`` row each.

Why its own module: each side's rows are a table of their own, made from the pieces they
share (``shared_rows``); ``table`` gathers the three tables.
"""

from __future__ import annotations

from typing import Any

from .shared_rows import ENDPOINTS_VALID, FORMATS, MAX_REQUEST_ROWS, MAX_SECONDS, curve_specs, heartbeat_specs, zmq_spec
from .spec import INT32_MAX, KiB, MiB, OptionSpec

__all__ = ["REQUEST_OPTIONS"]


def _req(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="request", kind=kind, attr=attr, doc=doc, **kw)


#: Every option of ``spark_zmq.request(df, endpoints, ...)`` (keyword arguments, camelCase or snake_case).
REQUEST_OPTIONS: tuple[OptionSpec, ...] = (
    _req(
        "endpoints",
        "endpoints",
        "endpoints",
        "The service: its workers, or a broker's frontend (the positional "
        "argument `endpoints`); every task connects a DEALER to each and round-robins its requests over them, "
        "and takes a reply only from the connection its request went out on.",
        required=True,
        default_doc="required",
        valid_doc=ENDPOINTS_VALID,
    ),
    _req(
        "format",
        "choice",
        "format",
        "How rows become requests: `arrow` (up to `batchRows` rows per request, "
        "an Arrow IPC stream of all of `df`'s columns; the reply one stream of as many rows with the "
        "`reply_schema` columns), `json` (one row per request, a JSON object of all columns; the reply a JSON "
        "object parsed with `reply_schema`), `raw`/`text` (the `value` column, one row per request; the reply is "
        "one column, `reply` unless `reply_schema` names it).",
        default="arrow",
        default_doc="`arrow`",
        choices=FORMATS,
    ),
    _req(
        "batchRows",
        "int",
        "batch_rows",
        "`arrow`: rows per request at most.",
        default=1000,
        default_doc="1000",
        minimum=1,
        maximum=MAX_REQUEST_ROWS,
    ),
    _req(
        "maxInFlight",
        "int",
        "max_in_flight",
        "Requests a task has sent and not yet had answered.",
        default=4,
        default_doc="4",
        minimum=1,
        maximum=10_000,
    ),
    _req(
        "timeout",
        "duration",
        "timeout",
        "How long one request waits for its reply before it is sent again "
        "(with the same request id; a late reply to the earlier copy is dropped).",
        default=30.0,
        default_doc="30s",
        minimum=0.0,
        maximum=MAX_SECONDS,
    ),
    _req(
        "retries",
        "int",
        "retries",
        "How many times an unanswered request is sent again before the task "
        "fails (and Spark retries the task): a service that does not answer fails a task within "
        "`timeout x (retries + 1)`.",
        default=2,
        default_doc="2",
        minimum=0,
        maximum=1000,
    ),
    _req(
        "mode",
        "choice",
        "mode",
        "A reply that does not fit (not Arrow or not JSON, a wrong row count or "
        "schema, not UTF-8 for `text`, more than one frame, or the worker's error reply): `FAILFAST` fails the "
        "task naming the request and why; `PERMISSIVE` gives its rows null reply columns.",
        default="FAILFAST",
        default_doc="`FAILFAST`",
        choices=("FAILFAST", "PERMISSIVE"),
    ),
    _req(
        "columnNameOfCorruptRecord",
        "string",
        "corrupt_column",
        "`PERMISSIVE`: a string column of "
        "`reply_schema` that receives, for a reply that did not fit, the raw reply (`json`) or why it did not "
        "fit (`arrow`, `raw`, `text`).",
        default_doc="none",
        valid_doc="a string column of `reply_schema`",
    ),
    _req(
        "maxMessageBytes",
        "bytes",
        "max_message_bytes",
        "Largest reply accepted (ZMQ_MAXMSGSIZE); a worker "
        "that sends more is disconnected by ZeroMQ, so its request is resent and, answered the same way every "
        "time, fails the task.",
        default=64 * MiB,
        default_doc="64 MiB",
        minimum=KiB,
        maximum=INT32_MAX,
    ),
    _req(
        "hwm",
        "int",
        "hwm",
        "ZeroMQ high-water mark of each task's DEALER, in messages.",
        default=1000,
        default_doc="1000",
        minimum=1,
        maximum=INT32_MAX,
        range_note="0 would make ZeroMQ's queue unlimited and memory unbounded",
    ),
    *curve_specs(_req),
    *heartbeat_specs(_req, "request"),
    zmq_spec(_req),
)
