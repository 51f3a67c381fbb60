"""A relay's reader names belong to whoever registered them: under CURVE the key that
registered a name is the only one that reads, commits or removes under it; without CURVE
removing a name needs its lease or the relay's operator (``spark-zmq relay-readers
--remove NAME --relay-spool-dir DIR``). No Spark: a real relay in this process, real CURVE
clients (``RelayClient``) and the fetches a read task makes (``fetch_range``)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid

import pytest
from clitest import unboxed
from zmqtest import Producer, free_ports, wait_until

from spark_zmq.ingest.config import IngestConfig
from spark_zmq.ingest.fetch import FetchAccess, fetch_range
from spark_zmq.options import SourceOptions
from spark_zmq.patterns.curve import Curve
from spark_zmq.patterns.curve_keys import KeyPair
from spark_zmq.relay.client import RelayClient, RelayError
from spark_zmq.relay.messages import RemoveReaderRequest
from spark_zmq.relay.operator import OPERATOR_TOKEN_FILE
from spark_zmq.relay.protocol import Op
from spark_zmq.relay.readers import ReaderBoundError, Readers
from spark_zmq.relay.server import Relay

pytestmark = pytest.mark.timeout(120)

MESSAGES = 200


def _relay(tmp_path, listen_curve=None, bind_reader_keys=True) -> Relay:
    data = free_ports(1)[0]
    options = SourceOptions.parse(
        {"endpoints": f"@tcp://127.0.0.1:{data}", "spoolDir": str(tmp_path / "spool"), "spoolAccess": "local"}
    )
    relay = Relay(
        IngestConfig.from_options(options),
        f"tcp://127.0.0.1:{free_ports(1)[0]}",
        listen_curve=listen_curve,
        lease_ttl_s=600.0,
        bind_reader_keys=bind_reader_keys,
    )
    producer = Producer(f"tcp://127.0.0.1:{data}", [b"%05d" % i for i in range(MESSAGES)])
    producer.start()
    producer.finish()
    wait_until(lambda: relay.ingest.spool.channels[0].next_offset == MESSAGES, 30, "the messages spooled")
    return relay


@pytest.fixture
def curve_relay(tmp_path):
    """A relay whose ``--listen`` accepts two reader keys, ``a`` and ``b``."""
    server, a, b = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    relay = _relay(tmp_path, Curve.server(server, frozenset({a.public_key, b.public_key})))
    try:
        yield relay, {"a": Curve.client(a, server.public_key), "b": Curve.client(b, server.public_key)}
    finally:
        relay.stop()


def _client(relay, curve, reader: str) -> RelayClient:
    return RelayClient(relay.listen, f"s-{uuid.uuid4().hex}", reader=reader, curve=curve, timeout_s=10)


def _fetch(relay, curve, session: str) -> int:
    keys = {} if curve is None else {"client_public": curve.public_key, "client_secret": curve.secret_key}
    access = FetchAccess(
        relay.listen,
        None if curve is None else curve.server_key,
        server_name=f"the relay at {relay.listen}",
        session=session,
        is_relay=True,
        **keys,
    )
    return sum(batch.num_rows for _, batch in fetch_range(access, 0, 0, MESSAGES, timeout=10))


def test_under_curve_a_reader_name_is_bound_to_the_key_that_registered_it(curve_relay):
    relay, keys = curve_relay
    owner, intruder = _client(relay, keys["a"], "archive"), _client(relay, keys["b"], "archive")
    try:
        owner.call(Op.ATTACH)
        owner.call(Op.RELEASE, offsets={"0": 100})
        owner.call(Op.DETACH)  # stopped: its lease is free, its name still its own
        # another authorised key neither claims the name nor commits past what it holds
        with pytest.raises(
            RelayError,
            match=r"relay at tcp://127\.0\.0\.1:\d+ failed 'attach': refused: reader "
            r"'archive' of this relay is bound to the CURVE key .*relayReader",
        ):
            intruder.call(Op.ATTACH)
        with pytest.raises(RelayError, match="bound to the CURVE key"):
            intruder.call(Op.RELEASE, offsets={"0": MESSAGES})
        assert relay.readers.committed("archive") == [100]
        assert relay.ingest.spool.channels[0].earliest == 0, "nothing freed for the intruder"
        # nor removes it
        with pytest.raises(
            RelayError,
            match=r"removing reader 'archive' needs its lease \(the query reading "
            r"under it\), its CURVE key or the relay's operator",
        ):
            intruder.ask(RemoveReaderRequest("archive"))
        assert [r["name"] for r in relay.readers.describe()] == ["archive"]
        # the owner's query comes back where it left, and fetches under its session;
        # the same session's fetch under the other key is refused
        owner.call(Op.ATTACH)
        assert relay.readers.committed("archive") == [100]
        assert _fetch(relay, keys["a"], owner.session) == MESSAGES
        with pytest.raises(Exception, match="must name the session that holds this relay's lease"):
            _fetch(relay, keys["b"], owner.session)
        # the intruder reads under a name of its own
        intruder.reader = "intruder"
        intruder.call(Op.ATTACH)
        assert _fetch(relay, keys["b"], intruder.session) == MESSAGES
        # the owner's key removes its own name once its query stops
        owner.call(Op.DETACH)
        remover = _client(relay, keys["a"], "admin")
        try:
            names = [r["name"] for r in remover.ask(RemoveReaderRequest("archive")).to_wire()["readers"]]
        finally:
            remover.close()
        assert names == ["intruder"]
    finally:
        owner.close()
        intruder.close()


def test_without_curve_removing_a_reader_needs_its_lease_or_the_operator(tmp_path):
    relay = _relay(tmp_path)
    archive, stranger = _client(relay, None, "archive"), _client(relay, None, "stranger")
    try:
        archive.call(Op.ATTACH)
        archive.call(Op.RELEASE, offsets={"0": 100})
        archive.call(Op.DETACH)
        with pytest.raises(
            RelayError,
            match=r"removing reader 'archive' needs its lease \(the query reading under "
            r"it\) or the relay's operator: run spark-zmq relay-readers --remove "
            r"archive --relay-spool-dir DIR",
        ):
            stranger.ask(RemoveReaderRequest("archive"))
        with pytest.raises(RelayError, match="removing reader 'archive' needs"):
            stranger.ask(RemoveReaderRequest("archive", "0" * 32))  # a guessed token
        with pytest.raises(RelayError, match="'operator': the operator token must be 32 hexadecimal digits"):
            stranger.call(Op.REMOVE_READER, name="archive", operator="x")
        assert [r["name"] for r in relay.readers.describe()] == ["archive"]

        # the token file is the relay's alone; a stranger who cannot read it is no operator
        token_path = os.path.join(relay.ingest.spool.spool_dir, OPERATOR_TOKEN_FILE)
        assert stat.S_IMODE(os.stat(token_path).st_mode) == 0o600
        cli = [sys.executable, "-m", "spark_zmq.cli", "relay-readers", "--listen", relay.listen, "--remove", "archive"]
        missing = subprocess.run(
            cli + ["--relay-spool-dir", str(tmp_path / "elsewhere")], capture_output=True, text=True, timeout=60
        )
        assert missing.returncode == 2 and "cannot read the relay's operator token" in unboxed(missing.stderr)
        removed = subprocess.run(
            cli + ["--relay-spool-dir", relay.ingest.spool.spool_dir], capture_output=True, text=True, timeout=60
        )
        assert removed.returncode == 0, removed.stderr
        assert json.loads(removed.stdout)["readers"] == []

        # a query removes its own name under its lease
        archive.call(Op.ATTACH)
        assert archive.ask(RemoveReaderRequest("archive")).to_wire()["readers"] == []
    finally:
        archive.close()
        stranger.close()
        relay.stop()


def test_a_key_binding_survives_a_restart_and_a_name_registered_without_curve_takes_the_first_key(tmp_path):
    spool = str(tmp_path)
    readers = Readers(spool, 1, lambda: [0], ttl_s=10.0)
    readers.claim("plain", "s1")  # registered without CURVE
    readers.claim("keyed", "s2", "A" * 40)
    readers.release_lease("plain", "s1")
    readers.release_lease("keyed", "s2")
    again = Readers(spool, 1, lambda: [0], ttl_s=10.0)
    with pytest.raises(
        ReaderBoundError,
        match=r"reader 'keyed' of this relay is bound to the CURVE key that "
        r"registered it \(AAAAAAAA\.\.\.\), not this query's \(BBBBBBBB\.\.\.\)",
    ):
        again.claim("keyed", "s3", "B" * 40)
    assert again.claim("keyed", "s3", "A" * 40) is None
    assert again.claim("plain", "s4", "B" * 40) is None  # the first key to claim it keeps it
    again.release_lease("plain", "s4")
    with pytest.raises(ReaderBoundError):
        again.claim("plain", "s5", "C" * 40)
    assert again.claim("plain", "s5") is None, "a relay run without CURVE binds nobody"


def test_a_relay_that_binds_no_keys_lets_a_new_key_take_a_free_name_and_fetch(tmp_path):
    """A query's own receiver process (``bind_reader_keys=False``): each run of the query
    comes with keys made anew, so the name is the lease holder's whatever its key."""
    server, first, second = KeyPair.generate(), KeyPair.generate(), KeyPair.generate()
    relay = _relay(
        tmp_path, Curve.server(server, frozenset({first.public_key, second.public_key})), bind_reader_keys=False
    )
    keys = [Curve.client(pair, server.public_key) for pair in (first, second)]
    try:
        earlier = _client(relay, keys[0], "query")
        earlier.call(Op.ATTACH)
        assert _fetch(relay, keys[0], earlier.session) == MESSAGES
        earlier.call(Op.DETACH)
        earlier.close()
        later = _client(relay, keys[1], "query")  # the query's next run, another key
        try:
            later.call(Op.ATTACH)
            later.call(Op.RELEASE, offsets={"0": 50})
            assert relay.readers.committed("query") == [50]
            assert _fetch(relay, keys[1], later.session) == MESSAGES
        finally:
            later.close()
    finally:
        relay.stop()
