"""What the three options tables share: the values their rows name (patterns, formats,
modes, limits), the rows every side has alike (CURVE, heartbeats, ``zmq.<name>``) and the
``zmq.<name>`` socket options with their ranges.

Why its own module: the source, sink and request tables are each a module of their own and
are all made from these pieces, declared once here so the sides cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable

from ..patterns.heartbeat import DEFAULT_HEARTBEAT, MAX_HEARTBEAT_S, MAX_TTL_S, RECEIVER_HEARTBEAT
from ..patterns.wires import RECEIVING_PATTERNS, SENDING_PATTERNS
from .spec import INT32_MAX, OptionSpec

__all__ = [
    "SOURCE_PATTERNS",
    "SINK_PATTERNS",
    "FORMATS",
    "MODES",
    "MAX_SECONDS",
    "MAX_REQUEST_ROWS",
    "ENDPOINTS_VALID",
    "curve_specs",
    "heartbeat_specs",
    "ZMQ_SOCKET_OPTIONS",
    "MAX_TCP_KEEPALIVE_S",
    "MAX_TCP_KEEPALIVE_COUNT",
    "ZMQ_OPTION_RANGES",
    "zmq_spec",
]

#: the patterns the options accept are those the wires serve, declared once there
SOURCE_PATTERNS = RECEIVING_PATTERNS
SINK_PATTERNS = SENDING_PATTERNS
FORMATS = ("raw", "text", "json", "arrow")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

#: the longest wait an option may ask for; longer waits are mistakes (ms given as s)
MAX_SECONDS = 86_400.0
#: rows one Arrow request may carry (what a reply may hold, too: the guard's limit per message)
MAX_REQUEST_ROWS = 10_000_000

ENDPOINTS_VALID = "comma-separated ZeroMQ endpoints (`tcp://`, `ipc://`, `inproc://`); `@` binds, `>` connects"


def curve_specs(make: Callable[..., OptionSpec]) -> tuple[OptionSpec, ...]:
    """The three CURVE options, the same on both sides (see docs/security.md)."""
    return (
        make(
            "curveCertificate",
            "certificate",
            "curve_certificate",
            "This side's secret certificate file "
            "(`NAME.key_secret`, as `spark-zmq keygen NAME`, pyzmq's `zmq.auth` or CZMQ's `zcert` write it). "
            "With `curveServerKey` this side's sockets are CURVE clients; without it they are CURVE servers.",
            default_doc="off (no encryption)",
            valid_doc="path of a secret certificate file",
        ),
        make(
            "curveServerKey",
            "publickey",
            "curve_server_key",
            "The server's public key: its certificate file "
            "(`NAME.key`) or its 40-character Z85 text. Needs `curveCertificate`.",
            default_doc="none",
            valid_doc="certificate file or Z85 key",
        ),
        make(
            "curveAuthorizedKeys",
            "authorized",
            "curve_authorized_keys",
            "CURVE server: the client keys "
            "accepted, a directory of public certificate files (`*.key`, or CZMQ's certificate store: every file "
            "not ending `_secret`), or `*` for any client key "
            "(encryption without client authentication). Required with `curveCertificate` alone.",
            default_doc="none",
            valid_doc="directory or `*`",
        ),
    )


def heartbeat_specs(make: Callable[..., OptionSpec], side: str) -> tuple[OptionSpec, ...]:
    """The three heartbeat options, the same on both sides (see docs/liveness.md)."""
    who = {
        "source": "a producer (or, for `sub`, the publisher)",
        "sink": "a consumer",
        "request": "a worker (or broker)",
    }[side]
    consequence = {
        "source": "a connecting receiver reconnects",
        "sink": "what it had not acknowledged goes to the other consumers",
        "request": "its requests are resent to the others when their timeout comes",
    }[side]
    # receive-only sockets PING a silent producer only, without a TTL (docs/liveness.md)
    quiet = (
        (
            " `pull` and `gather` PING only a producer that has been silent this long while they read, "
            "and `pull` with CURVE or over `inproc://` sends none."
        )
        if side == "source"
        else ""
    )
    no_ttl = " `pull` and `gather` send no TTL." if side == "source" else ""
    # the source closes a silent producer late: closing destroys what the producer has in flight
    default = RECEIVER_HEARTBEAT if side == "source" else DEFAULT_HEARTBEAT
    blink = (
        (
            " Long by default: closing a producer's connection loses what it has in flight, so a network "
            "outage shorter than this costs nothing."
        )
        if side == "source"
        else ""
    )
    return (
        make(
            "heartbeatInterval",
            "seconds",
            "heartbeat_interval",
            "ZMTP 3.1 heartbeats (RFC 37): seconds "
            f"between the PINGs sent on every connection; `0` switches heartbeats and TCP keepalive off.{quiet}",
            default=default.interval,
            default_doc=f"{default.interval:g}",
            minimum=0.0,
            maximum=MAX_HEARTBEAT_S,
            allow_zero=True,
        ),
        make(
            "heartbeatTimeout",
            "seconds",
            "heartbeat_timeout",
            f"Seconds {who} may stay silent after a PING "
            f"before its connection counts as broken ({consequence}); also the kernel's limit "
            f"(`TCP_USER_TIMEOUT`, keepalive) for unacknowledged data.{blink}",
            default=default.timeout,
            default_doc=f"{default.timeout:g}",
            minimum=0.0,
            maximum=MAX_HEARTBEAT_S,
        ),
        make(
            "heartbeatTtl",
            "seconds",
            "heartbeat_ttl",
            "The TTL our PINGs carry: the peer may drop the "
            f"connection when it hears nothing from us for this long (`0`: no TTL).{no_ttl}",
            default=default.ttl,
            default_doc=f"{default.ttl:g}",
            minimum=0.0,
            maximum=MAX_TTL_S,
            allow_zero=True,
            range_note="16 bits of deciseconds on the wire",
        ),
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


def zmq_spec(make: Callable[..., OptionSpec]) -> OptionSpec:
    """The ``zmq.<name>`` row, the same on every side: one row for all the socket options."""
    names = ", ".join(f"`{name}` ({libzmq})" for name, (_, _, libzmq) in ZMQ_SOCKET_OPTIONS.items())
    return make(
        "zmq.<name>",
        "zmq",
        "tuning",
        "libzmq socket options, honoured on libzmq sockets and on the "
        "package's own ZMTP engine alike, set after the package's own settings: " + names + ". Intervals "
        "are durations (`250ms`, `1s`) or a number in libzmq's unit (milliseconds; seconds for the "
        "keepalive ones); `zmq.ipv6` and `zmq.immediate` are `true`/`false`; the rest integers. Valid: "
        "`zmq.reconnectInterval` and `zmq.handshakeInterval` from 1 ms, `zmq.reconnectIntervalMax` from "
        f"0; `zmq.tcpKeepaliveIdle` and `zmq.tcpKeepaliveInterval` 1 to {MAX_TCP_KEEPALIVE_S} s and "
        f"`zmq.tcpKeepaliveCount` 1 to {MAX_TCP_KEEPALIVE_COUNT} (the kernel's limits); the rest up to "
        "2^31-1. "
        "`zmq.ipv6` concerns libzmq sockets only: the engine resolves IPv4 and IPv6 alike.",
        default_doc="libzmq's (and the package's)",
        valid_doc="see the names in the description",
    )
