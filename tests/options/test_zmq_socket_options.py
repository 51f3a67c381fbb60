"""The ``zmq.<name>`` socket options: parsed on every side (keys as Spark passes them,
lower-cased), refused with an error naming the option when unknown or of the wrong kind,
and honoured by libzmq sockets and by the package's ZMTP engine alike (read back from
the sockets: libzmq's getsockopt, the kernel's SO_RCVBUF of the engine's connection), and
by a Spark write's sink, seen through when it reconnects to a consumer that came late."""

from __future__ import annotations

import socket
import threading

import pytest
import zmq
from zmqtest import free_ports, tcp_receive_buffer, wait_until

from spark_zmq.options import OptionError, RequestOptions, SinkOptions, SourceOptions
from spark_zmq.patterns import Pull, ZmtpPull
from spark_zmq.patterns.tuning import SocketTuning

SIDES = [
    (SourceOptions, {"endpoints": "@tcp://127.0.0.1:5555"}),
    (SinkOptions, {"endpoints": "tcp://h:1"}),
    (RequestOptions, {"endpoints": "tcp://h:1"}),
]


@pytest.mark.parametrize("klass, base", SIDES)
def test_every_side_parses_the_socket_options_whatever_their_case(klass, base):
    options = klass.parse(
        {
            **base,
            "zmq.reconnectinterval": "50ms",
            "ZMQ.ReconnectIntervalMax": "2s",
            "zmq.handshakeInterval": "1500",
            "zmq.ipv6": "true",
            "zmq.immediate": "false",
            "zmq.tcpkeepaliveidle": "1min",
            "zmq.tcpKeepaliveInterval": "5",
            "zmq.tcpKeepaliveCount": "4",
            "zmq.sendBufferBytes": "65536",
            "zmq.receivebufferbytes": "131072",
        }
    )
    assert options.tuning == SocketTuning(50, 2000, 1500, True, False, 60, 5, 4, 65536, 131072)
    assert klass.parse(base).tuning is None


@pytest.mark.parametrize("klass, base", SIDES)
@pytest.mark.parametrize(
    "key, value, says",
    [
        ("zmq.foo", "1", "unknown"),
        ("zmq.reconnectinterval", "soon", "not a duration"),
        ("zmq.handshakeInterval", "0.5ms", "whole milliseconds"),
        ("zmq.tcpKeepaliveIdle", "1500ms", "whole seconds"),
        ("zmq.ipv6", "maybe", "not a boolean"),
        ("zmq.sendBufferBytes", "1MiB", "integer"),
        ("zmq.tcpKeepaliveCount", "0", "integer from 1"),
        # accepted once and then nothing was received (the kernel's EINVAL), or failed in the task (#43)
        ("zmq.tcpKeepaliveIdle", "40000", "from 1 to 32767 (the kernel's TCP_KEEPIDLE limit)"),
        ("zmq.tcpKeepaliveIdle", "10h", "from 1 to 32767"),
        ("zmq.tcpKeepaliveInterval", "32768", "from 1 to 32767 (the kernel's TCP_KEEPINTVL limit)"),
        ("zmq.tcpKeepaliveCount", "1000", "integer from 1 to 127 (the kernel's TCP_KEEPCNT limit)"),
        ("zmq.reconnectInterval", "0", "from 1 to 2^31-1"),
        ("zmq.handshakeInterval", "0ms", "from 1 to 2^31-1"),
    ],
)
def test_an_unknown_socket_option_or_a_wrong_value_is_an_error_naming_it(klass, base, key, value, says):
    with pytest.raises(OptionError) as error:
        klass.parse({**base, key: value})
    assert says in str(error.value)
    assert key.lower() in str(error.value).lower() and error.value.option.lower() == key.lower()
    if key == "zmq.foo":  # the error lists what is valid
        assert "zmq.receiveBufferBytes" in str(error.value)


def test_libzmq_sockets_take_the_socket_options():
    port = free_ports(1)[0]
    tuning = SocketTuning(
        reconnect_ivl_ms=50,
        reconnect_ivl_max_ms=2000,
        handshake_ivl_ms=1500,
        ipv6=True,
        immediate=True,
        tcp_keepalive_idle_s=60,
        tcp_keepalive_intvl_s=5,
        tcp_keepalive_cnt=4,
        sndbuf=65536,
        rcvbuf=131072,
    )
    sock = Pull([f"@tcp://127.0.0.1:{port}"], tuning=tuning)
    try:
        raw = sock.zmq_socket
        read = {
            name: raw.getsockopt(opt)
            for name, opt in (
                ("reconnect", zmq.RECONNECT_IVL),
                ("max", zmq.RECONNECT_IVL_MAX),
                ("handshake", zmq.HANDSHAKE_IVL),
                ("ipv6", zmq.IPV6),
                ("immediate", zmq.IMMEDIATE),
                ("idle", zmq.TCP_KEEPALIVE_IDLE),
                ("intvl", zmq.TCP_KEEPALIVE_INTVL),
                ("cnt", zmq.TCP_KEEPALIVE_CNT),
                ("snd", zmq.SNDBUF),
                ("rcv", zmq.RCVBUF),
            )
        }
        assert read == {
            "reconnect": 50,
            "max": 2000,
            "handshake": 1500,
            "ipv6": 1,
            "immediate": 1,
            "idle": 60,
            "intvl": 5,
            "cnt": 4,
            "snd": 65536,
            "rcv": 131072,
        }
    finally:
        sock.close(linger=0)


@pytest.mark.parametrize("kind", [Pull, ZmtpPull])
def test_the_largest_keepalive_settings_the_options_take_work_on_a_connection(kind):
    """The top of each range is what the kernel takes: a connection with them carries
    messages, on libzmq and on the engine (past it libzmq passed EINVAL on silently)."""
    tuning = SourceOptions.parse(
        {
            "endpoints": "@tcp://127.0.0.1:5555",
            "zmq.tcpKeepaliveIdle": "32767",
            "zmq.tcpKeepaliveInterval": "32767",
            "zmq.tcpKeepaliveCount": "127",
            "zmq.reconnectInterval": "1",
        }
    ).tuning
    port = free_ports(1)[0]
    pull = kind([f"@tcp://127.0.0.1:{port}"], tuning=tuning, linger=0)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        push.connect(f"tcp://127.0.0.1:{port}")
        push.send(b"kept alive")
        assert pull.recv(timeout=10) == b"kept alive"
    finally:
        push.close()
        context.term()
        pull.close(linger=0)


def test_the_engine_takes_the_receive_buffer_keepalive_and_reconnect_interval():
    port = free_ports(1)[0]
    tuning = SocketTuning(rcvbuf=32768, tcp_keepalive_idle_s=77, reconnect_ivl_ms=50, handshake_ivl_ms=1500)
    pull = ZmtpPull([f"@tcp://127.0.0.1:{port}"], tuning=tuning, linger=0)
    context = zmq.Context()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        assert pull._engine.reconnect_ivl_s == 0.05 and pull._engine.handshake_ivl_s == 1.5
        push.connect(f"tcp://127.0.0.1:{port}")
        push.send(b"hello")
        assert pull.recv(timeout=10) == b"hello"
        # the kernel doubles SO_RCVBUF for its bookkeeping and then keeps it (no autotuning)
        assert wait_until(lambda: tcp_receive_buffer(port) == 2 * 32768, 10, "the engine's connection's SO_RCVBUF")
        assert (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 77) in pull._engine.tcp_options
    finally:
        push.close()
        context.term()
        pull.close(linger=0)


class FirstAttemptThenPull:
    """A port that takes the sink's first connection and closes it at once (as a consumer
    that is not there yet would refuse it), then binds a ZeroMQ PULL on the same port and
    collects what arrives. The sink's next attempt comes after its reconnect interval: the
    one synchronisation point is the accept, not a sleep."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        self.received: list[bytes] = []
        self.context = zmq.Context()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.listener.accept()
        conn.close()
        self.listener.close()
        pull = self.context.socket(zmq.PULL)
        pull.setsockopt(zmq.LINGER, 0)
        pull.bind(f"tcp://127.0.0.1:{self.port}")
        try:
            while not self.done.is_set():
                if pull.poll(100):
                    self.received.append(pull.recv())
        finally:
            pull.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        self.context.term()


def _write(spark, port: int, **options: str) -> None:
    """Ten text rows in one task (one sink socket) to ``port``, waiting up to 4 s for a peer."""
    (
        spark.range(0, 10, 1, 1)
        .selectExpr("cast(id as string) as value")
        .write.format("zmq")
        .mode("append")
        .option("endpoints", f"tcp://127.0.0.1:{port}")
        .option("format", "text")
        .option("sendTimeoutMs", "4000")
        .options(**options)
        .save()
    )


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_a_spark_sink_honours_zmq_reconnect_interval(spark):
    # with the default interval the sink comes back within the write's 4 s and delivers
    consumer = FirstAttemptThenPull()
    try:
        _write(spark, consumer.port)
        assert wait_until(lambda: len(consumer.received) == 10, 10, "the ten rows")
    finally:
        consumer.close()
    # with a minute between attempts it does not: the write times out, nothing arrives
    consumer = FirstAttemptThenPull()
    try:
        with pytest.raises(Exception, match=f"tcp://127.0.0.1:{consumer.port}"):
            _write(spark, consumer.port, **{"zmq.reconnectInterval": "60s"})
        assert consumer.received == []
    finally:
        consumer.close()
