"""Relays as the tests run them: a ``spark-zmq relay`` child process, waited for by its
``ready`` line (never by a sleep), and an in-process ``Relay`` with 500 messages spooled (a fixture)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence

import pytest
from zmqtest import Producer, free_ports, numbered, wait_until

from spark_zmq.ingest.config import IngestConfig
from spark_zmq.options import SourceOptions
from spark_zmq.relay.run import read_ready
from spark_zmq.relay.server import Relay


class RelayProcess:
    """``spark-zmq relay`` in a child process; ``ready`` is the line it printed when serving."""

    def __init__(self, endpoints: str, listen: str, spool_dir: str, *extra: str, start: bool = True) -> None:
        self.args = [
            sys.executable,
            "-m",
            "spark_zmq.cli",
            "relay",
            "--endpoints",
            endpoints,
            "--listen",
            listen,
            "--spool-dir",
            spool_dir,
            *extra,
        ]
        self.listen = listen
        self.spool_dir = spool_dir
        self.process: subprocess.Popen | None = None
        self.ready: dict = {}
        if start:
            self.start()

    def start(self, timeout: float = 60) -> RelayProcess:
        # stderr to a file: a pipe nobody reads could fill and stall the relay
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=self.stderr, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        ready = read_ready(self.process, timeout)
        if ready is None:
            self.process.kill()
            self.process.wait(10)
            raise AssertionError(f"relay did not start: {self.errors()}")
        self.ready = ready
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """``kill -9``: no drain, no goodbye."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def terminate(self, timeout: float = 60) -> tuple[int, str]:
        """SIGTERM; returns (exit code, stderr)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout)
        return self.process.returncode, self.errors()

    def errors(self) -> str:
        """What the relay wrote on stderr so far."""
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def stop_relays(relays: Sequence[RelayProcess]) -> None:
    for relay in relays:
        relay.close()


@pytest.fixture
def relay(tmp_path):
    """An in-process ``Relay`` of one channel that has spooled 500 messages."""
    data = free_ports(1)[0]
    options = SourceOptions.parse(
        {"endpoints": f"@tcp://127.0.0.1:{data}", "spoolDir": str(tmp_path / "spool"), "spoolAccess": "local"}
    )
    served = Relay(IngestConfig.from_options(options), f"tcp://127.0.0.1:{free_ports(1)[0]}")
    producer = Producer(f"tcp://127.0.0.1:{data}", numbered(500))
    producer.start()
    producer.finish()
    wait_until(lambda: served.ingest.spool.channels[0].next_offset == 500, 30, "500 messages spooled")
    yield served
    served.stop()
