"""``spark-zmq broker`` under CURVE: the frontend (clients) and the backend (workers) each
accept only their own authorized keys, so a client's key never makes a worker.

The broker is the CLI in a process of its own; clients and workers are plain pyzmq
sockets (an attacker holds a real key, as an insider would). Each test waits on what it
can observe (the broker's status lines, a socket's poll), never on a sleep.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest
import zmq
import zmq.auth
from zmqtest import free_ports

pytestmark = pytest.mark.timeout(120)

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")


@pytest.fixture
def keys(tmp_path):
    """A broker pair; a client and a worker pair, each public key in its side's directory."""
    made = {name: zmq.auth.create_certificates(str(tmp_path), name) for name in ("broker", "client", "worker")}
    dirs = {}
    for side, name in (("clients", "client"), ("workers", "worker")):
        dirs[side] = tmp_path / side
        dirs[side].mkdir()
        (dirs[side] / f"{name}.key").write_bytes(open(made[name][0], "rb").read())
    return {name: zmq.auth.load_certificate(secret) for name, (_, secret) in made.items()} | {
        "broker_secret_file": made["broker"][1],
        **{side: str(path) for side, path in dirs.items()},
    }


def _curve_socket(kind: int, keys: dict, who: str) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.curve_publickey, sock.curve_secretkey = keys[who]
    sock.curve_serverkey = keys["broker"][0]
    return sock


class _Lines:
    """A process's stderr lines, read on a thread, so a test can wait for one."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(process,), daemon=True).start()

    def _read(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait(self, predicate, what: str, timeout: float = 30) -> str:
        deadline, seen = time.monotonic() + timeout, []
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {what} in {timeout}s; saw {seen[-5:]}") from None
            if line is None:
                raise AssertionError(f"stderr ended before {what}; saw {seen[-5:]}")
            seen.append(line)
            if predicate(line):
                return line


def test_a_client_key_is_refused_on_the_backend_and_gets_no_request(keys):
    """The attack measured on the single ``--curve-authorized-keys``: a client's key on the
    backend said READY, was given another client's request and could answer it. With a
    key set per side, its handshake is refused; the real worker gets every request."""
    front, back = free_ports(2)
    broker = subprocess.Popen(
        [
            CLI,
            "broker",
            "--frontend",
            f"@tcp://127.0.0.1:{front}",
            "--backend",
            f"@tcp://127.0.0.1:{back}",
            "--status-interval",
            "0.1",
            "--curve-certificate",
            keys["broker_secret_file"],
            "--frontend-authorized-keys",
            keys["clients"],
            "--backend-authorized-keys",
            keys["workers"],
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    sockets = []
    try:
        lines = _Lines(broker)
        lines.wait(
            lambda line: "frontend: CURVE server" in line and "backend: CURVE server" in line, "the two CURVE servers"
        )
        impostor = _curve_socket(zmq.REQ, keys, "client")  # the client's key, on the backend
        sockets.append(impostor)
        impostor.connect(f"tcp://127.0.0.1:{back}")
        impostor.send(b"READY")
        lines.wait(
            lambda line: "handshakes rejected" in line and " 0 handshakes rejected" not in line,
            "the impostor's handshake refused",
        )
        worker = _curve_socket(zmq.REQ, keys, "worker")
        sockets.append(worker)
        worker.connect(f"tcp://127.0.0.1:{back}")
        worker.send(b"READY")
        lines.wait(lambda line: "/ 1 known" in line, "one worker known")
        client = _curve_socket(zmq.DEALER, keys, "client")
        sockets.append(client)
        client.connect(f"tcp://127.0.0.1:{front}")
        for i in range(8):
            client.send_multipart([b"%d" % i, b"", b"question"])
            assert worker.poll(20_000), "the real worker got no request"
            envelope_and_body = worker.recv_multipart()
            worker.send_multipart(envelope_and_body[:-1] + [b"answer"])
            assert client.poll(20_000)
            assert client.recv_multipart() == [b"%d" % i, b"", b"answer"]
        assert not impostor.poll(0), "the impostor was given a request"
    finally:
        for sock in sockets:
            sock.close(0)
        broker.send_signal(signal.SIGTERM)
        broker.wait(20)


@pytest.mark.parametrize(
    "flags, hint, message",
    [
        (
            ["--curve-authorized-keys", "{clients}"],
            "--backend-authorized-keys",
            "the backend (workers) needs keys of its own: --backend-authorized-keys",
        ),
        (
            ["--frontend-authorized-keys", "{clients}"],
            "--backend-authorized-keys",
            "--frontend-authorized-keys names only the clients' keys",
        ),
        (["--backend-authorized-keys", "{workers}"], "--curve-certificate", "needs --frontend-authorized-keys"),
        (
            [
                "--frontend-authorized-keys",
                "{clients}",
                "--curve-authorized-keys",
                "{clients}",
                "--backend-authorized-keys",
                "{workers}",
            ],
            "--curve-authorized-keys",
            "the older name of --frontend-authorized-keys: give one of them",
        ),
    ],
)
def test_one_key_set_for_both_sides_is_a_usage_error_naming_the_missing_flag(keys, flags, hint, message):
    args = [f.format(**keys) for f in flags]
    result = subprocess.run(
        [
            CLI,
            "broker",
            "--frontend",
            "@tcp://127.0.0.1:1",
            "--backend",
            "@tcp://127.0.0.1:2",
            "--curve-certificate",
            keys["broker_secret_file"],
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    flat = " ".join(result.stderr.replace("│", " ").split())
    assert result.returncode == 2, result.stderr
    assert message in flat and hint in flat, flat
    assert "Traceback" not in result.stderr


def test_keys_without_a_certificate_are_a_usage_error():
    result = subprocess.run(
        [
            CLI,
            "broker",
            "--frontend",
            "@tcp://127.0.0.1:1",
            "--backend",
            "@tcp://127.0.0.1:2",
            "--backend-authorized-keys",
            "*",
            "--frontend-authorized-keys",
            "*",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "needs --curve-certificate" in " ".join(result.stderr.replace("│", " ").split())
