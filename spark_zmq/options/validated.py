"""The validated option objects: ``SourceOptions``, ``SinkOptions``, ``RequestOptions``,
with the settings derived from them (heartbeats, CURVE).

Why dataclasses over the table: the rest of the connector reads typed attributes, never
raw strings; their fields are checked against the table when this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from ..patterns.endpoints import Endpoint
from ..patterns.heartbeat import DEFAULT_HEARTBEAT, RECEIVER_HEARTBEAT, Heartbeat
from ..patterns.tuning import SocketTuning
from .curve_rules import curve_of
from .kinds import PARSERS
from .parse import parse_table
from .spec import MiB
from .table import REQUEST_OPTIONS, SINK_OPTIONS, SOURCE_OPTIONS, TABLES

__all__ = ["SourceOptions", "SinkOptions", "RequestOptions"]


class _SocketSettings:
    """The heartbeat and CURVE settings every side's sockets take, from its options."""

    heartbeat_interval: float
    heartbeat_timeout: float
    heartbeat_ttl: float
    curve_certificate: KeyPair | None
    curve_server_key: bytes | None
    curve_authorized_keys: Any

    @property
    def heartbeat(self) -> Heartbeat:
        """The sockets' heartbeats (``heartbeatInterval`` 0: none)."""
        return Heartbeat(self.heartbeat_interval, self.heartbeat_timeout, self.heartbeat_ttl)

    @property
    def curve(self) -> Curve | None:
        """The sockets' CURVE security, or ``None``."""
        return curve_of(self.curve_certificate, self.curve_server_key, self.curve_authorized_keys)


@dataclass(frozen=True)
class SourceOptions(_SocketSettings):
    """Validated options of ``spark.readStream/read.format("zmq")`` (see ``SOURCE_OPTIONS``)."""

    pattern: str
    endpoints: list[Endpoint]
    format: str
    topics: list[str]
    max_rows_per_trigger: int | None
    max_bytes_per_trigger: int | None
    starting_offsets: str
    max_spool_bytes: int
    spool_dir: str
    spool_fsync: bool
    fail_on_data_loss: bool
    min_partitions: int | None
    max_messages: int
    timeout: float
    mode: str
    corrupt_column: str | None
    hwm: int
    spool_access: str = "auto"
    spool_server_host: str | None = None
    spool_server_port: tuple[int, int] | None = None
    max_message_bytes: int = 64 * MiB
    curve_certificate: KeyPair | None = None
    curve_server_key: bytes | None = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    include_headers: bool = False
    include_metadata: bool = False
    committed_only: bool = False
    relays: list[str] = field(default_factory=list)
    relay_reader: str = "default"
    relay_timeout: float = 120.0
    fetch_timeout: float = 120.0
    receivers: str = "processes"
    receiver_linger_seconds: float = 300.0
    receive_buffer_bytes: int | None = None
    min_rows_per_trigger: int | None = None
    max_trigger_delay: float = 900.0
    starting_timestamp: int | None = None
    heartbeat_interval: float = RECEIVER_HEARTBEAT.interval
    heartbeat_timeout: float = RECEIVER_HEARTBEAT.timeout
    heartbeat_ttl: float = RECEIVER_HEARTBEAT.ttl
    tuning: SocketTuning | None = None
    metrics_address: str | None = None

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in SOURCE_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Check every option (``OptionError`` names the first bad one)."""
        return cls(**parse_table("source", options))


@dataclass(frozen=True)
class SinkOptions(_SocketSettings):
    """Validated options of ``df.writeStream/write.format("zmq")`` (see ``SINK_OPTIONS``)."""

    pattern: str
    endpoints: list[Endpoint]
    format: str
    topic: str | None
    send_timeout_ms: int
    rows_per_message: int
    hwm: int
    curve_certificate: KeyPair | None = None
    curve_server_key: bytes | None = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    heartbeat_interval: float = DEFAULT_HEARTBEAT.interval
    heartbeat_timeout: float = DEFAULT_HEARTBEAT.timeout
    heartbeat_ttl: float = DEFAULT_HEARTBEAT.ttl
    tuning: SocketTuning | None = None

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in SINK_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
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
    corrupt_column: str | None = None
    max_message_bytes: int = 64 * MiB
    hwm: int = 1000
    curve_certificate: KeyPair | None = None
    curve_server_key: bytes | None = None
    curve_authorized_keys: Any = field(default=None, repr=False)
    heartbeat_interval: float = DEFAULT_HEARTBEAT.interval
    heartbeat_timeout: float = DEFAULT_HEARTBEAT.timeout
    heartbeat_ttl: float = DEFAULT_HEARTBEAT.ttl
    tuning: SocketTuning | None = None

    KNOWN: ClassVar[tuple[str, ...]] = tuple(spec.name for spec in REQUEST_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> RequestOptions:
        """Check every option (``OptionError`` names the first bad one)."""
        return cls(**parse_table("request", options))


def _check_tables() -> None:
    """The tables and the dataclasses must name the same attributes (checked at import)."""
    for side, klass in (("source", SourceOptions), ("sink", SinkOptions), ("request", RequestOptions)):
        attrs = [spec.attr for spec in TABLES[side]]
        names = [f.name for f in fields(klass)]
        if sorted(attrs) != sorted(names) or len(set(attrs)) != len(attrs):
            raise AssertionError(f"{side} options table and {klass.__name__} disagree: {attrs} vs {names}")
        for spec in TABLES[side]:
            if spec.side != side or spec.kind not in (*PARSERS, "endpoints", "zmq"):
                raise AssertionError(f"bad option spec {spec}")
        # a default written on the dataclass (for code that builds one directly) is the table's
        defaults = {spec.attr: spec.default for spec in TABLES[side]}
        for f in fields(klass):
            if f.default is not MISSING and f.default != defaults[f.name]:
                raise AssertionError(
                    f"{klass.__name__}.{f.name} defaults to {f.default!r}, the {side} options "
                    f"table to {defaults[f.name]!r}"
                )


_check_tables()
