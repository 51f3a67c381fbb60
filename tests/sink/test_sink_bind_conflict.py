"""A sink that binds (``@tcp://...`` in option ``endpoints``): every write task opens its own
socket, so two partitions on one host contend for the address. The losing task fails with
an error that names the option, the address and what is valid, not a bare EADDRINUSE.

Spark's Python data source writer learns only the schema on the driver, never the number of
partitions, so the refusal is the write task's (``TaskSender``)."""

from __future__ import annotations

import time

import pytest
import zmq
from zmqtest import free_ports

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]


def _write(df, endpoint: str, **options: str) -> None:
    writer = df.write.format("zmq").mode("append").option("endpoints", endpoint)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_two_partitions_binding_one_address_fail_naming_the_option_and_the_fix(spark):
    (port,) = free_ports(1)
    address = f"tcp://127.0.0.1:{port}"
    df = spark.range(10).selectExpr("cast(id as string) as value").repartition(2)
    started = time.monotonic()
    # no subscriber: the task that binds first waits for one (sendTimeoutMs), so the other
    # runs beside it and meets the bound address; its failure ends the write
    with pytest.raises(Exception) as info:
        _write(df, "@" + address, pattern="pub", topic="t", sendTimeoutMs="60000")
    message = str(info.value)
    assert f"option 'endpoints' binds {address}" in message, message
    assert "one partition" in message and "coalesce(1)" in message and "connect" in message, message
    assert time.monotonic() - started < 50, "the write waited for sendTimeoutMs instead of failing at the bind"


def test_one_partition_binding_an_address_writes(spark):
    (port,) = free_ports(1)
    address = f"tcp://127.0.0.1:{port}"
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(address)  # reconnects until the write task binds
    try:
        df = spark.range(10).selectExpr("cast(id as string) as value").repartition(2).coalesce(1)
        _write(df, "@" + address, pattern="pub", topic="t", sendTimeoutMs="30000")
        got = []
        while len(got) < 10 and sub.poll(5000):
            got.append(sub.recv_multipart())
    finally:
        sub.close(0)
    assert sorted(payload for _, payload in got) == sorted(str(i).encode() for i in range(10))
