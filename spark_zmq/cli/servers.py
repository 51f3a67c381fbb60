"""``spark-zmq relay`` and ``relay-readers``: the standalone relay, a long-running service
until SIGTERM/SIGINT, and the list and removal of the names queries read it under.

``relay`` receives and spools for Spark queries (``spark_zmq.relay``), ``relay-readers``
lists and removes the names queries read a relay under. The other long-running service,
``broker`` (the load-balancing broker between request-reply clients and workers), is the
module ``broker``, re-exported here; the ``--metrics`` flag they share is ``metrics_flag``.
"""

from __future__ import annotations

import json
import os
import uuid

import typer
from rich.markup import escape

from ..options import OptionError, SourceOptions, reader_name_problem
from ..patterns import parse_endpoints
from .broker import BROKER_MAX_MESSAGE_BYTES, broker_command
from .console import err_console, print_error
from .flags import CURVE_PANEL, HEARTBEAT_PANEL, ConsumePattern, Format, checked_curve_flags, off_loopback, reader_curve
from .metrics_flag import check_metrics, metrics_option
from .source_flags import given_options, option_flag, option_flags, usage_error

__all__ = [
    "relay_command",
    "relay_readers_command",
    "broker_command",
    "metrics_option",
    "check_metrics",
    "BROKER_MAX_MESSAGE_BYTES",
]


def relay_command(
    endpoints: str = option_flag(
        "endpoints",
        "-e",
        required=True,
        help="Where to receive, as the source option "
        "'endpoints' (each endpoint one channel; pull/gather bind by default).",
    ),
    listen: str = typer.Option(
        ...,
        "--listen",
        "-l",
        help="Where queries reach this relay, e.g. 'tcp://10.0.0.5:7000' (the source option 'relays' names it).",
    ),
    spool_dir: str = option_flag(
        "spoolDir",
        required=True,
        help="The spool's directory (created 0700; kept across restarts: what it holds is served after a restart).",
    ),
    pattern: ConsumePattern | None = option_flag("pattern", help="pull, gather, or sub."),
    format: Format | None = option_flag(
        "format",
        "-f",
        help="The format queries read: arrow messages are "
        "counted by rows, others by messages (queries must match arrow or not).",
    ),
    topics: str | None = option_flag("topics", help="sub: comma-separated subscription prefixes."),
    max_spool_bytes: str | None = option_flag(
        "maxSpoolBytes", help="Disk the spool may use before the relay stops reading (backpressure), e.g. '10 GiB'."
    ),
    hwm: int | None = option_flag("hwm", help="Receive high-water mark per socket (messages)."),
    max_message_bytes: str | None = option_flag("maxMessageBytes", help="Largest message accepted."),
    fsync: bool | None = option_flag(
        "spoolFsync", "--fsync/--no-fsync", help="fsync every spooled batch (survives a machine crash)."
    ),
    retention_bytes: str | None = typer.Option(
        None,
        "--retention-bytes",
        help="What the spool may hold for "
        "readers that lag, e.g. '5 GiB': beyond it the oldest segments "
        "are freed whoever has not read them (their queries report data "
        "loss). Default: no limit but --max-spool-bytes (backpressure).",
    ),
    retention_seconds: float | None = typer.Option(
        None,
        "--retention-seconds",
        min=0.0,
        max=10 * 365 * 86400.0,
        help="How long a message is kept for readers that lag: "
        "older segments are freed whoever has not read them. "
        "Default: no limit.",
    ),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        panel=CURVE_PANEL,
        help="The relay's secret certificate. With --curve-authorized-keys the receiving sockets are CURVE servers "
        "accepting those producers' keys; with --reader-authorized-keys the --listen port is one accepting "
        "those queries' keys.",
    ),
    curve_server_key: str | None = option_flag(
        "curveServerKey",
        panel=CURVE_PANEL,
        help="The receiving sockets are CURVE clients of this server key (e.g. sub to a CURVE pub).",
    ),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys",
        panel=CURVE_PANEL,
        help="Producer keys the receiving sockets accept: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' for "
        "any key. Never accepted on --listen.",
    ),
    reader_authorized_keys: str | None = typer.Option(
        None,
        "--reader-authorized-keys",
        metavar="DIR|*",
        rich_help_panel=CURVE_PANEL,
        help="Query (reader) keys the --listen port accepts: a directory of public certificates (*.key, or CZMQ's certificate store), or '*' "
        "for any key. Required with --curve-authorized-keys.",
    ),
    heartbeat_interval: str | None = option_flag(
        "heartbeatInterval",
        panel=HEARTBEAT_PANEL,
        help="Seconds between PINGs on every connection (receiving and --listen); 0 switches heartbeats off.",
    ),
    heartbeat_timeout: str | None = option_flag(
        "heartbeatTimeout",
        panel=HEARTBEAT_PANEL,
        help="Seconds a producer may stay silent after a PING before its "
        "connection is closed (closing loses what it has in "
        "flight).",
    ),
    heartbeat_ttl: str | None = option_flag(
        "heartbeatTtl", panel=HEARTBEAT_PANEL, help="The TTL our PINGs ask of the peer (0: none)."
    ),
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
    raw = {
        **given_options(relay_command, given),
        "spoolAccess": "local",
        "spoolDir": os.path.abspath(os.path.expanduser(spool_dir)),
    }
    try:
        options = SourceOptions.parse(raw)
    except OptionError as exc:
        raise usage_error(exc, option_flags(relay_command)) from None
    retained: int | None = None
    if retention_bytes is not None:
        try:
            retained = SourceOptions.parse({"endpoints": endpoints, "maxSpoolBytes": retention_bytes}).max_spool_bytes
        except OptionError as exc:
            raise typer.BadParameter(
                str(exc).replace("option 'maxSpoolBytes' = ", ""), param_hint="'--retention-bytes'"
            ) from None
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
        err_console.print(
            f"[yellow]warning:[/] {escape(address)} serves the spool without CURVE: anyone who "
            "reaches it can read the messages (see --curve-certificate / --reader-authorized-keys)"
        )
    try:
        code = serve(
            IngestConfig.from_options(options),
            address,
            listen_curve,
            retention_bytes=retained,
            retention_s=retention_seconds,
            metrics=metrics,
        )
    except Exception as exc:  # a bind error, a locked spool: the reason, not a trace  # noqa: BLE001
        print_error(f"{type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def relay_readers_command(
    listen: str = typer.Option(
        ...,
        "--listen",
        "-l",
        help="The relay's --listen address, e.g. 'tcp://10.0.0.5:7000' (as the source option 'relays' names it).",
    ),
    remove: str | None = typer.Option(
        None,
        "--remove",
        metavar="NAME",
        help="Unregister this reader (a "
        "relayReader name): the relay no longer keeps what it has not committed. "
        "Refused while a query reads under it; needs --relay-spool-dir (or the reader's "
        "CURVE key).",
    ),
    relay_spool_dir: str | None = typer.Option(
        None,
        "--relay-spool-dir",
        metavar="DIR",
        help="With --remove: the relay's "
        "spool directory, read on the relay's host as the account it runs as, "
        "to act as its operator (removes a reader this command holds neither "
        "the lease nor the CURVE key of).",
    ),
    timeout: float = typer.Option(10.0, "--timeout", min=0.1, max=3600.0, help="Seconds to wait for the relay."),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        panel=CURVE_PANEL,
        help="A reader's secret certificate (one the relay's --reader-authorized-keys accepts), with "
        "--curve-server-key: as the source options curveCertificate and curveServerKey.",
    ),
    curve_server_key: str | None = option_flag(
        "curveServerKey", panel=CURVE_PANEL, help="The relay's public key (its certificate file or Z85 text)."
    ),
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
        raise typer.BadParameter(
            "the one address the relay listens on, e.g. 'tcp://10.0.0.5:7000'", param_hint="'--listen'"
        )
    if remove is not None and reader_name_problem(remove) is not None:
        raise typer.BadParameter(str(reader_name_problem(remove)), param_hint="'--remove'")
    if curve_certificate is not None and curve_server_key is None:
        raise typer.BadParameter(
            "a relay's readers are CURVE clients: give --curve-server-key (the relay's public "
            "key) with --curve-certificate",
            param_hint="'--curve-server-key'",
        )
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
