"""docs/deployment.md's cluster command runs as written on the multi-host bed.

The page's ```bash title="cluster"`` block is taken from the page itself, its deployment's
names swapped for the bed's (the master's URL, the driver's address, the Python, the
directories) and ``--available-now`` added so the run ends; nothing else. The driver host
sits behind the firewall the page describes: from the executors only Spark's two driver
ports and the fetch port get in, from the producer only the endpoint's port. A fetch
service on any other port than the one the command fixes would be dropped, and the read
tasks would fail.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import netbed
import pyarrow.parquet as pq
import pytest
from bedkit import _env

pytestmark = [pytest.mark.multihost, pytest.mark.spark]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "deployment.md"
READINGS = 20_000


def cluster_command() -> str:
    """The page's ``cluster`` block, its backslash continuations joined."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(r'^```bash title="cluster"\n(.*?)^```', text, re.S | re.M)
    assert match, f'{PAGE}: no ```bash title="cluster" block'
    return match.group(1).replace("\\\n", " ")


def _ports(argv: list) -> set:
    """The TCP ports the command fixes on the driver (Spark's and the fetch service's)."""
    ports = {int(a.split("=", 1)[1]) for a in argv if re.match(r"spark\.(driver\.port|driver\.blockManager\.port)=", a)}
    ports.add(int(argv[argv.index("--spool-server-port") + 1]))
    return ports


@pytest.mark.timeout(600)
def test_the_documented_cluster_command_reads_every_reading_through_the_documented_firewall(bed, cluster, bed_dir):
    argv = shlex.split(cluster_command())
    spark_submit = os.path.join(netbed.spark_home(), "bin", "spark-submit")
    private = os.path.join(bed_dir, "driver-private")
    out = os.path.join(bed_dir, "deployment")
    swap = {
        "spark://master:7077": cluster.url,
        "10.0.0.5": bed.addr("driver"),
        "/opt/venv/bin/python": sys.executable,
        "/data/readings": os.path.join(out, "readings"),
        "/data/readings-ckpt": os.path.join(out, "ckpt"),
        "/var/lib/spark-zmq/readings": os.path.join(private, "spool"),
    }
    assert argv[0] == "spark-submit"
    argv = [spark_submit] + [_swapped(a, swap) for a in argv[1:]]
    job = str(Path(__file__).resolve().parents[2] / "jobs" / "zmq_to_parquet.py")
    argv[argv.index("jobs/zmq_to_parquet.py")] = job
    argv += ["--available-now", "--idle-timeout", "10"]
    port = int(re.search(r"@tcp://\*:(\d+)", " ".join(argv)).group(1))
    bed.firewall("driver", ["w1", "w2"], _ports(argv))
    bed.firewall("driver", ["producer"], [port])
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
    with open(os.path.join(bed_dir, "deployment.log"), "wb") as log:
        submit = bed.run("driver", argv, _env(), private_dirs=[private], stdout=log, stderr=subprocess.STDOUT)
    try:
        code = submit.wait(420)
        produced = producer.wait(120)
    finally:
        netbed.NetBed.stop(submit)
        netbed.NetBed.stop(producer)
        bed.heal("driver")
    with open(os.path.join(bed_dir, "deployment.log"), errors="replace") as f:
        log_text = f.read()
    assert code == 0, f"the documented command exited {code}:\n{log_text[-4000:]}"
    assert produced == 0, producer.stderr.read().decode(errors="replace")[-2000:]
    seqs = pq.read_table(swap["/data/readings"], columns=["seq"]).column("seq").to_pylist()
    assert len(seqs) == READINGS and set(seqs) == set(range(READINGS)), (
        f"{len(seqs)} rows, {len(set(seqs))} distinct readings of {READINGS}"
    )
    assert os.listdir(private) == [], "the driver's spool leaked out of its mount namespace"


def _swapped(arg: str, swap: dict) -> str:
    for name, value in swap.items():
        if arg == name or arg.endswith("=" + name):
            return arg[: len(arg) - len(name)] + value
    return arg
