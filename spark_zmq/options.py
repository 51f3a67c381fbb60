"""The data source's options: declared once, in one table, and everything else derived.

Why one table: an option's name, type, range, default and documentation used to live in
four places (the parser, the unknown-option check, the README and the class docstring)
and drifted apart. Here each option is one ``OptionSpec`` row of ``SOURCE_OPTIONS`` or
``SINK_OPTIONS``; that row drives parsing, range checks, the "unknown option" error (which
lists the valid names), the README's options tables (``python -m spark_zmq.options
--update-readme README.md``; a test fails when they differ) and the manual that
``help(ZmqDataSource)`` shows.

Every check happens when the DataFrame is defined, not when the first message arrives,
and every error is an ``OptionError`` naming the option, the value and what is valid.
Spark passes option keys case-insensitively, so lookups here lower-case them. Numeric
limits are what libzmq and Python accept: a ZeroMQ socket option is a C ``int`` (so at
most 2^31-1), an offset or byte count a signed 64-bit integer.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, Optional, Sequence, Union

from .patterns.curve import Curve
from .patterns.curve_keys import CurveError, KeyPair, load_authorized_keys, load_public_key
from .patterns.endpoints import Endpoint, parse_endpoints, tcp_host_problem
from .patterns.heartbeat import DEFAULT_HEARTBEAT, MAX_HEARTBEAT_S, MAX_TTL_S, Heartbeat

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
]

SOURCE_PATTERNS = ("pull", "gather", "sub")
SINK_PATTERNS = ("push", "scatter", "pub")
FORMATS = ("raw", "text", "json", "arrow")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
#: the largest value of a C ``int``: every ZeroMQ socket option set here is one
INT32_MAX = (1 << 31) - 1
#: the largest signed 64-bit integer: offsets and byte counts (Spark's ``long``)
INT64_MAX = (1 << 63) - 1
#: the longest wait an option may ask for; longer waits are mistakes (ms given as s)
MAX_SECONDS = 86_400.0
#: rows one Arrow request may carry (what a reply may hold, too: the guard's limit per message)
MAX_REQUEST_ROWS = 10_000_000

# Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})

_SIDES = ("source", "sink", "request")
#: what a duration's unit multiplies (``500ms``, ``5s``, ``1min``, ``1h``; none: seconds)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"([+-]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?)\s*([a-z]*)",
                       re.ASCII | re.IGNORECASE)
_UNITS = {"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_INTEGER = re.compile(r"[+-]?[0-9][0-9_]*", re.ASCII)
_BYTES = re.compile(r"([+-]?[0-9][0-9_]*)\s*([KMGT]iB)?", re.ASCII | re.IGNORECASE)
_DECIMAL = re.compile(r"[+-]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# More digits than this cannot be within any range declared here, and converting them is
# slow (Python refuses beyond 4300 digits with a ValueError of its own).
_MAX_DIGITS = 40


class OptionError(ValueError):
    """A data source option is missing, unknown or has an invalid value.

    ``option`` is the option's name (as the table spells it, or the unknown key as given,
    lower-cased) so callers and tests can tell which option was refused.
    """

    def __init__(self, message: str, option: Optional[str] = None) -> None:
        super().__init__(message)
        self.option = option


# -- the table ------------------------------------------------------------------------------

Default = Union[Any, Callable[[dict[str, Any]], Any]]


@dataclass(frozen=True)
class OptionSpec:
    """One option: everything the parser, the README and ``help()`` need to know.

    ``kind`` is one of ``int``, ``bytes`` (an integer number of bytes, optionally with a
    ``KiB``/``MiB``/``GiB``/``TiB`` suffix), ``seconds`` (a finite decimal number),
    ``bool``, ``choice``, ``string``, ``list`` (comma-separated strings), ``host``,
    ``endpoints`` and ``path``. ``default`` is the parsed default (``None`` = unset), or a
    function of the options parsed before it; ``default_doc`` is how the docs show it.
    ``minimum``/``maximum`` bound numeric kinds (inclusive). ``only_for`` restricts the
    option to some patterns, ``only_formats`` to some formats (a value other than the
    default's "off", ``None``/``false``/empty, is an error with another pattern or format).
    ``range_note`` says why the range is what it is.
    """

    name: str
    side: str
    kind: str
    attr: str
    doc: str
    default: Default = None
    default_doc: str = ""
    minimum: Optional[Union[int, float]] = None
    maximum: Optional[Union[int, float]] = None
    choices: tuple[str, ...] = ()
    only_for: tuple[str, ...] = ()
    only_formats: tuple[str, ...] = ()
    valid_doc: str = ""
    range_note: str = ""
    required: bool = False
    #: ``seconds`` only: 0 is valid too (it switches something off)
    allow_zero: bool = False

    @property
    def key(self) -> str:
        """The lower-cased key Spark's case-insensitive option map uses."""
        return self.name.lower()

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "bytes", "seconds")

    def default_for(self, parsed: dict[str, Any]) -> Any:
        return self.default(parsed) if callable(self.default) else self.default

    def valid_text(self) -> str:
        """What values are valid, for the docs (plain text with Markdown code spans)."""
        if self.valid_doc:
            text = self.valid_doc
        elif self.kind == "choice":
            text = ", ".join(f"`{c}`" for c in self.choices)
        elif self.kind == "bool":
            text = "`true`, `false`"
        elif self.kind == "int":
            text = f"integer, {_show(self.minimum)} to {_show(self.maximum)}"
        elif self.kind == "bytes":
            text = f"bytes, {_show_bytes(self.minimum)} to {_show_bytes(self.maximum)}"
        elif self.kind == "seconds":
            text = f"seconds, finite, {'>=' if self.allow_zero else '>'} 0 and <= {_show(self.maximum)}"
        elif self.kind == "duration":
            text = f"seconds (`5`), or with a unit (`500ms`, `5s`, `1min`); > 0 and <= {_show(self.maximum)} s"
        else:
            text = self.kind
        if self.range_note:
            text += f" ({self.range_note})"
        if self.only_for:
            text += f"; {', '.join(f'`{p}`' for p in self.only_for)} only"
        if self.only_formats:
            text += f"; format {', '.join(f'`{f}`' for f in self.only_formats)} only"
        return text


def _show(value: Optional[Union[int, float]]) -> str:
    if value == INT64_MAX:
        return "2^63-1"
    if value == INT32_MAX:
        return "2^31-1"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def _show_bytes(value: Optional[int]) -> str:
    if value in (INT64_MAX, INT32_MAX) or value is None:
        return _show(value)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return _show(value)


def _spool_default(parsed: dict[str, Any]) -> str:
    return default_spool_dir(parsed["pattern"], parsed["endpoints"], parsed["format"], parsed["topics"])


def _src(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="source", kind=kind, attr=attr, doc=doc, **kw)


def _snk(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="sink", kind=kind, attr=attr, doc=doc, **kw)


def _req(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="request", kind=kind, attr=attr, doc=doc, **kw)



def _curve_specs(make: Callable[..., OptionSpec]) -> tuple[OptionSpec, ...]:
    """The three CURVE options, the same on both sides (see the README's "Security")."""
    return (
        make("curveCertificate", "certificate", "curve_certificate", "This side's secret certificate file "
             "(`NAME.key_secret`, as `spark-zmq keygen NAME`, pyzmq's `zmq.auth` or CZMQ's `zcert` write it). "
             "With `curveServerKey` this side's sockets are CURVE clients; without it they are CURVE servers.",
             default_doc="off (no encryption)", valid_doc="path of a secret certificate file"),
        make("curveServerKey", "publickey", "curve_server_key", "The server's public key: its certificate file "
             "(`NAME.key`) or its 40-character Z85 text. Needs `curveCertificate`.", default_doc="none",
             valid_doc="certificate file or Z85 key"),
        make("curveAuthorizedKeys", "authorized", "curve_authorized_keys", "CURVE server: the client keys "
             "accepted, a directory of public certificate files (`*.key`), or `*` for any client key "
             "(encryption without client authentication). Required with `curveCertificate` alone.",
             default_doc="none", valid_doc="directory or `*`"),
    )

def _heartbeat_specs(make: Callable[..., OptionSpec], side: str) -> tuple[OptionSpec, ...]:
    """The three heartbeat options, the same on both sides (see the README's "Liveness")."""
    who = {"source": "a producer (or, for `sub`, the publisher)", "sink": "a consumer",
           "request": "a worker (or broker)"}[side]
    consequence = {"source": "a connecting receiver reconnects",
                   "sink": "what it had not acknowledged goes to the other consumers",
                   "request": "its requests are resent to the others when their timeout comes"}[side]
    return (
        make("heartbeatInterval", "seconds", "heartbeat_interval", "ZMTP 3.1 heartbeats (RFC 37): seconds "
             "between the PINGs sent on every connection; `0` switches heartbeats and TCP keepalive off.",
             default=DEFAULT_HEARTBEAT.interval, default_doc=f"{DEFAULT_HEARTBEAT.interval:g}", minimum=0.0,
             maximum=MAX_HEARTBEAT_S, allow_zero=True),
        make("heartbeatTimeout", "seconds", "heartbeat_timeout", f"Seconds {who} may stay silent after a PING "
             f"before its connection counts as broken ({consequence}); also the kernel's limit "
             "(`TCP_USER_TIMEOUT`, keepalive) for unacknowledged data.",
             default=DEFAULT_HEARTBEAT.timeout, default_doc=f"{DEFAULT_HEARTBEAT.timeout:g}", minimum=0.0,
             maximum=MAX_HEARTBEAT_S),
        make("heartbeatTtl", "seconds", "heartbeat_ttl", "The TTL our PINGs carry: the peer may drop the "
             "connection when it hears nothing from us for this long (`0`: no TTL).",
             default=DEFAULT_HEARTBEAT.ttl, default_doc=f"{DEFAULT_HEARTBEAT.ttl:g}", minimum=0.0,
             maximum=MAX_TTL_S, allow_zero=True, range_note="16 bits of deciseconds on the wire"),
    )


_ENDPOINTS_VALID = (
    "comma-separated ZeroMQ endpoints (`tcp://`, `ipc://`, `inproc://`); `@` binds, `>` connects"
)

#: Every option of ``spark.readStream/read.format("zmq")``, in the order the docs show them.
SOURCE_OPTIONS: tuple[OptionSpec, ...] = (
    _src("pattern", "choice", "pattern", "The ZeroMQ pattern that receives: fair-queued `pull` or `gather`, "
         "or `sub` for pub/sub topics.", default="pull", default_doc="`pull`", choices=SOURCE_PATTERNS),
    _src("endpoints", "endpoints", "endpoints", "Where to receive. Without a prefix `pull`/`gather` bind and "
         "`sub` connects. **Each endpoint is one ingest channel** (its own socket, receiver and `partition` "
         "number).", required=True, default_doc="required (unless `relays`)", valid_doc=_ENDPOINTS_VALID),
    _src("relays", "relays", "relays", "Read from standalone relays (`spark-zmq relay`, see \"Relays\") instead "
         "of receiving here: comma-separated relay addresses (their `--listen`). Each relay's channels are "
         "partitions of their own, numbered in this order; one query at a time reads a relay. Exactly one of "
         "`endpoints` and `relays`. With CURVE relays, give `curveCertificate` and `curveServerKey` (the relays' "
         "key).", default=(), default_doc="none", valid_doc="comma-separated `tcp://host:port` or `ipc://path`"),
    _src("receivers", "choice", "receivers", "Where the receivers of `endpoints` run: `threads` of the driver's "
         "reader process, or `processes`, one child process per endpoint (a local relay each, so ingest uses more "
         "than one core; each spools in `spoolDir/receiver-<channel>` with its share of `maxSpoolBytes`, and "
         "lingers after a stop for the restarted query, see `receiverLingerSeconds`). A spool written with one "
         "cannot be read with the other.", default="processes", default_doc="`processes`",
         choices=("threads", "processes")),
    _src("receiverLingerSeconds", "seconds", "receiver_linger_seconds", "With `receivers=processes`: how long "
         "a stopped query's receiver processes keep receiving and spooling, detached, waiting for the restarted "
         "query (same `spoolDir` and options) to attach to them; a restart within it loses nothing. Past it they "
         "drain into the spool and exit. `0`: they stop with the query.", default=300.0, default_doc="300",
         minimum=0.0, maximum=MAX_SECONDS, allow_zero=True),
    _src("relayTimeout", "seconds", "relay_timeout", "With `relays`: how long the driver waits for a silent "
         "relay (requests are resent meanwhile, so a relay may restart within it) before the query fails.",
         default=30.0, default_doc="30", minimum=0.0, maximum=MAX_SECONDS),
    _src("fetchTimeout", "seconds", "fetch_timeout", "How long a read task waits for a silent spool server (the "
         "driver's fetch service or a relay's port) before it fails and Spark retries it. A request unanswered "
         "for 15 s is resent meanwhile, by then on a new connection if heartbeats found the old one dead.",
         default=120.0, default_doc="120", minimum=0.0, maximum=MAX_SECONDS),
    _src("format", "choice", "format", "How messages become rows: `raw` (binary `value`), `text` (UTF-8 "
         "`value`), `json` or `arrow` (the schema you declare with `.schema(...)`).",
         default="raw", default_doc="`raw`", choices=FORMATS),
    _src("topics", "list", "topics", "Subscription prefixes.", default=(), default_doc="everything",
         valid_doc="comma-separated prefixes", only_for=("sub",)),
    _src("maxRowsPerTrigger", "int", "max_rows_per_trigger", "Rows per micro-batch at most (split across "
         "channels by backlog; at least one message always passes).", default_doc="unlimited",
         minimum=1, maximum=INT64_MAX),
    _src("maxBytesPerTrigger", "bytes", "max_bytes_per_trigger", "Payload bytes per micro-batch at most "
         "(split across channels by backlog; at least one message always passes).", default_doc="unlimited",
         minimum=1, maximum=INT64_MAX),
    _src("startingOffsets", "choice", "starting_offsets", "`latest`: what arrives after the query starts; "
         "`earliest`: also what an existing spool holds. Only for a new checkpoint.",
         default="latest", default_doc="`latest`", choices=("latest", "earliest")),
    _src("maxSpoolBytes", "bytes", "max_spool_bytes", "Disk the spool may use before the receivers stop "
         "reading (backpressure).", default=GiB, default_doc="1 GiB", minimum=MiB, maximum=INT64_MAX),
    _src("spoolDir", "path", "spool_dir", "The durable spool's directory on the driver host, private to the "
         "user. Keep it with the checkpoint: exactly-once needs both.", default=_spool_default,
         default_doc="`$XDG_STATE_HOME/spark-zmq/spool/<digest>`, else `~/.local/state/spark-zmq/spool/<digest>`; "
         "the digest is derived from `pattern`, `endpoints`, `format` and `topics`, so a restarted query finds "
         "its spool",
         valid_doc="absolute path (`~` is expanded)"),
    _src("spoolFsync", "bool", "spool_fsync", "`true`: fsync every spooled batch, which survives a machine "
         "crash but is slower; `false` survives a process crash.", default=False, default_doc="`false`"),
    _src("failOnDataLoss", "bool", "fail_on_data_loss", "`false`: continue when the checkpoint asks for "
         "offsets the spool no longer has (skipped and counted).", default=True, default_doc="`true`"),
    _src("minPartitions", "int", "min_partitions", "Read tasks per micro-batch at least.",
         default_doc="1 per channel (and per 200,000 messages)", minimum=1, maximum=INT32_MAX,
         range_note="Spark numbers partitions with an `int`"),
    _src("hwm", "int", "hwm", "ZeroMQ receive high-water mark per socket, in messages: what queues in "
         "memory while the spool is full.", default=10_000, default_doc="10000", minimum=1, maximum=INT32_MAX,
         range_note="0 would make ZeroMQ's queue unlimited and memory unbounded"),
    _src("receiveBufferBytes", "bytes", "receive_buffer_bytes", "The receiving socket's kernel buffer per "
         "connection (ZMQ_RCVBUF): with `hwm`, the bound on what a receiver that stops (with `receivers=threads`, "
         "or past `receiverLingerSeconds`) or crashes can lose. Smaller costs throughput (see \"Guarantees\").",
         default_doc="the kernel's (`net.core.rmem_default`, autotuned)", minimum=4 * KiB, maximum=INT32_MAX),
    _src("maxMessageBytes", "bytes", "max_message_bytes", "Largest message accepted (ZMQ_MAXMSGSIZE); a peer "
         "that sends more is disconnected by ZeroMQ.", default=64 * MiB, default_doc="64 MiB",
         minimum=KiB, maximum=INT32_MAX),
    _src("spoolAccess", "choice", "spool_access", "How read tasks reach the spool: `auto` (directly when they "
         "see the driver's `spoolDir`, else fetched from the driver over DEALER/ROUTER), `local`, `fetch`.",
         default="auto", default_doc="`auto`", choices=("auto", "local", "fetch")),
    _src("spoolServerHost", "host", "spool_server_host", "The driver address executors use to fetch spool "
         "ranges; the fetch service listens only there.", default_doc="`SPARK_LOCAL_IP`, else the host's address",
         valid_doc="host name or IP address, not a wildcard"),
    _src("mode", "choice", "mode", "Malformed messages: `PERMISSIVE` keeps the row (raw text in the "
         "corrupt-record column if the schema has it), `DROPMALFORMED` drops it, `FAILFAST` fails the query. "
         "For `arrow`, anything but `DROPMALFORMED` fails on an unreadable message.",
         default="PERMISSIVE", default_doc="`PERMISSIVE`", choices=MODES),
    _src("columnNameOfCorruptRecord", "string", "corrupt_column", "`json` with `PERMISSIVE`: the string column "
         "of your schema that receives a malformed message's text.", default_doc="none",
         valid_doc="a column name of the schema"),
    _src("includeHeaders", "bool", "include_headers", "`arrow`: fill the column `headers map<string,string>` "
         "that you declare in `.schema(...)` with the custom metadata of the Arrow message each row came in "
         "(keys and values as UTF-8, invalid bytes replaced), plus `spark_zmq.row`, the row's position in its "
         "message. The sink's `spark_zmq.query_id`, `batch_id`, `partition`, `sequence` and `spark_zmq.row` "
         "name one written row (see \"Message headers\").", default=False, default_doc="`false`",
         only_formats=("arrow",)),
    _src("includeMetadata", "bool", "include_metadata", "`json`/`arrow`: fill the columns `topic string, "
         "partition int, offset long, timestamp timestamp` (as `raw` has them: the message's topic frame, its "
         "channel, its offset in the channel, when it was received), declared as the last four of "
         "`.schema(...)`: Spark takes a declared schema as it is, so they are declared, not appended. A message "
         "column with one of these names is an error.", default=False, default_doc="`false`",
         only_formats=("json", "arrow")),
    _src("timeout", "seconds", "timeout", "Seconds of silence that end a bounded batch read; also how long "
         "`Trigger.AvailableNow` drains what producers had queued before it pins its end.",
         default=5.0, default_doc="5", minimum=0.0, maximum=MAX_SECONDS),
    _src("maxMessages", "int", "max_messages", "Bounded batch read: stop after this many messages (held in "
         "memory).", default=10_000, default_doc="10000", minimum=1, maximum=INT32_MAX),
    *_curve_specs(_src),
    *_heartbeat_specs(_src, "source"),
)

#: Every option of ``df.writeStream/write.format("zmq")``.
SINK_OPTIONS: tuple[OptionSpec, ...] = (
    _snk("pattern", "choice", "pattern", "The ZeroMQ pattern that sends: round-robin `push` or `scatter` "
         "(single-part only), or `pub` (counted drops at a subscriber's high-water mark).",
         default="push", default_doc="`push`", choices=SINK_PATTERNS),
    _snk("endpoints", "endpoints", "endpoints", "Where to send; every write task connects unless an entry "
         "starts with `@`.", required=True, default_doc="required", valid_doc=_ENDPOINTS_VALID),
    _snk("format", "choice", "format", "How rows become messages: `raw` (a `value` column, binary or string), "
         "`text`, `json` (each row one JSON object), `arrow` (many rows per message).",
         default="raw", default_doc="`raw`", choices=FORMATS),
    _snk("topic", "string", "topic", "Fixed topic (else a `topic` column), sent as `[topic, payload]`.",
         default_doc="none", valid_doc="UTF-8 text", only_for=("pub",)),
    _snk("rowsPerMessage", "int", "rows_per_message", "Rows per Arrow message at most.", default=10_000,
         default_doc="10000", minimum=1, maximum=INT32_MAX),
    _snk("sendTimeoutMs", "int", "send_timeout_ms", "Milliseconds a write task waits for an absent or full "
         "peer (and for the final flush) before it fails.", default=30_000, default_doc="30000",
         minimum=1, maximum=INT32_MAX, range_note="ZMQ_LINGER is an `int`"),
    _snk("hwm", "int", "hwm", "ZeroMQ send high-water mark per peer, in messages.", default=1000,
         default_doc="1000", minimum=1, maximum=INT32_MAX,
         range_note="0 would make ZeroMQ's queue unlimited and memory unbounded"),
    *_curve_specs(_snk),
    *_heartbeat_specs(_snk, "sink"),
)

#: Every option of ``spark_zmq.request(df, endpoints, ...)`` (keyword arguments, camelCase or snake_case).
REQUEST_OPTIONS: tuple[OptionSpec, ...] = (
    _req("endpoints", "endpoints", "endpoints", "The service: its workers, or a broker's frontend (the positional "
         "argument `endpoints`); every task connects a DEALER to all of them and round-robins its requests.",
         required=True, default_doc="required", valid_doc=_ENDPOINTS_VALID),
    _req("format", "choice", "format", "How rows become requests: `arrow` (up to `batchRows` rows per request, "
         "an Arrow IPC stream of all of `df`'s columns; the reply one stream of as many rows with the "
         "`reply_schema` columns), `json` (one row per request, a JSON object of all columns; the reply a JSON "
         "object parsed with `reply_schema`), `raw`/`text` (the `value` column, one row per request; the reply is "
         "one column, `reply` unless `reply_schema` names it).", default="arrow", default_doc="`arrow`",
         choices=FORMATS),
    _req("batchRows", "int", "batch_rows", "`arrow`: rows per request at most.", default=1000,
         default_doc="1000", minimum=1, maximum=MAX_REQUEST_ROWS),
    _req("maxInFlight", "int", "max_in_flight", "Requests a task has sent and not yet had answered.", default=4,
         default_doc="4", minimum=1, maximum=10_000),
    _req("timeout", "duration", "timeout", "How long one request waits for its reply before it is sent again "
         "(with the same request id; a late reply to the earlier copy is dropped).", default=30.0,
         default_doc="30s", minimum=0.0, maximum=MAX_SECONDS),
    _req("retries", "int", "retries", "How many times an unanswered request is sent again before the task "
         "fails (and Spark retries the task): a service that does not answer fails a task within "
         "`timeout x (retries + 1)`.", default=2, default_doc="2", minimum=0, maximum=1000),
    _req("mode", "choice", "mode", "A reply that does not fit (not Arrow or not JSON, a wrong row count or "
         "schema, not UTF-8 for `text`, more than one frame, or the worker's error reply): `FAILFAST` fails the "
         "task naming the request and why; `PERMISSIVE` gives its rows null reply columns.",
         default="FAILFAST", default_doc="`FAILFAST`", choices=("FAILFAST", "PERMISSIVE")),
    _req("columnNameOfCorruptRecord", "string", "corrupt_column", "`PERMISSIVE`: a string column of "
         "`reply_schema` that receives, for a reply that did not fit, the raw reply (`json`) or why it did not "
         "fit (`arrow`, `raw`, `text`).", default_doc="none", valid_doc="a string column of `reply_schema`"),
    _req("maxMessageBytes", "bytes", "max_message_bytes", "Largest reply accepted (ZMQ_MAXMSGSIZE); a worker "
         "that sends more is disconnected by ZeroMQ, so its request is resent and, answered the same way every "
         "time, fails the task.", default=64 * MiB, default_doc="64 MiB", minimum=KiB, maximum=INT32_MAX),
    _req("hwm", "int", "hwm", "ZeroMQ high-water mark of each task's DEALER, in messages.", default=1000,
         default_doc="1000", minimum=1, maximum=INT32_MAX,
         range_note="0 would make ZeroMQ's queue unlimited and memory unbounded"),
    *_curve_specs(_req),
    *_heartbeat_specs(_req, "request"),
)

_TABLES: dict[str, tuple[OptionSpec, ...]] = {
    "source": SOURCE_OPTIONS, "sink": SINK_OPTIONS, "request": REQUEST_OPTIONS,
}


# -- parsing one value --------------------------------------------------------------------


def _q(raw: str, limit: int = 60) -> str:
    """``repr(raw)``, shortened: an error message must stay readable whatever the value."""
    text = repr(raw)
    return text if len(text) <= limit else text[: limit - 4] + "...'"


def _range_error(spec: OptionSpec, raw: str) -> OptionError:
    what = {"int": "an integer", "bytes": "a number of bytes", "seconds": "a finite number of seconds"}[spec.kind]
    if spec.kind == "seconds":
        bounds = f"{'>=' if spec.allow_zero else '>'} {_show(spec.minimum)} and <= {_show(spec.maximum)}"
    elif spec.kind == "bytes":
        bounds = f"from {_show_bytes(spec.minimum)} to {_show_bytes(spec.maximum)}"
    else:
        bounds = f"from {_show(spec.minimum)} to {_show(spec.maximum)}"
    note = f" ({spec.range_note})" if spec.range_note else ""
    return OptionError(f"option {spec.name!r} = {_q(raw)} is out of range; expected {what} {bounds}{note}", spec.name)


def _check_int_range(spec: OptionSpec, raw: str, value: int) -> int:
    if (spec.minimum is not None and value < spec.minimum) or (spec.maximum is not None and value > spec.maximum):
        raise _range_error(spec, raw)
    return value


def _digits_to_int(spec: OptionSpec, raw: str, digits: str) -> int:
    digits = digits.replace("_", "")
    if len(digits.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
        raise _range_error(spec, raw)
    return int(digits)


def _parse_int(spec: OptionSpec, raw: str) -> int:
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is not an integer; expected an integer from "
            f"{_show(spec.minimum)} to {_show(spec.maximum)} (digits, '_' allowed between them)",
            spec.name,
        )
    return _check_int_range(spec, raw, _digits_to_int(spec, raw, text))


def _parse_bytes(spec: OptionSpec, raw: str) -> int:
    match = _BYTES.fullmatch(raw.strip())
    if match is None:
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is not a number of bytes; expected an integer from "
            f"{_show_bytes(spec.minimum)} to {_show_bytes(spec.maximum)}, optionally with a suffix "
            "KiB, MiB, GiB or TiB (e.g. '64MiB')",
            spec.name,
        )
    value = _digits_to_int(spec, raw, match.group(1))
    unit = match.group(2)
    return _check_int_range(spec, raw, value * _UNITS[unit.lower()] if unit else value)


def _parse_seconds(spec: OptionSpec, raw: str) -> float:
    text = raw.strip()
    if not _DECIMAL.fullmatch(text):
        if text.lower().lstrip("+-") in ("inf", "infinity", "nan"):  # numbers, but never valid here
            raise _range_error(spec, raw)
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is not a number; expected seconds, a finite number "
            f"{'>=' if spec.allow_zero else '>'} {_show(spec.minimum)} and <= {_show(spec.maximum)} (e.g. '5' or '0.5')",
            spec.name,
        )
    value = float(text.replace("_", ""))
    low = spec.minimum or 0.0
    too_low = value < low if spec.allow_zero else value <= low
    if not math.isfinite(value) or too_low or (spec.maximum is not None and value > spec.maximum):
        raise _range_error(spec, raw)
    return value


def _parse_duration(spec: OptionSpec, raw: str) -> float:
    """Seconds as a number, or a number with a unit: ``500ms``, ``5s``, ``1min``, ``1h``."""
    match = _DURATION.fullmatch(raw.strip())
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in ("", *_DURATION_UNITS):
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is not a duration; expected seconds as a number, or a number with "
            f"a unit (ms, s, min, h), e.g. '5', '500ms', '5s', '1min'", spec.name,
        )
    seconds = float(match.group(1).replace("_", "")) * _DURATION_UNITS.get(unit, 1.0)
    if not math.isfinite(seconds) or seconds <= (spec.minimum or 0.0) or \
            (spec.maximum is not None and seconds > spec.maximum):
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is out of range; expected more than 0 and at most "
            f"{_show(spec.maximum)} seconds", spec.name,
        )
    return seconds


def _parse_bool(spec: OptionSpec, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {spec.name!r} = {_q(raw)} is not a boolean; expected true or false", spec.name)


def _parse_choice(spec: OptionSpec, raw: str) -> str:
    value = raw.strip()
    if value.isascii():
        for choice in spec.choices:
            if value.lower() == choice.lower():
                return choice
    raise OptionError(
        f"option {spec.name!r} = {_q(raw)} is not valid; valid values: {', '.join(spec.choices)}", spec.name
    )


def _utf8(spec: OptionSpec, raw: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(f"option {spec.name!r} = {_q(raw)} is not valid UTF-8 text", spec.name) from None
    return value


def _parse_string(spec: OptionSpec, raw: str) -> Optional[str]:
    if spec.attr == "topic":  # a topic is sent as given: '' is the empty topic frame
        return _utf8(spec, raw, raw)
    return _utf8(spec, raw, raw) if raw else None


def _parse_list(spec: OptionSpec, raw: str) -> list[str]:
    return [_utf8(spec, raw, t) for t in (part.strip() for part in raw.split(",")) if t]


def _parse_host(spec: OptionSpec, raw: str) -> Optional[str]:
    host = raw.strip()
    if not host:
        return None
    if host.strip("[]") in ("*", "0.0.0.0", "::"):
        problem: Optional[str] = (
            "a wildcard address would accept fetch requests on every interface; name the driver's address"
        )
    else:
        problem = tcp_host_problem(host)
    if problem:
        raise OptionError(f"option {spec.name!r} = {_q(raw)} is not valid: {problem}", spec.name)
    return host


def _parse_path(spec: OptionSpec, raw: str) -> str:
    text = raw.strip()
    if "\x00" in text:
        raise OptionError(f"option {spec.name!r} = {_q(raw)} contains a NUL character; give an absolute path", spec.name)
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise OptionError(f"option {spec.name!r} = {_q(raw)} cannot be encoded as a file name", spec.name) from None
    path = os.path.expanduser(text)
    if not os.path.isabs(path):
        raise OptionError(
            f"option {spec.name!r} = {_q(raw)} is a relative path; give an absolute path (Spark runs the "
            "connector's processes in other working directories, and a restarted query must find the same "
            "directory)",
            spec.name,
        )
    return os.path.normpath(path)


def _curve_value(spec: OptionSpec, raw: str, load: Callable[[str, str], Any]) -> Any:
    text = raw.strip()
    if "\x00" in text:
        raise OptionError(f"option {spec.name!r} = {_q(raw)} contains a NUL character", spec.name)
    try:
        return load(os.path.expanduser(text), spec.name)
    except CurveError as exc:
        raise OptionError(f"option {spec.name!r}: {exc}", spec.name) from None


def _parse_certificate(spec: OptionSpec, raw: str) -> KeyPair:
    return _curve_value(spec, raw, KeyPair.from_certificate)


def _parse_public_key(spec: OptionSpec, raw: str) -> bytes:
    return _curve_value(spec, raw, load_public_key)


def _parse_authorized(spec: OptionSpec, raw: str) -> Any:
    return _curve_value(spec, raw, load_authorized_keys)


_PARSERS: dict[str, Callable[[OptionSpec, str], Any]] = {
    "int": _parse_int,
    "bytes": _parse_bytes,
    "seconds": _parse_seconds,
    "duration": _parse_duration,
    "bool": _parse_bool,
    "choice": _parse_choice,
    "string": _parse_string,
    "list": _parse_list,
    "host": _parse_host,
    "path": _parse_path,
    "certificate": _parse_certificate,
    "publickey": _parse_public_key,
    "authorized": _parse_authorized,
}


def _parse_relays(spec: OptionSpec, raw: str) -> list[str]:
    """Relay addresses: where a relay's ``--listen`` is, connected to (never bound)."""
    try:
        endpoints = parse_endpoints(raw, default_bind=False)
    except ValueError as exc:
        raise OptionError(f"option {spec.name!r}: {exc}", spec.name) from None
    addresses = []
    for endpoint in endpoints:
        if endpoint.bind or endpoint.address.split("://", 1)[0] not in ("tcp", "ipc"):
            raise OptionError(
                f"option {spec.name!r}: {str(endpoint)!r} is not a relay address; expected the address a relay "
                "listens on, e.g. 'tcp://relay-host:7000' or 'ipc:///run/spark-zmq/a.sock' (a query connects to "
                "its relays)", spec.name,
            )
        if endpoint.address in addresses:
            raise OptionError(f"option {spec.name!r}: relay {endpoint.address!r} is given twice", spec.name)
        addresses.append(endpoint.address)
    return addresses


_PARSERS["relays"] = _parse_relays


def _parse_endpoints(spec: OptionSpec, raw: Optional[str], parsed: dict[str, Any],
                     relays_raw: Optional[str] = None) -> list[Endpoint]:
    if spec.side == "source" and relays_raw is not None and relays_raw.strip():
        if raw is not None and raw.strip():
            raise OptionError(
                "options 'endpoints' and 'relays' exclude each other: a query either receives on its own "
                "endpoints or reads relays that receive for it", "relays",
            )
        return []
    if raw is None or not raw.strip():
        relays = " (or option 'relays': the addresses of spark-zmq relays)" if spec.side == "source" else ""
        raise OptionError(
            f"option {spec.name!r} is required: a comma-separated list of ZeroMQ endpoints, "
            f"e.g. '@tcp://*:5555' to bind or '>tcp://host:5555' to connect{relays}",
            spec.name,
        )
    default_bind = spec.side == "source" and parsed.get("pattern") != "sub"
    try:
        endpoints = parse_endpoints(raw, default_bind=default_bind)
    except ValueError as exc:
        raise OptionError(f"option {spec.name!r}: {exc}", spec.name) from None
    seen: set[str] = set()
    for endpoint in endpoints:
        if endpoint.bind and endpoint.address in seen:
            raise OptionError(
                f"option {spec.name!r}: {endpoint.address!r} is bound twice; each endpoint is bound once", spec.name
            )
        seen.add(endpoint.address)
    return endpoints


# -- parsing a whole map ------------------------------------------------------------------


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
                f"{side} option {_q(lower)} is given twice with different values "
                f"({_q(spelled[lower])} = {_q(str(out[lower]))}, {_q(name)} = {_q(str(text))}); "
                "option names are case-insensitive",
                lower,
            )
        out[lower], spelled[lower] = text, name
    return out


def _check_known(opts: dict[str, Optional[str]], side: str) -> None:
    table = _TABLES[side]
    known = {spec.key for spec in table}
    unknown = sorted(k for k in opts if k not in known and k not in _SPARK_KEYS)
    if unknown:
        raise OptionError(
            f"unknown {side} option(s) {', '.join(map(_q, unknown))}; "
            f"valid options: {', '.join(spec.name for spec in table)}",
            unknown[0],
        )


def parse_table(side: str, options: Mapping[Any, Any]) -> dict[str, Any]:
    """Parse and check ``options`` against the ``side`` table; returns ``{attr: value}``."""
    table = _TABLES[side]
    opts = _lower(options, side)
    _check_known(opts, side)
    parsed: dict[str, Any] = {}
    for spec in table:
        raw = opts.get(spec.key)
        if spec.kind == "endpoints":
            parsed[spec.attr] = _parse_endpoints(spec, raw, parsed, opts.get("relays"))
        elif raw is None or (not raw.strip() and spec.attr != "topic"):
            default = spec.default_for(parsed)
            parsed[spec.attr] = list(default) if isinstance(default, tuple) else default
        else:
            parsed[spec.attr] = _PARSERS[spec.kind](spec, raw)
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


def check_curve(parsed: dict[str, Any]) -> None:
    """The CURVE options make sense together: a client needs its certificate and the
    server's key; a server needs its certificate and the keys it accepts."""
    certificate, server_key, authorized = (
        parsed["curve_certificate"], parsed["curve_server_key"], parsed["curve_authorized_keys"]
    )
    if certificate is None:
        if server_key is not None:
            raise OptionError(
                "option 'curveServerKey' needs 'curveCertificate' (this side's secret certificate file): a CURVE "
                "client has a key pair of its own; make one with 'spark-zmq keygen NAME'", "curveCertificate",
            )
        if authorized is not None:
            raise OptionError(
                "option 'curveAuthorizedKeys' needs 'curveCertificate' (this side's secret certificate file): only "
                "a CURVE server authorizes clients", "curveCertificate",
            )
        return
    if server_key is not None and authorized is not None:
        raise OptionError(
            "options 'curveServerKey' and 'curveAuthorizedKeys' exclude each other: with 'curveServerKey' this "
            "side is a CURVE client (the server authorizes it); without it, a CURVE server that accepts "
            "'curveAuthorizedKeys'", "curveAuthorizedKeys",
        )
    if server_key is None and authorized is None:
        raise OptionError(
            "option 'curveCertificate' without 'curveServerKey' makes this side a CURVE server, which needs "
            "'curveAuthorizedKeys': a directory of the clients' public certificate files ('*.key'), or '*' to "
            "accept any client key (encryption without client authentication)", "curveAuthorizedKeys",
        )


def curve_of(certificate: Optional[KeyPair], server_key: Optional[bytes], authorized: Any) -> Optional[Curve]:
    """The ``Curve`` of checked CURVE options: a client with a server key, else a server."""
    if certificate is None:
        return None
    if server_key is not None:
        return Curve.client(certificate, server_key)
    return Curve.server(certificate, authorized)


def default_spool_dir(pattern: str, endpoints: Sequence[Endpoint], fmt: str, topics: Sequence[str]) -> str:
    """A spool directory derived from what identifies the stream, so a restarted query
    with the same options finds the spool it left behind.

    It lives under the user's state directory (``$XDG_STATE_HOME``, else
    ``~/.local/state``): it must survive a reboot (the spool holds messages Spark has not
    committed yet, so not under a temporary directory the system clears) and belong to
    the user running the query.
    """
    key = "|".join([pattern, ",".join(map(str, endpoints)), fmt, ",".join(topics)])
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):  # unset, empty or relative: the XDG spec says ignore it
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    if not os.path.isabs(state):
        raise OptionError(
            "option 'spoolDir' is not set and this user has no home directory for the default "
            "spool directory; give an absolute path",
            "spoolDir",
        )
    return os.path.join(state, "spark-zmq", "spool", digest)


# -- the validated option objects -----------------------------------------------------------


class _SocketSettings:
    """The heartbeat and CURVE settings every side's sockets take, from its options."""

    heartbeat_interval: float
    heartbeat_timeout: float
    heartbeat_ttl: float
    curve_certificate: Optional[KeyPair]
    curve_server_key: Optional[bytes]
    curve_authorized_keys: Any

    @property
    def heartbeat(self) -> Heartbeat:
        """The sockets' heartbeats (``heartbeatInterval`` 0: none)."""
        return Heartbeat(self.heartbeat_interval, self.heartbeat_timeout, self.heartbeat_ttl)

    @property
    def curve(self) -> Optional[Curve]:
        """The sockets' CURVE security, or ``None``."""
        return curve_of(self.curve_certificate, self.curve_server_key, self.curve_authorized_keys)


@dataclass(frozen=True)
class SourceOptions(_SocketSettings):
    """Validated options of ``spark.readStream/read.format("zmq")`` (see ``SOURCE_OPTIONS``)."""

    pattern: str
    endpoints: list[Endpoint]
    format: str
    topics: list[str]
    max_rows_per_trigger: Optional[int]
    max_bytes_per_trigger: Optional[int]
    starting_offsets: str
    max_spool_bytes: int
    spool_dir: str
    spool_fsync: bool
    fail_on_data_loss: bool
    min_partitions: Optional[int]
    max_messages: int
    timeout: float
    mode: str
    corrupt_column: Optional[str]
    hwm: int
    spool_access: str = "auto"
    spool_server_host: Optional[str] = None
    max_message_bytes: int = 64 * MiB
    curve_certificate: Optional[KeyPair] = None
    curve_server_key: Optional[bytes] = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    include_headers: bool = False
    include_metadata: bool = False
    relays: list[str] = field(default_factory=list)
    relay_timeout: float = 30.0
    fetch_timeout: float = 120.0
    receivers: str = "processes"
    receiver_linger_seconds: float = 300.0
    receive_buffer_bytes: Optional[int] = None
    heartbeat_interval: float = DEFAULT_HEARTBEAT.interval
    heartbeat_timeout: float = DEFAULT_HEARTBEAT.timeout
    heartbeat_ttl: float = DEFAULT_HEARTBEAT.ttl

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in SOURCE_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        """Check every option (``OptionError`` names the first bad one)."""
        return cls(**parse_table("source", options))


@dataclass(frozen=True)
class SinkOptions(_SocketSettings):
    """Validated options of ``df.writeStream/write.format("zmq")`` (see ``SINK_OPTIONS``)."""

    pattern: str
    endpoints: list[Endpoint]
    format: str
    topic: Optional[str]
    send_timeout_ms: int
    rows_per_message: int
    hwm: int
    curve_certificate: Optional[KeyPair] = None
    curve_server_key: Optional[bytes] = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    heartbeat_interval: float = DEFAULT_HEARTBEAT.interval
    heartbeat_timeout: float = DEFAULT_HEARTBEAT.timeout
    heartbeat_ttl: float = DEFAULT_HEARTBEAT.ttl

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in SINK_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        """Check every option (``OptionError`` names the first bad one)."""
        return cls(**parse_table("sink", options))


@dataclass(frozen=True)
class RequestOptions(_SocketSettings):
    """Validated options of ``spark_zmq.request(df, endpoints, ...)`` (see ``REQUEST_OPTIONS``)."""

    endpoints: list[Endpoint]
    format: str = "arrow"
    batch_rows: int = 1000
    max_in_flight: int = 4
    timeout: float = 30.0
    retries: int = 2
    mode: str = "FAILFAST"
    corrupt_column: Optional[str] = None
    max_message_bytes: int = 64 * MiB
    hwm: int = 1000
    curve_certificate: Optional[KeyPair] = None
    curve_server_key: Optional[bytes] = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    heartbeat_interval: float = DEFAULT_HEARTBEAT.interval
    heartbeat_timeout: float = DEFAULT_HEARTBEAT.timeout
    heartbeat_ttl: float = DEFAULT_HEARTBEAT.ttl

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in REQUEST_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "RequestOptions":
        """Check every option (``OptionError`` names the first bad one)."""
        return cls(**parse_table("request", options))


def _check_tables() -> None:
    """The tables and the dataclasses must name the same attributes (checked at import)."""
    for side, klass in (("source", SourceOptions), ("sink", SinkOptions), ("request", RequestOptions)):
        attrs = [spec.attr for spec in _TABLES[side]]
        names = [f.name for f in fields(klass)]
        if sorted(attrs) != sorted(names) or len(set(attrs)) != len(attrs):
            raise AssertionError(f"{side} options table and {klass.__name__} disagree: {attrs} vs {names}")
        for spec in _TABLES[side]:
            if spec.side != side or spec.kind not in (*_PARSERS, "endpoints"):
                raise AssertionError(f"bad option spec {spec}")


_check_tables()


# -- documentation generated from the table -----------------------------------------------

_TITLES = {
    "source": 'spark.readStream.format("zmq") / spark.read.format("zmq")',
    "sink": 'df.writeStream.format("zmq") / df.write.format("zmq")',
    "request": "spark_zmq.request(df, endpoints, reply_schema=..., **options)",
}


def markdown_table(side: str) -> str:
    """The README's options table for ``side`` (``source`` or ``sink``)."""
    lines = ["| option | type | valid values | default | meaning |", "|---|---|---|---|---|"]
    for spec in _TABLES[side]:
        cells = [f"`{spec.name}`", spec.kind, spec.valid_text(), spec.default_doc or "none", spec.doc]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def manual() -> str:
    """Every option as plain text: the body of ``help(ZmqDataSource)``."""
    out = [
        "Options are case-insensitive; an empty value means the default. Integers may use '_'",
        "between digits; byte sizes take a KiB, MiB, GiB or TiB suffix. A bad or unknown option",
        "fails when the DataFrame is defined, with an error naming the option and what is valid.",
    ]
    for side in _SIDES:
        out += ["", f"{side.capitalize()} options, {_TITLES[side]}:", ""]
        for spec in _TABLES[side]:
            out.append(f"  {spec.name} ({spec.kind})")
            body = (f"{_plain(spec.doc)} Valid: {_plain(spec.valid_text())}. "
                    f"Default: {_plain(spec.default_doc or 'none')}.")
            out += textwrap.wrap(body, width=88, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out) + "\n"


def _plain(text: str) -> str:
    return text.replace("**", "").replace("`", "")


def _marker(side: str) -> tuple[str, str]:
    return f"<!-- options:{side} -->", f"<!-- /options:{side} -->"


def readme_block(text: str, side: str) -> Optional[str]:
    """What ``text`` (a README) holds between the ``side`` markers, or ``None``."""
    start, end = _marker(side)
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(start) : j].strip("\n") + "\n"


def update_readme(text: str) -> str:
    """``text`` with the generated tables between their markers."""
    for side in _SIDES:
        start, end = _marker(side)
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README has no {start} ... {end} markers")
        text = text[: i + len(start)] + "\n" + markdown_table(side) + text[j:]
    return text


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m spark_zmq.options``: print or update the generated options docs."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_zmq.options", description="The connector's options, generated from one table."
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--markdown", choices=("source", "sink", "request", "all"), nargs="?", const="all",
                       help="print the Markdown options table(s)")
    group.add_argument("--manual", action="store_true", help="print the plain-text manual (as help() shows it)")
    group.add_argument("--update-readme", metavar="README", help="rewrite the tables between the markers in README")
    group.add_argument("--check-readme", metavar="README", help="exit 1 if README's tables differ from the table")
    args = parser.parse_args(argv)
    if args.markdown:
        sides = _SIDES if args.markdown == "all" else (args.markdown,)
        sys.stdout.write("\n".join(markdown_table(side) for side in sides))
    elif args.manual:
        sys.stdout.write(manual())
    elif args.update_readme:
        with open(args.update_readme, encoding="utf-8") as f:
            text = f.read()
        with open(args.update_readme, "w", encoding="utf-8") as f:
            f.write(update_readme(text))
    else:
        with open(args.check_readme, encoding="utf-8") as f:
            text = f.read()
        stale = [side for side in _SIDES if readme_block(text, side) != markdown_table(side)]
        if stale:
            print(f"{args.check_readme}: the {' and '.join(stale)} options table(s) differ from the generated ones; "
                  f"run python -m spark_zmq.options --update-readme {args.check_readme}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
