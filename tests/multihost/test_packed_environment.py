"""docs/deployment.md's packed environment: executors whose Python has no connector (and no
pip) run the source from a virtual environment shipped with ``--archives``.

The environment is built as the page builds it (``python -m venv``, the connector's wheel
installed into it, ``venv-pack``), except that pyspark is left out of it: the executors use
the pyspark Spark puts on their path, and this proves it. The spark-submit line of the
page's ```bash title="cluster"``` block that names venv-pack then runs on the bed's standalone cluster (its
names swapped for the bed's, ``--available-now`` added so the run ends), fed by
``spark-zmq produce`` on another host. The workers are started without PYTHONPATH and
their own Python (this interpreter) is not what the executors run: before the query, a
probe on every executor reports the Python it runs in and every entry of its ``sys.path``
where ``spark_zmq`` can be found, and that must be the archive unpacked in the executor's
work directory, and nothing else.

It builds a virtual environment with pyarrow and pandas, packs it (~130 MB), ships it to two
executors and starts a bed and a cluster of its own: 70 to 90 s, so it carries the
``packedenv`` marker, which the default run leaves out (``-m packedenv`` runs it).
"""

from __future__ import annotations

import glob
import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import netbed
import pyarrow.parquet as pq
import pytest
from bedkit import _env

pytestmark = [pytest.mark.multihost, pytest.mark.spark, pytest.mark.packedenv]

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "deployment.md"
READINGS = 5_000

#: the page's job, run after a probe of every executor's Python (the job is the page's,
#: its session made by the job's own helper, so the settings it applies are in force)
PROBE_JOB = """
import json, os, sys, time
sys.path.insert(0, {jobs!r})
import jobkit, zmq_to_parquet


def probe(_):
    import importlib.machinery, json, os, sys
    import pyspark, spark_zmq
    found = [p for p in sys.path if p and importlib.machinery.PathFinder.find_spec("spark_zmq", [p]) is not None]
    yield json.dumps(dict(cwd=os.getcwd(), executable=sys.executable, prefix=sys.prefix,
                          spark_zmq=spark_zmq.__file__, found_in=found, pyspark=pyspark.__file__))


spark = jobkit.session("spark-zmq-to-parquet")
sc = spark.sparkContext
deadline = time.monotonic() + 120
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:  # the driver and both executors
    assert time.monotonic() < deadline, "two executors did not register within 120 s"
    time.sleep(0.2)
with open({probe!r}, "w") as f:
    f.write("\\n".join(sc.parallelize(range(8), 8).mapPartitions(probe).collect()))
sys.exit(zmq_to_parquet.main(sys.argv[1:]))
"""


def packed_env_block() -> list:
    """The page's ``cluster`` block that packs an environment (the one naming venv-pack) as
    commands, backslash continuations joined."""
    text = PAGE.read_text(encoding="utf-8")
    found = [b for b in re.findall(r'^```bash title="cluster"\n(.*?)^```', text, re.S | re.M) if "venv-pack" in b]
    assert len(found) == 1, f'{PAGE}: {len(found)} ```bash title="cluster" blocks naming venv-pack, not one'
    lines = found[0].replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def _requirements() -> list:
    """The connector's own dependencies but pyspark (the executors use Spark's)."""
    return [
        r
        for r in importlib.metadata.requires("spark-zmq") or []
        if "extra ==" not in r and not re.match(r"pyspark\b", r)
    ]


def _package_copy(work: str) -> str:
    """The checkout's package files (tracked and new, not ignored) copied under ``work``: a
    wheel's build writes build/ and egg-info where it runs, never into the shared checkout."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .split("\0")
    )
    source = os.path.join(work, "source")
    for name in filter(None, listed):
        if name.startswith(("tests/", "notebooks/", "bench/")) or not os.path.isfile(ROOT / name):
            continue
        os.makedirs(os.path.dirname(os.path.join(source, name)), exist_ok=True)
        shutil.copy2(ROOT / name, os.path.join(source, name))
    return source


def _run(argv: list, cwd: str) -> None:
    done = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert done.returncode == 0, f"{shlex.join(argv)} exited {done.returncode}:\n{done.stdout.decode()[-3000:]}"


@pytest.fixture(scope="module")
def cluster(bed, bed_dir):
    """The module's cluster, its workers started without PYTHONPATH: nothing but the
    archive may put the connector on an executor's path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = netbed.SparkCluster(bed, os.path.join(bed_dir, "spark"), env=env, worker_memory="1g")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def packed_env(tmp_path_factory) -> dict:
    """The page's environment: a venv without the system's site-packages, the connector's
    wheel and its dependencies (not pyspark) and venv-pack installed into it, packed (with
    venv-pack's fastest compression, ``--compress-level 1``: the page leaves the default)."""
    commands = packed_env_block()
    assert [c[:2] for c in commands[:3]] == [
        ["python3", "-m"],
        ["zmq-env/bin/pip", "install"],
        ["zmq-env/bin/venv-pack", "-p"],
    ], f"the page's commands changed: {commands}"
    work = str(tmp_path_factory.mktemp("packed-env"))
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", "wheels", _package_copy(work)], work)
    (wheel,) = glob.glob(os.path.join(work, "wheels", "spark_zmq-*.whl"))
    _run([sys.executable, "-m", "venv", "zmq-env"], work)
    pip = os.path.join(work, "zmq-env", "bin", "pip")
    _run([pip, "install", "-q", "--no-deps", wheel], work)
    _run([pip, "install", "-q", *_requirements(), "venv-pack"], work)
    _run(
        [
            os.path.join(work, "zmq-env", "bin", "venv-pack"),
            "-p",
            "zmq-env",
            "-o",
            "zmq-env.tar.gz",
            "--compress-level",
            "1",
            "-q",
        ],
        work,
    )
    return dict(
        dir=work,
        python=os.path.join(work, "zmq-env", "bin", "python"),
        archive=os.path.join(work, "zmq-env.tar.gz"),
        submit=commands[-1],
    )


@pytest.mark.timeout(600)
def test_executors_without_the_connector_read_every_reading_from_the_shipped_environment(
    bed, cluster, bed_dir, packed_env
):
    argv = list(packed_env["submit"])
    assert argv[0] == "spark-submit", argv
    out = os.path.join(bed_dir, "packed")
    os.makedirs(out)
    probe_out = os.path.join(out, "probe.jsonl")
    job = os.path.join(out, "probe_then_zmq_to_parquet.py")
    with open(job, "w") as f:
        f.write(PROBE_JOB.format(jobs=str(ROOT / "jobs"), probe=probe_out))
    swap = {
        "spark://master:7077": cluster.url,
        "zmq-env.tar.gz#environment": packed_env["archive"] + "#environment",
        "zmq-env/bin/python": packed_env["python"],
        "jobs/zmq_to_parquet.py": job,
        "/data/readings": os.path.join(out, "readings"),
        "/data/readings-ckpt": os.path.join(out, "ckpt"),
    }
    argv = [os.path.join(netbed.spark_home(), "bin", "spark-submit")] + [_swapped(a, swap) for a in argv[1:]]
    assert job in argv and packed_env["archive"] + "#environment" in argv, argv
    argv += ["--available-now", "--idle-timeout", "5"]
    port = int(re.search(r"@tcp://\*:(\d+)", " ".join(argv)).group(1))
    env = {k: v for k, v in _env().items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    log_path = os.path.join(out, "submit.log")
    with open(log_path, "wb") as log:
        submit = bed.run("driver", argv, env, stdout=log, stderr=subprocess.STDOUT)
    producer = None
    try:
        netbed.poll(lambda: submit.poll() is not None or os.path.exists(probe_out), 240, 0.2, "the executors' probe")
        producer = bed.run(
            "producer",
            [
                sys.executable,
                "-m",
                "spark_zmq.cli",
                "produce",
                f"tcp://{bed.addr('driver')}:{port}",
                "--format",
                "json",
                "--count",
                str(READINGS),
            ],
            _env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        code = submit.wait(300)
        produced = producer.wait(60) if code == 0 else None  # a failed job leaves the producer waiting
    finally:
        netbed.NetBed.stop(submit)
        if producer is not None:
            netbed.NetBed.stop(producer)
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    assert code == 0, f"the page's command exited {code}:\n{log_text[-5000:]}"
    assert produced == 0, producer.stderr.read().decode(errors="replace")[-2000:]

    with open(probe_out) as f:
        probes = [json.loads(line) for line in f if line.strip()]
    work_dirs = {host: os.path.join(cluster.workdir, f"work-{host}") for host in cluster.worker_hosts}
    seen = set()
    for p in probes:
        (host,) = [h for h, d in work_dirs.items() if p["cwd"].startswith(d + os.sep)]
        seen.add(host)
        unpacked = os.path.join(p["cwd"], "environment")
        site = os.path.join(
            unpacked, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages"
        )
        assert p["executable"] == os.path.join(unpacked, "bin", "python"), p
        assert os.path.realpath(p["prefix"]) == os.path.realpath(unpacked), p
        assert p["found_in"] == [site] and p["spark_zmq"] == os.path.join(site, "spark_zmq", "__init__.py"), (
            f"an executor could import spark_zmq from elsewhere than the shipped archive: {p}"
        )
        assert p["pyspark"].startswith(os.path.join(netbed.spark_home(), "python", "lib", "pyspark.zip")), p
    assert seen == set(cluster.worker_hosts), f"probes ran on {sorted(seen)}: {probes}"

    seqs = pq.read_table(swap["/data/readings"], columns=["seq"]).column("seq").to_pylist()
    assert len(seqs) == READINGS and set(seqs) == set(range(READINGS)), (
        f"{len(seqs)} rows, {len(set(seqs))} distinct readings of {READINGS}"
    )


def _swapped(arg: str, swap: dict) -> str:
    for name, value in swap.items():
        if arg == name or arg.endswith("=" + name):
            return arg[: len(arg) - len(name)] + value
    return arg
