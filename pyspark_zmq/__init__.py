"""Spark's own discovery of the ``zmq`` data source.

Why this module exists: when a session first looks up a Python data source, Spark imports
every installed top-level module whose name starts with ``pyspark_`` and registers the
``DefaultSource`` it finds (``pyspark.sql.worker.lookup_data_sources``). Installing
spark-zmq is therefore enough for ``spark.readStream.format("zmq")`` in any session, as
installing a jar is for Kafka: no import, no ``spark_zmq.register``.
"""

from spark_zmq.sparkglue.datasource import ZmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
