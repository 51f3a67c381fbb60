"""``spark-zmq relay`` and ``broker``: the long-running services, until SIGTERM/SIGINT.

``relay`` receives and spools for Spark queries (``spark_zmq.relay``), ``relay-readers``
lists and removes the names queries read a relay under; ``broker`` is the load-balancing
broker between request-reply clients and workers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import uuid

import typer
from rich.markup import escape

from ..options import OptionError, SourceOptions, reader_name_problem
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
    HEARTBEAT_PANEL,
    ConsumePattern,
    Format,
    broker_curves,
    checked_curve_flags,
    heartbeat_from_flags,
    heartbeat_interval_option,
    heartbeat_timeout_option,
    heartbeat_ttl_option,
    off_loopback,
    reader_curve,
    source_default_int,
)
from .source_flags import given_options, option_flag, option_flags, usage_error

__all__ = ["relay_command", "relay_readers_command", "broker_command", "metrics_option", "check_metrics"]

#: the broker's default bound on a message from the command line: the source's (a broker
#: object built in code has none unless given one)
BROKER_MAX_MESSAGE_BYTES = source_default_int("maxMessageBytes")


def metrics_option() -> str | None:
    """``--metrics HOST:PORT``: serve the service's Prometheus metrics there (off by default)."""
    return typer.Option(None, "--metrics", metavar="HOST:PORT",
                        help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs the extra: pip install "
                             "'spark-zmq[metrics]'); off by default. See docs/metrics.md.")


def check_metrics(metrics: str | None) -> None:
    """A bad ``--metrics`` is a usage error, and a missing prometheus-client one too (exit 2),
    before any socket is opened."""
    if metrics is None:
        return
    from ..metrics import MISSING, parse_address

    try:
        parse_address(metrics)
    except ValueError as exc:
        raise typer.BadParameter(str(exc).replace(f"--metrics {metrics!r}: ", ""), param_hint="'--metrics'") from None
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise typer.BadParameter(MISSING, param_hint="'--metrics'") from None


def relay_command(
    endpoints: str = option_flag("endpoints", "-e", required=True, help="Where to receive, as the source option "
                                 "'endpoints' (each endpoint one channel; pull/gather bind by default)."),
    listen: str = typer.Option(..., "--listen", "-l", help="Where queries reach this relay, e.g. "
                               "'tcp://10.0.0.5:7000' (the source option 'relays' names it)."),
    spool_dir: str = option_flag("spoolDir", required=True, help="The spool's directory (created 0700; kept across "
                                 "restarts: what it holds is served after a restart)."),
    pattern: ConsumePattern | None = option_flag("pattern", help="pull, gather, or sub."),
    format: Format | None = option_flag("format", "-f", help="The format queries read: arrow messages are "
                                           "counted by rows, others by messages (queries must match arrow or not)."),
    topics: str | None = option_flag("topics", help="sub: comma-separated subscription prefixes."),
    max_spool_bytes: str | None = option_flag("maxSpoolBytes", help="Disk the spool may use before the relay "
                                                 "stops reading (backpressure), e.g. '10 GiB'."),
    hwm: int | None = option_flag("hwm", help="Receive high-water mark per socket (messages)."),
    max_message_bytes: str | None = option_flag("maxMessageBytes", help="Largest message accepted."),
    fsync: bool | None = option_flag("spoolFsync", "--fsync/--no-fsync",
                                        help="fsync every spooled batch (survives a machine crash)."),
    retention_bytes: str | None = typer.Option(None, "--retention-bytes", help="What the spool may hold for "
                                                  "readers that lag, e.g. '5 GiB': beyond it the oldest segments "
                                                  "are freed whoever has not read them (their queries report data "
                                                  "loss). Default: no limit but --max-spool-bytes (backpressure)."),
    retention_seconds: float | None = typer.Option(None, "--retention-seconds", min=0.0, max=10 * 365 * 86400.0,
                                                      help="How long a message is kept for readers that lag: "
                                                           "older segments are freed whoever has not read them. "
                                                           "Default: no limit."),
    curve_certificate: str | None = option_flag(
        "curveCertificate", panel=CURVE_PANEL,
        help="The relay's secret certificate. With --curve-authorized-keys the receiving sockets are CURVE servers "
             "accepting those producers' keys; with --reader-authorized-keys the --listen port is one accepting "
             "those queries' keys."),
    curve_server_key: str | None = option_flag(
        "curveServerKey", panel=CURVE_PANEL,
        help="The receiving sockets are CURVE clients of this server key (e.g. sub to a CURVE pub)."),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys", panel=CURVE_PANEL,
        help="Producer keys the receiving sockets accept: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for "
             "any key. Never accepted on --listen."),
    reader_authorized_keys: str | None = typer.Option(
        None, "--reader-authorized-keys", metavar="DIR|*", rich_help_panel=CURVE_PANEL,
        help="Query (reader) keys the --listen port accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' "
             "for any key. Required with --curve-authorized-keys."),
    heartbeat_interval: str | None = option_flag("heartbeatInterval", panel=HEARTBEAT_PANEL,
                                                    help="Seconds between PINGs on every connection (receiving "
                                                         "and --listen); 0 switches heartbeats off."),
    heartbeat_timeout: str | None = option_flag("heartbeatTimeout", panel=HEARTBEAT_PANEL,
                                                   help="Seconds a producer may stay silent after a PING before its "
                                                        "connection is closed (closing loses what it has in "
                                                        "flight)."),
    heartbeat_ttl: str | None = option_flag("heartbeatTtl", panel=HEARTBEAT_PANEL,
                                               help="The TTL our PINGs ask of the peer (0: none)."),
    metrics: str | None = metrics_option(),
) -> None:
    """Receive and spool ZeroMQ messages for Spark queries, until SIGTERM/SIGINT (then drain and exit 0).
    Queries read it with the source option relays=<--listen address>, each under a name of its own (option
    relayReader); what a registered reader has not committed is kept, within --retention-bytes and
    --retention-seconds."""
    given = dict(locals())  # the arguments by name, before any other local: the flags' values
    from ..ingest.config import IngestConfig
    from ..relay.run import serve

    check_metrics(metrics)
    raw = {**given_options(relay_command, given), "spoolAccess": "local",
           "spoolDir": os.path.abspath(os.path.expanduser(spool_dir))}
    try:
        options = SourceOptions.parse(raw)
    except OptionError as exc:
        raise usage_error(exc, option_flags(relay_command)) from None
    retained: int | None = None
    if retention_bytes is not None:
        try:
            retained = SourceOptions.parse({"endpoints": endpoints, "maxSpoolBytes": retention_bytes}).max_spool_bytes
        except OptionError as exc:
            raise typer.BadParameter(str(exc).replace("option 'maxSpoolBytes' = ", ""),
                                     param_hint="'--retention-bytes'") from None
    if retention_seconds is not None and retention_seconds <= 0:
        raise typer.BadParameter("seconds, more than 0 (leave it out for no limit)", param_hint="'--retention-seconds'")
    try:
        listen_endpoint = parse_endpoints(listen, default_bind=True)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--listen'") from None
    if len(listen_endpoint) != 1 or not listen_endpoint[0].bind:
        raise typer.BadParameter("one address to listen on, e.g. 'tcp://10.0.0.5:7000'", param_hint="'--listen'")
    curve = options.curve
    listen_curve = reader_curve(curve_certificate, reader_authorized_keys, curve is not None and curve.is_server)
    address = listen_endpoint[0].address
    if listen_curve is None and off_loopback(address):
        err_console.print(f"[yellow]warning:[/] {escape(address)} serves the spool without CURVE: anyone who "
                          "reaches it can read the messages (see --curve-certificate / --reader-authorized-keys)")
    try:
        code = serve(IngestConfig.from_options(options), address, listen_curve, retention_bytes=retained, retention_s=retention_seconds,
                     metrics=metrics)
    except Exception as exc:  # a bind error, a locked spool: the reason, not a trace  # noqa: BLE001
        print_error(f"{type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def relay_readers_command(
    listen: str = typer.Option(..., "--listen", "-l", help="The relay's --listen address, e.g. "
                               "'tcp://10.0.0.5:7000' (as the source option 'relays' names it)."),
    remove: str | None = typer.Option(None, "--remove", metavar="NAME", help="Unregister this reader (a "
                                         "relayReader name): the relay no longer keeps what it has not committed. "
                                         "Refused while a query reads under it; needs --relay-spool-dir (or the reader's "
                                         "CURVE key)."),
    relay_spool_dir: str | None = typer.Option(None, "--relay-spool-dir", metavar="DIR", help="With --remove: the relay's "
                                            "spool directory, read on the relay's host as the account it runs as, "
                                            "to act as its operator (removes a reader this command holds neither "
                                            "the lease nor the CURVE key of)."),
    timeout: float = typer.Option(10.0, "--timeout", min=0.1, max=3600.0, help="Seconds to wait for the relay."),
    curve_certificate: str | None = option_flag(
        "curveCertificate", panel=CURVE_PANEL,
        help="A reader's secret certificate (one the relay's --reader-authorized-keys accepts), with "
             "--curve-server-key: as the source options curveCertificate and curveServerKey."),
    curve_server_key: str | None = option_flag(
        "curveServerKey", panel=CURVE_PANEL, help="The relay's public key (its certificate file or Z85 text)."),
) -> None:
    """List the readers of a relay (the names queries read it under, option relayReader), with what each has
    committed and has yet to read; with --remove NAME, unregister one. Prints JSON on stdout."""
    from ..relay.client import RelayClient, RelayError
    from ..relay.messages import ReadersRequest, RemoveReaderRequest

    try:
        address = parse_endpoints(listen, default_bind=False)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--listen'") from None
    if len(address) != 1 or address[0].bind:
        raise typer.BadParameter("the one address the relay listens on, e.g. 'tcp://10.0.0.5:7000'",
                                 param_hint="'--listen'")
    if remove is not None and reader_name_problem(remove) is not None:
        raise typer.BadParameter(str(reader_name_problem(remove)), param_hint="'--remove'")
    if curve_certificate is not None and curve_server_key is None:
        raise typer.BadParameter("a relay's readers are CURVE clients: give --curve-server-key (the relay's public "
                                 "key) with --curve-certificate", param_hint="'--curve-server-key'")
    operator: str | None = None
    if relay_spool_dir is not None:
        if remove is None:
            raise typer.BadParameter("only with --remove NAME", param_hint="'--relay-spool-dir'")
        from ..relay.operator import read_token

        try:
            operator = read_token(os.path.abspath(os.path.expanduser(relay_spool_dir)))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--relay-spool-dir'") from None
    curve = checked_curve_flags(curve_certificate, curve_server_key, None)
    client = RelayClient(address[0].address, "admin-" + uuid.uuid4().hex, curve=curve, timeout_s=timeout)
    try:
        answer = client.ask(ReadersRequest() if remove is None else RemoveReaderRequest(remove, operator))
    except RelayError as exc:
        print_error(str(exc))
        raise typer.Exit(1) from None
    finally:
        client.close()
    print(json.dumps(answer.to_wire(), indent=2))


def broker_command(
    frontend: str = typer.Option(..., "--frontend", help="Where clients (DEALER or REQ, e.g. "
                                 "spark_zmq.requestreply.Client) reach the broker: '@tcp://*:5559' binds (the default), "
                                 "'>tcp://host:port' connects."),
    backend: str = typer.Option(..., "--backend", help="Where workers (REQ, e.g. spark_zmq.worker.serve) reach the "
                                "broker: '@tcp://*:5560' binds (the default), '>tcp://host:port' connects."),
    hwm: int = typer.Option(DEFAULT_HWM, "--hwm", min=1, help="Requests that may wait in the broker while no worker is "
                            f"idle (and {DEFAULT_MAX_WAITING_BYTES >> 20} MiB of them at most); beyond that it stops "
                            "reading clients (backpressure). Also the sockets' high-water marks, except the "
                            "frontend's receive and send queues per client connection, sized in bytes from "
                            "--max-message-bytes."),
    max_message_bytes: int = option_flag("maxMessageBytes", table_default=True, min=1, metavar=None,
                                         help="Largest message accepted from a client or worker, all frames "
                                              "together (a larger frame disconnects its peer; a larger message is "
                                              "dropped and counted), as the source's option maxMessageBytes."),
    client_hwm: int | None = typer.Option(None, "--client-hwm", min=1, help="Replies held for one client that "
                                             "is not reading before it gets no new request (the others go on), "
                                             "and requests such a client may have waiting. Default: --hwm."),
    reply_timeout: float = typer.Option(DEFAULT_REPLY_TIMEOUT, "--reply-timeout", min=0.0, max=86400.0, help="Seconds a reply waits "
                                        "in the broker for a connected client that is not reading; then it is "
                                        "dropped (counted undeliverable) and the client's own timeout resends the "
                                        "request. 0 drops it at once."),
    request_ttl: float = typer.Option(DEFAULT_REQUEST_TTL, "--request-ttl", min=0.0, max=86400.0, help="Seconds a request may "
                                      "wait in the broker for a worker; an older one is dropped as its time passes, "
                                      "never dispatched, and takes no place under --hwm (counted expired: its "
                                      "client has resent it by then). 0: no limit."),
    hold_limit: float = typer.Option(DEFAULT_HOLD_LIMIT, "--hold-limit", min=0.0, max=86400.0, help="Seconds a worker may hold "
                                     "a request before it is counted lost (the broker does not resend it: the "
                                     "client's own timeout does). 0: no limit."),
    status_interval: float = typer.Option(10.0, "--status-interval", min=0.05, help="Seconds between status lines "
                                          "on stderr."),
    curve_certificate: str | None = option_flag(
        "curveCertificate", side="request", panel=CURVE_PANEL,
        help="The broker's secret certificate: the frontend and the backend are CURVE servers, each accepting "
             "only its own authorized keys (--frontend-authorized-keys, --backend-authorized-keys)."),
    frontend_authorized_keys: str | None = typer.Option(
        None, "--frontend-authorized-keys", metavar="DIR|*", rich_help_panel=CURVE_PANEL,
        help="Client keys the frontend accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for any key."),
    backend_authorized_keys: str | None = typer.Option(
        None, "--backend-authorized-keys", metavar="DIR|*", rich_help_panel=CURVE_PANEL,
        help="Worker keys the backend accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for any key. "
             "A worker is trusted with the requests it is given and answers them: never the clients' keys."),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys", side="request", panel=CURVE_PANEL,
        help="The older name of --frontend-authorized-keys (clients only; the backend needs "
             "--backend-authorized-keys)."),
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
    curve_frontend, curve_backend = broker_curves(curve_certificate, frontend_authorized_keys,
                                                  backend_authorized_keys, curve_authorized_keys)
    heartbeat = heartbeat_from_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    try:
        broker = Broker(frontend, backend, hwm=hwm, curve_frontend=curve_frontend, curve_backend=curve_backend,
                        heartbeat=heartbeat,
                        max_message_bytes=max_message_bytes, reply_timeout=reply_timeout, client_hwm=client_hwm,
                        request_ttl=request_ttl or None, hold_limit=hold_limit or None)
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

    security = "" if curve_frontend is None or curve_backend is None else \
        f"; frontend: {curve_frontend.describe()}; backend: {curve_backend.describe()}"
    if curve_frontend is None:
        exposed = [a for a in broker.frontend_addresses + broker.backend_addresses if off_loopback(a)] + \
            [str(e) for e in parse_endpoints(frontend, default_bind=True) + parse_endpoints(backend, default_bind=True)
             if not e.bind and off_loopback(e.address)]
        if exposed:
            err_console.print(f"[yellow]warning:[/] {escape(', '.join(exposed))} without CURVE: anyone who reaches "
                              "it can send requests, read the replies, or take requests as a worker (see "
                              "--curve-certificate, --frontend-authorized-keys and --backend-authorized-keys)")
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
    print(f"broker: frontend {', '.join(broker.frontend_addresses) or frontend}, backend "
          f"{', '.join(broker.backend_addresses) or backend}{security}", file=sys.stderr, flush=True)
    with broker:
        try:
            broker.run(stop, report=status, report_interval=status_interval)
        except Exception as exc:  # noqa: BLE001
            print_error(f"the broker failed: {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
        print(f"broker: stopped ({stopped_by[0] if stopped_by else 'stop'}): {broker.stats().line()}",
              file=sys.stderr, flush=True)
        if scrape is not None:
            scrape.close()
