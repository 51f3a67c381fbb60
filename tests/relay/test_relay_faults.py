"""Network faults between a query and its relay, through Spark, on real sockets.

The relay is a ``spark-zmq relay`` child process; the query reaches its ``--listen`` port
through ``faultproxy.FaultProxy``, so both the driver's control requests and the read
tasks' fetches (``spoolAccess=fetch``) cross the proxy. Two faults:

* a read task's fetch cut mid-range (the connection goes silent after the first reply):
  the task resends its request once heartbeats have replaced the connection and the batch
  completes; cut for good, the task fails within ``fetchTimeout`` naming the server, the
  channel and the offsets, and the restarted query reads the range exactly once;
* the driver cut off from the relay for good: the query fails within ``relayTimeout``
  naming the relay, its lease lapses as documented, and a query restarted from the same
  checkpoint takes the relay over and delivers every message exactly once.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from faultproxy import FaultProxy, blackhole, is_data
from relaytest import RelayProcess, stop_relays
from zmqtest import Producer, free_ports, stop_all, wait_until

from spark_zmq.relay.client import RelayClient
from spark_zmq.relay.protocol import LEASE_TTL_S

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

#: 1 KiB messages: 20,000 of them make a fetch of three replies (8 MiB each at most)
TOTAL = 20_000


def _message(i: int) -> bytes:
    return b"%08d" % i + b"." * 1016


def _is_later_fetch_request(flags: int, body: bytes) -> bool:
    """A read task's request for the rest of a range (not its first request, and not a
    driver's control request): cutting there cuts a fetch mid-range."""
    if not is_data(flags, body) or not body.startswith(b"{"):
        return False
    request = json.loads(body)
    return "op" not in request and request.get("start", 0) > 0


def _spooled(listen: str, expected: int) -> None:
    """Wait until the relay's spool holds ``expected`` messages (under a lease of the
    test's own, released at once so the query can claim the relay)."""
    client = RelayClient(listen, uuid.uuid4().hex, timeout_s=30)
    try:
        wait_until(lambda: client.call("state")["latest"][0] >= expected, 120, f"{expected} messages in the spool")
        client.call("detach")
    finally:
        client.close()


def _start(spark, tmp_path, relays: str, **options):
    reader = (
        spark.readStream.format("zmq")
        .option("relays", relays)
        .option("startingOffsets", "earliest")
        .option("spoolAccess", "fetch")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return (
        reader.load()
        .selectExpr("offset", "cast(cast(substring(value, 1, 8) as string) as long) as n")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _output(spark, tmp_path):
    if not (tmp_path / "out" / "_spark_metadata").exists():
        return None
    return spark.read.schema("offset long, n long").parquet(str(tmp_path / "out"))


def _count(spark, tmp_path) -> int:
    out = _output(spark, tmp_path)
    return 0 if out is None else out.count()


def _assert_exactly_once(spark, tmp_path, n: int) -> None:
    stats = (
        _output(spark, tmp_path)
        .selectExpr(
            "count(*)", "count(distinct offset)", "min(offset)", "max(offset)", "count(distinct n)", "min(n)", "max(n)"
        )
        .first()
    )
    assert tuple(stats) == (n, n, 0, n - 1, n, 0, n - 1), f"not exactly once: {stats} for {n} messages"


def _failure(query, timeout: float) -> str:
    try:
        query.awaitTermination(timeout)
    except Exception:
        pass
    error = query.exception()
    assert error is not None, f"the query did not fail within {timeout} s"
    return str(error)


@pytest.fixture
def relay(tmp_path):
    data_port, listen_port = free_ports(2)
    relay = RelayProcess(f"@tcp://127.0.0.1:{data_port}", f"tcp://127.0.0.1:{listen_port}", str(tmp_path / "spool"))
    relay.data_port, relay.listen_port = data_port, listen_port
    try:
        yield relay
    finally:
        stop_relays([relay])


def _fill(relay, start: int, end: int, wait: bool = True) -> None:
    producer = Producer(f"tcp://127.0.0.1:{relay.data_port}", [_message(i) for i in range(start, end)])
    producer.start()
    producer.finish()
    if wait:
        _spooled(relay.listen, end)


def test_a_fetch_cut_mid_range_is_resent_and_the_batch_completes(spark, tmp_path, relay):
    _fill(relay, 0, TOTAL)
    query = None
    with FaultProxy("127.0.0.1", relay.listen_port) as proxy:
        proxy.cut_at_frame("up", predicate=_is_later_fetch_request)
        try:
            query = _start(spark, tmp_path, proxy.endpoint)
            proxy.wait_for(lambda: proxy.cuts >= 1, 120, "the fetch to be cut mid-range")
            cut_at = time.monotonic()
            proxy.clear_frame_faults()  # the resent request, on the new connection, passes
            # without the resend the task waits fetchTimeout (120 s) and the query fails
            wait_until(
                lambda: _count(spark, tmp_path) >= TOTAL or query.exception(), 90, "the batch whose fetch was cut"
            )
            assert query.exception() is None, query.exception()
            took = time.monotonic() - cut_at
            _assert_exactly_once(spark, tmp_path, TOTAL)
            assert proxy.cuts == 1
            print(f"fetch cut mid-range: batch complete {took:.1f} s after the cut")
        finally:
            if query is not None:
                stop_all([query])


def test_a_fetch_cut_for_good_fails_the_task_naming_the_range_and_the_restart_reads_it(spark, tmp_path, relay):
    _fill(relay, 0, TOTAL)
    with FaultProxy("127.0.0.1", relay.listen_port) as proxy:
        # armed on every connection, the resent requests' new ones too: cut for good
        proxy.cut_at_frame("up", predicate=_is_later_fetch_request)
        query = _start(spark, tmp_path, proxy.endpoint, fetchTimeout="20")
        try:
            proxy.wait_for(lambda: proxy.cuts >= 1, 120, "the fetch to be cut mid-range")
            cut_at = time.monotonic()
            error = _failure(query, 120)
            took = time.monotonic() - cut_at
        finally:
            stop_all([query])
        assert f"no answer from the relay at {proxy.endpoint}'s spool server" in error, error
        assert "within 20 s (option 'fetchTimeout'; channel 0, offsets " in error, error
        assert f"..{TOTAL})" in error, error
        assert took < 20 + 30, f"the task failed {took:.0f} s after the cut (fetchTimeout 20 s)"
        assert proxy.cuts >= 2, "the request was never resent"
        proxy.clear_frame_faults()
        query = _start(spark, tmp_path, proxy.endpoint, fetchTimeout="20")
        try:
            wait_until(
                lambda: _count(spark, tmp_path) >= TOTAL or query.exception(),
                120,
                "the restarted query to read the range",
            )
            assert query.exception() is None, query.exception()
            _assert_exactly_once(spark, tmp_path, TOTAL)
        finally:
            stop_all([query])


def test_a_driver_cut_off_from_its_relay_fails_the_query_and_the_lease_lapses(spark, tmp_path, relay):
    half = TOTAL // 4
    _fill(relay, 0, half)
    with FaultProxy("127.0.0.1", relay.listen_port) as proxy:
        query = _start(spark, tmp_path, proxy.endpoint, relayTimeout="8")
        try:
            wait_until(lambda: _count(spark, tmp_path) >= half or query.exception(), 120, "the first messages")
            assert query.exception() is None, query.exception()
            proxy.set_default(blackhole())  # for good: reconnects go nowhere either
            proxy.blackhole_all()
            cut_at = time.monotonic()
            error = _failure(query, 120)
            took = time.monotonic() - cut_at
        finally:
            stop_all([query])
    assert f"no answer from the relay at {proxy.endpoint}" in error and "(option 'relayTimeout')" in error, error
    assert took < 8 + 20, f"the query failed {took:.0f} s after the cut (relayTimeout 8 s)"
    # the relay kept receiving; the lease of the cut-off query lapses and a query restarted
    # from the same checkpoint, on a path that works, takes the relay over
    _fill(relay, half, 2 * half, wait=False)  # (no lease of ours: the cut-off query holds it)
    restarted_at = time.monotonic()
    query = _start(spark, tmp_path, relay.listen)
    try:
        wait_until(lambda: _count(spark, tmp_path) > half or query.exception(), 120, "the restarted query's rows")
        assert query.exception() is None, query.exception()
        waited = time.monotonic() - restarted_at
        wait_until(lambda: _count(spark, tmp_path) >= 2 * half, 120, "every message")
        _assert_exactly_once(spark, tmp_path, 2 * half)
        print(
            f"driver cut off: query failed {took:.1f} s after the cut; restarted query's first rows "
            f"{waited:.1f} s after its start (lease ttl {LEASE_TTL_S:.0f} s)"
        )
    finally:
        stop_all([query])
