"""Spark's own ceilings for the Python Data Source API, the fair baselines the connector is
measured against in the same run:

- ``bench_memory_arrow``: a streaming source yielding the Arrow scenario's batches from
  memory (Arrow ingest);
- ``bench_memory_rows``: a streaming source yielding the very rows the connector's ``raw``
  format yields, cut into the same read tasks and record batches (one-row ingest);
- ``bench_memory_stamped``: a streaming source offering stamped text rows by wall clock at
  the latency scenario's rate (the latency floor of any Python source);
- ``bench_discard``: an Arrow writer that discards what it is given (egress), timing its
  first and last batch.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from payloads import ARROW_DDL, arrow_message
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

#: messages offered before the run starts, so workers are warm when it does
WARM_UP = 20


class MemoryArrowSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_memory_arrow"

    def schema(self) -> str:
        return ARROW_DDL

    def streamReader(self, schema):
        return MemoryArrowReader(self.options)


class Range(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


def offered_now(go: str, count: int, offered: int, chunks: list | None) -> int:
    """How many of ``count`` messages an in-memory reader offers past its warm-up: none
    before the ``go`` file exists; then all at once, or (``chunks``) one chunk more per
    ``latestOffset`` call, the connector's micro-batches replayed (``chunks`` is consumed)."""
    if not os.path.exists(go):
        return offered
    if chunks is None:
        return count
    if chunks:
        return min(count, offered + chunks.pop(0))
    return offered


class MemoryArrowReader(DataSourceStreamReader):
    """Offsets count messages: ``WARM_UP`` at first, ``count`` more when the ``go`` file
    exists: at once, or with the option ``chunks`` (a JSON list of message counts that add
    up to ``count``) one chunk more at each ``latestOffset`` call, i.e. one chunk per
    micro-batch: the micro-batches the connector's run had, replayed. ``read`` decodes the
    very IPC message the connector's benchmark sends, held in memory (it travels to the
    workers with the reader), as the connector decodes each one."""

    def __init__(self, options) -> None:
        self.count, self.rows, self.go = int(options["messages"]), int(options["rows"]), options["go"]
        self.chunks = json.loads(options["chunks"]) if options.get("chunks") else None
        self.offered = 0
        self.message = arrow_message(self.rows)

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.offered = offered_now(self.go, self.count, self.offered, self.chunks)
        return {"n": WARM_UP + self.offered}

    def partitions(self, start: dict, end: dict):
        lo, hi = start["n"], end["n"]
        step = max(1, -(-(hi - lo) // 2))  # two read tasks, as local[2] can run
        return [Range(i, min(hi, i + step)) for i in range(lo, hi, step)]

    def read(self, partition: Range):
        import pyarrow as pa

        for _ in range(partition.start, partition.end):
            yield from pa.ipc.open_stream(self.message)

    def commit(self, end: dict) -> None:
        pass


class MemoryRowsSource(DataSource):
    """``readStream.format("bench_memory_rows")``: Spark's ceiling for one row per message.

    Rows: ``sparkglue.schemas.fixed_schema("raw")`` (value: ``size`` bytes of ``payloads.raw``, topic
    null, partition 0, offset from 0 up, a timestamp), the very rows the connector's
    ``raw`` format yields. Read tasks: ``spark_zmq.source.planner.split`` with the
    connector's defaults (payload bytes as the spool counts them); record batches: as many
    rows as ``spark_zmq.ingest.spool_reader.coalesce`` joins (its ``max_rows`` and
    ``max_bytes`` defaults). Columns are built as ``RawDecoder`` builds them (numpy
    ``full``/``arange``, a value array prepared once per task), so what is left is Spark's
    cost of taking those batches from a Python source, not Python's cost of making them.

    Pacing: ``warm`` messages at first, then ``messages`` more at once when the ``go`` file
    exists (as ``bench_memory_arrow``). The connector is fed live, but by a producer faster
    than Spark drains it, so Spark works through a backlog either way; offering the backlog
    at once leaves it the fewest micro-batches, which is what a ceiling should do. With
    ``chunks`` (as ``bench_memory_arrow``'s) it offers them in the connector's
    micro-batches instead: how much of the gap is the micro-batches' own cost.
    Options: ``messages``, ``size``, ``warm``, ``go``, ``chunks``.
    """

    @classmethod
    def name(cls) -> str:
        return "bench_memory_rows"

    def schema(self):
        from spark_zmq.sparkglue.schemas import fixed_schema

        return fixed_schema("raw")

    def streamReader(self, schema):
        return MemoryRowsReader(self.options)


class Piece(InputPartition):
    """One read task: ``[start, end)`` of ``channel``."""

    def __init__(self, channel: int, start: int, end: int) -> None:
        self.channel, self.start, self.end = channel, start, end


def batch_rows(size: int) -> int:
    """Rows per record batch the connector's read yields for ``size``-byte messages: what
    ``coalesce`` joins under its default ``max_rows``/``max_bytes``, measured on a spool
    batch of such messages (``batches.messages_to_batch``)."""
    from spark_zmq.ingest.batches import messages_to_batch
    from spark_zmq.ingest.spool_reader import coalesce

    defaults = inspect.signature(coalesce).parameters
    max_rows, max_bytes = defaults["max_rows"].default, defaults["max_bytes"].default
    n = 1024
    probe = messages_to_batch([b"x" * size] * n, None, "raw", 0)  # what a receiver appends to the spool
    return max(1, min(max_rows, int(max_bytes // (probe.nbytes / n))))


class MemoryRowsReader(DataSourceStreamReader):
    """Offsets count messages of the one channel 0 (``{"n": next offset}``)."""

    def __init__(self, options) -> None:
        self.count, self.size = int(options["messages"]), int(options["size"])
        self.warm, self.go = int(options["warm"]), options["go"]
        self.chunks = json.loads(options["chunks"]) if options.get("chunks") else None
        self.offered = 0

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        self.offered = offered_now(self.go, self.count, self.offered, self.chunks)
        return {"n": self.warm + self.offered}

    def partitions(self, start: dict, end: dict) -> list:
        from spark_zmq.source.locality import local_cores
        from spark_zmq.source.planner import split

        lo, hi = start["n"], end["n"]
        if hi <= lo:
            return []
        return [
            Piece(p.channel, p.start, p.end)
            for p in split({0: (lo, hi)}, {0: (hi - lo) * self.size}, slots=local_cores())
        ]

    def read(self, partition: Piece) -> Iterator:
        import numpy as np
        import pyarrow as pa

        from spark_zmq.sparkglue.schemas import arrow_schema, fixed_schema

        target = arrow_schema(fixed_schema("raw"))
        rows = min(batch_rows(self.size), partition.end - partition.start)
        # prepared once per task, as the spool holds the messages before a read: values
        # of payloads.raw(size), null topics, one receive time
        value = pa.Array.from_buffers(
            pa.binary(),
            rows,
            [
                None,
                pa.py_buffer(np.arange(0, (rows + 1) * self.size, self.size, dtype=np.int32)),
                pa.py_buffer(b"x" * (self.size * rows)),
            ],
        )
        topic = pa.nulls(rows, pa.string())
        stamp = pa.array(np.full(rows, int(time.time() * 1e6), dtype="datetime64[us]"), pa.timestamp("us", tz="UTC"))
        for first in range(partition.start, partition.end, rows):
            n = min(rows, partition.end - first)
            yield pa.RecordBatch.from_arrays(
                [
                    value if n == rows else value.slice(0, n),
                    topic if n == rows else topic.slice(0, n),
                    pa.array(np.full(n, partition.channel, dtype=np.int32)),
                    pa.array(np.arange(first, first + n, dtype=np.int64)),
                    stamp if n == rows else stamp.slice(0, n),
                ],
                schema=target,
            )

    def commit(self, end: dict) -> None:
        pass


class MemoryStampedSource(DataSource):
    """``readStream.format("bench_memory_stamped")``: the latency floor of a Python source.

    Offers rows by wall clock at ``rate`` rows/s from the moment its reader is made
    (``latestOffset`` = rate x seconds since then, at most ``messages``); each row's value
    is the text of its scheduled send time (``%.6f``, as ``producer.py``'s stamped
    messages), so a collector measures the same receive-minus-send latency as for the
    connector, without ZeroMQ or a spool on the way in. Schema: ``fixed_schema("text")``.
    Options: ``rate``, ``messages``.
    """

    @classmethod
    def name(cls) -> str:
        return "bench_memory_stamped"

    def schema(self):
        from spark_zmq.sparkglue.schemas import fixed_schema

        return fixed_schema("text")

    def streamReader(self, schema):
        return MemoryStampedReader(self.options)


class Stamped(InputPartition):
    """One read task: rows ``[start, end)`` scheduled from ``origin`` at ``rate``."""

    def __init__(self, start: int, end: int, origin: float, rate: float) -> None:
        self.start, self.end, self.origin, self.rate = start, end, origin, rate


class MemoryStampedReader(DataSourceStreamReader):
    def __init__(self, options) -> None:
        self.rate, self.count = float(options["rate"]), int(options["messages"])
        self.origin = time.time()

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        return {"n": min(self.count, int(self.rate * (time.time() - self.origin)))}

    def partitions(self, start: dict, end: dict) -> list:
        from spark_zmq.source.locality import local_cores
        from spark_zmq.source.planner import split

        lo, hi = start["n"], end["n"]
        if hi <= lo:
            return []
        return [
            Stamped(p.start, p.end, self.origin, self.rate)
            for p in split({0: (lo, hi)}, {0: (hi - lo) * 17}, slots=local_cores())
        ]

    def read(self, partition: Stamped) -> Iterator:
        import numpy as np
        import pyarrow as pa

        from spark_zmq.sparkglue.schemas import arrow_schema, fixed_schema

        target = arrow_schema(fixed_schema("text"))
        offsets = np.arange(partition.start, partition.end, dtype=np.int64)
        n = len(offsets)
        sent = partition.origin + offsets / partition.rate
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(np.char.mod("%.6f", sent).tolist(), pa.string()),
                pa.nulls(n, pa.string()),
                pa.array(np.zeros(n, dtype=np.int32)),
                pa.array(offsets),
                pa.array((sent * 1e6).astype("datetime64[us]"), pa.timestamp("us", tz="UTC")),
            ],
            schema=target,
        )

    def commit(self, end: dict) -> None:
        pass


class DiscardArrowSink(DataSource):
    """``df.write.format("bench_discard")``: rows reach Python as Arrow, as in the zmq sink,
    and go nowhere; what is left is Spark's cost of handing a Python writer its rows.
    Option ``timing``: a file the job's commit writes ``{"first": ..., "last": ...}`` to,
    the wall time of the first batch any task got and of the end of the last one."""

    @classmethod
    def name(cls) -> str:
        return "bench_discard"

    def writer(self, schema, overwrite: bool):
        return DiscardArrowWriter(self.options.get("timing"))


@dataclass
class Window(WriterCommitMessage):
    """One write task's ``time.time()`` at its first batch and after its last (``None``
    when it got none)."""

    first: float | None
    last: float | None


class DiscardArrowWriter(DataSourceArrowWriter):
    """Counts and drops its batches. Timed from the first batch to the last across tasks,
    as the egress consumer times the zmq sink from first message to last, so its rate
    leaves out the write job's fixed cost (planning, task launch, commit)."""

    def __init__(self, timing: str | None = None) -> None:
        self.timing = timing

    def write(self, iterator) -> Window:
        rows = 0
        first = None
        for batch in iterator:
            if first is None:
                first = time.time()
            rows += batch.num_rows
        return Window(first, time.time() if first is not None else None)

    def commit(self, messages) -> None:
        windows = [m for m in messages if isinstance(m, Window) and m.first is not None]
        if self.timing and windows:
            with open(self.timing, "w") as f:
                json.dump({"first": min(w.first for w in windows), "last": max(w.last for w in windows)}, f)

    def abort(self, messages) -> None:
        pass
