"""Seed the registered data source's worker environment, to avoid a race in Spark.

Spark keeps one ``java.util.HashMap`` of environment variables per registered Python data
source and shares it, by reference, with every function it derives from that source: the
driver-side streaming reader, every read task and every write task. When a streaming
query starts, Spark's ``PythonStreamingSourceRunner.init`` adds four keys to that shared
map in place (``SPARK_LOCAL_DIRS``, ``SPARK_AUTH_SOCKET_TIMEOUT``, ``SPARK_BUFFER_SIZE``,
``SPARK_PYTHON_RUNTIME``), without a lock. If two ``zmq`` queries start at the same time,
or one starts while another's tasks are being serialized, the map can be corrupted or
serialized half-written, and a task then fails with ``java.io.OptionalDataException``
(seen in this project's CI with two queries started back to back).

Putting the four keys in the map once, at registration, makes every later ``put`` a
replacement of a value, which changes nothing structural and is safe to race. Spark
overwrites the values with its own before any worker starts, so the seeded values only
need to be sensible. If Spark's internals differ (another version), seeding is skipped:
the race is rare and needs two queries starting together.
"""

from __future__ import annotations

import logging
import os
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

# What Spark 4.3's PythonStreamingSourceRunner.init puts into the shared map.
STREAMING_RUNNER_KEYS = ("SPARK_LOCAL_DIRS", "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_PYTHON_RUNTIME")


def seed_worker_environment(session: SparkSession, name: str) -> bool:
    """Add the streaming runner's keys to data source ``name``'s shared environment map.

    Returns whether the map was seeded (False when Spark's internals are not as expected).
    """
    try:
        source = session._jsparkSession.sessionState().dataSourceManager().lookupDataSource(name)
        env = source.dataSourceCls().envVars()
        conf = session.sparkContext._jsc.sc().conf()
        values = {
            "SPARK_LOCAL_DIRS": conf.get("spark.local.dir", os.environ.get("SPARK_LOCAL_DIRS", tempfile.gettempdir())),
            "SPARK_AUTH_SOCKET_TIMEOUT": str(conf.getTimeAsSeconds("spark.python.authenticate.socketTimeout", "15s")),
            "SPARK_BUFFER_SIZE": str(conf.getInt("spark.buffer.size", 65536)),
            "SPARK_PYTHON_RUNTIME": "PYTHON_WORKER",
        }
        for key in STREAMING_RUNNER_KEYS:
            env.putIfAbsent(key, values[key])
        return True
    except Exception as exc:  # py4j errors: internals of another Spark version  # noqa: BLE001
        logger.debug("spark-zmq: could not seed the data source's worker environment: %s", exc)
        return False
