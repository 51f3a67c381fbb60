"""A multi-host test bed on one Linux machine (issue 33): every "host" is a network namespace
with its own address in the benchmarking range (198.18.0.0/15, RFC 2544) on a bridge the
bed creates, and faults are nftables rules inside a host's namespace or its link going down.

    bed = NetBed(hosts=["master", "w1", "w2", "driver", "producer", "consumer", "relay"])
    proc = bed.run("producer", [sys.executable, "produce.py", bed.addr("driver")])
    bed.drop("producer")                 # both ways, every peer
    bed.drop("producer", peer="driver", direction="out")
    bed.reject("producer", "driver")     # TCP reset (ICMP unreachable for the rest)
    bed.heal("producer")
    bed.link_down("w1"); bed.link_up("w1")
    bed.close()                          # also at exit, and by the pytest fixture

Names are unique per bed (``zmqbed-<id>-<owner pid>-<host>`` for namespaces, ``zb<id>...``
for links, at most 15 characters), so two beds on one machine never collide; a bed whose
owner died without tearing down is removed by the next bed's ``sweep_stale()``. The test
process itself is on the bed too: the bridge carries ``bed.gateway``, the first address
of the subnet, so a test can reach any host directly (and nothing else is routed).

``SparkCluster`` starts a Spark standalone master and workers on the bed with pyspark's
own ``spark-class``. Needs root, ``ip`` (iproute2), ``nft`` (nftables) and ``unshare``;
``unavailable_reason()`` says why a bed cannot be built here (tests skip with it).
"""

from __future__ import annotations

import atexit
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence

PREFIX = "zmqbed"
#: namespace names: zmqbed-<id>-<owner pid>-<host>
_NS_RE = re.compile(rf"^{PREFIX}-([0-9a-f]{{6}})-(\d+)-(.+)$")
#: the benchmarking range 198.18.0.0/15: 512 /24 subnets, one per bed
_SUBNETS = [(18, n) for n in range(256)] + [(19, n) for n in range(256)]
#: a host's address is .<HOST_BASE + its index>; .1 is the bridge (the test process)
HOST_BASE = 10
_DIRECTIONS = ("both", "in", "out")


def _sh(*argv: str, check: bool = True, input: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    result = subprocess.run(list(argv), capture_output=True, text=True, input=input, timeout=timeout)
    if check and result.returncode != 0:
        raise BedError(
            f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
        )
    return result


class BedError(RuntimeError):
    """A bed operation failed (the command and its stderr are in the message)."""


def unavailable_reason() -> str | None:
    """Why no bed can be built on this machine, or None when one can (a namespace is created
    and deleted to find out)."""
    if not sys.platform.startswith("linux"):
        return "the multi-host bed needs Linux network namespaces"
    if os.geteuid() != 0:
        return "the multi-host bed needs root (network namespaces, a bridge, nftables)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            return f"the multi-host bed needs `{tool}` (apt-get install {package})"
    probe = f"{PREFIX}-probe-{os.getpid()}-{secrets.token_hex(2)}"
    try:
        made = _sh("ip", "netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace: {made.stderr.strip()}"
        nft = _sh("ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe", check=False)
        if nft.returncode != 0:
            return f"nftables does not work in a network namespace: {nft.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot create a network namespace: {exc}"
    finally:
        _sh("ip", "netns", "del", probe, check=False)
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_names() -> list[str]:
    result = _sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _kill_netns_processes(ns: str, deadline_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, every process inside namespace ``ns`` (``ip netns pids``)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = _netns_pids(ns)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + deadline_s
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if _alive(p) and not _zombie(p)]
            if pids:
                time.sleep(0.05)
        if not pids:
            return


def _netns_pids(ns: str) -> list[int]:
    result = _sh("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit() and int(p) != os.getpid()]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def sweep_stale() -> list[str]:
    """Remove what beds whose owner process is gone left behind (their namespaces, with
    the processes inside, and their bridges); returns the namespaces removed."""
    removed = []
    ids = set()
    for ns in _netns_names():
        match = _NS_RE.match(ns)
        if match is None or _alive(int(match.group(2))):
            continue
        _kill_netns_processes(ns)
        _sh("ip", "netns", "del", ns, check=False)
        ids.add(match.group(1))
        removed.append(ns)
    for bed_id in ids:
        _sh("ip", "link", "del", f"zb{bed_id}br", check=False)
    return removed


class NetBed:
    """Hosts as network namespaces on one bridge; see the module's docstring."""

    def __init__(self, hosts: Sequence[str], *, sweep: bool = True) -> None:
        if len(set(hosts)) != len(hosts) or not hosts:
            raise ValueError(f"hosts must be distinct names, got {hosts!r}")
        if len(hosts) > 200:
            raise ValueError("at most 200 hosts on one bed")
        reason = unavailable_reason()
        if reason is not None:
            raise BedError(reason)
        if sweep:
            sweep_stale()
        self.id = secrets.token_hex(3)
        self.owner = os.getpid()
        self.hosts = list(hosts)
        self.bridge = f"zb{self.id}br"
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._closed = False
        self._made_ns: list[str] = []
        self._made_bridge = False
        atexit.register(self.close)
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # -- construction --------------------------------------------------------------------
    def _pick_subnet(self) -> str:
        used = set()
        for line in _sh("ip", "-o", "-4", "addr", "show", check=False).stdout.splitlines():
            for addr in re.findall(r"inet (\d+\.\d+\.\d+)\.\d+/", line):
                used.add(addr)
        # beds of other runs live in their own namespaces: their bridges show here (.1)
        free = [f"198.{a}.{b}" for a, b in _SUBNETS if f"198.{a}.{b}" not in used]
        if not free:
            raise BedError("every /24 of 198.18.0.0/15 is in use on this machine")
        return random.choice(free)

    def _build(self) -> None:
        self.subnet = self._pick_subnet()
        self.gateway = f"{self.subnet}.1"
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        self._made_bridge = True
        _sh("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        self._addrs = {}
        for index, host in enumerate(self.hosts):
            ns = self.ns(host)
            _sh("ip", "netns", "add", ns)
            self._made_ns.append(ns)
            veth = self.veth(host)
            _sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "link", "set", veth, "master", self.bridge, "up")
            addr = f"{self.subnet}.{HOST_BASE + index}"
            self._addrs[host] = addr
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            # the fault rules' table: empty chains until drop()/reject()
            _sh(
                "ip",
                "netns",
                "exec",
                ns,
                "nft",
                "-f",
                "-",
                input=(
                    "table inet netbed {\n"
                    "  chain input { type filter hook input priority 0; policy accept; }\n"
                    "  chain output { type filter hook output priority 0; policy accept; }\n"
                    "}\n"
                ),
            )
        self._wait_links()

    def _wait_links(self, timeout: float = 10.0) -> None:
        """Until every host's link is up and its bridge port forwards (STP is off, so at once)."""
        deadline = time.monotonic() + timeout
        pending = list(self.hosts)
        while pending:
            pending = [h for h in pending if not self._link_ready(h)]
            if pending and time.monotonic() > deadline:
                raise BedError(f"hosts {pending} did not come up on bridge {self.bridge}")
            if pending:
                time.sleep(0.05)

    def _link_ready(self, host: str) -> bool:
        try:
            with open(f"/sys/class/net/{self.veth(host)}/operstate") as f:
                up = f.read().strip() == "up"
            with open(f"/sys/class/net/{self.veth(host)}/brport/state") as f:
                return up and f.read().strip() == "3"  # BR_STATE_FORWARDING
        except OSError:
            return False

    # -- names ---------------------------------------------------------------------------
    def ns(self, host: str) -> str:
        self._check(host)
        return f"{PREFIX}-{self.id}-{self.owner}-{host}"

    def veth(self, host: str) -> str:
        """The host's link on the bridge, in the root namespace (``eth0`` inside)."""
        return f"zb{self.id}v{self.hosts.index(self._check(host))}"

    def addr(self, host: str) -> str:
        return self._addrs[self._check(host)]

    def _check(self, host: str) -> str:
        if host not in self.hosts:
            raise KeyError(f"no host {host!r} on this bed (hosts: {self.hosts})")
        return host

    # -- processes -----------------------------------------------------------------------
    def command(self, host: str, argv: Sequence[str], private_dirs: Iterable[str] = ()) -> list[str]:
        """The command line that runs ``argv`` on ``host`` (see ``run``)."""
        prefix = ["ip", "netns", "exec", self.ns(host)]
        dirs = [os.path.abspath(d) for d in private_dirs]
        if not dirs:
            return prefix + list(argv)
        # a private mount namespace with a fresh tmpfs over each directory: what the process
        # writes there no other host sees (and it is gone with the namespace's last process)
        script = (
            'set -e; n=$1; shift; i=0; while [ $i -lt $n ]; do mount -t tmpfs -o mode=0700 tmpfs "$1"; '
            'shift; i=$((i+1)); done; exec "$@"'
        )
        return prefix + [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "netbed-private",
            str(len(dirs)),
            *dirs,
            *argv,
        ]

    def run(
        self,
        host: str,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        private_dirs: Iterable[str] = (),
        **popen: object,
    ) -> subprocess.Popen:
        """Start ``argv`` inside ``host``'s network namespace (``ip netns exec``), in a process
        group of its own, torn down with the bed. ``private_dirs``: directories (which must
        exist) that get a tmpfs only this process (and its children) sees. ``env`` replaces
        the environment (default: this process's); other keywords go to ``Popen``."""
        if self._closed:
            raise BedError("the bed is closed")
        dirs = list(private_dirs)
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        proc = subprocess.Popen(
            self.command(host, argv, dirs), env=dict(env) if env is not None else None, start_new_session=True, **popen
        )  # type: ignore[arg-type]
        with self._lock:
            self._procs.append(proc)
        return proc

    def exec(self, host: str, argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion (output captured as text)."""
        return _sh(*self.command(host, argv), check=False, timeout=timeout)

    @staticmethod
    def stop(proc: subprocess.Popen, timeout: float = 20.0, sig: int = signal.SIGTERM) -> int | None:
        """``sig`` to the process's group, SIGKILL to the group after ``timeout``; its exit code."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what the leader left behind in its group
        except OSError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        return proc.returncode

    # -- faults --------------------------------------------------------------------------
    def _nft(self, host: str, script: str) -> None:
        _sh("ip", "netns", "exec", self.ns(host), "nft", "-f", "-", input=script)

    def _rules(self, host: str, peer: str | None, direction: str, verdict: str) -> None:
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")
        into = f"ip saddr {self.addr(peer)}" if peer is not None else 'iifname "eth0"'
        out = f"ip daddr {self.addr(peer)}" if peer is not None else 'oifname "eth0"'
        lines = []
        if direction in ("both", "in"):
            lines.append(f"add rule inet netbed input {into} {verdict}")
        if direction in ("both", "out"):
            lines.append(f"add rule inet netbed output {out} {verdict}")
        self._nft(host, "\n".join(lines) + "\n")

    def drop(self, host: str, peer: str | None = None, direction: str = "both") -> None:
        """Silently drop ``host``'s traffic with ``peer`` (every host when None): ``in``
        (what reaches it), ``out`` (what it sends) or ``both``."""
        self._rules(host, peer, direction, "drop")

    def reject(self, host: str, peer: str | None = None, direction: str = "both") -> None:
        """Refuse ``host``'s traffic with ``peer``: TCP answered with a reset, the rest with
        ICMP port unreachable."""
        # the reset a reject forges carries the peer's address: never reject a reset itself,
        # or the rule for the other direction swallows it and the connect times out instead
        self._rules(host, peer, direction, "tcp flags & rst == 0 reject with tcp reset")
        self._rules(host, peer, direction, "meta l4proto != tcp reject")

    def firewall(self, host: str, peers: Sequence[str], tcp_ports: Iterable[int]) -> None:
        """What a firewall in front of ``host`` does: from ``peers``, only new TCP connections
        to ``tcp_ports`` (and what belongs to connections ``host`` made) get in; the rest is
        dropped silently. ``heal`` removes it."""
        ports = ", ".join(str(int(p)) for p in tcp_ports)
        lines = []
        for peer in peers:
            saddr = f"ip saddr {self.addr(peer)}"
            lines += [
                f"add rule inet netbed input {saddr} ct state established,related accept",
                f"add rule inet netbed input {saddr} tcp dport {{ {ports} }} accept",
                f"add rule inet netbed input {saddr} drop",
            ]
        self._nft(host, "\n".join(lines) + "\n")

    def heal(self, host: str) -> None:
        """Remove every drop/reject rule of ``host``."""
        self._nft(host, "flush chain inet netbed input\nflush chain inet netbed output\n")

    def rules(self, host: str) -> str:
        return _sh("ip", "netns", "exec", self.ns(host), "nft", "list", "table", "inet", "netbed").stdout

    def link_down(self, host: str) -> None:
        """Unplug ``host``: its link on the bridge goes down (packets vanish both ways)."""
        _sh("ip", "link", "set", self.veth(host), "down")

    def link_up(self, host: str) -> None:
        _sh("ip", "link", "set", self.veth(host), "up")

    # -- teardown ------------------------------------------------------------------------
    def close(self, grace_s: float = 10.0) -> None:
        """Stop every process the bed started (their groups; SIGKILL for those still up
        ``grace_s`` after SIGTERM), every other process left in its namespaces, then delete
        the namespaces (their veth pairs go with them) and the bridge. Safe to call twice;
        runs at exit too."""
        if self._closed or os.getpid() != self.owner:
            return
        self._closed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for ns in self._made_ns:
            _kill_netns_processes(ns)
            _sh("ip", "netns", "del", ns, check=False)
        if self._made_bridge:
            _sh("ip", "link", "del", self.bridge, check=False)
        try:
            atexit.unregister(self.close)
        except Exception:
            pass

    def __enter__(self) -> NetBed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- a Spark standalone cluster on the bed ---------------------------------------------------
def spark_home() -> str:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return _find_spark_home()
    except Exception:
        import pyspark

        return os.path.dirname(pyspark.__file__)


def http_json(url: str, timeout: float = 5.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - a bed address
        return json.loads(response.read().decode())


def poll(condition, timeout: float, interval: float = 0.2, what: str = "condition"):
    """``condition()`` until it returns something true, or BedError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - the last one is reported
            last_error = exc
        if time.monotonic() > deadline:
            raise BedError(
                f"timed out after {timeout} s waiting for {what}"
                + (f" (last error: {last_error!r})" if last_error else "")
            )
        time.sleep(interval)


class SparkCluster:
    """A Spark standalone master on ``master`` and one worker per host of ``workers`` (one
    core, ``worker_memory`` each), started with pyspark's ``spark-class``; logs and work
    directories under ``workdir``. Ready when the master's JSON shows every worker ALIVE."""

    MASTER_PORT = 7077
    WEBUI_PORT = 8080
    WORKER_WEBUI_PORT = 8081

    def __init__(
        self,
        bed: NetBed,
        workdir: str,
        master: str = "master",
        workers: Sequence[str] = ("w1", "w2"),
        worker_memory: str = "1g",
        env: Mapping[str, str] | None = None,
        timeout: float = 120,
    ) -> None:
        self.bed = bed
        self.workdir = workdir
        self.master_host = master
        self.worker_hosts = list(workers)
        self.home = spark_home()
        os.makedirs(workdir, exist_ok=True)
        self.conf_dir = os.path.join(workdir, "conf")  # empty: no stray spark-defaults.conf
        os.makedirs(self.conf_dir, exist_ok=True)
        base = {
            k: v
            for k, v in (env if env is not None else os.environ).items()
            if k not in ("SPARK_LOCAL_IP", "SPARK_MASTER_HOST", "SPARK_PUBLIC_DNS")
        }
        base.update(
            SPARK_HOME=self.home,
            SPARK_CONF_DIR=self.conf_dir,
            PYSPARK_PYTHON=sys.executable,
            SPARK_DAEMON_MEMORY="384m",
            SPARK_LOG_DIR=os.path.join(workdir, "logs"),
        )
        self.env = base
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, str] = {}
        spark_class = os.path.join(self.home, "bin", "spark-class")
        addr = bed.addr(master)
        self.url = f"spark://{addr}:{self.MASTER_PORT}"
        self.webui = f"http://{addr}:{self.WEBUI_PORT}"
        try:
            self._start(
                master,
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    addr,
                    "--port",
                    str(self.MASTER_PORT),
                    "--webui-port",
                    str(self.WEBUI_PORT),
                ],
                dict(base, SPARK_LOCAL_IP=addr),
            )
            for host in self.worker_hosts:
                wdir = os.path.join(workdir, f"work-{host}")
                os.makedirs(wdir, exist_ok=True)
                self._start(
                    host,
                    [
                        spark_class,
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        bed.addr(host),
                        "--cores",
                        "1",
                        "--memory",
                        worker_memory,
                        "--work-dir",
                        wdir,
                        "--webui-port",
                        str(self.WORKER_WEBUI_PORT),
                        self.url,
                    ],
                    dict(base, SPARK_LOCAL_IP=bed.addr(host), SPARK_LOCAL_DIRS=wdir),
                )
            poll(self._all_alive, timeout, 0.5, f"{len(self.worker_hosts)} ALIVE workers at {self.webui}/json/")
        except BaseException:
            self.stop()
            raise

    def _start(self, host: str, argv: list, env: dict) -> None:
        log = os.path.join(self.workdir, f"{host}.log")
        self.logs[host] = log
        with open(log, "ab") as out:
            self.procs[host] = self.bed.run(host, argv, env, stdout=out, stderr=subprocess.STDOUT)

    def status(self) -> dict:
        return http_json(f"{self.webui}/json/")  # type: ignore[return-value]

    def _all_alive(self) -> bool:
        for host, proc in self.procs.items():
            if proc.poll() is not None:
                raise BedError(f"spark on {host} exited {proc.returncode}: {self.tail(host)}")
        workers = self.status().get("workers", [])
        return sum(1 for w in workers if w.get("state") == "ALIVE") >= len(self.worker_hosts)

    def tail(self, host: str, chars: int = 3000) -> str:
        try:
            with open(self.logs[host], errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        for host in reversed(list(self.procs)):
            NetBed.stop(self.procs[host], timeout=15)


def temp_dir(prefix: str = "spark-zmq-bed-") -> str:
    return tempfile.mkdtemp(prefix=prefix)
