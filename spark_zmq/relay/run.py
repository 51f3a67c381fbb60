"""Running a relay until it is told to stop: what ``spark-zmq relay`` does.

The relay prints one ``ready`` line on stdout once its sockets are bound and it serves
(a supervisor or a test waits for it instead of guessing), receives and spools until
SIGTERM or SIGINT, then drains what its sockets hold into the spool and exits 0. A
receiver that fails (not a full disk, which it waits out) ends the relay with exit code 1
and the reason on stderr, so a service manager restarts it; the spool survives.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import BinaryIO

from ..ingest.config import IngestConfig
from ..patterns.curve import Curve
from ..patterns.deadlines import IDLE_SLICE_S
from .server import Relay

__all__ = ["serve", "read_ready", "READY"]

#: what a relay prints on stdout, then its description as JSON, once it serves
READY = b"ready "

log = logging.getLogger(__name__)

#: how often the main thread looks at the receivers, its spool directory and its parent
#: while it waits for a signal: an idle relay wakes this seldom; a signal, or the parent's
#: end (``parent_pipe``), wakes it at once
_WATCH_S = IDLE_SLICE_S


def _identity(path: str) -> tuple[int, int] | None:
    """Which directory ``path`` is (device and inode), ``None`` when there is none: a spool
    directory deleted and made again by a restarted query is another one."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _watch_parent(pipe: BinaryIO, gone: threading.Event, stop: threading.Event) -> None:
    """Set ``gone`` and ``stop`` when the parent's end of ``pipe`` closes: the parent wrote
    the configuration and keeps the pipe open for as long as it lives, so end of file
    means it exited, however it died (``kill -9`` included)."""
    try:
        while pipe.read(4096):
            pass
    except (OSError, ValueError):
        pass
    gone.set()
    stop.set()


def serve(
    config: IngestConfig,
    listen: str | list[str],
    listen_curve: Curve | None = None,
    parent_pid: int | None = None,
    start_receivers: bool = True,
    linger_s: float = 0.0,
    retention_bytes: int | None = None,
    retention_s: float | None = None,
    metrics: str | None = None,
    parent_pipe: BinaryIO | None = None,
) -> int:
    """Run a relay until SIGTERM/SIGINT (returns 0) or a receiver failure (returns 1).
    With ``parent_pid`` (a query's receiver process) it also stops, draining, once no
    query needs it: with ``linger_s`` 0 when that process is gone (its port and spool are
    then free for the restarted query); else when no query has held its lease for
    ``linger_s`` seconds, so a query stopped and restarted within that time (a deploy)
    finds its receiver still receiving and attaches to it: nothing is lost in between.
    ``retention_bytes`` and ``retention_s`` bound what it keeps for readers that lag
    (``Relay``). ``metrics``: ``HOST:PORT`` to serve its Prometheus metrics on
    (``spark_zmq.metrics``; the ``ready`` line says where). ``parent_pipe``: a pipe the
    parent holds open while it lives (a query's receiver process's stdin), so the relay
    learns of its parent's end at once instead of at its next look."""
    stop = threading.Event()
    parent_gone = threading.Event()
    drain = True
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        relay = Relay(
            config,
            listen,
            listen_curve=listen_curve,
            start_receivers=start_receivers,
            retention_bytes=retention_bytes,
            retention_s=retention_s,
            bind_reader_keys=parent_pid is None,
        )
        spool_identity = _identity(config.spool_dir)
        scrape = None
        try:
            ready = {
                "listen": relay.listen,
                "spool": relay.ingest.spool.spool_id,
                "spoolDir": config.spool_dir,
                "channels": [str(e) for e in config.endpoints],
            }
            if metrics is not None:
                from ..metrics import relay_metrics, serve_metrics

                scrape = serve_metrics(metrics, relay_metrics(relay))
                ready["metrics"] = scrape.address
            print(READY.decode() + json.dumps(ready), flush=True)
            if parent_pipe is not None and parent_pid is not None and linger_s <= 0:
                threading.Thread(
                    target=_watch_parent, args=(parent_pipe, parent_gone, stop), name="zmq-relay-parent", daemon=True
                ).start()
            wait_s = _WATCH_S
            while not stop.wait(wait_s):
                wait_s = _WATCH_S
                if parent_pid is not None and linger_s <= 0 and os.getppid() != parent_pid:
                    log.warning("relay: the query that started it is gone; stopping")
                    return 0
                lingers = parent_pid is not None and linger_s > 0
                unheld = relay.readers.unheld_for() if lingers else None
                if lingers and _identity(config.spool_dir) != spool_identity:
                    # deleted with what it held (and perhaps made again by the query that
                    # wants its port): nothing to drain into, and its port is wanted
                    log.warning("relay: its spool directory %s is gone; stopping", config.spool_dir)
                    drain = False
                    return 0
                if unheld is not None and unheld > linger_s:
                    log.warning("relay: no query has read it for %.0f s (receiverLingerSeconds); stopping", unheld)
                    return 0
                if unheld is not None:  # look again when its lingering time is up, not later
                    wait_s = min(_WATCH_S, max(0.05, linger_s - unheld + 0.01))
                failure = relay.failed()
                if failure is not None:
                    print(f"error: a receiver of the relay failed: {failure}", file=sys.stderr, flush=True)
                    return 1
            if parent_gone.is_set():
                log.warning("relay: the query that started it is gone; stopping")
                return 0
            log.info("relay: stopping (signal); draining the sockets into the spool")
            return 0
        finally:
            if scrape is not None:
                scrape.close()
            relay.stop(drain=drain)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def read_ready(process: subprocess.Popen, timeout_s: float) -> dict | None:
    """The description a relay child prints in its ``ready`` line (read from its stdout
    pipe), or ``None`` when it exits or prints anything else first; ``TimeoutError`` when
    it prints nothing for ``timeout_s``. Whoever starts a relay waits on this, never on a
    sleep."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        readable, _, _ = select.select([process.stdout], [], [], 0.1)
        if readable:
            line = process.stdout.readline()
            return json.loads(line[len(READY) :]) if line.startswith(READY) else None
        if process.poll() is not None:
            return None
    raise TimeoutError(f"the relay printed nothing within {timeout_s:.0f} s")
