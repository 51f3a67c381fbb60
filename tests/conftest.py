"""One local[2] SparkSession for the whole run, Python workers on this interpreter."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from hypothesis import settings

from spark_zmq import procstat

# The shared helpers (tests/helpers) are imported by name from every test folder.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))

# Workers must import the interpreter (and site-packages) running the tests.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# Every process this test process starts (Spark's JVM, its Python workers, the receiver
# processes they start, spark-submit jobs) inherits this mark, so the clean-up below stops
# only this run's receivers: another pytest process on the machine (an xdist worker, a
# second checkout's run) has receivers of its own that a test here must not kill.
RUN_MARK = f"SPARK_ZMQ_TEST_RUN={os.getpid()}"
#: conf/spark-defaults.conf's checkpoint file manager (docs/performance.md, "Checkpoints on a
#: local disk"): Spark's default starts processes on every checkpoint rename of a local file
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
os.environ["SPARK_ZMQ_TEST_RUN"] = str(os.getpid())
# The default ``spoolDir`` lives under $XDG_STATE_HOME and is derived from the options: a
# test that binds a port an earlier run (or another checkout's run) bound must not find
# that run's spool. Each run has a state directory of its own, inherited like the mark.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="spark-zmq-test-state-")


# Hypothesis: "ci" (the default) runs each property's full count of examples; "dev", for
# the inner loop, a tenth of it (``examples`` in tests/helpers/zmqtest.py scales the counts tests
# set themselves). Choose with --hypothesis-profile=dev.
settings.register_profile("ci", max_examples=100, deadline=None)
settings.register_profile("dev", max_examples=10, deadline=None)
settings.load_profile("ci")


#: what a test's source names when it drives libzmq through node (tests/helpers/zmqjs_peer.py)
_NODE_NAMES = ("NodePeer", "skip_unless_node", "_node_peers")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """Markers follow from what a test uses, so ``-m "not spark"`` never starts Spark and
    ``-m "not node"`` never needs node: every test that asks for the ``spark`` fixture is
    marked ``spark``; every test whose code, fixtures or parameters (a ``libzmq-...`` peer
    kind) drive a node peer, ``node``. Every test of the ``spark`` fixture is in one xdist
    group, so a parallel run (``-n 3 --dist loadgroup``, the default) has one Spark session,
    in one worker; the tests that start Spark applications in child processes are in a
    second group, which xdist hands to another worker (it deals the largest groups
    first, one to each worker), beside the tests that need no Spark. A test may name a group
    of its own (``pytest.mark.xdist_group("bench")``: the bench's smoke run, the longest
    test, which would otherwise lengthen the applications' group by its whole length)."""
    import inspect

    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "spark" in fixtures and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("spark") is not None:
            # the session's tests share its worker; tests that start Spark applications of
            # their own (spark-submit jobs, notebooks, the cluster bed) run one at a time on
            # another worker, beside the session rather than after it
            own = item.get_closest_marker("xdist_group")
            if own is not None:  # a group of its own, declared by the test (the bench's smoke run)
                group = own.kwargs.get("name", own.args[0] if own.args else "")
            else:
                group = "spark" if "spark" in fixtures else "spark-apps"
                item.add_marker(pytest.mark.xdist_group(group))
            _GROUPS[item.nodeid] = group
        function = getattr(item, "function", None)
        try:
            source = inspect.getsource(function) if function is not None else ""
        except (OSError, TypeError):
            source = ""
        callspec = getattr(item, "callspec", None)
        libzmq_param = callspec is not None and any(str(v).startswith("libzmq") for v in callspec.params.values())
        if (
            any(name in source for name in _NODE_NAMES)
            or "_node_peers" in fixtures
            or any(f.startswith("node_") for f in fixtures)
            or libzmq_param
        ):
            item.add_marker(pytest.mark.node)


#: what one test may take (setup, call and teardown, seconds) before the run's summary
#: names it: a test of the shared Spark session, one that starts Spark applications of
#: its own (a JVM each), any other. A report, not a failure (a loaded machine stretches
#: every test); CI's log shows it, so a slow newcomer is seen the day it lands.
DURATION_BUDGET_S = {"spark": 45.0, "spark-apps": 90.0, "bench": 90.0, "": 10.0}
_durations: dict = {}
#: each test's xdist group, as collected in this process
_GROUPS: dict = {}


def _budget_group(report) -> str:
    """The xdist group a report's test ran in (``--dist loadgroup`` suffixes the id with
    ``@group``), or from its markers in a run without xdist."""
    _, at, group = report.nodeid.rpartition("@")
    if at and group in DURATION_BUDGET_S:
        return group
    return _GROUPS.get(report.nodeid, "")


def pytest_runtest_logreport(report):
    group = _budget_group(report)
    key = (report.nodeid, group)
    _durations[key] = _durations.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """The duration budget: each group's total (the Spark session's tests run one after
    another on one worker, so their total bounds the run's length from below) and every
    test over its budget."""
    if not _durations:
        return
    totals: dict = {}
    for (_, group), seconds in _durations.items():
        count, total = totals.get(group, (0, 0.0))
        totals[group] = (count + 1, total + seconds)
    terminalreporter.write_sep("=", "duration budget")
    names = {
        "spark": "the Spark session's tests (one worker, in turn)",
        "spark-apps": "tests starting Spark applications (one worker, in turn)",
        "bench": "the bench's smoke run (a Spark application, beside the other groups)",
        "": "the other tests",
    }
    for group, (count, total) in sorted(totals.items()):
        terminalreporter.write_line(f"{total:8.1f} s  {count:5d} {names.get(group, group)}")
    over = sorted(
        (
            (seconds, nodeid, DURATION_BUDGET_S.get(group, DURATION_BUDGET_S[""]))
            for (nodeid, group), seconds in _durations.items()
            if seconds > DURATION_BUDGET_S.get(group, DURATION_BUDGET_S[""])
        ),
        reverse=True,
    )
    for seconds, nodeid, budget in over:
        terminalreporter.write_line(f"{seconds:8.1f} s  over its {budget:.0f} s: {nodeid}")
    if not over:
        terminalreporter.write_line("every test within its budget")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from pyspark.sql import SparkSession

    import spark_zmq

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-zmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        # as conf/spark-defaults.conf: local checkpoints written without a process per file
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        # as conf/spark-defaults.conf: Python workers on a Unix socket, no 40 ms wait a task
        .config("spark.python.unix.domain.socket.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_zmq.register(session)
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


@pytest.fixture(autouse=True)
def _no_lingering_receivers():
    """Receiver processes linger after their query stops (``receiverLingerSeconds``), by
    design; the ones a test started must not outlive it (no test shares a spool with
    another, and dozens of idle receivers would slow the rest of the run)."""
    started = _boot_ticks_now()
    yield
    import signal

    for pid in _receiver_processes():
        if procstat.start_ticks(pid) >= started:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass


def _boot_ticks_now() -> int:
    with open("/proc/uptime") as f:
        return int(float(f.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def _receiver_processes() -> list:
    """This run's receiver processes (see ``RUN_MARK``)."""
    pids = []
    for pid in procstat.pids() or ():
        if b"spark_zmq.relay.child" in procstat.cmdline(pid) and RUN_MARK.encode() in _environment(pid):
            pids.append(pid)
    return pids


def _environment(pid: int) -> list:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


@pytest.fixture(autouse=True)
def _close_test_producers():
    """Producers keep their sockets open for the whole test; close them after it."""
    yield
    from zmqtest import close_producers

    close_producers()


@pytest.fixture
def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for endpoints a Spark process binds), below
    the ephemeral range (``zmqtest.free_ports`` says why)."""
    from zmqtest import free_ports

    return free_ports(1)[0]


@pytest.fixture
def ctx():
    """A ZeroMQ context of the test's own, for the plain pyzmq peers it makes: destroyed
    after the test with linger 0, so a socket the test left open cannot hold it up."""
    import zmq

    context = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def spool_dir(tmp_path) -> str:
    """A fresh spool directory per test, so tests never see each other's messages."""
    return str(tmp_path / "spool")
