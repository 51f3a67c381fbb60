"""The address executors on other hosts use to reach this driver (the spool fetch service).

Why: the fetch service must listen on an address that executors can reach, and never on a
wildcard (it hands out the stream). A host's own name often resolves to loopback
(Debian's ``127.0.1.1``, many cloud images' ``127.0.0.1``): advertising that sends every
read task of a cluster to its own host, where nothing answers. Spark met the same problem
for the driver's RPC endpoint and solved it in this order, which this module follows, so
the fetch service is reachable exactly when Spark's driver is:

1. ``spark.driver.host`` (the user's explicit answer; Spark on Kubernetes sets it too);
2. ``SPARK_LOCAL_IP`` (this process's environment, else the SparkSubmit JVM's);
3. the host's name, when it resolves to an address that is not loopback;
4. the address this host uses to reach Spark's master (a route lookup: no packet is sent),
   then the address of the default route: the interface a cluster's traffic takes;
5. loopback, with a warning when the master is not local.

The option ``spoolServerHost`` overrides all of it. The Spark configuration is read from
the SparkSubmit JVM that started this process (``locality.spark_conf``), since Spark
passes none to a Python data source.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from .. import procstat
from .locality import executors_share_host, submit_conf, submit_process

__all__ = ["DriverHost", "driver_host", "fetch_service_host", "is_loopback"]

log = logging.getLogger(__name__)

#: a documentation address (TEST-NET-1): a UDP "connect" to it only asks the kernel for the
#: default route's source address; nothing is sent
_ROUTE_PROBE = "192.0.2.1"


@dataclass(frozen=True)
class DriverHost:
    """The address to advertise, and where it came from (for messages)."""

    address: str
    source: str
    #: Spark's master as the driver's configuration names it (``None``: unknown)
    master: str | None = None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.address)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is, or resolves only to, loopback."""
    name = host.strip().strip("[]")
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(socket.gethostbyname(name)).is_loopback
    except (OSError, ValueError):
        return False


def _route_source(destination: str) -> str | None:
    """The local address the kernel would use to reach ``destination`` (no packet sent)."""
    try:
        infos = socket.getaddrinfo(destination, 9, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.connect(address)
                local = probe.getsockname()[0]
        except OSError:
            continue
        if not is_loopback(local):
            return local
    return None


def _master_hosts(master: str) -> list[str]:
    """The hosts in a master URL (``spark://a:7077,b:7077``, ``k8s://https://api:443``)."""
    master = master.strip()
    if master.startswith("k8s://"):
        master = master[len("k8s://") :]
        if "://" not in master:
            master = "https://" + master
    if master.startswith("spark://"):
        return [part.rsplit(":", 1)[0].strip("[]") for part in master[len("spark://") :].split(",") if part]
    try:
        host = urlsplit(master).hostname
    except ValueError:
        return []
    return [host] if host else []


def driver_host(pid: int | None = None) -> DriverHost:
    """The address executors should use to reach this driver (see the module)."""
    submit = submit_process(pid)  # the ancestors are walked once: conf and environment both come from it
    conf = submit_conf(submit)
    master = conf.get("spark.master")
    if master is not None and executors_share_host(master):
        # every executor is on this host: nothing needs to listen beyond it
        return DriverHost("127.0.0.1", f"the local master {master!r}", master)
    if conf.get("spark.driver.host"):
        return DriverHost(conf["spark.driver.host"], "spark.driver.host", master)
    for environment, whose in (
        (os.environ, "this process"),
        (procstat.environ(submit) if submit else {}, "the Spark driver"),
    ):
        if environment.get("SPARK_LOCAL_IP"):
            return DriverHost(environment["SPARK_LOCAL_IP"], f"SPARK_LOCAL_IP of {whose}", master)
    try:
        resolved: str | None = socket.gethostbyname(socket.gethostname())
    except OSError:
        resolved = None
    if resolved and not is_loopback(resolved):
        return DriverHost(resolved, f"the host name {socket.gethostname()!r}", master)
    for master_host in _master_hosts(master or ""):
        local = _route_source(master_host)
        if local:
            return DriverHost(local, f"the route to Spark's master {master_host}", master)
    local = _route_source(_ROUTE_PROBE)
    if local:
        return DriverHost(local, "the default route", master)
    return DriverHost(resolved or "127.0.0.1", "loopback (no other address found)", master)


def fetch_service_host(configured: str | None) -> str:
    """The address the spool fetch service listens on and advertises: option
    ``spoolServerHost`` when given, else ``driver_host()``; a loopback answer while Spark's
    master is not known to be local is logged at WARN, since executors elsewhere cannot
    reach it."""
    if configured:
        return configured
    found = driver_host()
    master = found.master
    if found.loopback and not (master is not None and executors_share_host(master)):
        log.warning(
            "the spool fetch service listens on %s (%s), a loopback address: executors on other hosts "
            "cannot reach it and their read tasks will fail; set option spoolServerHost (or Spark's "
            "spark.driver.host) to this driver's address that executors reach (Spark master: %s)",
            found.address,
            found.source,
            master or "unknown",
        )
    else:
        log.info("the spool fetch service listens on %s (from %s)", found.address, found.source)
    return found.address
