"""CURVE keys for the benchmark's CURVE scenarios (made once per run with pyzmq's zmq.auth).

The scenario sets ``SPARK_ZMQ_BENCH_CURVE`` to the key directory around its CURVE
contenders; the producer and consumer processes read it and secure their sockets, so
the connector and the bare loops pay the same encryption.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import zmq
import zmq.auth

ENV = "SPARK_ZMQ_BENCH_CURVE"


def make() -> str:
    """A directory with ``server.key[_secret]``, ``client.key[_secret]`` and ``authorized/client.key``."""
    root = tempfile.mkdtemp(prefix="spark-zmq-bench-keys-")
    zmq.auth.create_certificates(root, "server")
    zmq.auth.create_certificates(root, "client")
    os.mkdir(os.path.join(root, "authorized"))
    shutil.copy(os.path.join(root, "client.key"), os.path.join(root, "authorized", "client.key"))
    return root


def current() -> str | None:
    return os.environ.get(ENV) or None


def secure_client(sock: zmq.Socket, root: str) -> None:
    """Make ``sock`` a CURVE client of the benchmark's server key."""
    sock.curve_serverkey = zmq.auth.load_certificate(os.path.join(root, "server.key"))[0]
    sock.curve_publickey, sock.curve_secretkey = zmq.auth.load_certificate(os.path.join(root, "client.key_secret"))


def secure_server(sock: zmq.Socket, root: str) -> None:
    """Make ``sock`` a CURVE server (no ZAP handler: any client key, which costs the same per message)."""
    sock.curve_publickey, sock.curve_secretkey = zmq.auth.load_certificate(os.path.join(root, "server.key_secret"))
    sock.curve_server = True


def server_secret_z85(root: str) -> str:
    """The server's secret key in Z85, for the C consumer (``THR_CURVE_SECRET``)."""
    return zmq.auth.load_certificate(os.path.join(root, "server.key_secret"))[1].decode()


def source_options(root: str) -> dict[str, str]:
    return {
        "curveCertificate": os.path.join(root, "server.key_secret"),
        "curveAuthorizedKeys": os.path.join(root, "authorized"),
    }


def sink_options(root: str) -> dict[str, str]:
    return {
        "curveCertificate": os.path.join(root, "client.key_secret"),
        "curveServerKey": os.path.join(root, "server.key"),
    }
