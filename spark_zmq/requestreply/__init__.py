"""Request-reply applications from the ZeroMQ Guide (chapter 3), built on the pattern
layer's sockets (``spark_zmq.patterns``: ``Req``, ``Dealer``, ``Router``) and usable without Spark.

- ``Client`` (``client``): the Guide's asynchronous client over a DEALER: request ids,
  replies in any order, resends on silence. ``spark_zmq.request`` calls services with it.
- ``Broker`` (``broker``, with ``broker_clients``, ``broker_workers``, ``broker_stats`` and
  ``broker_defaults``): the Guide's load-balancing broker between such clients and REQ
  workers; ``spark-zmq broker`` runs it.
- ``serve`` (``worker``, with ``worker_process``): a Python function as a ZeroMQ service
  worker, behind the broker or as a REP server; ``spark_zmq.worker`` is its public name.

"Worker" in this package is always a ZeroMQ service worker (a process answering requests),
never one of Spark's Python workers, which run the connector's tasks.

This package never imports Spark.
"""

from .broker import Broker
from .broker_stats import BrokerStats
from .client import Client, RequestTimeoutError

__all__ = ["Broker", "BrokerStats", "Client", "RequestTimeoutError"]
