"""``spark-zmq``: test traffic, relays, the request-reply broker and CURVE keys from a terminal.

    spark-zmq produce tcp://127.0.0.1:5555 --count 100000 --rate 20000 --format json
    spark-zmq consume @tcp://*:5556 --format arrow --count 10
    spark-zmq keygen server --dir keys/      # CURVE: keys/server.key, keys/server.key_secret
    spark-zmq broker --frontend @tcp://127.0.0.1:5559 --backend @tcp://127.0.0.1:5560   # request-reply broker

Why a CLI: a connector is first tried from a shell; ``produce`` is the load generator the
jobs, notebooks and benchmarks use (``spark_zmq.cli.loadgen``), ``consume`` shows what a Spark
job sends, ``broker`` is the load-balancing broker between request-reply clients (such as
``spark_zmq.requestreply.Client``) and workers (``spark_zmq.worker.serve``). Built on typer
(arguments, ``--help``, usage errors with exit code 2) and rich (live progress on stderr,
so printed messages on stdout stay clean for pipes).

``--curve-certificate``, ``--curve-server-key`` and ``--curve-authorized-keys`` mean what
the data source options ``curveCertificate``, ``curveServerKey`` and
``curveAuthorizedKeys`` mean, and are checked by the same rules (``curve_from_flags``),
so a key pair can be tried from a shell before a job uses it.

The subcommands live by group (``traffic``: produce, consume; ``servers``: relay and
its readers; ``broker``: broker; ``ping``: the probe of all three services; ``keys``: keygen), what they share in ``flags`` and ``console``, and their flags
that stand for options are made from the options table by ``source_flags``; this module
assembles them into ``app``.
"""

from __future__ import annotations

import typer

from .flags import CURVE_FLAGS, ConsumePattern, Format, ProducePattern, curve_from_flags
from .keys import keygen_command
from .ping import ping_command
from .servers import broker_command, relay_command, relay_readers_command
from .traffic import consume, produce

__all__ = [
    "app",
    "main",
    "curve_from_flags",
    "CURVE_FLAGS",
    "ProducePattern",
    "ConsumePattern",
    "Format",
    "produce",
    "consume",
    "relay_command",
    "relay_readers_command",
    "broker_command",
    "keygen_command",
    "ping_command",
]

app = typer.Typer(
    name="spark-zmq",
    help="spark-zmq's companion program: send and count test traffic (produce, consume), run a standalone "
    "relay that receives and spools for Spark queries (relay), list or remove a relay's readers (relay-readers), "
    "run the load-balancing broker of request-reply (broker), ask a relay, broker or worker whether it serves "
    "(ping), and make CURVE key pairs (keygen).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"spark-zmq {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """spark-zmq's companion program (see ``app``)."""


app.command()(produce)
app.command()(consume)
app.command("relay")(relay_command)
app.command("relay-readers")(relay_readers_command)
app.command("broker")(broker_command)
app.command("keygen")(keygen_command)
app.command("ping")(ping_command)


def main() -> None:
    """Entry point of the ``spark-zmq`` console script."""
    app()
