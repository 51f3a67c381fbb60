"""A source's ``zmq.receiveBufferBytes`` through Spark: the receiving socket's connection from
a producer has the kernel receive buffer asked for (read from ``ss``), and rows arrive."""

from __future__ import annotations

import pytest
from zmqtest import Producer, numbered, stop_all, tcp_receive_buffer, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


@pytest.mark.parametrize("receivers", ["threads", "processes"])
def test_a_source_sets_the_receive_buffer_of_its_connections(spark, free_port, spool_dir, tmp_path, receivers):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("spoolDir", spool_dir)
        .option("receivers", receivers)
        .option("zmq.receiveBufferBytes", "24576")
        .load()
    )
    query = (
        df.select("offset")
        .writeStream.format("memory")
        .queryName(f"rcvbuf_{receivers}")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        Producer(endpoint, numbered(100)).start()
        wait_until(lambda: spark.table(f"rcvbuf_{receivers}").count() >= 100, 60, "100 rows")
        # the kernel doubles SO_RCVBUF for its bookkeeping and then keeps it (no autotuning)
        wait_until(lambda: tcp_receive_buffer(free_port) == 2 * 24576, 10, "the connection's SO_RCVBUF")
    finally:
        stop_all([query])
