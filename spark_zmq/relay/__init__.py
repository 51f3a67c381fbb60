"""Relays: the receivers and spool of a source as a standalone service (``spark-zmq relay``).

``service.Relay`` is the service, ``run.serve`` runs it until a signal, ``client`` is the
query's side of its request-reply protocol and ``lease`` decides which query reads it.
The stream reader's adapter is ``spark_zmq.source.relays``.
"""
