"""The ``zmq`` Python data source: the entry point Spark instantiates.

It only validates options and hands off: reading lives in ``spark_zmq.source``, writing
in ``spark_zmq.sink``. Spark builds this object in short-lived planning processes as
well as in the long-lived streaming process, so nothing here opens a socket.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from ..options import OptionError, SinkOptions, SourceOptions, manual
from ..source.schema_contract import default_schema

__all__ = ["ZmqDataSource"]

_SUMMARY = """``format("zmq")``: ZeroMQ PULL/GATHER/SUB in, PUSH/SCATTER/PUB out.

Reading (``import spark_zmq`` registers the source on the active session):

    df = (spark.readStream.format("zmq").option("pattern", "pull")
            .option("endpoints", "@tcp://*:5555").option("format", "json")
            .schema("sensor string, reading double").load())
    q = (df.writeStream.format("parquet").option("path", "/data/readings")
            .option("checkpointLocation", "/data/ckpt").start())

Writing (batch writes need mode "append"):

    df.write.format("zmq").mode("append").option("endpoints", "tcp://collector:6000")
        .option("format", "arrow").save()

Schemas of what the source reads:
  raw   value binary, topic string, partition int, offset long, timestamp timestamp
  text  the same with value string (UTF-8, invalid bytes replaced)
  json  your .schema(...); malformed messages follow option mode (PERMISSIVE,
        DROPMALFORMED, FAILFAST) and columnNameOfCorruptRecord, as Spark's JSON reader
  arrow your .schema(...); each message is one Arrow IPC stream of one or more batches
  partition is the ingest channel (the endpoint's position, or a relay's channel),
  offset the message's number in it, timestamp when it was received; topic is the first
  frame of a [topic, payload] message. json/arrow get them with includeMetadata.

Guarantees:
  source (pull, gather): every message the connector received (written to its spool)
    reaches Spark exactly once per checkpointed query, across task retries, executor
    loss and a driver restart; a full spool (maxSpoolBytes) holds producers back instead
    of dropping. What sits in ZeroMQ's or the network's buffers when a receiver dies is
    beyond reach (ZeroMQ has no acknowledgements). sub drops at the high-water mark.
  sink (push, scatter): at least once; a task commits once every message it sent was
    acknowledged by a consumer's TCP, else it fails within sendTimeoutMs and is retried.
    Arrow messages carry spark_zmq.* metadata to drop the copies a retry sends. pub
    counts what it drops.
  bad input: an error naming the option, channel, offset or file and what is valid.
The README and docs/architecture.md in the project say more.

"""


class ZmqDataSource(DataSource):
    # The manual is generated from the options table, so help(ZmqDataSource) always
    # lists exactly the options the parser accepts.
    __doc__ = _SUMMARY + manual()

    @classmethod
    def name(cls) -> str:
        return "zmq"

    def schema(self) -> StructType:
        return default_schema(SourceOptions.parse(self.options))  # validates every option first

    def reader(self, schema: StructType) -> DataSourceReader:
        from ..source.batch import ZmqBatchReader

        options = SourceOptions.parse(self.options)
        if options.relays:
            raise OptionError(
                "option 'relays' is for spark.readStream: a relay keeps its spool until a query commits, which a "
                "bounded spark.read cannot do. Read what a relay holds with spark.readStream and "
                ".trigger(availableNow=True)",
                "relays",
            )
        if options.committed_only:
            raise OptionError(
                "option 'committedOnly' is for spark.readStream: it holds a run's messages in the spool until the "
                "writing sink's commit record arrives, which a bounded spark.read cannot do. Read with "
                "spark.readStream and .trigger(availableNow=True)",
                "committedOnly",
            )
        return ZmqBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from ..source.reader_ingest import open_ingest
        from ..source.stream import ZmqStreamReader

        # the reader opens the ingest on its first offset call, in the process Spark keeps for it
        return ZmqStreamReader(SourceOptions.parse(self.options), schema, open_ingest)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from ..sink.writer import ZmqBatchWriter

        return ZmqBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from ..sink.writer import ZmqStreamWriter

        return ZmqStreamWriter(SinkOptions.parse(self.options), schema)
