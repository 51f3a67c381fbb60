"""``spark-zmq relay`` under CURVE: producers (the receiving endpoints) and readers (the
``--listen`` port) each accepted only with their own authorized keys (no Spark).

The relay is the CLI in a process of its own; the attacker is a ``RelayClient`` holding a
real producer key, as an insider would."""

from __future__ import annotations

import subprocess
import sys

import pytest
import zmq.auth
from relaytest import RelayProcess, stop_relays
from zmqtest import free_ports

from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.relay.client import RelayClient, RelayError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def keys(tmp_path):
    made = {name: zmq.auth.create_certificates(str(tmp_path), name) for name in ("relay", "producer", "reader")}
    dirs = {}
    for side, name in (("producers", "producer"), ("readers", "reader")):
        (tmp_path / side).mkdir()
        (tmp_path / side / f"{name}.key").write_bytes(open(made[name][0], "rb").read())
        dirs[side] = str(tmp_path / side)
    return {"files": made, **dirs}


def _client(listen: str, keys: dict, who: str, timeout_s: float) -> RelayClient:
    relay_public, _ = zmq.auth.load_certificate(keys["files"]["relay"][0])
    curve = Curve.client(KeyPair.from_certificate(keys["files"][who][1]), relay_public)
    return RelayClient(listen, f"session-{who}", curve=curve, timeout_s=timeout_s)


def test_a_producer_key_is_refused_on_listen_and_a_reader_key_is_served(keys, tmp_path):
    data, listen = free_ports(2)
    relay = RelayProcess(
        f"@tcp://127.0.0.1:{data}",
        f"tcp://127.0.0.1:{listen}",
        str(tmp_path / "spool"),
        "--curve-certificate",
        keys["files"]["relay"][1],
        "--curve-authorized-keys",
        keys["producers"],
        "--reader-authorized-keys",
        keys["readers"],
    )
    producer = _client(relay.listen, keys, "producer", timeout_s=3)
    reader = _client(relay.listen, keys, "reader", timeout_s=30)
    try:
        with pytest.raises(RelayError, match="no answer from the relay at .* CURVE handshake failed"):
            producer.call("hello")
        assert reader.call("attach")["latest"] == [0]
    finally:
        producer.close()
        reader.close()
        stop_relays([relay])


def test_the_producers_keys_alone_are_a_usage_error_naming_the_reader_flag(keys, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_zmq.cli",
            "relay",
            "--endpoints",
            "@tcp://127.0.0.1:1",
            "--listen",
            "tcp://127.0.0.1:2",
            "--spool-dir",
            str(tmp_path / "spool"),
            "--curve-certificate",
            keys["files"]["relay"][1],
            "--curve-authorized-keys",
            keys["producers"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    flat = " ".join(result.stderr.replace("│", " ").split())
    assert result.returncode == 2, result.stderr
    assert "needs keys of its own: --reader-authorized-keys" in flat, flat
    assert "Traceback" not in result.stderr
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spark_zmq.cli",
            "relay",
            "--endpoints",
            "@tcp://127.0.0.1:1",
            "--listen",
            "tcp://127.0.0.1:2",
            "--spool-dir",
            str(tmp_path / "spool"),
            "--reader-authorized-keys",
            keys["readers"],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--reader-authorized-keys needs --curve-certificate" in " ".join(
        result.stderr.replace("│", " ").split()
    ), result.stderr
