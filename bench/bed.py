"""Across hosts, on the multi-host bed of the tests (``tests/helpers/netbed.py``: network
namespaces on a bridge, a Spark standalone master and two one-core workers, the driver in
client mode on a host of its own). Needs root, ``ip`` and ``nft``; elsewhere it is skipped,
saying why.

- ``bed-fetch``: how fast read tasks on other hosts fetch their ranges from the driver's
  spool (private to the driver's host, ``spoolAccess`` left at its default) beside the same
  read from spool files every host sees (``spoolAccess=local``): rows/s and MB/s of the
  batches' ``addBatch`` time, the same 1 KB messages from producers on two other hosts.
- ``bed-ingest``: one-row ingest with producers on two other hosts, beside one producer on
  the driver's own host: rows/s from the producers' start to the end of the last batch.

Each case runs ``reps`` times, interleaved, in one driver application (``bed_driver.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "helpers"))

import netbed  # noqa: E402

HOSTS = ["master", "w1", "w2", "driver", "producer", "producer2"]
SIZE = 1024
PORT = 5555


def _events(status: str) -> list:
    try:
        with open(status) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _wait(status: str, proc: subprocess.Popen, event: str, case: str, timeout: float) -> dict:
    def found():
        for e in _events(status):
            if e["event"] == "failed":
                raise RuntimeError(f"the bed's driver failed: {e['error']}")
            if e["event"] == event and e.get("case") == case:
                return e
        if proc.poll() is not None:
            raise RuntimeError(f"the bed's driver exited {proc.returncode} before {event} of {case}")
        return None

    return netbed.poll(found, timeout, 0.1, f"{event} of {case}")


def measure(count: int, reps: int, compare: Callable[..., dict]) -> list[dict]:
    """The two scenarios' rows (``compare``'s format), or [] with a line saying why not."""
    reason = netbed.unavailable_reason()
    if reason is not None:
        print(f"{'bed-fetch':18s} skipped: {reason}", flush=True)
        return []
    work = tempfile.mkdtemp(prefix="spark-zmq-bench-bed-")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
    env.pop("SPARK_LOCAL_IP", None)
    cli = [sys.executable, "-m", "spark_zmq.cli", "produce"]
    with netbed.NetBed(HOSTS) as bed:
        cluster = netbed.SparkCluster(bed, os.path.join(work, "spark"), env=env, worker_memory="1g")
        try:
            private = os.path.join(work, "driver-private")
            shared = os.path.join(work, "shared")
            os.makedirs(shared)
            kinds = {  # name: (spool, extra options, producers as (host, address of the driver))
                "fetch": (private, {}, [("producer", bed.addr("driver")), ("producer2", bed.addr("driver"))]),
                "local": (
                    shared,
                    {"spoolAccess": "local"},
                    [("producer", bed.addr("driver")), ("producer2", bed.addr("driver"))],
                ),
                "same-host": (private, {}, [("driver", "127.0.0.1")]),
            }
            cases = []
            for rep in range(reps):
                for kind, (spool, extra, _) in kinds.items():
                    name = f"{kind}-{rep}"
                    cases.append(
                        {
                            "name": name,
                            "kind": kind,
                            "expected": count,
                            "port": PORT + len(cases),
                            "checkpoint": os.path.join(work, "ckpt", name),
                            "options": {
                                "endpoints": f"@tcp://*:{PORT + len(cases)}",
                                "format": "raw",
                                "spoolDir": os.path.join(spool, name),
                                "receiverLingerSeconds": "0",
                                **extra,
                            },
                        }
                    )
            status = os.path.join(work, "driver.status")
            spec = os.path.join(work, "driver.json")
            with open(spec, "w") as f:
                json.dump({"master": cluster.url, "status": status, "cases": cases}, f)
            with open(os.path.join(work, "driver.log"), "wb") as log:
                driver = bed.run(
                    "driver",
                    [sys.executable, os.path.join(HERE, "bed_driver.py"), spec],
                    env,
                    private_dirs=[private],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            figures: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
            for case in cases:
                _wait(status, driver, "ready", case["name"], 300)
                hosts = kinds[case["kind"]][2]
                started = time.time()
                producers = [
                    bed.run(
                        host,
                        cli
                        + [
                            f"tcp://{address}:{case['port']}",
                            "--format",
                            "raw",
                            "--size",
                            str(SIZE),
                            "--count",
                            str(count // len(hosts)),
                        ],
                        env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for host, address in hosts
                ]
                done = _wait(status, driver, "done", case["name"], 600)
                for proc in producers:
                    proc.wait(60)
                figures[case["kind"]].append(
                    (done["rows"] / done["add_batch_s"], done["rows"] / (done["last_batch_end"] - started))
                )
            driver.wait(120)
        finally:
            cluster.stop()
    mb = SIZE / 1e6
    fetch = {
        "connector": iter(r for r, _ in figures["fetch"]).__next__,
        "local read (spoolAccess=local)": iter(r for r, _ in figures["local"]).__next__,
    }
    fetch_row = compare("bed-fetch", "rows/s", fetch, reps, "local read (spoolAccess=local)", None)
    fetch_row["mb_s"] = {k: v * mb for k, v in fetch_row["median"].items()}
    ingest = {
        "connector": iter(i for _, i in figures["fetch"]).__next__,
        "one producer on the driver's host": iter(i for _, i in figures["same-host"]).__next__,
    }
    ingest_row = compare("bed-ingest", "rows/s", ingest, reps, "one producer on the driver's host", None)
    return [fetch_row, ingest_row]
