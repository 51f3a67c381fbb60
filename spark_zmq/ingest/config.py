"""``IngestConfig``: what an ingest unit (``runtime.IngestRuntime``: spool, receivers,
fetch service) is configured with, and nothing else.

Why apart from the source's options: ``SourceOptions`` holds about forty settings, most of
them the reader's (admission control, decoding, loss policy, relays); the ingest reads
fifteen. With its own config the ingest depends on those alone, and a receiver process
(``spark_zmq.relay.child``) is handed exactly this, as JSON (``to_dict``/``from_dict``),
never a pickle of the source's options. ``from_options`` is the one place that maps the
options onto it (the source and the relay each call it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SparkZmqError
from ..patterns.curve import Curve
from ..patterns.endpoints import Endpoint, parse_endpoints
from ..patterns.heartbeat import Heartbeat
from ..patterns.tuning import SocketTuning

if TYPE_CHECKING:
    from ..options import SourceOptions

__all__ = ["IngestConfig", "IngestConfigError", "parse_fields", "positive_int", "str_list"]


class IngestConfigError(SparkZmqError, ValueError):
    """A configuration (``IngestConfig.from_dict``) that is not one: names the field."""


@dataclass(frozen=True)
class IngestConfig:
    """The settings of one ingest unit: its sockets, its spool and its fetch service."""

    #: the receiving sockets' pattern (``pull``, ``sub``, ...), one socket per endpoint
    pattern: str
    endpoints: list[Endpoint]
    #: the payloads' format (``arrow`` messages have their rows counted on receipt)
    format: str
    spool_dir: str
    max_spool_bytes: int
    spool_fsync: bool
    hwm: int
    topics: list[str]
    max_message_bytes: int
    receive_buffer_bytes: int | None
    heartbeat: Heartbeat
    curve: Curve | None
    tuning: SocketTuning | None
    #: the fetch service's host and port range (``spoolServerHost``/``spoolServerPort``)
    spool_server_host: str | None
    spool_server_port: tuple[int, int] | None

    @classmethod
    def from_options(cls, options: SourceOptions) -> IngestConfig:
        """The ingest's part of validated source options."""
        return cls(
            pattern=options.pattern,
            endpoints=list(options.endpoints),
            format=options.format,
            spool_dir=options.spool_dir,
            max_spool_bytes=options.max_spool_bytes,
            spool_fsync=options.spool_fsync,
            hwm=options.hwm,
            topics=list(options.topics),
            max_message_bytes=options.max_message_bytes,
            receive_buffer_bytes=options.receive_buffer_bytes,
            heartbeat=options.heartbeat,
            curve=options.curve,
            tuning=options.tuning,
            spool_server_host=options.spool_server_host,
            spool_server_port=options.spool_server_port,
        )

    def to_dict(self) -> dict[str, Any]:
        """This config as JSON values (secret keys included: keep it off command lines)."""
        curve = self.curve
        return {
            "pattern": self.pattern,
            "endpoints": [str(e) for e in self.endpoints],
            "format": self.format,
            "spool_dir": self.spool_dir,
            "max_spool_bytes": self.max_spool_bytes,
            "spool_fsync": self.spool_fsync,
            "hwm": self.hwm,
            "topics": list(self.topics),
            "max_message_bytes": self.max_message_bytes,
            "receive_buffer_bytes": self.receive_buffer_bytes,
            "heartbeat": {
                "interval": self.heartbeat.interval,
                "timeout": self.heartbeat.timeout,
                "ttl": self.heartbeat.ttl,
            },
            "curve": None
            if curve is None
            else {
                "public_key": curve.public_key.decode("ascii"),
                "secret_key": curve.secret_key.decode("ascii"),
                "server_key": None if curve.server_key is None else curve.server_key.decode("ascii"),
                "authorized": (
                    curve.authorized
                    if curve.authorized is None or isinstance(curve.authorized, str)
                    else sorted(k.decode("ascii") for k in curve.authorized)
                ),
            },
            "tuning": None if self.tuning is None else dataclasses.asdict(self.tuning),
            "spool_server_host": self.spool_server_host,
            "spool_server_port": None if self.spool_server_port is None else list(self.spool_server_port),
        }

    @classmethod
    def from_dict(cls, data: Any) -> IngestConfig:
        """The config ``to_dict`` made, checked: ``IngestConfigError`` names the first field
        that is missing, unknown or of the wrong kind."""
        return cls(**parse_fields(data, _FIELDS, "ingest configuration"))


# -- reading a config back: one parser a field ------------------------------------------------


def parse_fields(data: Any, fields: Mapping[str, Callable[[Any], Any]], what: str) -> dict[str, Any]:
    """Each of ``fields`` parsed from the JSON object ``data``: ``IngestConfigError`` names
    the first field that is missing, unknown or of the wrong kind (``what`` says whose)."""
    if not isinstance(data, Mapping):
        raise IngestConfigError(f"the {what} is a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise IngestConfigError(f"{what}: unknown field {unknown[0]!r}")
    values = {}
    for name, parse in fields.items():
        if name not in data:
            raise IngestConfigError(f"{what}: field {name!r} is missing")
        try:
            values[name] = parse(data[name])
        except (TypeError, ValueError) as exc:
            raise IngestConfigError(f"{what}: field {name!r}: {exc}") from None
    return values


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def positive_int(value: Any) -> int:
    """An integer above 0 (not a bool)."""
    if _int(value) <= 0:
        raise ValueError(f"expected an integer above 0, got {value!r}")
    return int(value)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def _optional(parse: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else parse(value)


def str_list(value: Any) -> list[str]:
    """A JSON list of strings."""
    if not isinstance(value, list):
        raise TypeError(f"expected a list of strings, got {value!r}")
    return [_str(v) for v in value]


def _endpoints(value: Any) -> list[Endpoint]:
    texts = str_list(value)
    if not texts:
        raise ValueError("expected at least one endpoint")
    # each as to_dict wrote it, with its direction ('@' binds, '>' connects)
    return [endpoint for text in texts for endpoint in parse_endpoints(text, default_bind=True)]


def _heartbeat(value: Any) -> Heartbeat:
    if not isinstance(value, dict) or set(value) != {"interval", "timeout", "ttl"}:
        raise TypeError(f"expected {{'interval', 'timeout', 'ttl'}} in seconds, got {value!r}")
    seconds = {}
    for key, item in value.items():
        if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item):
            raise TypeError(f"{key}: expected seconds, got {item!r}")
        seconds[key] = float(item)
    return Heartbeat(**seconds)


def _key(value: Any) -> bytes:
    return _str(value).encode("ascii")


def _curve(value: Any) -> Curve:
    if not isinstance(value, dict) or set(value) != {"public_key", "secret_key", "server_key", "authorized"}:
        raise TypeError("expected {'public_key', 'secret_key', 'server_key', 'authorized'}")
    authorized = value["authorized"]
    if isinstance(authorized, list):
        authorized = frozenset(_key(k) for k in authorized)
    elif authorized is not None and not isinstance(authorized, str):
        raise TypeError(f"authorized: expected '*' or a list of keys, got {authorized!r}")
    return Curve(_key(value["public_key"]), _key(value["secret_key"]), _optional(_key)(value["server_key"]), authorized)


def _tuning(value: Any) -> SocketTuning:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object of socket options, got {value!r}")
    known = {f.name for f in dataclasses.fields(SocketTuning)}
    for key, item in value.items():
        if key not in known:
            raise ValueError(f"unknown socket option {key!r}")
        if item is not None and not isinstance(item, (int, bool)):
            raise TypeError(f"{key}: expected an integer, true or false, got {item!r}")
    return SocketTuning(**value)


def _port_range(value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise TypeError(f"expected [first, last], got {value!r}")
    return _int(value[0]), _int(value[1])


_FIELDS: dict[str, Callable[[Any], Any]] = {
    "pattern": _str,
    "endpoints": _endpoints,
    "format": _str,
    "spool_dir": _str,
    "max_spool_bytes": positive_int,
    "spool_fsync": _bool,
    "hwm": _int,
    "topics": str_list,
    "max_message_bytes": _int,
    "receive_buffer_bytes": _optional(_int),
    "heartbeat": _heartbeat,
    "curve": _optional(_curve),
    "tuning": _optional(_tuning),
    "spool_server_host": _optional(_str),
    "spool_server_port": _optional(_port_range),
}
assert set(_FIELDS) == {f.name for f in dataclasses.fields(IngestConfig)}, "a field without a parser"
