"""Which address the driver's spool fetch service advertises, read as Spark's driver would be
configured: a real process whose command line is a SparkSubmit one (as spark-submit and
``SparkSession.builder`` start the JVM) with the reader's process below it (no Spark)."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys

import pytest

from spark_zmq.source.driver_host import _master_hosts, is_loopback
from spark_zmq.source.locality import conf_from_command_line, defaults_file_conf

pytestmark = pytest.mark.timeout(60)

_CHILD = (
    "import json; from spark_zmq.source.driver_host import driver_host; h = driver_host(); "
    "print(json.dumps([h.address, h.source]))"
)
#: the "JVM": runs the reader's stand-in as its child, whatever its own arguments say
_PARENT = "import subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', sys.argv[1]]))"


def _driver_host(submit_args: list[str], env: dict | None = None) -> tuple[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_CONF_DIR")}
    environment.update(env or {})
    out = subprocess.run(
        [sys.executable, "-c", _PARENT, _CHILD, "org.apache.spark.deploy.SparkSubmit", *submit_args, "pyspark-shell"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    address, source = json.loads(out.strip().splitlines()[-1])
    return address, source


def test_spark_driver_host_wins():
    assert _driver_host(["--master", "spark://198.18.0.1:7077", "--conf", "spark.driver.host=198.18.0.9"]) == (
        "198.18.0.9",
        "spark.driver.host",
    )


def test_spark_local_ip_of_the_driver_jvm_is_used():
    address, source = _driver_host(["--master", "spark://198.18.0.1:7077"], {"SPARK_LOCAL_IP": "198.18.0.8"})
    assert address == "198.18.0.8" and "SPARK_LOCAL_IP" in source


def test_spark_defaults_conf_is_read_as_spark_submit_reads_it(tmp_path):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\nspark.master  spark://198.18.0.1:7077\nspark.driver.host   198.18.0.7\n"
    )
    assert _driver_host([], {"SPARK_CONF_DIR": str(tmp_path)})[0] == "198.18.0.7"
    # the command line overrides the file
    assert (
        _driver_host(["--conf", "spark.driver.host=198.18.0.6"], {"SPARK_CONF_DIR": str(tmp_path)})[0] == "198.18.0.6"
    )


def test_a_local_master_keeps_the_service_on_loopback():
    assert _driver_host(["--master", "local[2]"])[0] == "127.0.0.1"


def test_a_cluster_master_never_gets_loopback_when_the_host_has_another_address():
    routes = subprocess.run(["ip", "-4", "route", "get", "198.18.0.1"], capture_output=True, text=True, timeout=10)
    if routes.returncode != 0 or " src " not in routes.stdout:
        pytest.skip("this host has no route beyond loopback")
    address, source = _driver_host(["--master", "spark://198.18.0.1:7077"])
    assert not ipaddress.ip_address(address).is_loopback, (address, source)


def test_command_line_conf_parsing():
    args = [
        b"java",
        b"org.apache.spark.deploy.SparkSubmit",
        b"--master",
        b"yarn",
        b"--conf",
        b"spark.driver.host=h1",
        b"--conf=spark.x=1",
        b"--verbose",
        b"app.py",
        b"--conf",
        b"spark.driver.host=no",
    ]
    assert conf_from_command_line(args) == {"spark.master": "yarn", "spark.driver.host": "h1", "spark.x": "1"}
    assert conf_from_command_line([b"python", b"--conf", b"a=b"]) == {}


def test_defaults_file_needs_a_conf_dir(tmp_path):
    assert defaults_file_conf({}) == {}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.host=h2\n")
    assert defaults_file_conf({"SPARK_HOME": str(tmp_path)}) == {"spark.driver.host": "h2"}


def test_master_hosts():
    assert _master_hosts("spark://a:7077,b:7077") == ["a", "b"]
    assert _master_hosts("k8s://https://api.example:443") == ["api.example"]
    assert _master_hosts("local[2]") == [] and _master_hosts("yarn") == []
    assert is_loopback("127.0.1.1") and is_loopback("localhost") and not is_loopback("198.18.0.1")
