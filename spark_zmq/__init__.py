"""spark-zmq: ZeroMQ for Apache Spark Structured Streaming.

Installed, the ``zmq`` data source needs no import: Spark discovers it in every session
(the ``pyspark_zmq`` module). ``spark_zmq.register(spark)`` registers it explicitly (a
session whose Python cannot list the installed package) and guards against a race in
Spark when two streaming queries start at once (``sparkglue.worker_env``); ``import spark_zmq``
does it for the active session, if there is one. Either lets writes from any Python
thread find the source (``sparkglue.thread_session``). ``spark_zmq.request(df, endpoints, ...)``
calls a ZeroMQ service for every row of a DataFrame. The pattern layer,
``spark_zmq.patterns``, works without Spark.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def _version() -> str:
    """The version declared once, in ``pyproject.toml``: the installed distribution's
    metadata, or, in a checkout that is not installed, the file itself (``0+unknown`` when
    neither is there)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spark-zmq")
    except PackageNotFoundError:
        import os
        import re

        try:
            with open(
                os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml"),
                encoding="utf-8",
            ) as f:
                found = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
        except OSError:
            found = None
        return found.group(1) if found else "0+unknown"


__version__ = _version()
__all__ = ["register", "request", "__version__"]


def register(spark: SparkSession | None = None) -> SparkSession:
    """Register the ``zmq`` data source on ``spark`` (default: the active session)."""
    from pyspark.sql import SparkSession

    from .sparkglue.datasource import ZmqDataSource
    from .sparkglue.thread_session import install
    from .sparkglue.worker_env import seed_worker_environment

    session = spark or SparkSession.getActiveSession()
    if session is None:
        raise RuntimeError(
            "spark_zmq.register() needs a SparkSession: create one first "
            "(SparkSession.builder.getOrCreate()) or pass it as register(spark)"
        )
    if not _known(session, ZmqDataSource.name()):
        session.dataSource.register(ZmqDataSource)
    seed_worker_environment(session, ZmqDataSource.name())
    install()  # writes from any thread find the source (see thread_session)
    return session


def _known(session: SparkSession, name: str) -> bool:
    """Whether ``name`` is already a data source of ``session`` (Spark discovered the
    installed package, or it was registered before): registering again would only make
    Spark log that it replaced it. False where the session has no JVM (Spark Connect)."""
    try:
        return bool(session._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception:  # Spark Connect, or the internals of another Spark version  # noqa: BLE001
        return False


def request(
    df: DataFrame, endpoints: str | list[str], *, reply_schema: str | StructType | None = None, **options: object
) -> DataFrame:
    """``df``'s columns followed by the reply of a ZeroMQ service called with its rows: one
    output row per input row, in input order, for batch and streaming DataFrames. Options
    (``format``, ``batchRows``, ``maxInFlight``, ``timeout``, ``retries``, ``mode``, CURVE,
    ...) are keyword arguments; the README's "Calling services" lists them. Calls are at
    least once: the service must be idempotent."""
    from .requester.transform import request as _request

    return _request(df, endpoints, reply_schema=reply_schema, **options)


def _register_on_active_session() -> None:
    # A process that has not imported pyspark has no session to register on; importing it
    # here would load Spark into relays, receiver processes and services that never use it.
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    from .sparkglue.thread_session import install

    install()  # writes from any thread find the source (see thread_session)

    if SparkSession.getActiveSession() is not None:
        register()


_register_on_active_session()
