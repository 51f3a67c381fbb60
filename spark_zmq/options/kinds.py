"""Parsing one option value by its kind: integers, byte sizes, seconds, durations, booleans,
choices, strings, lists, hosts, paths, CURVE keys, relay addresses and endpoints.

Why one parser per kind: every value is checked the same way wherever its option is
declared, and every refusal is an ``OptionError`` naming the option, the value (shortened
by ``quote``) and what is valid.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from ..patterns.curve_keys import CurveError, KeyPair, load_authorized_keys, load_public_key
from ..patterns.endpoints import Endpoint, parse_endpoints, tcp_host_problem
from ..patterns.tuning import SocketTuning
from .spec import INT32_MAX, GiB, KiB, MiB, OptionError, OptionSpec, TiB, quote, show, show_bytes

__all__ = [
    "PARSERS",
    "parse_endpoints_value",
    "parse_zmq_options",
    "READER_NAME_VALID",
    "reader_name_problem",
    "is_wildcard_address",
]

_T = TypeVar("_T")

#: what a duration's unit multiplies (``500ms``, ``5s``, ``1min``, ``1h``; none: seconds)
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(
    r"([+-]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?)\s*([a-z]*)", re.ASCII | re.IGNORECASE
)
_UNITS = {"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB}
_INTEGER = re.compile(r"[+-]?[0-9][0-9_]*", re.ASCII)
_BYTES = re.compile(r"([+-]?[0-9][0-9_]*)\s*([KMGT]iB)?", re.ASCII | re.IGNORECASE)
_DECIMAL = re.compile(r"[+-]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9]+)?", re.ASCII)
# More digits than this cannot be within any range declared here, and converting them is
# slow (Python refuses beyond 4300 digits with a ValueError of its own).
_MAX_DIGITS = 40


def _range_error(spec: OptionSpec, raw: str) -> OptionError:
    what = {"int": "an integer", "bytes": "a number of bytes", "seconds": "a finite number of seconds"}[spec.kind]
    if spec.kind == "seconds":
        bounds = f"{'>=' if spec.allow_zero else '>'} {show(spec.minimum)} and <= {show(spec.maximum)}"
    elif spec.kind == "bytes":
        bounds = f"from {show_bytes(spec.minimum)} to {show_bytes(spec.maximum)}"
    else:
        bounds = f"from {show(spec.minimum)} to {show(spec.maximum)}"
    note = f" ({spec.range_note})" if spec.range_note else ""
    return OptionError(
        f"option {spec.name!r} = {quote(raw)} is out of range; expected {what} {bounds}{note}", spec.name
    )


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
            f"option {spec.name!r} = {quote(raw)} is not an integer; expected an integer from "
            f"{show(spec.minimum)} to {show(spec.maximum)} (digits, '_' allowed between them)",
            spec.name,
        )
    return _check_int_range(spec, raw, _digits_to_int(spec, raw, text))


def _parse_bytes(spec: OptionSpec, raw: str) -> int:
    match = _BYTES.fullmatch(raw.strip())
    if match is None:
        raise OptionError(
            f"option {spec.name!r} = {quote(raw)} is not a number of bytes; expected an integer from "
            f"{show_bytes(spec.minimum)} to {show_bytes(spec.maximum)}, optionally with a suffix "
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
            f"option {spec.name!r} = {quote(raw)} is not a number; expected seconds, a finite number "
            f"{'>=' if spec.allow_zero else '>'} {show(spec.minimum)} and <= {show(spec.maximum)} (e.g. '5' or '0.5')",
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
            f"option {spec.name!r} = {quote(raw)} is not a duration; expected seconds as a number, or a number with "
            f"a unit (ms, s, min, h), e.g. '5', '500ms', '5s', '1min'",
            spec.name,
        )
    seconds = float(match.group(1).replace("_", "")) * _DURATION_UNITS.get(unit, 1.0)
    if (
        not math.isfinite(seconds)
        or seconds <= (spec.minimum or 0.0)
        or (spec.maximum is not None and seconds > spec.maximum)
    ):
        raise OptionError(
            f"option {spec.name!r} = {quote(raw)} is out of range; expected more than 0 and at most "
            f"{show(spec.maximum)} seconds",
            spec.name,
        )
    return seconds


def _parse_bool(spec: OptionSpec, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise OptionError(f"option {spec.name!r} = {quote(raw)} is not a boolean; expected true or false", spec.name)


def _parse_choice(spec: OptionSpec, raw: str) -> str:
    value = raw.strip()
    if value.isascii():
        for choice in spec.choices:
            if value.lower() == choice.lower():
                return choice
    raise OptionError(
        f"option {spec.name!r} = {quote(raw)} is not valid; valid values: {', '.join(spec.choices)}", spec.name
    )


def _utf8(spec: OptionSpec, raw: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(f"option {spec.name!r} = {quote(raw)} is not valid UTF-8 text", spec.name) from None
    return value


def _parse_string(spec: OptionSpec, raw: str) -> str | None:
    if spec.attr == "topic":  # a topic is sent as given: '' is the empty topic frame
        return _utf8(spec, raw, raw)
    return _utf8(spec, raw, raw) if raw else None


def _parse_list(spec: OptionSpec, raw: str) -> list[str]:
    return [_utf8(spec, raw, t) for t in (part.strip() for part in raw.split(",")) if t]


def is_wildcard_address(host: str) -> bool:
    """Whether ``host`` (an address, bracketed or not) is a wildcard: ``*``, or an address
    that means "every interface" once parsed, whatever its spelling. Read as the resolver
    reads it, not as text: ``0``, ``0x0``, ``00.0.0.0`` and ``0.0`` are 0.0.0.0 to
    ``inet_aton`` (and so to ``getaddrinfo``), and ``::ffff:0.0.0.0`` binds 0.0.0.0 too.
    A host name is not resolved here: the fetch service checks the address it resolves to."""
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "*":
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        try:  # the legacy IPv4 forms the C resolver accepts: 0, 0x0, 0.0, 00.0.0.0
            packed = socket.inet_aton(name)
        except (OSError, UnicodeError, ValueError):
            return False
        return packed == bytes(4)
    if address.is_unspecified:
        return True
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped is not None and mapped.is_unspecified


def _parse_host(spec: OptionSpec, raw: str) -> str | None:
    host = raw.strip()
    if not host:
        return None
    if is_wildcard_address(host):
        problem: str | None = (
            "a wildcard address would accept fetch requests on every interface; name the driver's address"
        )
    else:
        problem = tcp_host_problem(host)
    if problem:
        raise OptionError(f"option {spec.name!r} = {quote(raw)} is not valid: {problem}", spec.name)
    return host


def _refuse_unencodable(spec: OptionSpec, raw: str, text: str, what: str) -> None:
    """An ``OptionError`` for text no file name (and no key) can hold: a lone surrogate,
    which ``os.stat`` and ``open`` would answer with ``UnicodeEncodeError``."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise OptionError(f"option {spec.name!r} = {quote(raw)} cannot be encoded as {what}", spec.name) from None


def _parse_path(spec: OptionSpec, raw: str) -> str:
    text = raw.strip()
    if "\x00" in text:
        raise OptionError(
            f"option {spec.name!r} = {quote(raw)} contains a NUL character; give an absolute path", spec.name
        )
    _refuse_unencodable(spec, raw, text, "a file name")
    path = os.path.expanduser(text)
    if not os.path.isabs(path):
        raise OptionError(
            f"option {spec.name!r} = {quote(raw)} is a relative path; give an absolute path (Spark runs the "
            "connector's processes in other working directories, and a restarted query must find the same "
            "directory)",
            spec.name,
        )
    return os.path.normpath(path)


def _curve_value(spec: OptionSpec, raw: str, load: Callable[[str, str], _T]) -> _T:
    text = raw.strip()
    if "\x00" in text:
        raise OptionError(f"option {spec.name!r} = {quote(raw)} contains a NUL character", spec.name)
    _refuse_unencodable(spec, raw, text, "a file name or a key")
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


_PORTS = re.compile(r"\s*([0-9]{1,5})\s*(?:-\s*([0-9]{1,5})\s*)?", re.ASCII)


def _parse_ports(spec: OptionSpec, raw: str) -> tuple[int, int]:
    """A TCP port (``7100``) or an inclusive range (``7100-7107``), as ``(first, last)``."""
    match = _PORTS.fullmatch(raw)
    first = int(match.group(1)) if match else 0
    last = int(match.group(2)) if match and match.group(2) else first
    if not match or not 1 <= first <= last <= 65535:
        raise OptionError(
            f"option {spec.name!r} = {quote(raw)} is not a port or a port range; expected a TCP "
            "port from 1 to 65535 (e.g. '7100') or an inclusive range (e.g. '7100-7107')",
            spec.name,
        )
    return first, last


def parse_zmq_options(spec: OptionSpec, opts: dict[str, str | None]) -> SocketTuning | None:
    """The ``zmq.<name>`` options among ``opts`` (lower-cased keys, as Spark passes them), as one
    ``SocketTuning``; ``None`` when there are none. An unknown name or a value of the wrong
    kind is an ``OptionError`` naming it and what is valid."""
    from .table import ZMQ_SOCKET_OPTIONS

    known = {name.lower(): name for name in ZMQ_SOCKET_OPTIONS}
    values: dict[str, Any] = {}
    for key in sorted(k for k in opts if k.startswith("zmq.")):
        raw = opts[key]
        name = known.get(key)
        if name is None:
            raise OptionError(
                f"unknown {spec.side} option {quote(key)}: the socket options are {', '.join(ZMQ_SOCKET_OPTIONS)}", key
            )
        if raw is None or not raw.strip():
            continue
        field_name, kind, _ = ZMQ_SOCKET_OPTIONS[name]
        values[field_name] = _zmq_value(name, kind, raw)
    return SocketTuning(**values) if values else None


def _zmq_value(name: str, kind: str, raw: str) -> Any:
    """One ``zmq.<name>`` value in libzmq's unit, within ``ZMQ_OPTION_RANGES``: a value libzmq
    takes but the kernel refuses (a keepalive idle time past 32767 s) would let the query
    start and receive nothing, so it is refused here, naming the option and the range."""
    from .table import ZMQ_OPTION_RANGES

    text = raw.strip()
    if kind == "bool":
        return _parse_bool(OptionSpec(name=name, side="", kind="bool", attr="", doc=""), raw)
    least, most, why = ZMQ_OPTION_RANGES[name]
    because = f" ({why})" if why else ""
    if kind == "int":
        if not _INTEGER.fullmatch(text) or len(text) > 12 or not least <= int(text.replace("_", "")) <= most:
            raise OptionError(
                f"option {name!r} = {quote(raw)} is not valid; expected an integer from {least} to "
                f"{_limit(most)}{because}",
                name,
            )
        return int(text.replace("_", ""))
    unit = "milliseconds" if kind == "ms" else "seconds"
    match = _DURATION.fullmatch(text)
    suffix = match.group(2).lower() if match else ""
    if match is None or suffix not in ("", *_DURATION_UNITS):
        raise OptionError(
            f"option {name!r} = {quote(raw)} is not a duration; expected a number of {unit} (as "
            f"libzmq takes it) or a number with a unit (ms, s, min, h), e.g. "
            f"{'250ms' if kind == 'ms' else '30s'!r}",
            name,
        )
    number = float(match.group(1).replace("_", ""))
    ms = number * (_DURATION_UNITS[suffix] * 1000 if suffix else (1 if kind == "ms" else 1000))
    value = ms if kind == "ms" else ms / 1000
    if not math.isfinite(value) or value != int(value) or not least <= value <= most:
        raise OptionError(
            f"option {name!r} = {quote(raw)} is out of range; expected whole {unit}, from {least} to "
            f"{_limit(most)}{because}",
            name,
        )
    return int(value)


def _limit(most: int) -> str:
    return "2^31-1" if most == INT32_MAX else str(most)


#: the parser of each kind but ``endpoints`` (``parse_endpoints_value``: it reads other options)
PARSERS: dict[str, Callable[[OptionSpec, str], Any]] = {
    "int": _parse_int,
    "bytes": _parse_bytes,
    "seconds": _parse_seconds,
    "duration": _parse_duration,
    "bool": _parse_bool,
    "choice": _parse_choice,
    "string": _parse_string,
    "list": _parse_list,
    "host": _parse_host,
    "ports": _parse_ports,
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
                "its relays)",
                spec.name,
            )
        if endpoint.address in addresses:
            raise OptionError(f"option {spec.name!r}: relay {endpoint.address!r} is given twice", spec.name)
        addresses.append(endpoint.address)
    return addresses


PARSERS["relays"] = _parse_relays

#: a relay reader's name (option ``relayReader``; the relay checks the same rule)
_READER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
READER_NAME_VALID = "1 to 64 characters: letters, digits, '.', '_' and '-', starting with a letter or digit"


def reader_name_problem(name: object) -> str | None:
    """Why ``name`` is not a relay reader's name, or ``None`` when it is one."""
    if isinstance(name, str) and _READER_NAME.fullmatch(name):
        return None
    return (
        f"{quote(str(name)) if isinstance(name, str) else type(name).__name__} is not a reader name; expected "
        f"{READER_NAME_VALID} (e.g. 'dashboard')"
    )


def _parse_reader_name(spec: OptionSpec, raw: str) -> str:
    problem = reader_name_problem(raw.strip())
    if problem is not None:
        raise OptionError(f"option {spec.name!r} = {problem}", spec.name)
    return raw.strip()


PARSERS["name"] = _parse_reader_name


def parse_endpoints_value(
    spec: OptionSpec, raw: str | None, parsed: dict[str, Any], relays_raw: str | None = None
) -> list[Endpoint]:
    """The ``endpoints`` option (``raw``, ``None`` when unset), checked against ``relays``
    and, for the default bind or connect, the ``pattern`` already in ``parsed``."""
    if spec.side == "source" and relays_raw is not None and relays_raw.strip():
        if raw is not None and raw.strip():
            raise OptionError(
                "options 'endpoints' and 'relays' exclude each other: a query either receives on its own "
                "endpoints or reads relays that receive for it",
                "relays",
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
