"""The socket options are typed (``socket_options.SocketOptions``): the type checker refuses a
misspelt option name or a value of the wrong type in a call to a pattern socket, the
request-reply ``Client`` or the ``wires`` factories, before the code runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SNIPPET = textwrap.dedent("""\
    from spark_zmq.patterns import Pull
    from spark_zmq.patterns.wires import sending_wire
    from spark_zmq.requestreply import Client

    Pull("tcp://127.0.0.1:5555", linger=0, hwm=5, heartbeat=None)
    Pull("tcp://127.0.0.1:5555", lingr=0)
    Client("tcp://127.0.0.1:5555", hwm=10, linger="x")
    sending_wire("push", "tcp://127.0.0.1:5555", heartbaet=None)
""")


@pytest.mark.slow  # a mypy run: about 6 s alone, 10 s beside other tests
def test_mypy_refuses_misspelt_and_mistyped_options(tmp_path):
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--follow-imports=silent",
            "--no-error-summary",
            str(snippet),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line.split(":", 1)[1] for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 3, done.stdout
    assert errors[0].startswith("6:") and '"lingr"' in errors[0]
    assert errors[1].startswith("7:") and '"linger"' in errors[1] and '"int"' in errors[1]
    assert errors[2].startswith("8:") and '"heartbaet"' in errors[2]
