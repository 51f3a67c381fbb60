"""startingTimestamp's lookup in the spool: the first message held that was received at or
after a time, and the freed messages received at or after it (data loss), across a
restart of the spool (its record of freed segments is kept in the channel's directory)."""

from __future__ import annotations

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.spool import Spool

T0 = 1_767_225_600_000_000  # microseconds since the epoch


def _fill(spool_dir: str, waves: list[tuple[int, int]]) -> Spool:
    """A one-channel spool holding ``count`` messages received at ``t`` for each (t, count),
    one segment per wave."""
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    for t, count in waves:
        log.append(messages_to_batch([b"m%d" % i for i in range(count)], None, "raw", t))
        log.roll()
    return spool


def test_the_first_message_at_or_after_the_time_and_the_oldest_before_everything(tmp_path):
    spool = _fill(str(tmp_path / "spool"), [(T0, 10), (T0 + 5_000_000, 20)])
    log = spool.channels[0]
    assert log.start_at_time(T0 + 1) == (10, None)  # between the waves: the second
    assert log.start_at_time(T0 + 5_000_000) == (10, None)  # at a receive time: that message
    assert log.start_at_time(T0 - 3_600_000_000) == (0, None)  # before the oldest held: the oldest
    assert log.start_at_time(T0 + 9_000_000) == (30, None)  # after the newest: what arrives next
    spool.close()


def test_freed_messages_received_at_or_after_the_time_are_data_loss_even_after_a_restart(tmp_path):
    spool_dir = str(tmp_path / "spool")
    spool = _fill(spool_dir, [(T0, 10), (T0 + 5_000_000, 20), (T0 + 9_000_000, 5)])
    assert spool.channels[0].release_before(30) > 0  # the first two waves' segments are freed
    spool.close()
    spool = Spool(spool_dir, 1)
    log = spool.channels[0]
    assert log.earliest == 30
    offset, lost = log.start_at_time(T0 + 1)
    assert offset == 30 and (lost.first, lost.end) == (10, 30)
    assert "startingTimestamp" in lost.describe() and "offsets 10..30" in lost.describe()
    offset, lost = log.start_at_time(T0 - 1)  # the whole freed past
    assert offset == 30 and (lost.first, lost.end) == (0, 30)
    assert log.start_at_time(T0 + 6_000_000) == (30, None)  # nothing freed was that recent
    spool.close()
