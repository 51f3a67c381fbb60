"""The read task's body (``source.read_task.decoded_rows``), shared by the streaming and
the bounded reader, driven without Spark: rows in offset order, small spool batches joined
(never across a gap), Arrow messages decoded one by one; and the bounded reader's read of
a partition gives what the shared body gives."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.spool_format import SPOOL_SCHEMA
from spark_zmq.options import SourceOptions
from spark_zmq.sink.encoders.arrow import arrow_message
from spark_zmq.source.batch import ZmqBatchReader
from spark_zmq.source.decoders import decoder_for
from spark_zmq.source.partitions import InlineMessages
from spark_zmq.source.read_task import decoded_rows
from spark_zmq.source.schema_contract import default_schema

pytestmark = pytest.mark.timeout(60)


def options(fmt: str = "raw") -> SourceOptions:
    return SourceOptions.parse({"endpoints": "tcp://127.0.0.1:5999", "format": fmt})


def one_row_batches(first: int, n: int) -> list[tuple[int, pa.RecordBatch]]:
    return [(first + i, messages_to_batch([f"m{first + i}".encode()], None, "raw", 1)) for i in range(n)]


def rows(batches) -> list[dict]:
    return [row for batch in batches for row in batch.to_pylist()]


def test_small_spool_batches_are_joined_and_keep_their_offsets():
    opts = options()
    out = list(decoded_rows(decoder_for(opts, default_schema(opts)), 3, one_row_batches(10, 50)))
    assert len(out) == 1
    got = rows(out)
    assert [r["value"] for r in got] == [f"m{i}".encode() for i in range(10, 60)]
    assert [r["offset"] for r in got] == list(range(10, 60))
    assert set(got[0]) >= {"value", "offset"}


def test_batches_are_never_joined_across_a_gap_of_skipped_offsets():
    opts = options()
    out = list(decoded_rows(decoder_for(opts, default_schema(opts)), 0, one_row_batches(0, 5) + one_row_batches(9, 5)))
    assert [b.num_rows for b in out] == [5, 5]
    assert [r["offset"] for r in rows(out)] == [0, 1, 2, 3, 4, 9, 10, 11, 12, 13]


def test_arrow_messages_are_decoded_one_by_one():
    opts = options("arrow")
    schema = pa.schema([("n", pa.int64())])
    messages = [arrow_message(pa.RecordBatch.from_pydict({"n": [i, i + 1]}, schema=schema), {}) for i in (0, 2, 4)]
    spool = [(i, messages_to_batch([m], None, "arrow", 1)) for i, m in enumerate(messages)]
    decoder = decoder_for(opts, StructType([StructField("n", LongType())]))
    assert [r["n"] for r in rows(decoded_rows(decoder, 0, spool))] == [0, 1, 2, 3, 4, 5]


def test_the_bounded_reader_reads_a_partition_as_the_shared_body_does():
    opts = options()
    schema = default_schema(opts)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, SPOOL_SCHEMA) as writer:
        for _, batch in one_row_batches(7, 40):
            writer.write_batch(batch)
    partition = InlineMessages(2, 7, sink.getvalue().to_pybytes())
    read = list(ZmqBatchReader(opts, schema).read(partition))
    shared = list(decoded_rows(decoder_for(opts, schema), 2, one_row_batches(7, 40)))
    assert [b.num_rows for b in read] == [b.num_rows for b in shared] == [40]
    assert rows(read) == rows(shared)
