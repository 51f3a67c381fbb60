"""The Spark driver of the ``bed`` benchmark (``bench/bed.py``), run on the bed's ``driver``
host in client mode against its standalone cluster: ``python bench/bed_driver.py SPEC``.

For each case of the spec it starts a ``zmq`` query (one bound endpoint, ``raw``, a
discarding ``noop`` sink), reports ``ready`` with its port in ``status`` (JSON lines), and
counts rows until the case's ``expected`` arrived; then it reports ``done`` with the rows,
the seconds from the first to the last batch with rows, and the summed ``addBatch`` time of
those batches (the read tasks: fetch or local read, decode, discard).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time


def _status(path: str, **event: object) -> None:
    event["t"] = time.time()
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def run_case(spark, case: dict, status: str) -> None:
    query = (
        spark.readStream.format("zmq")
        .options(**case["options"])
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", case["checkpoint"])
        .trigger(processingTime="0 seconds")
        .start()
    )
    _status(status, event="ready", case=case["name"])
    seen: dict = {}
    deadline = time.monotonic() + float(case.get("deadline", 600))
    while sum(r for r, _, _ in seen.values()) < case["expected"]:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{case['name']}: {sum(r for r, _, _ in seen.values())} of {case['expected']} rows")
        for p in query.recentProgress:
            if p["batchId"] not in seen and p["numInputRows"]:
                began = datetime.datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
                ended = began + p["durationMs"].get("triggerExecution", 0) / 1000
                seen[p["batchId"]] = (p["numInputRows"], p["durationMs"].get("addBatch", 0) / 1000, ended)
        time.sleep(0.2)  # polling the query's progress, under the deadline above
    query.stop()
    rows = sum(r for r, _, _ in seen.values())
    _status(
        status,
        event="done",
        case=case["name"],
        rows=rows,
        batches=len(seen),
        add_batch_s=round(sum(a for _, a, _ in seen.values()), 3),
        last_batch_end=max(e for _, _, e in seen.values()),
    )


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(spec["master"])
        .appName("spark-zmq-bench-bed")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executor.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import spark_zmq

    spark_zmq.register(spark)
    try:
        for case in spec["cases"]:
            run_case(spark, case, spec["status"])
    except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator
        _status(spec["status"], event="failed", error=f"{type(exc).__name__}: {exc}"[:3000])
        return 1
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
