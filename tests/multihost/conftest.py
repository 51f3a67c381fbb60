"""The multi-host bed (tests/helpers/netbed.py) as fixtures: one bed and one Spark
standalone cluster per module, torn down whatever happens (fixture finalizer, and the bed's
own ``atexit``); every test here skips with the reason when no bed can be built."""

from __future__ import annotations

import os
import sys

import netbed
import pytest
from bedkit import Driver, Kit

HOSTS = ["master", "w1", "w2", "driver", "producer", "producer2", "consumer", "relay", "relay2"]


@pytest.fixture(scope="module")
def bed():
    reason = netbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    try:
        made = netbed.NetBed(HOSTS)
    except netbed.BedError as exc:
        pytest.skip(f"cannot build the multi-host bed: {exc}")
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(scope="module")
def bed_dir(tmp_path_factory):
    """Files every host sees (the bed's hosts share this machine's filesystem, except the
    directories a host makes private)."""
    return str(tmp_path_factory.mktemp("netbed"))


@pytest.fixture(scope="module")
def cluster(bed, bed_dir):
    """A Spark master on ``master``, one-core workers on ``w1`` and ``w2``."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    started = netbed.SparkCluster(bed, os.path.join(bed_dir, "spark"), env=env, worker_memory="1g")
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def driver(bed, cluster, bed_dir):
    """One Spark application in client mode on host ``driver`` for the whole module."""
    made = Driver(bed, cluster, bed_dir)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def kit(bed, cluster, driver, bed_dir, request):
    """The test's programs on the bed; whatever a test broke is healed at its end."""
    made = Kit(bed, cluster, bed_dir, request.node.name.replace("[", "-").replace("]", ""), driver)
    try:
        yield made
    finally:
        made.close()
        for host in bed.hosts:
            bed.heal(host)
            bed.link_up(host)
