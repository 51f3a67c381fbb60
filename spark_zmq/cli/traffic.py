"""``spark-zmq produce`` and ``consume``: test traffic into and out of a job.

``produce`` is the load generator (``spark_zmq.cli.loadgen``) the jobs, notebooks and
benchmarks use; ``consume`` counts or prints what a Spark job sends, with a live rate.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import typer
from rich.markup import escape

from ..arrow import run_metadata
from ..patterns import Gather, Pull, Sub
from . import loadgen
from .console import err_console, print_error, progress_bar
from .flags import (
    CURVE_PANEL,
    ConsumePattern,
    Format,
    ProducePattern,
    check_endpoints,
    checked_curve_flags,
    heartbeat_from_flags,
    heartbeat_interval_option,
    heartbeat_timeout_option,
    heartbeat_ttl_option,
)
from .source_flags import option_flag

__all__ = ["produce", "consume"]


def produce(
    endpoints: str = typer.Argument(
        ..., help="Where to send: 'tcp://host:port' connects, '@tcp://*:port' binds; comma-separated for several peers."
    ),
    pattern: ProducePattern = option_flag(
        "pattern", side="sink", table_default=True, help="push (round-robin), scatter, or pub (topics)."
    ),
    format: Format = typer.Option(Format.json, "--format", "-f", help="Message format (see spark_zmq.cli.loadgen)."),
    count: int = typer.Option(1000, "--count", "-n", min=0, help="Messages to send."),
    rate: float | None = typer.Option(None, min=0.001, help="Messages per second (default: as fast as possible)."),
    size: int = typer.Option(100, min=8, help="Payload bytes per raw message."),
    rows_per_message: int = typer.Option(1000, min=1, help="Rows in each arrow message."),
    topic: list[str] = typer.Option(["sensors"], help="Topic(s) for pub, used in turn; repeat the option."),
    hwm: int = typer.Option(10_000, min=0, help="Send high-water mark (messages)."),
    send_timeout: float | None = typer.Option(
        None, min=0, help="Give up after this many seconds without a peer able to take a message (push/scatter)."
    ),
    start: int = typer.Option(0, min=0, help="First sequence number."),
    linger: float = typer.Option(
        30.0, min=0, help="Seconds to keep delivering queued messages after the last send (to peers that connect late)."
    ),
    peer_wait: float = typer.Option(
        300.0,
        min=0,
        help="push/scatter: seconds to wait after the last send for a "
        "first peer when none has connected yet (a query still "
        "starting); then the run fails, saying the queued messages "
        "were dropped.",
    ),
    progress: bool = typer.Option(True, help="Show live progress on stderr."),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        side="sink",
        panel=CURVE_PANEL,
        help="This side's secret certificate (NAME.key_secret): with --curve-server-key a CURVE client, with "
        "--curve-authorized-keys a CURVE server.",
    ),
    curve_server_key: str | None = option_flag(
        "curveServerKey",
        side="sink",
        panel=CURVE_PANEL,
        help="The CURVE server's public key: its certificate file (NAME.key) or 40-character Z85 text.",
    ),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys",
        side="sink",
        panel=CURVE_PANEL,
        help="As a CURVE server: a directory of the clients' public certificates (*.key, or CZMQ's certificate store), or '*' for any key.",
    ),
    heartbeat_interval: float = heartbeat_interval_option("sink"),
    heartbeat_timeout: float = heartbeat_timeout_option("sink"),
    heartbeat_ttl: float = heartbeat_ttl_option("sink"),
) -> None:
    """Send numbered sensor readings (a load generator); prints what was sent."""
    check_endpoints(endpoints, default_bind=loadgen.PATTERNS[pattern.value].default_bind)
    curve = checked_curve_flags(curve_certificate, curve_server_key, curve_authorized_keys)
    heartbeat = heartbeat_from_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    with progress_bar(count, progress, "produce") as bar:
        task = bar.add_task("produce", total=count, rate=0.0)
        started = time.monotonic()

        def on_progress(sent: int) -> None:
            bar.update(task, completed=sent, rate=sent / max(time.monotonic() - started, 1e-9))

        try:
            result = loadgen.produce(
                endpoints,
                pattern=pattern.value,
                format=format.value,
                count=count,
                rate=rate,
                size=size,
                rows_per_message=rows_per_message,
                topics=topic,
                hwm=hwm,
                send_timeout=send_timeout,
                start=start,
                linger=linger,
                peer_wait=peer_wait,
                on_progress=on_progress,
                curve=curve,
                heartbeat=heartbeat,
            )
        except (TimeoutError, loadgen.HandshakeRejectedError, loadgen.NoPeerError) as exc:
            print_error(str(exc))
            raise typer.Exit(1) from None
        except Exception as exc:  # zmq errors (address in use, ...): one line, not a traceback  # noqa: BLE001
            print_error(f"{type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
    typer.echo(
        f"sent {result.messages} messages ({result.rows} rows, {result.bytes} bytes) "
        f"in {result.seconds:.2f} s: {result.rate:,.0f} msg/s"
    )
    if result.rejected_handshakes:
        err_console.print(
            "[yellow]warning:[/] "
            + escape(f"{result.rejected_handshakes} CURVE handshake(s) rejected (last: {result.last_rejection})")
        )


def _describe(payload: bytes, fmt: Format, table: pa.Table | None) -> str:
    """A printable line for a message (``table``: the decoded Arrow message)."""
    if table is not None:
        head = json.dumps(table.slice(0, 1).to_pylist()[0], default=str) if table.num_rows else "{}"
        return f"arrow: {table.num_rows} rows, columns {table.column_names}, first {head}"
    if fmt is Format.raw:
        return payload[:64].hex() + ("..." if len(payload) > 64 else "")
    return payload.decode("utf-8", errors="replace")


def consume(
    endpoints: str = typer.Argument(
        ...,
        help="Where to receive: '@tcp://*:port' binds (default for pull/gather), "
        "'>tcp://host:port' connects (default for sub).",
    ),
    pattern: ConsumePattern = option_flag("pattern", table_default=True, help="pull, gather, or sub."),
    format: Format = option_flag("format", "-f", table_default=True, help="How to print and count messages."),
    topic: list[str] | None = option_flag(
        "topics", "--topic", metavar=None, help="Topic prefix(es) for sub; repeat the option."
    ),
    count: int | None = typer.Option(
        None, "--count", "-n", min=1, help="Stop after this many messages (exit 1 if --timeout ends first)."
    ),
    timeout: float | None = typer.Option(None, min=0, help="Stop after this many seconds with no message."),
    print_messages: bool = typer.Option(False, "--print", help="Print each message on stdout."),
    progress: bool = typer.Option(True, help="Show the live rate on stderr."),
    curve_certificate: str | None = option_flag(
        "curveCertificate",
        panel=CURVE_PANEL,
        help="This side's secret certificate (NAME.key_secret): with --curve-authorized-keys a CURVE server, "
        "with --curve-server-key a CURVE client.",
    ),
    curve_server_key: str | None = option_flag(
        "curveServerKey",
        panel=CURVE_PANEL,
        help="As a CURVE client: the server's public key, its certificate file (NAME.key) or 40-character Z85 text.",
    ),
    curve_authorized_keys: str | None = option_flag(
        "curveAuthorizedKeys",
        panel=CURVE_PANEL,
        help="As a CURVE server: a directory of the clients' public certificates (*.key, or CZMQ's certificate store), or '*' for any key; "
        "rejected handshakes are counted in the summary.",
    ),
    heartbeat_interval: float = heartbeat_interval_option("sink"),
    heartbeat_timeout: float = heartbeat_timeout_option("sink"),
    heartbeat_ttl: float = heartbeat_ttl_option("sink"),
) -> None:
    """Receive messages and count them (or print them) with a live rate; prints a summary."""
    cls = {"pull": Pull, "gather": Gather, "sub": Sub}[pattern.value]
    check_endpoints(endpoints, default_bind=cls.default_bind)
    curve = checked_curve_flags(curve_certificate, curve_server_key, curve_authorized_keys)
    options: dict = {"topics": topic or [""]} if pattern is ConsumePattern.sub else {}
    options["heartbeat"] = heartbeat_from_flags(heartbeat_interval, heartbeat_timeout, heartbeat_ttl)
    if curve is not None:
        options["curve"] = curve
    messages = rows = size = records = records_before = 0
    try:
        sock = cls(endpoints, **options)
    except Exception as exc:  # noqa: BLE001
        print_error(f"cannot open {pattern.value} on {endpoints}: {exc}")
        raise typer.Exit(1) from None
    watch = sock.handshakes if curve is not None else None
    started = last = watched = time.monotonic()
    with sock, progress_bar(count, progress, "consume") as bar:
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
                        if table is not None and run_metadata.is_commit_record(table.schema.metadata):
                            records += 1  # the sink's commit record: no rows, not a data message
                            continue
                        rows += table.num_rows if table is not None else 1
                        if print_messages:
                            message_topic = topics[i] if topics else None
                            prefix = f"[{message_topic.decode(errors='replace')}] " if message_topic is not None else ""
                            typer.echo(prefix + _describe(value, format, table))
                messages += len(values) - (records - records_before)
                records_before = records
                size += sum(map(len, values))
                bar.update(task, completed=messages, rate=messages / max(last - started, 1e-9))
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # undecodable arrow etc.: say which message  # noqa: BLE001
            print_error(f"message {messages + 1} is not valid {format.value}: {exc}")
            raise typer.Exit(1) from None
        finally:
            if watch is not None:
                watch.poll()  # before the socket (and its monitor) closes
    seconds = max(last - started, 1e-9)
    typer.echo(
        f"received {messages} messages ({rows} rows, {size} bytes) in {seconds:.2f} s: "
        f"{messages / seconds:,.0f} msg/s" + (f"; and {records} commit record(s) of the zmq sink" if records else "")
    )
    rejected = (
        f"{watch.rejected} CURVE handshake(s) rejected (last: {watch.last_rejection})"
        if watch is not None and watch.rejected
        else None
    )
    if count is not None and messages < count:
        print_error(
            f"received {messages} of {count} messages before {timeout} s passed without one"
            + (f"; {rejected}" if rejected else "")
        )
        raise typer.Exit(1)
    if rejected:
        err_console.print("[yellow]warning:[/] " + escape(rejected))
