"""A spool server's data-loss answer carries the loss as data, on real sockets (no Spark).

The answer is ``[b"error", text, loss]``: the text an older client shows as it is, and the
loss as a JSON object (``kind``, ``channel``, ``start``, ``end``, ``reason``, ``words``)
from which the client names the server it knows. A relay's loss is said as a relay's (its
address, why a relay loses data, what to do) because the ``FetchAccess`` says it is a
relay, not because its name reads like one; the driver's words stand as they are.
"""

from __future__ import annotations

import json
import os
import threading

import pytest
import zmq

from spark_zmq.ingest import fetch
from spark_zmq.ingest.fetch import FetchAccess, SpoolServer, fetch_range
from spark_zmq.ingest.loss import DataLossError
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.ingest.spool import Spool

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def damaged(tmp_path):
    """A driver's fetch service over a spool whose channel 0 has a damaged segment."""
    spool = Spool(str(tmp_path / "spool"), 1, max_bytes=1 << 30)
    for start in range(0, 400, 100):
        spool.channels[0].append(messages_to_batch([b"m-%d" % i for i in range(start, start + 100)], None, "raw", 0))
    segment = os.path.join(spool.spool_dir, "ch-0", sorted(os.listdir(os.path.join(spool.spool_dir, "ch-0")))[0])
    with open(segment, "r+b") as f:
        f.seek(os.path.getsize(segment) // 2)
        f.write(b"\x00" * 64)
    server = SpoolServer(
        spool.spool_dir,
        host="127.0.0.1",
        spool_id=spool.spool_id,
        channels=1,
        locate=lambda channel, offset: spool.channels[channel].locate(offset),
    )
    yield spool, server
    server.close()
    spool.close()


def test_the_servers_loss_answer_carries_the_loss_as_json_beside_the_text(damaged):
    spool, server = damaged
    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    access = server.access
    dealer.curve_publickey, dealer.curve_secretkey = access.client_public, access.client_secret
    dealer.curve_serverkey = access.server_key
    dealer.connect(server.endpoint)
    try:
        dealer.send_multipart(
            [b"", json.dumps({"channel": 0, "start": 0, "end": 400, "spool": spool.spool_id, "id": 7}).encode()]
        )
        assert dealer.poll(10_000), "no answer from the fetch service"
        reply = dealer.recv_multipart()
    finally:
        dealer.close(0)
        context.term()
    assert reply[1] == b"error" and reply[-1] == b"7", reply
    assert (
        reply[2]
        .decode()
        .startswith("DataLossError: offsets 0..400 of channel 0 cannot be read from the driver's spool")
    ), reply
    assert json.loads(reply[3]) == {
        "kind": "data-loss",
        "channel": 0,
        "start": 0,
        "end": 400,
        "reason": "unreadable",
        "words": "cannot be read from the driver's spool (the driver's log says why)",
    }
    # and through the client, the driver's words as they are
    with pytest.raises(DataLossError) as caught:
        list(fetch_range(server.access, 0, 0, 400, spool_id=spool.spool_id, timeout=30))
    assert str(caught.value).startswith(
        "DataLossError: offsets 0..400 of channel 0 cannot be read from the driver's spool"
    ), caught.value


def _relay_said(answer: list[bytes], relay: str, channel: int, start: int, end: int) -> str:
    """The ``DataLossError`` a fetch of ``[start, end)`` of ``channel`` from a relay named
    ``relay`` raises when the server (a plain pyzmq ROUTER) answers it with ``answer`` and
    the request's id."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    port = router.bind_to_random_port("tcp://127.0.0.1")

    def serve() -> None:
        try:
            if router.poll(20_000):
                request = router.recv_multipart()
                request_id = str(json.loads(request[2])["id"]).encode()
                router.send_multipart(request[:2] + answer + [request_id])
        finally:
            router.close(0)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    access = FetchAccess(f"tcp://127.0.0.1:{port}", None, server_name=relay, session="s", is_relay=True)
    try:
        with pytest.raises(DataLossError) as caught:
            list(fetch_range(access, channel, start, end, timeout=20))
    finally:
        thread.join(10)
        context.term()
    return str(caught.value)


@pytest.mark.parametrize("named", ["the relay at tcp://10.0.0.7:7000", "the receiver process of query q"])
def test_a_relays_unreadable_offsets_are_said_from_the_loss_frame_whatever_its_name(named):
    answer = fetch.loss_reply(0, 20, 50, fetch.UNREADABLE, "cannot be read from the relay's spool (its log says why)")
    # (the text frame alone would not say which offsets: the client reads them from the data)
    answer[1] = b"DataLossError: lost"
    said = _relay_said(answer, named, 0, 20, 50)
    assert f"offsets 20..50 of channel 0 of {named} cannot be read from its spool" in said, said
    assert "failOnDataLoss=false" in said and "driver" not in said, said


def test_a_relays_freed_offsets_name_the_relay_and_a_text_only_answer_still_reads():
    words = "were freed from the relay's spool before this reader read them. Set failOnDataLoss=false to skip"
    relay = "the relay at tcp://10.0.0.7:7000"
    said = _relay_said(fetch.loss_reply(1, 3, 9, fetch.FREED, words), relay, 1, 3, 9)
    assert said == f"offsets 3..9 of channel 1 of {relay} {words}", said
    # a server that sends only the text (an older one): its words, the server named after them
    said = _relay_said([b"error", b"DataLossError: offsets 3..9 of channel 1 went away"], relay, 1, 3, 9)
    assert said == f"offsets 3..9 of channel 1 went away ({relay}, its channel 1)", said
