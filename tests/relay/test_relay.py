"""Relays (``spark-zmq relay``) read by Spark queries through the source option ``relays``.

Each relay is a child process on real sockets; producers are plain pyzmq PUSH sockets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from relaytest import RelayProcess, stop_relays
from zmqtest import Producer, free_ports, numbered, run_available_now, stop_all, wait_until

from spark_zmq import procstat

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def _relay_stream(spark, relays, **options):
    reader = spark.readStream.format("zmq").option("relays", relays)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_one_query_reads_two_relays_and_a_second_query_is_refused(spark, tmp_path):
    ports = free_ports(4)
    relays = [
        RelayProcess(f"@tcp://127.0.0.1:{ports[i]}", f"tcp://127.0.0.1:{ports[i + 2]}", str(tmp_path / f"r{i}"))
        for i in range(2)
    ]
    try:
        producers = [Producer(f"tcp://127.0.0.1:{ports[i]}", numbered(3000, fmt=b"r%d-%%d" % i)) for i in range(2)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.finish()
        addresses = ",".join(relay.listen for relay in relays)
        first = (
            _relay_stream(spark, addresses, startingOffsets="earliest")
            .selectExpr("cast(value as string) as value", "partition", "offset")
            .writeStream.format("memory")
            .queryName("two_relays")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )
        try:
            wait_until(lambda: spark.table("two_relays").count() >= 6000, 120, "both relays' messages")
            rows = spark.table("two_relays").collect()
            assert len(rows) == 6000
            by_partition = {p: sorted(r.offset for r in rows if r.partition == p) for p in (0, 1)}
            assert by_partition == {0: list(range(3000)), 1: list(range(3000))}
            assert {r.value for r in rows if r.partition == 1} == {f"r1-{i}" for i in range(3000)}
            second = (
                _relay_stream(spark, relays[1].listen)
                .writeStream.format("memory")
                .queryName("refused")
                .option("checkpointLocation", str(tmp_path / "ckpt2"))
                .start()
            )
            try:
                second.awaitTermination(120)
            except Exception:
                pass
            error = str(second.exception())
            assert f"the relay at {relays[1].listen} is read by another query" in error, error
            assert first.isActive, "the refused second query stopped the first"
        finally:
            stop_all(spark.streams.active)
    finally:
        stop_relays(relays)


def test_two_queries_with_different_triggers_read_one_relay_under_two_names_each_exactly_once(spark, tmp_path):
    """relayReader: a steady query (processing-time trigger, a row limit) and a catching-up
    one (AvailableNow) read one relay at the same time, each under its own name and lease,
    and each gets every message once; the relay keeps each name's committed position."""
    from spark_zmq.relay.client import RelayClient
    from spark_zmq.relay.protocol import Op

    data_port, listen_port = free_ports(2)
    relay = RelayProcess(f"@tcp://127.0.0.1:{data_port}", f"tcp://127.0.0.1:{listen_port}", str(tmp_path / "spool"))
    admin = RelayClient(relay.listen, "admin", timeout_s=10)
    total = 3000
    try:
        producer = Producer(f"tcp://127.0.0.1:{data_port}", numbered(total))
        producer.start()
        producer.finish()
        wait_until(lambda: admin.call(Op.READERS)["latest"] == [total], 30, "every message spooled")

        def stream(name):
            return (
                _relay_stream(
                    spark,
                    relay.listen,
                    relayReader=name,
                    startingOffsets="earliest",
                    maxRowsPerTrigger="1000",
                    timeout="1",
                )
                .selectExpr("cast(value as string) as value", "offset")
                .writeStream.format("memory")
                .queryName(f"reader_{name}")
                .option("checkpointLocation", str(tmp_path / f"ckpt-{name}"))
            )

        steady = stream("steady").trigger(processingTime="1 second").start()
        catchup = stream("catchup").trigger(availableNow=True).start()
        try:
            catchup.awaitTermination(120)
            assert not catchup.isActive and catchup.exception() is None, catchup.exception()
            wait_until(lambda: spark.table("reader_steady").count() >= total, 120, "the steady query's rows")
            for name in ("steady", "catchup"):
                rows = spark.table(f"reader_{name}").collect()
                assert sorted(r.offset for r in rows) == list(range(total)), f"{name}: not exactly once"
                assert sorted(r.value for r in rows) == sorted(m.decode() for m in numbered(total)), name
            assert len([p for p in catchup.recentProgress if p["numInputRows"] > 0]) >= 3  # the row limit held
            readers = {r["name"]: r for r in admin.call(Op.READERS)["readers"]}
            assert set(readers) == {"steady", "catchup"}
            wait_until(
                lambda: {r["name"]: r["committed"] for r in admin.call(Op.READERS)["readers"]}["steady"] == [total],
                30,
                "the steady query's commit to reach the relay",
            )
        finally:
            stop_all([steady, catchup])
    finally:
        admin.close()
        stop_relays([relay])


SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "relay_query.py")


def _application(relays, tmp_path):
    """The reading Spark application, in a process group of its own (driver JVM and workers)."""
    log = open(tmp_path / "app.log", "ab")
    return subprocess.Popen(
        [sys.executable, SCRIPT, relays, str(tmp_path / "ckpt"), str(tmp_path / "out")],
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def _output(spark, tmp_path):
    path = tmp_path / "out"
    if not (path / "_spark_metadata").exists():
        return None
    return spark.read.schema("partition int, offset long, value string").parquet(str(path))


def _count(spark, tmp_path) -> int:
    out = _output(spark, tmp_path)
    return 0 if out is None else out.count()


def _assert_exactly_once(spark, tmp_path, expected: list[str]):
    stats = (
        _output(spark, tmp_path)
        .selectExpr("count(*)", "count(distinct offset)", "min(offset)", "max(offset)", "count(distinct value)")
        .first()
    )
    n = len(expected)
    assert tuple(stats) == (n, n, 0, n - 1, n), f"not exactly once: {stats} for {n} messages"
    values = {r.value for r in _output(spark, tmp_path).select("value").collect()}
    assert values == set(expected)


def test_a_relay_keeps_receiving_while_the_spark_application_is_killed_and_restarted(spark, tmp_path):
    """kill -9 of the whole reading application (driver JVM, Python reader, workers) while a
    producer sends: the relay keeps every message; the restarted application resumes from
    its checkpoint and the output holds every message exactly once, none lost."""
    data_port, listen_port = free_ports(2)
    relay = RelayProcess(f"@tcp://127.0.0.1:{data_port}", f"tcp://127.0.0.1:{listen_port}", str(tmp_path / "spool"))
    total = 30_000
    messages = numbered(total, fmt=b"app-%d")
    output_seen = threading.Event()

    def paced():
        """2,000 messages, then the rest once the first application has written output, so
        the producer is still sending when that application is killed, however slow its start."""
        yield from messages[:2_000]
        output_seen.wait(240)
        resumed = time.monotonic()
        for i, message in enumerate(messages[2_000:]):
            if i % 100 == 0:  # 1,500 msgs/s from here: load shaping, not synchronisation
                time.sleep(max(0.0, resumed + i / 1_500 - time.monotonic()))
            yield message

    producer = Producer(f"tcp://127.0.0.1:{data_port}", paced())
    first = second = None
    try:
        producer.start()
        first = _application(relay.listen, tmp_path)
        wait_until(lambda: _count(spark, tmp_path) > 1_000, 240, "output from the first application")
        output_seen.set()
        wait_until(lambda: producer.sent > 2_100, 60, "the producer to send past the first output")
        assert producer.is_alive(), "the producer should still be sending at the kill"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
        killed_at = producer.sent
        second = _application(relay.listen, tmp_path)
        producer.finish()
        assert producer.sent > killed_at, "the producer kept sending while no application ran"
        wait_until(lambda: _count(spark, tmp_path) >= total, 240, "the restarted application to catch up")
        _assert_exactly_once(spark, tmp_path, [m.decode() for m in messages])
        assert relay.process.poll() is None, relay.errors()
    finally:
        for app in (first, second):
            if app is not None and app.poll() is None:
                os.killpg(app.pid, signal.SIGKILL)
                app.wait(30)
        stop_relays([relay])


def _progress_stream(spark, relays, tmp_path, **options):
    return (
        _relay_stream(spark, relays, **options)
        .selectExpr("partition", "offset", "cast(value as string) as value")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_a_relay_killed_and_restarted_serves_its_spool_exactly_once_and_producers_resume(spark, tmp_path):
    """kill -9 of the relay under a running query and a sending producer: the producer
    blocks (its high-water mark fills with no relay to take it), the query waits (its
    requests are resent within relayTimeout), and after the restart the query delivers
    every offset the relay ever gave out exactly once. What sat in the dead relay's
    socket buffers is lost (ZeroMQ has no acknowledgements): measured and bounded."""
    data_port, listen_port = free_ports(2)
    spool = str(tmp_path / "spool")
    relay = RelayProcess(f"@tcp://127.0.0.1:{data_port}", f"tcp://127.0.0.1:{listen_port}", spool, "--hwm", "100")
    total = 60_000
    producer = Producer(f"tcp://127.0.0.1:{data_port}", numbered(total, fmt=b"rk-%d"), rate=3_000, hwm=1000)
    query = _progress_stream(spark, relay.listen, tmp_path, startingOffsets="earliest")
    try:
        # the producer starts once the query runs, so on a slow machine it is still sending
        # when the relay dies (a producer that already sent everything has nothing to block on)
        wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
        producer.start()
        wait_until(lambda: _count(spark, tmp_path) > 2_000, 120, "output before the relay is killed")
        assert producer.sent < total, "the producer finished before the relay was killed: nothing to test"
        relay.kill()
        blocked_before = producer.blocked
        wait_until(lambda: producer.blocked > blocked_before, 60, "the producer to block while no relay runs")
        relay.start()
        producer.finish()
        # every offset the relay gave out, before and after its death, exactly once
        seen = {"end": None, "since": 0.0}

        def caught_up():
            """Everything the relay numbered is in the output, and nothing new for 2 s (the
            producer's queue drains into the restarted relay after its last send)."""
            latest = _latest(query)
            if latest is None or producer.sent != total or latest != _count(spark, tmp_path):
                return None
            if latest != seen["end"]:
                seen.update(end=latest, since=time.monotonic())
                return None
            return latest if time.monotonic() - seen["since"] >= 2.0 else None

        end = wait_until(caught_up, 180, "the query to deliver everything the relay spooled", interval=0.5)
        out = _output(spark, tmp_path)
        stats = out.selectExpr(
            "count(*)", "count(distinct offset)", "min(offset)", "max(offset)", "count(distinct value)"
        ).first()
        assert tuple(stats) == (end, end, 0, end - 1, end), f"not exactly once: {stats} for {end} offsets"
        print(f"relay kill -9: {total - end} of {total} messages lost in the dead relay's socket buffers")
        assert end >= total - 5_000, f"received only {end} of {total}"
        assert query.isActive and query.exception() is None
    finally:
        stop_all(spark.streams.active)
        stop_relays([relay])


def _latest(query):
    """The relay channel's latest offset as the query's last progress reports it."""
    progress = query.lastProgress
    if not progress or not progress["sources"][0]["latestOffset"]:
        return None
    latest = progress["sources"][0]["latestOffset"]
    latest = json.loads(latest) if isinstance(latest, str) else latest
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    if not latest or not end or latest.get("lag", {}).get("records") or latest["0"] != end["0"]:
        return None
    return int(latest["0"])


def test_sigterm_drains_into_the_spool_and_exits_0(tmp_path):
    from spark_zmq.ingest.spool_reader import read_range

    data_port, listen_port = free_ports(2)
    spool = str(tmp_path / "spool")
    relay = RelayProcess(f"@tcp://127.0.0.1:{data_port}", f"tcp://127.0.0.1:{listen_port}", spool)
    try:
        producer = Producer(f"tcp://127.0.0.1:{data_port}", numbered(5000, fmt=b"t-%d"))
        producer.start()
        producer.finish()
        code, errors = relay.terminate()
        assert code == 0, errors
        held = [v.as_py() for _, batch in read_range(spool, 0, 0, 5000) for v in batch.column(0)]
        assert held == [b"t-%d" % i for i in range(5000)]
    finally:
        stop_relays([relay])


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--listen", "tcp://127.0.0.1:7000", "--spool-dir", "/tmp/x"], "Missing option '--endpoints'"),
        (
            [
                "--endpoints",
                "@tcp://127.0.0.1:1",
                "--listen",
                "tcp://127.0.0.1:7000",
                "--spool-dir",
                "/tmp/x",
                "--hwm",
                "0",
            ],
            "--hwm",
        ),
        (["--endpoints", "nonsense", "--listen", "tcp://127.0.0.1:7000", "--spool-dir", "/tmp/x"], "--endpoints"),
        (["--endpoints", "@tcp://127.0.0.1:1", "--listen", "bogus", "--spool-dir", "/tmp/x"], "--listen"),
        (
            [
                "--endpoints",
                "@tcp://127.0.0.1:1",
                "--listen",
                "tcp://127.0.0.1:7000",
                "--spool-dir",
                "/tmp/x",
                "--pattern",
                "push",
            ],
            "--pattern",
        ),
        (
            [
                "--endpoints",
                "@tcp://127.0.0.1:1",
                "--listen",
                "tcp://127.0.0.1:7000",
                "--spool-dir",
                "/tmp/x",
                "--retention-bytes",
                "lots",
            ],
            "--retention-bytes",
        ),
        (
            [
                "--endpoints",
                "@tcp://127.0.0.1:1",
                "--listen",
                "tcp://127.0.0.1:7000",
                "--spool-dir",
                "/tmp/x",
                "--retention-seconds",
                "0",
            ],
            "--retention-seconds",
        ),
    ],
)
def test_bad_arguments_print_usage_and_exit_2(args, expected):
    done = subprocess.run([sys.executable, "-m", "spark_zmq.cli", "relay", *args], capture_output=True, timeout=60)
    assert done.returncode == 2, done
    text = done.stderr.decode()
    assert "Usage: " in text and expected in text, text


def test_a_relay_address_that_does_not_answer_fails_the_query_within_relay_timeout(spark, tmp_path):
    (silent,) = free_ports(1)
    start = time.monotonic()
    rows, error = run_available_now(
        spark,
        _relay_stream(spark, f"tcp://127.0.0.1:{silent}", relayTimeout="2"),
        tmp_path,
        "silent_relay",
        timeout=120,
    )
    assert rows is None and error is not None
    assert f"no answer from the relay at tcp://127.0.0.1:{silent}" in error and "relayTimeout" in error, error
    assert time.monotonic() - start < 60


def test_relays_option_errors(spark):
    from spark_zmq.options import OptionError, SourceOptions

    with pytest.raises(OptionError, match="'endpoints' and 'relays' exclude each other"):
        SourceOptions.parse({"endpoints": "@tcp://*:5555", "relays": "tcp://h:7000"})
    with pytest.raises(OptionError, match="not a relay address"):
        SourceOptions.parse({"relays": "@tcp://*:7000"})
    with pytest.raises(OptionError, match="given twice"):
        SourceOptions.parse({"relays": "tcp://h:7000,tcp://h:7000"})
    with pytest.raises(Exception, match="option 'relays' is for spark.readStream"):
        spark.read.format("zmq").option("relays", "tcp://127.0.0.1:7000").load().collect()


def test_receivers_as_processes_deliver_every_channel_exactly_once(spark, tmp_path):
    """receivers=processes: one child relay per endpoint; the reader's own process holds no
    receiving socket. Two channels, each fed by its own producer."""
    ports = free_ports(2)
    endpoints = ",".join(f"@tcp://127.0.0.1:{p}" for p in ports)
    query = (
        spark.readStream.format("zmq")
        .option("endpoints", endpoints)
        .option("receivers", "processes")
        .option("spoolDir", str(tmp_path / "spool"))
        .load()
        .selectExpr("cast(value as string) as value", "partition", "offset")
        .writeStream.format("memory")
        .queryName("receiver_processes")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        wait_until(
            lambda: query.lastProgress and query.lastProgress["sources"][0]["latestOffset"],
            120,
            "the reader's first offsets",
        )
        producers = [Producer(f"tcp://127.0.0.1:{ports[i]}", numbered(4000, fmt=b"p%d-%%d" % i)) for i in range(2)]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.finish()
        wait_until(lambda: spark.table("receiver_processes").count() >= 8000, 120, "both channels' messages")
        rows = spark.table("receiver_processes").collect()
        assert len(rows) == 8000
        for p in (0, 1):
            assert sorted(r.offset for r in rows if r.partition == p) == list(range(4000))
            assert {r.value for r in rows if r.partition == p} == {f"p{p}-{i}" for i in range(4000)}
        children = [
            d
            for d in os.listdir(tmp_path / "spool")
            if d.startswith("receiver-") and os.path.isdir(tmp_path / "spool" / d)
        ]
        assert sorted(children) == ["receiver-0", "receiver-1"]
    finally:
        stop_all(spark.streams.active)


def test_a_curve_relay_serves_only_queries_with_an_authorized_key(spark, tmp_path):
    """A relay with --curve-certificate/--curve-authorized-keys/--reader-authorized-keys: producers and queries are
    CURVE clients. A query with the authorized key reads (here over the relay's port, as
    executors on other hosts do: spoolAccess=fetch); a query with a stranger's key gets no
    answer and a clear error within relayTimeout; a plain producer delivers nothing. Another
    authorized key cannot read under the reader name the first key registered (``relayReader``)."""
    import zmq.auth

    keys = {
        name: zmq.auth.create_certificates(str(tmp_path), name) for name in ("relay", "client", "stranger", "other")
    }
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    for name in ("client", "other"):
        with open(keys[name][0], "rb") as src, open(authorized / f"{name}.key", "wb") as dst:
            dst.write(src.read())
    data_port, listen_port = free_ports(2)
    relay = RelayProcess(
        f"@tcp://127.0.0.1:{data_port}",
        f"tcp://127.0.0.1:{listen_port}",
        str(tmp_path / "spool"),
        "--curve-certificate",
        keys["relay"][1],
        "--curve-authorized-keys",
        str(authorized),
        "--reader-authorized-keys",
        str(authorized),
    )
    try:
        relay_public, _ = zmq.auth.load_certificate(keys["relay"][0])
        client_public, client_secret = zmq.auth.load_certificate(keys["client"][1])
        secured = Producer(
            f"tcp://127.0.0.1:{data_port}",
            numbered(1000, fmt=b"c-%d"),
            sockopts={
                zmq.CURVE_SERVERKEY: relay_public,
                zmq.CURVE_PUBLICKEY: client_public,
                zmq.CURVE_SECRETKEY: client_secret,
            },
        )
        plain = Producer(f"tcp://127.0.0.1:{data_port}", numbered(1000, fmt=b"plain-%d"))
        secured.start()
        plain.start()
        secured.finish()

        def stream(certificate, name, **extra):
            df = _relay_stream(
                spark,
                relay.listen,
                startingOffsets="earliest",
                curveCertificate=certificate,
                curveServerKey=keys["relay"][0],
                **extra,
            )
            return run_available_now(
                spark, df.selectExpr("cast(value as string) as value"), tmp_path, name, timeout=120
            )

        rows, error = stream(keys["client"][1], "curve_relay", spoolAccess="fetch", timeout="1")
        assert error is None, error
        assert sorted(r.value for r in rows) == sorted(f"c-{i}" for i in range(1000))
        rows, error = stream(keys["stranger"][1], "curve_relay_stranger", relayTimeout="3")
        assert rows is None and "no answer from the relay at" in error and "CURVE handshake failed" in error, error
        rows, error = stream(keys["other"][1], "curve_relay_other")
        assert rows is None and f"relay at tcp://127.0.0.1:{listen_port}" in error, error
        assert "reader 'default' of this relay is bound to the CURVE key" in error and "relayReader" in error, error
    finally:
        stop_relays([relay])


def test_a_receiver_process_that_dies_fails_the_query_with_its_reason(spark, tmp_path):
    (port,) = free_ports(1)
    query = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{port}")
        .option("receivers", "processes")
        .option("spoolDir", str(tmp_path / "spool"))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(
            lambda: query.lastProgress and query.lastProgress["sources"][0]["latestOffset"],
            120,
            "the reader's first offsets",
        )
        children = [pid for pid in _descendants() if b"spark_zmq.relay.child" in _cmdline(pid)]
        assert len(children) == 1, children
        os.kill(children[0], signal.SIGKILL)
        try:
            query.awaitTermination(120)
        except Exception:
            pass
        assert not query.isActive
        error = str(query.exception())
        assert f"the receiver process of channel 0 (@tcp://127.0.0.1:{port}) exited" in error, error
    finally:
        stop_all(spark.streams.active)


def test_a_port_in_use_fails_a_receiver_process_query_with_the_bind_error(spark, tmp_path):
    import zmq

    holder = zmq.Context.instance().socket(zmq.PULL)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        df = (
            spark.readStream.format("zmq")
            .option("endpoints", f"@tcp://127.0.0.1:{port}")
            .option("receivers", "processes")
            .option("spoolDir", str(tmp_path / "spool"))
            .load()
        )
        rows, error = run_available_now(spark, df, tmp_path, "port_in_use", timeout=120)
        assert rows is None and "the receiver process of channel 0" in error and "Address already in use" in error, (
            error
        )
        # said at once, naming who has the port: no lingering receiver of a stopped query to wait for
        assert (
            f"tcp://127.0.0.1:{port} is held by another program, not a receiver of this connector (pid {os.getpid()} ("
        ) in error, error
    finally:
        holder.close(0)


def _descendants(pid=None):
    """Every process below ``pid`` (this one by default), from /proc."""
    pid = pid or os.getpid()
    children = {}
    for each in procstat.pids() or ():
        parent = procstat.parent_of(each)
        if parent is not None:
            children.setdefault(parent, []).append(each)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _cmdline(pid):
    return b"\0".join(procstat.cmdline(pid))


def test_a_relay_with_a_full_spool_holds_producers_back_and_loses_nothing(tmp_path):
    """No query reads the relay: it spools until --max-spool-bytes, then stops reading and
    the producer blocks. A reader that then commits (here the protocol's own client,
    releasing what it has 'read') lets it drain: every message arrives, none dropped."""
    from zmqtest import dir_bytes, settled

    from spark_zmq.relay.client import RelayClient

    data_port, listen_port = free_ports(2)
    spool = str(tmp_path / "spool")
    relay = RelayProcess(
        f"@tcp://127.0.0.1:{data_port}",
        f"tcp://127.0.0.1:{listen_port}",
        spool,
        "--max-spool-bytes",
        "1 MiB",
        "--hwm",
        "100",
    )
    total = 20_000
    producer = Producer(f"tcp://127.0.0.1:{data_port}", [b"%07d" % i + b"x" * 1017 for i in range(total)], hwm=100)
    client = RelayClient(relay.listen, "drain", timeout_s=10)
    try:
        producer.start()
        wait_until(lambda: producer.blocked, 60, "the producer to block on a full relay")
        held = settled(lambda: producer.sent, "the producer's count while the relay's spool is full")
        assert held < total
        assert dir_bytes(spool) < 2 << 20, f"the spool holds {dir_bytes(spool)} bytes against a 1 MiB cap"

        def drained():
            state = client.call("release", offsets={"0": client.call("state")["latest"][0]})
            return state["latest"][0] == total

        wait_until(drained, 120, "every message to reach the relay once its reader commits", interval=0.1)
        producer.finish()
        assert relay.process.poll() is None, relay.errors()
    finally:
        client.close()
        stop_relays([relay])


def test_planning_a_micro_batch_costs_a_few_round_trips_per_relay_not_per_channel(spark, tmp_path):
    """Spark's offset calls for a micro-batch of a relay with three channels: counts,
    losses and read hints of every channel come in one DESCRIBE instead of a COUNT, a LOST
    and a LOCATE per channel, and the row limit's backlog from that one DESCRIBE too. Ten
    batches with a row limit: 12.5 control requests per batch (14.3 when the limit still
    counted per channel, 24.1 before DESCRIBE; the rest: the limit's per-channel end,
    releases, state, the lease's renewals and AvailableNow's drain)."""
    from spark_zmq.relay.client import RelayClient
    from spark_zmq.relay.protocol import Op

    ports = free_ports(4)
    relay = RelayProcess(
        ",".join(f"@tcp://127.0.0.1:{p}" for p in ports[:3]), f"tcp://127.0.0.1:{ports[3]}", str(tmp_path / "r")
    )
    hello = RelayClient(relay.listen, "counting-session", timeout_s=10)
    try:
        producers = [
            Producer(f"tcp://127.0.0.1:{p}", numbered(2000, fmt=b"c%d-%%d" % i)) for i, p in enumerate(ports[:3])
        ]
        for producer in producers:
            producer.start()
        for producer in producers:
            producer.finish()
        before = hello.call(Op.HELLO)["controlRequests"]
        df = _relay_stream(spark, relay.listen, startingOffsets="earliest", maxRowsPerTrigger="600", timeout="2")
        query = (
            df.selectExpr("partition", "offset")
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            assert query.awaitTermination(180) and query.exception() is None
        finally:
            stop_all([query])
        batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
        requests = hello.call(Op.HELLO)["controlRequests"] - before
        assert sum(p["numInputRows"] for p in batches) == 6000
        per_batch = requests / len(batches)
        print(f"{requests} control requests for {len(batches)} micro-batches of 3 channels: {per_batch:.1f} per batch")
        assert per_batch <= 18, per_batch
    finally:
        hello.close()
        stop_relays([relay])
