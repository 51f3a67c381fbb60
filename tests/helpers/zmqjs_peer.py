"""Drive libzmq itself, through zeromq.js (tests/zmqjs/peer.js), as a test peer.

The npm package ``zeromq`` 6.8.0 ships a prebuilt libzmq 4.3.5 built with the draft API, so
it has real SCATTER and GATHER sockets (pyzmq's wheel here has none) and CURVE.  Tests use
it to check the connector against a peer nobody in this project wrote::

    from zmqjs_peer import NodePeer, skip_unless_node

    def test_something():
        skip_unless_node()
        with NodePeer.start("scatter", bind=["tcp://127.0.0.1:*"], count=10, size=16) as peer:
            endpoint = peer.endpoints[0]
            ...                              # connect the connector's GATHER to it
            assert peer.wait_sent(10)["count"] == 10

The package is installed on first use (``npm ci`` in tests/zmqjs, once per machine even with
several pytest processes); ``.ci/run`` installs it up front.  With ``SPARK_ZMQ_REQUIRE_NODE=1``
(set by ``.ci/run``) an unavailable peer fails the test instead of skipping it, so CI never
goes green by skipping these tests.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

ZMQJS_DIR = Path(__file__).resolve().parents[1] / "zmqjs"
PEER_JS = ZMQJS_DIR / "peer.js"
ZEROMQ_VERSION = "6.8.0"
INSTALL_LOCK = ZMQJS_DIR / ".install.lock"
SENDERS = ("scatter", "push")
RECEIVERS = ("gather", "pull")
#: answer requests with their body, ``prefix`` in front: a REP socket, or a REQ worker of a
#: load-balancing broker (sends READY first, keeps the envelope)
SERVERS = ("rep", "req-worker")

# Loads the addon the way peer.js does and reports what the bundled libzmq can do.
_PROBE_JS = (
    'const z = require("zeromq");'
    "process.stdout.write(JSON.stringify({version: z.version, capability: z.capability,"
    ' package: require("zeromq/package.json").version}))'
)


def payload(i: int, size: int | None = None, prefix: str = "") -> bytes:
    """The payload a node sender sends as message ``i`` (0-based): PREFIX, decimal i, b"-",
    padded with b"x" to ``size`` bytes in all (never truncated)."""
    head = f"{prefix}{i}-".encode()
    return head + b"x" * max(0, (size or 0) - len(head))


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _install_needed() -> bool:
    manifest = ZMQJS_DIR / "node_modules" / "zeromq" / "package.json"
    try:
        return json.loads(manifest.read_text())["version"] != ZEROMQ_VERSION
    except (OSError, ValueError, KeyError):
        return True


def ensure_installed() -> str | None:
    """Install zeromq.js in tests/zmqjs if needed; return None when node peers can run, else
    the reason they cannot (node/npm missing, npm failed, no draft or CURVE support)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        return "node is not installed (apt-get install nodejs npm)"
    if _install_needed():
        if npm is None:
            return "npm is not installed (apt-get install npm)"
        # One installer per machine: others wait on the lock, then find it installed.
        with open(INSTALL_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if _install_needed():
                    locked = (ZMQJS_DIR / "package-lock.json").exists()
                    # --ignore-scripts: zeromq's install script only checks that the prebuilt
                    # addon loads, else tries to compile libzmq (which needs the internet and
                    # a toolchain).  The probe below does that check instead, fast.
                    command = [npm, "ci" if locked else "install", "--no-audit", "--no-fund", "--ignore-scripts"]
                    try:
                        done = subprocess.run(
                            command,
                            cwd=ZMQJS_DIR,
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True,
                            timeout=600,
                        )
                    except subprocess.TimeoutExpired as exc:
                        return f"{' '.join(command[1:])} timed out:\n{_tail(exc.output or '')}"
                    if done.returncode != 0:
                        return (
                            f"{' '.join(command[1:])} failed ({done.returncode}) in {ZMQJS_DIR}:\n{_tail(done.stdout)}"
                        )
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    try:
        probe = subprocess.run(
            [node, "-e", _PROBE_JS], cwd=ZMQJS_DIR, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "loading zeromq.js timed out"
    if probe.returncode != 0:
        return f"zeromq.js does not load (prebuilt addon missing?):\n{_tail(probe.stderr)}"
    info = json.loads(probe.stdout)
    if info["package"] != ZEROMQ_VERSION:
        return f"zeromq.js {info['package']} installed, the harness expects {ZEROMQ_VERSION}"
    for capability in ("draft", "curve"):
        if not info["capability"].get(capability):
            return f"zeromq.js's libzmq {info['version']} lacks {capability}: {info['capability']}"
    return None


_availability: tuple | None = None
_availability_lock = threading.Lock()


def unavailable_reason() -> str | None:
    """``ensure_installed()``, run once per process."""
    global _availability
    with _availability_lock:
        if _availability is None:
            _availability = (ensure_installed(),)
        return _availability[0]


def node_peers_available() -> bool:
    return unavailable_reason() is None


def skip_unless_node() -> None:
    """Skip the calling test (or fixture) when node peers cannot run; fail it instead when
    SPARK_ZMQ_REQUIRE_NODE=1 (CI), where they must."""
    import pytest

    reason = unavailable_reason()
    if reason is None:
        return
    if os.environ.get("SPARK_ZMQ_REQUIRE_NODE") == "1":
        pytest.fail(f"node peers required (SPARK_ZMQ_REQUIRE_NODE=1) but unavailable: {reason}")
    pytest.skip(f"node peers unavailable: {reason}")


class PeerError(RuntimeError):
    """The node peer failed to start, exited, or reported an error."""


def _key(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NodePeer:
    """One running ``node peer.js``: a single libzmq socket of type scatter, gather, push,
    pull, rep or req-worker.  Start it with :meth:`start`; use it as a context manager
    (always killed)."""

    def __init__(self, args: Sequence[str], kind: str, wrap: Callable[[list], list] | None = None) -> None:
        self.kind = kind
        self.args = list(args)
        self.endpoints: list = []
        self.returncode: int | None = None
        self._messages: list = []  # payloads: bytes, or list of bytes for multipart
        self._events: list = []  # every other event, in order
        self._stderr = collections.deque(maxlen=200)
        self._changed = threading.Condition()
        self._closed = False  # stdout reached EOF
        argv = ["node", str(PEER_JS), *self.args]
        self.process = subprocess.Popen(
            wrap(argv) if wrap is not None else argv,
            cwd=ZMQJS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self._reader = threading.Thread(target=self._read_stdout, daemon=True, name=f"node-{kind}-stdout")
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True, name=f"node-{kind}-stderr")
        self._reader.start()
        self._err_reader.start()

    # -- starting -----------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        type: str,
        bind: Iterable[str] = (),
        connect: Iterable[str] = (),
        *,
        count: int | None = None,
        size: int | None = None,
        prefix: str | None = None,
        sndhwm: int | None = None,
        rcvhwm: int | None = None,
        send_timeout: int | None = None,
        linger: int | None = None,
        curve_server: str | bytes | None = None,
        curve_public: str | bytes | None = None,
        curve_client: tuple | None = None,
        curve_server_key: str | bytes | None = None,
        timeout: float = 30,
        wrap: Callable[[list], list] | None = None,
    ) -> NodePeer:
        """Start a peer and wait for its ``ready`` line (all binds/connects done).

        ``bind``/``connect``: endpoints (a string is taken as one); ``tcp://127.0.0.1:*``
        binds a free port, see :attr:`endpoints`.  Senders (scatter, push) need ``count``
        and send :func:`payload` (i, size, prefix) for i in 0..count-1.  Servers (rep,
        req-worker) answer each request with its body, ``prefix`` in front, until ``count``
        requests are answered (``done``) or :meth:`stop`; :meth:`messages` returns the
        request bodies.  ``send_timeout``
        and ``linger`` are milliseconds.  CURVE: ``curve_server=SECRET`` (``curve_public``
        optional, derived with pyzmq when omitted), or ``curve_client=(PUBLIC, SECRET)``
        with ``curve_server_key=PUBLIC``; keys are Z85, str or bytes. ``wrap``: turns the
        command line into the one to run (e.g. the multi-host bed's ``command(host, argv)``,
        which runs it on another host).
        """
        if type not in SENDERS + RECEIVERS + SERVERS:
            raise ValueError(f"type must be one of {SENDERS + RECEIVERS + SERVERS}, not {type!r}")
        bind = [bind] if isinstance(bind, str) else list(bind)
        connect = [connect] if isinstance(connect, str) else list(connect)
        args = ["--type", type]
        for endpoint in bind:
            args += ["--bind", endpoint]
        for endpoint in connect:
            args += ["--connect", endpoint]
        for flag, value in (
            ("--count", count),
            ("--size", size),
            ("--prefix", prefix),
            ("--sndhwm", sndhwm),
            ("--rcvhwm", rcvhwm),
            ("--send-timeout", send_timeout),
            ("--linger", linger),
        ):
            if value is not None:
                args += [flag, str(value)]
        if curve_server is not None:
            if curve_public is None:
                import zmq

                curve_public = zmq.curve_public(
                    curve_server.encode() if isinstance(curve_server, str) else curve_server
                )
            args += ["--curve-server", _key(curve_server), "--curve-public", _key(curve_public)]
        if curve_client is not None:
            public, secret = curve_client
            args += ["--curve-client", f"{_key(public)}:{_key(secret)}"]
        if curve_server_key is not None:
            args += ["--curve-server-key", _key(curve_server_key)]
        peer = cls(args, type, wrap)
        try:
            ready = peer.wait_event("ready", timeout)
        except BaseException:
            peer.kill()
            raise
        peer.endpoints = list(ready["endpoints"])
        return peer

    # -- reading ------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        # Whole chunks, parsed under one lock and one notify: a line at a time (or a wake-up
        # of the waiting test per line) would cap a receiver far below 100,000 messages/s.
        rest = b""
        try:
            while True:
                chunk = self.process.stdout.read(1 << 16)  # unbuffered pipe: what is there
                if not chunk:
                    break
                *lines, rest = (rest + chunk).split(b"\n")
                with self._changed:
                    for line in lines:
                        self._take(line)
                    self._changed.notify_all()
        finally:
            self.returncode = self.process.wait()
            with self._changed:
                if rest.strip():
                    self._take(rest)
                self._closed = True
                self._changed.notify_all()

    def _take(self, line: bytes) -> None:
        try:
            event = json.loads(line)
        except ValueError:  # peer.js broke its contract: say so, keep draining
            event = {"event": "error", "message": f"stdout line is not JSON: {line!r}"}
        if event.get("event") in ("message", "request"):  # a server's requests are its messages
            if "hex" in event:
                self._messages.append(bytes.fromhex(event["hex"]))
            else:
                self._messages.append([bytes.fromhex(part) for part in event["parts"]])
        else:
            self._events.append(event)

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    @property
    def stderr(self) -> str:
        return "\n".join(self._stderr)

    def _describe(self) -> str:
        state = "running" if self.returncode is None else f"exited {self.returncode}"
        return (
            f"node peer {self.kind} ({state}; args {' '.join(self.args)}; "
            f"{len(self._messages)} messages; events {self._events})\nstderr:\n{self.stderr}"
        )

    def _wait(self, predicate, timeout: float, what: str, fail_on_error: bool = True):
        """Wait until ``predicate()`` returns non-None; PeerError if the peer exits first
        or (``fail_on_error``) reports an error, TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                value = predicate()
                if value is not None:
                    return value
                errors = [e for e in self._events if e.get("event") == "error"]
                if errors and fail_on_error:
                    problem, error = f"the peer reported {errors[0]}", PeerError
                    break
                if self._closed:
                    problem, error = "the peer exited first", PeerError
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    problem, error = f"timed out after {timeout}s", TimeoutError
                    break
                self._changed.wait(left)
        if error is PeerError:
            # A failing peer is exiting: let the stderr reader catch up for the message.
            self._err_reader.join(2)
        raise error(f"{what}: {problem}\n{self._describe()}")

    def wait_event(self, name: str, timeout: float = 30) -> dict:
        """The first event called ``name`` (ready, sent, done, stopped, error)."""
        return self._wait(
            lambda: next((e for e in self._events if e.get("event") == name), None),
            timeout,
            f"waiting for {name!r}",
            fail_on_error=name != "error",
        )

    @property
    def events(self) -> list:
        with self._changed:
            return list(self._events)

    @property
    def received(self) -> list:
        """Every payload received so far."""
        with self._changed:
            return list(self._messages)

    def messages(self, n: int, timeout: float = 30) -> list:
        """The first ``n`` payloads this receiver got (bytes; a list of bytes for a
        multipart message).  TimeoutError, saying how many came, if fewer arrive in time."""

        def first():
            return list(self._messages[:n]) if len(self._messages) >= n else None

        try:
            return self._wait(first, timeout, f"waiting for {n} messages")
        except (TimeoutError, PeerError) as exc:
            raise type(exc)(f"{len(self._messages)} of {n} messages came; {exc}") from None

    def wait_sent(self, timeout: float = 30) -> dict:
        """Wait for a sender's ``sent`` event (everything queued); PeerError on a send
        timeout (exit 3) or any other failure."""
        return self.wait_event("sent", timeout)

    def wait_exit(self, timeout: float = 30) -> int:
        """Wait for the process to exit (and its output to be read); its exit code."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the peer did not exit in {timeout}s\n{self._describe()}")
                self._changed.wait(left)
        return self.returncode

    # -- ending -------------------------------------------------------------------------

    def stop(self, timeout: float = 15) -> dict | None:
        """Send ``stop``, wait for a clean exit, return the last event (``stopped`` with the
        count so far, or ``sent``/``done`` if the peer had already finished).  A sender
        closes with its linger (default 5 s) for messages still queued."""
        try:
            self.process.stdin.write(b"stop\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # already exited
        code = self.wait_exit(timeout)
        if code != 0:
            raise PeerError(f"the peer exited {code} on stop\n{self._describe()}")
        with self._changed:
            return self._events[-1] if self._events else None

    def kill(self) -> None:
        """Kill the process (if still running) and reap it; idempotent."""
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(10)
        finally:
            try:
                self.process.stdin.close()
            except OSError:
                pass
            self._reader.join(10)
            self._err_reader.join(10)

    def __enter__(self) -> NodePeer:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def __repr__(self) -> str:
        return f"<NodePeer {self.kind} {self.endpoints} pid={self.process.pid}>"
