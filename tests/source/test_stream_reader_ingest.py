"""The stream reader is handed the factory of its ingest: it opens the ingest on its first
offset call (never when built: Spark builds readers in short-lived planning processes,
where a bind would only steal the port) and checks Spark's offsets against it through
``exactly_once``. Driven on the reader itself with a real ``LocalIngest`` and no Spark
session (pyspark is imported for the reader's base class only)."""

from __future__ import annotations

import pytest
from zmqtest import free_ports

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.loss import DataLossError
from spark_zmq.options import SourceOptions
from spark_zmq.source.reader_ingest import Ingest, open_ingest
from spark_zmq.source.schema_contract import default_schema
from spark_zmq.source.stream import ZmqStreamReader

pytestmark = pytest.mark.timeout(60)


def _reader(tmp_path, opened: list, **extra: str) -> ZmqStreamReader:
    options = SourceOptions.parse(
        {
            "endpoints": f"@tcp://127.0.0.1:{free_ports(1)[0]}",
            "format": "raw",
            "receivers": "threads",
            "spoolDir": str(tmp_path / "spool"),
            **extra,
        }
    )

    def factory(opts: SourceOptions) -> Ingest:
        ingest = open_ingest(opts)
        opened.append(ingest)
        return ingest

    return ZmqStreamReader(options, default_schema(options), factory)


def test_the_reader_opens_the_handed_ingest_lazily_and_plans_on_it(tmp_path):
    opened: list = []
    reader = _reader(tmp_path, opened, startingOffsets="earliest")
    try:
        assert opened == [], "built without binding"
        start = reader.initialOffset()
        assert len(opened) == 1 and opened[0].started
        opened[0].channels[0].append(messages_to_batch([b"a", b"b", b"c"], None, "raw", 0))
        assert reader.latestOffset(start, reader.getDefaultReadLimit()) == {"0": 3, "spool": opened[0].spool_id}
        assert len(opened) == 1
    finally:
        reader.stop()


@pytest.mark.parametrize("fail", ["true", "false"])
def test_the_reader_applies_the_rules_to_a_checkpoint_of_another_spool(tmp_path, fail):
    opened: list = []
    reader = _reader(tmp_path, opened, failOnDataLoss=fail)
    try:
        checkpoint = {"0": 40, "spool": "0" * 32}
        if fail == "true":
            with pytest.raises(DataLossError, match="refer to spool"):
                reader.latestOffset(checkpoint, reader.getDefaultReadLimit())
            assert reader._runtime is None, "an ingest failing the check is not kept"
            return
        assert reader.latestOffset(checkpoint, reader.getDefaultReadLimit())["0"] == 40
        assert reader.partitions({"0": 30, "spool": "0" * 32}, checkpoint) == []
        assert reader.reportLatestOffset()["dataLoss"] == {"records": 10}
    finally:
        reader.stop()


def test_the_first_batch_start_is_forgotten_once_spark_plans_past_it(tmp_path):
    """An availableNow query ends without a commit() for its last batch; Spark's next offset
    call after a batch (``latestOffset`` from that batch's end) is what says the batch is in
    its commit log. From then on a new query on this spool begins at the latest offsets,
    not at this query's start (which would read this query's rows again)."""
    opened: list = []
    reader = _reader(tmp_path, opened)
    kept = tmp_path / "spool" / "query-start.json"
    try:
        start = reader.initialOffset()
        opened[0].channels[0].append(messages_to_batch([b"a", b"b", b"c"], None, "raw", 0))
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        assert kept.exists(), "batch 0 is planned, not committed: a restart must begin where it began"
        reader.latestOffset(end, reader.getDefaultReadLimit())
        assert not kept.exists()
    finally:
        reader.stop()
    again = ZmqStreamReader(reader.options, default_schema(reader.options), open_ingest)
    try:
        assert again.initialOffset()["0"] == 3, "a new query begins at the latest offsets"
    finally:
        again.stop()
