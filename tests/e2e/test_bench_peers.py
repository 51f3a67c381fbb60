"""The bench's peers scenario (``bench/peers.py``): its two contenders that run in child
processes, Bytewax's custom ZeroMQ source and the bare PULL loop, get every message of the
bench's producer over real sockets and have their own process's CPU counted; without
Bytewax (or with another version) the scenario says how to install it. Spark's side is
``ingest.connector``, which the bench's smoke run drives."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import peers  # noqa: E402


@pytest.mark.parametrize("mode", ["pull", "bytewax"])
def test_a_child_contender_receives_every_message_and_its_cpu_is_counted(mode):
    if mode == "bytewax" and peers.bytewax_missing():
        pytest.skip(peers.bytewax_missing())
    cpu: dict = {}
    # enough messages for a few of /proc's 10 ms ticks in the receiving process
    rate = peers.child(mode, 100_000, 100, cpu)  # raises unless it printed "done" after the 100,000th message
    assert rate > 0
    assert cpu["messages"] == 100_000
    assert cpu["total_us_per_msg"] > 0 and cpu["by_role_us_per_msg"] == {"its process": cpu["total_us_per_msg"]}


def test_without_bytewax_the_reason_names_the_bench_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name.startswith("bytewax") else real(name, *a)
    )
    assert peers.bytewax_missing() == 'Bytewax is not installed (pip install -e ".[bench]")'


def test_another_bytewax_version_is_named(monkeypatch):
    if importlib.util.find_spec("bytewax") is None:
        pytest.skip("Bytewax is not installed")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.19.1")
    assert "Bytewax 0.19.1 is installed, the source is written for 0.21" in peers.bytewax_missing()
