"""What every benchmark scenario shares: ports, the Spark session, timing a streaming query."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    """A port below the ephemeral range, which no connection takes before the query binds it."""
    from spark_zmq.free_ports import free_tcp_port

    return free_tcp_port()


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports as ``free_port`` chooses them: chosen together, so two
    endpoints of one scenario never get the same port (each ``free_port`` is released
    before the next is chosen)."""
    from spark_zmq.free_ports import free_tcp_ports

    return free_tcp_ports(count)


#: conf/spark-defaults.conf's checkpoint file manager for local checkpoints
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
#: conf/spark-defaults.conf's setting for how Spark's JVM talks to its Python workers
PYTHON_UNIX_SOCKET = "spark.python.unix.domain.socket.enabled"


def spark_session(smoke: bool = False, unix_socket: bool = True):
    """local[2] like the tests, Python workers on this interpreter, zmq registered.
    ``smoke``: the JVM compiles with C1 only, which starts its code sooner at less CPU;
    C2's optimised code pays off only over the full run's sizes, which measure it.
    ``unix_socket``: Python workers on a Unix socket, as conf/spark-defaults.conf sets
    (``bench/worker_socket.py`` compares the two)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("spark-zmq-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        # wait_for_rows sums recentProgress: a warm JVM runs more than Spark's default 100 kept
        .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        # as the project's conf/spark-defaults.conf, which local users run with: local
        # checkpoints written without a process per file (docs/performance.md)
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        .config("spark.pyspark.python", sys.executable)
        # as conf/spark-defaults.conf: Spark's JVM and its Python workers on a Unix socket
        .config(PYTHON_UNIX_SOCKET, "true" if unix_socket else "false")
    )
    if smoke:
        builder = builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    import spark_zmq

    spark_zmq.register(spark)
    return spark


class Producer:
    """``bench/producer.py`` in its own process (see there), connected and waiting; ``go()``
    starts it sending and returns the wall-clock start time."""

    def __init__(self, endpoint: str, count: int, kind: str, arg: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "producer.py"), endpoint, str(count), kind, str(arg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def ready(self) -> None:
        """Until the producer is started, connected and has its payload (once)."""
        if getattr(self, "_ready", False):
            return
        ready = self.proc.stdout.readline()
        if ready.strip() != b"ready":
            raise RuntimeError(f"benchmark producer did not start (exit code {self.proc.poll()})")
        self._ready = True

    def go(self) -> float:
        # Python start-up and imports take a few hundred ms: the clock starts after them.
        self.ready()
        started = time.time()
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.close()
        return started

    def wait(self, timeout: float = 120) -> None:
        self.proc.wait(timeout)


class NodeProducer(Producer):
    """``bench/nodeproducer.js``: libzmq's own SCATTER or PUSH (zeromq.js) as the producer,
    with the interface of ``Producer``. ``kind``/``arg`` build the payload as there."""

    def __init__(self, endpoint: str, count: int, kind: str, arg: float, socket_type: str = "scatter") -> None:
        import tempfile

        import payloads

        message = payloads.raw(int(arg)) if kind == "raw" else payloads.arrow_message(int(arg))
        with tempfile.NamedTemporaryFile(prefix="spark-zmq-bench-", suffix=".bin", delete=False) as file:
            file.write(message)
        self.payload_file = file.name
        self.proc = subprocess.Popen(
            ["node", os.path.join(HERE, "nodeproducer.js"), endpoint, str(count), socket_type, file.name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "NODE_NO_WARNINGS": "1"},
        )  # "draft API is experimental"

    def wait(self, timeout: float = 120) -> None:
        try:
            super().wait(timeout)
        finally:
            os.unlink(self.payload_file)


class Relay:
    """``spark-zmq relay`` (``python -m spark_zmq.cli relay``) in a child process, receiving
    on ``endpoint`` and serving queries on ``listen``; started once it printed its ``ready``
    line (waited for with select, never a sleep). ``stop()``: SIGTERM (drain), then wait."""

    def __init__(self, endpoint: str, listen: str, spool_dir: str, pattern: str = "pull", format: str = "raw") -> None:
        import tempfile

        self.listen = listen
        self.stderr = tempfile.TemporaryFile()  # a pipe nobody reads could fill and stall the relay
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_zmq.cli",
                "relay",
                "--endpoints",
                endpoint,
                "--listen",
                listen,
                "--spool-dir",
                spool_dir,
                "--pattern",
                pattern,
                "--format",
                format,
            ],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, timeout: float = 60) -> dict:
        from spark_zmq.relay.run import read_ready

        try:
            ready = read_ready(self.proc, timeout)
        except TimeoutError:
            ready = None
        if ready is None:
            errors, code = self.errors(), self.proc.poll()
            self.stop(kill=True)
            raise RuntimeError(f"benchmark relay on {self.listen} did not start (exit code {code}): {errors[-2000:]}")
        return ready

    def errors(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def stop(self, timeout: float = 60, kill: bool = False) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()
        self.stderr.close()


def warm_up(query, endpoints: list[str], kind: str, arg: float, messages: int = 2000) -> int:
    """Send a few messages per endpoint and wait until Spark processed them, so Python
    workers are started and modules imported before the measured run. Returns the rows sent:
    none for ``messages=0`` (a smoke run), which starts no producer."""
    if messages == 0:
        return 0
    rows = 0
    for endpoint in endpoints:
        p = Producer(endpoint, messages, kind, arg)
        p.go()
        p.wait()
        rows += messages * (int(arg) if kind == "arrow" else 1)
    wait_for_rows(query, rows)
    return rows


def wait_for_rows(query, rows: int, timeout: float = 600) -> float:
    """Wait until the query has processed ``rows`` input rows; return the wall-clock time
    (``time.time()``) at which the micro-batch that got there finished, from its progress
    report, so the poll interval does not blur the measurement."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    while True:
        for progress in query.recentProgress:
            seen.setdefault(progress["batchId"], progress)
        total = 0
        for batch_id in sorted(seen):
            total += seen[batch_id]["numInputRows"]
            if total >= rows:
                return finished_at(seen[batch_id])
        if query.exception() is not None:
            raise RuntimeError(f"benchmark query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the query processed {total} of {rows} rows in {timeout} s\n{stall_report(query)}")
        time.sleep(0.1)


def stall_report(query) -> str:
    """What a stalled run leaves to go on: the sources' last reported offsets (the
    connector's include ``lag``, what was received but not planned yet) and, where py-spy
    is installed, the stacks of the processes that host the streaming readers."""
    lines = []
    last = query.lastProgress or {}
    for source in last.get("sources", []):
        lines.append(
            f"source {source.get('description', '?')}: latestOffset {source.get('latestOffset')}, "
            f"endOffset {source.get('endOffset')}"
        )
    if shutil.which("py-spy"):
        runners = subprocess.run(["pgrep", "-f", "python_streaming_source_runner"], capture_output=True, text=True)
        for pid in runners.stdout.split():
            dump = subprocess.run(["py-spy", "dump", "--pid", pid], capture_output=True, text=True, timeout=60)
            lines.append(f"py-spy dump of the streaming reader's process {pid}:\n{dump.stdout or dump.stderr}")
    else:
        lines.append("(install py-spy for the reader process's stacks here)")
    return "\n".join(lines)


def started_at(progress: dict) -> float:
    """When a micro-batch started (its progress ``timestamp``), epoch seconds."""
    return dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def finished_at(progress: dict) -> float:
    return started_at(progress) + progress["durationMs"].get("triggerExecution", 0) / 1000


def measured(fn: Callable[[dict], float], into: list[dict]) -> Callable[[], float]:
    """``fn`` given a fresh dict to fill with its CPU figures, appended to ``into``."""

    def run() -> float:
        cpu: dict = {}
        into.append(cpu)
        return fn(cpu)

    return run


def pull_to_noop(spark, prefix: str, trigger: str = "0 seconds") -> tuple[object, str]:
    """A started connector query with the source's defaults (``pull``, ``raw``) bound on a
    free port, into ``noop`` on a ``trigger`` processing-time trigger, its spool and
    checkpoint in a new directory, its receiver stopping with it; and the endpoint producers
    connect to."""
    work = tempfile.mkdtemp(prefix=prefix)
    port = free_port()
    query = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", f"@tcp://127.0.0.1:{port}")
        .option("spoolDir", os.path.join(work, "spool"))
        .option("receiverLingerSeconds", "0")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", os.path.join(work, "ckpt"))
        .trigger(processingTime=trigger)
        .start()
    )
    return query, f"tcp://127.0.0.1:{port}"


def wait_started(query, timeout: float = 120) -> None:
    """Until the first (empty) micro-batch ran, so receivers are up before producers start."""
    deadline = time.monotonic() + timeout
    while not query.recentProgress:
        if query.exception() is not None:
            raise RuntimeError(f"benchmark query failed: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark query did not start")
        time.sleep(0.05)


def register_ceilings(spark) -> None:
    """Register ``bench/ceilings.py``'s data sources; they travel to the workers by value,
    since bench/ is not on the workers' path."""
    import ceilings
    import payloads
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(ceilings)
    cloudpickle.register_pickle_by_value(payloads)
    for source in (
        ceilings.MemoryArrowSource,
        ceilings.MemoryRowsSource,
        ceilings.MemoryStampedSource,
        ceilings.DiscardArrowSink,
    ):
        spark.dataSource.register(source)
