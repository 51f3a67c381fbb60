"""``spark-zmq ping ENDPOINT``: is the relay, broker or worker at ENDPOINT serving? For exec
probes (Kubernetes, systemd, a load balancer's check) and scripts.

Why one request for all three: a probe should not need to know what it probes. It sends
``PING`` from a DEALER: a relay's ``hello`` request as it is (a relay answers ``[b"ok",
its description]``), which the broker's frontend and a REP worker (``spark_zmq.worker.serve``
with ``broker=False``) answer themselves, without a worker or a handler (``[b"ok",
{"service": ...}]``). An answer means the service's own loop runs, not only libzmq's I/O
thread (which completes handshakes and heartbeats for a process whose loop is stuck).

Exit 0 with one line on stdout (the service, what it said, the round trip in ms) when it
answers within ``--timeout``; exit 1 with the reason on stderr otherwise, told apart from
the socket's monitor: nothing listens (refused), a peer that accepted and never completed
the ZeroMQ handshake (not ZeroMQ, or stuck before it), a handshake refused (CURVE: the key
was not accepted, or the server expects CURVE, or not), a ZeroMQ peer that never answered
(a stuck service, or a socket that is none of the three, e.g. a broker's backend), or an
answer that is not a spark-zmq service's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import typer
import zmq
from zmq.utils.monitor import recv_monitor_message

from ..errors import SparkZmqError
from ..patterns import parse_endpoints
from ..requestreply.broker_stats import PING, PONG
from .console import print_error
from .flags import CURVE_PANEL, checked_curve_flags
from .source_flags import option_flag

__all__ = ["ping_command", "ping"]

#: events of the probe's socket the reason is told from
_EVENTS = (
    zmq.EVENT_CONNECTED
    | zmq.EVENT_CONNECT_RETRIED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class PingFailed(SparkZmqError):
    """The service did not answer as one of spark-zmq's: the message says why."""


def ping(
    address: str, timeout_s: float, curve: Any = None, context: zmq.Context | None = None
) -> tuple[dict[str, Any], float]:
    """Ask the service at ``address`` (``tcp://host:port``, ``ipc://...``) whether it serves:
    ``(what it said, round trip in seconds)``, or ``PingFailed`` naming why not within
    ``timeout_s``. ``curve``: a CURVE client ``Curve`` for a service that is a CURVE server."""
    ctx = context or zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 100)
    sock.setsockopt(zmq.MAXMSGSIZE, 1 << 20)
    if curve is not None:
        curve.apply(sock)
    monitor = sock.get_monitor_socket(_EVENTS)
    try:
        started = time.monotonic()
        deadline = started + timeout_s
        sock.connect(address)
        sock.send_multipart([b"", PING], zmq.NOBLOCK)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        seen: set[int] = set()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PingFailed(_silence(address, seen, timeout_s, curve is not None))
            ready = dict(poller.poll(max(1, int(left * 1000))))
            if monitor in ready:
                while monitor.poll(0):
                    event = recv_monitor_message(monitor)["event"]
                    seen.add(event)
                    refusal = _refusal(address, event, seen, curve is not None)
                    if refusal is not None:
                        raise PingFailed(refusal)
            if sock in ready:
                frames = sock.recv_multipart()
                return _answer(frames), time.monotonic() - started
    finally:
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)


def _refusal(address: str, event: int, seen: set[int], curve: bool) -> str | None:
    """A reason to stop at once, from one monitor event (``None``: go on waiting)."""
    if event == zmq.EVENT_CONNECT_RETRIED and zmq.EVENT_CONNECTED not in seen:
        return f"refused: nothing listens at {address} (the connection was refused)"
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return (
            f"CURVE rejected: {address} refused this key (it is not among the service's authorized keys)"
            if curve
            else f"rejected: {address} refused the handshake (authentication)"
        )
    if event == zmq.EVENT_DISCONNECTED and zmq.EVENT_HANDSHAKE_SUCCEEDED not in seen:
        return (
            f"handshake failed at {address}: the peer closed the connection during the ZeroMQ handshake: it is "
            "not a relay, broker frontend or worker (a socket type that takes no requests)"
            + (
                ", or --curve-server-key is not its key"
                if curve
                else ", or it expects CURVE (give --curve-server-key and --curve-certificate)"
            )
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return (
            f"handshake failed at {address}: the peer is not a relay, broker frontend or worker (a socket type "
            "that takes no requests), or one side uses CURVE and the other does not"
            + ("" if curve else " (give --curve-server-key and --curve-certificate for a CURVE service)")
        )
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        # libzmq reports a socket-type mismatch as this or as FAILED_PROTOCOL, by which side
        # saw it first: the reason names both causes
        return f"handshake failed at {address}: " + (
            "wrong --curve-server-key, or the service is not a CURVE server"
            if curve
            else "the peer broke off the ZeroMQ "
            "handshake: it is not a relay, broker frontend or worker (a "
            "socket type that takes no requests), or it expects CURVE "
            "(give --curve-server-key and --curve-certificate)"
        )
    return None


def _silence(address: str, seen: set[int], timeout_s: float, curve: bool) -> str:
    """Why nothing came back within the timeout, from what the monitor saw."""
    if zmq.EVENT_HANDSHAKE_SUCCEEDED in seen:
        return (
            f"silent: {address} completed the ZeroMQ handshake but did not answer within {timeout_s:g} s (a "
            "stuck service, or a socket that is not a relay, a broker's frontend or a worker)"
        )
    if zmq.EVENT_CONNECTED in seen:
        return (
            f"silent: {address} accepted the connection but never completed the ZeroMQ handshake within "
            f"{timeout_s:g} s (not a ZeroMQ service, or one that is stuck"
            + (", or a wrong --curve-server-key)" if curve else ")")
        )
    return f"unreachable: no connection to {address} within {timeout_s:g} s (a host that drops the packets?)"


def _answer(frames: list[bytes]) -> dict[str, Any]:
    """What the service said: a relay's description, or a broker's or worker's ``pong``."""
    if frames and frames[0] == b"":  # the relay's ROUTER answers with the DEALER's delimiter
        frames = frames[1:]
    if len(frames) != 2 or frames[0] != PONG:
        shown = [f[:40] for f in frames[:3]]
        raise PingFailed(f"wrong service: the answer {shown!r} is not a spark-zmq relay's, broker's or worker's")
    try:
        body = json.loads(frames[1])
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise PingFailed(
            f"wrong service: the answer {frames[1][:60]!r} is not a spark-zmq relay's, broker's or worker's"
        )
    if "service" not in body:
        if "spool" not in body:
            raise PingFailed(
                f"wrong service: the answer {frames[1][:60]!r} is not a spark-zmq relay's, broker's or worker's"
            )
        body = {"service": "relay", **body}
    return body


def ping_command(
    endpoint: str = typer.Argument(
        ...,
        help="The service's address: a relay's --listen, a broker's --frontend, a "
        "worker's bound endpoint, e.g. 'tcp://10.0.0.5:7000'.",
    ),
    timeout: float = typer.Option(5.0, "--timeout", min=0.01, max=3600.0, help="Seconds to wait for the answer."),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        panel=CURVE_PANEL,
        help="Our secret certificate, one the service accepts (with --curve-server-key).",
    ),
    curve_server_key: str | None = option_flag(
        "curveServerKey", panel=CURVE_PANEL, help="The service's public key (its certificate file or Z85 text)."
    ),
) -> None:
    """Ask a relay, broker or worker whether it serves: exit 0 with what it said when it answers within --timeout,
    1 with the reason otherwise (refused, silent, wrong service, CURVE rejected)."""
    try:
        parsed = parse_endpoints(endpoint, default_bind=False)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'ENDPOINT'") from None
    if len(parsed) != 1 or parsed[0].bind:
        raise typer.BadParameter("one address to connect to, e.g. 'tcp://10.0.0.5:7000'", param_hint="'ENDPOINT'")
    curve = checked_curve_flags(curve_certificate, curve_server_key, None)
    if (curve_certificate is None) != (curve_server_key is None):
        raise typer.BadParameter(
            "a probe of a CURVE service needs both --curve-certificate (our key) and "
            "--curve-server-key (the service's)",
            param_hint="'--curve-server-key'",
        )
    address = parsed[0].address
    try:
        said, took = ping(address, timeout, curve)
    except PingFailed as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
    service = said.pop("service")
    print(f"{service} at {address} answered in {took * 1000:.1f} ms: {json.dumps(said, separators=(',', ':'))}")
