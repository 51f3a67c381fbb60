"""Scenario 12, peers: the connector beside another Python stream processor reading the
same ZeroMQ stream, and beside a bare pyzmq PULL loop, fed by the same producer.

Every contender gets ``count`` one-row messages (raw, ``size`` bytes) from the bench's own
producer (``bench/producer.py``, a bare pyzmq PUSH process), timed from its ``go`` to the
last message received, and the CPU of every receiving process (never the producer's) over
that window, from /proc (``cpu.snapshot``/``used``):

- ``connector``: a user's defaults, ``readStream.format("zmq")``, pattern pull, raw, into
  ``noop`` (``ingest.connector``: its CPU by process is ``cpu.by_role``'s);
- ``BYTEWAX``: Bytewax 0.21 reading the same PULL socket through a custom input source.
  Bytewax has no ZeroMQ connector and its documentation no ZeroMQ example; its page on
  custom connectors (``DOCS``, docs/guide/advanced-concepts/custom-connectors.md in
  bytewax/bytewax) says to subclass ``bytewax.inputs.FixedPartitionedSource`` and shows the
  shape this source has: one ``"singleton"`` partition, a ``StatefulSourcePartition``
  whose ``next_batch`` never blocks (here it drains the socket with ``NOBLOCK``, at most
  ``BYTEWAX_BATCH`` messages a call, and returns ``[]`` when nothing is queued: Bytewax
  then waits 1 ms, as ``next_awake``'s docstring says) and whose ``snapshot`` is ``None``;
  the sink, a ``bytewax.outputs.DynamicSink``, counts and discards. It runs in a process
  of its own through ``bytewax.run.cli_main`` with one worker and a 10 s epoch, what
  ``python -m bytewax.run`` does by default; the source ends the dataflow after ``count``
  messages (raising ``StopIteration``, the documented end of input);
- ``BARE``: a pyzmq PULL loop in a process of its own, the loop of ``ingest.bare_pull``
  (the same receive high-water mark, ``recv()`` ``count`` times). It is not
  ``ingest.bare_pull`` itself because that one starts its producer and says go itself:
  here the producer must be this process's child (a producer reaped by a measured process
  would count in that process's CPU) and its ``go`` the clock's start for all three.

The two child processes bind a random port and print ``ready PORT`` (Bytewax once its
dataflow runs and first asks the source for a batch), then ``done TIME`` (``time.time()``
at the last message: for Bytewax when the sink has them all), and stay alive until their
stdin closes, so the CPU snapshot after the run still finds them (the CPU of a child that
exited is only in its parent's reaped time, and this process, the root, is not counted).

Bytewax is optional (``pip install -e ".[bench]"``): without it its contender is skipped
with the reason printed and the other two run.
"""

from __future__ import annotations

import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))

BYTEWAX = "Bytewax 0.21 ZeroMQ source"
BARE = "bare pyzmq PULL"
#: the Bytewax documentation page the source follows
DOCS = "https://docs.bytewax.io/stable/guide/advanced-concepts/custom-connectors.html"
#: most messages one ``next_batch`` returns (Bytewax's own Kafka source's default batch size)
BYTEWAX_BATCH = 1000
#: the receive high-water mark of both child receivers, as ``ingest.bare_pull``'s
RCVHWM = 100_000


def bytewax_missing() -> str | None:
    """Why Bytewax's contender cannot run here, or ``None`` when it can."""
    from importlib import metadata, util

    try:
        found = util.find_spec("bytewax") is not None and util.find_spec("bytewax.inputs") is not None
    except ImportError as e:  # a ``bytewax`` that fails to import
        return f'Bytewax does not import ({e}): pip install -e ".[bench]"'
    if not found:
        return 'Bytewax is not installed (pip install -e ".[bench]")'
    version = metadata.version("bytewax")
    if not version.startswith("0.21."):
        return f'Bytewax {version} is installed, the source is written for 0.21 (pip install -e ".[bench]")'
    return None


class Receiver:
    """``peers.py MODE COUNT`` (``pull`` or ``bytewax``) in a child process: see the module
    docstring. Its stdout is read by a thread, so every wait has a deadline."""

    def __init__(self, mode: str, count: int) -> None:
        self.mode = mode
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), mode, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")  # end of output: the process exited

    def _line(self, word: str, timeout: float) -> str:
        try:
            line = self.lines.get(timeout=timeout).decode().strip()
        except queue.Empty:
            raise TimeoutError(f"the {self.mode} receiver printed no {word!r} line in {timeout:.0f} s") from None
        if not line.startswith(word + " "):
            raise RuntimeError(
                f"the {self.mode} receiver printed {line!r} instead of {word!r} (exit code {self.proc.poll()})"
            )
        return line.split(" ", 1)[1]

    def ready(self, timeout: float = 120) -> int:
        """The port it bound, once it can receive."""
        return int(self._line("ready", timeout))

    def done(self, timeout: float = 600) -> float:
        """The wall-clock time it received the last message."""
        return float(self._line("done", timeout))

    def close(self, timeout: float = 60) -> None:
        """Let it exit (its stdin closes) and wait for it; killed if it does not."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def child(mode: str, count: int, size: int, cpu: dict, producer_class: Callable | None = None) -> float:
    """One run of a child contender (``pull`` or ``bytewax``): msgs/s from the producer's
    go to the last message received; ``cpu`` gets the receiving process's CPU a message.
    ``producer_class``: ``common.Producer`` (the default) or ``wire.CProducer``."""
    import cpu as cpu_tree
    from common import Producer

    receiver = Receiver(mode, count)
    try:
        port = receiver.ready()
        producer = (producer_class or Producer)(f"tcp://127.0.0.1:{port}", count, "raw", size)
        producer.ready()
        before = cpu_tree.snapshot()
        started = producer.go()
        finished = receiver.done()
        after = cpu_tree.snapshot(follow=before)
        producer.wait(60)
    finally:
        receiver.close()
    spent = cpu_tree.used(before, after, lambda p: p.pid == receiver.proc.pid)
    cpu.update(
        {
            "messages": count,
            "total_us_per_msg": spent / count * 1e6,
            "by_role_us_per_msg": {"its process": spent / count * 1e6},
        }
    )
    return count / (finished - started)


def measure(
    spark,
    count: int,
    size: int,
    reps: int,
    compare: Callable[..., dict],
    name: str = "peers",
    producer_class: Callable | None = None,
) -> dict:
    """The scenario's row (``compare``'s format, against Bytewax where it runs, else the
    bare loop), with ``cpu_us_per_msg`` (each contender's receiving processes, medians)
    and ``notes`` (the lines report.md lists) added. ``producer_class``: what feeds every
    contender, ``common.Producer`` (a user's Python PUSH, the default) or ``wire.CProducer``
    (libzmq's C sender: what each receiving side takes when the sender costs least)."""
    import ingest
    from common import Producer, measured

    producer_class = producer_class or Producer

    skipped = bytewax_missing()
    if skipped:
        print(f"{name:18s} {BYTEWAX} skipped: {skipped}", flush=True)
    cpu: dict[str, list[dict]] = {"connector": [], BYTEWAX: [], BARE: []}
    contenders = {
        "connector": measured(
            lambda c: ingest.connector(spark, count, "raw", size, cpu=c, producer=producer_class), cpu["connector"]
        )
    }
    if not skipped:
        contenders[BYTEWAX] = measured(lambda c: child("bytewax", count, size, c, producer_class), cpu[BYTEWAX])
    contenders[BARE] = measured(lambda c: child("pull", count, size, c, producer_class), cpu[BARE])
    row = compare(
        name, "msgs/s", contenders, reps, BARE if skipped else BYTEWAX, None if skipped else 1.0, ceiling=BARE
    )
    row["messages"] = count
    row["bytewax_skipped"] = skipped
    row["bytewax_follows"] = DOCS
    row["cpu_us_per_msg"] = {
        name: {
            role: statistics.median(by_process(run)[role] for run in runs)
            for role in by_process(runs[0])
            if role != "producers"
        }
        for name, runs in cpu.items()
        if runs
    }
    import cpu as cpu_tree

    for by_role in row["cpu_us_per_msg"].values():
        # the JVM's threads ("jvm JIT compiler", ...) are a split of "jvm", not more CPU
        by_role["all receiving"] = sum(
            us for role, us in by_role.items() if not role.startswith(cpu_tree.JVM_THREAD_ROLE)
        )
    if not skipped and cpu["connector"]:
        row["peers_budget"] = budget(row, statistics.median(run["producer_us_per_msg"] for run in cpu["connector"]))
    row["notes"] = (
        [cpu_line(row)]
        + ([budget_line(row)] if row.get("peers_budget") else [])
        + ([f"{name}: {BYTEWAX} skipped: {skipped}"] if skipped else [])
    )
    print(row["notes"][0], flush=True)
    return row


def budget(row: dict, producer_us_per_msg: float) -> dict:
    """Whether the connector can keep Bytewax's rate on this machine's cores: at that rate,
    the cores its receiving processes (all of them, Spark's included) and the producer need
    together, from this run's CPU a message; and the most the cores allow the connector a
    message at that rate once the producer is paid."""
    rate = row["median"][BYTEWAX]
    connector = row["cpu_us_per_msg"]["connector"]["all receiving"]
    cores = os.cpu_count() or 1
    return {
        "cores": cores,
        "target_msgs_per_s": rate,
        "connector_us_per_msg": connector,
        "producer_us_per_msg": producer_us_per_msg,
        "bytewax_us_per_msg": row["cpu_us_per_msg"][BYTEWAX]["all receiving"],
        "cores_needed": rate * (connector + producer_us_per_msg) / 1e6,
        "left_for_connector_us_per_msg": cores / rate * 1e6 - producer_us_per_msg,
    }


def budget_line(row: dict) -> str:
    b = row["peers_budget"]
    return (
        f"{row['scenario']}: CPU budget of Bytewax's rate ({b['target_msgs_per_s']:,.0f} msgs/s) on {b['cores']} cores: "
        f"the connector's receiving processes {b['connector_us_per_msg']:.2f} us a message + the producer "
        f"{b['producer_us_per_msg']:.2f} = {b['cores_needed']:.2f} cores; the cores leave the connector "
        f"{b['left_for_connector_us_per_msg']:.2f} us a message at that rate (Bytewax's own: "
        f"{b['bytewax_us_per_msg']:.2f})"
    )


def by_process(run: dict) -> dict[str, float]:
    """One run's CPU microseconds a message by process: ``cpu.by_role``'s split where
    ``ingest.connector`` gives it, else its receiving processes and every other one."""
    if "by_role_us_per_msg" in run:
        return run["by_role_us_per_msg"]
    return {"receivers": run["receiving_us_per_msg"], "others": run["total_us_per_msg"] - run["receiving_us_per_msg"]}


def cpu_line(row: dict) -> str:
    """CPU microseconds a message by receiving process, every contender, as one line."""
    import cpu as cpu_tree

    parts = []
    for name, by_role in row["cpu_us_per_msg"].items():
        parts.append(f"{name}: {cpu_tree.roles_text(by_role, always=('all receiving',))}")
    return f"{row['scenario']}: CPU us a message by receiving process (the producer's left out): " + "; ".join(parts)


# --- the child processes ------------------------------------------------------------------


def _exit_when_told() -> None:
    sys.stdin.read()  # held until the parent has taken its CPU snapshot and closes our stdin


def _pull(count: int) -> None:
    import zmq

    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, RCVHWM)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    print(f"ready {port}", flush=True)
    for _ in range(count):
        pull.recv()
    print(f"done {time.time()!r}", flush=True)
    _exit_when_told()
    pull.close(0)


def _bytewax(count: int) -> None:
    from datetime import timedelta

    import bytewax.operators as op
    import zmq
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.run import cli_main

    class ZmqPullPartition(StatefulSourcePartition[bytes, None]):
        """One PULL socket; ``next_batch`` drains what is queued, never blocking."""

        def __init__(self) -> None:
            self._pull = zmq.Context.instance().socket(zmq.PULL)
            self._pull.setsockopt(zmq.RCVHWM, RCVHWM)
            self._port = self._pull.bind_to_random_port("tcp://127.0.0.1")
            self._left = count
            self._announced = False

        def next_batch(self) -> list[bytes]:
            if not self._announced:  # the dataflow runs: the producer may start
                print(f"ready {self._port}", flush=True)
                self._announced = True
            if self._left <= 0:
                raise StopIteration  # the end of this finite input
            batch: list[bytes] = []
            try:
                while len(batch) < min(BYTEWAX_BATCH, self._left):
                    batch.append(self._pull.recv(zmq.NOBLOCK))
            except zmq.Again:
                pass
            self._left -= len(batch)
            return batch

        def snapshot(self) -> None:
            return None

        def close(self) -> None:
            self._pull.close(0)

    class ZmqPullSource(FixedPartitionedSource[bytes, None]):
        def list_parts(self) -> list[str]:
            return ["singleton"]

        def build_part(self, step_id: str, for_key: str, _resume_state: None) -> ZmqPullPartition:
            return ZmqPullPartition()

    last: list[float] = []

    class CountingPartition(StatelessSinkPartition[bytes]):
        seen = 0

        def write_batch(self, items: list[bytes]) -> None:
            self.seen += len(items)
            if self.seen >= count and not last:
                last.append(time.time())

    class CountingSink(DynamicSink[bytes]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> CountingPartition:
            return CountingPartition()

    flow = Dataflow("peers")
    op.output("count", op.input("zmq", flow, ZmqPullSource()), CountingSink())
    cli_main(flow, workers_per_process=1, epoch_interval=timedelta(seconds=10))  # python -m bytewax.run's
    if not last:
        raise SystemExit(f"the dataflow ended before its sink had {count} messages")
    print(f"done {last[0]!r}", flush=True)
    _exit_when_told()


if __name__ == "__main__":
    {"pull": _pull, "bytewax": _bytewax}[sys.argv[1]](int(sys.argv[2]))
