"""The benchmark command still works (a seconds-scale smoke run; the real run is not a test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# a group of its own: the suite's longest test runs beside the two Spark groups, on the third
# worker with the tests that need no Spark, instead of lengthening the applications' group
pytestmark = [pytest.mark.spark, pytest.mark.timeout(660), pytest.mark.xdist_group("bench")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_smoke_run_writes_its_report(tmp_path):
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "run.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )  # about 4 min alone (220 s), more beside the suite (338 s)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {r["scenario"]: r for r in json.loads((tmp_path / "results.json").read_text())["results"]}
    assert set(rows) == {
        "ingest-arrow",
        "ingest-raw-100B",
        "ingest-raw-1KB",
        "egress-raw-100B",
        "egress-arrow",
        "scaling",
        "latency",
        "backpressure",
        "curve-ingest-raw-100B",
        "curve-ingest-arrow",
        "curve-egress-raw-100B",
        "curve-egress-arrow",
        "gather-raw-100B",
        "gather-arrow",
        "reqrep-arrow",
        "reqrep-json",
        "reqrep-broker-lru",
        "reqrep-latency",
        "pipeline",
        "relay-readers",
        "peers",
        "checkpoint-manager",
        "backlog-raw-100B",
    } | (set() if rows["ingest-raw-100B"]["wire_limit_skipped"] else {"peers-libzmq-producer"})
    compared = [r for r in rows.values() if "ratios" in r]
    assert all(v > 0 for r in compared for v in r["median"].values())
    # connector, in-memory Python source (at once and in the connector's micro-batches), bare pyzmq, Spark's
    # socket source (+ libzmq's C test and the connector fed by its C sender, where it builds)
    wire_built = rows["ingest-raw-100B"]["wire_limit_skipped"] is None
    assert len(rows["ingest-raw-100B"]["median"]) == 5 + 2 * wire_built
    if wire_built:
        assert rows["ingest-raw-100B"]["c_wire_ratio"] > 0
        assert "the connector fed by libzmq's C sender" in (tmp_path / "report.md").read_text()
    assert "in-memory Python source, the connector's micro-batches" in rows["ingest-raw-1KB"]["median"]
    assert all(
        rows[name]["ceiling"] == "in-memory Python source"
        and rows[name]["ceiling_target"] == 0.85
        and rows[name]["versus"] == "bare pyzmq PULL"
        for name in ("ingest-raw-100B", "ingest-raw-1KB")
    )
    # the one-row target against the cores: Spark's part, the producer's and (where it builds) libzmq's C sides
    for name in ("ingest-raw-100B", "ingest-raw-1KB"):
        budget = rows[name]["cpu_budget"]
        assert budget["cores"] == os.cpu_count() and budget["cores_needed"] > 0
        assert budget["spark_us_per_msg"] > 0 and budget["connector_us_per_msg"] > 0
        assert budget["producer_us_per_msg"] > 0
        assert ("c_sender_us_per_msg" in budget) == (rows[name]["wire_limit_skipped"] is None)
    assert "ingest-raw-100B: CPU budget of the target" in (tmp_path / "report.md").read_text()
    # CURVE egress against the cores: the connector without CURVE plus libzmq's own cost of CURVE
    curve_budget = rows["curve-egress-raw-100B"]["cpu_budget"]
    assert curve_budget["target"] == 0.6 and curve_budget["cores"] == os.cpu_count()
    assert {"without_curve_us_per_msg", "libzmq_curve_us_per_msg", "with_curve_us_per_msg"} <= set(curve_budget)
    assert "curve-egress-raw-100B: CPU budget of the target" in (tmp_path / "report.md").read_text()
    assert rows["backpressure"]["lost"] == 0
    # the backlog was read (in one micro-batch a run on an idle machine), its CPU split by process beside
    # the in-memory source's
    backlog = rows["backlog-raw-100B"]["cpu"]
    assert len(backlog["micro_batches"]) == 1 and backlog["micro_batches"][0] >= 1
    assert set(backlog["by_role_us_per_msg"]) == {"connector", "in-memory Python source"}
    assert all(roles["jvm"] > 0 for roles in backlog["by_role_us_per_msg"].values())
    # each checkpoint file manager ran micro-batches that wrote their offset and commit logs
    managers = rows["checkpoint-manager"]["median"]
    assert len(managers) == 2 and all(m["micro_batches"] > 0 and m["trigger_ms"] > 0 for m in managers.values())
    assert all(
        len(rows[name]["median"]) == 4 and rows[name]["versus"] == "connector without CURVE"
        for name in rows
        if name.startswith("curve-")
    )
    assert all(rows[name]["versus"] == "pull from libzmq PUSH" for name in ("gather-raw-100B", "gather-arrow"))
    assert 0 < rows["latency"]["p50_ms"] <= rows["latency"]["p99_ms"]
    floor = rows["latency"]["python_source_floor"]
    assert 0 < floor["p50_ms"] <= floor["p99_ms"]
    # egress: rates over the consumer's window, each write's fixed cost beside them
    assert set(rows["egress-arrow"]["fixed_cost_s"]) == {
        "connector",
        "bare pyzmq PUSH",
        "Python Arrow writer, discarding",
    }
    assert "connector, CURVE" in rows["curve-egress-raw-100B"]["fixed_cost_s"]
    # one-row egress is consumed by libzmq's C PULL where it builds (a Python loop is as slow as the senders)
    assert rows["egress-raw-100B"]["consumer"].startswith(
        "libzmq's C PULL" if rows["ingest-raw-100B"]["wire_limit_skipped"] is None else "a pyzmq PULL loop"
    )
    assert sorted(rows["scaling"]["channels"]) == ["1", "2", "3", "4"]
    assert set(rows["scaling"]["contenders"]) == {"threads", "processes", "relays"}
    # every scenario names its fair ceiling; Arrow egress is measured against Spark's own
    assert all(r["ceiling"] in r["median"] and r["ceiling_why"] for r in compared)
    assert rows["egress-arrow"]["ceiling"] == "Python Arrow writer, discarding"
    assert all(rows[name]["versus"] == "bare pyzmq DEALER" for name in ("reqrep-arrow", "reqrep-json"))
    assert rows["reqrep-broker-lru"]["time_ratio"] > 0
    assert 0 < rows["reqrep-latency"]["broker"]["p50_ms"] <= rows["reqrep-latency"]["broker"]["p99_ms"]
    # a two-stage pipeline beside one-stage ingest, its latency with and without committedOnly
    assert set(rows["pipeline"]["median"]) == {"connector", "two stages without committedOnly", "one-stage ingest"}
    for side in ("committedOnly", "without committedOnly"):
        assert 0 < rows["pipeline"]["latency"][side]["p50_ms"] <= rows["pipeline"]["latency"][side]["p99_ms"]
    assert "pipeline: latency at" in (tmp_path / "report.md").read_text()
    assert set(rows["relay-readers"]["median"]) == {"connector", "second reader, same run", "one reader alone"}
    assert "Two readers on one relay" in (tmp_path / "report.md").read_text()
    # peers: the connector beside Bytewax's ZeroMQ source (where the bench extra installed it) and a bare PULL process
    peers = rows["peers"]
    assert set(peers["median"]) == {"connector", "bare pyzmq PULL"} | (
        set() if peers["bytewax_skipped"] else {"Bytewax 0.21 ZeroMQ source"}
    )
    assert set(peers["cpu_us_per_msg"]) == set(peers["median"])
    assert "peers: CPU us a message by receiving process" in (tmp_path / "report.md").read_text()
    if not peers["bytewax_skipped"]:  # whether Bytewax's rate fits in the cores beside the producer
        assert peers["peers_budget"]["cores_needed"] > 0 and peers["peers_budget"]["cores"] == os.cpu_count()
        assert "peers: CPU budget of Bytewax's rate" in (tmp_path / "report.md").read_text()
    assert "fair ceiling" in (tmp_path / "report.md").read_text()
    assert "egress-raw-100B: Spark's fixed cost of a write job: median" in (tmp_path / "report.md").read_text()
    assert "Python-source floor" in (tmp_path / "report.md").read_text()
    assert "| scenario |" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
