"""What the multi-host Spark tests share (tests/multihost/test_spark_bed.py and
test_fault_matrix.py): the driver application that serves their scenarios (``Driver``), the
bed programs' launcher (``Kit``), and the checks on what arrived. The ``driver`` and ``kit``
fixtures are in conftest.py."""

from __future__ import annotations

import collections
import glob
import json
import os
import subprocess
import sys

import netbed
import zmqjs_peer

from spark_zmq.relay.run import read_ready

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bed_programs.py")

#: every scenario runs with the documented configuration only: the driver's master URL, and
#: nothing else about addresses or ports (the fetch service finds the driver's address)
MESSAGES = 20_000


def _env() -> dict:
    """The documented configuration only: no SPARK_LOCAL_IP for the driver."""
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
    return env


def events(started: dict) -> list:
    """The events a program reported (its ``status`` file, one JSON per line)."""
    try:
        with open(started["status"]) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_event(started: dict, event: str, timeout: float, log=lambda: "", **match) -> dict:
    """The first ``event`` whose fields are at least ``match``, polled with a deadline; fails at
    once, with the program's log, when the program exits without it."""

    def found():
        for e in events(started):
            if e["event"] == event and all(e.get(k, 0) >= v for k, v in match.items()):
                return e
        if started["proc"].poll() is not None:
            for e in events(started):  # written just before it exited
                if e["event"] == event:
                    return e
            raise AssertionError(f"{started['name']} exited {started['proc'].returncode} before {event}: {log()}")
        return None

    return netbed.poll(found, timeout, 0.1, f"{started['name']}: {event} {match}")


class Driver:
    """One Spark application in client mode on host ``driver`` for the whole module (a
    session's start is most of a scenario's time), in a mount namespace of its own whose
    ``private`` directory (the spools) no executor sees; scenarios are sent to it."""

    def __init__(self, bed: netbed.NetBed, cluster: netbed.SparkCluster, root: str) -> None:
        self.dir = os.path.join(root, "driver")
        os.makedirs(self.dir)
        self.private = os.path.join(self.dir, "private")
        self.status = os.path.join(self.dir, "driver.status")
        self.log_path = os.path.join(self.dir, "driver.log")
        spec = os.path.join(self.dir, "driver.json")
        with open(spec, "w") as f:
            json.dump({"master": cluster.url, "status": self.status}, f)
        with open(self.log_path, "wb") as log:
            self.proc = bed.run(
                "driver",
                [sys.executable, PROGRAMS, "serve", spec],
                _env(),
                private_dirs=[self.private],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started = dict(status=self.status, proc=self.proc, name="driver")
        self.serving = wait_event(started, "serving", 240, self.log)

    def send(self, spec_path: str) -> None:
        assert self.proc.poll() is None, f"the driver exited {self.proc.returncode}: {self.log()}"
        self.proc.stdin.write(spec_path.encode() + b"\n")
        self.proc.stdin.flush()

    def log(self, chars: int = 4000) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # EOF: the session stops
            self.proc.wait(60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        netbed.NetBed.stop(self.proc, timeout=10)


class Kit:
    """Start the bed programs with a spec file each (the driver's scenarios go to the
    module's ``Driver``); read what they report."""

    def __init__(self, bed: netbed.NetBed, cluster: netbed.SparkCluster, root: str, name: str, driver: Driver) -> None:
        self.bed, self.cluster, self.driver = bed, cluster, driver
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.procs: list[subprocess.Popen] = []
        self.peers: list = []
        self.stop_files: list[str] = []

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def env(self) -> dict:
        return _env()

    def spark(self, role: str, name: str = "query", **spec) -> dict:
        """Run a ``stream`` or ``write`` scenario in the module's driver application."""
        spec.update(
            role=role,
            status=self.path(f"{name}.status"),
            result=self.path(f"{name}.result"),
            stop_file=self.path(f"{name}.stop"),
        )
        with open(self.path(f"{name}.json"), "w") as f:
            json.dump(spec, f)
        self.driver.send(self.path(f"{name}.json"))
        self.stop_files.append(spec["stop_file"])
        return dict(spec, proc=self.driver.proc, name=name)

    def start(self, host: str, role: str, name: str, private_dirs=(), **spec) -> dict:
        spec.setdefault("status", self.path(f"{name}.status"))
        with open(self.path(f"{name}.json"), "w") as f:
            json.dump(spec, f)
        log = open(self.path(f"{name}.log"), "wb")
        proc = self.bed.run(
            host,
            [sys.executable, PROGRAMS, role, self.path(f"{name}.json")],
            self.env(),
            private_dirs=private_dirs,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.procs.append(proc)
        return dict(spec, proc=proc, name=name)

    def cli(self, host: str, name: str, args: list, private_dirs=(), stdout=subprocess.DEVNULL) -> subprocess.Popen:
        """``spark-zmq ARGS`` on ``host``, its stderr in ``<name>.log``."""
        with open(self.path(f"{name}.log"), "wb") as err:
            proc = self.bed.run(
                host,
                [sys.executable, "-m", "spark_zmq.cli", *args],
                self.env(),
                private_dirs=private_dirs,
                stdout=stdout,
                stderr=err,
            )
        self.procs.append(proc)
        return proc

    def relay(
        self, host: str, endpoints: str, listen: str, spool_dir: str, private_dirs=(), name: str = "relay"
    ) -> subprocess.Popen:
        proc = self.cli(
            host,
            name,
            ["relay", "--endpoints", endpoints, "--listen", listen, "--spool-dir", spool_dir],
            private_dirs=private_dirs,
            stdout=subprocess.PIPE,
        )
        ready = read_ready(proc, 60)
        assert ready is not None, f"{name} did not start: {self.log(name)}"
        return proc

    def node(self, host: str, kind: str, **args) -> zmqjs_peer.NodePeer:
        """libzmq itself (zeromq.js, tests/zmqjs/peer.js) on ``host``; killed at the end."""
        peer = zmqjs_peer.NodePeer.start(kind, wrap=lambda argv: self.bed.command(host, argv), **args)
        self.peers.append(peer)
        return peer

    @staticmethod
    def events(started: dict) -> list:
        return events(started)

    def wait_event(self, started: dict, event: str, timeout: float, **match) -> dict:
        return wait_event(started, event, timeout, lambda: self.log(started["name"]), **match)

    def result(self, started: dict, timeout: float) -> dict:
        self.wait_event(started, "done", timeout)
        with open(started["result"]) as f:
            return json.load(f)

    def log(self, name: str, chars: int = 4000) -> str:
        if name == "query":
            return self.driver.log(chars)
        try:
            with open(self.path(f"{name}.log"), errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def close(self) -> None:
        for stop in self.stop_files:  # a scenario still running in the driver ends (the next one waits)
            open(stop, "a").close()
        for peer in self.peers:
            peer.kill()
        for proc in self.procs:
            netbed.NetBed.stop(proc, timeout=20)


def sink_values(output: str) -> collections.Counter:
    """The ``value`` of every row Spark's JSON file sink committed under ``output``."""
    committed = set()
    for entry in sorted(glob.glob(os.path.join(output, "_spark_metadata", "*"))):
        with open(entry) as f:
            for line in f.read().splitlines()[1:]:  # a version line, then one JSON per file
                committed.add(os.path.basename(json.loads(line)["path"]))
    values: collections.Counter = collections.Counter()
    for part in glob.glob(os.path.join(output, "part-*.json")):
        if os.path.basename(part) in committed or f"file://{part}" in committed:
            with open(part) as f:
                for line in f:
                    values[json.loads(line)["value"]] += 1
    return values


def consumer_values(path: str) -> collections.Counter:
    try:
        with open(path, "rb") as f:
            return collections.Counter(line.decode() for line in f.read().splitlines())
    except FileNotFoundError:
        return collections.Counter()


def assert_exactly_once(values: collections.Counter, count: int, start: int = 0) -> None:
    expected = {str(i) for i in range(start, start + count)}
    missing = expected - set(values)
    duplicated = {v: n for v, n in values.items() if n > 1}
    extra = set(values) - expected
    assert not missing and not duplicated and not extra, (
        f"{len(missing)} missing of {count} (e.g. {sorted(missing, key=int)[:5]}), "
        f"{len(duplicated)} duplicated (e.g. {list(duplicated.items())[:5]}), {len(extra)} unexpected"
    )


def ranges(numbers) -> list:
    """Sorted numbers as [first, last] runs."""
    out: list = []
    for n in sorted(numbers):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def private_spool(kit: Kit, host: str) -> str:
    """A directory that gets a tmpfs only ``host``'s program sees (its spool lives there)."""
    return kit.driver.private if host == "driver" else kit.path(f"{host}-private")
