"""Shared helpers for tests that drive the connector through Spark on real sockets."""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa
import zmq


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now, below the kernel's ephemeral
    range (for endpoints that a child process or Spark binds; ``spark_zmq.free_ports`` says why)."""
    from spark_zmq.free_ports import free_tcp_ports

    return free_tcp_ports(n)


def free_port_range(n: int) -> int:
    """The first of ``n`` consecutive TCP ports free on 127.0.0.1 now (a port range option)."""
    import socket

    for _ in range(200):
        (first,) = free_ports(1)
        held = []
        try:
            for port in range(first, first + n):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise RuntimeError(f"no {n} consecutive free ports")


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05):
    """Poll ``predicate`` until it is truthy; fail naming ``what`` after ``timeout`` seconds.
    A bounded retry loop on an observable condition, not a sleep standing in for one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


OPEN_PRODUCERS: list = []


class Producer(threading.Thread):
    """A plain pyzmq PUSH (or PUB) producer on its own thread, sending given messages.

    Its socket stays open until the test ends (``close_producers``): libzmq drops the queue
    of a socket closed before its connection was ever made, so closing right after the
    last send would lose messages whenever the query binds late.
    """

    def __init__(
        self,
        endpoint: str,
        messages: Iterable,
        *,
        socket_type: int = zmq.PUSH,
        hwm: int = 100_000,
        bind: bool = False,
        rate: float | None = None,
        sockopts: dict | None = None,
        context: zmq.Context | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.context = context or zmq.Context.instance()
        self.socket = self.context.socket(socket_type)
        for option, value in (sockopts or {}).items():  # e.g. CURVE keys, before connect/bind
            self.socket.setsockopt(option, value)
        self.socket.setsockopt(zmq.SNDHWM, hwm)
        self.socket.setsockopt(zmq.LINGER, 5000)
        self.socket.setsockopt(zmq.RECONNECT_IVL, 20)
        (self.socket.bind if bind else self.socket.connect)(endpoint)
        self.messages = messages
        self.sent = 0
        self.blocked = 0
        self.error: BaseException | None = None
        self.stop_flag = threading.Event()
        self.rate = rate  # messages/s: shapes the load (pacing), never used to synchronise
        OPEN_PRODUCERS.append(self)

    def run(self) -> None:
        started = time.monotonic()
        try:
            for message in self.messages:
                if self.rate and self.sent % 100 == 0:
                    ahead = started + self.sent / self.rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
                while True:
                    try:
                        if isinstance(message, (list, tuple)):
                            self.socket.send_multipart(message, zmq.NOBLOCK)
                        else:
                            self.socket.send(message, zmq.NOBLOCK)
                        break
                    except zmq.Again:
                        self.blocked += 1
                        if self.stop_flag.is_set():
                            return
                        self.socket.poll(50, zmq.POLLOUT)
                self.sent += 1
                if self.stop_flag.is_set():
                    return
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self, timeout: float = 120) -> None:
        self.join(timeout)
        assert not self.is_alive(), f"producer still sending after {timeout}s ({self.sent} sent)"
        assert self.error is None, self.error


class Trickle:
    """Sends ``b"0"``, ``b"1"``, ... on ``sock`` from a thread until ``stop()``: a producer
    that never stops, for tests that break its connection mid-stream (``sent`` tells how far
    it got, so a test can ask for a message sent after the fault)."""

    def __init__(self, sock: zmq.Socket) -> None:
        self.socket = sock
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.socket.send(b"%d" % self.sent, zmq.NOBLOCK)
                self.sent += 1
            except zmq.Again:
                self._stop.wait(0.01)
                continue
            self._stop.wait(0.002)  # a steady trickle, not a flood

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def close_producers() -> None:
    while OPEN_PRODUCERS:
        producer = OPEN_PRODUCERS.pop()
        producer.stop_flag.set()
        if producer.ident is not None:  # a test may fail before it started the thread
            producer.join(5)
        producer.socket.close(0)


def numbered(n: int, start: int = 0, fmt: bytes = b"msg-%d") -> list[bytes]:
    return [fmt % i for i in range(start, start + n)]


def arrow_message(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def reader_pid(spool_dir: str) -> int:
    """The pid of the driver-side process that owns the spool (written in its LOCK file)."""
    from spark_zmq.ingest.spool_layout import LOCK_FILE

    with open(os.path.join(spool_dir, LOCK_FILE)) as f:
        return int(f.read().strip())


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds (its file descriptors' ``socket:[N]``
    links in /proc), to match against the kernel's socket tables (``/proc/net/tcp``'s 10th
    column)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """The TCP ``(address, port)`` pairs process ``pid`` listens on (from /proc: its socket
    inodes matched against the kernel's table of listening sockets)."""
    inodes = socket_inodes(pid)
    found = set()
    for table, width in (("tcp", 4), ("tcp6", 16)):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            if width == 4:
                host = ".".join(str(b) for b in raw[::-1])
            else:
                host = ":".join(raw[i : i + 4][::-1].hex() for i in range(0, 16, 4))
            found.add((host, int(port, 16)))
    return found


def peak_rss_bytes(pid: int) -> int:
    """The most resident memory process ``pid`` has had (VmHWM), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except FileNotFoundError:
                pass
    return total


def stop_all(queries: Sequence) -> None:
    for q in queries:
        try:
            q.stop()
        except Exception:
            pass


def run_available_now(spark, df, tmp_path, name: str, timeout: float = 240):
    """Run an AvailableNow query into a memory table to completion; return (rows, error
    text or None). Errors raised while the query is planned count as its error."""
    try:
        query = (
            df.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
    except Exception as exc:
        return None, str(exc)
    try:
        try:
            query.awaitTermination(timeout)
        except Exception:  # the query's failure, read from query.exception() below
            pass
        assert not query.isActive, "query did not finish"
        error = query.exception()
        return (None if error else spark.table(name).collect()), (str(error) if error else None)
    finally:
        stop_all([query])


class TcpConnection(NamedTuple):
    """One established TCP socket as ``/proc/net/tcp`` shows it (ports, queues, inode)."""

    local_port: int
    remote_port: int
    tx_queue: int  # written, not acknowledged by the peer
    rx_queue: int  # received, not read by the application
    inode: str
    line: str


def established_tcp() -> Iterable[TcpConnection]:
    """Every established TCP socket of this machine's network namespace (IPv4 and IPv6)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "01":
                continue
            local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
            tx, rx = (int(x, 16) for x in fields[4].split(":"))
            yield TcpConnection(local, remote, tx, rx, fields[9], line)


def tcp_receive_buffer(port: int) -> int:
    """The kernel receive buffer (``ss``'s ``rb``, bytes) of the established TCP connection whose
    local port is ``port`` (0 when there is none)."""
    import subprocess

    out = subprocess.run(
        ["ss", "-tmnH", "state", "established", f"( sport = :{port} )"], capture_output=True, text=True, timeout=10
    ).stdout
    marks = [part for part in out.replace("(", ",").replace(")", ",").split(",") if part.startswith("rb")]
    return int(marks[0][2:]) if marks else 0


def settled(read: Callable[[], int], what: str, settle: float = 0.5, timeout: float = 60) -> int:
    """``read()`` once it returned the same value for ``settle`` seconds (readings 50 ms
    apart); fails naming ``what`` if that takes longer than ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    value, since = read(), time.monotonic()
    while time.monotonic() - since < settle:
        assert time.monotonic() < deadline, f"{what} never settled"
        pause.wait(0.05)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def examples(n: int) -> int:
    """``n`` Hypothesis examples under the "ci" profile, proportionally fewer under "dev"
    (the inner loop's; see conftest), never fewer than 5."""
    from hypothesis import settings

    return max(5, n * settings.default.max_examples // 100)


class SocketEvents:
    """A libzmq socket monitor (``zmq_socket_monitor``) for tests: every event read is
    counted in ``seen`` and kept in ``events`` (pyzmq's parsed dicts), and waits are
    bounded. ``wait_for(event)`` returns once ``count`` such events came (or fails naming
    what did come); ``quiet(seconds)`` reads until nothing comes for that long and returns
    the event numbers read, for a test that checks that something did NOT happen."""

    def __init__(self, sock: zmq.Socket, events: int = zmq.EVENT_ALL) -> None:
        from zmq.utils.monitor import recv_monitor_message

        raw = getattr(sock, "zmq_socket", sock)  # a pattern class, or a pyzmq socket
        self._raw = raw
        self._recv = recv_monitor_message
        self._mon = raw.get_monitor_socket(events)
        self.seen: collections.Counter[int] = collections.Counter()
        self.events: list[dict] = []

    def _take(self, timeout: float) -> dict | None:
        if not self._mon.poll(max(0, int(timeout * 1000))):
            return None
        message = self._recv(self._mon)
        self.seen[message["event"]] += 1
        self.events.append(message)
        return message

    def wait_for(self, event: int, count: int = 1, timeout: float = 10.0) -> dict:
        """The ``count``-th ``event`` (counting those already read), within ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.seen[event] < count:
            left = deadline - time.monotonic()
            if left <= 0 or self._take(left) is None:
                raise AssertionError(
                    f"socket monitor: {self.seen[event]} of {count} event(s) {event} within "
                    f"{timeout} s (events seen: {dict(self.seen)})"
                )
        return [m for m in self.events if m["event"] == event][count - 1]

    def came(self, event: int, count: int = 1, timeout: float = 10.0) -> bool:
        """Whether ``count`` events ``event`` (in all) came within ``timeout``."""
        try:
            self.wait_for(event, count, timeout)
            return True
        except AssertionError:
            return False

    def pump(self) -> collections.Counter[int]:
        """Read what came so far, without waiting; ``seen``."""
        while self._take(0) is not None:
            pass
        return self.seen

    def values(self, event: int) -> list[int]:
        """The value of each ``event`` read so far (an errno, a protocol error, a descriptor)."""
        return [m["value"] for m in self.events if m["event"] == event]

    def quiet(self, seconds: float = 0.3) -> list[int]:
        """The events read until none came for ``seconds``."""
        start = len(self.events)
        while self._take(seconds) is not None:
            pass
        return [m["event"] for m in self.events[start:]]

    def close(self) -> None:
        try:
            self._raw.disable_monitor()
        except zmq.ZMQError:
            pass
        self._mon.close(linger=0)

    def __enter__(self) -> SocketEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class NotZeroMQ:
    """A TCP server that accepts, writes a line of HTTP and closes: counts the connections."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.accepted: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(time.monotonic())
            try:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()
