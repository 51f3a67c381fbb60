"""Operating the services from a shell: ``spark-zmq --version``, ``spark-zmq ping`` and the
servers' refusals and warnings about CURVE, on real sockets and real processes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time

import pytest
import zmq
from clitest import keygen, unboxed
from zmqtest import free_ports

import spark_zmq
from spark_zmq.requestreply import Broker
from spark_zmq.worker import serve

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


def _broker_banner(*args: str) -> str:
    """What ``spark-zmq broker`` prints on stderr up to its banner (``broker: frontend ...``),
    then stops it."""
    broker = subprocess.Popen(
        [CLI, "broker", *args, "--status-interval", "3600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
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
    pub_public, _ = keygen(tmp_path, "pub")
    _, relay_secret = keygen(tmp_path, "relay")
    result = _cli(
        "relay",
        "--endpoints",
        f">tcp://127.0.0.1:{free_port}",
        "--pattern",
        "sub",
        "--listen",
        f"tcp://127.0.0.1:{free_port + 1}",
        "--spool-dir",
        str(tmp_path / "spool"),
        "--curve-certificate",
        relay_secret,
        "--curve-server-key",
        pub_public,
    )
    assert result.returncode == 2, result.stderr
    flat = unboxed(result.stderr)
    assert "--listen, which queries read" in flat and "would serve without CURVE" in flat, flat
    assert "--reader-authorized-keys" in flat and "Traceback" not in result.stderr
    assert not (tmp_path / "spool").exists()  # refused before anything was opened


def test_a_broker_without_curve_off_loopback_warns_and_on_loopback_does_not(free_port):
    exposed = unboxed(
        _broker_banner("--frontend", f"@tcp://0.0.0.0:{free_port}", "--backend", f"@tcp://127.0.0.1:{free_port + 1}")
    )
    assert "warning:" in exposed and f"tcp://0.0.0.0:{free_port} without CURVE" in exposed, exposed
    assert f"tcp://127.0.0.1:{free_port + 1}" not in exposed.split("without CURVE")[0]
    local = _broker_banner(
        "--frontend", f"@tcp://127.0.0.1:{free_port}", "--backend", f"@tcp://127.0.0.1:{free_port + 1}"
    )
    assert "warning" not in local and "broker: frontend" in local, local


# -- spark-zmq ping ----------------------------------------------------------------------------------


def _ping(endpoint: str, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = _cli("ping", endpoint, *args)
    return result, time.monotonic() - started


def test_ping_answers_for_a_live_relay_broker_and_worker(tmp_path):
    """Each service answers the same probe itself: the relay its hello, the broker without
    a worker (none is connected), the REP worker without calling its handler."""
    from relaytest import RelayProcess

    first, listen, front, back, rep = free_ports(5)
    relay = RelayProcess(f"@tcp://127.0.0.1:{first}", f"tcp://127.0.0.1:{listen}", str(tmp_path / "spool"))
    broker = Broker(f"@tcp://127.0.0.1:{front}", f"@tcp://127.0.0.1:{back}")
    broker_thread = threading.Thread(target=broker.serve_forever, daemon=True)
    broker_thread.start()
    handled: list[object] = []
    stop = threading.Event()
    worker = threading.Thread(
        target=serve,
        args=(handled.append, f"@tcp://127.0.0.1:{rep}"),
        kwargs={"broker": False, "format": "raw", "stop": stop},
        daemon=True,
    )
    worker.start()
    try:
        for port, service in ((listen, "relay"), (front, "broker"), (rep, "worker")):
            result, took = _ping(f"tcp://127.0.0.1:{port}")
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith(f"{service} at tcp://127.0.0.1:{port} answered in "), result.stdout
            assert took < 5
        assert '"spool":"' + relay.ready["spool"] + '"' in _ping(f"tcp://127.0.0.1:{listen}")[0].stdout
        assert '"workers":0' in _ping(f"tcp://127.0.0.1:{front}")[0].stdout
        assert handled == []  # the worker's handler never saw a probe
        assert broker.stats().requests_forwarded == 0 and broker.stats().requests_waiting == 0
    finally:
        stop.set()
        broker.stop()
        broker_thread.join(10)
        broker.close()
        worker.join(10)
        relay.terminate()


def test_ping_of_nothing_listening_says_refused_at_once(free_port):
    result, took = _ping(f"tcp://127.0.0.1:{free_port}", "--timeout", "5")
    assert result.returncode == 1
    assert "refused: nothing listens at" in unboxed(result.stderr), result.stderr
    assert took < 4  # told by the refusal, not by the timeout


def test_ping_of_a_stuck_tcp_peer_and_a_silent_zeromq_peer_says_silent_within_the_timeout(free_port, ctx):
    """A socket that accepts and never answers (the kernel's backlog), and a ZeroMQ ROUTER
    whose owner never reads (its I/O thread completes the handshake): both silent, told apart."""
    stuck = socket.socket()
    stuck.bind(("127.0.0.1", free_port))
    stuck.listen(8)
    try:
        result, took = _ping(f"tcp://127.0.0.1:{free_port}", "--timeout", "1")
    finally:
        stuck.close()
    assert result.returncode == 1
    assert "never completed the ZeroMQ handshake within 1 s" in unboxed(result.stderr), result.stderr
    assert 1 <= took < 4
    router = ctx.socket(zmq.ROUTER)
    router.bind(f"tcp://127.0.0.1:{free_port}")
    result, took = _ping(f"tcp://127.0.0.1:{free_port}", "--timeout", "1")
    assert result.returncode == 1
    assert "completed the ZeroMQ handshake but did not answer within 1 s" in unboxed(result.stderr), result.stderr
    assert 1 <= took < 4


def test_ping_of_a_socket_that_is_no_service_says_wrong_service(free_port, ctx):
    pull = ctx.socket(zmq.PULL)  # takes no requests: the handshake fails on socket types
    pull.bind(f"tcp://127.0.0.1:{free_port}")
    result, _ = _ping(f"tcp://127.0.0.1:{free_port}", "--timeout", "3")
    assert result.returncode == 1 and "is not a relay, broker frontend or worker" in unboxed(result.stderr)
    pull.close(linger=0)
    echo = ctx.socket(zmq.ROUTER)  # answers, but not as a spark-zmq service
    echo.bind(f"tcp://127.0.0.1:{free_port + 1}")
    answering = threading.Thread(
        target=lambda: echo.send_multipart(echo.recv_multipart()[:1] + [b"", b"hi"]), daemon=True
    )
    answering.start()
    result, _ = _ping(f"tcp://127.0.0.1:{free_port + 1}", "--timeout", "3")
    answering.join(5)
    assert result.returncode == 1 and "wrong service" in unboxed(result.stderr), result.stderr


def test_ping_of_a_curve_broker_with_its_keys_without_them_and_with_a_stranger(tmp_path):
    server_public, server_secret = keygen(tmp_path / "server", "server")
    client_public, client_secret = keygen(tmp_path / "client", "client")
    _, stranger_secret = keygen(tmp_path / "stranger", "stranger")
    front, back = free_ports(2)
    broker = subprocess.Popen(
        [
            CLI,
            "broker",
            "--frontend",
            f"@tcp://127.0.0.1:{front}",
            "--backend",
            f"@tcp://127.0.0.1:{back}",
            "--curve-certificate",
            server_secret,
            "--frontend-authorized-keys",
            os.path.dirname(client_public),
            "--backend-authorized-keys",
            os.path.dirname(server_public),
            "--status-interval",
            "3600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert broker.stderr is not None
        assert broker.stderr.readline().startswith("broker: frontend"), "the broker did not start"
        address = f"tcp://127.0.0.1:{front}"
        result, took = _ping(address, "--curve-certificate", client_secret, "--curve-server-key", server_public)
        assert result.returncode == 0 and result.stdout.startswith("broker at"), result.stderr
        result, _ = _ping(address, "--curve-certificate", stranger_secret, "--curve-server-key", server_public)
        assert result.returncode == 1 and "CURVE rejected" in unboxed(result.stderr), result.stderr
        result, _ = _ping(address, "--timeout", "3")
        assert result.returncode == 1 and "CURVE" in unboxed(result.stderr), result.stderr
        result = _cli("ping", address, "--curve-certificate", client_secret)
        assert result.returncode == 2 and "--curve-server-key" in unboxed(result.stderr)
    finally:
        broker.terminate()
        broker.wait(30)
