"""Prometheus metrics scraped over HTTP while the services run, checked against the traffic
sent: ``spark-zmq broker --metrics``, ``spark_zmq.worker.serve(metrics=...)`` and
``spark-zmq relay --metrics``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.request
import uuid

import pytest
import zmq
from prometheus_client.parser import text_string_to_metric_families
from zmqtest import free_ports, wait_until

from spark_zmq.relay.client import RelayClient
from spark_zmq.relay.messages import AttachRequest, ReleaseRequest
from spark_zmq.worker import serve

pytestmark = pytest.mark.timeout(120)

CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")


def _scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` at ``address``, by sample name and labels."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _documented(service: str) -> set[str]:
    """The names docs/metrics.md lists for ``service``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "metrics.md"), encoding="utf-8") as f:
        return set(re.findall(rf"`(spark_zmq_{service}_[a-z_]+)`", f.read()))


def _names(samples: dict) -> set[str]:
    return {name for name, _ in samples}


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _scorer(body: bytes) -> bytes:
    if body == b"poison":
        raise ValueError("poison")
    return body.upper()


def test_broker_and_worker_metrics_count_what_was_sent(ctx):
    front, back, broker_metrics, worker_metrics = free_ports(4)
    broker = subprocess.Popen(
        [
            CLI,
            "broker",
            "--frontend",
            f"@tcp://127.0.0.1:{front}",
            "--backend",
            f"@tcp://127.0.0.1:{back}",
            "--metrics",
            f"127.0.0.1:{broker_metrics}",
            "--status-interval",
            "3600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()
    worker = threading.Thread(
        target=serve,
        args=(_scorer, f"tcp://127.0.0.1:{back}"),
        kwargs={"format": "raw", "stop": stop, "metrics": f"127.0.0.1:{worker_metrics}"},
        daemon=True,
    )
    try:
        assert broker.stderr is not None
        banner = broker.stderr.readline()
        assert f"metrics http://127.0.0.1:{broker_metrics}/metrics" in banner, banner
        worker.start()
        wait_until(
            lambda: _value(_scrape(f"127.0.0.1:{broker_metrics}"), "spark_zmq_broker_workers") == 1,
            30,
            "the worker to be known to the broker",
        )
        client = ctx.socket(zmq.REQ)
        client.setsockopt(zmq.RCVTIMEO, 10_000)
        client.connect(f"tcp://127.0.0.1:{front}")
        for i in range(50):
            client.send(b"req-%d" % i)
            assert client.recv() == b"REQ-%d" % i
        client.send(b"poison")
        assert client.recv_multipart()[0] == b"ERROR"
        stray = ctx.socket(zmq.DEALER)  # no delimiter: dropped as malformed
        stray.connect(f"tcp://127.0.0.1:{front}")
        stray.send(b"no envelope")
        wait_until(
            lambda: _value(_scrape(f"127.0.0.1:{broker_metrics}"), "spark_zmq_broker_messages_malformed_total") == 1,
            30,
            "the malformed message",
        )
        scraped = _scrape(f"127.0.0.1:{broker_metrics}")
        assert _value(scraped, "spark_zmq_broker_requests_forwarded_total") == 51
        assert _value(scraped, "spark_zmq_broker_replies_returned_total") == 51
        assert _value(scraped, "spark_zmq_broker_workers_idle") == 1
        assert _value(scraped, "spark_zmq_broker_requests_waiting") == 0
        assert _value(scraped, "spark_zmq_broker_held_bytes") == 0
        assert _value(scraped, "spark_zmq_broker_handshakes_rejected_total") == 0
        assert _names(scraped) == _documented("broker")
        from_worker = _scrape(f"127.0.0.1:{worker_metrics}")
        assert _names(from_worker) == _documented("worker")
        assert _value(from_worker, "spark_zmq_worker_requests_total") == 51
        assert _value(from_worker, "spark_zmq_worker_replies_total") == 50
        assert _value(from_worker, "spark_zmq_worker_errors_total") == 1
    finally:
        stop.set()
        worker.join(10)
        broker.terminate()
        broker.wait(30)
    with pytest.raises(OSError):  # the worker's metrics end with it
        _scrape(f"127.0.0.1:{worker_metrics}")


def test_relay_metrics_count_the_spooled_messages_and_each_readers_lag(tmp_path, ctx):
    from relaytest import RelayProcess

    channel, listen = free_ports(2)
    relay = RelayProcess(
        f"@tcp://127.0.0.1:{channel}", f"tcp://127.0.0.1:{listen}", str(tmp_path / "spool"), "--metrics", "127.0.0.1:0"
    )
    reader = None
    try:
        metrics = relay.ready["metrics"]
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{channel}")
        for i in range(300):
            push.send(b"msg-%d" % i)
        wait_until(
            lambda: _value(_scrape(metrics), "spark_zmq_relay_latest_offset", channel="0") == 300,
            30,
            "300 messages spooled",
        )
        reader = RelayClient(f"tcp://127.0.0.1:{listen}", uuid.uuid4().hex, reader="etl", timeout_s=10)
        reader.ask(AttachRequest())
        reader.ask(ReleaseRequest({0: 120}))
        scraped = _scrape(metrics)
        assert _value(scraped, "spark_zmq_relay_reader_committed_offset", reader="etl", channel="0") == 120
        assert _value(scraped, "spark_zmq_relay_reader_lag", reader="etl", channel="0") == 180
        assert _value(scraped, "spark_zmq_relay_reader_held", reader="etl") == 1
        assert _value(scraped, "spark_zmq_relay_spool_bytes", channel="0") > 300 * len(b"msg-100")
        assert _value(scraped, "spark_zmq_relay_disk_free_bytes") > 0
        assert _value(scraped, "spark_zmq_relay_broken_connections_total", channel="0") == 0
        assert _value(scraped, "spark_zmq_relay_handshakes_rejected_total", channel="0") == 0
        assert _value(scraped, "spark_zmq_relay_control_requests_total") >= 2
        assert _names(scraped) == _documented("relay")
    finally:
        if reader is not None:
            reader.close()
        relay.terminate()


def test_a_bad_metrics_address_is_a_usage_error_naming_the_flag(tmp_path):
    result = subprocess.run(
        [CLI, "broker", "--frontend", "@tcp://127.0.0.1:1", "--backend", "@tcp://127.0.0.1:2", "--metrics", "nine"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "--metrics" in result.stderr and "HOST:PORT" in result.stderr, result.stderr
    with pytest.raises(ValueError, match="metrics 'x:y': expected HOST:PORT"):
        serve(_scorer, "tcp://127.0.0.1:1", format="raw", metrics="x:y")
