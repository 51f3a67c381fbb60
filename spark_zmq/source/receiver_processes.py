"""Receivers as child processes (option ``receivers=processes``): one relay per channel.

Why: receiver threads share the reader process's GIL, so with threads more channels mean
less throughput per channel; a process per channel puts each channel's receiving on a core
of its own. Each child is a relay (``spark_zmq.relay``) for one endpoint, with its own
spool in ``<spoolDir>/receiver-<channel>`` and its share of ``maxSpoolBytes``; the reader
reads them through the same machinery as standalone relays (``relays.RelayIngest``).

Security: a child listens on loopback (or, when executors may run on other hosts, on the
fetch service's address, never a wildcard), CURVE-only, with key pairs made for this query
and handed to the child on its stdin; the client key travels to read tasks as the driver's
fetch keys do. Life: a child that exits (its reason is on its stderr, which goes to a file
in the spool directory) fails the query with that reason; a child whose parent is gone
drains and exits, so a restarted query can bind the ports again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

from ..options import SourceOptions
from ..patterns.curve import Curve, KeyPair
from ..relay.run import read_ready
from .fetch import _bind_address
from .spool import private_dir

__all__ = ["ReceiverProcesses", "ReceiverTarget"]

log = logging.getLogger(__name__)

#: how long a child may take to bind and open its spool (a previous owner may hold the
#: spool's lock for up to ``Spool.lock_wait_s`` while it drains)
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReceiverTarget:
    """Where the reader reaches one relay, and as whom."""

    address: str
    curve: Optional[Curve]
    label: str


class ReceiverProcesses:
    """The child relays of one query, one per endpoint."""

    def __init__(self, options: SourceOptions, host: str = "127.0.0.1") -> None:
        private_dir(options.spool_dir)
        self.options = options
        self.children: list[subprocess.Popen] = []
        self.targets: list[ReceiverTarget] = []
        self._logs: list[str] = []
        client_keys = KeyPair.generate()
        share = max(1 << 20, options.max_spool_bytes // max(1, len(options.endpoints)))
        try:
            for channel, endpoint in enumerate(options.endpoints):
                server_keys = KeyPair.generate()
                child_options = dataclasses.replace(
                    options, endpoints=[endpoint], spool_dir=os.path.join(options.spool_dir, f"receiver-{channel}"),
                    max_spool_bytes=share, spool_access="local", relays=[],
                )
                config = {"options": child_options, "listen": f"tcp://{_bind_address(host)}:*",
                          "server_keys": (server_keys.public_key, server_keys.secret_key),
                          "client_public": client_keys.public_key, "parent": os.getpid()}
                address = self._spawn(channel, str(endpoint), config)
                self.targets.append(ReceiverTarget(address, Curve.client(client_keys, server_keys.public_key),
                                                   f"receiver process of channel {channel} ({endpoint})"))
        except BaseException:
            self.stop()
            raise

    def _spawn(self, channel: int, endpoint: str, config: dict) -> str:
        stderr_path = os.path.join(self.options.spool_dir, f"receiver-{channel}.log")
        fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            child = subprocess.Popen([sys.executable, "-m", "spark_zmq.relay.child"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=fd, close_fds=True)
        finally:
            os.close(fd)
        self.children.append(child)
        self._logs.append(stderr_path)
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(pickle.dumps(config))
        child.stdin.close()
        try:
            ready = read_ready(child, START_TIMEOUT_S)
        except TimeoutError:
            raise RuntimeError(f"the receiver process of channel {channel} ({endpoint}) failed to start "
                               f"within {START_TIMEOUT_S:.0f} s: {self._reason(channel)}") from None
        if ready is None:
            child.wait(10)
            raise RuntimeError(f"the receiver process of channel {channel} ({endpoint}) failed to start: "
                               f"{self._reason(channel)}")
        return ready["listen"]

    def _reason(self, channel: int) -> str:
        """The last lines the child wrote on stderr (its error)."""
        try:
            with open(self._logs[channel], "rb") as f:
                lines = [ln for ln in f.read()[-4096:].decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        code = self.children[channel].poll()
        text = " | ".join(lines[-3:]) or "no message"
        return text + ("" if code is None else f" (exit code {code})")

    def raise_if_failed(self) -> None:
        for channel, child in enumerate(self.children):
            if child.poll() is not None:
                raise RuntimeError(f"the receiver process of channel {channel} ({self.options.endpoints[channel]}) "
                                   f"exited: {self._reason(channel)}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every child (each drains its socket into its spool), then wait."""
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in self.children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("a receiver process did not stop within %.0f s; killing it", timeout)
                child.kill()
                child.wait(10)
            if child.stdout is not None:
                child.stdout.close()
