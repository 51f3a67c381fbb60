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

from .options import OptionError, SinkOptions, SourceOptions, manual
from .schemas import fixed_schema

__all__ = ["ZmqDataSource"]

_SUMMARY = """``format("zmq")``: ZeroMQ PULL/GATHER/SUB in, PUSH/SCATTER/PUB out.

    df = (spark.readStream.format("zmq").option("pattern", "pull")
            .option("endpoints", "@tcp://*:5555").option("format", "json")
            .schema("sensor string, reading double").load())
    df.writeStream.format("zmq").option("endpoints", "tcp://collector:6000")...

"""


class ZmqDataSource(DataSource):
    # The manual is generated from the options table, so help(ZmqDataSource) always
    # lists exactly the options the parser accepts.
    __doc__ = _SUMMARY + manual()

    @classmethod
    def name(cls) -> str:
        return "zmq"

    def schema(self) -> StructType:
        options = SourceOptions.parse(self.options)  # validates every option first
        schema = fixed_schema(options.format)
        if schema is None:
            example, extra = "sensor string, reading double", ""
            if options.include_headers:  # Spark takes a declared schema as it is: headers included
                example += ", headers map<string,string>"
                extra = " and, for option 'includeHeaders', the column it fills"
            raise OptionError(
                f"format {options.format!r} needs the schema of the messages{extra}: "
                f"spark.readStream.format('zmq').schema('{example}')..."
            )
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        from .source.batch import ZmqBatchReader

        options = SourceOptions.parse(self.options)
        if options.relays:
            raise OptionError(
                "option 'relays' is for spark.readStream: a relay keeps its spool until a query commits, which a "
                "bounded spark.read cannot do. Read what a relay holds with spark.readStream and "
                ".trigger(availableNow=True)", "relays",
            )
        return ZmqBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .source.stream import ZmqStreamReader

        return ZmqStreamReader(SourceOptions.parse(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink.writer import ZmqBatchWriter

        return ZmqBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink.writer import ZmqStreamWriter

        return ZmqStreamWriter(SinkOptions.parse(self.options), schema)
