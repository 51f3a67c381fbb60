"""``spark-zmq``: send and receive test traffic from a terminal.

    spark-zmq produce tcp://127.0.0.1:5555 --count 100000 --rate 20000 --format json
    spark-zmq consume @tcp://*:5556 --format arrow --count 10
    spark-zmq keygen server --dir keys/      # CURVE: keys/server.key, keys/server.key_secret
    spark-zmq broker --frontend @tcp://*:5559 --backend @tcp://*:5560   # request-reply broker

Why a CLI: a connector is first tried from a shell; ``produce`` is the load generator the
jobs, notebooks and benchmarks use (``spark_zmq.loadgen``), ``consume`` shows what a Spark
job sends, ``broker`` is the load-balancing broker between request-reply clients (such as
``spark_zmq.patterns.Client``) and workers (``spark_zmq.worker.serve``). Built on typer
(arguments, ``--help``, usage errors with exit code 2) and rich (live progress on stderr,
so printed messages on stdout stay clean for pipes).

``--curve-certificate``, ``--curve-server-key`` and ``--curve-authorized-keys`` mean what
the data source options ``curveCertificate``, ``curveServerKey`` and
``curveAuthorizedKeys`` mean, and are checked by the same rules (``curve_from_flags``),
so a key pair can be tried from a shell before a job uses it.
"""

from __future__ import annotations

import enum
import json
import os
import signal
import sys
import threading
import time
from typing import List, Optional, Sequence

import pyarrow as pa
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import loadgen
from .options import OptionError, SourceOptions, check_curve, curve_of
from .patterns import DEFAULT_HEARTBEAT, Broker, BrokerStats, Gather, Heartbeat, Pull, Sub, parse_endpoints
from .patterns.curve import Curve
from .patterns.curve_keys import CurveError, KeyPair, load_authorized_keys, load_public_key
from .patterns.curve_keys import keygen as write_key_pair

app = typer.Typer(
    name="spark-zmq",
    help="Send and receive ZeroMQ test traffic for spark-zmq jobs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_err = Console(stderr=True, soft_wrap=True)  # error lines unbroken, for grep and logs


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


#: the CLI flags of the data source options curveCertificate, curveServerKey, curveAuthorizedKeys
CURVE_FLAGS = ("--curve-certificate", "--curve-server-key", "--curve-authorized-keys")
_CURVE_OPTIONS = ("curveCertificate", "curveServerKey", "curveAuthorizedKeys")
_CURVE_PANEL = "CURVE security (see 'spark-zmq keygen')"
_HEARTBEAT_PANEL = "Liveness (ZMTP heartbeats)"


def _heartbeat_flags(interval: float, timeout: float, ttl: float) -> Heartbeat:
    """The --heartbeat-* flags as a ``Heartbeat`` (a bad value names its flag)."""
    for flag, value in (("--heartbeat-interval", interval), ("--heartbeat-timeout", timeout),
                        ("--heartbeat-ttl", ttl)):
        try:
            Heartbeat(**{**DEFAULT_HEARTBEAT.__dict__, flag[len("--heartbeat-"):]: value})
        except ValueError as exc:
            raise typer.BadParameter(str(exc).replace("heartbeat ", ""), param_hint=f"'{flag}'") from None
    return Heartbeat(interval, timeout, ttl)


def _hb_interval() -> float:
    return typer.Option(DEFAULT_HEARTBEAT.interval, "--heartbeat-interval", rich_help_panel=_HEARTBEAT_PANEL,
                        help="Seconds between PINGs on every connection; 0 switches heartbeats off.")


def _hb_timeout() -> float:
    return typer.Option(DEFAULT_HEARTBEAT.timeout, "--heartbeat-timeout", rich_help_panel=_HEARTBEAT_PANEL,
                        help="Seconds a peer may stay silent after a PING before its connection counts as broken.")


def _hb_ttl() -> float:
    return typer.Option(DEFAULT_HEARTBEAT.ttl, "--heartbeat-ttl", rich_help_panel=_HEARTBEAT_PANEL,
                        help="The TTL our PINGs ask of the peer (0: none), at most 6553.5.")


def curve_from_flags(certificate: Optional[str], server_key: Optional[str], authorized_keys: Optional[str],
                     flags: Sequence[str] = CURVE_FLAGS) -> Optional[Curve]:
    """The ``Curve`` that the three CURVE flags describe (``None`` without any), or
    ``CurveError`` whose message and ``option`` name the flag at fault.

    Why here and not per caller: the CLI and the example jobs take the data source's CURVE
    options as flags; they share the data source's rules (``options.check_curve``, run
    first, so a wrong combination is reported before any file is read) with the option
    names turned into ``flags`` (e.g. the ``--sink-curve-*`` flags of a job)."""
    names = dict(zip(_CURVE_OPTIONS, flags))
    given = [None if v is None or not v.strip() else os.path.expanduser(v.strip())
             for v in (certificate, server_key, authorized_keys)]
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
    loads = ((KeyPair.from_certificate, cert_path, flags[0]), (load_public_key, key_text, flags[1]),
             (load_authorized_keys, authorized_text, flags[2]))
    loaded = []
    for load, value, flag in loads:
        try:
            loaded.append(None if value is None else load(value, flag))
        except CurveError as exc:
            raise CurveError(f"{flag}: {exc}", flag) from None
    return curve_of(*loaded)


def _curve_flags(certificate: Optional[str], server_key: Optional[str],
                 authorized_keys: Optional[str]) -> Optional[Curve]:
    """``curve_from_flags`` for a command: a bad value is a usage error (exit 2)."""
    try:
        return curve_from_flags(certificate, server_key, authorized_keys)
    except CurveError as exc:
        raise typer.BadParameter(str(exc)) from None


def _error(text: str) -> None:
    """One ``error:`` line on stderr (``text`` printed as is: paths and Z85 keys hold ``[``)."""
    _err.print("[red]error:[/] " + escape(text))


def _check_endpoints(endpoints: str, default_bind: bool) -> None:
    try:
        parse_endpoints(endpoints, default_bind=default_bind)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'ENDPOINTS'") from None


def _progress(total: Optional[int], show: bool, what: str) -> Progress:
    columns = [TextColumn(f"[bold]{what}"), BarColumn() if total else TextColumn(""),
               MofNCompleteColumn() if total else TextColumn("{task.completed:,.0f}"),
               TextColumn("{task.fields[rate]:>10,.0f} msg/s"), TimeElapsedColumn()]
    return Progress(*columns, console=_err, disable=not show, transient=False)


@app.command()
def produce(
    endpoints: str = typer.Argument(..., help="Where to send: 'tcp://host:port' connects, '@tcp://*:port' binds; "
                                             "comma-separated for several peers."),
    pattern: ProducePattern = typer.Option(ProducePattern.push, help="push (round-robin), scatter, or pub (topics)."),
    format: Format = typer.Option(Format.json, "--format", "-f", help="Message format (see spark_zmq.loadgen)."),
    count: int = typer.Option(1000, "--count", "-n", min=0, help="Messages to send."),
    rate: Optional[float] = typer.Option(None, min=0.001, help="Messages per second (default: as fast as possible)."),
    size: int = typer.Option(100, min=8, help="Payload bytes per raw message."),
    rows_per_message: int = typer.Option(1000, min=1, help="Rows in each arrow message."),
    topic: List[str] = typer.Option(["sensors"], help="Topic(s) for pub, used in turn; repeat the option."),
    hwm: int = typer.Option(10_000, min=0, help="Send high-water mark (messages)."),
    send_timeout: Optional[float] = typer.Option(None, min=0, help="Give up after this many seconds without "
                                                                   "a peer able to take a message (push/scatter)."),
    start: int = typer.Option(0, min=0, help="First sequence number."),
    linger: float = typer.Option(30.0, min=0, help="Seconds to keep delivering queued messages after the last "
                                                    "send (to peers that connect late)."),
    progress: bool = typer.Option(True, help="Show live progress on stderr."),
    curve_certificate: Optional[str] = typer.Option(
        None, metavar="FILE", rich_help_panel=_CURVE_PANEL,
        help="This side's secret certificate (NAME.key_secret): with --curve-server-key a CURVE client, with "
             "--curve-authorized-keys a CURVE server."),
    curve_server_key: Optional[str] = typer.Option(
        None, metavar="FILE|Z85", rich_help_panel=_CURVE_PANEL,
        help="The CURVE server's public key: its certificate file (NAME.key) or 40-character Z85 text."),
    curve_authorized_keys: Optional[str] = typer.Option(
        None, metavar="DIR|*", rich_help_panel=_CURVE_PANEL,
        help="As a CURVE server: a directory of the clients' public certificates (*.key), or '*' for any key."),
    heartbeat_interval: float = _hb_interval(),
    heartbeat_timeout: float = _hb_timeout(),
    heartbeat_ttl: float = _hb_ttl(),
) -> None:
    """Send numbered sensor readings (a load generator); prints what was sent."""
    _check_endpoints(endpoints, default_bind=loadgen.PATTERNS[pattern.value].default_bind)
    curve = _curve_flags(curve_certificate, curve_server_key, curve_authorized_keys)
    heartbeat = _heartbeat_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    with _progress(count, progress, "produce") as bar:
        task = bar.add_task("produce", total=count, rate=0.0)
        started = time.monotonic()

        def on_progress(sent: int) -> None:
            bar.update(task, completed=sent, rate=sent / max(time.monotonic() - started, 1e-9))

        try:
            result = loadgen.produce(endpoints, pattern=pattern.value, format=format.value, count=count, rate=rate,
                                     size=size, rows_per_message=rows_per_message, topics=topic, hwm=hwm,
                                     send_timeout=send_timeout, start=start,
                                     linger=linger, on_progress=on_progress, curve=curve,
                                     heartbeat=heartbeat)
        except (TimeoutError, loadgen.HandshakeRejectedError) as exc:
            _error(str(exc))
            raise typer.Exit(1) from None
        except Exception as exc:  # zmq errors (address in use, ...): one line, not a traceback
            _error(f"{type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
    typer.echo(f"sent {result.messages} messages ({result.rows} rows, {result.bytes} bytes) "
               f"in {result.seconds:.2f} s: {result.rate:,.0f} msg/s")
    if result.rejected_handshakes:
        _err.print("[yellow]warning:[/] " + escape(f"{result.rejected_handshakes} CURVE handshake(s) rejected "
                                                   f"(last: {result.last_rejection})"))


def _describe(payload: bytes, fmt: Format, table: Optional[pa.Table]) -> str:
    """A printable line for a message (``table``: the decoded Arrow message)."""
    if table is not None:
        head = json.dumps(table.slice(0, 1).to_pylist()[0], default=str) if table.num_rows else "{}"
        return f"arrow: {table.num_rows} rows, columns {table.column_names}, first {head}"
    if fmt is Format.raw:
        return payload[:64].hex() + ("..." if len(payload) > 64 else "")
    return payload.decode("utf-8", errors="replace")


@app.command()
def consume(
    endpoints: str = typer.Argument(..., help="Where to receive: '@tcp://*:port' binds (default for pull/gather), "
                                             "'>tcp://host:port' connects (default for sub)."),
    pattern: ConsumePattern = typer.Option(ConsumePattern.pull, help="pull, gather, or sub."),
    format: Format = typer.Option(Format.raw, "--format", "-f", help="How to print and count messages."),
    topic: List[str] = typer.Option([], help="Topic prefix(es) for sub (default: all); repeat the option."),
    count: Optional[int] = typer.Option(None, "--count", "-n", min=1, help="Stop after this many messages "
                                                                          "(exit 1 if --timeout ends first)."),
    timeout: Optional[float] = typer.Option(None, min=0, help="Stop after this many seconds with no message."),
    print_messages: bool = typer.Option(False, "--print", help="Print each message on stdout."),
    progress: bool = typer.Option(True, help="Show the live rate on stderr."),
    curve_certificate: Optional[str] = typer.Option(
        None, metavar="FILE", rich_help_panel=_CURVE_PANEL,
        help="This side's secret certificate (NAME.key_secret): with --curve-authorized-keys a CURVE server, "
             "with --curve-server-key a CURVE client."),
    curve_server_key: Optional[str] = typer.Option(
        None, metavar="FILE|Z85", rich_help_panel=_CURVE_PANEL,
        help="As a CURVE client: the server's public key, its certificate file (NAME.key) or 40-character Z85 text."),
    curve_authorized_keys: Optional[str] = typer.Option(
        None, metavar="DIR|*", rich_help_panel=_CURVE_PANEL,
        help="As a CURVE server: a directory of the clients' public certificates (*.key), or '*' for any key; "
             "rejected handshakes are counted in the summary."),
    heartbeat_interval: float = _hb_interval(),
    heartbeat_timeout: float = _hb_timeout(),
    heartbeat_ttl: float = _hb_ttl(),
) -> None:
    """Receive messages and count them (or print them) with a live rate; prints a summary."""
    cls = {"pull": Pull, "gather": Gather, "sub": Sub}[pattern.value]
    _check_endpoints(endpoints, default_bind=cls.default_bind)
    curve = _curve_flags(curve_certificate, curve_server_key, curve_authorized_keys)
    options: dict = {"topics": topic or [""]} if pattern is ConsumePattern.sub else {}
    options["heartbeat"] = _heartbeat_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    if curve is not None:
        options["curve"] = curve
    messages = rows = size = records = records_before = 0
    try:
        sock = cls(endpoints, **options)
    except Exception as exc:
        _error(f"cannot open {pattern.value} on {endpoints}: {exc}")
        raise typer.Exit(1) from None
    watch = sock.handshakes if curve is not None else None
    started = last = watched = time.monotonic()
    with sock, _progress(count, progress, "consume") as bar:
        task = bar.add_task("consume", total=count, rate=0.0)
        try:
            while count is None or messages < count:
                wait = None if timeout is None else max(0.0, last + timeout - time.monotonic())
                if watch is not None:
                    # read the handshake monitor at least once a second, busy or idle: unread,
                    # its queue fills up and rejections go uncounted
                    if time.monotonic() - watched >= 1.0:
                        watch.poll()
                        watched = time.monotonic()
                    wait = 1.0 if wait is None else min(wait, 1.0)
                try:
                    values, topics = sock.recv_values(min(1024, (count or 1 << 30) - messages), timeout=wait)
                except TimeoutError:
                    if watch is not None and (timeout is None or time.monotonic() < last + timeout):
                        continue
                    break
                last = time.monotonic()
                if not messages:
                    started = last  # the rate counts from the first message, not from start-up
                if format is not Format.arrow and not print_messages:
                    rows += len(values)  # counting only: one row per message, nothing to decode
                else:
                    for i, value in enumerate(values):
                        table = pa.ipc.open_stream(value).read_all() if format is Format.arrow else None
                        if table is not None and b"spark_zmq.commit" in (table.schema.metadata or {}):
                            records += 1  # the sink's commit record: no rows, not a data message
                            continue
                        rows += table.num_rows if table is not None else 1
                        if print_messages:
                            topic = topics[i] if topics else None
                            prefix = f"[{topic.decode(errors='replace')}] " if topic is not None else ""
                            typer.echo(prefix + _describe(value, format, table))
                messages += len(values) - (records - records_before)
                records_before = records
                size += sum(map(len, values))
                bar.update(task, completed=messages, rate=messages / max(last - started, 1e-9))
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # undecodable arrow etc.: say which message
            _error(f"message {messages + 1} is not valid {format.value}: {exc}")
            raise typer.Exit(1) from None
        finally:
            if watch is not None:
                watch.poll()  # before the socket (and its monitor) closes
    seconds = max(last - started, 1e-9)
    typer.echo(f"received {messages} messages ({rows} rows, {size} bytes) in {seconds:.2f} s: "
               f"{messages / seconds:,.0f} msg/s"
               + (f"; and {records} commit record(s) of the zmq sink" if records else ""))
    rejected = (f"{watch.rejected} CURVE handshake(s) rejected (last: {watch.last_rejection})"
                if watch is not None and watch.rejected else None)
    if count is not None and messages < count:
        _error(f"received {messages} of {count} messages before {timeout} s passed without one"
               + (f"; {rejected}" if rejected else ""))
        raise typer.Exit(1)
    if rejected:
        _err.print("[yellow]warning:[/] " + escape(rejected))


@app.command("relay")
def relay_command(
    endpoints: str = typer.Option(..., "--endpoints", "-e", help="Where to receive, as the source option "
                                  "'endpoints' (each endpoint one channel; pull/gather bind by default)."),
    listen: str = typer.Option(..., "--listen", "-l", help="Where queries reach this relay, e.g. "
                               "'tcp://10.0.0.5:7000' (the source option 'relays' names it)."),
    spool_dir: str = typer.Option(..., "--spool-dir", help="The spool's directory (created 0700; kept across "
                                  "restarts: what it holds is served after a restart)."),
    pattern: ConsumePattern = typer.Option(ConsumePattern.pull, help="pull, gather, or sub."),
    format: Format = typer.Option(Format.raw, "--format", "-f", help="The format queries read: arrow messages are "
                                  "counted by rows, others by messages (queries must match arrow or not)."),
    topics: Optional[str] = typer.Option(None, help="sub: comma-separated subscription prefixes."),
    max_spool_bytes: Optional[str] = typer.Option(None, help="Disk the spool may use before the relay stops reading "
                                                  "(backpressure), e.g. '10 GiB'. Default 1 GiB."),
    hwm: Optional[int] = typer.Option(None, help="Receive high-water mark per socket (messages). Default 10000."),
    max_message_bytes: Optional[str] = typer.Option(None, help="Largest message accepted. Default 64 MiB."),
    fsync: bool = typer.Option(False, help="fsync every spooled batch (survives a machine crash)."),
    curve_certificate: Optional[str] = typer.Option(
        None, metavar="FILE", rich_help_panel=_CURVE_PANEL,
        help="The relay's secret certificate. With --curve-authorized-keys both the receiving sockets and the "
             "--listen port are CURVE servers accepting those client keys (producers' and queries')."),
    curve_server_key: Optional[str] = typer.Option(
        None, metavar="FILE|Z85", rich_help_panel=_CURVE_PANEL,
        help="The receiving sockets are CURVE clients of this server key (e.g. sub to a CURVE pub)."),
    curve_authorized_keys: Optional[str] = typer.Option(
        None, metavar="DIR|*", rich_help_panel=_CURVE_PANEL,
        help="Client keys accepted: a directory of public certificates (*.key), or '*' for any key."),
    heartbeat_interval: Optional[str] = typer.Option(None, "--heartbeat-interval", rich_help_panel=_HEARTBEAT_PANEL,
                                                     help="Seconds between PINGs on every connection (receiving "
                                                          "and --listen); 0 switches heartbeats off. Default 2."),
    heartbeat_timeout: Optional[str] = typer.Option(None, "--heartbeat-timeout", rich_help_panel=_HEARTBEAT_PANEL,
                                                    help="Seconds a peer may stay silent after a PING. Default 10."),
    heartbeat_ttl: Optional[str] = typer.Option(None, "--heartbeat-ttl", rich_help_panel=_HEARTBEAT_PANEL,
                                                help="The TTL our PINGs ask of the peer (0: none). Default 10."),
) -> None:
    """Receive and spool ZeroMQ messages for Spark queries, until SIGTERM/SIGINT (then drain and exit 0).
    Queries read it with the source option relays=<--listen address>."""
    from .relay.run import serve

    raw = {"pattern": pattern.value, "endpoints": endpoints, "format": format.value, "spoolDir": spool_dir,
           "topics": topics, "maxSpoolBytes": max_spool_bytes, "hwm": None if hwm is None else str(hwm),
           "maxMessageBytes": max_message_bytes, "spoolFsync": str(fsync).lower(), "spoolAccess": "local",
           "curveCertificate": curve_certificate, "curveServerKey": curve_server_key,
           "curveAuthorizedKeys": curve_authorized_keys, "heartbeatInterval": heartbeat_interval,
           "heartbeatTimeout": heartbeat_timeout, "heartbeatTtl": heartbeat_ttl}
    flags = {"endpoints": "--endpoints", "spoolDir": "--spool-dir", "topics": "--topics",
             "maxSpoolBytes": "--max-spool-bytes", "hwm": "--hwm", "maxMessageBytes": "--max-message-bytes",
             "curveCertificate": "--curve-certificate", "curveServerKey": "--curve-server-key",
             "curveAuthorizedKeys": "--curve-authorized-keys", "pattern": "--pattern", "format": "--format",
             "heartbeatInterval": "--heartbeat-interval", "heartbeatTimeout": "--heartbeat-timeout",
             "heartbeatTtl": "--heartbeat-ttl"}
    raw["spoolDir"] = os.path.abspath(os.path.expanduser(spool_dir))
    try:
        options = SourceOptions.parse({k: v for k, v in raw.items() if v is not None})
    except OptionError as exc:
        text = str(exc)
        for option, flag in flags.items():
            text = text.replace(f"option '{option}'", flag).replace(f"'{option}'", flag)
        hint = flags.get(exc.option or "")
        if hint and text.startswith(hint + ": "):
            text = text[len(hint) + 2:]
        raise typer.BadParameter(text, param_hint=f"'{hint}'" if hint else None) from None
    try:
        listen_endpoint = parse_endpoints(listen, default_bind=True)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--listen'") from None
    if len(listen_endpoint) != 1 or not listen_endpoint[0].bind:
        raise typer.BadParameter("one address to listen on, e.g. 'tcp://10.0.0.5:7000'", param_hint="'--listen'")
    curve = options.curve
    listen_curve = curve if curve is not None and curve.is_server else None
    address = listen_endpoint[0].address
    if listen_curve is None and not address.startswith(("ipc://", "inproc://", "tcp://127.", "tcp://localhost:")):
        _err.print(f"[yellow]warning:[/] {escape(address)} serves the spool without CURVE: anyone who reaches it "
                   "can read the messages (see --curve-certificate / --curve-authorized-keys)")
    try:
        code = serve(options, address, listen_curve)
    except Exception as exc:  # a bind error, a locked spool: the reason, not a trace
        _error(f"{type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    raise typer.Exit(code)


@app.command("broker")
def broker_command(
    frontend: str = typer.Option(..., "--frontend", help="Where clients (DEALER or REQ, e.g. "
                                 "spark_zmq.patterns.Client) reach the broker: '@tcp://*:5559' binds (the default), "
                                 "'>tcp://host:port' connects."),
    backend: str = typer.Option(..., "--backend", help="Where workers (REQ, e.g. spark_zmq.worker.serve) reach the "
                                "broker: '@tcp://*:5560' binds (the default), '>tcp://host:port' connects."),
    hwm: int = typer.Option(1000, "--hwm", min=1, help="Requests that may wait in the broker while no worker is "
                            "idle; beyond that it stops reading clients (backpressure). Also the sockets' "
                            "high-water marks."),
    max_message_bytes: Optional[int] = typer.Option(None, "--max-message-bytes", min=1, help="Largest message "
                                                    "accepted from a client or worker (a peer sending more is "
                                                    "disconnected). Default: no limit."),
    status_interval: float = typer.Option(10.0, "--status-interval", min=0.05, help="Seconds between status lines "
                                          "on stderr."),
    curve_certificate: Optional[str] = typer.Option(
        None, metavar="FILE", rich_help_panel=_CURVE_PANEL,
        help="The broker's secret certificate: with --curve-authorized-keys both the frontend and the backend are "
             "CURVE servers accepting those client keys (clients' and workers')."),
    curve_authorized_keys: Optional[str] = typer.Option(
        None, metavar="DIR|*", rich_help_panel=_CURVE_PANEL,
        help="Client and worker keys accepted: a directory of public certificates (*.key), or '*' for any key."),
    heartbeat_interval: float = _hb_interval(),
    heartbeat_timeout: float = _hb_timeout(),
    heartbeat_ttl: float = _hb_ttl(),
) -> None:
    """Load-balance requests from clients to workers (the ZeroMQ Guide's LRU broker), until SIGTERM/SIGINT.
    Prints a status line on stderr every --status-interval seconds."""
    for flag, value in (("--frontend", frontend), ("--backend", backend)):
        try:
            parse_endpoints(value, default_bind=True)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint=f"'{flag}'") from None
    if curve_certificate and not curve_authorized_keys:
        raise typer.BadParameter("the broker is a CURVE server on both sides, which needs --curve-authorized-keys: "
                                 "a directory of the clients' and workers' public certificate files ('*.key'), or "
                                 "'*' to accept any key", param_hint="'--curve-certificate'")
    curve = _curve_flags(curve_certificate, None, curve_authorized_keys)
    heartbeat = _heartbeat_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    try:
        broker = Broker(frontend, backend, hwm=hwm, curve_frontend=curve, curve_backend=curve, heartbeat=heartbeat,
                        max_message_bytes=max_message_bytes)
    except Exception as exc:  # a bind error (port in use, address not local): the reason, not a trace
        _error(exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}")
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

    security = f"; {curve.describe()} on both" if curve is not None else ""
    print(f"broker: frontend {', '.join(broker.frontend_addresses) or frontend}, backend "
          f"{', '.join(broker.backend_addresses) or backend}{security}", file=sys.stderr, flush=True)
    with broker:
        try:
            broker.run(stop, report=status, report_interval=status_interval)
        except Exception as exc:
            _error(f"the broker failed: {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
        print(f"broker: stopped ({stopped_by[0] if stopped_by else 'stop'}): {broker.stats().line()}",
              file=sys.stderr, flush=True)


@app.command("keygen")
def keygen_command(
    name: str = typer.Argument(..., help="Name of the pair: writes NAME.key (public) and NAME.key_secret."),
    dir: str = typer.Option(".", "--dir", "-d", help="Directory to write them to (created if missing)."),
) -> None:
    """Make a CURVE key pair: NAME.key (public: give it to the peers) and NAME.key_secret
    (mode 0600: this side's --curve-certificate / curveCertificate); prints the public key."""
    try:
        public_file, secret_file = write_key_pair(os.path.expanduser(dir), name)
        public = load_public_key(public_file, None).decode()
    except (OSError, ValueError) as exc:  # an existing pair, a bad name, an unwritable directory
        _error(str(exc))
        raise typer.Exit(1) from None
    typer.echo(f"public key: {public}")
    typer.echo(f"public certificate: {public_file}  (a server's --curve-server-key, or a client's entry in "
               "the server's authorized keys directory)")
    typer.echo(f"secret certificate: {secret_file}  (this side's --curve-certificate; keep it private)")


def main() -> None:
    """Entry point of the ``spark-zmq`` console script."""
    app()


if __name__ == "__main__":
    sys.exit(main())
