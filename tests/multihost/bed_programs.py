"""The multi-host tests' programs for the bed's hosts (``python bed_programs.py <role>
<spec.json>``): plain-pyzmq producers and consumers, a request-reply worker, and the Spark
driver (client mode). Each reports through files the test polls: ``status`` (JSON lines,
one per event) and, for the consumer, the messages it received (one line each).

- ``produce``: PUSH (``pattern`` ``push``, the default), PUB or XPUB connects (or binds,
  ``@``) to ``endpoint`` and sends ``count`` text messages ``"<start + i>"`` at ``rate``
  per second (0: as fast as it can), then closes with ``linger`` seconds for what is
  queued, and reports ``done``. ``xpub`` first waits (up to ``subscriber_timeout``
  seconds) for a subscription, so nothing is sent before a subscriber can take it.
  ``curve_certificate`` (its secret certificate file) with ``curve_server_key`` (the
  server's public certificate file): a CURVE client.
- ``consume``: PULL (or SUB) binds (or connects) ``endpoint`` and appends every message to
  ``messages`` until SIGTERM; ``curve_certificate``: a CURVE server, accepting the client
  keys in ``curve_authorized`` (a directory of public certificates), or any without it.
- ``worker``: ``spark_zmq.worker.serve`` connected to a broker's backend ``endpoint``:
  answers each Arrow request of ``id`` rows with ``doubled`` (id x 2) and ``worker``
  (its ``label``), until SIGTERM.
- ``stream``: a SparkSession on ``master`` (a standalone cluster, client mode), a
  ``readStream.format("zmq")`` query with ``options`` written by Spark's JSON file sink to
  ``output`` (checkpoint ``checkpoint``), until ``expected`` input rows have been counted
  or ``deadline`` seconds passed; ``result`` gets the figures (with the batches' times and
  rows, and ``brokenConnections`` from the progress's source ``latestOffset``, also
  reported as a ``broken`` event when it grows).
- ``write``: the same session, ``count`` rows written with ``df.write.format("zmq")`` and
  ``options``; ``pace_ms``: each row takes that long in its task (a write that lasts).
- ``request``: the same session, ``spark_zmq.request`` on ``count`` rows (``id``) to
  ``endpoint`` (a broker's frontend) with ``options``; ``result`` gets the rows answered,
  the wrong answers and the answers per worker.
- ``keygen``: on the driver's host, ``spark_zmq.patterns.curve_keys.keygen`` writes the
  key pair ``key_name`` in ``directory`` (the secret stays there) and copies the public
  certificate into ``public_dir``.
- ``stage1``, ``stage2``: the two stages of a pipeline (docs/pipelines.md), each a Spark
  application of its own on its host: a zmq source of text numbers written with the zmq
  sink (push, arrow), and a ``committedOnly`` zmq source written to JSON files; both run
  until their ``stop_file`` exists.
- ``serve``: one session for many ``stream``, ``write``, ``request`` and ``keygen`` specs,
  named one per line on stdin.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


def _status(path: str, **event: object) -> None:
    event["t"] = time.time()
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")
        f.flush()


def produce(spec: dict) -> int:
    import zmq

    ctx = zmq.Context()
    pattern = spec.get("pattern", "push")
    sock = ctx.socket({"pub": zmq.PUB, "xpub": zmq.XPUB, "push": zmq.PUSH}[pattern])
    sock.setsockopt(zmq.SNDHWM, int(spec.get("hwm", 1000)))
    _curve_client(sock, spec)
    sock.setsockopt(zmq.SNDTIMEO, int(spec.get("send_timeout_s", 300) * 1000))
    sock.setsockopt(zmq.LINGER, int(spec.get("linger", 120) * 1000))
    endpoint = spec["endpoint"]
    if endpoint.startswith("@"):
        sock.bind(endpoint[1:])
    else:
        sock.connect(endpoint.lstrip(">"))
    status = spec["status"]
    count, start, rate = int(spec["count"]), int(spec.get("start", 0)), float(spec.get("rate", 0))
    every = int(spec.get("report_every", 1000))
    _status(status, event="started")
    if pattern == "xpub":  # PUB drops what no subscriber has asked for yet: wait for one
        if not sock.poll(int(spec.get("subscriber_timeout", 120) * 1000)):
            _status(status, event="no_subscriber")
            return 4
        _status(status, event="subscribed", subscription=sock.recv().hex())
    began = time.monotonic()
    worst_block = 0.0
    for i in range(count):
        if rate > 0:  # pacing, not synchronisation: message i is due at i / rate
            due = began + i / rate
            ahead = due - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        t0 = time.monotonic()
        try:
            sock.send_string(str(start + i))
        except zmq.Again:
            _status(status, event="send_timeout", sent=i)
            return 3
        worst_block = max(worst_block, time.monotonic() - t0)
        if (i + 1) % every == 0:
            _status(status, event="sent", sent=i + 1, worst_block_s=round(worst_block, 3))
    _status(
        status,
        event="sent_all",
        sent=count,
        seconds=round(time.monotonic() - began, 3),
        worst_block_s=round(worst_block, 3),
    )
    if spec.get("hold"):
        # keep the connection (and what the kernel still has to deliver) until told to stop:
        # a producer that exits while its peer is unreachable is another scenario
        stop: list = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            signal.sigtimedwait([signal.SIGTERM], 0.5)
    sock.close()  # waits up to LINGER for what is queued
    ctx.term()
    _status(status, event="done", sent=count, seconds=round(time.monotonic() - began, 3))
    return 0


def _curve_client(sock, spec: dict) -> None:
    """A CURVE client with the certificate files ``curve_certificate`` (its secret one) and
    ``curve_server_key`` (the server's public one)."""
    import zmq.auth

    if spec.get("curve_certificate"):
        public, secret = zmq.auth.load_certificate(spec["curve_certificate"])
        server, _ = zmq.auth.load_certificate(spec["curve_server_key"])
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = public, secret, server


def consume(spec: dict) -> int:
    import zmq

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ctx = zmq.Context()
    sub = spec.get("pattern") == "sub"
    sock = ctx.socket(zmq.SUB if sub else zmq.PULL)
    if sub:
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.setsockopt(zmq.RCVHWM, 10000)
    auth = None
    if spec.get("curve_certificate"):  # a CURVE server
        import zmq.auth
        from zmq.auth.thread import ThreadAuthenticator

        if spec.get("curve_authorized"):  # only these client keys (else, with no ZAP handler, any)
            auth = ThreadAuthenticator(ctx)
            auth.start()
            auth.configure_curve(domain="*", location=spec["curve_authorized"])
        public, secret = zmq.auth.load_certificate(spec["curve_certificate"])
        sock.curve_server, sock.curve_publickey, sock.curve_secretkey = True, public, secret
    endpoint = spec["endpoint"]
    if endpoint.startswith(">"):
        sock.connect(endpoint[1:])
    else:
        sock.bind(endpoint.lstrip("@"))
    _status(spec["status"], event="started")
    received = 0
    with open(spec["messages"], "ab") as out:
        while not stop:
            if not sock.poll(100):
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                out.write(frames[-1].replace(b"\n", b"\\n") + b"\n")
                received += 1
            out.flush()
    sock.close(0)
    if auth is not None:
        auth.stop()
    ctx.term()
    _status(spec["status"], event="done", received=received)
    return 0


def worker(spec: dict) -> int:
    import threading

    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_zmq.worker import serve as serve_requests

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    name = spec["label"]

    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch(
            {"doubled": pc.multiply(batch.column("id"), 2), "worker": pa.array([name] * batch.num_rows)}
        )

    stats = serve_requests(
        double,
        spec["endpoint"],
        format="arrow",
        stop=stop,
        on_ready=lambda addresses: _status(spec["status"], event="started"),
    )
    _status(spec["status"], event="done", requests=getattr(stats, "requests", None))
    return 0


def _session(spec: dict):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(spec["master"])
        .appName(spec.get("app", "spark-zmq-netbed"))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    for key, value in spec.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    import spark_zmq

    spark_zmq.register(spark)
    return spark


def _wait_executors(spark, want: int, timeout: float) -> int:
    """Executors registered with the driver (the driver itself excluded)."""
    deadline = time.monotonic() + timeout
    while True:
        n = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        if n >= want or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def _broken_connections(progress: dict) -> int:
    """``brokenConnections`` in the source's ``latestOffset`` of one progress (0 without)."""
    count = 0
    for source in progress.get("sources", []):
        latest = source.get("latestOffset")
        if isinstance(latest, str):
            try:
                latest = json.loads(latest)
            except ValueError:
                latest = None
        if isinstance(latest, dict):
            count = max(count, int(latest.get("brokenConnections", 0)))
    return count


def stream(spec: dict, session=None) -> int:
    status, result = spec["status"], {"ok": False}
    began = time.monotonic()
    spark = None
    try:
        spark = session or _session(spec)
        result["driver_host"] = spark.conf.get("spark.driver.host", None)
        result["executors"] = _wait_executors(spark, int(spec.get("executors", 2)), 60)
        result["session_s"] = round(time.monotonic() - began, 2)
        reader = spark.readStream.format("zmq").options(**spec["options"])
        df = reader.load()
        query = (
            df.selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .writeStream.format("json")
            .option("path", spec["output"])
            .option("checkpointLocation", spec["checkpoint"])
            .trigger(processingTime=spec.get("trigger", "1 second"))
            .start()
        )
        _status(status, event="started", driver_host=result["driver_host"], executors=result["executors"])
        expected, deadline = int(spec["expected"]), time.monotonic() + float(spec["deadline"])
        seen: dict = {}  # batch id -> its rows (batches with rows only)
        looked: set = set()  # (batch id, timestamp) of every progress read
        first_rows_at = None
        error = None
        broken, timeline = 0, []
        while time.monotonic() < deadline:
            for p in query.recentProgress:
                # an idle trigger's progress (every 10 s with no data) carries the id of the
                # batch that runs next: key progress by its timestamp too, batches by rows
                if (p["batchId"], p["timestamp"]) not in looked:
                    looked.add((p["batchId"], p["timestamp"]))
                    if p["numInputRows"] and p["batchId"] not in seen:
                        seen[p["batchId"]] = p["numInputRows"]
                        if first_rows_at is None:
                            first_rows_at = time.monotonic() - began
                        timeline.append([round(time.time(), 2), p["numInputRows"]])
                    count = _broken_connections(p)
                    if count > broken:
                        broken = count
                        _status(status, event="broken", broken=count, batch=p["batchId"])
            rows = sum(seen.values())
            if rows >= expected:
                break
            if query.exception() is not None:
                error = str(query.exception())
                break
            if spec.get("stop_file") and os.path.exists(spec["stop_file"]):
                result["stopped"] = True
                break
            time.sleep(0.25)  # polling the query's progress with the deadline above
        rows = sum(seen.values())
        result.update(
            rows=rows,
            batches=len(seen),
            first_rows_s=first_rows_at and round(first_rows_at, 2),
            seconds=round(time.monotonic() - began, 2),
            error=error,
            broken_connections=broken,
            timeline=timeline,
        )
        if error is None and query.exception() is not None:
            result["error"] = str(query.exception())
        query.stop()
        result["ok"] = result["error"] is None and rows >= expected
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        result["seconds"] = round(time.monotonic() - began, 2)
        with open(spec["result"], "w") as f:
            json.dump(result, f)
        _status(status, event="done", ok=result["ok"])
        if spark is not None and session is None:
            spark.stop()
    return 0 if result["ok"] else 1


def write(spec: dict, session=None) -> int:
    status, result = spec["status"], {"ok": False}
    began = time.monotonic()
    spark = None
    try:
        spark = session or _session(spec)
        result["driver_host"] = spark.conf.get("spark.driver.host", None)
        result["executors"] = _wait_executors(spark, int(spec.get("executors", 2)), 60)
        _status(status, event="started", driver_host=result["driver_host"], executors=result["executors"])
        value = "CAST(id AS STRING)"
        if spec.get("pace_ms"):  # each row takes pace_ms in its task (reflect gives "null" for void: cut)
            value = (
                f"concat({value}, coalesce(substr(reflect('java.lang.Thread', 'sleep', "
                f"CAST({int(spec['pace_ms'])} AS BIGINT)), 1, 0), ''))"
            )
        df = spark.range(0, int(spec["count"]), numPartitions=int(spec.get("partitions", 4))).selectExpr(
            f"{value} AS value"
        )
        t0 = time.monotonic()
        df.write.format("zmq").options(**spec["options"]).mode("append").save()
        result.update(ok=True, write_s=round(time.monotonic() - t0, 2))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        result["seconds"] = round(time.monotonic() - began, 2)
        with open(spec["result"], "w") as f:
            json.dump(result, f)
        _status(status, event="done", ok=result["ok"])
        if spark is not None and session is None:
            spark.stop()
    return 0 if result["ok"] else 1


def request(spec: dict, session=None) -> int:
    status, result = spec["status"], {"ok": False}
    began = time.monotonic()
    try:
        import spark_zmq

        spark = session or _session(spec)
        result["executors"] = _wait_executors(spark, int(spec.get("executors", 2)), 60)
        _status(status, event="started", executors=result["executors"])
        count = int(spec["count"])
        df = spark.range(0, count, numPartitions=int(spec.get("partitions", 4)))
        rows = spark_zmq.request(
            df, spec["endpoint"], reply_schema="doubled long, worker string", **spec.get("options", {})
        ).collect()
        ids = [r["id"] for r in rows]
        workers: dict = {}
        for r in rows:
            workers[r["worker"]] = workers.get(r["worker"], 0) + 1
        result.update(
            rows=len(rows),
            distinct=len(set(ids)),
            missing=count - len(set(ids) & set(range(count))),
            wrong=sum(1 for r in rows if r["doubled"] != 2 * r["id"]),
            workers=workers,
        )
        result["ok"] = (
            result["rows"] == count and result["distinct"] == count and not result["missing"] and not result["wrong"]
        )
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()[-4000:]
    finally:
        result["seconds"] = round(time.monotonic() - began, 2)
        with open(spec["result"], "w") as f:
            json.dump(result, f)
        _status(status, event="done", ok=result["ok"])
    return 0 if result["ok"] else 1


def keygen(spec: dict, session=None) -> int:
    import shutil

    from spark_zmq.patterns.curve_keys import keygen as write_key_pair

    result = {"ok": False}
    try:
        public, secret = write_key_pair(spec["directory"], spec["key_name"])
        os.makedirs(spec["public_dir"], exist_ok=True)
        result.update(ok=True, secret=secret, public=shutil.copy(public, spec["public_dir"]))
    except BaseException as exc:  # noqa: BLE001 - reported to the test
        result["error"] = f"{type(exc).__name__}: {exc}"
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    _status(spec["status"], event="done", ok=result["ok"])
    return 0 if result["ok"] else 1


def _source_figures(progress: dict) -> dict:
    """From one progress of a zmq source: ``latest`` (messages spooled, all channels),
    ``end`` (the batch's end offsets), ``lag`` (records received and in no planned batch),
    and the ``committedOnly`` counters (released batches and messages) when there are any."""

    def decoded(value):
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return {}
        return value or {}

    source = progress.get("sources", [{}])[0]
    latest, end = decoded(source.get("latestOffset")), decoded(source.get("endOffset"))
    return {
        "latest": sum(v for k, v in latest.items() if k.isdigit()),
        "end": sum(v for k, v in end.items() if k.isdigit()),
        "lag": (latest.get("lag") or {}).get("records", 0),
        "broken": int(latest.get("brokenConnections", 0)),
        "committed_only": latest.get("committedOnly", {}),
    }


def _follow(query, spec: dict, report) -> dict:
    """Until the stop file exists or the query fails: every new progress to ``report``."""
    looked: set = set()
    error = None
    while not os.path.exists(spec["stop_file"]):
        for p in query.recentProgress:
            if (p["batchId"], p["timestamp"]) not in looked:
                looked.add((p["batchId"], p["timestamp"]))
                report(p)
        if query.exception() is not None:
            error = str(query.exception())
            break
        time.sleep(0.1)  # polling the query's progress until told to stop
    return {"error": error}


def _run_stage(spark, query, spec: dict, report) -> int:
    """What both stages do once their query started: report ``started``, follow it
    (``_follow``) until told to stop, then stop it, write its result and report ``done``."""
    _status(spec["status"], event="started")
    result = _follow(query, spec, report)
    query.stop()
    with open(spec["result"], "w") as f:
        json.dump(result, f)
    _status(spec["status"], event="done", ok=result["error"] is None)
    spark.stop()
    return 0


def stage1(spec: dict) -> int:
    """Stage 1 of a two-stage pipeline (docs/pipelines.md): its own Spark application
    (``master``, default ``local[2,4]``: two cores, a failed task run again as on a
    cluster), a zmq source (``source`` options) of text numbers in 2 partitions, ``id`` =
    the number (each row taking ``pace_ms`` in the writing task: a write that lasts), written
    with ``writeStream.format("zmq")`` push arrow to ``endpoints`` (checkpoint
    ``checkpoint``). Reports ``started`` and a ``batch`` event per progress with rows."""
    status = spec["status"]
    spark = _session(dict(spec, master=spec.get("master", "local[2,4]")))
    value = "CAST(value AS STRING)"
    if spec.get("pace_ms"):
        value = (
            f"concat({value}, coalesce(substr(reflect('java.lang.Thread', 'sleep', "
            f"CAST({int(spec['pace_ms'])} AS BIGINT)), 1, 0), ''))"
        )
    query = (
        spark.readStream.format("zmq")
        .options(**spec["source"])
        .load()
        .repartition(2)
        .selectExpr(f"CAST({value} AS BIGINT) AS id")
        .writeStream.format("zmq")
        .option("pattern", "push")
        .option("format", "arrow")
        .option("endpoints", spec["endpoints"])
        .option("rowsPerMessage", str(spec.get("rows_per_message", 100)))
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(processingTime="1 second")
        .start()
    )

    def report(p: dict) -> None:
        if p["numInputRows"]:
            _status(status, event="batch", batch=p["batchId"], rows=p["numInputRows"])

    return _run_stage(spark, query, spec, report)


def stage2(spec: dict) -> int:
    """Stage 2: its own Spark application, a zmq source binding ``endpoint`` (pull, arrow,
    ``committedOnly=true``, schema ``id long``, ``spoolDir``) written by Spark's JSON file
    sink to ``output`` (``value``: the id as text). Reports a ``progress`` event for
    every progress (``_source_figures``)."""
    status = spec["status"]
    spark = _session(dict(spec, master=spec.get("master", "local[2,4]")))
    query = (
        spark.readStream.format("zmq")
        .option("pattern", "pull")
        .option("endpoints", spec["endpoint"])
        .option("format", "arrow")
        .option("committedOnly", "true")
        .option("spoolDir", spec["spool_dir"])
        .schema("id long")
        .load()
        .selectExpr("CAST(id AS STRING) AS value")
        .writeStream.format("json")
        .option("path", spec["output"])
        .option("checkpointLocation", spec["checkpoint"])
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    return _run_stage(
        spark,
        query,
        spec,
        lambda p: _status(status, event="progress", batch=p["batchId"], rows=p["numInputRows"], **_source_figures(p)),
    )


def serve(spec: dict) -> int:
    """One driver application for many scenarios (Spark's start is most of a scenario's
    time): the session is made once, then every line on stdin names a spec file whose
    ``role`` (``stream``, ``write``, ``request`` or ``keygen``) is run with it; EOF stops
    the session."""
    began = time.monotonic()
    spark = _session(spec)
    executors = _wait_executors(spark, int(spec.get("executors", 2)), 120)
    _status(
        spec["status"],
        event="serving",
        driver_host=spark.conf.get("spark.driver.host", None),
        executors=executors,
        session_s=round(time.monotonic() - began, 2),
    )
    roles = {"stream": stream, "write": write, "request": request, "keygen": keygen}
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            with open(line.strip()) as f:
                command = json.load(f)
            roles[command["role"]](command, spark)
            for query in spark.streams.active:  # whatever happened, the next scenario starts clean
                query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    role, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    sys.exit(
        {
            "produce": produce,
            "consume": consume,
            "worker": worker,
            "stream": stream,
            "write": write,
            "request": request,
            "serve": serve,
            "stage1": stage1,
            "stage2": stage2,
        }[role](spec)
    )
