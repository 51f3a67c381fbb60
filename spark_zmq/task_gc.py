"""Keep Spark's per-task garbage collection in a Python worker from scanning what never dies.

Why: a reused Spark Python worker (``spark.python.worker.reuse``, the default) runs a full
``gc.collect()`` after every task (``pyspark/daemon.py``). A full collection visits every
object the collector tracks, and a worker that has imported pyspark, pyarrow, pandas and
this package tracks about 90,000 of them, nearly all module-level objects that live as long
as the process, so each collection costs tens of milliseconds of CPU whatever the task did.
With one-row messages and a live producer, a streaming query runs several read tasks a
second, so that fixed cost was a large part of what its Python workers spent
(docs/performance.md, "Measured design choices").

``gc.freeze()`` moves every object tracked at that moment to a permanent generation that
collections skip. Called once per worker process, at the start of its first task of this
package (after the imports, before the task's own data), it leaves each later collection
only what tasks created since. Frozen objects are still freed by reference counting the
moment nothing refers to them (the reader and partition a first task was given are
freed when it ends); only a reference cycle among objects alive at the freeze would outlive
its use, which for imported modules is never. A driver or any process that is not a Spark
worker is left alone: the freeze happens only inside ``read``/``write`` of a task.
"""

from __future__ import annotations

import gc
import os

#: the pid whose heap is frozen: a worker forked from a frozen one is frozen too (gc.freeze
#: is inherited across fork), and a fresh process has not frozen yet
_frozen_in: int | None = None


def freeze_long_lived_once() -> None:
    """Freeze the objects this Python worker tracks now, once per process; see the module's
    docstring for why. Cheap on every later call (one comparison)."""
    global _frozen_in
    pid = os.getpid()
    if _frozen_in == pid:
        return
    _frozen_in = pid
    gc.freeze()
