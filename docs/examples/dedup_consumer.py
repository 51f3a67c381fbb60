"""Receive the zmq sink's Arrow messages and deliver each written row once.

The sink delivers at least once: a task that fails and runs again, or a streaming batch
that runs again after a restart, sends its rows again. Every Arrow message of the sink
names its task (query_id, batch_id, partition) and the task's run (attempt_id). Once
Spark committed the write (every task succeeded), the driver sends each consumer a
commit record: a message without rows whose metadata ``spark_zmq.commit`` says which run
of each task Spark kept. This consumer holds a run's messages until the record for its
task arrives, then delivers the run Spark kept and drops every other run of that task,
before or after. So each row arrives once, even when a retried task produced its rows
in another order, and even for a run cut short by a failure (whose writer could not
tell that its input ended early).

What it needs: memory for the messages of the runs whose commit record has not arrived
yet. With several consumers, each gets the record and its own share of the runs.

usage: python dedup_consumer.py tcp://*:6000
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pyarrow as pa

from spark_zmq.patterns import Pull


class TaskOutputs:
    """Feed it messages in arrival order; it returns the rows of the runs Spark kept."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str, str], str] = {}  # task -> the attempt_id Spark committed
        self.waiting: dict[tuple[str, str, str, str], list[pa.Table]] = {}  # run -> its rows so far

    def add(self, message: bytes) -> list[pa.Table]:
        rows = pa.ipc.open_stream(message).read_all()
        meta = {k.decode(): v.decode() for k, v in (rows.schema.metadata or {}).items()}
        query, batch = meta["spark_zmq.query_id"], meta["spark_zmq.batch_id"]
        if "spark_zmq.commit" in meta:  # the driver's record: which run of each task counts
            out = []
            for partition, run in json.loads(meta["spark_zmq.commit"]).items():
                task = (query, batch, partition)
                if task in self.kept:
                    continue  # a batch committed again after a restart: the first record stands
                self.kept[task] = run["attempt_id"]
                out += self.waiting.pop(task + (run["attempt_id"],), [])
                for other in [r for r in self.waiting if r[:3] == task]:
                    del self.waiting[other]  # runs Spark threw away
            return out
        task = (query, batch, meta["spark_zmq.partition"])
        attempt = meta["spark_zmq.attempt_id"]
        if task not in self.kept:
            self.waiting.setdefault(task + (attempt,), []).append(rows)
            return []
        return [rows] if self.kept[task] == attempt else []


def consume(endpoint: str) -> Iterator[pa.Table]:
    """Tables of rows, each written row once, as Spark commits the writes."""
    outputs = TaskOutputs()
    with Pull("@" + endpoint) as pull:
        while True:
            yield from outputs.add(pull.recv())


if __name__ == "__main__":
    for table in consume(sys.argv[1]):
        print(table.num_rows, "rows:", table.slice(0, 3).to_pylist(), flush=True)
