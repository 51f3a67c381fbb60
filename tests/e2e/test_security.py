"""CURVE security through Spark, on real sockets, against peers built with plain pyzmq and
pyzmq's ``zmq.auth`` (not the project's code): who can send into a source, who can
receive from a sink, and what a wrong key gets (nothing, and a counted rejection)."""

from __future__ import annotations

import contextlib
import os
import threading

import pytest
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmqtest import Producer, listening_addresses, numbered, reader_pid, stop_all, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def keys(tmp_path):
    """Certificates as users make them (pyzmq's zmq.auth): a server, an authorized client
    (its public file in ``authorized/``) and a stranger."""
    made = {}
    for name in ("server", "client", "stranger"):
        made[name] = zmq.auth.create_certificates(str(tmp_path), name)  # (public file, secret file)
    authorized = tmp_path / "authorized"
    authorized.mkdir()
    with open(made["client"][0], "rb") as src, open(authorized / "client.key", "wb") as dst:
        dst.write(src.read())
    made["authorized"] = str(authorized)
    return made


def _pair(path):
    public, secret = zmq.auth.load_certificate(path)
    return public, secret


def _curve_client_opts(server_public, secret_file):
    public, secret = _pair(secret_file)
    return {zmq.CURVE_SERVERKEY: server_public, zmq.CURVE_PUBLICKEY: public, zmq.CURVE_SECRETKEY: secret}


def _source_offsets(query):
    progress = query.lastProgress
    return progress["sources"][0].get("latestOffset") if progress and progress.get("sources") else None


def _rejected(query):
    import json

    offset = _source_offsets(query)
    if isinstance(offset, str):
        offset = json.loads(offset)
    return (offset or {}).get("rejectedHandshakes", 0)


def _memory_query(df, name, tmp_path):
    return (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / f"ck-{name}"))
        .trigger(processingTime="0 seconds")
        .start()
    )


class _CurveServer:
    """A plain pyzmq CURVE server socket whose ZAP handler is pyzmq's own ThreadAuthenticator,
    accepting the client keys in ``authorized`` (a directory) or any key (``"*"``)."""

    def __init__(self, socket_type, server_secret_file, authorized, endpoint, topics=None):
        self.context = zmq.Context()
        self.auth = ThreadAuthenticator(self.context)
        self.auth.start()
        self.auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY if authorized == "*" else authorized)
        self.socket = self.context.socket(socket_type)
        self.socket.linger = 0
        self.socket.curve_publickey, self.socket.curve_secretkey = _pair(server_secret_file)
        self.socket.curve_server = True
        self.socket.bind(endpoint)

    def close(self):
        self.socket.close(0)
        self.auth.stop()
        self.context.term()


# -- source ------------------------------------------------------------------------------------


def test_source_as_curve_server_takes_only_authorized_clients_and_counts_the_rest(
    spark, keys, free_port, spool_dir, tmp_path
):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    server_public, _ = _pair(keys["server"][1])
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("curveCertificate", keys["server"][1])
        .option("curveAuthorizedKeys", keys["authorized"])
        .load()
    )
    query = _memory_query(df.selectExpr("cast(value as string) as v"), "curve_source", tmp_path)
    try:
        wait_until(lambda: query.lastProgress is not None, 120, "the first progress (receivers bound)")
        Producer(
            endpoint, numbered(5000, fmt=b"good-%d"), sockopts=_curve_client_opts(server_public, keys["client"][1])
        ).start()
        Producer(
            endpoint, numbered(100, fmt=b"stranger-%d"), sockopts=_curve_client_opts(server_public, keys["stranger"][1])
        ).start()
        Producer(endpoint, numbered(100, fmt=b"plain-%d")).start()  # NULL security: no CURVE at all
        wait_until(lambda: spark.table("curve_source").count() >= 5000, 120, "5000 authorized messages")
        wait_until(
            lambda: _rejected(query) >= 2, 60, "the stranger's and the plain producer's rejections in the progress"
        )
        rows = [r.v for r in spark.table("curve_source").collect()]
        assert sorted(rows) == sorted(f"good-{i}" for i in range(5000))  # each exactly once, nothing else
    finally:
        stop_all([query])


def test_source_with_any_key_encrypts_for_every_curve_client_and_refuses_plain_ones(
    spark, keys, free_port, spool_dir, tmp_path
):
    """``curveAuthorizedKeys=*``; gather this time, and a bounded batch read."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    server_public, _ = _pair(keys["server"][1])
    Producer(
        endpoint, numbered(300, fmt=b"stranger-%d"), sockopts=_curve_client_opts(server_public, keys["stranger"][1])
    ).start()
    Producer(endpoint, numbered(300, fmt=b"plain-%d")).start()
    df = (
        spark.read.format("zmq")
        .option("pattern", "gather")
        .option("endpoints", "@" + endpoint)
        .option("curveCertificate", keys["server"][1])
        .option("curveAuthorizedKeys", "*")
        .option("maxMessages", 300)
        .option("timeout", 20)
        .load()
    )
    rows = sorted(r.v for r in df.selectExpr("cast(value as string) as v").collect())
    assert rows == sorted(f"stranger-{i}" for i in range(300))


def test_sub_source_as_curve_client_of_a_curve_publisher(spark, keys, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    server_public, _ = _pair(keys["server"][1])
    publisher = _CurveServer(zmq.XPUB, keys["server"][1], keys["authorized"], endpoint)
    df = (
        spark.readStream.format("zmq")
        .option("pattern", "sub")
        .option("endpoints", endpoint)
        .option("topics", "t")
        .option("spoolDir", spool_dir)
        .option("curveCertificate", keys["client"][1])
        .option("curveServerKey", keys["server"][0])
        .load()
    )
    query = _memory_query(df.selectExpr("topic", "cast(value as string) as v"), "curve_sub", tmp_path)
    try:
        # XPUB shows the subscription once the CURVE handshake passed: publish after it
        assert publisher.socket.poll(120_000), "the subscriber never subscribed"
        assert publisher.socket.recv() == b"\x01t"
        for i in range(1000):
            publisher.socket.send_multipart([b"t", b"m-%d" % i])
        wait_until(lambda: spark.table("curve_sub").count() >= 1000, 120, "1000 published messages")
        assert sorted(r.v for r in spark.table("curve_sub").collect()) == sorted(f"m-{i}" for i in range(1000))
    finally:
        stop_all([query])
        publisher.close()


@pytest.mark.parametrize("access", ["auto", "fetch"])
def test_a_query_listens_only_where_the_user_said_and_on_spool_server_host(
    spark, free_port, spool_dir, tmp_path, access
):
    """Under a local master every executor reads the spool directly, so with
    spoolAccess=auto the driver opens no port but the user's endpoint; with
    spoolAccess=fetch it adds the fetch service, on spoolServerHost only (never 0.0.0.0)."""
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("spoolAccess", access)
        .option("spoolServerHost", "127.0.0.1")
        .option("receivers", "threads")
        .load()
    )  # the reader's own ports (receiver processes: test_relay)
    query = _memory_query(df.selectExpr("cast(value as string) as v"), f"ports_{access}", tmp_path)
    try:
        Producer(endpoint, numbered(100)).start()
        wait_until(lambda: spark.table(f"ports_{access}").count() >= 100, 120, "100 rows (tasks have read the spool)")
        listening = listening_addresses(reader_pid(spool_dir))
        others = {entry for entry in listening if entry != ("127.0.0.1", free_port)}
        assert ("127.0.0.1", free_port) in listening
        if access == "auto":
            assert others == set(), f"the reader listens on {others} besides the user's endpoint"
        else:
            assert len(others) == 1 and next(iter(others))[0] == "127.0.0.1", others
    finally:
        stop_all([query])


# -- sink ----------------------------------------------------------------------------------------


def _collect(socket, into, stop):
    while not stop.is_set():
        if socket.poll(50):
            into.append(socket.recv_multipart())


@contextlib.contextmanager
def _consumer(keys, endpoint):
    """A pyzmq CURVE PULL server accepting the authorized keys; yields the messages it gets."""
    consumer = _CurveServer(zmq.PULL, keys["server"][1], keys["authorized"], endpoint)
    got, stop = [], threading.Event()
    thread = threading.Thread(target=_collect, args=(consumer.socket, got, stop), daemon=True)
    thread.start()
    try:
        yield got
    finally:
        stop.set()
        thread.join(5)
        consumer.close()


@pytest.mark.parametrize("key_as", ["file", "z85"])
def test_sink_delivers_every_row_to_a_curve_server_consumer(spark, keys, free_port, key_as):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    server_key = keys["server"][0] if key_as == "file" else _pair(keys["server"][1])[0].decode()
    with _consumer(keys, endpoint) as got:
        (
            spark.range(3000)
            .repartition(3)
            .selectExpr("cast(id as string) as value")
            .write.format("zmq")
            .option("endpoints", endpoint)
            .option("curveCertificate", keys["client"][1])
            .option("curveServerKey", server_key)
            .mode("append")
            .save()
        )
        wait_until(lambda: len(got) >= 3000, 60, "3000 rows at the consumer")
        assert sorted(int(m[0]) for m in got) == list(range(3000))


def test_sink_with_an_unauthorized_certificate_fails_within_the_timeout_and_delivers_nothing(spark, keys, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    with _consumer(keys, endpoint) as got:
        writer = (
            spark.range(10)
            .coalesce(1)
            .selectExpr("cast(id as string) as value")
            .write.format("zmq")
            .option("endpoints", endpoint)
            .option("curveCertificate", keys["stranger"][1])
            .option("curveServerKey", keys["server"][0])
            .option("sendTimeoutMs", 3000)
            .mode("append")
        )
        with pytest.raises(Exception) as caught:
            writer.save()
        text = str(caught.value)
        assert "sendTimeoutMs=3000" in text and "refused this side's CURVE certificate" in text, text[-2000:]
        assert got == []


def test_pub_sink_as_curve_server_reaches_authorized_subscribers_only(spark, keys, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    server_public, _ = _pair(keys["server"][1])
    context = zmq.Context()
    subscribers = {}
    for name in ("client", "stranger"):
        sub = context.socket(zmq.SUB)
        sub.linger = 0
        for option, value in _curve_client_opts(server_public, keys[name][1]).items():
            sub.setsockopt(option, value)
        sub.setsockopt(zmq.RECONNECT_IVL, 20)
        sub.subscribe(b"")
        sub.connect(endpoint)
        subscribers[name] = sub
    got = {name: [] for name in subscribers}
    stop = threading.Event()
    threads = [
        threading.Thread(target=_collect, args=(sock, got[name], stop), daemon=True)
        for name, sock in subscribers.items()
    ]
    for thread in threads:
        thread.start()
    try:
        (
            spark.range(500)
            .coalesce(1)
            .selectExpr("cast(id as string) as value")
            .write.format("zmq")
            .option("pattern", "pub")
            .option("topic", "t")
            .option("endpoints", "@" + endpoint)
            .option("hwm", 10_000)
            .option("curveCertificate", keys["server"][1])
            .option("curveAuthorizedKeys", keys["authorized"])
            .mode("append")
            .save()
        )
        wait_until(lambda: len(got["client"]) >= 500, 60, "500 messages at the authorized subscriber")
        assert sorted(int(m[1]) for m in got["client"]) == list(range(500))
        assert got["stranger"] == []
    finally:
        stop.set()
        for thread in threads:
            thread.join(5)
        for sock in subscribers.values():
            sock.close(0)
        context.term()


# -- options -----------------------------------------------------------------------------------


def test_a_bad_curve_option_fails_when_the_dataframe_is_defined(spark, keys, tmp_path):
    with pytest.raises(Exception, match="curveAuthorizedKeys"):
        (
            spark.readStream.format("zmq")
            .option("endpoints", "@tcp://127.0.0.1:1")
            .option("curveCertificate", keys["server"][1])
            .load()
        )
    with pytest.raises(Exception, match="curveCertificate.*holds only a public key"):
        (
            spark.range(1)
            .selectExpr("cast(id as string) as value")
            .write.format("zmq")
            .option("endpoints", "tcp://127.0.0.1:1")
            .option("curveCertificate", keys["client"][0])
            .option("curveServerKey", keys["server"][0])
            .mode("append")
            .save()
        )
    assert not os.path.exists(tmp_path / "anything")
