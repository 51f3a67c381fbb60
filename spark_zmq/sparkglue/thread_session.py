"""Writes to ``format("zmq")`` from any Python thread of a classic session.

Why: Spark's writer looks a Python data source up in the JVM thread's *active* session
(``SparkSession.getActiveSession``), not in the writing DataFrame's own session. PySpark
runs each Python thread's calls on a JVM thread of its own, and only the thread that built
the session has it active, so ``df.write.format("zmq").save()`` from a scheduler's, a web
service's or a thread pool's thread fails with ``DATA_SOURCE_NOT_FOUND: zmq`` although the
source is registered (a read from such a thread finds it: the reader looks it up in its
own session). The same holds for any Python data source.

``install()`` wraps the batch writer's ``save`` so that it first makes the DataFrame's own
session the active one of the calling thread, which is what Spark assumes (the streaming
writer's ``start`` resolves the source through its own session and needs nothing). It changes nothing else: the session made
active is the one the write already belongs to. A Spark Connect session has no JVM on the
client and is left alone (its server resolves the source).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["install", "activate"]

_WRAPPED = "_spark_zmq_activates_session"


def activate(session: Any) -> None:
    """Make ``session`` the active session of the calling thread's JVM thread (classic
    sessions; nothing for Spark Connect)."""
    jvm = getattr(session, "_jvm", None)
    jsession = getattr(session, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return
    try:
        jvm.SparkSession.setActiveSession(jsession)
    except Exception:  # a stopped session: the write itself reports it  # noqa: BLE001
        pass


def _activating(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        activate(getattr(self, "_spark", None))
        return method(self, *args, **kwargs)

    setattr(write, _WRAPPED, True)
    return write


def install() -> bool:
    """Wrap the classic batch writer's ``save``, once; False when pyspark's SQL module is not
    loaded yet (so a relay or a receiver process never loads Spark for this)."""
    if "pyspark.sql" not in sys.modules:
        return False
    from pyspark.sql.readwriter import DataFrameWriter

    if not getattr(DataFrameWriter.save, _WRAPPED, False):
        DataFrameWriter.save = _activating(DataFrameWriter.save)  # type: ignore[method-assign]  # wrapped on purpose
    return True
