"""What binds the connector to Spark's own APIs, beside the source and the sink.

- ``datasource``: ``ZmqDataSource``, the ``zmq`` data source Spark instantiates (its
  public name is ``spark_zmq.datasource``; ``pyspark_zmq`` hands it to Spark's discovery).
- ``schemas``: the fixed Spark schemas of the ``raw`` and ``text`` formats and the Arrow
  schema Spark expects of a batch, shared by the source, the sink and the requester.
- ``thread_session``: writes to ``format("zmq")`` from any Python thread.
- ``worker_env``: seeds the data source's environment map for Spark's Python workers,
  against a race in Spark when two streaming queries start at once.

``datasource`` and ``schemas`` import pyspark; ``thread_session`` and ``worker_env`` use
the pyspark already loaded or the session they are given. The package's ``__init__``
imports none of them, so a module that needs ``schemas`` does not load the data source.
"""
