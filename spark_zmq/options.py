"""Parse and validate the data source options (DESIGN.md section 2) up front.

Every check happens when the DataFrame is defined, not when the first message arrives,
and every error names the option, the value and what is valid. Spark passes option keys
case-insensitively, so lookups here lower-case them.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import ClassVar, Mapping, Optional

from .patterns.endpoints import Endpoint, parse_endpoints

__all__ = ["SourceOptions", "SinkOptions", "OptionError"]

SOURCE_PATTERNS = ("pull", "gather", "sub")
SINK_PATTERNS = ("push", "scatter", "pub")
FORMATS = ("raw", "text", "json", "arrow")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
GiB = 1 << 30

# Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = {"path", "checkpointlocation", "queryname"}


class OptionError(ValueError):
    """A data source option is missing, unknown or has an invalid value."""


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _choice(opts: dict[str, str], name: str, valid: tuple[str, ...], default: str, upper: bool = False) -> str:
    value = opts.get(name.lower(), default).strip()
    value = value.upper() if upper else value.lower()
    if value not in valid:
        raise OptionError(f"option {name!r} = {opts.get(name.lower())!r} is not valid; valid values: {', '.join(valid)}")
    return value


def _int(opts: dict[str, str], name: str, default: Optional[int], minimum: int = 1) -> Optional[int]:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        raise OptionError(f"option {name!r} = {raw!r} is not an integer; expected an integer >= {minimum}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} = {raw!r} is out of range; expected an integer >= {minimum}")
    return value


def _float(opts: dict[str, str], name: str, default: float) -> float:
    raw = opts.get(name.lower())
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(f"option {name!r} = {raw!r} is not a number; expected seconds > 0") from None
    if not value > 0:
        raise OptionError(f"option {name!r} = {raw!r} is out of range; expected seconds > 0")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} = {raw!r} is not a boolean; expected true or false")


def _check_known(opts: dict[str, str], known: tuple[str, ...], what: str) -> None:
    known_lower = {k.lower() for k in known}
    unknown = sorted(k for k in opts if k not in known_lower and k not in _SPARK_KEYS)
    if unknown:
        raise OptionError(
            f"unknown {what} option(s) {', '.join(map(repr, unknown))}; valid options: {', '.join(known)}"
        )


def _endpoints(opts: dict[str, str], default_bind: bool) -> list[Endpoint]:
    raw = opts.get("endpoints")
    if raw is None or not raw.strip():
        raise OptionError(
            "option 'endpoints' is required: a comma-separated list of ZeroMQ endpoints, "
            "e.g. '@tcp://*:5555' to bind or '>tcp://host:5555' to connect"
        )
    try:
        return parse_endpoints(raw, default_bind=default_bind)
    except ValueError as exc:
        raise OptionError(f"option 'endpoints': {exc}") from None


def _topics(opts: dict[str, str]) -> list[str]:
    raw = opts.get("topics", "")
    return [t for t in (part.strip() for part in raw.split(",")) if t]


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of ``spark.readStream/read.format("zmq")``."""

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
    raw: dict[str, str] = field(repr=False, default_factory=dict)

    KNOWN: ClassVar[tuple[str, ...]] = (
        "spoolAccess", "spoolServerHost", "pattern", "endpoints", "format", "topics", "maxRowsPerTrigger", "maxBytesPerTrigger",
        "startingOffsets", "maxSpoolBytes", "spoolDir", "spoolFsync", "failOnDataLoss",
        "minPartitions", "maxMessages", "timeout", "mode", "columnNameOfCorruptRecord", "hwm",
    )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        opts = _lower(options)
        _check_known(opts, cls.KNOWN, "source")
        pattern = _choice(opts, "pattern", SOURCE_PATTERNS, "pull")
        endpoints = _endpoints(opts, default_bind=pattern != "sub")
        topics = _topics(opts)
        if topics and pattern != "sub":
            raise OptionError(f"option 'topics' only applies to pattern 'sub', not {pattern!r}")
        fmt = _choice(opts, "format", FORMATS, "raw")
        spool_dir = opts.get("spooldir") or default_spool_dir(pattern, endpoints, fmt, topics)
        return cls(
            pattern=pattern,
            endpoints=endpoints,
            format=fmt,
            topics=topics,
            max_rows_per_trigger=_int(opts, "maxRowsPerTrigger", None),
            max_bytes_per_trigger=_int(opts, "maxBytesPerTrigger", None),
            starting_offsets=_choice(opts, "startingOffsets", ("latest", "earliest"), "latest"),
            max_spool_bytes=_int(opts, "maxSpoolBytes", GiB, minimum=1 << 20),  # type: ignore[arg-type]
            spool_dir=spool_dir,
            spool_fsync=_bool(opts, "spoolFsync", False),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            min_partitions=_int(opts, "minPartitions", None),
            max_messages=_int(opts, "maxMessages", 10_000),  # type: ignore[arg-type]
            timeout=_float(opts, "timeout", 5.0),
            mode=_choice(opts, "mode", MODES, "PERMISSIVE", upper=True),
            corrupt_column=opts.get("columnnameofcorruptrecord") or None,
            hwm=_int(opts, "hwm", 10_000, minimum=0),  # type: ignore[arg-type]
            spool_access=_choice(opts, "spoolAccess", ("auto", "local", "fetch"), "auto"),
            spool_server_host=opts.get("spoolserverhost") or None,
            raw=opts,
        )


def default_spool_dir(pattern: str, endpoints: list[Endpoint], fmt: str, topics: list[str]) -> str:
    """A spool directory derived from what identifies the stream, so a restarted query
    with the same options finds the spool it left behind."""
    key = "|".join([pattern, ",".join(map(str, endpoints)), fmt, ",".join(topics)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(tempfile.gettempdir(), "spark-zmq-spool", digest)


@dataclass(frozen=True)
class SinkOptions:
    """Validated options of ``df.writeStream/write.format("zmq")``."""

    pattern: str
    endpoints: list[Endpoint]
    format: str
    topic: Optional[str]
    send_timeout_ms: int
    rows_per_message: int
    hwm: int
    raw: dict[str, str] = field(repr=False, default_factory=dict)

    KNOWN: ClassVar[tuple[str, ...]] = ("pattern", "endpoints", "format", "topic", "sendTimeoutMs", "rowsPerMessage", "hwm")

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        opts = _lower(options)
        _check_known(opts, cls.KNOWN, "sink")
        pattern = _choice(opts, "pattern", SINK_PATTERNS, "push")
        endpoints = _endpoints(opts, default_bind=False)
        topic = opts.get("topic")
        if topic is not None and pattern != "pub":
            raise OptionError(f"option 'topic' only applies to pattern 'pub', not {pattern!r}")
        return cls(
            pattern=pattern,
            endpoints=endpoints,
            format=_choice(opts, "format", FORMATS, "raw"),
            topic=topic,
            send_timeout_ms=_int(opts, "sendTimeoutMs", 30_000),  # type: ignore[arg-type]
            rows_per_message=_int(opts, "rowsPerMessage", 10_000),  # type: ignore[arg-type]
            hwm=_int(opts, "hwm", 1000, minimum=0),  # type: ignore[arg-type]
            raw=opts,
        )

