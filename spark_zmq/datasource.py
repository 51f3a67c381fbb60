"""The ``zmq`` data source, ``ZmqDataSource``: ``help(spark_zmq.datasource.ZmqDataSource)``
prints its manual (every option, the schemas, the guarantees).

The public name of ``spark_zmq.sparkglue.datasource``, where the class is defined.
"""

from __future__ import annotations

from .sparkglue.datasource import ZmqDataSource

__all__ = ["ZmqDataSource"]
