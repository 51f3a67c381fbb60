"""CPU time of this benchmark's process tree, read from /proc (Linux only).

``snapshot()`` before and after a timed section, then ``used(before, after, ...)``: the
CPU seconds the descendants of this process spent in between (this process itself is
left out: it only starts producers and polls the query). Each process counts its own
``utime + stime`` and the ``cutime + cstime`` of children it reaped, so a process that
exits within the section is counted through its parent; one that was still alive at the
first snapshot has that part subtracted. Processes are told apart by pid *and* start
time, so a reused pid is not mistaken for the process it replaced; a process that left
the tree alive (reparented when its parent exited) is still followed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")  # /proc times are in clock ticks (usually 10 ms)

#: the bench's own load generators (Python, node and libzmq's C sender): what they spend is
#: the sending side, never counted
PRODUCERS = ("producer.py", "nodeproducer.js", "thr remote")
#: relays: a query's receiver processes (receivers=processes) and standalone relays
RELAYS = ("spark_zmq.relay.child", "spark_zmq.cli relay")


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    own: int  # utime + stime, ticks
    reaped: int  # cutime + cstime: children that exited and were waited for, ticks
    cmdline: str


Key = tuple[int, int]  # (pid, start time in ticks since boot)
Snapshot = dict[Key, Process]


def _read(pid: int) -> tuple[Key, Process] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:  # gone meanwhile
        return None
    # the command name (field 2) is in parentheses and may hold spaces: fields after it
    fields = stat[stat.rindex(b")") + 2 :].split()  # fields[0] is field 3 (state)
    ppid, utime, stime, cutime, cstime, start = (int(fields[i]) for i in (1, 11, 12, 13, 14, 19))
    return (pid, start), Process(pid, ppid, utime + stime, cutime + cstime, cmdline)


def snapshot(root: int | None = None, follow: Snapshot | None = None) -> Snapshot:
    """The descendants of ``root`` (default: this process), not ``root`` itself; with
    ``follow`` (an earlier snapshot), also its processes still alive elsewhere and theirs."""
    root = os.getpid() if root is None else root
    everything: dict[int, tuple[Key, Process]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            read = _read(int(name))
            if read is not None:
                everything[read[1].pid] = read
    children: dict[int, list[int]] = {}
    for _key, process in everything.values():
        children.setdefault(process.ppid, []).append(process.pid)
    starts = [root] + [key[0] for key in (follow or {}) if key[0] in everything and everything[key[0]][0] == key]
    seen: Snapshot = {}
    pending = [c for pid in starts for c in children.get(pid, [])] + [pid for pid in starts if pid != root]
    while pending:
        pid = pending.pop()
        key, process = everything[pid]
        if key in seen or pid == root:
            continue
        seen[key] = process
        pending.extend(children.get(pid, []))
    return seen


def used(before: Snapshot, after: Snapshot, include: Callable[[Process], bool] = lambda p: True) -> float:
    """CPU seconds spent between two snapshots (``after`` taken with ``follow=before``) by
    the processes ``include`` accepts. A process that exits in between is counted through
    its parent, so ``include`` should accept the parents of such processes too."""
    ticks = 0
    for key, process in after.items():
        earlier = before.get(key)
        # judged as it was at the first snapshot when it was alive then: a process that has
        # exited and not yet been reaped (a producer done sending) shows an empty cmdline
        if include(earlier if earlier is not None else process):
            ticks += process.own + process.reaped - (earlier.own + earlier.reaped if earlier else 0)
    for key, process in before.items():
        if key not in after and include(process):
            ticks -= process.own + process.reaped  # its final figures are in its parent's ``reaped``
    return ticks / TICK


def not_producer(process: Process) -> bool:
    return not any(p in process.cmdline for p in PRODUCERS)


def is_relay(process: Process) -> bool:
    return any(r in process.cmdline for r in RELAYS)


#: what each process of a one-row ingest run is, by its command line, in the order tried
ROLES = (
    ("receivers", lambda p: is_relay(p)),
    ("source runner", lambda p: "python_streaming_source_runner" in p.cmdline),
    ("read tasks", lambda p: "pyspark.daemon pyspark.worker" in p.cmdline),
    ("planning workers", lambda p: "pyspark.sql.worker" in p.cmdline),
    ("jvm", lambda p: "java" in p.cmdline),
    ("producers", lambda p: not not_producer(p)),
)


def role_of(process: Process) -> str:
    """``ROLES``' name for ``process`` (``other`` for none of them)."""
    return next((name for name, test in ROLES if test(process)), "other")


def by_role(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds between two snapshots by ``role_of`` (Spark's JVM, its Python read
    tasks and planning workers, the streaming source runner that hosts a Python source's
    reader, the connector's receiver processes, the producers): where a message's cost goes."""
    return {
        name: used(before, after, lambda p, name=name: role_of(p) == name) for name in [n for n, _ in ROLES] + ["other"]
    }


#: Spark's JVM threads by what they do, told by the name the JVM gives each native thread
#: (``/proc/<pid>/task/<tid>/comm``, 15 characters): the JIT compilers' share is what a
#: short run pays for code the JVM is still compiling, the task threads' what each row costs,
#: the query thread's (``stream execution thread``) what each micro-batch's planning and logs cost
JVM_THREADS = (
    ("JIT compiler", ("C1 CompilerThre", "C2 CompilerThre")),
    ("task threads", ("Executor task",)),
    ("query thread", ("stream executio",)),
    ("GC", ("GC Thread", "G1 ", "VM Thread")),
)


def jvm_threads(snap: Snapshot) -> dict[tuple[int, int], tuple[str, int]]:
    """CPU ticks so far of every ``JVM_THREADS`` thread of the Java processes in ``snap``,
    by (pid, tid): its kind and ticks. Read per thread so that a thread that ends between two
    readings (a stopped query's own thread) drops out instead of counting negative."""
    ticks: dict[tuple[int, int], tuple[str, int]] = {}
    for process in snap.values():
        if "java" not in process.cmdline:
            continue
        try:
            tids = os.listdir(f"/proc/{process.pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{process.pid}/task/{tid}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index(b"(") + 1 : stat.rindex(b")")].decode(errors="replace")
            fields = stat[stat.rindex(b")") + 2 :].split()
            for kind, prefixes in JVM_THREADS:
                if name.startswith(prefixes):
                    ticks[(process.pid, int(tid))] = (kind, int(fields[11]) + int(fields[12]))
                    break
    return ticks


#: how a JVM thread kind is named among ``by_role``'s roles: a split of ``jvm``, not more CPU
JVM_THREAD_ROLE = "jvm "


def jvm_threads_us(before: dict[tuple[int, int], tuple[str, int]], after: Snapshot, messages: int) -> dict[str, float]:
    """CPU microseconds a message by JVM thread kind between a ``jvm_threads`` reading and
    the snapshot ``after``, keyed as roles (``jvm JIT compiler``...) to add to ``by_role``'s:
    each thread alive at ``after`` counts what it spent since ``before`` (all of it if new)."""
    spent = dict.fromkeys((kind for kind, _ in JVM_THREADS), 0)
    for thread, (kind, ticks) in jvm_threads(after).items():
        spent[kind] += ticks - before.get(thread, (kind, 0))[1]
    return {JVM_THREAD_ROLE + kind: ticks / TICK / messages * 1e6 for kind, ticks in spent.items()}


def roles_text(roles: dict[str, float], always: tuple[str, ...] = ()) -> str:
    """``role us, ...`` for the roles of at least 0.005 us (and those in ``always``), the
    JVM's thread kinds shown after ``jvm`` as what it is made of."""
    threads = {role: us for role, us in roles.items() if role.startswith(JVM_THREAD_ROLE)}
    split = ", ".join(f"{role[len(JVM_THREAD_ROLE) :]} {us:.2f}" for role, us in threads.items())
    return ", ".join(
        f"{role} {us:.2f}" + (f" (of which {split})" if role == "jvm" and threads else "")
        for role, us in roles.items()
        if (us >= 0.005 or role in always) and role not in threads
    )
