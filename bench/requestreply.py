"""Request-reply benchmarks: ``spark_zmq.request`` against a bare pyzmq DEALER loop, the
load-balancing broker against plain round-robin, and one request's latency through the
broker against a direct REQ/REP round trip. Workers are plain pyzmq processes
(``service_worker.py``); the broker is ``spark-zmq broker`` in its own process.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import pyarrow as pa
import zmq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spark_zmq.requestreply import Client  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "service_worker.py")
CLI = os.path.join(os.path.dirname(sys.executable), "spark-zmq")
#: Spark tasks (local[2]) times the connector's maxInFlight: what the baseline keeps in flight
TASKS = 2
IN_FLIGHT = 4


def _free_ports(n: int) -> list[int]:
    """Ports below the ephemeral range, which no connection takes before a worker binds them."""
    from spark_zmq.free_ports import free_tcp_ports

    return free_tcp_ports(n)


@contextlib.contextmanager
def workers(fmt: str, count: int, *, broker: str | None = None, delays_ms: tuple = ()) -> Iterator[list[str]]:
    """``count`` echo workers: REP servers (their endpoints) or workers of ``broker``."""
    procs = []
    try:
        endpoints = []
        for i in range(count):
            delay = delays_ms[i] if i < len(delays_ms) else 0.0
            where = ["--broker", broker] if broker else ["--bind", "tcp://127.0.0.1:*"]
            proc = subprocess.Popen(
                [sys.executable, WORKER, "--format", fmt, "--delay-ms", str(delay), *where],
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            line = proc.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"benchmark worker did not start (exit code {proc.poll()})")
            endpoints.append(line.split()[1])
        yield endpoints
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def broker() -> Iterator[tuple[str, str]]:
    """``spark-zmq broker`` on two free ports: (frontend, backend) to connect to."""
    front, back = (f"tcp://127.0.0.1:{p}" for p in _free_ports(2))
    proc = subprocess.Popen(
        [CLI, "broker", "--frontend", "@" + front, "--backend", "@" + back, "--status-interval", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if not proc.stderr.readline().startswith("broker:"):
            raise RuntimeError(f"spark-zmq broker did not start: {proc.stderr.read()[-500:]}")
        yield front, back
    finally:
        proc.terminate()
        proc.wait(30)


def requests(fmt: str, rows: int, batch_rows: int) -> list[bytes]:
    """The request bodies the connector sends for ``rows`` rows of ``x long``."""
    if fmt == "json":
        return [b'{"x":%d}' % i for i in range(rows)]
    bodies = []
    for start in range(0, rows, batch_rows):
        batch = pa.record_batch({"x": pa.array(range(start, min(rows, start + batch_rows)), pa.int64())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        bodies.append(sink.getvalue().to_pybytes())
    return bodies


def connector(spark, fmt: str, rows: int, batch_rows: int, endpoints: list[str]) -> float:
    """Rows/s of ``request()`` over ``spark.range(rows)`` into a discarding sink."""
    import spark_zmq

    df = spark.range(0, rows, numPartitions=TASKS).selectExpr("id as x")
    out = spark_zmq.request(
        df, endpoints, reply_schema="y long", format=fmt, batch_rows=batch_rows, max_in_flight=IN_FLIGHT, timeout="60s"
    )
    started = time.perf_counter()
    out.write.format("noop").mode("overwrite").save()
    return rows / (time.perf_counter() - started)


def spark_ceiling(spark, fmt: str, rows: int) -> float:
    """Rows/s of the same plan with the call taken out: ``spark.range`` through a
    ``mapInArrow`` that appends the reply column itself (for ``json``, also Spark's
    ``to_json`` before and ``from_json`` after), into the same discarding sink. What Spark
    costs the connector's data path, without ZeroMQ or a service."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, numPartitions=TASKS).selectExpr("id as x")

    def echo(batches):
        for batch in batches:
            yield batch.append_column("y", batch.column(batch.schema.get_field_index(source)))

    if fmt == "json":
        df = df.withColumn("r", F.to_json(F.struct("x")))
        source, schema = "r", "x long, r string, y string"
    else:
        source, schema = "x", "x long, y long"
    out = df.mapInArrow(echo, schema)
    if fmt == "json":
        out = out.select("x", F.from_json("y", "y long").alias("p")).select("x", "p.y")
    started = time.perf_counter()
    out.write.format("noop").mode("overwrite").save()
    return rows / (time.perf_counter() - started)


def bare_dealer(fmt: str, rows: int, batch_rows: int, endpoints: list[str]) -> float:
    """Rows/s of one Python process sending the same requests over a pyzmq DEALER, with
    the connector's total number of requests in flight, replies matched by id."""
    bodies = requests(fmt, rows, batch_rows)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    for endpoint in endpoints:
        sock.connect(endpoint)
    window = TASKS * IN_FLIGHT
    started = time.perf_counter()
    sent = answered = 0
    while answered < len(bodies):
        while sent < len(bodies) and sent - answered < window:
            sock.send_multipart([sent.to_bytes(8, "big"), b"", bodies[sent]])
            sent += 1
        sock.recv_multipart()
        answered += 1
    elapsed = time.perf_counter() - started
    sock.close()
    return rows / elapsed


def drain(endpoints: list[str], count: int, in_flight: int = 16) -> float:
    """Seconds a ``Client`` takes to get ``count`` JSON requests answered."""
    bodies = requests("json", count, 1)
    with Client(endpoints, timeout=60) as client:
        started = time.perf_counter()
        for _ in client.map(bodies, max_in_flight=in_flight):
            pass
        return time.perf_counter() - started


def round_trips(endpoint: str, count: int) -> list[float]:
    """Milliseconds of ``count`` sequential REQ round trips to ``endpoint``."""
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    body = b'{"x":1}'
    for _ in range(200):  # warm up: connections, caches
        sock.send(body)
        sock.recv()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        sock.send(body)
        sock.recv()
        times.append((time.perf_counter() - started) * 1000)
    sock.close()
    return times


def percentiles(times: list[float]) -> dict:
    ordered = sorted(times)
    return {"p50_ms": round(statistics.median(ordered), 3), "p99_ms": round(ordered[int(len(ordered) * 0.99)], 3)}


def load_balancing(count: int, reps: int) -> dict:
    """Four workers, one 10x slower: the broker's time over plain round-robin's (a DEALER
    connected to the four REP workers directly), same client, same requests."""
    delays = (1.0, 1.0, 1.0, 10.0)
    runs: dict[str, list[float]] = {"broker": [], "round-robin": []}
    for _ in range(reps):
        with broker() as (front, back), workers("json", 4, broker=back, delays_ms=delays):
            runs["broker"].append(drain([front], count))
        with workers("json", 4, delays_ms=delays) as endpoints:
            runs["round-robin"].append(drain(endpoints, count))
    medians = {k: statistics.median(v) for k, v in runs.items()}
    return {
        "scenario": "reqrep-broker-lru",
        "unit": "s",
        "runs": runs,
        "median": medians,
        "time_ratio": medians["broker"] / medians["round-robin"],
        "target": 0.6,
    }


def latency(count: int) -> dict:
    """One request at a time: through the broker, and directly to a REP worker."""
    with broker() as (front, back), workers("json", 1, broker=back):
        through = round_trips(front, count)
    with workers("json", 1) as (endpoint,):
        direct = round_trips(endpoint, count)
    return {
        "scenario": "reqrep-latency",
        "broker": percentiles(through),
        "direct": percentiles(direct),
        "p50_ratio": round(statistics.median(through) / statistics.median(direct), 2),
    }
