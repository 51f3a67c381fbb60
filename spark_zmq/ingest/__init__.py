"""The ingest core, without Spark: receive, spool, serve.

What a source needs below Spark, used alike by a query's driver (``spark_zmq.source``),
by a standalone relay and by receiver processes (``spark_zmq.relay``):

- ``receiver``: one socket per channel drained into the spool, under a disk budget;
- ``spool_format``, ``spool``, ``spool_reader``: the durable, numbered log of each channel,
  written by the receiver and read back by offsets (``spark_zmq.arrow`` checks untrusted Arrow);
  ``spool_files`` keeps the spool directory private and its small files atomic,
  ``spool_index`` is the in-memory index the planner reads;
- ``fetch``: the CURVE-only service that hands spool ranges to read tasks on other hosts,
  and the client those tasks use;
- ``runtime``: a spool plus its receivers (and optionally the fetch service) as one unit.

Nothing here imports pyspark (``tests/test_layers.py`` checks it).
"""
