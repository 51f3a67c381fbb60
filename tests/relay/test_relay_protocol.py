"""The relay's lease and its request handling, attacked as a stranger would (no Spark).

The lease is pure bookkeeping over a clock; the relay is a real one in this process, on
real sockets, with plain pyzmq DEALER clients that send what a hostile peer might."""

from __future__ import annotations

import json

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relaytest import relay  # noqa: F401  (a fixture)
from zmqtest import Producer, examples, free_ports, numbered, wait_until

from spark_zmq.ingest.config import IngestConfig
from spark_zmq.options import SourceOptions
from spark_zmq.relay.client import RelayBusyError, RelayClient, RelayError
from spark_zmq.relay.lease import Lease
from spark_zmq.relay.server import Relay

pytestmark = pytest.mark.timeout(120)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_lease_admits_one_holder_and_lapses_when_nobody_renews():
    clock = Clock()
    lease = Lease(10.0, clock)
    assert lease.claim("a") is None
    clock.now += 4
    refusal = lease.claim("b")
    assert refusal is not None and refusal.holder == "a" and refusal.idle_s == 4 and refusal.lapses_in_s == 6
    assert lease.claim("a") is None  # renewing resets the clock
    clock.now += 9.9
    assert lease.claim("b") is not None
    clock.now += 0.1
    assert lease.claim("b") is None and lease.holder == "b"
    lease.release("a")  # a stranger's release changes nothing
    assert lease.holder == "b"
    lease.release("b")
    assert lease.claim("c") is None
    with pytest.raises(ValueError):
        Lease(0)


def _dealer(relay):
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.RCVTIMEO, 5000)
    dealer.connect(relay.listen)
    return dealer


def test_a_second_session_is_refused_and_garbage_gets_an_answer_not_a_crash(relay):
    holder = RelayClient(relay.listen, "holder", timeout_s=5)
    other = RelayClient(relay.listen, "other", timeout_s=5)
    try:
        assert holder.call("attach")["latest"] == [500]
        with pytest.raises(RelayBusyError, match="is read by another query"):
            other.call("attach")
        with pytest.raises(RelayBusyError):
            other.call("release", offsets={"0": 500})  # a stranger cannot free the holder's spool
        assert relay.ingest.spool.channels[0].earliest == 0
        dealer = _dealer(relay)
        for body in (
            b"\xff\xfe",
            b"[1, 2]",
            b"[" * 60_000,
            json.dumps({"op": "count", "session": "holder", "channel": 99, "start": 0, "end": 1}).encode(),
            json.dumps({"op": "release", "session": "holder", "offsets": {"0": "x"}}).encode(),
            json.dumps({"op": "nope", "session": "holder"}).encode(),
            json.dumps({"op": "state", "session": ["x"]}).encode(),
        ):
            dealer.send_multipart([b"", body])
            reply = dealer.recv_multipart()
            assert reply[1] == b"error", (body[:40], reply)
        dealer.send_multipart([b"", b"x" * (1 << 20)])  # over the request cap: libzmq drops the peer
        assert holder.call("state")["latest"] == [500]  # still serving
        dealer.close(0)
    finally:
        holder.close()
        other.close()


def test_a_silent_relay_is_a_clear_error_within_the_timeout():
    client = RelayClient(f"tcp://127.0.0.1:{free_ports(1)[0]}", "s", timeout_s=1.5)
    try:
        with pytest.raises(
            RelayError,
            match=r"no answer from the relay at tcp://127\.0\.0\.1:\d+ to 'attach' "
            r"within 2 s \(option 'relayTimeout'\)",
        ):
            client.call("attach")
    finally:
        client.close()


@pytest.mark.timeout(30)
def test_a_relay_known_to_be_gone_is_reported_at_the_next_resend_not_after_the_timeout():
    """A receiver process that died between the reader's check and its request: the
    client's watch (the process's exit code) names it within one resend, instead of
    a silence of the whole ``relayTimeout`` (seen in CI: 30 s and the wrong reason)."""
    import time

    from spark_zmq.relay.client import RESEND_S

    checks = []

    def watch():
        checks.append(time.monotonic())
        if len(checks) > 1:
            raise RuntimeError("the receiver process of channel 0 exited: killed by signal 9")

    client = RelayClient(f"tcp://127.0.0.1:{free_ports(1)[0]}", "s", timeout_s=600, watch=watch)
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="exited: killed by signal 9"):
            client.call("state")
        assert time.monotonic() - started < RESEND_S * 5
    finally:
        client.close()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_request = st.fixed_dictionaries(
    {
        "op": st.sampled_from(
            [
                "hello",
                "attach",
                "state",
                "count",
                "end_within",
                "lost",
                "advance",
                "release",
                "locate",
                "describe",
                "detach",
                "at_time",
                "readers",
                "other",
            ]
        ),
        "session": st.one_of(st.just("fuzz"), _json),
    },
    optional={
        "channel": _json | st.integers(-2, 3),
        "start": _json | st.integers(-2, 10**20),
        "end": _json | st.integers(-2, 10**20),
        "offset": _json | st.integers(-2, 10**20),
        "offsets": _json,
        "rows": _json,
        "bytes": _json,
        "id": _json,
        "timestamp": _json | st.integers(-2, 10**20),
        "ranges": _json
        | st.dictionaries(
            st.sampled_from(["0", "1", "-1", "x", "00", "9" * 7]),
            st.lists(_json | st.integers(-2, 10**20), max_size=3),
            max_size=3,
        ),
    },
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=_request)
def test_any_request_gets_a_json_answer_and_never_moves_offsets_backwards(relay, request):
    before = relay.ingest.spool.channels[0].next_offset
    status, body = relay._control(request)
    assert status in (b"ok", b"error")
    answer = json.loads(body)
    # refused for what is wrong with it, never a failure of the relay
    assert status == b"ok" or answer["error"].startswith("bad request: "), answer
    assert relay.ingest.spool.channels[0].next_offset >= before
    relay.readers.release_lease("default", "fuzz")


def test_a_receiver_process_relay_numbers_nothing_until_the_query_says_start(tmp_path):
    """A query's own receiver process (start_receivers=False) binds at once but numbers
    nothing until ``start``: messages that arrive first wait in the socket, so the query can
    first move a recreated spool past its checkpoint (``advance``). They are then numbered
    from the checkpoint on, never below it."""
    from spark_zmq.ingest.spool_reader import read_range

    data = free_ports(1)[0]
    options = SourceOptions.parse(
        {"endpoints": f"@tcp://127.0.0.1:{data}", "spoolDir": str(tmp_path / "spool"), "spoolAccess": "local"}
    )
    relay = Relay(IngestConfig.from_options(options), f"tcp://127.0.0.1:{free_ports(1)[0]}", start_receivers=False)
    client = RelayClient(relay.listen, "query", timeout_s=5)
    try:
        producer = Producer(f"tcp://127.0.0.1:{data}", numbered(100, fmt=b"early-%d"))
        producer.start()
        producer.finish()
        assert relay.ingest.receivers[0].socket.poll_recv(timeout=30), "the messages never reached the socket"
        assert client.call("attach")["latest"] == [0]  # queued in the socket, not numbered
        client.call("advance", channel=0, offset=500)  # the checkpoint is at 500
        client.call("start")
        wait_until(lambda: client.call("state")["latest"] == [600], 30, "the queued messages to be numbered")
        held = [
            (first + i, v.as_py())
            for first, batch in read_range(relay.ingest.spool.spool_dir, 0, 500, 600)
            for i, v in enumerate(batch.column(0))
        ]
        assert held == [(500 + i, b"early-%d" % i) for i in range(100)]
    finally:
        client.close()
        relay.stop()


def test_losses_cross_the_wire_in_protocol_1s_form_and_read_back_as_loss_records(relay):
    """A relay's loss goes over the wire as ``[first, end, words]`` (its offsets, the words
    narrowed to the range asked), whatever type either side holds it in."""
    from types import SimpleNamespace

    from spark_zmq.ingest.loss import LostRange
    from spark_zmq.source.relays import RelayChannel

    relay.ingest.spool.channels[0].lost.append(
        LostRange(0, 10, 20, "record at byte 7: checksum mismatch", path="/spool/ch-0/0-0.seg")
    )
    client = RelayClient(relay.listen, "holder", timeout_s=5)
    dealer = _dealer(relay)
    try:
        client.call("attach")
        dealer.send_multipart(
            [
                b"",
                json.dumps({"op": "lost", "session": "holder", "id": 7, "channel": 0, "start": 12, "end": 30}).encode(),
            ]
        )
        assert dealer.recv_multipart()[1:] == [
            b"ok",
            b'{"lost": [[10, 20, "offsets 12..20 of channel 0 in '
            b'/spool/ch-0/0-0.seg (record at byte 7: checksum mismatch)"]], '
            b'"id": 7}',
        ]
        view = SimpleNamespace(client=client, first_channel=3, target=SimpleNamespace(label="relay at X"))
        [loss] = RelayChannel(view, 0).snapshot().lost_within(12, 30)
        assert (loss.channel, loss.first, loss.end) == (3, 10, 20)
        assert loss.within(12, 30).describe() == (
            "offsets 12..20 of channel 0 in /spool/ch-0/0-0.seg (record at byte 7: checksum mismatch) (relay at X)"
        )
    finally:
        dealer.close(0)
        client.close()


def test_describe_answers_counts_losses_and_hints_of_several_ranges_in_one_request(relay):
    """DESCRIBE: what COUNT, LOST and LOCATE answer for a range, for each range asked, in
    one round trip; the loss in protocol 1's form, as LOST gives it."""
    from spark_zmq.ingest.loss import LostRange

    relay.ingest.spool.channels[0].lost.append(LostRange(0, 10, 20, "checksum mismatch", path="/spool/x.seg"))
    client = RelayClient(relay.listen, "holder", timeout_s=5)
    try:
        client.call("attach")
        single = {op: client.call(op, channel=0, start=12, end=30) for op in ("count", "lost")}
        at = client.call("locate", channel=0, offset=12)["at"]
        [got] = client.call("describe", ranges={"0": [12, 30]})["ranges"].values()
        assert got == {
            "rows": single["count"]["rows"],
            "bytes": single["count"]["bytes"],
            "at": at,
            "lost": single["lost"]["lost"],
        }
        with pytest.raises(RelayError, match="bad request"):
            client.call("describe", ranges={"5": [0, 1]})
    finally:
        client.close()


def test_typed_requests_get_the_answers_raw_requests_get_read_into_their_types(relay):
    """``ask`` sends what ``call`` sends for the same fields, and its answer is the raw
    answer read into the request's answer type."""
    from spark_zmq.relay import messages as m

    client = RelayClient(relay.listen, "holder", timeout_s=5)
    try:
        attached = client.ask(m.AttachRequest())
        assert attached.relay.spool_dir == relay.ingest.spool.spool_dir and attached.relay.reader == "default"
        assert attached.state.latest == [500] and attached.state.committed == [0]
        for request, op, fields in (
            (m.CountRequest(0, 100, 500), "count", {"channel": 0, "start": 100, "end": 500}),
            (m.EndWithinRequest(0, 0, 500, 10), "end_within", {"channel": 0, "start": 0, "end": 500, "rows": 10}),
            (m.LostRequest(0, 0, 500), "lost", {"channel": 0, "start": 0, "end": 500}),
            (m.LocateRequest(0, 12), "locate", {"channel": 0, "offset": 12}),
            (m.DescribeRequest({0: (12, 500)}), "describe", {"ranges": {"0": [12, 500]}}),
            (m.AtTimeRequest(0), "at_time", {"timestamp": 0}),
        ):
            assert client.ask(request) == request.answer(client.call(op, **fields)), op
        assert client.ask(m.CountRequest(0, 100, 500)).rows == 400
        assert client.ask(m.EndWithinRequest(0, 0, 500, 10)).end == 10
        released = client.ask(m.ReleaseRequest({0: 100}))
        assert (released.latest, released.committed) == ([500], [100])
        assert client.ask(m.HelloRequest()).channels == 1
        assert [r.name for r in client.ask(m.ReadersRequest()).readers] == ["default"]
        with pytest.raises(RelayError, match=r"failed 'count': bad request: offset 501 of channel 0 is past"):
            client.ask(m.CountRequest(0, 0, 501))
        assert client.ask(m.DetachRequest()) == m.Done()
    finally:
        client.close()


def test_a_malformed_request_claims_no_lease_and_registers_no_reader(relay):
    """What is wrong with a request is found before the relay acts on it: a stranger's
    malformed request neither takes a free reader name nor registers a new one."""
    status, body = relay._control(
        {"op": "count", "session": "stranger", "reader": "newcomer", "channel": "0", "start": 0, "end": 1}
    )
    assert status == b"error" and b"'channel' must be an integer" in body
    assert "newcomer" not in relay.readers.readers
    holder = RelayClient(relay.listen, "holder", timeout_s=5, reader="newcomer")
    try:
        assert holder.call("attach")["reader"] == "newcomer"  # nobody took the name
    finally:
        holder.close()
