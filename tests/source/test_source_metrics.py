"""Option ``metricsAddress``: the query's receivers on the driver host, scraped over HTTP
while the query runs, against what was sent (``receivers=threads``: the values are live)."""

from __future__ import annotations

import os
import re
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from zmqtest import Producer, free_ports, stop_all, wait_until

from spark_zmq.options import OptionError, SourceOptions

pytestmark = pytest.mark.timeout(240)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _scrape(address: str) -> dict:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_address_serves_each_channels_offsets_and_lag_during_the_run(spark, spool_dir, tmp_path):
    first, second, port = free_ports(3)
    address = f"127.0.0.1:{port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{first},@tcp://127.0.0.1:{second}")
        .option("spoolDir", spool_dir)
        .option("receivers", "threads")
        .option("metricsAddress", address)
        .load()
    )
    query = (
        df.writeStream.format("memory")
        .queryName("metered")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    producers = [
        Producer(f"tcp://127.0.0.1:{first}", [b"a-%d" % i for i in range(700)]),
        Producer(f"tcp://127.0.0.1:{second}", [b"b-%d" % i for i in range(300)]),
    ]
    try:
        wait_until(lambda: _scrape(address), 90, "the query's metrics endpoint")
        for producer in producers:
            producer.start()

        def caught_up() -> bool:
            scraped = _scrape(address)
            return (
                scraped.get(("spark_zmq_source_latest_offset", (("channel", "0"),))) == 700
                and scraped.get(("spark_zmq_source_latest_offset", (("channel", "1"),))) == 300
                and scraped.get(("spark_zmq_source_lag", (("channel", "0"),))) == 0
                and scraped.get(("spark_zmq_source_lag", (("channel", "1"),))) == 0
            )

        wait_until(caught_up, 120, "700 and 300 messages received and planned, as the scrape says")
        scraped = _scrape(address)
        assert scraped[("spark_zmq_source_broken_connections_total", ())] == 0
        assert scraped[("spark_zmq_source_handshakes_rejected_total", ())] == 0
        with open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8") as f:
            assert {name for name, _ in scraped} == set(re.findall(r"`(spark_zmq_source_[a-z_]+)`", f.read()))
        wait_until(lambda: spark.table("metered").count() == 1000, 60, "the 1000 rows")
    finally:
        for producer in producers:
            producer.finish()
        stop_all([query])
    assert not _scrape(address)  # the endpoint ends with the query


def test_a_bad_metrics_address_names_the_option():
    with pytest.raises(OptionError, match="option 'metricsAddress' = 'nine' is not valid: expected HOST:PORT"):
        SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:5555", "metricsAddress": "nine"})
