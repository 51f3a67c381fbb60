"""Where Spark's executors run, as far as the driver's Python process can tell.

Why: the spool fetch service is a listening port. It must not exist when every executor
reads the spool directly (``local[N]`` and ``local-cluster[...]`` masters run executors
on the driver's host, as the driver's user), and nothing in a Python data source's
process says which master the application uses: Spark passes no configuration to it.
The SparkSubmit JVM that launched this process does carry the master on its command line
(``--master X`` from spark-submit, ``--conf spark.master=X`` when a Python program's
``SparkSession.builder.master(X)`` started the JVM), so this module looks there, through
``/proc``. When it cannot tell (another OS, a master set only in ``spark-defaults.conf``),
the answer is "unknown" and the caller keeps the service (authenticated and encrypted).
"""

from __future__ import annotations

import os

from .. import procstat

__all__ = ["spark_master", "spark_conf", "submit_process", "executors_share_host", "needs_fetch_service", "local_cores"]

_SUBMIT_CLASS = b"org.apache.spark.deploy.SparkSubmit"
_MAX_DEPTH = 8
#: spark-submit options that take no value
_FLAGS = frozenset({b"--verbose", b"--supervise", b"--help", b"--version", b"--usage-error"})


def conf_from_command_line(args: list[bytes]) -> dict[str, str]:
    """The Spark configuration a SparkSubmit command line sets: every ``--conf key=value``
    and ``--master`` (as ``spark.master``); the last one of a key wins, as in spark-submit.
    What follows the application (a ``.py``/``.jar`` file or ``pyspark-shell``) is the
    application's own arguments and is not read."""
    if _SUBMIT_CLASS not in args:
        return {}
    conf: dict[str, str] = {}
    start = args.index(_SUBMIT_CLASS) + 1
    for i in range(start, len(args)):
        arg, previous = args[i], args[i - 1]
        takes_value = previous.startswith(b"--") and b"=" not in previous and previous not in _FLAGS
        if not arg.startswith(b"-") and not takes_value:
            break  # the application (a .py/.jar file or pyspark-shell): its own arguments follow
        setting: bytes | None = None
        if arg == b"--master" and i + 1 < len(args):
            setting = b"spark.master=" + args[i + 1]
        elif arg.startswith(b"--master="):
            setting = b"spark.master=" + arg[len(b"--master=") :]
        elif arg == b"--conf" and i + 1 < len(args):
            setting = args[i + 1]
        elif arg.startswith(b"--conf="):
            setting = arg[len(b"--conf=") :]
        if setting is not None and b"=" in setting:
            key, _, value = setting.decode("utf-8", "replace").partition("=")
            conf[key.strip()] = value.strip()
    return conf


def master_from_command_line(args: list[bytes]) -> str | None:
    """The master a SparkSubmit command line names, or ``None``."""
    return conf_from_command_line(args).get("spark.master") or None


def submit_process(pid: int | None = None) -> int | None:
    """The pid of the nearest SparkSubmit ancestor of ``pid`` (this process), or ``None``."""
    current: int | None = pid or os.getpid()
    for _ in range(_MAX_DEPTH):
        if current is None or current <= 1:
            return None
        if _SUBMIT_CLASS in procstat.cmdline(current):
            return current
        current = procstat.parent_of(current)
    return None


def defaults_file_conf(environment: dict[str, str]) -> dict[str, str]:
    """What ``spark-defaults.conf`` sets, found as spark-submit finds it (``SPARK_CONF_DIR``,
    else ``SPARK_HOME/conf``) in ``environment``; ``{}`` when there is none."""
    directory = environment.get("SPARK_CONF_DIR") or (
        os.path.join(environment["SPARK_HOME"], "conf") if environment.get("SPARK_HOME") else None
    )
    if not directory:
        return {}
    conf: dict[str, str] = {}
    try:
        with open(os.path.join(directory, "spark-defaults.conf"), encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                parts = line.split(None, 1) if "=" not in line.split(None, 1)[0] else line.split("=", 1)
                if len(parts) == 2:
                    conf[parts[0].strip()] = parts[1].strip()
    except OSError:
        return {}
    return conf


def spark_conf(pid: int | None = None) -> dict[str, str]:
    """The driver's Spark configuration as far as this process can see it (``submit_conf``
    of the nearest SparkSubmit ancestor of ``pid``)."""
    return submit_conf(submit_process(pid))


def submit_conf(submit: int | None) -> dict[str, str]:
    """The Spark configuration of the SparkSubmit JVM ``submit``: its ``spark-defaults.conf``
    overridden by its command line (which holds everything a Python program's
    ``SparkSession.builder.config(...)`` set). ``{}`` for ``None`` (no SparkSubmit ancestor:
    the caller then knows nothing, and says so)."""
    if submit is None:
        return {}
    return {**defaults_file_conf(procstat.environ(submit)), **conf_from_command_line(procstat.cmdline(submit))}


def spark_master(pid: int | None = None) -> str | None:
    """The master URL from the nearest SparkSubmit ancestor of ``pid`` (this process), or
    ``None`` when no ancestor names one."""
    return spark_conf(pid).get("spark.master") or None


def executors_share_host(master: str | None = None) -> bool:
    """``True`` only when the master is known to run every executor on this host."""
    master = master if master is not None else spark_master()
    return master is not None and master.strip().lower().startswith("local")


def needs_fetch_service(spool_access: str) -> bool:
    """Whether the driver must serve the spool over the network: always for
    ``spoolAccess=fetch``, never for ``local``, and for ``auto`` unless Spark's master is
    known to run every executor on this host (``executors_share_host``)."""
    if spool_access == "auto":
        return not executors_share_host()
    return spool_access == "fetch"


def local_cores(master: str | None = None) -> int | None:
    """The task slots of a local master (``local`` 1, ``local[N]`` and ``local[N,F]`` N,
    ``local[*]`` this machine's cores, ``local-cluster[W,C,M]`` W x C), or ``None`` for any
    other master or none known: read tasks are then cut by size alone. Why: each read task
    costs Spark a fixed ~0.1 s (launch, a Python worker's set-up); cutting a backlog into
    more tasks than there are slots only adds those."""
    master = (master if master is not None else spark_master() or "").strip().lower()
    if master == "local":
        return 1
    for prefix in ("local-cluster[", "local["):
        if master.startswith(prefix) and master.endswith("]"):
            fields = [f.strip() for f in master[len(prefix) : -1].split(",")]
            try:
                if prefix == "local-cluster[":
                    return max(1, int(fields[0]) * int(fields[1])) if len(fields) == 3 else None
                return (os.cpu_count() or 1) if fields[0] == "*" else max(1, int(fields[0]))
            except ValueError:
                return None
    return None
