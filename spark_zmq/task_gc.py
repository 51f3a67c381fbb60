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
collections skip. A task of this package freezes at its start (after the imports, before the
task's own data) the first time in its worker process, and again whenever modules were
imported since the last freeze: pyspark imports pandas, numpy's masked arrays and more
lazily, inside a task, and a worker frozen only before those imports kept about 29,000 of
their objects under every collection (10 ms of CPU a task, measured with a probe wrapped
around the daemon's ``gc.collect``). Counting ``sys.modules`` is one ``len``, so a task
that imports nothing new pays a comparison. At a later task's start the daemon has just run
a full collection, so what is tracked then is alive: freezing it keeps nothing that a
collection would have freed, except what the task itself built before calling (its
reader and partition), which reference counting still frees unless it is a cycle, and
re-freezes stop once the worker's imports are done. Frozen objects are still freed by
reference counting the moment nothing refers to them; only a reference cycle among objects
alive at a freeze would outlive its use, which for imported modules is never. A driver or
any process that is not a Spark worker is left alone: the freeze happens only inside
``read``/``write`` of a task.
"""

from __future__ import annotations

import gc
import os
import sys

#: the pid whose heap was last frozen, and how many modules it had imported then: a worker
#: forked from a frozen one is frozen too (gc.freeze is inherited across fork), and a fresh
#: process has not frozen yet
_frozen_in: int | None = None
_modules_at_freeze = 0


def freeze_long_lived() -> None:
    """Freeze the objects this Python worker tracks now, the first time in a process and
    again after new imports; see the module's docstring for why. Cheap on every other call
    (two comparisons)."""
    global _frozen_in, _modules_at_freeze
    pid = os.getpid()
    modules = len(sys.modules)
    if _frozen_in == pid and modules == _modules_at_freeze:
        return
    _frozen_in, _modules_at_freeze = pid, modules
    gc.freeze()
