"""An idle query asks its receiver process about once per Spark poll, not four times.

Spark calls a streaming source's ``latestOffset`` every 10 ms while nothing arrives
(``pollingDelay``). Each call looked at the receiver process's state three times (the failure
check, the release, the latest offsets) and sent the same release again: four control
requests a poll, about 280 a second, 5% of a core for a query that receives nothing. A state
answered moments ago is used again (``relays.STATE_REUSE_S``) and a release of the offsets
already released is not sent. Counted by a subclassed reader, in a file: its polls and the
requests its relay clients send. A ratio, which a busy machine does not change the way it
changes a rate.
"""

from __future__ import annotations

import sys

import pytest
from pyspark import cloudpickle
from zmqtest import free_ports, wait_until

from spark_zmq.source.stream import ZmqStreamReader
from spark_zmq.sparkglue.datasource import ZmqDataSource

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

# the classes below travel to Spark's Python processes by value: this module is not importable there
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _counting_source(log_file: str) -> type[ZmqDataSource]:
    """A ``zmq`` source whose stream reader writes ``.`` to ``log_file`` for every
    ``latestOffset`` and ``a`` for every request it sends a receiver process."""

    def note(mark: str) -> None:
        with open(log_file, "a") as f:
            f.write(mark)

    class _PollCountingReader(ZmqStreamReader):
        def latestOffset(self, start, limit):
            try:
                return super().latestOffset(start, limit)
            finally:
                note(".")
                for relay in getattr(self._runtime, "relays", []):
                    if not hasattr(relay.client, "counted"):
                        relay.client.counted = True
                        ask = relay.client.ask

                        def counted_ask(*args, _ask=ask, **kwargs):
                            note("a")
                            return _ask(*args, **kwargs)

                        relay.client.ask = counted_ask

    class PollCountedZmq(ZmqDataSource):
        @classmethod
        def name(cls) -> str:
            return "zmq_polls_counted"

        def streamReader(self, schema):
            reader = super().streamReader(schema)
            reader.__class__ = _PollCountingReader
            return reader

    return PollCountedZmq


def _counts(path) -> tuple[int, int]:
    """(polls, requests) so far."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0, 0
    return text.count("."), text.count("a")


def test_an_idle_query_asks_its_receiver_process_about_once_a_poll(spark, tmp_path):
    data = free_ports(1)[0]
    log_file = tmp_path / "polls"
    spark.dataSource.register(_counting_source(str(log_file)))
    query = (
        spark.readStream.format("zmq_polls_counted")
        .option("endpoints", f"@tcp://127.0.0.1:{data}")
        .option("spoolDir", str(tmp_path / "spool"))
        .option("receiverLingerSeconds", "0")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        wait_until(lambda: _counts(log_file)[0] >= 5 or query.exception() is not None, 90, "the query's first polls")
        assert query.exception() is None, query.exception()
        polled, asked = _counts(log_file)
        wait_until(lambda: _counts(log_file)[0] >= polled + 60, 60, "60 more polls of the idle query")
        polls, requests = (now - then for now, then in zip(_counts(log_file), (polled, asked)))
        # four a poll before; one, or two when the machine is slow between the looks
        assert requests <= 2.5 * polls + 5, f"{requests} control requests for {polls} polls"
        assert requests >= polls / 2, f"{requests} control requests counted for {polls} polls: the count is broken"
    finally:
        query.stop()
