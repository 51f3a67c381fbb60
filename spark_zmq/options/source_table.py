"""The source's options table: every option of ``spark.readStream/read.format("zmq")``,
one ``OptionSpec`` row each, in the order the docs show them.

Why its own module: the source's forty-odd rows are a module's length on their own; each
side's table is a module, made from what they share (``shared_rows``), and ``table``
gathers the three.
"""

from __future__ import annotations

from typing import Any

from .shared_rows import (
    ENDPOINTS_VALID,
    FORMATS,
    MAX_SECONDS,
    MODES,
    SOURCE_PATTERNS,
    curve_specs,
    heartbeat_specs,
    zmq_spec,
)
from .spec import INT32_MAX, INT64_MAX, GiB, KiB, MiB, OptionSpec
from .spool_dir import default_spool_dir

__all__ = ["SOURCE_OPTIONS"]


def _spool_default(parsed: dict[str, Any]) -> str:
    return default_spool_dir(parsed["pattern"], parsed["endpoints"], parsed["format"], parsed["topics"])


def _src(name: str, kind: str, attr: str, doc: str, **kw: Any) -> OptionSpec:
    return OptionSpec(name=name, side="source", kind=kind, attr=attr, doc=doc, **kw)


#: Every option of ``spark.readStream/read.format("zmq")``, in the order the docs show them.
SOURCE_OPTIONS: tuple[OptionSpec, ...] = (
    _src(
        "pattern",
        "choice",
        "pattern",
        "The ZeroMQ pattern that receives: fair-queued `pull` or `gather`, or `sub` for pub/sub topics.",
        default="pull",
        default_doc="`pull`",
        choices=SOURCE_PATTERNS,
    ),
    _src(
        "endpoints",
        "endpoints",
        "endpoints",
        "Where to receive. Without a prefix `pull`/`gather` bind and "
        "`sub` connects. **Each endpoint is one ingest channel** (its own socket, receiver and `partition` "
        "number).",
        required=True,
        default_doc="required (unless `relays`)",
        valid_doc=ENDPOINTS_VALID,
    ),
    _src(
        "relays",
        "relays",
        "relays",
        "Read from standalone relays (`spark-zmq relay`, see docs/relays.md) instead "
        "of receiving here: comma-separated relay addresses (their `--listen`). Each relay's channels are "
        "partitions of their own, numbered in this order; one query at a time reads a relay under one `relayReader` "
        "name. Exactly one of "
        "`endpoints` and `relays`. With CURVE relays, give `curveCertificate` and `curveServerKey` (the relays' "
        "key).",
        default=(),
        default_doc="none",
        valid_doc="comma-separated `tcp://host:port` or `ipc://path`",
    ),
    _src(
        "receivers",
        "choice",
        "receivers",
        "Where the receivers of `endpoints` run: `threads` of the driver's "
        "reader process, or `processes`, one child process per endpoint (a local relay each, so ingest uses more "
        "than one core; each spools in `spoolDir/receiver-<channel>` with its share of `maxSpoolBytes`, and "
        "lingers after a stop for the restarted query, see `receiverLingerSeconds`). A spool written with one "
        "cannot be read with the other.",
        default="processes",
        default_doc="`processes`",
        choices=("threads", "processes"),
    ),
    _src(
        "receiverLingerSeconds",
        "seconds",
        "receiver_linger_seconds",
        "With `receivers=processes`: how long "
        "a stopped query's receiver processes keep receiving and spooling, detached, waiting for the restarted "
        "query (same `spoolDir` and options) to attach to them; a restart within it loses nothing, and a new "
        "query on that `spoolDir` with `startingOffsets=latest` begins where the stopped one left. Past it they "
        "drain into the spool and exit. `0`: they stop with the query.",
        default=300.0,
        default_doc="300",
        minimum=0.0,
        maximum=MAX_SECONDS,
        allow_zero=True,
    ),
    _src(
        "relayReader",
        "name",
        "relay_reader",
        "With `relays`: the name this query reads under. Several "
        "queries read one relay under different names, each with its own position and lease; a relay keeps what "
        "a registered name has not committed (within its retention, see docs/relays.md). A second query under a "
        "name another running query holds is refused.",
        default="default",
        default_doc="`default`",
        valid_doc="1 to 64 letters, digits, `.`, `_`, `-`, starting with a letter or digit",
    ),
    _src(
        "relayTimeout",
        "seconds",
        "relay_timeout",
        "With `relays`: how long the driver waits for a silent "
        "relay (requests are resent meanwhile, so a relay may restart, or a network blink between it and the driver "
        "pass, within it) before the query fails.",
        default=120.0,
        default_doc="120",
        minimum=0.0,
        maximum=MAX_SECONDS,
    ),
    _src(
        "fetchTimeout",
        "seconds",
        "fetch_timeout",
        "How long a read task waits for a silent spool server (the "
        "driver's fetch service or a relay's port) before it fails and Spark retries it. A request unanswered "
        "for 15 s is resent meanwhile, by then on a new connection if heartbeats found the old one dead.",
        default=120.0,
        default_doc="120",
        minimum=0.0,
        maximum=MAX_SECONDS,
    ),
    _src(
        "format",
        "choice",
        "format",
        "How messages become rows: `raw` (binary `value`), `text` (UTF-8 "
        "`value`), `json` or `arrow` (the schema you declare with `.schema(...)`).",
        default="raw",
        default_doc="`raw`",
        choices=FORMATS,
    ),
    _src(
        "topics",
        "list",
        "topics",
        "Subscription prefixes.",
        default=(),
        default_doc="everything",
        valid_doc="comma-separated prefixes",
        only_for=("sub",),
    ),
    _src(
        "maxRowsPerTrigger",
        "int",
        "max_rows_per_trigger",
        "Rows per micro-batch at most (split across channels by backlog; at least one message always passes).",
        default_doc="unlimited",
        minimum=1,
        maximum=INT64_MAX,
    ),
    _src(
        "maxBytesPerTrigger",
        "bytes",
        "max_bytes_per_trigger",
        "Payload bytes per micro-batch at most (split across channels by backlog; at least one message always passes).",
        default_doc="unlimited",
        minimum=1,
        maximum=INT64_MAX,
    ),
    _src(
        "minRowsPerTrigger",
        "int",
        "min_rows_per_trigger",
        "Rows a micro-batch waits for (Kafka's "
        "`minOffsetsPerTrigger`): no batch starts with fewer rows received until `maxTriggerDelay` has passed "
        "since the last batch (or since the query started). Combines with `maxRowsPerTrigger` and "
        "`maxBytesPerTrigger`; `Trigger.AvailableNow` is never held back.",
        default_doc="none (a batch takes what has arrived)",
        minimum=1,
        maximum=INT64_MAX,
    ),
    _src(
        "maxTriggerDelay",
        "duration",
        "max_trigger_delay",
        "With `minRowsPerTrigger`: the longest a "
        "micro-batch waits for them, counted from the last batch (or the query's start); then it takes what "
        "has arrived.",
        default=900.0,
        default_doc="`15min`",
        maximum=MAX_SECONDS,
    ),
    _src(
        "startingOffsets",
        "choice",
        "starting_offsets",
        "`latest`: what arrives after the query starts "
        "(and what receiver processes left lingering by a stopped query took since it stopped); `earliest`: also "
        "what an existing spool holds. Only for a new checkpoint.",
        default="latest",
        default_doc="`latest`",
        choices=("latest", "earliest"),
    ),
    _src(
        "startingTimestamp",
        "int",
        "starting_timestamp",
        "Milliseconds since the epoch: start at the first "
        "message received at or after it that the spool (or relay) still holds; before the oldest message held, at "
        "the oldest. Messages received at or after it that were already freed are data loss (`failOnDataLoss`). "
        "Takes precedence over `startingOffsets`. Only for a new checkpoint.",
        default_doc="none",
        valid_doc="milliseconds since the epoch, 0 to 2^63-1",
        minimum=0,
        maximum=INT64_MAX,
    ),
    _src(
        "maxSpoolBytes",
        "bytes",
        "max_spool_bytes",
        "Disk the spool may use before the receivers stop reading (backpressure).",
        default=GiB,
        default_doc="1 GiB",
        minimum=MiB,
        maximum=INT64_MAX,
    ),
    _src(
        "spoolDir",
        "path",
        "spool_dir",
        "The durable spool's directory on the driver host, private to the "
        "user. Keep it with the checkpoint: exactly-once needs both.",
        default=_spool_default,
        default_doc="`$XDG_STATE_HOME/spark-zmq/spool/<digest>`, else `~/.local/state/spark-zmq/spool/<digest>`; "
        "the digest is derived from `pattern`, `endpoints`, `format` and `topics`, so a restarted query finds "
        "its spool",
        valid_doc="absolute path (`~` is expanded)",
    ),
    _src(
        "spoolFsync",
        "bool",
        "spool_fsync",
        "`true`: fsync every spooled batch, which survives a machine "
        "crash but is slower; `false` survives a process crash.",
        default=False,
        default_doc="`false`",
    ),
    _src(
        "failOnDataLoss",
        "bool",
        "fail_on_data_loss",
        "`false`: continue when the checkpoint asks for offsets the spool no longer has (skipped and counted).",
        default=True,
        default_doc="`true`",
    ),
    _src(
        "minPartitions",
        "int",
        "min_partitions",
        "Read tasks per micro-batch at least.",
        default_doc="1 per channel (and by messages and bytes: see Read tasks in docs/source.md)",
        minimum=1,
        maximum=INT32_MAX,
        range_note="Spark numbers partitions with an `int`",
    ),
    _src(
        "hwm",
        "int",
        "hwm",
        "ZeroMQ receive high-water mark per socket, in messages: what queues in memory while the spool is full.",
        default=10_000,
        default_doc="10000",
        minimum=1,
        maximum=INT32_MAX,
        range_note="0 would make ZeroMQ's queue unlimited and memory unbounded",
    ),
    _src(
        "receiveBufferBytes",
        "bytes",
        "receive_buffer_bytes",
        "The receiving socket's kernel buffer per "
        "connection (ZMQ_RCVBUF): with `hwm`, the bound on what a receiver that stops (with `receivers=threads`, "
        "or past `receiverLingerSeconds`) or crashes can lose. Smaller costs throughput (see docs/guarantees.md).",
        default_doc="the kernel's (`net.core.rmem_default`, autotuned)",
        minimum=4 * KiB,
        maximum=INT32_MAX,
    ),
    _src(
        "maxMessageBytes",
        "bytes",
        "max_message_bytes",
        "Largest message accepted (ZMQ_MAXMSGSIZE); a peer that sends more is disconnected by ZeroMQ.",
        default=64 * MiB,
        default_doc="64 MiB",
        minimum=KiB,
        maximum=INT32_MAX,
    ),
    _src(
        "spoolAccess",
        "choice",
        "spool_access",
        "How read tasks reach the spool: `auto` (directly when they "
        "see the driver's `spoolDir`, else fetched from the driver over DEALER/ROUTER), `local`, `fetch`.",
        default="auto",
        default_doc="`auto`",
        choices=("auto", "local", "fetch"),
    ),
    _src(
        "spoolServerHost",
        "host",
        "spool_server_host",
        "The driver address executors use to fetch spool ranges; the fetch service listens only there.",
        default_doc="Spark's own answer for the driver: "
        "`spark.driver.host`, else `SPARK_LOCAL_IP`, else the host's address on the route to Spark's master",
        valid_doc="host name or IP address, not a wildcard",
    ),
    _src(
        "spoolServerPort",
        "ports",
        "spool_server_port",
        "The TCP port of the spool fetch service, so a "
        "firewall between executors and the driver can let it through: one port, or a range `first-last` (with "
        "`receivers=processes` each endpoint's receiver process listens on a port of its own, so give at least as "
        "many ports as endpoints).",
        default_doc="any free port",
        valid_doc="`7100` or `7100-7107`",
    ),
    _src(
        "metricsAddress",
        "string",
        "metrics_address",
        "`HOST:PORT` where the driver serves this query's "
        "receivers' Prometheus metrics at `/metrics` (needs `pip install 'spark-zmq[metrics]'`): per channel the "
        "latest and earliest offsets, the offsets received and not yet in a planned batch, and the broken "
        "connections and refused handshakes (see docs/metrics.md).",
        default_doc="off",
        valid_doc="`HOST:PORT`, e.g. `0.0.0.0:9108`",
    ),
    _src(
        "mode",
        "choice",
        "mode",
        "Malformed messages: `PERMISSIVE` keeps the row (raw text in the "
        "corrupt-record column if the schema has it), `DROPMALFORMED` drops it, `FAILFAST` fails the query. "
        "For `arrow`, anything but `DROPMALFORMED` fails on an unreadable message.",
        default="PERMISSIVE",
        default_doc="`PERMISSIVE`",
        choices=MODES,
    ),
    _src(
        "columnNameOfCorruptRecord",
        "string",
        "corrupt_column",
        "`json` with `PERMISSIVE`: the string column of your schema that receives a malformed message's text.",
        default_doc="none",
        valid_doc="a column name of the schema",
    ),
    _src(
        "includeHeaders",
        "bool",
        "include_headers",
        "`arrow`: fill the column `headers map<string,string>` "
        "that you declare in `.schema(...)` with the custom metadata of the Arrow message each row came in "
        "(keys and values as UTF-8, invalid bytes replaced), plus `spark_zmq.row`, the row's position in its "
        "message. The sink's `spark_zmq.query_id`, `batch_id`, `partition`, `sequence` and `spark_zmq.row` "
        "name one written row (see Message headers in docs/source.md).",
        default=False,
        default_doc="`false`",
        only_formats=("arrow",),
    ),
    _src(
        "committedOnly",
        "bool",
        "committed_only",
        "`arrow` from a spark-zmq sink (`push`/`scatter`): deliver "
        "only the task runs the sink's commit record names, each row exactly once, across the writing query's "
        "task retries and restarts and this query's restarts. A run's messages wait in the spool until its "
        "record arrives (bounded by `maxSpoolBytes`); a message without the sink's metadata is malformed and "
        "follows `mode`. Streaming reads only (see docs/pipelines.md).",
        default=False,
        default_doc="`false`",
        only_formats=("arrow",),
    ),
    _src(
        "includeMetadata",
        "bool",
        "include_metadata",
        "`json`/`arrow`: fill the columns `topic string, "
        "partition int, offset long, timestamp timestamp` (as `raw` has them: the message's topic frame, its "
        "channel, its offset in the channel, when it was received), declared as the last four of "
        "`.schema(...)`: Spark takes a declared schema as it is, so they are declared, not appended. A message "
        "column with one of these names is an error.",
        default=False,
        default_doc="`false`",
        only_formats=("json", "arrow"),
    ),
    _src(
        "timeout",
        "seconds",
        "timeout",
        "Seconds of silence that end a bounded batch read; also how long "
        "`Trigger.AvailableNow` drains what producers had queued before it pins its end.",
        default=5.0,
        default_doc="5",
        minimum=0.0,
        maximum=MAX_SECONDS,
    ),
    _src(
        "maxMessages",
        "int",
        "max_messages",
        "Bounded batch read: stop after this many messages (held in memory).",
        default=10_000,
        default_doc="10000",
        minimum=1,
        maximum=INT32_MAX,
    ),
    *curve_specs(_src),
    *heartbeat_specs(_src, "source"),
    zmq_spec(_src),
)
