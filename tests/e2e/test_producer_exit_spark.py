"""Through Spark: a producer that sends a finite run and exits while the source holds it
back (spool full) loses nothing, on ``pull``'s engine and on libzmq's PULL (CURVE).

The failure this guards against: the receiving socket's own heartbeat PINGs, sitting
unread in the producer when it exited, made the producer's kernel reset the connection,
which destroyed the megabytes both kernels buffered (see tests/patterns/test_heartbeat_exit.py
and spark_zmq/patterns/heartbeat.py). Heartbeats are fast here (50 ms), so a PING reaches
the producer many times while it waits on the full spool.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import zmq.auth
from zmqtest import free_ports, stop_all, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

MESSAGES = 40_000

_PRODUCER = """
import os, sys, zmq
ctx = zmq.Context()
push = ctx.socket(zmq.PUSH)
push.setsockopt(zmq.SNDHWM, {n})  # the whole run fits in its queue: only the kernel holds it back
if len(sys.argv) > 2:  # CURVE: server public key, client secret certificate
    import zmq.auth
    push.curve_serverkey = zmq.auth.load_certificate(sys.argv[2])[0]
    push.curve_publickey, push.curve_secretkey = zmq.auth.load_certificate(sys.argv[3])
push.connect(sys.argv[1])
for i in range({n}):
    push.send(b"%09d" % i + b"x" * 491)
push.close(linger=-1)
ctx.term()
"""


@pytest.mark.parametrize("curve", [False, True], ids=["pull-engine", "pull-libzmq-curve"])
def test_a_producer_that_exits_while_held_back_delivers_every_message_once(spark, tmp_path, curve):
    port = free_ports(1)[0]
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{port}")
        .option("spoolDir", str(tmp_path / "spool"))
        # a spool of 1 MiB (the least allowed) and small micro-batches: the receiver stops reading
        # for most of the run, so the producer's buffers are full when it exits
        .option("maxSpoolBytes", str(1 << 20))
        .option("maxRowsPerTrigger", "2000")
        .option("heartbeatInterval", "0.05")
        .option("heartbeatTimeout", "5")
        .option("heartbeatTtl", "1")
    )
    producer_args = []
    if curve:
        keys = tmp_path / "keys"
        keys.mkdir()
        server_public, server_secret = zmq.auth.create_certificates(str(keys), "server")
        client_public, client_secret = zmq.auth.create_certificates(str(keys), "client")
        authorized = keys / "authorized"
        authorized.mkdir()
        shutil.copy(client_public, authorized)
        reader = reader.option("curveCertificate", server_secret).option("curveAuthorizedKeys", str(authorized))
        producer_args = [server_public, client_secret]
    query = (
        reader.load()
        .selectExpr("cast(substring(cast(value as string), 1, 9) as long) as n")
        .writeStream.format("memory")
        .queryName(f"producer_exit_{'curve' if curve else 'plain'}")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    table = f"producer_exit_{'curve' if curve else 'plain'}"
    producer = None
    try:
        producer = subprocess.Popen(
            [sys.executable, "-c", _PRODUCER.format(n=MESSAGES), f"tcp://127.0.0.1:{port}", *producer_args]
        )
        assert producer.wait(240) == 0
        wait_until(
            lambda: spark.table(table).count() >= MESSAGES,
            120,
            f"{MESSAGES} rows after the producer exited",
            interval=0.5,
        )
        rows = spark.table(table)
        assert rows.count() == MESSAGES
        assert rows.distinct().count() == MESSAGES
        assert rows.agg({"n": "max"}).first()[0] == MESSAGES - 1
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
        stop_all([query])
