"""Relays: the ingest core (``spark_zmq.ingest``) as a service of its own.

``service.Relay`` is the service (``spark-zmq relay``), ``run.serve`` runs it until a
signal, ``protocol`` is what both ends of its control requests agree on, ``messages`` is
each request and answer as a named type with its JSON, ``client`` is the query's side,
``lease`` decides which query reads it, and ``processes`` runs one relay per channel as a
query's receiver processes (``receivers=processes``). The stream reader's adapter is
``spark_zmq.source.relays``. Nothing here imports pyspark.
"""
