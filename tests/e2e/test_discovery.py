"""Installing spark-zmq is enough for format("zmq"): Spark discovers the data source in any
session (the ``pyspark_zmq`` module), with no ``import spark_zmq`` and no ``register``."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from zmqtest import free_ports

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "roundtrip.py")


def test_a_session_that_never_imports_spark_zmq_reads_and_writes_format_zmq(tmp_path):
    ports = free_ports(2)
    done = subprocess.run(
        [sys.executable, SCRIPT, "classic", str(ports[0]), str(ports[1]), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
        cwd=str(tmp_path),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(
        line.split() for line in done.stdout.splitlines() if line.startswith(("sink ", "source ", "imported "))
    )
    assert lines == {"sink": "1000", "source": "500", "imported": "False"}, done.stdout


def test_the_discovery_module_names_the_data_source_spark_looks_for():
    """Spark registers ``DefaultSource`` of every top-level ``pyspark_*`` module it can list
    on sys.path, under ``DefaultSource.name()``."""
    import pkgutil

    import pyspark_zmq
    from spark_zmq.datasource import ZmqDataSource

    assert pyspark_zmq.DefaultSource is ZmqDataSource and ZmqDataSource.name() == "zmq"
    assert "pyspark_zmq" in {m.name for m in pkgutil.iter_modules()}
