"""Receivers as child processes (option ``receivers=processes``): one relay per channel.

Why: receiver threads share the reader process's GIL, so with threads more channels mean
less throughput per channel; a process per channel puts each channel's receiving on a core
of its own. Each child is a relay (``spark_zmq.relay``) for one endpoint, with its own
spool in ``<spoolDir>/receiver-<channel>`` and its share of ``maxSpoolBytes``; the reader
reads them through the same machinery as standalone relays (``relays.RelayIngest``).

Security: a child listens on loopback (or, when executors may run on other hosts, on the
fetch service's address, never a wildcard), CURVE-only, with key pairs made for this query
and handed to the child on its stdin (one line of JSON, ``child.ChildConfig``: the child's
``IngestConfig`` and those keys; the reader's own options stay here); the client key travels
to read tasks as the driver's fetch keys do. Life: a child that exits (its reason is on its stderr, which goes to a file
in the spool directory) fails the query with that reason; a child whose parent is gone
drains and exits, so a restarted query can bind the ports again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from .. import procstat
from ..ingest.config import IngestConfig
from ..ingest.fetch import listen_candidates
from ..ingest.spool_files import private_dir
from ..options import SourceOptions
from ..patterns.curve import Curve
from ..patterns.curve_keys import KeyPair
from .child import ChildConfig
from .client import RelayClient, RelayError
from .messages import HelloRequest
from .protocol import LEASE_TTL_S
from .run import read_ready

__all__ = ["ReceiverProcesses", "ReceiverTarget"]

log = logging.getLogger(__name__)

#: how long a new receiver retries a port that a lingering one may be freeing (only while
#: another receiver process runs on the host: ``_other_receiver_processes``)
_PORT_RETRY_S = 10.0
#: how long a child may take to bind and open its spool (a previous owner may hold the
#: spool's lock for up to ``Spool.lock_wait_s`` while it drains)
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReceiverTarget:
    """Where the reader reaches one relay, and as whom."""

    address: str
    curve: Curve | None
    label: str


class _Child:
    """One receiver process: spawned by this reader (``process`` set) or found lingering
    from a query stopped before (``process`` ``None``: not our child, watched by pid)."""

    def __init__(self, pid: int, process: subprocess.Popen | None) -> None:
        self.pid = pid
        self.process = process

    def exit_code(self) -> int | None:
        """``None`` while it runs, else its exit code (-1 when not ours to wait for)."""
        if self.process is not None:
            return self.process.poll()
        return None if _is_receiver_process(self.pid) else -1


def _is_receiver_process(pid: int) -> bool:
    """Whether ``pid`` is a live receiver process (not a reused pid, not a zombie)."""
    return b"spark_zmq.relay.child" in procstat.cmdline(pid) and procstat.is_alive(pid)


def _port_holders(endpoint: str) -> list[int] | None:
    """Who listens on a TCP ``endpoint``'s port (``procstat.listening_on``); ``None`` when
    that cannot be told (not TCP, a named port, no ``/proc``)."""
    address = endpoint.lstrip("@>")
    port = address.rsplit(":", 1)[-1]
    if not address.startswith("tcp://") or not port.isdigit():
        return None
    return procstat.listening_on(int(port))


def _describe_holders(endpoint: str, pids: list[int]) -> str:
    """Who has the port, for the error: a query cannot receive there until they let it go."""
    who = "; ".join(
        f"pid {pid} ({b' '.join(procstat.cmdline(pid)).decode('utf-8', 'replace').strip()[:120]})" for pid in pids[:3]
    )
    return (
        f"{endpoint.lstrip('@>')} is held by another program, not a receiver of this connector ({who}): stop "
        "it or give this query another 'endpoints' address"
    )


def _other_receiver_processes(own: set[int]) -> bool:
    """Whether a receiver process not in ``own`` runs on this host: one a stopped query left
    lingering may be freeing a port the new one wants. With none, a port in use is held by
    something else, and waiting for it would only delay the query's failure."""
    running = procstat.pids()
    if running is None:
        return True  # cannot tell: wait as for a lingering one
    return any(pid not in own and _is_receiver_process(pid) for pid in running)


#: the source options a receiver process works with (the others are the reader's own:
#: admission control, failOnDataLoss, decoding, ...)
_RECEIVER_FIELDS = (
    "pattern",
    "endpoints",
    "format",
    "topics",
    "hwm",
    "max_message_bytes",
    "max_spool_bytes",
    "spool_dir",
    "spool_fsync",
    "receive_buffer_bytes",
    "curve_certificate",
    "curve_server_key",
    "curve_authorized_keys",
    "heartbeat_interval",
    "heartbeat_timeout",
    "heartbeat_ttl",
    "receiver_linger_seconds",
)


def _fingerprint(options: SourceOptions) -> str:
    """A digest of what a receiver process was started with: a lingering one is reused
    only by a query whose receivers would be the same (sets sorted, secrets hashed, never
    stored)."""

    def canonical(value: Any) -> Any:
        if isinstance(value, (set, frozenset)):
            return sorted(canonical(v) for v in value)
        if isinstance(value, (list, tuple)):
            return [canonical(v) for v in value]
        if isinstance(value, KeyPair):
            return [canonical(value.public_key), hashlib.sha256(value.secret_key).hexdigest()]
        if isinstance(value, bytes):
            return value.decode("latin-1")
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        return str(value)

    fields = {name: canonical(getattr(options, name)) for name in _RECEIVER_FIELDS}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class ReceiverProcesses:
    """The child relays of one query, one per endpoint.

    With ``receiverLingerSeconds`` > 0 a stopped query leaves them running: they keep
    receiving and spooling, and the restarted query (same ``spoolDir``, same options)
    attaches to them instead of starting new ones, so a restart loses nothing. What a
    restarted query needs to reach one (address, keys) is in ``receiver-<channel>.state``,
    private to the user as the spool is; a receiver nobody attaches to within the linger
    time drains into its spool and exits.
    """

    def __init__(self, options: SourceOptions, host: str = "127.0.0.1") -> None:
        private_dir(options.spool_dir)
        self.options = options
        self.children: list[_Child] = []
        self.targets: list[ReceiverTarget] = []
        self._logs: list[str] = []
        #: how many receivers were found lingering and reused (the others were started)
        self.reused = 0
        share = max(1 << 20, options.max_spool_bytes // max(1, len(options.endpoints)))
        try:
            for channel, endpoint in enumerate(options.endpoints):
                child_options = dataclasses.replace(
                    options,
                    endpoints=[endpoint],
                    spool_dir=os.path.join(options.spool_dir, f"receiver-{channel}"),
                    max_spool_bytes=share,
                    spool_access="local",
                    relays=[],
                )
                label = f"receiver process of channel {channel} ({endpoint})"
                self._logs.append(os.path.join(options.spool_dir, f"receiver-{channel}.log"))
                target = self._lingering(channel, _fingerprint(child_options), label)
                if target is None:
                    target = self._start(channel, str(endpoint), child_options, host, label)
                self.targets.append(target)
        except BaseException:
            self.stop(force=True)
            raise

    # -- state of a receiver process, for a restarted query ----------------------------------

    def _state_path(self, channel: int) -> str:
        return os.path.join(self.options.spool_dir, f"receiver-{channel}.state")

    def _write_state(self, channel: int, state: dict) -> None:
        path = self._state_path(channel)
        temp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(temp, path)

    def _lingering(self, channel: int, fingerprint: str, label: str) -> ReceiverTarget | None:
        """The receiver process a stopped query left for this channel, if it still runs
        with the same options (one with other options is stopped: it drains and exits)."""
        try:
            with open(self._state_path(channel), encoding="utf-8") as f:
                state = json.load(f)
            pid = int(state["pid"])
            keys = KeyPair(state["client_public"].encode(), state["client_secret"].encode())
            server_public = state["server_public"].encode()
            listen = str(state["listen"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if not _is_receiver_process(pid):
            return None
        target = ReceiverTarget(listen, Curve.client(keys, server_public), label)
        held = self._held(target)
        if held is None:  # it does not answer: not a receiver to attach to
            log.warning("the %s left by a stopped query does not answer; stopping it", label)
            self._terminate(pid)
            return None
        if state.get("fingerprint") != fingerprint:
            if held:
                raise RuntimeError(
                    f"spool directory {self.options.spool_dir!r} is in use by another running query (its {label}, "
                    f"pid {pid}, serves that query with other options; a query killed less than "
                    f"{LEASE_TTL_S:.0f} s ago still holds it); stop it, or give this query its own 'spoolDir' option"
                )
            log.warning("the %s left by a stopped query runs with other options; stopping it", label)
            self._terminate(pid)
            return None
        log.info("the %s is still receiving (left by a stopped query): attaching to it", label)
        self.children.append(_Child(pid, None))
        self.reused += 1
        return target

    @staticmethod
    def _held(target: ReceiverTarget) -> bool | None:
        """Whether a query holds the receiver's lease now (``None``: it does not answer, or
        not in this connector's protocol: not a receiver to attach to)."""
        client = RelayClient(target.address, uuid.uuid4().hex, curve=target.curve, timeout_s=5.0, label=target.label)
        try:
            return client.ask(HelloRequest()).held
        except RelayError:
            return None
        finally:
            client.close()

    @staticmethod
    def _terminate(pid: int, timeout: float = 30.0) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return
        deadline = time.monotonic() + timeout
        while _is_receiver_process(pid) and time.monotonic() < deadline:
            time.sleep(0.05)  # not our child: no wait() to block on
        if _is_receiver_process(pid):
            os.kill(pid, signal.SIGKILL)

    def _start(
        self, channel: int, endpoint: str, child_options: SourceOptions, host: str, label: str
    ) -> ReceiverTarget:
        server_keys, client_keys = KeyPair.generate(), KeyPair.generate()
        config = ChildConfig(
            IngestConfig.from_options(child_options),
            listen_candidates(host, self.options.spool_server_port),
            server_keys,
            client_keys.public_key,
            os.getpid(),
            self.options.receiver_linger_seconds,
        )
        deadline = time.monotonic() + _PORT_RETRY_S
        while True:
            try:
                address, pid = self._spawn(channel, endpoint, config)
                break
            except RuntimeError as exc:
                # a lingering receiver whose spool directory was deleted notices within
                # two seconds (its watch) and frees the port: try again for a moment
                in_use = "Address already in use" in str(exc) or "is in use" in str(exc)
                holders = _port_holders(endpoint) if in_use else None
                if holders and not any(_is_receiver_process(pid) for pid in holders):
                    raise RuntimeError(f"{exc}: {_describe_holders(endpoint, holders)}") from None
                lingering = in_use and (
                    holders is not None or _other_receiver_processes({c.pid for c in self.children})
                )
                if not lingering or time.monotonic() > deadline:
                    if lingering:
                        raise RuntimeError(
                            f"{exc}; a stopped query's receiver process keeps its port for "
                            "receiverLingerSeconds unless a query with the same spoolDir and options "
                            "attaches to it"
                        ) from None
                    raise
                self.children.pop()
                time.sleep(0.2)
        self._write_state(
            channel,
            {
                "pid": pid,
                "listen": address,
                "server_public": server_keys.public_key.decode(),
                "client_public": client_keys.public_key.decode(),
                "client_secret": client_keys.secret_key.decode(),
                "fingerprint": _fingerprint(child_options),
            },
        )
        return ReceiverTarget(address, Curve.client(client_keys, server_keys.public_key), label)

    def _spawn(self, channel: int, endpoint: str, config: ChildConfig) -> tuple[str, int]:
        stderr_path = self._logs[channel]
        fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            # a session of its own: a signal to the reader's process group (Ctrl-C on
            # spark-submit) must not take a lingering receiver with it
            child = subprocess.Popen(
                [sys.executable, "-m", "spark_zmq.relay.child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=fd,
                close_fds=True,
                start_new_session=True,
            )
        finally:
            os.close(fd)
        self.children.append(_Child(child.pid, child))
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(config.to_json())
        child.stdin.flush()  # kept open while this process lives: the child's sign that its parent is there
        try:
            ready = read_ready(child, START_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(
                f"the receiver process of channel {channel} ({endpoint}) failed to start "
                f"within {START_TIMEOUT_S:.0f} s: {self._reason(channel)}"
            ) from None
        if ready is None:
            child.wait(10)
            raise RuntimeError(
                f"the receiver process of channel {channel} ({endpoint}) failed to start: {self._reason(channel)}"
            )
        return ready["listen"], child.pid

    def _reason(self, channel: int) -> str:
        """The last lines the child wrote on stderr (its error)."""
        try:
            with open(self._logs[channel], "rb") as f:
                lines = [ln for ln in f.read()[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        code = self.children[channel].exit_code() if channel < len(self.children) else None
        text = " | ".join(lines[-3:]) or "no message"
        return text + ("" if code is None or code == -1 else f" (exit code {code})")

    def raise_if_failed(self) -> None:
        for channel, child in enumerate(self.children):
            if child.exit_code() is not None:
                raise RuntimeError(
                    f"the receiver process of channel {channel} ({self.options.endpoints[channel]}) "
                    f"exited: {self._reason(channel)}"
                )

    def stop(self, timeout: float = 15.0, *, force: bool = False) -> None:
        """A query that stops leaves its receivers lingering (``receiverLingerSeconds``),
        detached, for the restarted query; with ``force`` or no linger, SIGTERM every
        child (each drains its socket into its spool) and wait."""
        if self.options.receiver_linger_seconds > 0 and not force:
            for child in self.children:
                if child.process is not None and child.process.stdout is not None:
                    child.process.stdout.close()
            return
        for child in self.children:
            if child.exit_code() is None:
                try:
                    os.kill(child.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        for child in self.children:
            if child.process is None:
                self._terminate(child.pid, max(0.1, deadline - time.monotonic()))
                continue
            try:
                child.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("a receiver process did not stop within %.0f s; killing it", timeout)
                child.process.kill()
                child.process.wait(10)
            for pipe in (child.process.stdout, child.process.stdin):
                if pipe is not None:
                    pipe.close()
