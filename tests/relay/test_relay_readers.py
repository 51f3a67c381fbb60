"""Named readers on one relay (option ``relayReader``): each reader's position and lease,
freeing by the slowest registered reader, retention past a lagging one, ``spark-zmq
relay-readers``, and readers that survive a ``kill -9`` of the relay (no Spark).

Relays are real ones (in this process, or a ``spark-zmq relay`` child process) on real
sockets; readers are ``RelayClient``s with the fetches a read task makes (``fetch_range``)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from relaytest import RelayProcess, stop_relays
from zmqtest import Producer, free_ports, numbered, wait_until

from spark_zmq.ingest.config import IngestConfig
from spark_zmq.ingest.fetch import FetchAccess, fetch_range
from spark_zmq.ingest.loss import DataLossError
from spark_zmq.options import OptionError, SourceOptions
from spark_zmq.relay.client import RelayBusyError, RelayClient
from spark_zmq.relay.protocol import Op
from spark_zmq.relay.server import Relay

pytestmark = pytest.mark.timeout(120)

#: messages per spool segment: the relay fixture closes a segment after each phase
PHASE = 300
#: each message's bytes (a segment of one phase: about 300 KiB)
PAYLOAD = 1000


def _messages(start: int, n: int) -> list[bytes]:
    return [b"%07d" % i + b"x" * (PAYLOAD - 7) for i in range(start, start + n)]


@pytest.fixture
def spooled(tmp_path):
    """A relay (in this process) holding three segments of ``PHASE`` messages each:
    offsets 0..299, 300..599 (closed) and 600..899 (being written)."""
    data = free_ports(1)[0]
    options = SourceOptions.parse(
        {"endpoints": f"@tcp://127.0.0.1:{data}", "spoolDir": str(tmp_path / "spool"), "spoolAccess": "local"}
    )
    # retention far above what is held: the relay's retention thread runs, and a test
    # lowers the limit to see it act. Leases outlive any test (no test here waits for one
    # to lapse): with the default 10 s, a reader held across two ``spark-zmq relay-readers``
    # runs lapsed when a loaded machine took 5 s to start each (the relay-readers test
    # failed so beside two busy processes: its held reader was removed)
    relay = Relay(
        IngestConfig.from_options(options),
        f"tcp://127.0.0.1:{free_ports(1)[0]}",
        retention_bytes=1 << 40,
        lease_ttl_s=600.0,
    )
    channel = relay.ingest.spool.channels[0]
    try:
        for phase in range(3):
            producer = Producer(f"tcp://127.0.0.1:{data}", _messages(phase * PHASE, PHASE))
            producer.start()
            producer.finish()
            wait_until(lambda end=(phase + 1) * PHASE: channel.next_offset == end, 30, f"phase {phase} spooled")
            if phase < 2:
                channel.roll()
        assert [end for end, *_ in channel.segment_ages()] == [300, 600, 900]
        yield relay
    finally:
        relay.stop()


def _reader(relay, name: str) -> RelayClient:
    return RelayClient(relay.listen, f"{name}-{uuid.uuid4().hex}", reader=name, timeout_s=10)


def _fetch(relay, client: RelayClient, start: int, end: int) -> list[int]:
    access = FetchAccess(
        relay.listen, None, server_name=f"the relay at {relay.listen}", session=client.session, is_relay=True
    )
    return [
        int(batch.column("value")[i].as_py()[:7])
        for _, batch in fetch_range(access, 0, start, end, timeout=10)
        for i in range(batch.num_rows)
    ]


def _earliest(relay) -> int:
    return relay.ingest.spool.channels[0].earliest


def test_two_readers_each_get_every_message(spooled):
    a, b = _reader(spooled, "a"), _reader(spooled, "b")
    try:
        for client in (a, b):  # both attach at once: different names, different leases
            assert client.call(Op.ATTACH)["reader"] == client.reader
        assert _fetch(spooled, a, 0, 900) == list(range(900))
        assert _fetch(spooled, b, 0, 900) == list(range(900))
        a.call(Op.RELEASE, offsets={"0": 900})
        assert _fetch(spooled, b, 0, 900) == list(range(900)), "a's commit freed what b has not read"
        assert b.call(Op.STATE)["committed"] == [0] and a.call(Op.STATE)["committed"] == [900]
    finally:
        a.close()
        b.close()


def test_freeing_waits_for_the_slowest_registered_reader(spooled):
    fast, slow = _reader(spooled, "fast"), _reader(spooled, "slow")
    try:
        fast.call(Op.ATTACH)
        slow.call(Op.ATTACH)
        fast.call(Op.RELEASE, offsets={"0": 900})
        assert _earliest(spooled) == 0
        slow.call(Op.RELEASE, offsets={"0": 450})
        assert _earliest(spooled) == 300  # freed by whole segments: 0..299 only
        slow.call(Op.RELEASE, offsets={"0": 900})
        assert _earliest(spooled) == 600  # the segment being written is never freed
        assert _fetch(spooled, slow, 600, 900) == list(range(600, 900))
    finally:
        fast.close()
        slow.close()


def test_with_no_registered_reader_commits_free_nothing(spooled):
    """A stranger's release under a reader nobody registered registers that reader first
    (at the spool's earliest offsets) and frees only what it committed."""
    first = _reader(spooled, "first")
    try:
        assert spooled.readers.minimum() is None
        first.call(Op.ATTACH)
        assert spooled.readers.minimum() == [0]
        first.call(Op.RELEASE, offsets={"0": 600})
        assert _earliest(spooled) == 600
    finally:
        first.close()


def test_byte_retention_frees_past_a_lagging_reader_whose_next_fetch_reports_the_loss(spooled):
    fast, lagging = _reader(spooled, "fast"), _reader(spooled, "lagging")
    try:
        fast.call(Op.ATTACH)
        lagging.call(Op.ATTACH)
        fast.call(Op.RELEASE, offsets={"0": 900})
        assert _fetch(spooled, lagging, 0, 300) == list(range(300))
        sizes = [size for _, size, _, _ in spooled.ingest.spool.channels[0].segment_ages()]
        spooled.retention_bytes = sizes[1] + sizes[2]  # room for the two newest segments only
        wait_until(lambda: _earliest(spooled) == 300, 30, "retention to free the oldest segment")
        with pytest.raises(
            DataLossError,
            match=r"offsets 0\.\.300 of channel 0 of the relay at tcp://127\.0\.0\.1:\d+ "
            r"were freed",
        ):
            _fetch(spooled, lagging, 0, 900)
        assert _fetch(spooled, lagging, 300, 900) == list(range(300, 900))
        listed = {r["name"]: r for r in lagging.call(Op.READERS)["readers"]}
        assert listed["lagging"]["lost"] == [300] and listed["lagging"]["committed"] == [0]
        assert listed["fast"]["lost"] == [0] and listed["fast"]["behind"] == [0]
        assert listed["lagging"]["behind"] == [600]
    finally:
        fast.close()
        lagging.close()


def test_time_retention_frees_what_is_older_whoever_has_not_read_it(spooled):
    reader = _reader(spooled, "idle")
    try:
        reader.call(Op.ATTACH)
        ages = spooled.ingest.spool.channels[0].segment_ages()
        spooled.retention_s = 60.0
        # 60 s after the oldest segment's newest message: only 0..299 is older than 60 s
        assert spooled.enforce_retention(now_us=ages[0][3] + 60_000_001) == {0: 300}
        assert _earliest(spooled) == 300
        # past the newest message: the closed segment is freed, the one being written is
        # closed, and the next check frees it too
        assert spooled.enforce_retention(now_us=ages[2][3] + 61_000_000) == {0: 600}
        assert spooled.enforce_retention(now_us=ages[2][3] + 61_000_000) == {0: 900}
        assert _earliest(spooled) == 900
    finally:
        reader.close()


def test_a_name_held_by_a_running_query_is_refused_naming_the_relay_and_relay_reader(spooled):
    holder, second, other = _reader(spooled, "dash"), _reader(spooled, "dash"), _reader(spooled, "etl")
    try:
        holder.call(Op.ATTACH)
        with pytest.raises(RelayBusyError) as refused:
            second.call(Op.ATTACH)
        message = str(refused.value)
        assert f"the relay at {spooled.listen}" in message and "relayReader 'dash'" in message, message
        assert "'relayReader'" in message  # what to change
        other.call(Op.ATTACH)  # another name reads meanwhile
        holder.call(Op.DETACH)
        second.call(Op.ATTACH)  # a released name is free again, with its position
    finally:
        for client in (holder, second, other):
            client.close()


@pytest.mark.parametrize("name", ["no spaces", "-dash-first", "x" * 65, "caf\u00e9", "a/b"])
def test_option_relay_reader_says_what_a_name_is(name):
    with pytest.raises(OptionError) as refused:
        SourceOptions.parse({"relays": "tcp://127.0.0.1:7000", "relayReader": name})
    assert "option 'relayReader'" in str(refused.value) and "letters, digits" in str(refused.value)
    assert (
        SourceOptions.parse({"relays": "tcp://127.0.0.1:7000", "relayReader": "etl.v2_b-1"}).relay_reader
        == "etl.v2_b-1"
    )
    assert SourceOptions.parse({"relays": "tcp://127.0.0.1:7000"}).relay_reader == "default"
    with pytest.raises(OptionError, match="'relayReader' .* needs option 'relays'"):
        SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:7001", "relayReader": "etl"})


def test_a_bad_reader_name_is_refused_saying_what_is_valid(spooled):
    client = RelayClient(spooled.listen, "s", reader="no spaces", timeout_s=10)
    try:
        with pytest.raises(Exception, match="letters, digits, '.', '_' and '-'"):
            client.call(Op.ATTACH)
    finally:
        client.close()


def _relay_readers(listen: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "spark_zmq.cli", "relay-readers", "--listen", listen, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_relay_readers_lists_and_removes_readers(spooled):
    a, b = _reader(spooled, "a"), _reader(spooled, "b")
    try:
        a.call(Op.ATTACH)
        b.call(Op.ATTACH)
        a.call(Op.RELEASE, offsets={"0": 900})
        b.call(Op.RELEASE, offsets={"0": 250})
        listed = _relay_readers(spooled.listen)
        assert listed.returncode == 0, listed.stderr
        readers = {r["name"]: r for r in json.loads(listed.stdout)["readers"]}
        assert set(readers) == {"a", "b"}
        assert readers["a"]["committed"] == [900] and readers["b"]["committed"] == [250]
        assert readers["b"]["behind"] == [650] and readers["b"]["held"]

        operator = ("--relay-spool-dir", spooled.ingest.spool.spool_dir)
        stranger = _relay_readers(spooled.listen, "--remove", "b")
        assert stranger.returncode == 1 and "removing reader 'b' needs its lease" in stranger.stderr
        refused = _relay_readers(spooled.listen, "--remove", "b", *operator)
        assert refused.returncode == 1
        assert "reader 'b' is held by a running query" in refused.stderr and "stop that query" in refused.stderr
        assert _earliest(spooled) == 0

        b.call(Op.DETACH)
        removed = _relay_readers(spooled.listen, "--remove", "b", *operator)
        assert removed.returncode == 0, removed.stderr
        assert [r["name"] for r in json.loads(removed.stdout)["readers"]] == ["a"]
        assert _earliest(spooled) == 600, "removing the slowest reader frees what the others committed"

        unknown = _relay_readers(spooled.listen, "--remove", "nobody")
        assert unknown.returncode == 1 and "no reader 'nobody'" in unknown.stderr and "'a'" in unknown.stderr
        bad = _relay_readers(spooled.listen, "--remove", "a b")
        assert bad.returncode == 2 and "not a reader name" in bad.stderr
    finally:
        a.close()
        b.close()


def test_a_relay_killed_and_restarted_keeps_its_readers_and_their_positions(tmp_path):
    data_port, listen_port = free_ports(2)
    relay = RelayProcess(
        f"@tcp://127.0.0.1:{data_port}",
        f"tcp://127.0.0.1:{listen_port}",
        str(tmp_path / "spool"),
        "--retention-bytes",
        "1 GiB",
        "--retention-seconds",
        "3600",
    )
    try:
        producer = Producer(f"tcp://127.0.0.1:{data_port}", numbered(3000))
        producer.start()
        producer.finish()
        a, b = _reader(relay, "a"), _reader(relay, "b")
        try:
            wait_until(lambda: a.call(Op.ATTACH)["latest"] == [3000], 30, "3000 messages spooled")
            b.call(Op.ATTACH)
            a.call(Op.RELEASE, offsets={"0": 3000})
            b.call(Op.RELEASE, offsets={"0": 1200})
        finally:
            a.close()
            b.close()
        relay.kill()
        relay.start()
        admin = _reader(relay, "admin")
        b = _reader(relay, "b")  # a new session: the killed relay's leases died with it
        try:
            answer = admin.call(Op.READERS)
            assert answer["retention"] == {"bytes": 1 << 30, "seconds": 3600.0}
            listed = {r["name"]: r for r in answer["readers"]}
            assert {name: r["committed"] for name, r in listed.items()} == {"a": [3000], "b": [1200]}
            assert not any(r["held"] for r in listed.values())
            assert b.call(Op.ATTACH)["committed"] == [1200]
            values = [
                batch.column("value").to_pylist()
                for _, batch in fetch_range(
                    FetchAccess(relay.listen, None, session=b.session), 0, 1200, 3000, timeout=10
                )
            ]
            assert [v for chunk in values for v in chunk] == numbered(3000)[1200:]
        finally:
            admin.close()
            b.close()
    finally:
        stop_relays([relay])
