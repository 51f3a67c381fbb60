"""Helpers for tests that run the ``spark-zmq`` command as a process and read what it prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: the command this interpreter's environment installed
CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")


def unboxed(text: str) -> str:
    """Rich's error box folded back into one line (it wraps long messages)."""
    return " ".join(text.replace("│", " ").split())


def keygen(directory: Path, name: str) -> tuple[str, str]:
    """A CURVE pair made by ``spark-zmq keygen name --dir directory``: the paths of its
    public and its secret file. (A CLI start takes about 1 s idle, up to 18 s under load.)"""
    result = subprocess.run([CLI, "keygen", name, "--dir", str(directory)], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    return str(directory / f"{name}.key"), str(directory / f"{name}.key_secret")
