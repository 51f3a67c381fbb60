"""Operating the services from a shell: ``spark-zmq --version``, ``spark-zmq ping`` and the
servers' refusals and warnings about CURVE, on real sockets and real processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import spark_zmq

pytestmark = pytest.mark.timeout(120)

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=timeout)


def _declared_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        found = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_version_is_the_one_pyproject_declares():
    result = _cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"spark-zmq {_declared_version()}"
    assert spark_zmq.__version__ == _declared_version()


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(spark_zmq.__file__), "py.typed"))


# -- the servers' CURVE refusals and warnings ----------------------------------------------------


def _flat(text: str) -> str:
    """Rich's error box folded back into one line (it wraps long messages)."""
    return " ".join(text.replace("│", " ").split())


def _keygen(directory, name: str) -> tuple[str, str]:
    result = _cli("keygen", name, "--dir", str(directory))
    assert result.returncode == 0, result.stderr
    return str(directory / f"{name}.key"), str(directory / f"{name}.key_secret")


def _broker_banner(*args: str) -> str:
    """What ``spark-zmq broker`` prints on stderr up to its banner (``broker: frontend ...``),
    then stops it."""
    broker = subprocess.Popen([CLI, "broker", *args, "--status-interval", "3600"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        assert broker.stderr is not None
        for line in broker.stderr:  # (the test's timeout bounds it; the banner comes within a second)
            lines.append(line)
            if line.startswith("broker: frontend"):
                break
    finally:
        broker.terminate()
        broker.wait(30)
    return "".join(lines)


def test_a_relay_with_a_certificate_but_no_reader_keys_refuses_to_serve_listen_in_the_clear(tmp_path, free_port):
    """--curve-certificate with --curve-server-key (the receiving sockets are CURVE clients)
    but no --reader-authorized-keys served --listen without CURVE: a plain client attached
    and learnt the spool's directory. Now a usage error naming the missing flag."""
    pub_public, _ = _keygen(tmp_path, "pub")
    _, relay_secret = _keygen(tmp_path, "relay")
    result = _cli("relay", "--endpoints", f">tcp://127.0.0.1:{free_port}", "--pattern", "sub",
                  "--listen", f"tcp://127.0.0.1:{free_port + 1}", "--spool-dir", str(tmp_path / "spool"),
                  "--curve-certificate", relay_secret, "--curve-server-key", pub_public)
    assert result.returncode == 2, result.stderr
    flat = _flat(result.stderr)
    assert "--listen, which queries read" in flat and "would serve without CURVE" in flat, flat
    assert "--reader-authorized-keys" in flat and "Traceback" not in result.stderr
    assert not (tmp_path / "spool").exists()  # refused before anything was opened


def test_a_broker_without_curve_off_loopback_warns_and_on_loopback_does_not(free_port):
    exposed = _flat(_broker_banner("--frontend", f"@tcp://0.0.0.0:{free_port}",
                                   "--backend", f"@tcp://127.0.0.1:{free_port + 1}"))
    assert "warning:" in exposed and f"tcp://0.0.0.0:{free_port} without CURVE" in exposed, exposed
    assert f"tcp://127.0.0.1:{free_port + 1}" not in exposed.split("without CURVE")[0]
    local = _broker_banner("--frontend", f"@tcp://127.0.0.1:{free_port}", "--backend", f"@tcp://127.0.0.1:{free_port + 1}")
    assert "warning" not in local and "broker: frontend" in local, local
