"""The connector's tasks freeze their Python worker's long-lived objects (``spark_zmq.task_gc``).

Spark's reused Python worker runs a full ``gc.collect()`` after every task; with pyspark,
pyarrow, pandas and this package imported that visits about 90,000 objects that never die
(25-35 ms of CPU a task). The read and write tasks call ``gc.freeze()`` once per worker so
the collection skips them. Which worker a task runs in is Spark's business, and Spark keeps
the workers of a data source apart from those of UDFs and RDDs, so the check runs inside
the connector's own task: a data source that is the connector with one check added (its
reader and writer are the connector's, their class extended) thaws the worker, runs the
connector's task, and fails the query when the task has frozen nothing.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterator

import pytest
import zmq
from pyspark import cloudpickle
from zmqtest import wait_until

from spark_zmq import task_gc
from spark_zmq.sink.writer import ZmqBatchWriter
from spark_zmq.source.stream import ZmqStreamReader
from spark_zmq.sparkglue.datasource import ZmqDataSource

pytestmark = pytest.mark.timeout(180)

# the classes below travel to Spark's workers by value: this module is not importable there
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _thaw() -> None:
    """Undo any freeze of this worker (a task of another test may have run in it), so the
    check sees what the connector's task itself does."""
    gc.unfreeze()
    task_gc._frozen_in = None


def _frozen_or_fail(what: str) -> None:
    if gc.get_freeze_count() == 0:
        raise AssertionError(f"the Python worker that ran the connector's {what} has frozen no object")


class _CheckedStreamReader(ZmqStreamReader):
    def read(self, partition) -> Iterator:
        _thaw()
        for item in super().read(partition):
            _frozen_or_fail("read task")
            yield item


class _CheckedBatchWriter(ZmqBatchWriter):
    def write(self, iterator):
        _thaw()
        commit = super().write(iterator)
        _frozen_or_fail("write task")
        return commit


class CheckedZmq(ZmqDataSource):
    @classmethod
    def name(cls) -> str:
        return "zmq_gc_checked"

    def streamReader(self, schema):
        reader = super().streamReader(schema)
        reader.__class__ = _CheckedStreamReader
        return reader

    def writer(self, schema, overwrite: bool):
        writer = super().writer(schema, overwrite)
        writer.__class__ = _CheckedBatchWriter
        return writer


@pytest.mark.spark
def test_read_and_write_tasks_freeze_their_workers_long_lived_objects(spark, tmp_path, free_port, ctx):
    spark.dataSource.register(CheckedZmq)
    query = (
        spark.readStream.format("zmq_gc_checked")
        .option("endpoints", f"@tcp://127.0.0.1:{free_port}")
        .option("spoolDir", str(tmp_path / "spool"))
        .load()
        .writeStream.format("memory")
        .queryName("task_gc_read")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{free_port}")
    try:
        for i in range(200):
            push.send(b"m%d" % i)

        def read_all() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"the query failed: {query.exception()}")
            return spark.table("task_gc_read").count() >= 200

        wait_until(read_all, 90, "200 rows read by the checked connector")
    finally:
        query.stop()

    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    (
        spark.range(0, 100, numPartitions=2)
        .selectExpr("cast(id as string) as value")
        .write.format("zmq_gc_checked")
        .option("endpoints", f"tcp://127.0.0.1:{port}")
        .option("format", "text")
        .mode("append")
        .save()
    )
    assert pull.poll(10_000), "the checked write sent nothing"


def test_a_later_task_freezes_what_new_imports_brought():
    _thaw()
    try:
        task_gc.freeze_long_lived()
        first = gc.get_freeze_count()
        assert first > 0
        task_objects = [[i] for i in range(1000)]  # a task's own data: no import, no new freeze
        task_gc.freeze_long_lived()
        # (not equal: a frozen object that reference counting frees leaves the count)
        assert gc.get_freeze_count() < first + 1000, "no import since: the task's own objects stay unfrozen"
        lazy = types.ModuleType("spark_zmq_test_lazily_imported")
        lazy.tables = [[i] for i in range(1000)]  # type: ignore[attr-defined]
        sys.modules[lazy.__name__] = lazy
        try:
            task_gc.freeze_long_lived()
            assert gc.get_freeze_count() >= first + 1500, "a freeze after an import took what it brought"
        finally:
            del sys.modules[lazy.__name__]
        del task_objects
    finally:
        _thaw()
