"""The ports handed to the jobs, benchmarks and tests: free, distinct, and outside the
range from which the kernel gives outgoing connections their source ports."""

from __future__ import annotations

import ast
import json
import socket
from pathlib import Path

import pytest

from spark_zmq.free_ports import ephemeral_low, free_tcp_ports

ROOT = Path(__file__).resolve().parents[1]


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    ports = free_tcp_ports(50)
    assert len(set(ports)) == 50
    assert all(1024 <= p < ephemeral_low() for p in ports), ports
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_connection_in_flight_never_holds_a_chosen_port():
    """Every outgoing connection's source port comes from the ephemeral range, so none
    takes a chosen port between choosing and binding it."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(20)]
        try:
            sources = {c.getsockname()[1] for c in clients}
            assert not sources & set(free_tcp_ports(50))
            assert all(p >= ephemeral_low() for p in sources)
        finally:
            for c in clients:
                c.close()


def _closes_an_ephemeral_port(source: str) -> bool:
    """Whether ``source`` picks a port by binding port 0 and closing the socket: in a
    ``with`` that does nothing but read the port back, or in a function that binds port 0,
    reads the port and closes the socket without ever listening on it. Someone else binds
    the port later."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.unparse(node)
            if (
                ", 0))" in text
                and ".bind((" in text
                and "getsockname()" in text
                and ".close()" in text
                and ".listen(" not in text
            ):
                return True
        if isinstance(node, ast.With):
            simple = all(isinstance(statement, (ast.Expr, ast.Assign, ast.Return)) for statement in node.body)
            body = [ast.unparse(statement) for statement in node.body]
            if (
                simple
                and any(", 0))" in line and "bind((" in line for line in body)
                and all("bind((" in line or "getsockname()" in line for line in body)
            ):
                return True
    return False


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))


@pytest.mark.parametrize("folder", ["bench", "jobs", "notebooks", "tests"])
def test_no_job_benchmark_notebook_or_test_picks_a_port_from_the_ephemeral_range(folder):
    offenders = []
    for path in sorted((ROOT / folder).rglob("*.py")) + sorted((ROOT / folder).rglob("*.ipynb")):
        if "node_modules" in path.parts:
            continue
        source = _notebook_code(path) if path.suffix == ".ipynb" else path.read_text()
        if _closes_an_ephemeral_port(source):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders, f"use spark_zmq.free_ports.free_tcp_ports instead of bind(0) in {offenders}"
