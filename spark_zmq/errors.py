"""The root of every error the package raises: ``except spark_zmq.errors.SparkZmqError``
catches any of them and nothing else.

Why a root: errors are raised where they are understood (a socket's timeout in the pattern
layer, a spool's data loss in ingest, an option in ``options``), about thirty classes in
twenty modules. Each keeps the builtin base its callers have always caught
(``TimeoutError``, ``ValueError``, ``OSError``, ...), and adds this one, as aiokafka's
errors share ``KafkaError``. This module imports nothing, so every layer may use it.

Where each is defined, by layer:
- patterns: ``SocketClosedError``, ``SendTimeoutError``, ``RequestTimeoutError``,
  ``CurveError``, ``ZmtpError`` (``CurveSequenceError``);
- options: ``OptionError``;
- arrow: ``MalformedArrowError``, ``CorruptMetadataError``;
- ingest: ``DataLossError``, ``SpoolFormatError``, ``SpoolLockedError``,
  ``SpoolSecurityError``, ``FetchError``;
- relay: ``RelayError`` (``RelayBusyError``), ``ReaderBoundError``;
- source: ``OffsetsFormatError``, ``DecodeError`` (``MalformedMessageError``,
  ``SchemaMismatchError``);
- sink: ``SinkTimeoutError``, ``SinkBindError``;
- requester: ``ServiceCallError``; the load generator: ``NoPeerError``,
  ``HandshakeRejectedError``.
"""

from __future__ import annotations

__all__ = ["SparkZmqError"]


class SparkZmqError(Exception):
    """Any error raised by spark-zmq (every class the module docstring lists derives from it)."""
