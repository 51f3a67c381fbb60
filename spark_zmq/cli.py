"""``spark-zmq``: send and receive test traffic from a terminal.

    spark-zmq produce tcp://127.0.0.1:5555 --count 100000 --rate 20000 --format json
    spark-zmq consume @tcp://*:5556 --format arrow --count 10

Why a CLI: a connector is first tried from a shell; ``produce`` is the load generator the
jobs, notebooks and benchmarks use (``spark_zmq.loadgen``), ``consume`` shows what a Spark
job sends. Built on typer (arguments, ``--help``, usage errors with exit code 2) and rich
(live progress on stderr, so printed messages on stdout stay clean for pipes).
"""

from __future__ import annotations

import enum
import json
import sys
import time
from typing import List, Optional

import pyarrow as pa
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import loadgen
from .patterns import Gather, Pull, Sub, parse_endpoints

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
) -> None:
    """Send numbered sensor readings (a load generator); prints what was sent."""
    _check_endpoints(endpoints, default_bind=loadgen.PATTERNS[pattern.value].default_bind)
    with _progress(count, progress, "produce") as bar:
        task = bar.add_task("produce", total=count, rate=0.0)
        started = time.monotonic()

        def on_progress(sent: int) -> None:
            bar.update(task, completed=sent, rate=sent / max(time.monotonic() - started, 1e-9))

        try:
            result = loadgen.produce(endpoints, pattern=pattern.value, format=format.value, count=count, rate=rate,
                                     size=size, rows_per_message=rows_per_message, topics=topic, hwm=hwm,
                                     send_timeout=send_timeout, start=start,
                                     linger=linger, on_progress=on_progress)
        except TimeoutError as exc:
            _err.print(f"[red]error:[/] {exc}")
            raise typer.Exit(1) from None
        except Exception as exc:  # zmq errors (address in use, ...): one line, not a traceback
            _err.print(f"[red]error:[/] {type(exc).__name__}: {exc}")
            raise typer.Exit(1) from None
    typer.echo(f"sent {result.messages} messages ({result.rows} rows, {result.bytes} bytes) "
               f"in {result.seconds:.2f} s: {result.rate:,.0f} msg/s")


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
) -> None:
    """Receive messages and count them (or print them) with a live rate; prints a summary."""
    cls = {"pull": Pull, "gather": Gather, "sub": Sub}[pattern.value]
    _check_endpoints(endpoints, default_bind=cls.default_bind)
    options = {"topics": topic or [""]} if pattern is ConsumePattern.sub else {}
    messages = rows = size = 0
    try:
        sock = cls(endpoints, **options)
    except Exception as exc:
        _err.print(f"[red]error:[/] cannot open {pattern.value} on {endpoints}: {exc}")
        raise typer.Exit(1) from None
    started = last = time.monotonic()
    with sock, _progress(count, progress, "consume") as bar:
        task = bar.add_task("consume", total=count, rate=0.0)
        try:
            while count is None or messages < count:
                wait = None if timeout is None else max(0.0, last + timeout - time.monotonic())
                try:
                    values, topics = sock.recv_values(min(1024, (count or 1 << 30) - messages), timeout=wait)
                except TimeoutError:
                    break
                last = time.monotonic()
                if not messages:
                    started = last  # the rate counts from the first message, not from start-up
                if format is not Format.arrow and not print_messages:
                    rows += len(values)  # counting only: one row per message, nothing to decode
                else:
                    for i, value in enumerate(values):
                        table = pa.ipc.open_stream(value).read_all() if format is Format.arrow else None
                        rows += table.num_rows if table is not None else 1
                        if print_messages:
                            topic = topics[i] if topics else None
                            prefix = f"[{topic.decode(errors='replace')}] " if topic is not None else ""
                            typer.echo(prefix + _describe(value, format, table))
                messages += len(values)
                size += sum(map(len, values))
                bar.update(task, completed=messages, rate=messages / max(last - started, 1e-9))
        except KeyboardInterrupt:
            pass
        except Exception as exc:  # undecodable arrow etc.: say which message
            _err.print(f"[red]error:[/] message {messages + 1} is not valid {format.value}: {exc}")
            raise typer.Exit(1) from None
    seconds = max(last - started, 1e-9)
    typer.echo(f"received {messages} messages ({rows} rows, {size} bytes) in {seconds:.2f} s: "
               f"{messages / seconds:,.0f} msg/s")
    if count is not None and messages < count:
        _err.print(f"[red]error:[/] received {messages} of {count} messages before {timeout} s passed without one")
        raise typer.Exit(1)


def main() -> None:
    """Entry point of the ``spark-zmq`` console script."""
    app()


if __name__ == "__main__":
    sys.exit(main())
