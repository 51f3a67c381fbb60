"""The arguments every pattern socket takes: option names, option values, timeouts.

Each is checked before any socket exists, with an error naming the option (or argument)
and what is valid; ``set_common_options`` then gives libzmq the options it implements.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

import zmq

from .curve import Curve
from .endpoints import Endpoint, EndpointsSpec, parse_endpoints
from .heartbeat import Heartbeat, heartbeat_option

if TYPE_CHECKING:
    from .tuning import SocketTuning

__all__ = [
    "COMMON_OPTIONS",
    "SocketOptions",
    "HwmSocketOptions",
    "CommonOptions",
    "check_common",
    "check_option_names",
    "positive_int",
    "check_linger",
    "timeout_deadline",
    "set_common_options",
    "apply_tuning",
]

#: the options every pattern class takes (``hwm`` is an argument of its own)
COMMON_OPTIONS: tuple[str, ...] = (
    "linger",
    "reconnect_ivl",
    "max_message_bytes",
    "immediate",
    "rcvbuf",
    "sndbuf",
    "context",
    "monitor",
    "curve",
    "heartbeat",
    "tuning",
)


class SocketOptions(TypedDict, total=False):
    """The keyword options of the pattern sockets (``Cls(endpoints, *, hwm=None, **options)``),
    for the type checker: a misspelt name is an error before the code runs. Every class takes
    ``COMMON_OPTIONS``; the others only the classes named (at run time any other class refuses
    them with a ``TypeError`` naming its valid options)."""

    #: ZMQ_LINGER in ms: -1 waits forever, 0 discards at once (default 0 for receivers, 1000 for senders)
    linger: int
    #: ZMQ_RECONNECT_IVL in ms
    reconnect_ivl: int | None
    #: ZMQ_MAXMSGSIZE: a peer sending more is disconnected; ``send`` refuses it with ``ValueError``
    max_message_bytes: int | None
    #: ZMQ_IMMEDIATE: queue only to completed connections
    immediate: bool
    #: kernel receive buffer, bytes
    rcvbuf: int | None
    #: kernel send buffer, bytes
    sndbuf: int | None
    #: the ``zmq.Context`` (default: the process-wide ``zmq.Context.instance()``)
    context: zmq.Context[Any] | None
    #: ZMQ_EVENT_* bits to watch (``handshakes.poll()`` returns them)
    monitor: int | None
    #: CURVE encryption, as a client or as a ZAP-authenticating server
    curve: Curve | None
    #: liveness of every connection (``None``: the default ``Heartbeat``)
    heartbeat: Heartbeat | None
    #: the user's libzmq socket options, applied last
    tuning: SocketTuning | None
    #: ``Sub``, ``XSub``: the subscribed prefixes (``None``: everything)
    topics: str | bytes | Iterable[str | bytes] | None
    #: ``XPub``: ZMQ_XPUB_VERBOSE, every subscription passed up
    verbose: bool
    #: ``XPub``: ZMQ_XPUB_NODROP, block (time out) instead of dropping at the high-water mark
    nodrop: bool
    #: ``Router``: ZMQ_ROUTER_MANDATORY, a reply to an unknown peer is an error
    mandatory: bool
    #: ``Router``: ZMQ_MAXMSGSIZE of the requests it accepts
    max_request_bytes: int | None
    #: the engine's wire (``ZmtpPull``, ``ReroutingPush``, ``Scatter``, ``Gather``): handshake timeout in ms
    handshake_ivl: int
    #: the engine's wire: a ``close`` that counts what no peer's TCP acknowledged (``EngineWire``)
    confirm: bool
    #: the broker's sockets: ZMQ_RCVHWM
    rcvhwm: int | None
    #: the broker's sockets: ZMQ_SNDHWM
    sndhwm: int | None


class HwmSocketOptions(SocketOptions, total=False):
    """``SocketOptions`` and ``hwm``: what a function that makes a socket passes on (``wires``,
    the request-reply ``Client``)."""

    #: ZMQ_SNDHWM and ZMQ_RCVHWM, messages (0: no limit)
    hwm: int | None


class CommonOptions(NamedTuple):
    """What every pattern class takes, checked (``check_common``)."""

    endpoints: list[Endpoint]
    hwm: int | None
    max_message_bytes: int | None
    heartbeat: Heartbeat
    curve: Curve | None


def check_common(
    owner: str,
    endpoints: EndpointsSpec,
    hwm: int | None,
    options: dict[str, Any],
    default_bind: bool,
    extra_options: Iterable[str] = (),
) -> CommonOptions:
    """Validate what every pattern class takes (option names, endpoints, ``hwm``,
    ``max_message_bytes``, ``heartbeat``, ``curve``) for the socket class ``owner``, which
    also takes ``extra_options``."""
    check_option_names(owner, options, COMMON_OPTIONS + tuple(extra_options))
    parsed = parse_endpoints(endpoints, default_bind=default_bind)
    max_message_bytes = positive_int("max_message_bytes", options.get("max_message_bytes"), allow_none=True)
    hwm = positive_int("hwm", hwm, allow_none=True, allow_zero=True)
    heartbeat = heartbeat_option(options.get("heartbeat"))
    curve: Curve | None = options.get("curve")
    if curve is not None and not isinstance(curve, Curve):
        raise TypeError(f"option 'curve' must be a spark_zmq.patterns.curve.Curve, not {type(curve).__name__}")
    return CommonOptions(parsed, hwm, max_message_bytes, heartbeat, curve)


def check_option_names(owner: str, options: Iterable[str], valid: tuple[str, ...]) -> None:
    """A ``TypeError`` naming the socket class ``owner`` if ``options`` holds a name not in ``valid``."""
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TypeError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for {owner}; "
            f"valid options: {', '.join(('hwm',) + valid)}"
        )


def positive_int(name: str, value: Any, *, allow_none: bool = False, allow_zero: bool = False) -> Any:
    """``value`` checked as an integer option ``name`` (> 0, or >= 0 with ``allow_zero``;
    ``None`` allowed with ``allow_none``), else a ``ValueError`` naming it."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        bound = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"option {name!r} must be {bound} integer, got {value!r}")
    return value


def check_linger(value: Any) -> int:
    """ZMQ_LINGER: ``-1`` (wait forever), ``0`` (discard at once) or milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise ValueError(
            f"option 'linger' must be an integer number of milliseconds >= 0, or -1 to wait forever, got {value!r}"
        )
    return value


def timeout_deadline(timeout: float | None) -> float | None:
    """The ``time.monotonic()`` deadline of a call's ``timeout`` (seconds; ``None`` = none)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    if timeout < 0:
        raise ValueError(f"timeout must be None or >= 0 seconds, got {timeout!r}")
    return time.monotonic() + timeout


def set_common_options(
    sock: zmq.Socket[Any],
    options: dict[str, Any],
    hwm: int | None,
    max_message_bytes: int | None,
    default_linger_ms: int,
) -> None:
    """Give ``sock`` (before bind/connect) the libzmq options of ``COMMON_OPTIONS``: linger,
    high-water marks, reconnect interval, message size limit, immediate, kernel buffers."""
    sock.setsockopt(zmq.LINGER, check_linger(options.get("linger", default_linger_ms)))
    if hwm is not None:
        sock.setsockopt(zmq.SNDHWM, hwm)
        sock.setsockopt(zmq.RCVHWM, hwm)
    if options.get("reconnect_ivl") is not None:
        sock.setsockopt(zmq.RECONNECT_IVL, positive_int("reconnect_ivl", options["reconnect_ivl"]))
    if max_message_bytes is not None:
        sock.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
    if options.get("immediate"):
        sock.setsockopt(zmq.IMMEDIATE, 1)
    for name, opt in (("rcvbuf", zmq.RCVBUF), ("sndbuf", zmq.SNDBUF)):
        if options.get(name) is not None:
            sock.setsockopt(opt, positive_int(name, options[name]))


def apply_tuning(sock: zmq.Socket[Any], options: dict[str, Any]) -> None:
    """The user's socket options (``tuning``, a ``SocketTuning``), last, so they win."""
    tuning = options.get("tuning")
    if tuning is not None:
        tuning.apply(sock)
