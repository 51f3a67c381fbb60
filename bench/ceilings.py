"""Spark's own ceilings for the Python Data Source API, the fair baselines for Arrow:
a streaming source that yields prepared Arrow batches from memory (ingest), and an Arrow
writer that discards what it is given (egress)."""

from __future__ import annotations

import os

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

from payloads import ARROW_DDL, arrow_message


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


class MemoryArrowReader(DataSourceStreamReader):
    """Offsets count messages: ``WARM_UP`` at first, ``count`` more at once when the ``go``
    file exists. ``read`` decodes the very IPC message the connector's benchmark sends, held in
    memory (it travels to the workers with the reader), as the connector decodes each one."""

    def __init__(self, options) -> None:
        self.count, self.rows, self.go = int(options["messages"]), int(options["rows"]), options["go"]
        self.message = arrow_message(self.rows)

    def initialOffset(self) -> dict:
        return {"n": 0}

    def latestOffset(self) -> dict:
        return {"n": WARM_UP + (self.count if os.path.exists(self.go) else 0)}

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


class DiscardArrowSink(DataSource):
    """``df.write.format("bench_discard")``: rows reach Python as Arrow, as in the zmq sink,
    and go nowhere; what is left is Spark's cost of handing a Python writer its rows."""

    @classmethod
    def name(cls) -> str:
        return "bench_discard"

    def writer(self, schema, overwrite: bool):
        return DiscardArrowWriter()


class DiscardArrowWriter(DataSourceArrowWriter):
    def write(self, iterator):
        rows = 0
        for batch in iterator:
            rows += batch.num_rows
        return WriterCommitMessage()
