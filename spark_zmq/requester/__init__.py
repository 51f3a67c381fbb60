"""Calling ZeroMQ services from Spark: ``spark_zmq.request(df, endpoints, ...)``.

``codec`` turns rows into request bodies and replies into columns, one class per format;
``call`` runs in the executors (one DEALER per task, requests with ids, replies in any
order, output in input order); ``transform`` is the driver-side function that checks the
options and the schemas and builds the ``mapInArrow`` plan. Only ``transform`` imports
Spark.
"""
