"""Every request on a relay's ``--listen`` port checked against the reader's lease, and
offsets beyond what the spool has written refused (no Spark).

The relay is a real one in this process, on real sockets; attackers are plain pyzmq DEALER
sockets and ``RelayClient``s under sessions of their own, as anyone who reaches the port
(with a key it accepts) could send."""

from __future__ import annotations

import json
import uuid

import pytest
import zmq
from relaytest import relay  # noqa: F401  (a fixture)
from zmqtest import Producer, free_ports, numbered, wait_until

from spark_zmq.ingest.config import IngestConfig
from spark_zmq.ingest.fetch import FetchAccess, FetchError, fetch_range
from spark_zmq.options import SourceOptions
from spark_zmq.relay.client import RelayClient, RelayError
from spark_zmq.relay.lease import Lease
from spark_zmq.relay.server import Relay

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def holder(relay):
    client = RelayClient(relay.listen, "reader-" + uuid.uuid4().hex, timeout_s=10)
    client.call("attach")
    yield client
    client.close()


def _fetch(relay, session, start=0, end=500) -> list:
    access = FetchAccess(relay.listen, None, server_name="the relay", session=session, is_relay=True)
    return list(fetch_range(access, 0, start, end, timeout=10))


def test_hello_tells_nobody_where_the_spool_is(relay):
    stranger = RelayClient(relay.listen, "stranger", timeout_s=10)
    try:
        hello = stranger.call("hello")
        assert hello["channels"] == 1 and hello["protocol"] == 1
        assert not {"spoolDir", "owner", "endpoints"} & set(hello), hello
        assert relay.ingest.spool.spool_dir not in json.dumps(hello)
    finally:
        stranger.close()


def test_a_fetch_is_served_only_under_the_holders_session(relay, holder):
    batches = _fetch(relay, holder.session)
    assert sum(batch.num_rows for _, batch in batches) == 500
    for session in (None, "stranger"):
        with pytest.raises(FetchError, match="must name the session that holds this relay's lease"):
            _fetch(relay, session)
    dealer = zmq.Context.instance().socket(zmq.DEALER)  # a plain request without any session
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(relay.listen)
    try:
        dealer.send_multipart([b"", json.dumps({"channel": 0, "start": 0, "end": 500}).encode()])
        assert dealer.poll(10_000)
        reply = dealer.recv_multipart()
        assert reply[1] == b"error" and b"lease" in reply[2], reply[:3]
    finally:
        dealer.close(0)


def test_a_fetch_past_what_the_spool_has_written_is_refused(relay, holder):
    with pytest.raises(
        FetchError,
        match=r"offsets up to 501 of channel 0 are past what the spool has written "
        r"\(latest 500\)",
    ):
        _fetch(relay, holder.session, end=501)


def test_a_fetch_after_the_lease_lapsed_or_was_released_is_refused(relay, holder):
    holder.call("detach")
    with pytest.raises(FetchError, match="must name the session that holds"):
        _fetch(relay, holder.session)


def test_a_fetch_after_the_lease_lapsed_is_served_until_another_query_claims_it(tmp_path):
    """The driver is cut off from the relay longer than the lease's ttl (its heartbeats do
    not arrive) while its executors still reach the relay: their fetches are served, until
    another query takes the reader's name."""
    data = free_ports(1)[0]
    options = SourceOptions.parse(
        {"endpoints": f"@tcp://127.0.0.1:{data}", "spoolDir": str(tmp_path / "spool"), "spoolAccess": "local"}
    )
    served = Relay(IngestConfig.from_options(options), f"tcp://127.0.0.1:{free_ports(1)[0]}", lease_ttl_s=0.5)
    holder = RelayClient(served.listen, "holder", timeout_s=10)
    other = RelayClient(served.listen, "other", timeout_s=10)
    try:
        producer = Producer(f"tcp://127.0.0.1:{data}", numbered(500))
        producer.start()
        producer.finish()
        wait_until(lambda: served.ingest.spool.channels[0].next_offset == 500, 30, "500 messages spooled")
        holder.call("attach")
        wait_until(lambda: not served.readers.held("default"), 10, "the lease to lapse")
        assert sum(batch.num_rows for _, batch in _fetch(served, holder.session)) == 500
        other.call("attach")
        with pytest.raises(FetchError, match="must name the session that holds"):
            _fetch(served, holder.session)
    finally:
        holder.close()
        other.close()
        served.stop()


def test_release_past_latest_is_refused_and_frees_nothing(relay, holder):
    with pytest.raises(RelayError, match=r"offset 501 of channel 0 is past what the spool has written \(latest 500\)"):
        holder.call("release", offsets={"0": 501})
    with pytest.raises(RelayError, match="offset .* is past what the spool has written"):
        holder.call("release", offsets={"0": (1 << 63) - 1})
    assert relay.ingest.spool.channels[0].earliest == 0
    assert sum(batch.num_rows for _, batch in _fetch(relay, holder.session)) == 500


def test_advance_near_the_top_of_int64_is_refused(relay, holder):
    with pytest.raises(RelayError, match=r"'offset' 9223372036854775806 of 'advance' is past 4611686018427387904"):
        holder.call("advance", channel=0, offset=(1 << 63) - 2)
    assert holder.call("state")["latest"] == [500]


def test_a_session_that_does_not_hold_the_lease_gets_no_control_answer(relay, holder):
    other = RelayClient(relay.listen, "other", timeout_s=10)
    try:
        for op, fields in (
            ("state", {}),
            ("count", {"channel": 0, "start": 0, "end": 10}),
            ("release", {"offsets": {"0": 100}}),
            ("advance", {"channel": 0, "offset": 1000}),
        ):
            with pytest.raises(RelayError, match="is read by another query"):
                other.call(op, **fields)
        assert relay.ingest.spool.channels[0].earliest == 0
        assert relay.ingest.spool.channels[0].next_offset == 500
    finally:
        other.close()


def test_the_lease_holds_only_its_live_holder():
    now = [0.0]
    lease = Lease(10.0, lambda: now[0])
    assert not lease.holds("a")
    lease.claim("a")
    assert lease.holds("a") and not lease.holds("b") and not lease.holds(None) and not lease.holds(["a"])
    now[0] = 10.0
    assert not lease.holds("a")  # lapsed, though nobody claimed it since


@pytest.mark.parametrize(
    "op, fields",
    [
        ("count", {"channel": 0, "start": 0, "end": 501}),
        ("count", {"channel": 0, "start": 600, "end": 700}),
        ("end_within", {"channel": 0, "start": 0, "end": 501, "rows": 10}),
        ("lost", {"channel": 0, "start": 400, "end": 501}),
        ("locate", {"channel": 0, "offset": 501}),
        ("describe", {"ranges": {"0": [0, 501]}}),
        ("describe", {"ranges": {"0": [600, 700]}}),
    ],
)
def test_read_only_ops_past_what_the_spool_has_written_are_refused(relay, holder, op, fields):
    """Answered, they read as zero messages, no loss, no place: a batch planned over them
    would be empty, and its offsets name other messages once those arrive."""
    asked = (
        max(v for k, v in fields.items() if k in ("end", "offset")) if op != "describe" else max(fields["ranges"]["0"])
    )
    with pytest.raises(
        RelayError,
        match=rf"failed '{op}': bad request: offset {asked} of channel 0 is past what the "
        r"spool has written \(latest 500\)",
    ):
        holder.call(op, **fields)


def test_read_only_ops_up_to_the_latest_are_answered(relay, holder):
    assert holder.call("count", channel=0, start=0, end=500)["rows"] == 500
    assert holder.call("end_within", channel=0, start=0, end=500, rows=10)["end"] == 10
    assert holder.call("lost", channel=0, start=0, end=500)["lost"] == []
    assert holder.call("locate", channel=0, offset=0)["at"] is not None
    assert holder.call("describe", ranges={"0": [100, 500]})["ranges"]["0"]["rows"] == 400


def test_a_checkpoint_ahead_of_a_recreated_relay_spool_is_reconciled_without_asking_past_latest(relay, tmp_path):
    """A query restarted on a relay whose spool was recreated: its checkpoint (offset 800 of
    another spool) is past the relay's latest (500). The reader counts what the spool holds
    below the checkpoint as lost (failOnDataLoss=false) and moves the relay past it, though
    the relay refuses to be asked about offsets past its latest."""
    from spark_zmq.options import SourceOptions
    from spark_zmq.source.offsets import ChannelOffsets
    from spark_zmq.source.schema_contract import default_schema
    from spark_zmq.source.stream import ZmqStreamReader

    options = SourceOptions.parse(
        {"relays": relay.listen, "failOnDataLoss": "false", "spoolDir": str(tmp_path / "query")}
    )
    reader = ZmqStreamReader(options, default_schema(options))
    try:
        runtime = reader._ingest(ChannelOffsets({"0": 800}, "spool-of-before"))
        assert reader._loss.lost == 500
        assert runtime.latest() == {"0": 800}
        assert relay.ingest.spool.channels[0].next_offset == 800
    finally:
        reader.stop()


def test_a_reader_cannot_renumber_a_channel_another_reader_still_needs(relay, holder):
    """``advance`` to 2^62 by one reader moved the channel past what every other reader had
    read, and their next fetch met data loss for good: it is refused, naming the reader
    behind and the offsets, and the numbering stays."""
    holder.call("release", offsets={"0": 200})  # the default reader read up to 200
    dashboard = RelayClient(relay.listen, "dashboard-" + uuid.uuid4().hex, timeout_s=10, reader="dashboard")
    try:
        dashboard.call("attach")
        with pytest.raises(
            RelayError,
            match=r"advance of channel 0 to offset 4611686018427387904 would skip offsets "
            r"500\.\.4611686018427387904 that reader 'default' .* committed up to 200",
        ):
            dashboard.call("advance", channel=0, offset=1 << 62)
        assert relay.ingest.spool.channels[0].next_offset == 500
        assert sum(batch.num_rows for _, batch in _fetch(relay, holder.session, 200, 500)) == 300
    finally:
        dashboard.close()


def test_the_only_reader_may_still_renumber_its_channel(relay, holder):
    """A recreated spool behind its query's checkpoint is what ``advance`` is for."""
    holder.call("advance", channel=0, offset=10_000)
    assert relay.ingest.spool.channels[0].next_offset == 10_000
