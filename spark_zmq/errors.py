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

Retriable by class (``SparkZmqError.retriable``): ``SendTimeoutError``,
``RequestTimeoutError``, ``SinkTimeoutError``, ``RelayBusyError``, ``SpoolLockedError``,
``NoPeerError``; and, where the raising site says so, a ``FetchError`` or ``RelayError``
that got no answer, or a ``ServiceCallError`` whose request went unanswered.
"""

from __future__ import annotations

from typing import TypeVar

__all__ = ["SparkZmqError", "transient"]


class SparkZmqError(Exception):
    """Any error raised by spark-zmq (every class the module docstring lists derives from it).

    ``retriable`` says whether making the same call again later can succeed, as aiokafka's
    ``KafkaError.retriable``: ``True`` when the cause passes by itself (a peer away, busy or
    not answering; a lock another process holds; a lease that lapses), ``False`` when it is
    in the input, the configuration, the keys or the data (a bad option, a malformed
    message, a refused handshake, lost offsets), which the same call meets again. A class
    sets its default; where one class covers both kinds (a fetch that got no answer, or
    was refused), the raising site marks the transient ones with ``transient``."""

    retriable: bool = False


E = TypeVar("E", bound=SparkZmqError)


def transient(error: E) -> E:
    """``error``, marked as one that retrying can help (``retriable``): for raising sites
    of a class whose other sites are not, as ``raise transient(FetchError(...))``."""
    error.retriable = True
    return error
