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
def _no_lingering_receivers():
    """Receiver processes linger after their query stops (``receiverLingerSeconds``), by
    design; the ones a test started must not outlive it (no test shares a spool with
    another, and dozens of idle receivers would slow the rest of the run)."""
    started = _boot_ticks_now()
    yield
    import signal

    for pid in _receiver_processes():
        if _start_ticks(pid) >= started:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass


def _boot_ticks_now() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _start_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def _receiver_processes() -> list:
    pids = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"spark_zmq.relay.child" in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


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
