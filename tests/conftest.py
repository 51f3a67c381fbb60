"""One local[2] SparkSession for the whole run, Python workers on this interpreter."""

from __future__ import annotations

import os
import socket
import sys

import pytest

# Workers must import the interpreter (and site-packages) running the tests.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    import spark_zmq

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-zmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_zmq.register(session)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(autouse=True)
def _close_test_producers():
    """Producers keep their sockets open for the whole test; close them after it."""
    yield
    from zmqtest import close_producers

    close_producers()


@pytest.fixture
def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for endpoints a Spark process binds)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def spool_dir(tmp_path) -> str:
    """A fresh spool directory per test, so tests never see each other's messages."""
    return str(tmp_path / "spool")
