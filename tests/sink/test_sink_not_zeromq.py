"""A sink pointed at an endpoint that is not a ZeroMQ peer (a web server, a typo'd port of
another service) fails its write naming the endpoint and what the handshakes met, with no
word of CURVE when CURVE is not configured."""

from __future__ import annotations

import pytest
from zmqtest import NotZeroMQ

pytestmark = pytest.mark.timeout(180)


def test_a_sink_whose_endpoint_is_not_a_zeromq_peer_says_so(spark):
    server = NotZeroMQ()
    try:
        with pytest.raises(Exception) as info:
            (
                spark.range(10)
                .selectExpr("cast(id as string) as value")
                .write.format("zmq")
                .mode("append")
                .option("endpoints", f"tcp://127.0.0.1:{server.port}")
                .option("format", "text")
                .option("sendTimeoutMs", "3000")
                .save()
            )
        message = str(info.value)
        assert f"tcp://127.0.0.1:{server.port}" in message, message[-3000:]
        said = [line for line in message.splitlines() if "not a ZeroMQ peer" in line]
        assert said and all("CURVE" not in line for line in said), message[-3000:]
        # retried with a doubling wait, not every 100 ms, for as long as the write waited
        assert len(server.accepted) <= 12, len(server.accepted)
    finally:
        server.close()
