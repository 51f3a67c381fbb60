"""Ingest scenarios: the connector's streaming source and the baselines it is measured by.

Every function returns units per second (messages for one-row messages, rows for Arrow),
timed from the moment the data is offered to the moment Spark (or the bare loop) has it all.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable

import cpu as cpu_tree
import curvekeys
import payloads
import pyarrow as pa
import zmq
from common import NodeProducer, Producer, Relay, free_ports, register_ceilings, wait_for_rows, wait_started, warm_up

from spark_zmq.ingest.spool_layout import LOCK_FILE

# Messages sent through a fresh query before the measured run: enough for the JVM to have
# compiled its hot paths (a one-row run of 300,000 messages still spent a third of the
# JVM's CPU in the JIT compiler threads), so the figure is the steady state users run at.
WARM_UP_MESSAGES = {"raw": 100_000, "arrow": 40}


def connector(
    spark,
    count: int,
    kind: str,
    arg: int,
    channels: int = 1,
    pattern: str = "pull",
    producer: Callable[[str, int, str, int], Producer] = Producer,
    receivers: str = "processes",
    relays: int = 0,
    cpu: dict | None = None,
    pacing: list | None = None,
) -> float:
    """``readStream.format("zmq")`` (``pattern`` pull or gather, ``raw`` or ``arrow``) into a
    ``noop`` sink; ``channels`` endpoints, each fed ``count / channels`` messages by its own
    ``producer`` (a bare pyzmq PUSH process by default; ``libzmq_producer("scatter")`` for
    libzmq's own SCATTER). Under ``curvekeys.ENV`` the source is a CURVE server and the
    producers its clients.

    ``receivers``: the source option (``threads`` or ``processes``); the user's default,
    ``processes``, unless a scenario compares the two. ``relays``: when > 0,
    that many standalone ``spark-zmq relay`` processes, one channel each (so ``channels``
    is ``relays``), and the query reads them with the option ``relays`` instead of binding
    endpoints itself. ``cpu``: a dict to fill with the CPU the timed section cost, in
    microseconds per message: ``total_us_per_msg`` (every descendant of this process but
    the producers: Spark's JVM, its Python workers, relays) and ``receiving_us_per_msg``
    (the relay processes with ``processes`` or ``relays``; with threads the Python process
    that hosts the stream reader and its receiver threads, whose pid the spool's lock holds).
    ``pacing``: a list to fill with the run's micro-batches, in messages each (the last
    one's count up to the run's end), for ``memory_source`` to replay."""
    if relays:
        if channels not in (1, relays):
            raise ValueError(f"with relays every relay has one channel: channels={channels}, relays={relays}")
        channels = relays
    # every endpoint's port chosen at once (the relays' listen ports too), so none repeats
    picked = free_ports(2 * channels if relays else channels)
    ports, listen_ports = picked[:channels], picked[channels:]
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    started_relays: list[Relay] = []
    try:
        if relays:
            for i, port in enumerate(ports):
                started_relays.append(
                    Relay(
                        f"@tcp://127.0.0.1:{port}",
                        f"tcp://127.0.0.1:{listen_ports[i]}",
                        os.path.join(work, f"relay-{i}"),
                        pattern,
                        kind,
                    )
                )
            for relay in started_relays:  # started together, waited for in turn
                relay.wait_ready()
            reader = spark.readStream.format("zmq").option("relays", ",".join(r.listen for r in started_relays))
        else:
            reader = (
                spark.readStream.format("zmq")
                .option("pattern", pattern)
                .option("endpoints", ",".join(f"@tcp://127.0.0.1:{p}" for p in ports))
                .option("receivers", receivers)
                .option("spoolDir", os.path.join(work, "spool"))
                # receiver processes stop with the query: lingering ones (the default 300 s)
                # would spin beside every contender that runs after
                .option("receiverLingerSeconds", "0")
            )
        if kind == "arrow":
            reader = reader.option("format", "arrow").schema(payloads.ARROW_DDL)
        if curvekeys.current():
            reader = reader.options(**curvekeys.source_options(curvekeys.current()))
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", os.path.join(work, "ckpt"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            wait_started(query)
            endpoints = [f"tcp://127.0.0.1:{p}" for p in ports]
            warm = warm_up(query, endpoints, kind, arg, messages=WARM_UP_MESSAGES[kind])
            per_channel = count // channels
            procs = [producer(endpoint, per_channel, kind, arg) for endpoint in endpoints]
            for proc in procs:
                proc.ready()
            before = cpu_tree.snapshot() if cpu is not None else {}
            threads_before = cpu_tree.jvm_threads(before)
            started = min(p.go() for p in procs)
            rows = per_channel * channels * (arg if kind == "arrow" else 1)
            finished = wait_for_rows(query, warm + rows)
            if pacing is not None:
                pacing[:] = micro_batches(query.recentProgress, warm, rows, arg if kind == "arrow" else 1)
            if cpu is not None:
                after = cpu_tree.snapshot(follow=before)
                messages = per_channel * channels
                total = cpu_tree.used(before, after, cpu_tree.not_producer)
                relayed = relays or receivers == "processes"
                if relayed:
                    receiving = cpu_tree.used(before, after, cpu_tree.is_relay)
                else:  # the reader's process, which holds the spool's lock and writes its pid there
                    with open(os.path.join(work, "spool", LOCK_FILE)) as lock:
                        reader_pid = int(lock.read().strip())
                    receiving = cpu_tree.used(before, after, lambda p: p.pid == reader_pid)
                producing = cpu_tree.used(before, after, lambda p: not cpu_tree.not_producer(p))
                cpu["by_role_us_per_msg"] = {
                    role: spent / messages * 1e6 for role, spent in cpu_tree.by_role(before, after).items()
                }
                cpu["by_role_us_per_msg"].update(cpu_tree.jvm_threads_us(threads_before, after, messages))
                cpu.update(
                    {
                        "messages": messages,
                        "total_us_per_msg": total / messages * 1e6,
                        "producer_us_per_msg": producing / messages * 1e6,
                        "receiving_us_per_msg": receiving / messages * 1e6,
                        "receiving": "relay processes" if relayed else "the reader's process",
                    }
                )
            for proc in procs:
                proc.wait(60)
        finally:
            query.stop()
    finally:
        for relay in started_relays:
            relay.stop()
    return rows / (finished - started)


def libzmq_producer(socket_type: str) -> Callable[[str, int, str, int], Producer]:
    """Producers that are libzmq's own ``socket_type`` socket (SCATTER or PUSH, zeromq.js)."""
    return lambda endpoint, count, kind, arg: NodeProducer(endpoint, count, kind, arg, socket_type)


def bare_pull(count: int, kind: str, arg: int) -> float:
    """A bare pyzmq PULL loop; for Arrow it also decodes each message (the wire's ceiling)."""
    pull = zmq.Context.instance().socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 100_000)
    if curvekeys.current():
        curvekeys.secure_server(pull, curvekeys.current())
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    proc = Producer(f"tcp://127.0.0.1:{port}", count, kind, arg)
    started = proc.go()
    rows = 0
    if kind == "arrow":
        for _ in range(count):
            rows += pa.ipc.open_stream(pull.recv(copy=False).buffer).read_all().num_rows
    else:
        for _ in range(count):
            pull.recv()
        rows = count
    elapsed = time.time() - started
    proc.wait(60)
    pull.close(0)
    return rows / elapsed


def micro_batches(progress: list[dict], warm: int, rows: int, rows_per_message: int) -> list[int]:
    """The messages of each micro-batch that took the run's ``rows`` after the ``warm``
    rows of the warm-up (the last cut where the run's rows end)."""
    out, seen = [], 0
    for p in sorted(progress, key=lambda p: p["batchId"]):
        n = p["numInputRows"]
        run_rows = min(seen + n, warm + rows) - max(seen, warm)
        seen += n
        if run_rows > 0:
            out.append(run_rows // rows_per_message)
    return out


def memory_source(spark, count: int, rows: int, pacing: list | None = None) -> float:
    """Spark's ceiling for Arrow from Python: a Python streaming data source whose read()
    yields the same record batches from memory, into the same ``noop`` sink. It offers 20
    warm-up messages, then ``count`` more when the run starts (a file appears): at once, or
    with ``pacing`` (the connector's micro-batches, in messages: ``connector(pacing=)``) in
    as many micro-batches of the same sizes."""
    import ceilings

    register_ceilings(spark)
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    go = os.path.join(work, "go")
    reader = spark.readStream.format("bench_memory_arrow")
    if pacing:
        reader = reader.option("chunks", json.dumps(list(pacing)))
    query = (
        reader.option("messages", str(count))
        .option("rows", str(rows))
        .option("go", go)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(work, "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        wait_started(query)
        wait_for_rows(query, ceilings.WARM_UP * rows)
        started = time.time()
        open(go, "w").close()
        finished = wait_for_rows(query, (ceilings.WARM_UP + count) * rows)
        if pacing:
            replayed = micro_batches(query.recentProgress, ceilings.WARM_UP * rows, count * rows, rows)
            if replayed != list(pacing):  # the ceiling is only fair if Spark took the chunks as offered
                print(
                    f"note: the paced in-memory source ran micro-batches of {replayed} messages, "
                    f"the connector's were {list(pacing)}",
                    flush=True,
                )
    finally:
        query.stop()
    return count * rows / (finished - started)


def memory_rows(spark, count: int, size: int, cpu: dict | None = None, pacing: list | None = None) -> float:
    """Spark's ceiling for one row per message: ``ceilings.MemoryRowsSource`` yields the
    rows the connector's ``raw`` format yields (same read tasks, same batch sizes) from
    memory into the same ``noop`` sink, msgs/s. It offers ``WARM_UP_MESSAGES["raw"]``
    messages, as many as the connector's warm-up, then ``count`` more at once when the
    run starts (a file appears). ``cpu``: a dict to fill with ``total_us_per_msg``, the
    CPU every descendant of this process (Spark's JVM and Python workers) spent on the
    timed section, per message: what Spark's own part of one-row ingest costs. ``pacing``:
    the connector's micro-batches (``connector(pacing=)``), offered in as many micro-batches
    of the same sizes instead of at once."""
    register_ceilings(spark)
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    go = os.path.join(work, "go")
    warm = WARM_UP_MESSAGES["raw"]
    reader = spark.readStream.format("bench_memory_rows")
    if pacing:
        reader = reader.option("chunks", json.dumps(list(pacing)))
    query = (
        reader.option("messages", str(count))
        .option("size", str(size))
        .option("warm", str(warm))
        .option("go", go)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(work, "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        wait_started(query)
        wait_for_rows(query, warm)
        before = cpu_tree.snapshot() if cpu is not None else {}
        threads_before = cpu_tree.jvm_threads(before)
        started = time.time()
        open(go, "w").close()
        finished = wait_for_rows(query, warm + count)
        if pacing:
            replayed = micro_batches(query.recentProgress, warm, count, 1)
            if replayed != list(pacing):
                print(
                    f"note: the paced in-memory rows source ran micro-batches of {replayed} messages, "
                    f"the connector's were {list(pacing)}",
                    flush=True,
                )
        if cpu is not None:
            after = cpu_tree.snapshot(follow=before)
            spent = cpu_tree.used(before, after)
            cpu.update(
                {
                    "messages": count,
                    "total_us_per_msg": spent / count * 1e6,
                    "by_role_us_per_msg": {
                        role: used / count * 1e6 for role, used in cpu_tree.by_role(before, after).items()
                    },
                }
            )
            cpu["by_role_us_per_msg"].update(cpu_tree.jvm_threads_us(threads_before, after, count))
    finally:
        query.stop()
    return count / (finished - started)


def socket_source(spark, count: int, size: int) -> float:
    """Spark's built-in ``socket`` source fed the same payloads as text lines over TCP."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-")
    query = (
        spark.readStream.format("socket")
        .option("host", "127.0.0.1")
        .option("port", str(port))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(work, "ckpt"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    connection, _ = server.accept()
    line = b"x" * (size - 1) + b"\n"
    try:
        wait_started(query)
        connection.sendall(line * 2000)  # warm-up
        wait_for_rows(query, 2000)
        started = time.time()
        sender = threading.Thread(target=connection.sendall, args=(line * count,), daemon=True)
        sender.start()
        finished = wait_for_rows(query, 2000 + count)
        sender.join(60)
    finally:
        query.stop()
        connection.close()
        server.close()
    return count / (finished - started)
