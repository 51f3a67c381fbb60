"""Spark on the multi-host bed (issue 33): a standalone cluster (master, two one-core
workers) in network namespaces, the driver in client mode on a host of its own whose spool
no executor sees (a private tmpfs), producers, consumers, relays, a request-reply broker and
its workers on hosts of their own; libzmq's own SCATTER and GATHER run there through
zeromq.js (tests/zmqjs).

Each scenario checks every message arrives (or every row is answered) exactly once. One
cluster serves the module.
Run: ``flock /tmp/spark-zmq-spark.lock env PYTHONPATH=$PWD python -m pytest -n 0 -p no:cacheprovider
tests/multihost`` as root (it skips, saying why, where no bed can be built).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import time

import netbed
import pytest
import zmqjs_peer
from bedkit import MESSAGES, Kit, assert_exactly_once, consumer_values, private_spool, ranges, sink_values

pytestmark = [pytest.mark.multihost, pytest.mark.spark]


@pytest.mark.timeout(360)
@pytest.mark.parametrize("side", ["driver-binds", "driver-connects"])
def test_pull_from_a_producer_on_another_host_exactly_once(bed, kit, side):
    """A plain pyzmq PUSH on ``producer`` sends 20,000 messages to the driver, which binds on
    its bed address (or connects out, ``>``, to the producer's bound PUSH); executors on
    w1/w2, which do not see the driver's spool, fetch it."""
    private = private_spool(kit, "driver")
    if side == "driver-binds":
        endpoint = f"tcp://{bed.addr('driver')}:5555"
        source, target = "@" + endpoint, endpoint
    else:
        endpoint = f"tcp://{bed.addr('producer')}:5557"
        source, target = ">" + endpoint, "@tcp://*:5557"
    job = kit.spark(
        "stream",
        expected=MESSAGES,
        deadline=200,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"endpoints": source, "format": "text", "spoolDir": os.path.join(private, f"spool-pull-{side}")},
    )
    kit.wait_event(job, "started", 180)
    producer = kit.start("producer", "produce", "producer", endpoint=target, count=MESSAGES)
    result = kit.result(job, 300)
    kit.wait_event(producer, "done", 60)
    assert os.listdir(private) == [], "the driver's spool leaked out of its mount namespace"
    print(f"pull ({side}):", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    assert result["executors"] == 2
    assert_exactly_once(sink_values(kit.path("out")), MESSAGES)


@pytest.mark.timeout(300)
def test_push_sink_to_a_consumer_on_another_host(bed, kit):
    """``df.write.format("zmq")``: every write task, on w1 and w2, connects to a plain pyzmq
    PULL bound on ``consumer``."""
    endpoint = f"tcp://{bed.addr('consumer')}:6000"
    consumer = kit.start("consumer", "consume", "consumer", endpoint="@tcp://*:6000", messages=kit.path("consumed"))
    kit.wait_event(consumer, "started", 30)
    job = kit.spark("write", count=MESSAGES, partitions=4, options={"endpoints": endpoint, "format": "text"})
    result = kit.result(job, 240)
    print("push:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    netbed.poll(
        lambda: sum(consumer_values(kit.path("consumed")).values()) >= MESSAGES,
        60,
        0.2,
        "the consumer to hold every message",
    )
    netbed.NetBed.stop(consumer["proc"])
    assert_exactly_once(consumer_values(kit.path("consumed")), MESSAGES)


@pytest.mark.timeout(360)
def test_relay_on_its_own_host_read_by_the_cluster(bed, kit):
    """``spark-zmq relay`` on ``relay`` (its spool private to it) receives from ``producer``;
    the query reads it with ``relays``: the driver leases it, executors fetch from it."""
    private = private_spool(kit, "relay")
    listen = f"tcp://{bed.addr('relay')}:7000"
    kit.relay("relay", "@tcp://*:5555", listen, os.path.join(private, "spool"), private_dirs=[private])
    producer = kit.start("producer", "produce", "producer", endpoint=f"tcp://{bed.addr('relay')}:5555", count=MESSAGES)
    job = kit.spark(
        "stream",
        expected=MESSAGES,
        deadline=200,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"relays": listen, "format": "text", "startingOffsets": "earliest"},
    )
    result = kit.result(job, 300)
    kit.wait_event(producer, "done", 60)
    assert os.listdir(private) == [], "the relay's spool leaked out of its mount namespace"
    print("relay:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    assert_exactly_once(sink_values(kit.path("out")), MESSAGES)


#: the smaller scenarios' message count (each is one more scenario of the shared driver)
SMALL = 5_000


def driver_keygen(kit: Kit, key_name: str) -> dict:
    """A CURVE key pair made on host ``driver`` (``spark_zmq.patterns.curve_keys.keygen``,
    as ``spark-zmq keygen``) in its private directory: the secret certificate file exists
    there only; its public certificate is copied to the test's directory."""
    job = kit.spark(
        "keygen",
        name=f"keygen-{key_name}",
        key_name=key_name,
        public_dir=kit.path("public"),
        directory=os.path.join(kit.driver.private, os.path.basename(kit.dir), "keys"),
    )
    made = kit.result(job, 60)
    assert made["ok"], made
    assert not os.path.exists(made["secret"]), "the driver's secret key is visible outside its host"
    return made


def pyzmq_keys(kit: Kit, key_name: str) -> tuple:
    """A key pair written by pyzmq's ``zmq.auth.create_certificates``: (public, secret) files."""
    import zmq.auth

    os.makedirs(kit.path(f"keys-{key_name}"))
    return zmq.auth.create_certificates(kit.path(f"keys-{key_name}"), key_name)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pattern", ["sub", "gather", "pull-curve"])
def test_source_patterns_from_a_producer_on_another_host(bed, kit, pattern):
    """5,000 messages from host ``producer`` to the driver's query, exactly once:

    - ``sub``: the query subscribes (``pattern=sub``, connecting, every topic) to a pyzmq
      XPUB bound on ``producer`` that starts sending once the subscription has arrived;
    - ``gather``: libzmq's own SCATTER (zeromq.js) connects to the query's GATHER;
    - ``pull-curve``: a pyzmq PUSH, a CURVE client with its own key pair and the server's
      public key, connects to the query, a CURVE server whose secret certificate file was
      made on the driver's host and exists only in its private directory."""
    private = private_spool(kit, "driver")
    driver, producer = bed.addr("driver"), bed.addr("producer")
    options = {"format": "text", "spoolDir": os.path.join(private, f"spool-{pattern}")}
    if pattern == "gather":
        zmqjs_peer.skip_unless_node()
        options.update(pattern="gather", endpoints=f"@tcp://{driver}:5556")
    elif pattern == "sub":
        options.update(pattern="sub", endpoints=f"tcp://{producer}:5558")
    else:
        server = driver_keygen(kit, "server")
        client_public, client_secret = pyzmq_keys(kit, "producer")
        os.makedirs(kit.path("authorized"))
        shutil.copy(client_public, kit.path("authorized"))
        options.update(
            endpoints=f"@tcp://{driver}:5559",
            curveCertificate=server["secret"],
            curveAuthorizedKeys=kit.path("authorized"),
        )
    job = kit.spark(
        "stream",
        expected=SMALL,
        deadline=200,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options=options,
    )
    kit.wait_event(job, "started", 180)
    if pattern == "gather":
        # libzmq's SCATTER: linger long enough for what it queued before the connection
        sender = kit.node("producer", "scatter", connect=f"tcp://{driver}:5556", count=SMALL, linger=60_000)
    elif pattern == "sub":
        # hwm 0: the XPUB queues without limit instead of dropping for a slow subscriber
        sender = kit.start(
            "producer", "produce", "producer", endpoint="@tcp://*:5558", pattern="xpub", hwm=0, count=SMALL
        )
    else:
        sender = kit.start(
            "producer",
            "produce",
            "producer",
            endpoint=f"tcp://{driver}:5559",
            count=SMALL,
            curve_certificate=client_secret,
            curve_server_key=server["public"],
        )
    result = kit.result(job, 240)
    if pattern == "gather":
        sender.wait_sent(60)
    else:
        kit.wait_event(sender, "done", 60)
    assert os.listdir(private) == [], "the driver's private directory leaked out of its mount namespace"
    print(f"source {pattern}:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    values = sink_values(kit.path("out"))
    if pattern == "gather":  # zeromq.js's payloads are "<i>-"
        values = collections.Counter({v[:-1] if v.endswith("-") else v: n for v, n in values.items()})
    assert_exactly_once(values, SMALL)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pattern", ["pub", "scatter", "push-curve"])
def test_sink_patterns_to_a_consumer_on_another_host(bed, kit, pattern):
    """``df.write.format("zmq")``, 5,000 rows in 8 write tasks on w1 and w2, to a consumer
    bound on host ``consumer``, exactly once:

    - ``pub`` (with ``topic``, which ``pub`` requires): a pyzmq SUB (every topic). Each
      write task waits for the subscription before it publishes, and 625 messages a task
      stay under the default ``hwm`` (1,000), the only place ``pub`` drops;
    - ``scatter``: libzmq's own GATHER (zeromq.js);
    - ``push-curve``: a pyzmq PULL that is a CURVE server accepting only the writer's key;
      the sink is its client with a key pair made on the driver's host
      (``curveCertificate``, whose file only the driver sees) and the consumer's public
      certificate (``curveServerKey``)."""
    options = {"format": "text", "endpoints": f"tcp://{bed.addr('consumer')}:6001"}
    if pattern == "scatter":
        zmqjs_peer.skip_unless_node()
        peer = kit.node("consumer", "gather", bind="tcp://*:6001")
        options["pattern"] = "scatter"
    else:
        spec = dict(endpoint="@tcp://*:6001", messages=kit.path("consumed"))
        if pattern == "pub":
            spec["pattern"] = "sub"
            options.update(pattern="pub", topic="bed")
        else:
            server_public, server_secret = pyzmq_keys(kit, "consumer")
            writer = driver_keygen(kit, "writer")
            spec.update(curve_certificate=server_secret, curve_authorized=os.path.dirname(writer["public"]))
            options.update(curveCertificate=writer["secret"], curveServerKey=server_public)
        consumer = kit.start("consumer", "consume", "consumer", **spec)
        kit.wait_event(consumer, "started", 30)
    job = kit.spark("write", count=SMALL, partitions=8, options=options)
    result = kit.result(job, 240)
    print(f"sink {pattern}:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    if pattern == "scatter":
        netbed.poll(lambda: len(peer.received) >= SMALL, 60, 0.2, "the consumer to hold every message")
        peer.stop()
        values = collections.Counter(m.decode() for m in peer.received)
    else:
        netbed.poll(
            lambda: sum(consumer_values(kit.path("consumed")).values()) >= SMALL,
            60,
            0.2,
            "the consumer to hold every message",
        )
        netbed.NetBed.stop(consumer["proc"])
        values = consumer_values(kit.path("consumed"))
    assert_exactly_once(values, SMALL)


@pytest.mark.timeout(300)
def test_request_reply_through_a_broker_on_another_host(bed, kit):
    """``spark-zmq broker`` on host ``relay``, a ``spark_zmq.worker.serve`` worker on each
    of ``producer`` and ``producer2``, and ``spark_zmq.request`` (defaults: ``arrow``,
    1,000 rows a request) from 4 tasks on w1 and w2 to the broker's frontend: every one of
    5,000 rows answered once, correctly."""
    broker = bed.addr("relay")
    kit.cli("relay", "broker", ["broker", "--frontend", "@tcp://*:5559", "--backend", "@tcp://*:5560"])
    netbed.poll(lambda: "broker: frontend" in kit.log("broker"), 30, 0.1, f"the broker to start: {kit.log('broker')}")
    workers = [
        kit.start(host, "worker", f"worker-{host}", endpoint=f"tcp://{broker}:5560", label=host)
        for host in ("producer", "producer2")
    ]
    for started in workers:
        kit.wait_event(started, "started", 60)
    job = kit.spark("request", count=SMALL, partitions=4, endpoint=f"tcp://{broker}:5559")
    result = kit.result(job, 240)
    print("request:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    assert set(result["workers"]) <= {"producer", "producer2"}, result


@pytest.mark.timeout(300)
def test_two_relays_on_two_hosts_read_by_one_query(bed, kit):
    """Relays on ``relay`` and ``relay2`` (spools private to each), each fed 5,000
    messages by its own producer (``producer``, ``producer2``); one query reads both
    (``relays`` with the two addresses): 10,000 messages, exactly once."""
    listens = []
    for i, (relay, producer) in enumerate((("relay", "producer"), ("relay2", "producer2"))):
        private = private_spool(kit, relay)
        listens.append(f"tcp://{bed.addr(relay)}:7000")
        kit.relay(
            relay, "@tcp://*:5555", listens[-1], os.path.join(private, "spool"), private_dirs=[private], name=relay
        )
        kit.start(producer, "produce", producer, endpoint=f"tcp://{bed.addr(relay)}:5555", count=SMALL, start=i * SMALL)
    job = kit.spark(
        "stream",
        expected=2 * SMALL,
        deadline=200,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"relays": ",".join(listens), "format": "text", "startingOffsets": "earliest"},
    )
    result = kit.result(job, 240)
    print("two relays:", json.dumps({k: v for k, v in result.items() if k != "traceback"}))
    assert result["ok"], result
    values = sink_values(kit.path("out"))
    assert_exactly_once(values, 2 * SMALL)


#: 1,000 msg/s for 40 s; the drop starts after 3,000 and lasts 30 s, so sending goes on after the heal
FAULT_RATE, FAULT_MESSAGES, FAULT_AFTER, FAULT_SECONDS = 1000, 40_000, 3000, 30


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_producer_traffic_dropped_for_30s_then_healed_loses_nothing(bed, kit):
    """The producer sends 1,000 msg/s for 40 s; after 3,000 its traffic is dropped (nftables,
    both ways) for 30 s, then healed; it keeps its socket open to the end. Every message
    must arrive, once."""
    private = private_spool(kit, "driver")
    endpoint = f"tcp://{bed.addr('driver')}:5555"
    job = kit.spark(
        "stream",
        expected=FAULT_MESSAGES,
        deadline=300,
        output=kit.path("out"),
        checkpoint=kit.path("checkpoint"),
        options={"endpoints": "@" + endpoint, "format": "text", "spoolDir": os.path.join(private, "spool-fault")},
    )
    kit.wait_event(job, "started", 180)
    producer = kit.start(
        "producer",
        "produce",
        "producer",
        endpoint=endpoint,
        count=FAULT_MESSAGES,
        rate=FAULT_RATE,
        report_every=500,
        hold=True,
    )
    kit.wait_event(producer, "sent", 60, sent=FAULT_AFTER)
    bed.drop("producer")
    dropped_at = time.monotonic()
    netbed.poll(lambda: time.monotonic() - dropped_at >= FAULT_SECONDS, FAULT_SECONDS + 5, 0.5, "the fault's duration")
    bed.heal("producer")
    healed_at = time.monotonic()
    sent = kit.wait_event(producer, "sent_all", 180)
    # the query stops at FAULT_MESSAGES rows; with a loss it never gets there: stop waiting
    # once the sink has not grown for 30 s
    last = {"rows": -1, "at": time.monotonic()}

    def settled():
        if kit.events(job) and kit.events(job)[-1]["event"] == "done":
            return True
        rows = sum(sink_values(kit.path("out")).values())
        if rows != last["rows"]:
            last.update(rows=rows, at=time.monotonic())
        return time.monotonic() - last["at"] > 30

    netbed.poll(settled, 200, 1.0, "the sink to settle")
    settled_s = round(time.monotonic() - healed_at, 1)
    open(job["stop_file"], "w").close()
    kit.result(job, 90)
    netbed.NetBed.stop(producer["proc"])
    values = sink_values(kit.path("out"))
    missing = FAULT_MESSAGES - len(set(values) & {str(i) for i in range(FAULT_MESSAGES)})
    print(
        "fault:",
        json.dumps(
            {
                "rows": sum(values.values()),
                "distinct": len(values),
                "missing": missing,
                "received_ranges": ranges(int(v) for v in values),
                "duplicates": sum(n - 1 for n in values.values() if n > 1),
                "healed_to_settled_s": settled_s,
                "producer": sent,
                "job": kit.events(job)[-1],
            }
        ),
    )
    assert_exactly_once(values, FAULT_MESSAGES)
