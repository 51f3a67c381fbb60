"""The options table: every option of the source, the sink and ``spark_zmq.request``, one
``OptionSpec`` row each (name, kind, attribute, default, range, documentation).

Why one table: an option's name, type, range, default and documentation used to live in
four places and drifted apart; every other module of ``spark_zmq.options`` derives what
it does from these rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..patterns.heartbeat import DEFAULT_HEARTBEAT, MAX_HEARTBEAT_S, MAX_TTL_S, RECEIVER_HEARTBEAT
from ..patterns.wires import RECEIVING_PATTERNS, SENDING_PATTERNS
from .spec import INT32_MAX, INT64_MAX, GiB, KiB, MiB, OptionSpec
from .spool_dir import default_spool_dir

__all__ = ["ZMQ_SOCKET_OPTIONS", "ZMQ_OPTION_RANGES", "SOURCE_OPTIONS", "SINK_OPTIONS", "REQUEST_OPTIONS", "TABLES", "SIDES", "QUERIES", "queries_of", "SOURCE_PATTERNS",
           "SINK_PATTERNS", "FORMATS", "MODES", "MAX_SECONDS", "MAX_REQUEST_ROWS"]

#: the patterns the options accept are those the wires serve, declared once there
SOURCE_PATTERNS = RECEIVING_PATTERNS
SINK_PATTERNS = SENDING_PATTERNS
FORMATS = ("raw", "text", "json", "arrow")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

#: the longest wait an option may ask for; longer waits are mistakes (ms given as s)
MAX_SECONDS = 86_400.0
#: rows one Arrow request may carry (what a reply may hold, too: the guard's limit per message)
MAX_REQUEST_ROWS = 10_000_000

#: the three tables' names, in the order the docs show them
SIDES = ("source", "sink", "request")


def _spool_default(parsed: dict[str, Any]) -> str:
    return default_spool_dir(parsed["pattern"], parsed["endpoints"], parsed["format"], parsed["topics"])


def _src(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="source", kind=kind, attr=attr, doc=doc, **kw)


def _snk(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="sink", kind=kind, attr=attr, doc=doc, **kw)


def _req(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="request", kind=kind, attr=attr, doc=doc, **kw)


def _curve_specs(make: Callable[..., OptionSpec]) -> tuple[OptionSpec, ...]:
    """The three CURVE options, the same on both sides (see docs/security.md)."""
    return (
        make("curveCertificate", "certificate", "curve_certificate", "This side's secret certificate file "
             "(`NAME.key_secret`, as `spark-zmq keygen NAME`, pyzmq's `zmq.auth` or CZMQ's `zcert` write it). "
             "With `curveServerKey` this side's sockets are CURVE clients; without it they are CURVE servers.",
             default_doc="off (no encryption)", valid_doc="path of a secret certificate file"),
        make("curveServerKey", "publickey", "curve_server_key", "The server's public key: its certificate file "
             "(`NAME.key`) or its 40-character Z85 text. Needs `curveCertificate`.", default_doc="none",
             valid_doc="certificate file or Z85 key"),
        make("curveAuthorizedKeys", "authorized", "curve_authorized_keys", "CURVE server: the client keys "
             "accepted, a directory of public certificate files (`*.key`, or CZMQ's certificate store: every file "
             "not ending `_secret`), or `*` for any client key "
             "(encryption without client authentication). Required with `curveCertificate` alone.",
             default_doc="none", valid_doc="directory or `*`"),
    )


def _heartbeat_specs(make: Callable[..., OptionSpec], side: str) -> tuple[OptionSpec, ...]:
    """The three heartbeat options, the same on both sides (see docs/liveness.md)."""
    who = {"source": "a producer (or, for `sub`, the publisher)", "sink": "a consumer",
           "request": "a worker (or broker)"}[side]
    consequence = {"source": "a connecting receiver reconnects",
                   "sink": "what it had not acknowledged goes to the other consumers",
                   "request": "its requests are resent to the others when their timeout comes"}[side]
    # receive-only sockets PING a silent producer only, without a TTL (docs/liveness.md)
    quiet = (" `pull` and `gather` PING only a producer that has been silent this long while they read, "
             "and `pull` with CURVE or over `inproc://` sends none.") if side == "source" else ""
    no_ttl = " `pull` and `gather` send no TTL." if side == "source" else ""
    # the source closes a silent producer late: closing destroys what the producer has in flight
    default = RECEIVER_HEARTBEAT if side == "source" else DEFAULT_HEARTBEAT
    blink = (" Long by default: closing a producer's connection loses what it has in flight, so a network "
             "outage shorter than this costs nothing.") if side == "source" else ""
    return (
        make("heartbeatInterval", "seconds", "heartbeat_interval", "ZMTP 3.1 heartbeats (RFC 37): seconds "
             f"between the PINGs sent on every connection; `0` switches heartbeats and TCP keepalive off.{quiet}",
             default=default.interval, default_doc=f"{default.interval:g}", minimum=0.0,
             maximum=MAX_HEARTBEAT_S, allow_zero=True),
        make("heartbeatTimeout", "seconds", "heartbeat_timeout", f"Seconds {who} may stay silent after a PING "
             f"before its connection counts as broken ({consequence}); also the kernel's limit "
             f"(`TCP_USER_TIMEOUT`, keepalive) for unacknowledged data.{blink}",
             default=default.timeout, default_doc=f"{default.timeout:g}", minimum=0.0,
             maximum=MAX_HEARTBEAT_S),
        make("heartbeatTtl", "seconds", "heartbeat_ttl", "The TTL our PINGs carry: the peer may drop the "
             f"connection when it hears nothing from us for this long (`0`: no TTL).{no_ttl}",
             default=default.ttl, default_doc=f"{default.ttl:g}", minimum=0.0,
             maximum=MAX_TTL_S, allow_zero=True, range_note="16 bits of deciseconds on the wire"),
    )


#: the ``zmq.<name>`` socket options: name -> (``SocketTuning`` field, kind, libzmq option). Kinds:
#: ``ms`` a duration (``250ms``, ``1s``) or a number of milliseconds; ``s`` a duration or a number
#: of seconds (whole seconds: what libzmq and the kernel take); ``bool``; ``int`` (>= 1).
ZMQ_SOCKET_OPTIONS: dict[str, tuple[str, str, str]] = {
    "zmq.reconnectInterval": ("reconnect_ivl_ms", "ms", "ZMQ_RECONNECT_IVL"),
    "zmq.reconnectIntervalMax": ("reconnect_ivl_max_ms", "ms", "ZMQ_RECONNECT_IVL_MAX"),
    "zmq.handshakeInterval": ("handshake_ivl_ms", "ms", "ZMQ_HANDSHAKE_IVL"),
    "zmq.ipv6": ("ipv6", "bool", "ZMQ_IPV6"),
    "zmq.immediate": ("immediate", "bool", "ZMQ_IMMEDIATE"),
    "zmq.tcpKeepaliveIdle": ("tcp_keepalive_idle_s", "s", "ZMQ_TCP_KEEPALIVE_IDLE"),
    "zmq.tcpKeepaliveInterval": ("tcp_keepalive_intvl_s", "s", "ZMQ_TCP_KEEPALIVE_INTVL"),
    "zmq.tcpKeepaliveCount": ("tcp_keepalive_cnt", "int", "ZMQ_TCP_KEEPALIVE_CNT"),
    "zmq.sendBufferBytes": ("sndbuf", "int", "ZMQ_SNDBUF"),
    "zmq.receiveBufferBytes": ("rcvbuf", "int", "ZMQ_RCVBUF"),
}

#: the kernel's most for the keepalive settings (Linux: ``MAX_TCP_KEEPIDLE``, ``MAX_TCP_KEEPINTVL``,
#: ``MAX_TCP_KEEPCNT``); libzmq passes a larger value on, the kernel refuses it with EINVAL and
#: the connection then carries nothing
MAX_TCP_KEEPALIVE_S = 32_767
MAX_TCP_KEEPALIVE_COUNT = 127

#: the valid values of each ``zmq.<name>`` integer or interval, in its libzmq unit, checked when
#: the options are parsed: (least, most, why when not libzmq's int range). Outside them libzmq
#: accepts the value and the kernel or the package's engine refuses it in the task, or nothing
#: is received at all.
ZMQ_OPTION_RANGES: dict[str, tuple[int, int, str]] = {
    "zmq.reconnectInterval": (1, INT32_MAX, "0 is no interval: the package's engine refuses it"),
    "zmq.reconnectIntervalMax": (0, INT32_MAX, ""),
    "zmq.handshakeInterval": (1, INT32_MAX, "0 is no handshake timeout: the package's engine refuses it"),
    "zmq.tcpKeepaliveIdle": (1, MAX_TCP_KEEPALIVE_S, "the kernel's TCP_KEEPIDLE limit"),
    "zmq.tcpKeepaliveInterval": (1, MAX_TCP_KEEPALIVE_S, "the kernel's TCP_KEEPINTVL limit"),
    "zmq.tcpKeepaliveCount": (1, MAX_TCP_KEEPALIVE_COUNT, "the kernel's TCP_KEEPCNT limit"),
    "zmq.sendBufferBytes": (1, INT32_MAX, ""),
    "zmq.receiveBufferBytes": (1, INT32_MAX, ""),
}


def _zmq_spec(make: Callable[..., OptionSpec]) -> OptionSpec:
    """The ``zmq.<name>`` row, the same on every side: one row for all the socket options."""
    names = ", ".join(f"`{name}` ({libzmq})" for name, (_, _, libzmq) in ZMQ_SOCKET_OPTIONS.items())
    return make("zmq.<name>", "zmq", "tuning", "libzmq socket options, honoured on libzmq sockets and on the "
                "package's own ZMTP engine alike, set after the package's own settings: " + names + ". Intervals "
                "are durations (`250ms`, `1s`) or a number in libzmq's unit (milliseconds; seconds for the "
                "keepalive ones); `zmq.ipv6` and `zmq.immediate` are `true`/`false`; the rest integers. Valid: "
                "`zmq.reconnectInterval` and `zmq.handshakeInterval` from 1 ms, `zmq.reconnectIntervalMax` from "
                f"0; `zmq.tcpKeepaliveIdle` and `zmq.tcpKeepaliveInterval` 1 to {MAX_TCP_KEEPALIVE_S} s and "
                f"`zmq.tcpKeepaliveCount` 1 to {MAX_TCP_KEEPALIVE_COUNT} (the kernel's limits); the rest up to "
                "2^31-1. "
                "`zmq.ipv6` concerns libzmq sockets only: the engine resolves IPv4 and IPv6 alike.",
                default_doc="libzmq's (and the package's)", valid_doc="see the names in the description")


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
    _src("relays", "relays", "relays", "Read from standalone relays (`spark-zmq relay`, see docs/relays.md) instead "
         "of receiving here: comma-separated relay addresses (their `--listen`). Each relay's channels are "
         "partitions of their own, numbered in this order; one query at a time reads a relay under one `relayReader` "
         "name. Exactly one of "
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
         "query (same `spoolDir` and options) to attach to them; a restart within it loses nothing, and a new "
         "query on that `spoolDir` with `startingOffsets=latest` begins where the stopped one left. Past it they "
         "drain into the spool and exit. `0`: they stop with the query.", default=300.0, default_doc="300",
         minimum=0.0, maximum=MAX_SECONDS, allow_zero=True),
    _src("relayReader", "name", "relay_reader", "With `relays`: the name this query reads under. Several "
         "queries read one relay under different names, each with its own position and lease; a relay keeps what "
         "a registered name has not committed (within its retention, see docs/relays.md). A second query under a "
         "name another running query holds is refused.", default="default", default_doc="`default`",
         valid_doc="1 to 64 letters, digits, `.`, `_`, `-`, starting with a letter or digit"),
    _src("relayTimeout", "seconds", "relay_timeout", "With `relays`: how long the driver waits for a silent "
         "relay (requests are resent meanwhile, so a relay may restart, or a network blink between it and the driver "
         "pass, within it) before the query fails.",
         default=120.0, default_doc="120", minimum=0.0, maximum=MAX_SECONDS),
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
    _src("minRowsPerTrigger", "int", "min_rows_per_trigger", "Rows a micro-batch waits for (Kafka's "
         "`minOffsetsPerTrigger`): no batch starts with fewer rows received until `maxTriggerDelay` has passed "
         "since the last batch (or since the query started). Combines with `maxRowsPerTrigger` and "
         "`maxBytesPerTrigger`; `Trigger.AvailableNow` is never held back.", default_doc="none (a batch takes "
         "what has arrived)", minimum=1, maximum=INT64_MAX),
    _src("maxTriggerDelay", "duration", "max_trigger_delay", "With `minRowsPerTrigger`: the longest a "
         "micro-batch waits for them, counted from the last batch (or the query's start); then it takes what "
         "has arrived.", default=900.0, default_doc="`15min`", maximum=MAX_SECONDS),
    _src("startingOffsets", "choice", "starting_offsets", "`latest`: what arrives after the query starts "
         "(and what receiver processes left lingering by a stopped query took since it stopped); `earliest`: also "
         "what an existing spool holds. Only for a new checkpoint.",
         default="latest", default_doc="`latest`", choices=("latest", "earliest")),
    _src("startingTimestamp", "int", "starting_timestamp", "Milliseconds since the epoch: start at the first "
         "message received at or after it that the spool (or relay) still holds; before the oldest message held, at "
         "the oldest. Messages received at or after it that were already freed are data loss (`failOnDataLoss`). "
         "Takes precedence over `startingOffsets`. Only for a new checkpoint.", default_doc="none",
         valid_doc="milliseconds since the epoch, 0 to 2^63-1", minimum=0, maximum=INT64_MAX),
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
         default_doc="1 per channel (and by messages and bytes: see Read tasks in docs/source.md)", minimum=1, maximum=INT32_MAX,
         range_note="Spark numbers partitions with an `int`"),
    _src("hwm", "int", "hwm", "ZeroMQ receive high-water mark per socket, in messages: what queues in "
         "memory while the spool is full.", default=10_000, default_doc="10000", minimum=1, maximum=INT32_MAX,
         range_note="0 would make ZeroMQ's queue unlimited and memory unbounded"),
    _src("receiveBufferBytes", "bytes", "receive_buffer_bytes", "The receiving socket's kernel buffer per "
         "connection (ZMQ_RCVBUF): with `hwm`, the bound on what a receiver that stops (with `receivers=threads`, "
         "or past `receiverLingerSeconds`) or crashes can lose. Smaller costs throughput (see docs/guarantees.md).",
         default_doc="the kernel's (`net.core.rmem_default`, autotuned)", minimum=4 * KiB, maximum=INT32_MAX),
    _src("maxMessageBytes", "bytes", "max_message_bytes", "Largest message accepted (ZMQ_MAXMSGSIZE); a peer "
         "that sends more is disconnected by ZeroMQ.", default=64 * MiB, default_doc="64 MiB",
         minimum=KiB, maximum=INT32_MAX),
    _src("spoolAccess", "choice", "spool_access", "How read tasks reach the spool: `auto` (directly when they "
         "see the driver's `spoolDir`, else fetched from the driver over DEALER/ROUTER), `local`, `fetch`.",
         default="auto", default_doc="`auto`", choices=("auto", "local", "fetch")),
    _src("spoolServerHost", "host", "spool_server_host", "The driver address executors use to fetch spool "
         "ranges; the fetch service listens only there.", default_doc="Spark's own answer for the driver: "
         "`spark.driver.host`, else `SPARK_LOCAL_IP`, else the host's address on the route to Spark's master",
         valid_doc="host name or IP address, not a wildcard"),
    _src("spoolServerPort", "ports", "spool_server_port", "The TCP port of the spool fetch service, so a "
         "firewall between executors and the driver can let it through: one port, or a range `first-last` (with "
         "`receivers=processes` each endpoint's receiver process listens on a port of its own, so give at least as "
         "many ports as endpoints).", default_doc="any free port", valid_doc="`7100` or `7100-7107`"),
    _src("metricsAddress", "string", "metrics_address", "`HOST:PORT` where the driver serves this query's "
         "receivers' Prometheus metrics at `/metrics` (needs `pip install 'spark-zmq[metrics]'`): per channel the "
         "latest and earliest offsets, the offsets received and not yet in a planned batch, and the broken "
         "connections and refused handshakes (see docs/metrics.md).", default_doc="off",
         valid_doc="`HOST:PORT`, e.g. `0.0.0.0:9108`"),
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
         "name one written row (see Message headers in docs/source.md).", default=False, default_doc="`false`",
         only_formats=("arrow",)),
    _src("committedOnly", "bool", "committed_only", "`arrow` from a spark-zmq sink (`push`/`scatter`): deliver "
         "only the task runs the sink's commit record names, each row exactly once, across the writing query's "
         "task retries and restarts and this query's restarts. A run's messages wait in the spool until its "
         "record arrives (bounded by `maxSpoolBytes`); a message without the sink's metadata is malformed and "
         "follows `mode`. Streaming reads only (see docs/pipelines.md).", default=False, default_doc="`false`",
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
    _zmq_spec(_src),
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
    _zmq_spec(_snk),
)

#: Every option of ``spark_zmq.request(df, endpoints, ...)`` (keyword arguments, camelCase or snake_case).
REQUEST_OPTIONS: tuple[OptionSpec, ...] = (
    _req("endpoints", "endpoints", "endpoints", "The service: its workers, or a broker's frontend (the positional "
         "argument `endpoints`); every task connects a DEALER to each and round-robins its requests over them, "
         "and takes a reply only from the connection its request went out on.",
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
    _zmq_spec(_req),
)

#: each side's table by name
TABLES: dict[str, tuple[OptionSpec, ...]] = {
    "source": SOURCE_OPTIONS, "sink": SINK_OPTIONS, "request": REQUEST_OPTIONS,
}

#: Which queries read a source option: ``streaming`` (``readStream``) or ``batch``
#: (``read``); an option not named here applies to both. Every sink option applies to both
#: ``writeStream`` and ``write``; ``request`` takes any DataFrame.
QUERIES: dict[str, tuple[str, ...]] = {
    **{name: ("streaming",) for name in (
        "relays", "relayReader", "receivers", "receiverLingerSeconds", "relayTimeout", "fetchTimeout", "maxRowsPerTrigger",
        "maxBytesPerTrigger", "minRowsPerTrigger", "maxTriggerDelay", "startingOffsets", "startingTimestamp",
        "maxSpoolBytes", "spoolDir", "spoolFsync", "failOnDataLoss",
        "spoolAccess", "spoolServerHost", "spoolServerPort")},
    "maxMessages": ("batch",),
}


def queries_of(spec: OptionSpec) -> tuple[str, ...]:
    """The queries that read ``spec``'s option: ``("streaming", "batch")``, or one of them."""
    return QUERIES.get(spec.name, ("streaming", "batch")) if spec.side == "source" else ("streaming", "batch")
