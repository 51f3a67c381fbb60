"""A read task of a query that reads a relay (option ``relays``) and finds the offsets its
batch needs gone: its DataLossError names the relay (address and channel), why a relay
loses them and what to do, never "the driver's spool".

The offsets go between planning and reading, as when the relay's retention frees them
under a lagging query: the relay's index still holds them (so the driver plans the batch
without loss) but its segment files are removed. Read in place (the relay's spool on this
host) and fetched from the relay's port (``spoolAccess=fetch``), through Spark, with a
real ``spark-zmq relay`` process."""

from __future__ import annotations

import glob
import os
import uuid

import pytest
from relaytest import RelayProcess
from zmqtest import Producer, free_ports, numbered, run_available_now, wait_until

from spark_zmq.relay.client import RelayClient
from spark_zmq.relay.messages import StateRequest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

MESSAGES = 200


@pytest.fixture(scope="module")
def emptied_relay(tmp_path_factory):
    """A relay whose index holds offsets 0..200 of channel 0 and whose spool files are gone."""
    data, listen = free_ports(2)
    spool = str(tmp_path_factory.mktemp("relay-loss") / "spool")
    relay = RelayProcess(f"@tcp://127.0.0.1:{data}", f"tcp://127.0.0.1:{listen}", spool)
    probe = RelayClient(relay.listen, uuid.uuid4().hex, reader="probe", timeout_s=10)
    try:
        producer = Producer(f"tcp://127.0.0.1:{data}", numbered(MESSAGES))
        producer.start()
        producer.finish()
        wait_until(lambda: probe.ask(StateRequest()).latest == [MESSAGES], 30, "the relay to spool every message")
        segments = glob.glob(os.path.join(spool, "ch-0", "*.seg"))
        assert segments, f"no segment in {spool}"
        for path in segments:
            os.remove(path)
        yield relay
    finally:
        probe.close()
        relay.close()


@pytest.mark.parametrize("access", ["auto", "fetch"])
def test_a_read_task_missing_a_relays_offsets_names_the_relay_and_channel(spark, tmp_path, emptied_relay, access):
    df = (
        spark.readStream.format("zmq")
        .option("relays", emptied_relay.listen)
        .option("relayReader", access)
        .option("spoolAccess", access)
        .option("startingOffsets", "earliest")
        .load()
    )
    rows, error = run_available_now(spark, df, tmp_path, f"relay_loss_{access}", timeout=120)
    assert rows is None and error is not None, "the batch read the removed offsets"
    assert "DataLossError" in error, error
    assert f"offsets 0..{MESSAGES} of channel 0 of the relay at {emptied_relay.listen}" in error, error
    assert "retention" in error and "failOnDataLoss=false" in error, error
    assert "driver's spool" not in error, error
