"""The spool's read path: starting at a recorded position reads exactly what a full scan does."""

from __future__ import annotations

import random

import pytest

from spark_zmq.source.receiver import messages_to_batch
from spark_zmq.source.spool import Spool, read_range

pytestmark = pytest.mark.timeout(60)


def _values(batches):
    return [v for batch in batches for v in batch.column("value").to_pylist()]


def test_read_range_from_a_located_batch_equals_a_scan_from_the_segment_start(tmp_path):
    """Read tasks start at the batch holding their first offset (ChannelLog.locate) instead
    of scanning the segment from its beginning; both must give exactly [start, end)."""
    spool = Spool(str(tmp_path), 1, max_bytes=1 << 30)
    log = spool.channels[0]
    total = 0
    for i in range(400):  # small batches of varying size, as a steady producer leaves them
        values = [b"m-%d" % (total + j) for j in range(i % 7 + 1)]
        log.append(messages_to_batch(values, None, "raw", 0))
        total += len(values)
    rng = random.Random(7)
    located = 0
    for _ in range(300):
        start = rng.randrange(0, total)
        end = rng.randrange(start, total + 1)
        hint = log.locate(start)
        located += hint is not None
        expected = [b"m-%d" % k for k in range(start, end)]
        assert _values(read_range(str(tmp_path), 0, start, end)) == expected
        assert _values(read_range(str(tmp_path), 0, start, end, hint)) == expected, (start, end, hint)
    assert located > 250, "locate() should know almost every batch's position"
    assert log.locate(0) is None  # a segment's first batch follows the schema: no position
    assert log.locate(total) is None  # not spooled yet
    spool.close()
