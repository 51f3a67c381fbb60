"""A receiver process's configuration (``IngestConfig`` in ``ChildConfig``) crosses the process
boundary as JSON: it round-trips, and a child given a bad one exits naming the field."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import zmq.auth

from spark_zmq.ingest.config import IngestConfig, IngestConfigError
from spark_zmq.options import SourceOptions
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.relay.child import ChildConfig

pytestmark = pytest.mark.timeout(60)


def _options(tmp_path, **extra: str) -> SourceOptions:
    return SourceOptions.parse(
        {"endpoints": "@tcp://127.0.0.1:5555,>tcp://10.0.0.2:6000", "spoolDir": str(tmp_path / "spool"), **extra}
    )


def _round_trip(config: IngestConfig) -> IngestConfig:
    return IngestConfig.from_dict(json.loads(json.dumps(config.to_dict())))


def test_an_ingest_config_round_trips_through_json(tmp_path):
    plain = IngestConfig.from_options(_options(tmp_path))
    assert _round_trip(plain) == plain
    assert [e.bind for e in _round_trip(plain).endpoints] == [True, False]

    _, certificate = zmq.auth.create_certificates(str(tmp_path), "server")
    keys_dir = tmp_path / "authorized"
    keys_dir.mkdir()
    _, client_secret = zmq.auth.create_certificates(str(keys_dir), "client")
    os.remove(client_secret)
    rich = IngestConfig.from_options(
        _options(
            tmp_path,
            pattern="sub",
            topics="a,b",
            spoolFsync="true",
            maxSpoolBytes="64 MiB",
            hwm="77",
            receiveBufferBytes="64 KiB",
            heartbeatInterval="3",
            spoolServerHost="127.0.0.1",
            spoolServerPort="7000-7010",
            curveCertificate=str(certificate),
            curveAuthorizedKeys=str(keys_dir),
            **{"zmq.reconnectInterval": "250", "zmq.immediate": "true"},
        )
    )
    assert rich.curve is not None and rich.tuning is not None and rich.spool_server_port == (7000, 7010)
    assert _round_trip(rich) == rich
    any_key = dataclasses.replace(rich, curve=dataclasses.replace(rich.curve, authorized="*"))
    assert _round_trip(any_key) == any_key
    server_key = KeyPair.generate().public_key
    curve_client = IngestConfig.from_options(
        _options(tmp_path, curveCertificate=str(certificate), curveServerKey=server_key.decode())
    )
    assert curve_client.curve is not None and curve_client.curve.server_key == server_key
    assert _round_trip(curve_client) == curve_client


def test_the_child_config_round_trips_with_its_keys(tmp_path):
    keys = KeyPair.generate()
    config = ChildConfig(
        IngestConfig.from_options(_options(tmp_path)),
        ["tcp://127.0.0.1:*"],
        keys,
        KeyPair.generate().public_key,
        os.getpid(),
        300.0,
    )
    line = config.to_json()
    assert line.endswith(b"\n") and line.count(b"\n") == 1  # one line: the pipe stays open after it
    assert ChildConfig.from_json(line) == config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["ingest"].update(hwm="many"), "hwm"),
        (lambda d: d["ingest"].update(endpoints=["@nowhere"]), "endpoints"),
        (lambda d: d["ingest"].pop("spool_dir"), "spool_dir"),
        (lambda d: d["ingest"].update(sockets=1), "sockets"),
        (lambda d: d["ingest"]["heartbeat"].update(interval=-1), "heartbeat"),
        (lambda d: d["ingest"].update(curve={"public_key": "x"}), "curve"),
        (lambda d: d.update(parent="me"), "parent"),
        (lambda d: d.update(server_keys=["abc"]), "server_keys"),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(tmp_path, change, field):
    data = json.loads(
        ChildConfig(
            IngestConfig.from_options(_options(tmp_path)),
            ["tcp://127.0.0.1:*"],
            KeyPair.generate(),
            KeyPair.generate().public_key,
            os.getpid(),
            0.0,
        ).to_json()
    )
    change(data)
    with pytest.raises(IngestConfigError, match=f"'{field}'"):
        ChildConfig.from_json(json.dumps(data).encode())


def test_a_child_given_a_bad_config_exits_with_a_message_naming_the_field(tmp_path):
    data = json.loads(
        ChildConfig(
            IngestConfig.from_options(_options(tmp_path)),
            ["tcp://127.0.0.1:*"],
            KeyPair.generate(),
            KeyPair.generate().public_key,
            os.getpid(),
            0.0,
        ).to_json()
    )
    data["ingest"]["max_spool_bytes"] = "lots"
    child = subprocess.run(
        [sys.executable, "-m", "spark_zmq.relay.child"],
        input=json.dumps(data).encode() + b"\n",
        capture_output=True,
        timeout=30,
    )
    assert child.returncode == 1, child
    assert b"'max_spool_bytes'" in child.stderr and b"ready" not in child.stdout, child.stderr
    assert not (tmp_path / "spool").exists()  # refused before it touched anything

    child = subprocess.run(
        [sys.executable, "-m", "spark_zmq.relay.child"], input=b"\x80\x04pickle\n", capture_output=True, timeout=30
    )
    assert child.returncode == 1 and b"JSON" in child.stderr, child.stderr
