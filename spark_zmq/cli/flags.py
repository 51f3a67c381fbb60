"""What the subcommands share of their flags: the choices (patterns, formats), the
``--curve-*`` and ``--heartbeat-*`` flags and the endpoint checks (a flag that stands for
an option is made by ``source_flags.option_flag``).

Why together: a flag means the same in every subcommand and is checked by the same rules
as the data source option it stands for (``curve_from_flags`` runs the options' CURVE
checks), so a bad value is the same usage error (exit code 2) wherever it is given.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import typer

from ..options import OptionError, check_curve, curve_of
from ..patterns import DEFAULT_HEARTBEAT, Heartbeat, parse_endpoints
from ..patterns.curve import Curve
from ..patterns.curve_keys import CurveError, KeyPair, load_authorized_keys, load_public_key
from ..patterns.heartbeat import MAX_TTL_S
from .source_flags import documented_default, flag_name, option_flag, option_spec

__all__ = [
    "ProducePattern",
    "ConsumePattern",
    "Format",
    "CURVE_FLAGS",
    "CURVE_PANEL",
    "HEARTBEAT_PANEL",
    "heartbeat_from_flags",
    "heartbeat_flag",
    "heartbeat_interval_option",
    "heartbeat_timeout_option",
    "heartbeat_ttl_option",
    "source_default",
    "source_default_int",
    "curve_from_flags",
    "checked_curve_flags",
    "check_endpoints",
    "broker_curves",
    "reader_curve",
    "off_loopback",
]


class ProducePattern(str, enum.Enum):
    push = "push"
    scatter = "scatter"
    pub = "pub"


class ConsumePattern(str, enum.Enum):
    pull = "pull"
    gather = "gather"
    sub = "sub"


class Format(str, enum.Enum):
    raw = "raw"
    text = "text"
    json = "json"
    arrow = "arrow"


_CURVE_OPTIONS = ("curveCertificate", "curveServerKey", "curveAuthorizedKeys")
#: the CLI flags of the data source options curveCertificate, curveServerKey, curveAuthorizedKeys
CURVE_FLAGS = tuple(flag_name(option) for option in _CURVE_OPTIONS)
_T = TypeVar("_T")
#: the --help panels the CURVE and heartbeat flags are listed under
CURVE_PANEL = "CURVE security (see 'spark-zmq keygen')"
HEARTBEAT_PANEL = "Liveness (ZMTP heartbeats)"


def heartbeat_from_flags(interval: float, timeout: float, ttl: float) -> Heartbeat:
    """The --heartbeat-* flags as a ``Heartbeat`` (a bad value names its flag)."""
    for flag, value in (("--heartbeat-interval", interval), ("--heartbeat-timeout", timeout), ("--heartbeat-ttl", ttl)):
        try:
            Heartbeat(**{**DEFAULT_HEARTBEAT.__dict__, flag[len("--heartbeat-") :]: value})
        except ValueError as exc:
            raise typer.BadParameter(str(exc).replace("heartbeat ", ""), param_hint=f"'{flag}'") from None
    return Heartbeat(interval, timeout, ttl)


def heartbeat_interval_option(side: str) -> float:
    """The ``--heartbeat-interval`` flag of a subcommand whose sockets take the ``side``
    table's heartbeat defaults (see ``heartbeat_flag``)."""
    return heartbeat_flag(
        "heartbeatInterval", side, "Seconds between PINGs on every connection; 0 switches heartbeats off."
    )


def heartbeat_timeout_option(side: str) -> float:
    """The ``--heartbeat-timeout`` flag of a subcommand (see ``heartbeat_interval_option``)."""
    return heartbeat_flag(
        "heartbeatTimeout", side, "Seconds a peer may stay silent after a PING before its connection counts as broken."
    )


def heartbeat_ttl_option(side: str) -> float:
    """The ``--heartbeat-ttl`` flag of a subcommand (see ``heartbeat_interval_option``)."""
    return heartbeat_flag("heartbeatTtl", side, f"The TTL our PINGs ask of the peer (0: none), at most {MAX_TTL_S:g}.")


def heartbeat_flag(option: str, side: str, help: str) -> float:
    """A heartbeat flag whose value the command uses itself (``heartbeat_from_flags``), so
    its default is the table's value, not ``None``.

    Why a side: the sink's and ``request``'s rows document the package's sockets' own
    defaults (``DEFAULT_HEARTBEAT``), which ``produce``, ``consume`` and ``broker`` use; the
    source's are the spooling receiver's, longer, and only the relay's flags take them."""
    return option_flag(option, side=side, table_default=True, panel=HEARTBEAT_PANEL, help=help)


def curve_from_flags(
    certificate: str | None, server_key: str | None, authorized_keys: str | None, flags: Sequence[str] = CURVE_FLAGS
) -> Curve | None:
    """The ``Curve`` that the three CURVE flags describe (``None`` without any), or
    ``CurveError`` whose message and ``option`` name the flag at fault.

    Why here and not per caller: the CLI and the example jobs take the data source's CURVE
    options as flags; they share the data source's rules (``options.check_curve``, run
    first, so a wrong combination is reported before any file is read) with the option
    names turned into ``flags`` (e.g. the ``--sink-curve-*`` flags of a job)."""
    names = dict(zip(_CURVE_OPTIONS, flags))
    given = [
        None if v is None or not v.strip() else os.path.expanduser(v.strip())
        for v in (certificate, server_key, authorized_keys)
    ]
    try:
        check_curve(dict(zip(("curve_certificate", "curve_server_key", "curve_authorized_keys"), given)))
    except OptionError as exc:
        text = str(exc)
        for option, flag in names.items():
            text = text.replace(f"option '{option}'", flag).replace(f"options '{option}'", flag)
            text = text.replace(f"'{option}'", flag)
        raise CurveError(text, names.get(exc.option or "", exc.option)) from None
    cert_path, key_text, authorized_text = given
    if cert_path is None:
        return None
    return curve_of(
        _loaded(KeyPair.from_certificate, cert_path, flags[0]),
        _loaded(load_public_key, key_text, flags[1]),
        _loaded(load_authorized_keys, authorized_text, flags[2]),
    )


def _loaded(load: Callable[[str, str], _T], value: str | None, flag: str) -> _T | None:
    """``load(value, flag)`` (``None`` for no value), its error naming the flag."""
    if value is None:
        return None
    try:
        return load(value, flag)
    except CurveError as exc:
        raise CurveError(f"{flag}: {exc}", flag) from None


def checked_curve_flags(certificate: str | None, server_key: str | None, authorized_keys: str | None) -> Curve | None:
    """``curve_from_flags`` for a command: a bad value is a usage error (exit 2)."""
    try:
        return curve_from_flags(certificate, server_key, authorized_keys)
    except CurveError as exc:
        raise typer.BadParameter(str(exc)) from None


def _server_curve(certificate: str | None, authorized_keys: str | None, flag: str) -> Curve | None:
    """A CURVE server for one kind of peer: ``--curve-certificate`` and that kind's keys
    (``flag`` names them in errors)."""
    try:
        return curve_from_flags(
            certificate, None, authorized_keys, flags=("--curve-certificate", "--curve-server-key", flag)
        )
    except CurveError as exc:
        raise typer.BadParameter(str(exc)) from None


def broker_curves(
    certificate: str | None, frontend_keys: str | None, backend_keys: str | None, legacy_keys: str | None
) -> tuple[Curve | None, Curve | None]:
    """The broker's frontend and backend CURVE servers, each with its own authorized keys.

    Why two sets and no fallback: a worker is given other clients' requests and its replies
    are trusted; a client key that is also accepted on the backend lets any client read and
    answer everyone's requests. ``--curve-authorized-keys`` (the older single flag) names the
    frontend's keys only, and the backend then needs its own flag."""
    if frontend_keys and legacy_keys:
        raise typer.BadParameter(
            "--curve-authorized-keys is the older name of --frontend-authorized-keys: give one of them",
            param_hint="'--curve-authorized-keys'",
        )
    front_flag = "--curve-authorized-keys" if legacy_keys else "--frontend-authorized-keys"
    front_keys = frontend_keys or legacy_keys
    if certificate and not front_keys:
        raise typer.BadParameter(
            "the broker is a CURVE server on both sides, which needs --frontend-authorized-keys "
            "(a directory of the clients' public certificate files ('*.key', or CZMQ's certificate store), or '*' to accept "
            "any key) and --backend-authorized-keys (the workers')",
            param_hint="'--curve-certificate'",
        )
    if certificate and not backend_keys:
        raise typer.BadParameter(
            f"the backend (workers) needs keys of its own: --backend-authorized-keys DIR|* (the "
            f"workers' public certificate files); {front_flag} names only the clients' keys, "
            "which are never accepted as workers",
            param_hint="'--backend-authorized-keys'",
        )
    return (
        _server_curve(certificate, front_keys, front_flag),
        _server_curve(certificate, backend_keys, "--backend-authorized-keys"),
    )


def reader_curve(certificate: str | None, reader_keys: str | None, producers_authorized: bool) -> Curve | None:
    """The CURVE server of a relay's ``--listen`` socket (queries), with the readers' own keys.

    Why not the producers' keys: a producer only sends; a reader's key can read and free
    the spool. ``--curve-authorized-keys`` names the producers' keys only
    (``producers_authorized``: it was given), and ``--listen`` then needs
    ``--reader-authorized-keys``."""
    if reader_keys is None and producers_authorized:
        raise typer.BadParameter(
            "--curve-authorized-keys names the producers' keys (the receiving endpoints); the "
            "--listen port, which queries read, needs keys of its own: --reader-authorized-keys "
            "DIR|* (the queries' public certificate files)",
            param_hint="'--reader-authorized-keys'",
        )
    if reader_keys is None and certificate:
        raise typer.BadParameter(
            "--curve-certificate is given but --listen, which queries read (and which tells "
            "where the spool is), would serve without CURVE: give --reader-authorized-keys "
            "DIR|* (the queries' public certificate files, or '*' for any key)",
            param_hint="'--reader-authorized-keys'",
        )
    if reader_keys is not None and not certificate:
        raise typer.BadParameter(
            "--reader-authorized-keys needs --curve-certificate (the relay's secret certificate)",
            param_hint="'--reader-authorized-keys'",
        )
    return _server_curve(certificate, reader_keys, "--reader-authorized-keys") if reader_keys is not None else None


def off_loopback(address: str) -> bool:
    """Whether ``address`` (``tcp://host:port``, ``ipc://``, ...) may be reached from other
    hosts: a TCP address that is not a loopback one. Such a service without CURVE is open to
    whoever reaches the network, so the servers say so (or refuse)."""
    if not address.startswith("tcp://"):
        return False
    host = address[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    if ";" in host:  # 'source;destination': the destination is what is reached
        host = host.rsplit(";", 1)[1]
    return not (host.startswith("127.") or host in ("localhost", "::1", "lo"))


def check_endpoints(endpoints: str, default_bind: bool) -> None:
    """A bad ``ENDPOINTS`` argument is a usage error (exit 2), before any socket is opened."""
    try:
        parse_endpoints(endpoints, default_bind=default_bind)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'ENDPOINTS'") from None


def source_default(name: str) -> str:
    """How the options table shows source option ``name``'s default (``64 MiB``), for a
    flag's help: the defaults live in the table alone, never copied into the CLI."""
    return documented_default("source", name)


def source_default_int(name: str) -> int:
    """Source option ``name``'s parsed default, an integer, for a flag whose default is the option's."""
    value = option_spec("source", name).default
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"source option {name!r} has no integer default: {value!r}")
    return value
