"""Reading Spark's master from a SparkSubmit command line (pure; no Spark, no /proc needed)."""

from __future__ import annotations

import os

import pytest

from spark_zmq.source.locality import executors_share_host, local_cores, master_from_command_line, spark_master

pytestmark = pytest.mark.timeout(30)

SUBMIT = [b"/usr/bin/java", b"-cp", b"/opt/spark/jars/*", b"-Xmx1g", b"org.apache.spark.deploy.SparkSubmit"]


@pytest.mark.parametrize(
    "args, master",
    [
        ([b"--conf", b"spark.master=local[2]", b"pyspark-shell"], "local[2]"),  # SparkSession.builder.master(...)
        ([b"--master", b"yarn", b"--deploy-mode", b"client", b"job.py"], "yarn"),
        ([b"--master=spark://h:7077", b"job.py"], "spark://h:7077"),
        ([b"--master", b"yarn", b"--conf", b"spark.master=k8s://x", b"job.py"], "k8s://x"),  # the last one wins
        ([b"--py-files", b"deps.py", b"--master", b"local-cluster[2,1,1024]", b"job.py"], "local-cluster[2,1,1024]"),
        ([b"--verbose", b"job.py", b"--master", b"local"], None),  # after the application: its own arguments
        ([b"job.py"], None),
    ],
)
def test_master_from_a_spark_submit_command_line(args, master):
    assert master_from_command_line(SUBMIT + args) == master


def test_not_a_spark_submit_command_line():
    assert master_from_command_line([b"python", b"--master", b"local"]) is None
    assert spark_master(pid=1) is None  # no SparkSubmit ancestor: unknown


@pytest.mark.parametrize(
    "master, shared",
    [
        ("local", True),
        ("local[*]", True),
        ("local-cluster[2,1,1024]", True),
        ("yarn", False),
        ("spark://h:7077", False),
        ("k8s://https://x", False),
    ],
)
def test_only_local_masters_share_the_driver_host(master, shared):
    assert executors_share_host(master) is shared


@pytest.mark.parametrize(
    "master, slots",
    [
        ("local", 1),
        ("local[2]", 2),
        ("LOCAL[4]", 4),
        ("local[3,2]", 3),
        ("local[*]", os.cpu_count() or 1),
        ("local[*,4]", os.cpu_count() or 1),
        ("local-cluster[2,3,1024]", 6),
        ("spark://host:7077", None),
        ("yarn", None),
        ("k8s://https://api:443", None),
        ("local[x]", None),
        ("local-cluster[2]", None),
        ("", None),
    ],
)
def test_the_task_slots_of_a_local_master_and_none_for_others(master, slots):
    assert local_cores(master) == slots
