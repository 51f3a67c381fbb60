"""Spark Connect: the source and the sink work through a Connect session (a gRPC client of a
Connect server: here pyspark's local one, ``remote("local[2]")``, in its own process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from zmqtest import free_ports

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "roundtrip.py")


def test_source_and_sink_through_a_spark_connect_session(tmp_path):
    pytest.importorskip("grpc", reason="the dev extra installs pyspark[connect]")
    ports = free_ports(2)
    done = subprocess.run(
        [sys.executable, SCRIPT, "connect", str(ports[0]), str(ports[1]), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=360,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = dict(line.split() for line in done.stdout.splitlines() if line.startswith(("sink ", "source ")))
    assert lines == {"sink": "1000", "source": "500"}, done.stdout
