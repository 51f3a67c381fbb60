"""``spark-zmq broker``: the load-balancing broker between request-reply clients and
workers, until SIGTERM/SIGINT, with a status line on stderr.

Why its own module: the broker shares nothing with the relay's commands (``servers``) but
the ``--metrics`` flag (``metrics_flag``).
"""

from __future__ import annotations

import signal
import sys
import threading

import typer
from rich.markup import escape

from ..patterns import parse_endpoints
from ..requestreply import Broker, BrokerStats
from ..requestreply.broker_defaults import (
    DEFAULT_HOLD_LIMIT,
    DEFAULT_HWM,
    DEFAULT_MAX_WAITING_BYTES,
    DEFAULT_REPLY_TIMEOUT,
    DEFAULT_REQUEST_TTL,
)
from .console import err_console, print_error
from .flags import (
    CURVE_PANEL,
    broker_curves,
    heartbeat_from_flags,
    heartbeat_interval_option,
    heartbeat_timeout_option,
    heartbeat_ttl_option,
    off_loopback,
    source_default_int,
)
from .metrics_flag import check_metrics, metrics_option
from .source_flags import option_flag

__all__ = ["broker_command", "BROKER_MAX_MESSAGE_BYTES"]

#: the broker's default bound on a message from the command line: the source's (a broker
#: object built in code has none unless given one)
BROKER_MAX_MESSAGE_BYTES = source_default_int("maxMessageBytes")


def broker_command(
    frontend: str = typer.Option(
        ...,
        "--frontend",
        help="Where clients (DEALER or REQ, e.g. "
        "spark_zmq.requestreply.Client) reach the broker: '@tcp://*:5559' binds (the default), "
        "'>tcp://host:port' connects.",
    ),
    backend: str = typer.Option(
        ...,
        "--backend",
        help="Where workers (REQ, e.g. spark_zmq.worker.serve) reach the "
        "broker: '@tcp://*:5560' binds (the default), '>tcp://host:port' connects.",
    ),
    hwm: int = typer.Option(
        DEFAULT_HWM,
        "--hwm",
        min=1,
        help="Requests that may wait in the broker while no worker is "
        f"idle (and {DEFAULT_MAX_WAITING_BYTES >> 20} MiB of them at most); beyond that it stops "
        "reading clients (backpressure). Also the sockets' high-water marks, except the "
        "frontend's receive and send queues per client connection, sized in bytes from "
        "--max-message-bytes.",
    ),
    max_message_bytes: int = option_flag(
        "maxMessageBytes",
        table_default=True,
        min=1,
        metavar=None,
        help="Largest message accepted from a client or worker, all frames "
        "together (a larger frame disconnects its peer; a larger message is "
        "dropped and counted), as the source's option maxMessageBytes.",
    ),
    client_hwm: int | None = typer.Option(
        None,
        "--client-hwm",
        min=1,
        help="Replies held for one client that "
        "is not reading before it gets no new request (the others go on), "
        "and requests such a client may have waiting. Default: --hwm.",
    ),
    reply_timeout: float = typer.Option(
        DEFAULT_REPLY_TIMEOUT,
        "--reply-timeout",
        min=0.0,
        max=86400.0,
        help="Seconds a reply waits "
        "in the broker for a connected client that is not reading; then it is "
        "dropped (counted undeliverable) and the client's own timeout resends the "
        "request. 0 drops it at once.",
    ),
    request_ttl: float = typer.Option(
        DEFAULT_REQUEST_TTL,
        "--request-ttl",
        min=0.0,
        max=86400.0,
        help="Seconds a request may "
        "wait in the broker for a worker; an older one is dropped as its time passes, "
        "never dispatched, and takes no place under --hwm (counted expired: its "
        "client has resent it by then). 0: no limit.",
    ),
    hold_limit: float = typer.Option(
        DEFAULT_HOLD_LIMIT,
        "--hold-limit",
        min=0.0,
        max=86400.0,
        help="Seconds a worker may hold "
        "a request before it is counted lost (the broker does not resend it: the "
        "client's own timeout does). 0: no limit.",
    ),
    status_interval: float = typer.Option(
        10.0, "--status-interval", min=0.05, help="Seconds between status lines on stderr."
    ),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        side="request",
        panel=CURVE_PANEL,
        help="The broker's secret certificate: the frontend and the backend are CURVE servers, each accepting "
        "only its own authorized keys (--frontend-authorized-keys, --backend-authorized-keys).",
    ),
    frontend_authorized_keys: str | None = typer.Option(
        None,
        "--frontend-authorized-keys",
        metavar="DIR|*",
        rich_help_panel=CURVE_PANEL,
        help="Client keys the frontend accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for any key.",
    ),
    backend_authorized_keys: str | None = typer.Option(
        None,
        "--backend-authorized-keys",
        metavar="DIR|*",
        rich_help_panel=CURVE_PANEL,
        help="Worker keys the backend accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for any key. "
        "A worker is trusted with the requests it is given and answers them: never the clients' keys.",
    ),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys",
        side="request",
        panel=CURVE_PANEL,
        help="The older name of --frontend-authorized-keys (clients only; the backend needs "
        "--backend-authorized-keys).",
    ),
    heartbeat_interval: float = heartbeat_interval_option("request"),
    heartbeat_timeout: float = heartbeat_timeout_option("request"),
    heartbeat_ttl: float = heartbeat_ttl_option("request"),
    metrics: str | None = metrics_option(),
) -> None:
    """Load-balance requests from clients to workers (the ZeroMQ Guide's LRU broker), until SIGTERM/SIGINT.
    Prints a status line on stderr every --status-interval seconds."""
    check_metrics(metrics)
    for flag, value in (("--frontend", frontend), ("--backend", backend)):
        try:
            parse_endpoints(value, default_bind=True)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None
    curve_frontend, curve_backend = broker_curves(
        curve_certificate, frontend_authorized_keys, backend_authorized_keys, curve_authorized_keys
    )
    heartbeat = heartbeat_from_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    try:
        broker = Broker(
            frontend,
            backend,
            hwm=hwm,
            curve_frontend=curve_frontend,
            curve_backend=curve_backend,
            heartbeat=heartbeat,
            max_message_bytes=max_message_bytes,
            reply_timeout=reply_timeout,
            client_hwm=client_hwm,
            request_ttl=request_ttl or None,
            hold_limit=hold_limit or None,
        )
    except Exception as exc:  # a bind error (port in use, address not local): the reason, not a trace  # noqa: BLE001
        print_error(exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        stopped_by.append(signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)

    def status(stats: BrokerStats) -> None:
        print(f"broker: {stats.line()}", file=sys.stderr, flush=True)

    security = (
        ""
        if curve_frontend is None or curve_backend is None
        else f"; frontend: {curve_frontend.describe()}; backend: {curve_backend.describe()}"
    )
    if curve_frontend is None:
        exposed = [a for a in broker.frontend_addresses + broker.backend_addresses if off_loopback(a)] + [
            str(e)
            for e in parse_endpoints(frontend, default_bind=True) + parse_endpoints(backend, default_bind=True)
            if not e.bind and off_loopback(e.address)
        ]
        if exposed:
            err_console.print(
                f"[yellow]warning:[/] {escape(', '.join(exposed))} without CURVE: anyone who reaches "
                "it can send requests, read the replies, or take requests as a worker (see "
                "--curve-certificate, --frontend-authorized-keys and --backend-authorized-keys)"
            )
    scrape = None
    if metrics is not None:
        from ..metrics import broker_metrics, serve_metrics

        try:
            scrape = serve_metrics(metrics, broker_metrics(broker.stats))
        except OSError as exc:
            broker.close()
            print_error(str(exc.strerror or exc))
            raise typer.Exit(1) from None
        security += f"; metrics http://{scrape.address}/metrics"
    print(
        f"broker: frontend {', '.join(broker.frontend_addresses) or frontend}, backend "
        f"{', '.join(broker.backend_addresses) or backend}{security}",
        file=sys.stderr,
        flush=True,
    )
    with broker:
        try:
            broker.run(stop, report=status, report_interval=status_interval)
        except Exception as exc:  # noqa: BLE001
            print_error(f"the broker failed: {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
        print(
            f"broker: stopped ({stopped_by[0] if stopped_by else 'stop'}): {broker.stats().line()}",
            file=sys.stderr,
            flush=True,
        )
        if scrape is not None:
            scrape.close()
