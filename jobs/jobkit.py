"""What every example job shares: a SparkSession with the project's settings, argument
checks that end in a usage message (exit 2) rather than a traceback, and a summary line.

Why a module next to the jobs rather than in the package: it reads ``conf/`` from this
checkout, which an installed ``spark_zmq`` does not carry. ``spark-submit jobs/x.py`` puts
``jobs/`` on ``sys.path``, so ``import jobkit`` works there and in tests.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import this interpreter

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "spark-defaults.conf")


def session(app_name: str, master: str | None = None):
    """A SparkSession with conf/spark-defaults.conf applied, Python workers on this
    interpreter and the ``zmq`` format registered. ``master`` overrides the conf; under
    ``spark-submit --master`` pass ``None`` and Spark's own setting wins.

    Spark reads the file itself (java.util.Properties: ``key value``, ``key<TAB>value``,
    ``key=value``, ``key:value``, ``#``/``!`` comments, continued lines). Under plain
    ``python`` it is the properties file of the JVM that pyspark starts (as with
    ``spark-submit --properties-file conf/spark-defaults.conf --load-spark-defaults``).
    Under spark-submit the JVM already has spark-submit's settings (``--conf``, ``--master``,
    ``--properties-file`` or ``SPARK_CONF_DIR/spark-defaults.conf``); those win, and the
    file only fills in the keys they leave unset (likewise under ``python`` when
    PYSPARK_SUBMIT_ARGS names its own ``--properties-file``)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    submit_args = os.environ.get("PYSPARK_SUBMIT_ARGS")
    try:
        if _jvm_started() or not _use_properties_file():
            for key, value in _unset_defaults().items():
                builder = builder.config(key, value)
        if master:
            builder = builder.master(master)
        spark = builder.config("spark.pyspark.python", sys.executable).getOrCreate()
    finally:  # only this JVM's launch needed it
        if submit_args is None:
            os.environ.pop("PYSPARK_SUBMIT_ARGS", None)
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args
    spark.sparkContext.setLogLevel("ERROR")
    import spark_zmq

    spark_zmq.register(spark)
    return spark


def _jvm_started() -> bool:
    """True when Spark's JVM is already up: spark-submit started this driver (it has
    applied its own settings and chosen the master: ``--master``, or its default), or
    this process has launched it before."""
    from pyspark import SparkContext

    return "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None


def _use_properties_file() -> bool:
    """Make CONF the properties file of the JVM that pyspark is about to launch; False if
    PYSPARK_SUBMIT_ARGS already names one. ``--load-spark-defaults`` keeps
    ``SPARK_CONF_DIR/spark-defaults.conf`` (if any) underneath it."""
    if not os.path.exists(CONF):
        return True  # nothing to apply
    args = shlex.split(os.environ.get("PYSPARK_SUBMIT_ARGS", "pyspark-shell"))
    if any(arg == "--properties-file" or arg.startswith("--properties-file=") for arg in args):
        return False
    os.environ["PYSPARK_SUBMIT_ARGS"] = shlex.join(["--properties-file", CONF, "--load-spark-defaults", *args])
    return True


def _unset_defaults() -> dict[str, str]:
    """CONF's settings, parsed by Spark (``Utils.getPropertiesFromFile``, what
    spark-submit uses for a properties file), that the running JVM has not been given."""
    if not os.path.exists(CONF):
        return {}
    from pyspark import SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM (or launches pyspark's)
    jvm = SparkContext._jvm
    given = jvm.org.apache.spark.SparkConf(True)  # spark-submit's settings, as system properties
    parsed = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        jvm.org.apache.spark.util.Utils.getPropertiesFromFile(CONF)
    )
    return {key: value for key, value in dict(parsed).items() if not given.contains(key)}


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser whose description is the job's docstring."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def add_common(p: argparse.ArgumentParser) -> None:
    """--master, and the AvailableNow switch every job has."""
    p.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's --master, else conf/spark-defaults.conf)"
    )
    p.add_argument(
        "--available-now",
        action="store_true",
        help="process what producers have sent until --idle-timeout seconds pass without a "
        "message, then stop (Trigger.AvailableNow); default: run until interrupted",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=5.0,
        help="seconds without a message that end an --available-now run (default 5)",
    )
    p.add_argument(
        "--trigger-seconds",
        type=float,
        default=0.0,
        help="micro-batch interval when running continuously (default 0: as fast as possible)",
    )
    add_fetch(p)


def add_fetch(p: argparse.ArgumentParser) -> None:
    """--spool-server-host and --spool-server-port: where executors on other hosts fetch the
    driver's spool (source options spoolServerHost and spoolServerPort)."""
    group = p.add_argument_group("On a cluster", "Executors on other hosts fetch the spool from the driver.")
    group.add_argument(
        "--spool-server-host",
        metavar="ADDRESS",
        help="the driver's address executors reach (default: Spark's spark.driver.host, else "
        "SPARK_LOCAL_IP, else this host's address towards the master); option spoolServerHost",
    )
    group.add_argument(
        "--spool-server-port",
        metavar="PORT|FIRST-LAST",
        help="the fetch service's port, or a range with one port per endpoint (default: any free "
        "port); open it from the executors to the driver; option spoolServerPort",
    )


def fetch_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options for --spool-server-host/--spool-server-port (``{}`` for none)."""
    options = {}
    if getattr(args, "spool_server_host", None):
        options["spoolServerHost"] = args.spool_server_host
    if getattr(args, "spool_server_port", None):
        options["spoolServerPort"] = args.spool_server_port
    return options


def add_curve(p: argparse.ArgumentParser, prefix: str = "", side: str = "the ZeroMQ source") -> argparse._ArgumentGroup:
    """--curve-certificate, --curve-server-key, --curve-authorized-keys: the data source
    options curveCertificate, curveServerKey, curveAuthorizedKeys of ``side`` (``prefix``
    names another side's flags, e.g. ``sink-`` for --sink-curve-certificate). Returns the
    help group, for a job's own CURVE flags."""
    group = p.add_argument_group(
        f"CURVE security of {side}",
        "Encrypt and authenticate with CurveZMQ (make key pairs with 'spark-zmq keygen NAME').\n"
        "A CURVE server gives its certificate and the client keys it accepts; a CURVE client\n"
        "gives its certificate and the server's public key. Which side binds does not matter.",
    )
    group.add_argument(
        f"--{prefix}curve-certificate",
        metavar="FILE",
        help="this side's secret certificate file (NAME.key_secret); option curveCertificate",
    )
    group.add_argument(
        f"--{prefix}curve-server-key",
        metavar="FILE|Z85",
        help="as a CURVE client: the server's public key, its certificate file (NAME.key) or "
        "40-character Z85 text (Z85 may begin with '-': then write "
        f"--{prefix}curve-server-key=KEY); option curveServerKey",
    )
    group.add_argument(
        f"--{prefix}curve-authorized-keys",
        metavar="DIR|*",
        help="as a CURVE server: a directory of the clients' public certificates (*.key), or '*' "
        "for any client key (encryption only); option curveAuthorizedKeys",
    )
    return group


def curve_options(
    p: argparse.ArgumentParser, args: argparse.Namespace, prefix: str = "", certificate: str | None = None
) -> dict[str, str]:
    """The data source options for the --{prefix}curve-* flags given (``{}`` for none),
    checked now with the connector's own rules: a missing file, a bad key or a wrong
    combination is a usage error (exit 2) naming the flag, before Spark starts rather
    than when the first task opens a socket. ``certificate`` stands in for a missing
    --{prefix}curve-certificate once another of these flags is given (a stage's one
    identity on both sides). Paths become absolute: Spark's processes run elsewhere."""
    from spark_zmq.cli import curve_from_flags
    from spark_zmq.patterns.curve_keys import ANY_KEY, CurveError

    attr = prefix.replace("-", "_")
    given = [getattr(args, f"{attr}curve_{name}") for name in ("certificate", "server_key", "authorized_keys")]
    if given[0] is None and (given[1] is not None or given[2] is not None):
        given[0] = certificate
    flags = [f"--{prefix}curve-{name}" for name in ("certificate", "server-key", "authorized-keys")]
    try:
        curve_from_flags(*given, flags=flags)
    except CurveError as exc:
        p.error(str(exc))
    options: dict[str, str] = {}
    for option, value in zip(("curveCertificate", "curveServerKey", "curveAuthorizedKeys"), given):
        if value is None or not value.strip():
            continue
        text = os.path.expanduser(value.strip())
        if text != ANY_KEY and os.path.exists(text):  # a file or directory; else Z85 text, kept as given
            text = os.path.abspath(text)
        options[option] = text
    return options


def check_positive(p: argparse.ArgumentParser, args: argparse.Namespace, *names: str) -> None:
    """Reject non-positive numeric arguments with a usage message (exit 2)."""
    for name in names:
        value = getattr(args, name)
        if value is not None and value <= 0:
            p.error(f"--{name.replace('_', '-')} must be > 0, got {value}")


def trigger(args: argparse.Namespace) -> dict:
    """The ``DataStreamWriter.trigger`` keyword for the common arguments."""
    if args.available_now:
        return {"availableNow": True}
    return {"processingTime": f"{args.trigger_seconds} seconds"}


def run_query(query) -> None:
    """Wait for the query; Ctrl-C stops it cleanly (the checkpoint stays consistent)."""
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


def spool_dir(p: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """--spool-dir, or ``<checkpoint>/zmq-spool`` when the checkpoint is a local path (the
    spool is a local directory on the driver; it cannot live on HDFS or S3)."""
    # absolute: the connector refuses a relative spoolDir (its processes run elsewhere)
    if args.spool_dir:
        return os.path.abspath(os.path.expanduser(args.spool_dir))
    if "://" in args.checkpoint and not args.checkpoint.startswith("file://"):
        p.error(f"--spool-dir is required when --checkpoint is not a local path ({args.checkpoint})")
    return os.path.abspath(os.path.join(args.checkpoint.removeprefix("file://"), "zmq-spool"))


def rows_in(query) -> int:
    """Input rows over the query's recent progress reports (Spark keeps the last 100)."""
    return sum(p["numInputRows"] for p in query.recentProgress)


def finish(spark, query, job: str, summary: str) -> int:
    """Print the job's summary line, stop Spark, and return the exit code: 1 with the
    reason on stderr if the query failed."""
    error = query.exception()
    print(f"{job}: {summary}")
    spark.stop()
    if error is not None:
        print(f"{job} FAILED: {error}", file=sys.stderr)
        return 1
    return 0
