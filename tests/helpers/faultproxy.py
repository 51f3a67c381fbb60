"""A userspace TCP proxy that injects network faults between two real sockets.

Why it exists: several failures a ZeroMQ deployment meets cannot be produced by closing
a socket or killing a process, and need the bytes on the wire under the test's control:

* a **silent peer** (the network drops everything: no FIN, no RST; only heartbeats or a
  timeout can tell), ``blackhole``;
* a **one-way cut** (one direction lost, the other still delivers), ``drop_direction``;
* **latency**, ``delay``;
* a **reset** (RST to both ends), ``reset``; a **graceful close** (FIN to both), ``close``;
* **one frame deleted (or sent twice) from a ZMTP stream**, as a buggy or hostile
  middlebox would, ``drop_frame`` / ``duplicate_frame``; a **cut at an exact frame** (the
  connection goes silent there, e.g. between two replies of a request-reply exchange),
  ``cut_at_frame``; the proxy follows the ZMTP 3.x
  framing (64-byte greeting, then frames) across TCP chunk boundaries, so exactly one
  whole frame goes, however the stream was chunked.

Everything happens on real TCP sockets on the loopback, so libzmq (or our own ZMTP
engine) sees genuine kernel behaviour: a black hole leaves the peers' connections
established and their kernel buffers filling, a reset is a real RST
(``SO_LINGER (1, 0)`` then ``close``).

Use::

    with FaultProxy("127.0.0.1", pull_port) as proxy:
        push.connect(proxy.endpoint)
        conn = proxy.wait_for_connections(1, timeout=5)[0]
        conn.blackhole()          # or proxy.blackhole_all(), conn.reset(), ...

One background thread runs a ``selectors`` loop over non-blocking sockets; each accepted
client connection gets one upstream connection to the target. "up" is client to target,
"down" is target to client. Control methods may be called from any thread: they take
the proxy's lock, which the loop holds while it touches sockets, so a mode change has
taken effect for every byte read after the call returns. Waiting is on a ``Condition``
notified whenever the loop did something (no sleeps).
"""

from __future__ import annotations

import collections
import errno
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "FaultProxy",
    "Connection",
    "Mode",
    "FrameFault",
    "PASS",
    "delay",
    "blackhole",
    "drop_direction",
    "is_data",
    "is_command",
    "is_curve_message",
    "command_named",
    "UP",
    "DOWN",
]

UP = "up"  # client -> target
DOWN = "down"  # target -> client
_DIRECTIONS = (UP, DOWN)

# ZMTP 3.x framing (RFC 23/37).
GREETING_SIZE = 64
FLAG_MORE = 0x01
FLAG_LONG = 0x02
FLAG_COMMAND = 0x04

_CHUNK = 256 * 1024  # one recv
_MAX_PENDING = 8 * 1024 * 1024  # per direction: stop reading the source above this
_MAX_FRAME_BUFFER = 256 * 1024 * 1024  # a frame larger than this passes unbuffered

Predicate = Callable[[int, bytes], bool]


# --------------------------------------------------------------------------- predicates


def is_data(flags: int, body: bytes) -> bool:
    """A data (message) frame: not a COMMAND. With the NULL mechanism, one message part."""
    return not flags & FLAG_COMMAND


def is_command(flags: int, body: bytes) -> bool:
    """A COMMAND frame (READY, PING, PONG, HELLO, WELCOME, INITIATE, ERROR, ...)."""
    return bool(flags & FLAG_COMMAND)


def is_curve_message(flags: int, body: bytes) -> bool:
    """A CURVE MESSAGE box (one encrypted message part, after the handshake). libzmq sends
    it as a data frame whose body starts with the command name ``\\x07MESSAGE``."""
    return not flags & FLAG_COMMAND and body.startswith(b"\x07MESSAGE")


def command_named(name: str | bytes) -> Predicate:
    """A predicate matching COMMAND frames named ``name`` (e.g. ``"READY"``, ``"PING"``)."""
    raw = name.encode() if isinstance(name, str) else bytes(name)
    prefix = bytes([len(raw)]) + raw

    def predicate(flags: int, body: bytes) -> bool:
        return bool(flags & FLAG_COMMAND) and body.startswith(prefix)

    predicate.__name__ = f"command_named({raw.decode(errors='replace')!r})"
    return predicate


# --------------------------------------------------------------------------- modes


@dataclass(frozen=True)
class Mode:
    """What a connection does with its bytes.

    ``kind`` is ``"pass"``, ``"delay"``, ``"blackhole"`` or ``"drop"``:

    * ``pass``: forward both ways.
    * ``delay``: forward each chunk ``seconds`` after it was read, in order.
    * ``blackhole``: forward nothing and close nothing. With ``read=False`` the sockets
      are not read at all, so the peers' kernel buffers fill and their data is delivered
      later if the mode goes back to ``pass`` (a partition that heals); with
      ``read=True`` everything read is discarded, so the senders never block. A FIN or
      RST from a peer is not passed on while the hole lasts.
    * ``drop``: ``direction`` is read and discarded (and its FIN not passed on); the
      other direction passes.
    """

    kind: str = "pass"
    seconds: float = 0.0
    read: bool = False
    direction: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("pass", "delay", "blackhole", "drop"):
            raise ValueError(f"unknown mode {self.kind!r}")
        if self.kind == "delay" and self.seconds < 0:
            raise ValueError("delay must be >= 0")
        if self.kind == "drop" and self.direction not in _DIRECTIONS:
            raise ValueError(f"direction must be 'up' or 'down', not {self.direction!r}")

    # How one direction behaves under this mode.
    def reads(self, direction: str) -> bool:
        """Whether the source of ``direction`` is read."""
        return self.kind != "blackhole" or self.read

    def discards(self, direction: str) -> bool:
        """Whether what is read from ``direction`` is thrown away."""
        return self.kind == "blackhole" or (self.kind == "drop" and self.direction == direction)

    def forwards(self, direction: str) -> bool:
        """Whether queued bytes (and a FIN) of ``direction`` are written to its destination."""
        return not self.discards(direction)

    def __str__(self) -> str:
        if self.kind == "delay":
            return f"delay({self.seconds:g})"
        if self.kind == "blackhole":
            return "blackhole(read=True)" if self.read else "blackhole"
        if self.kind == "drop":
            return f"drop_direction({self.direction!r})"
        return "pass"


PASS = Mode("pass")


def delay(seconds: float) -> Mode:
    """A mode forwarding every chunk ``seconds`` after it was read, order preserved."""
    return Mode("delay", seconds=float(seconds))


def blackhole(read: bool = False) -> Mode:
    """A mode forwarding nothing and closing nothing (see ``Mode``)."""
    return Mode("blackhole", read=read)


def drop_direction(direction: str) -> Mode:
    """A mode discarding ``direction`` ("up" or "down") while the other one passes."""
    return Mode("drop", direction=direction)


def _as_mode(mode: Mode | str) -> Mode:
    if isinstance(mode, Mode):
        return mode
    if mode == "pass":
        return PASS
    if mode == "blackhole":
        return blackhole()
    raise ValueError(f"mode must be a Mode, 'pass' or 'blackhole', not {mode!r}")


# --------------------------------------------------------------------------- frame faults


class FrameFault:
    """A one-shot fault on the frames of one direction: after letting ``skip`` frames
    matching ``predicate`` pass, ``action`` the next match: "drop" it, "duplicate" it, or
    "cut" there (the frame and everything read after it, in both directions, is read and
    discarded: the connection goes silent at an exact point of the stream, e.g. mid-reply,
    while what was read before it is still delivered).
    Matches are counted from when the fault is armed on a connection (for a fault armed
    before the connection existed: from the start of its stream). Multipart messages
    are frames too: each part is counted (and dropped) on its own."""

    def __init__(self, action: str, direction: str, predicate: Predicate | None = None, skip: int = 0) -> None:
        if action not in ("drop", "duplicate", "cut"):
            raise ValueError(f"action must be 'drop', 'duplicate' or 'cut', not {action!r}")
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be 'up' or 'down', not {direction!r}")
        if skip < 0:
            raise ValueError("skip/index must be >= 0")
        self.action = action
        self.direction = direction
        self.predicate: Predicate = predicate or is_data
        self.skip = skip
        self.matched = 0  # matching frames seen so far
        self.fired = False

    def clone(self) -> FrameFault:
        return FrameFault(self.action, self.direction, self.predicate, self.skip)

    def offer(self, flags: int, body: bytes) -> bool:
        """Whether this fault fires on this frame (it then is spent)."""
        if self.fired or not self.predicate(flags, body):
            return False
        self.matched += 1
        if self.matched <= self.skip:
            return False
        self.fired = True
        return True

    def __repr__(self) -> str:
        name = getattr(self.predicate, "__name__", repr(self.predicate))
        state = "fired" if self.fired else f"{self.matched}/{self.skip} skipped"
        return f"FrameFault({self.action} {self.direction} {name} skip={self.skip}: {state})"


class _Framer:
    """Follows ZMTP 3.x framing on one direction of a stream and applies frame faults.

    ``feed`` takes bytes as they came off the socket and returns the bytes to forward.
    A frame is held back whole only while a fault is armed (so its predicate can see
    the body); otherwise bytes pass as they come and only the frame boundaries are
    tracked. The 64-byte greeting always passes."""

    def __init__(self) -> None:
        self.greeting_left = GREETING_SIZE
        self.header = bytearray()  # the flags byte and size bytes of the frame in progress
        self.body_left = -1  # -1: reading a header; else body bytes still to come
        self.flags = 0
        self.held: bytearray | None = None  # the whole frame, while held back
        self.frames = 0  # complete frames seen after the greeting
        self.cut = False  # a "cut" fault fired: nothing passes any more

    def feed(self, data: bytes, faults: list[FrameFault], on_fire: Callable[[FrameFault], None]) -> list[bytes]:
        out: list[bytes] = []
        view = memoryview(data)
        i, n = 0, len(data)
        while i < n and not self.cut:
            if self.greeting_left:
                take = min(self.greeting_left, n - i)
                out.append(bytes(view[i : i + take]))
                self.greeting_left -= take
                i += take
                continue
            if self.body_left < 0:  # header
                if not self.header:
                    self.header.append(data[i])
                    i += 1
                want = 9 if self.header[0] & FLAG_LONG else 2
                take = min(want - len(self.header), n - i)
                self.header += view[i : i + take]
                i += take
                if len(self.header) < want:
                    continue
                self.flags = self.header[0]
                if want == 9:
                    size = struct.unpack(">Q", bytes(self.header[1:9]))[0]
                else:
                    size = self.header[1]
                self.body_left = size
                if any(not f.fired for f in faults) and size <= _MAX_FRAME_BUFFER:
                    self.held = bytearray(self.header)
                else:  # nothing to decide, or too big to hold (garbage, say): let it pass
                    out.append(bytes(self.header))
                    self.held = None
                self.header = bytearray()
            if self.body_left > 0:
                take = min(self.body_left, n - i)
                if self.held is not None:
                    self.held += view[i : i + take]
                else:
                    out.append(bytes(view[i : i + take]))
                self.body_left -= take
                i += take
            if self.body_left == 0:
                self._complete(out, faults, on_fire)
        return out

    def _complete(self, out: list[bytes], faults: list[FrameFault], on_fire: Callable[[FrameFault], None]) -> None:
        self.frames += 1
        self.body_left = -1
        held, self.held = self.held, None
        if held is None:
            return
        header_len = 9 if self.flags & FLAG_LONG else 2
        body = bytes(held[header_len:])
        copies = 1
        for fault in faults:
            if fault.offer(self.flags, body):
                copies = 2 if fault.action == "duplicate" else 0
                self.cut = fault.action == "cut"
                on_fire(fault)
                break
        frame = bytes(held)
        for _ in range(copies):
            out.append(frame)


# --------------------------------------------------------------------------- connections


class _Pipe:
    """One direction of a connection: read from ``src``, write to ``dst``."""

    def __init__(self, direction: str, src: socket.socket, dst: socket.socket) -> None:
        self.direction = direction
        self.src = src
        self.dst = dst
        self.queue: collections.deque[tuple[float, bytes]] = collections.deque()  # (due, bytes)
        self.queued = 0  # bytes in ``queue``
        self.out = bytearray()  # due bytes being written to ``dst``
        self.eof = False  # ``src`` sent FIN
        self.shut = False  # FIN passed on to ``dst``
        self.reset: str | None = None  # ``src`` was reset while discarding: pass it on later
        self.bytes_read = 0
        self.bytes_written = 0
        self.bytes_discarded = 0
        self.framer = _Framer()
        self.faults: list[FrameFault] = []

    def pending(self) -> int:
        return self.queued + len(self.out)


class Connection:
    """One client connection and its upstream connection to the target.

    Read-only attributes (take ``proxy.lock`` for a consistent view of several): ``id``,
    ``client_address``, ``mode``, ``connected`` (upstream connected), ``closed``,
    ``close_reason``, ``bytes_up`` / ``bytes_down`` (written to the target / the
    client), ``bytes_discarded_up`` / ``bytes_discarded_down``, ``frames_dropped``,
    ``frames_duplicated``, ``frames_up`` / ``frames_down`` (ZMTP frames seen).
    """

    def __init__(
        self,
        proxy: FaultProxy,
        ident: int,
        client: socket.socket,
        client_address: tuple[str, int],
        upstream: socket.socket,
        mode: Mode,
    ) -> None:
        self._proxy = proxy
        self.id = ident
        self.client_address = client_address
        self._client = client
        self._upstream = upstream
        self._mode = mode
        self.connected = False
        self.closed = False
        self.close_reason: str | None = None
        self._action: str | None = None  # "reset" / "close", for the loop to carry out
        self.frames_dropped = 0
        self.frames_duplicated = 0
        self.cuts = 0
        self.pipes: dict[str, _Pipe] = {UP: _Pipe(UP, client, upstream), DOWN: _Pipe(DOWN, upstream, client)}
        self._registered: dict[socket.socket, int] = {}

    # --- state
    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def bytes_up(self) -> int:
        return self.pipes[UP].bytes_written

    @property
    def bytes_down(self) -> int:
        return self.pipes[DOWN].bytes_written

    @property
    def bytes_discarded_up(self) -> int:
        return self.pipes[UP].bytes_discarded

    @property
    def bytes_discarded_down(self) -> int:
        return self.pipes[DOWN].bytes_discarded

    @property
    def frames_up(self) -> int:
        return self.pipes[UP].framer.frames

    @property
    def frames_down(self) -> int:
        return self.pipes[DOWN].framer.frames

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("open" if self.connected else "connecting")
        return (
            f"<Connection {self.id} {state} {self._mode} up={self.bytes_up} "
            f"down={self.bytes_down} dropped={self.frames_dropped} "
            f"duplicated={self.frames_duplicated}>"
        )

    # --- control (any thread)
    def set_mode(self, mode: Mode | str) -> None:
        """Switch this connection to ``mode`` (a ``Mode``, ``"pass"`` or ``"blackhole"``)."""
        mode = _as_mode(mode)
        with self._proxy._cond:
            self._mode = mode
            self._proxy._changed()

    def pass_(self) -> None:
        self.set_mode(PASS)

    def delay(self, seconds: float) -> None:
        self.set_mode(delay(seconds))

    def blackhole(self, read: bool = False) -> None:
        self.set_mode(blackhole(read))

    def drop_direction(self, direction: str) -> None:
        self.set_mode(drop_direction(direction))

    def drop_frame(
        self, direction: str, index: int | None = None, predicate: Predicate | None = None, *, skip: int | None = None
    ) -> FrameFault:
        """Delete one whole frame from ``direction``: the match numbered ``index`` (0-based;
        ``skip`` is the same number) among frames matching ``predicate`` (default
        ``is_data``), counted from now. Returns the armed fault (``.fired`` tells)."""
        return self.add_frame_fault(FrameFault("drop", direction, predicate, _skip(index, skip)))

    def duplicate_frame(
        self, direction: str, index: int | None = None, predicate: Predicate | None = None, *, skip: int | None = None
    ) -> FrameFault:
        """Send one whole frame of ``direction`` twice (chosen as for ``drop_frame``)."""
        return self.add_frame_fault(FrameFault("duplicate", direction, predicate, _skip(index, skip)))

    def cut_at_frame(
        self, direction: str, index: int | None = None, predicate: Predicate | None = None, *, skip: int | None = None
    ) -> FrameFault:
        """Make this connection silent at one frame of ``direction`` (chosen as for
        ``drop_frame``): that frame and everything read after it, either way, never arrive
        (the bytes are read and discarded, as ``blackhole(read=True)``)."""
        return self.add_frame_fault(FrameFault("cut", direction, predicate, _skip(index, skip)))

    def add_frame_fault(self, fault: FrameFault) -> FrameFault:
        with self._proxy._cond:
            self.pipes[fault.direction].faults.append(fault)
            self._proxy._changed()
        return fault

    def clear_frame_faults(self) -> None:
        with self._proxy._cond:
            for pipe in self.pipes.values():
                pipe.faults.clear()
            self._proxy._changed()

    def reset(self, timeout: float = 5.0) -> None:
        """Close both sides with an RST (``SO_LINGER (1, 0)``); returns once done."""
        self._request("reset", timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Close both sides gracefully (FIN); returns once done."""
        self._request("close", timeout)

    def _request(self, action: str, timeout: float) -> None:
        with self._proxy._cond:
            if self.closed:
                return
            self._action = action
            self._proxy._changed()
            if not self._proxy._cond.wait_for(lambda: self.closed, timeout):
                raise TimeoutError(f"connection {self.id} not closed ({action}) in {timeout}s")

    # --- loop side (lock held)
    def _sockets(self) -> tuple[socket.socket, socket.socket]:
        return self._client, self._upstream


def _skip(index: int | None, skip: int | None) -> int:
    if index is not None and skip is not None and index != skip:
        raise ValueError("give index or skip (the same number), not two different ones")
    value = index if index is not None else skip
    return 0 if value is None else int(value)


# --------------------------------------------------------------------------- the proxy


class FaultProxy:
    """A TCP proxy from ``listen_host:listen_port`` (0: any free port) to
    ``target_host:target_port`` whose connections can be faulted; see the module doc."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        buffer_bytes: int | None = None,
    ) -> None:
        #: kernel buffers (SO_RCVBUF/SO_SNDBUF) of the proxy's own sockets; small ones make a
        #: black hole stop acknowledging soon, as a dead host would (a userspace proxy's
        #: kernel acknowledges what it buffers)
        self.buffer_bytes = buffer_bytes
        self.target: tuple[str, int] = (target_host, int(target_port))
        self._listen_address = (listen_host, int(listen_port))
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition(threading.RLock())
        self._stopping = False
        self._connections: list[Connection] = []
        self._default_mode: Mode = PASS
        self._default_faults: list[FrameFault] = []
        self._next_id = 0
        self.error: BaseException | None = None  # an unexpected exception of the loop
        self.port = 0

    # --- lifecycle
    @property
    def lock(self) -> threading.Condition:
        """The proxy's condition (and lock): hold it to read several counters at once."""
        return self._cond

    @property
    def endpoint(self) -> str:
        """``tcp://HOST:PORT`` to connect to through the proxy."""
        return f"tcp://{self._listen_address[0]}:{self.port}"

    def _size_buffers(self, sock: socket.socket) -> None:
        if self.buffer_bytes:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_bytes)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.buffer_bytes)

    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("FaultProxy already started")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._size_buffers(listener)  # accepted sockets inherit them
        listener.bind(self._listen_address)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._thread = threading.Thread(target=self._run, name=f"FaultProxy:{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop, close every connection (FIN) and the listener, join the thread."""
        thread = self._thread
        if thread is None:
            return
        with self._cond:
            self._stopping = True
            self._changed()
        thread.join(timeout)
        if thread.is_alive():
            raise RuntimeError(f"FaultProxy thread did not stop within {timeout}s")
        self._thread = None
        for s in (self._wake_r, self._wake_w):
            if s is not None:
                s.close()

    def __enter__(self) -> FaultProxy:
        """Starts the proxy unless ``start()`` was already called."""
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- connections and waiting
    @property
    def connections(self) -> list[Connection]:
        """Every connection accepted so far, closed ones included, oldest first."""
        with self._cond:
            return list(self._connections)

    @property
    def active_connections(self) -> list[Connection]:
        with self._cond:
            return [c for c in self._connections if not c.closed]

    def wait_for(self, predicate: Callable[[], object], timeout: float, what: str = "") -> object:
        """Wait (on the proxy's Condition, notified by the loop after every step) until
        ``predicate()`` is truthy, called with the lock held; TimeoutError after ``timeout``."""
        with self._cond:
            result = self._cond.wait_for(lambda: predicate() or self.error is not None, timeout)
            if self.error is not None:
                raise RuntimeError("FaultProxy loop failed") from self.error
            if not result:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what or predicate}")
            return result

    def wait_for_connections(self, n: int, timeout: float = 5.0) -> list[Connection]:
        """Wait until ``n`` connections have been established end to end (ever: closed
        ones count, so ``n = previous + 1`` waits for a reconnection); return them."""
        self.wait_for(
            lambda: sum(1 for c in self._connections if c.connected) >= n,
            timeout,
            f"{n} connection(s) through the proxy",
        )
        with self._cond:
            return [c for c in self._connections if c.connected][:n] if n else []

    # --- modes
    def set_default(self, mode: Mode | str) -> None:
        """The mode of connections accepted from now on (existing ones keep theirs)."""
        mode = _as_mode(mode)
        with self._cond:
            self._default_mode = mode
            self._changed()

    @property
    def default_mode(self) -> Mode:
        return self._default_mode

    def set_all(self, mode: Mode | str) -> None:
        """``mode`` for every open connection and for new ones."""
        mode = _as_mode(mode)
        with self._cond:
            self._default_mode = mode
            for conn in self._connections:
                conn._mode = mode
            self._changed()

    def blackhole_all(self, read: bool = False) -> None:
        self.set_all(blackhole(read))

    def pass_all(self) -> None:
        self.set_all(PASS)

    def delay_all(self, seconds: float) -> None:
        self.set_all(delay(seconds))

    def reset_all(self, timeout: float = 5.0) -> None:
        for conn in self.active_connections:
            conn.reset(timeout)

    def close_all(self, timeout: float = 5.0) -> None:
        for conn in self.active_connections:
            conn.close(timeout)

    # --- frame faults
    def drop_frame(
        self,
        direction: str,
        index: int | None = None,
        predicate: Predicate | None = None,
        *,
        skip: int | None = None,
        existing: bool = True,
        new: bool = True,
    ) -> None:
        """Arm ``Connection.drop_frame`` on every open connection (``existing``) and on each
        connection accepted later (``new``): one frame per connection, counted from then."""
        self._arm(FrameFault("drop", direction, predicate, _skip(index, skip)), existing, new)

    def duplicate_frame(
        self,
        direction: str,
        index: int | None = None,
        predicate: Predicate | None = None,
        *,
        skip: int | None = None,
        existing: bool = True,
        new: bool = True,
    ) -> None:
        """As ``drop_frame``, sending the chosen frame twice."""
        self._arm(FrameFault("duplicate", direction, predicate, _skip(index, skip)), existing, new)

    def cut_at_frame(
        self,
        direction: str,
        index: int | None = None,
        predicate: Predicate | None = None,
        *,
        skip: int | None = None,
        existing: bool = True,
        new: bool = True,
    ) -> None:
        """Arm ``Connection.cut_at_frame`` as ``drop_frame`` arms its fault; ``cuts`` counts."""
        self._arm(FrameFault("cut", direction, predicate, _skip(index, skip)), existing, new)

    def clear_frame_faults(self) -> None:
        """Disarm every frame fault, on open connections and for new ones."""
        with self._cond:
            self._default_faults.clear()
            for conn in self._connections:
                for pipe in conn.pipes.values():
                    pipe.faults.clear()
            self._changed()

    def _arm(self, fault: FrameFault, existing: bool, new: bool) -> None:
        with self._cond:
            if new:
                self._default_faults.append(fault)
            if existing:
                for conn in self._connections:
                    if not conn.closed:
                        conn.pipes[fault.direction].faults.append(fault.clone())
            self._changed()

    @property
    def frames_dropped(self) -> int:
        with self._cond:
            return sum(c.frames_dropped for c in self._connections)

    @property
    def frames_duplicated(self) -> int:
        with self._cond:
            return sum(c.frames_duplicated for c in self._connections)

    @property
    def cuts(self) -> int:
        with self._cond:
            return sum(c.cuts for c in self._connections)

    @property
    def bytes_up(self) -> int:
        with self._cond:
            return sum(c.bytes_up for c in self._connections)

    @property
    def bytes_down(self) -> int:
        with self._cond:
            return sum(c.bytes_down for c in self._connections)

    # --- the loop (its own thread)
    def _changed(self) -> None:
        """Lock held: wake the loop and the waiters."""
        self._cond.notify_all()
        if self._wake_w is not None:
            try:
                self._wake_w.send(b"\0")
            except (BlockingIOError, OSError):
                pass  # already awake (buffer full) or closing

    def _run(self) -> None:
        assert self._selector is not None
        try:
            while True:
                with self._cond:
                    if self._stopping:
                        break
                    timeout = self._prepare()
                events = self._selector.select(timeout)
                with self._cond:
                    now = time.monotonic()
                    for key, mask in events:
                        self._handle(key, mask, now)
                    self._service(time.monotonic())
                    self._cond.notify_all()
        except BaseException as exc:  # a bug here must not hang the test waiting on us
            with self._cond:
                self.error = exc
                self._cond.notify_all()
        finally:
            with self._cond:
                for conn in self._connections:
                    if not conn.closed:
                        self._finish(conn, "proxy closed", abortive=False)
                self._selector.close()
                if self._listener is not None:
                    self._listener.close()
                self._cond.notify_all()

    def _prepare(self) -> float | None:
        """Lock held: carry out requested closes, set interests; the select timeout."""
        now = time.monotonic()
        for conn in self._connections:
            if conn.closed:
                continue
            if conn._action is not None:
                action, conn._action = conn._action, None
                self._finish(conn, f"{action} requested", abortive=(action == "reset"))
        self._service(now)
        timeout: float | None = None
        for conn in self._connections:
            if conn.closed:
                continue
            self._set_interest(conn)
            for pipe in conn.pipes.values():
                if pipe.queue and conn.connected and conn._mode.forwards(pipe.direction):
                    wait = max(0.0, pipe.queue[0][0] - now)
                    timeout = wait if timeout is None else min(timeout, wait)
        return timeout

    def _set_interest(self, conn: Connection) -> None:
        mode = conn._mode
        masks: dict[socket.socket, int] = {conn._client: 0, conn._upstream: 0}
        if not conn.connected:
            masks[conn._upstream] |= selectors.EVENT_WRITE  # connect completion
            up = conn.pipes[UP]
            if mode.reads(UP) and not up.eof and up.pending() < _MAX_PENDING:
                masks[conn._client] |= selectors.EVENT_READ
        else:
            for pipe in conn.pipes.values():
                if mode.reads(pipe.direction) and not pipe.eof and pipe.pending() < _MAX_PENDING:
                    masks[pipe.src] |= selectors.EVENT_READ
                if pipe.out and mode.forwards(pipe.direction) and not pipe.shut:
                    masks[pipe.dst] |= selectors.EVENT_WRITE
        assert self._selector is not None
        for sock, mask in masks.items():
            old = conn._registered.get(sock, 0)
            if mask == old:
                continue
            if old == 0:
                self._selector.register(sock, mask, conn)
            elif mask == 0:
                self._selector.unregister(sock)
            else:
                self._selector.modify(sock, mask, conn)
            conn._registered[sock] = mask

    def _handle(self, key: selectors.SelectorKey, mask: int, now: float) -> None:
        if key.data == "wake":
            try:
                while self._wake_r is not None and self._wake_r.recv(4096):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            return
        if key.data == "listen":
            self._accept(now)
            return
        conn: Connection = key.data
        if conn.closed:
            return
        sock = key.fileobj
        if not conn.connected and sock is conn._upstream:
            if mask & selectors.EVENT_WRITE:
                err = conn._upstream.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    self._finish(conn, f"upstream connect failed: {errno.errorcode.get(err, err)}", abortive=True)
                    return
                conn.connected = True
            return
        if mask & selectors.EVENT_READ:
            for pipe in conn.pipes.values():
                if pipe.src is sock:
                    self._read(conn, pipe, now)
                    if conn.closed:
                        return
        if mask & selectors.EVENT_WRITE:
            for pipe in conn.pipes.values():
                if pipe.dst is sock:
                    self._write(conn, pipe)
                    if conn.closed:
                        return

    def _accept(self, now: float) -> None:
        assert self._listener is not None
        while True:
            try:
                client, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. EMFILE: leave it in the backlog
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._size_buffers(upstream)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, self._next_id, client, address, upstream, self._default_mode)
            self._next_id += 1
            for template in self._default_faults:
                conn.pipes[template.direction].faults.append(template.clone())
            self._connections.append(conn)
            err = upstream.connect_ex(self.target)
            if err not in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
                self._finish(conn, f"upstream connect failed: {errno.errorcode.get(err, err)}", abortive=True)
            elif err == 0:
                conn.connected = True

    def _read(self, conn: Connection, pipe: _Pipe, now: float) -> None:
        mode = conn._mode
        if not mode.reads(pipe.direction) or pipe.eof:
            return
        try:
            data = pipe.src.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # ECONNRESET and friends: pass the reset on
            if mode.discards(pipe.direction):  # ... once this direction forwards again
                pipe.eof = True
                pipe.reset = f"{pipe.direction} source: {exc}"
            else:
                self._finish(conn, f"{pipe.direction} source: {exc}", abortive=True)
            return
        if not data:
            pipe.eof = True
            return
        pipe.bytes_read += len(data)
        if mode.discards(pipe.direction):
            pipe.bytes_discarded += len(data)
            return

        def on_fire(fault: FrameFault) -> None:
            if fault.action == "drop":
                conn.frames_dropped += 1
            elif fault.action == "duplicate":
                conn.frames_duplicated += 1
            else:  # "cut": what was read before it still goes out; nothing read after it
                conn.cuts += 1
                for other in conn.pipes.values():
                    other.framer.cut = True

        due = now + (mode.seconds if mode.kind == "delay" else 0.0)
        for piece in pipe.framer.feed(data, pipe.faults, on_fire):
            if piece:
                pipe.queue.append((due, piece))
                pipe.queued += len(piece)

    def _write(self, conn: Connection, pipe: _Pipe) -> None:
        while pipe.out:
            try:
                sent = pipe.dst.send(pipe.out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EPIPE / ECONNRESET: the destination is gone
                self._finish(conn, f"{pipe.direction} destination: {exc}", abortive=True)
                return
            pipe.bytes_written += sent
            del pipe.out[:sent]

    def _service(self, now: float) -> None:
        """Lock held: move due chunks to the output, write what the kernel takes, pass on
        FINs, close connections finished both ways."""
        for conn in self._connections:
            if conn.closed or not conn.connected:
                continue
            mode = conn._mode
            for pipe in conn.pipes.values():
                if not mode.forwards(pipe.direction):
                    continue
                if pipe.reset:
                    self._finish(conn, pipe.reset, abortive=True)
                    break
                while pipe.queue and pipe.queue[0][0] <= now:
                    _, piece = pipe.queue.popleft()
                    pipe.queued -= len(piece)
                    pipe.out += piece
                if pipe.out:
                    self._write(conn, pipe)
                    if conn.closed:
                        break
                if pipe.eof and not pipe.shut and not pipe.pending():
                    try:
                        pipe.dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    pipe.shut = True
            if not conn.closed and all(p.shut for p in conn.pipes.values()):
                self._finish(conn, "closed by both peers", abortive=False)

    def _finish(self, conn: Connection, reason: str, abortive: bool) -> None:
        """Lock held: close both sockets, with an RST (``abortive``) or a FIN."""
        if conn.closed:
            return
        assert self._selector is not None
        for sock in conn._sockets():
            if conn._registered.get(sock):
                try:
                    self._selector.unregister(sock)
                except (KeyError, ValueError):
                    pass
            conn._registered[sock] = 0
            try:
                if abortive:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    try:
                        sock.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                    # Unread data at close() makes Linux send an RST: read it away first.
                    try:
                        while sock.recv(_CHUNK):
                            pass
                    except OSError:
                        pass
            except OSError:
                pass
            sock.close()
        conn.closed = True
        conn.close_reason = reason
