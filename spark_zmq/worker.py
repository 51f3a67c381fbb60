"""Run a Python function as a ZeroMQ request-reply service: a broker worker or a REP server.

The public name of ``spark_zmq.requestreply.worker`` (the service loop lives in the
request-reply package, beside the broker and the client); the names below are the ones
to import::

    from spark_zmq.worker import serve

    serve(score, "tcp://scoring-broker:5560")            # a worker of `spark-zmq broker`
    serve(score, "@tcp://*:5555", broker=False)          # a REP server clients connect to

"Worker" here is a ZeroMQ service worker, not one of Spark's Python workers. This module
never imports Spark.
"""

from __future__ import annotations

from .requestreply.worker import ERROR, FORMATS, StopFlag, WorkerStats, error_reply, is_error_reply, serve

__all__ = ["serve", "StopFlag", "WorkerStats", "ERROR", "FORMATS", "error_reply", "is_error_reply"]
