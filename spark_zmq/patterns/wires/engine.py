"""The engine wire: a socket's I/O through this package's ZMTP engine (``zmtp.engine``),
for the sockets libzmq cannot be (``wires.contract.SocketWire``).

It owns what only the engine has: the ``Engine`` (its I/O thread, per-peer queues and
counters), its options (``handshake_ivl``, ``confirm``, the kernel buffers, ``tuning`` in
place of libzmq's socket options), the handshake events it pushes (``EngineWatch``), and a
close that first drains within the linger. The engine takes its own lock and waits by the
sockets' one rule (``Engine._wait_until``, ``deadlines.next_slice``), so this wire holds no
lock of its own: it hands each call to the engine with the deadline and the socket's
``check_open`` (``deadlines.SocketState``), which raises once ``close`` began.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, cast

import zmq

from ..curve import Curve
from ..deadlines import SendTimeoutError, SocketState
from ..endpoints import Endpoint, bind_error, check_ipc_bind
from ..frames import Message, flatten
from ..handshakes import HANDSHAKE_FAILURES, HandshakeWatch
from ..message_block import MessageBlock, MessageRun
from ..socket_options import check_linger, positive_int
from .zmtp.codec import EngineMessage
from .zmtp.engine import Engine

if TYPE_CHECKING:
    from .contract import EngineSocketSpec

__all__ = ["EngineWatch", "EngineWire"]

_DEFAULT_HWM = 1000


class EngineWatch(HandshakeWatch):
    """``HandshakeWatch`` fed by the ZMTP engine's events instead of a libzmq monitor."""

    def __init__(self, wanted: int, *, is_server: bool, label: str, curve: bool = True) -> None:
        super().__init__(None, is_server=is_server, label=label, curve=curve)  # type: ignore[arg-type]  # no monitor: events come from the engine
        self.wanted = wanted
        self._events: collections.deque[tuple[int, int, str]] = collections.deque()
        self._cond = threading.Condition()

    def push(self, event: int, value: int, address: str) -> None:
        if event & (HANDSHAKE_FAILURES | self.wanted):
            with self._cond:
                self._events.append((event, value, address))
                self._cond.notify_all()

    def poll(self, timeout_s: float = 0.0) -> list[tuple[int, int, str]]:
        with self._cond:
            if not self._events and timeout_s > 0:
                self._cond.wait(timeout_s)
            events = list(self._events)
            self._events.clear()
        others = []
        for event, value, address in events:
            if event & HANDSHAKE_FAILURES:
                self._rejected(event, value, address)
            else:
                others.append((event, value, address))
        return others


class EngineWire:
    """An ``Engine`` announcing ``owner``'s ``zmtp_type``, not yet attached nor started."""

    extra_options: ClassVar[tuple[str, ...]] = ("handshake_ivl", "confirm")

    def __init__(
        self, owner: EngineSocketSpec, state: SocketState, hwm: int | None, curve: Curve | None, options: dict[str, Any]
    ) -> None:
        self.state = state
        self.label = label = state.label
        #: made once: the engine calls it around every wait
        self.check = state.check_open
        self.send_hint = f" (no peer available on {', '.join(map(str, owner.endpoints))})"
        self.single_part = owner.single_part
        self.can_send = owner.can_send
        tuning = options.get("tuning")
        if tuning is not None:  # the user's socket options, in place of the package's
            options = tuning.engine_options(options)
        self.linger = check_linger(options.get("linger", owner.default_linger_ms))
        # ZMQ_HANDSHAKE_IVL: a peer that has not completed its handshake after this many ms
        # is disconnected (libzmq's default, 30 s), so idle strangers cannot pile up
        handshake_ms = positive_int("handshake_ivl", options.get("handshake_ivl", 30_000))
        reconnect_ms = options.get("reconnect_ivl")
        if reconnect_ms is not None:
            positive_int("reconnect_ivl", reconnect_ms)
        for name in ("rcvbuf", "sndbuf"):
            if options.get(name) is not None:
                positive_int(name, options[name])
        wanted = int(options.get("monitor") or 0)
        self.handshakes: HandshakeWatch | None = (
            EngineWatch(wanted, is_server=curve is None or curve.is_server, label=label, curve=curve is not None)
            if curve is not None or wanted
            else None
        )
        self.confirm = bool(options.get("confirm"))
        #: after ``close()``: messages the socket still held (never written to a peer)
        self.unsent = 0
        #: after ``close(confirm=True)``: messages written that no peer's TCP acknowledged
        self.unconfirmed = 0
        self.engine = Engine(
            socket_type=owner.zmtp_type,
            peer_types=owner.peer_types,
            label=label,
            hwm=_DEFAULT_HWM if hwm is None else hwm,
            max_message_bytes=owner.max_message_bytes,
            reconnect_ivl_s=(reconnect_ms or 100) / 1000.0,
            handshake_ivl_s=handshake_ms / 1000.0,
            curve=curve,
            heartbeat=owner.heartbeat,
            rcvbuf=options.get("rcvbuf"),
            sndbuf=options.get("sndbuf"),
            immediate=bool(options.get("immediate")),
            reconnect_ivl_max_s=(tuning.reconnect_ivl_max_ms or 0) / 1000.0 if tuning is not None else 0.0,
            tcp_options=tuning.tcp_options() if tuning is not None else (),
            on_event=self.handshakes.push if isinstance(self.handshakes, EngineWatch) else None,
            multipart=owner.can_recv and not owner.single_part,
            receive_only=owner.can_recv and not owner.can_send,
        )

    # -- attaching ------------------------------------------------------------------------

    def attach(self, endpoint: Endpoint) -> str | None:
        if not endpoint.bind:
            self.engine.connect(endpoint.address)
            return None
        check_ipc_bind(endpoint.address, self.label)
        try:
            return self.engine.bind(endpoint.address)
        except OSError as exc:
            raise bind_error(self.label, endpoint.address, exc.errno, exc.strerror or str(exc)) from exc

    def start(self) -> None:
        self.engine.start()

    def abort(self) -> None:
        self.engine.stop()

    @property
    def zmq_socket(self) -> zmq.Socket[Any]:
        raise AttributeError(f"{self.label} speaks ZMTP itself; it has no libzmq socket")

    # -- counters (the engine's own; see ``wires.contract``) --------------------------------

    @property
    def resent(self) -> int:
        return self.engine.resent

    @property
    def broken_connections(self) -> int:
        return self.engine.broken_connections

    @property
    def lost_peers(self) -> int:
        return self.engine.lost_peers

    @property
    def discarded_multipart(self) -> int:
        return self.engine.discarded_multipart

    # -- sending --------------------------------------------------------------------------

    def send_frames(self, frames: list[Message], deadline: float | None) -> None:
        # the RFC says a sender SHALL NOT modify messages: a mutable buffer is copied now
        copied = [frame if type(frame) is bytes else bytes(frame) for frame in frames]
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        self._send_all([copied[0] if len(copied) == 1 else tuple(copied)], timeout)

    def send_many(self, messages: Sequence[bytes], timeout: float | None, deadline: float | None) -> int:
        return self._send_all(messages, timeout)

    def _send_all(self, messages: Sequence[EngineMessage], timeout: float | None) -> int:
        """Round-robin to the peers whose queues have room; ``timeout`` bounds the wait
        for each message (the engine makes it a deadline when it starts waiting)."""
        sent, timed_out = self.engine.send_round_robin(messages, timeout, self.check)
        if timed_out:
            raise SendTimeoutError(f"{self.label}.send timed out{self.send_hint}", sent)
        return sent

    # -- receiving ------------------------------------------------------------------------

    def receive_values(
        self, max_messages: int, deadline: float | None, max_bytes: int | None
    ) -> tuple[list[bytes], list[bytes | None] | None]:
        """Fair-queued over the peers; ``topics`` is ``None`` when every message had one
        frame (always so on a single-part socket)."""
        return self._values_and_topics(self._take(max_messages, deadline, max_bytes))

    def receive_block(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> MessageBlock:
        """As ``receive_values``, as one ``MessageBlock``: runs of frames the engine split
        in bulk reach it without an object per message."""
        items = self._receive(max_messages, deadline, max_bytes)
        kinds = set(map(type, items))
        if tuple not in kinds:
            return MessageBlock.from_items(items)
        values, topics = self._values_and_topics(self._expand(items, kinds))
        return MessageBlock.from_values(values, topics)

    def _values_and_topics(self, values: list[EngineMessage]) -> tuple[list[bytes], list[bytes | None] | None]:
        if not self.single_part and tuple in set(map(type, values)):  # multipart messages: as Pull's
            # a message is exactly bytes or a tuple of them: ``type(m) is tuple`` does not narrow for mypy
            messages: list[Any] = values
            return flatten([list(m) if type(m) is tuple else [m] for m in messages])
        return cast("list[bytes]", values), None  # no tuple among them: single-part messages

    def receive(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> list[list[bytes]]:
        values = self._take(max_messages, deadline, max_bytes)
        # a message is exactly bytes or a tuple of them: ``type(v) is tuple`` does not narrow for mypy
        messages: list[Any] = values
        return [list(value) if type(value) is tuple else [value] for value in messages]

    def _take(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> list[EngineMessage]:
        """The engine's take, runs of messages (``MessageRun``) made one item per message."""
        items = self._receive(max_messages, deadline, max_bytes)
        return self._expand(items, set(map(type, items)))

    def _receive(self, max_messages: int, deadline: float | None, max_bytes: int | None) -> list[Any]:
        """The engine's take; ``TimeoutError`` at ``deadline`` or on ``interrupt()``."""
        check = partial(self.state.check_receiving, self.state.interrupts)
        items = self.engine.receive(max_messages, max_bytes, deadline, check)
        if not items:
            raise TimeoutError(f"{self.label}.recv timed out")
        return items

    def interrupt(self) -> None:
        """A receive waiting now gives up with ``TimeoutError`` (``SocketState.check_receiving``)."""
        self.state.interrupts += 1
        self.engine.wake_all()

    @staticmethod
    def _expand(items: list[Any], kinds: set[type]) -> list[EngineMessage]:
        if MessageRun not in kinds:
            return items
        out: list[EngineMessage] = []
        for item in items:
            if type(item) is MessageRun:
                out.extend(item.messages())
            else:
                out.append(item)
        return out

    def wait_readable(self, deadline: float | None) -> bool:
        return self.engine.wait_readable(deadline, self.check)

    # -- lifetime -------------------------------------------------------------------------

    def close(self, linger: int | None) -> None:
        """A sender first waits up to ``linger`` ms (the socket's linger by default) for
        what it holds to reach the kernel; ``unsent`` counts what was left."""
        linger_ms = self.linger if linger is None else check_linger(linger)
        engine = self.engine
        if self.can_send and linger_ms != 0:
            engine.drain(None if linger_ms < 0 else time.monotonic() + linger_ms / 1000.0, self.confirm)
        self.state.closing = True  # before release() wakes the callers waiting on the engine
        self.unsent, unconfirmed = engine.release(self.confirm)
        if self.confirm:
            self.unconfirmed = unconfirmed
        engine.stop()
        self.state.closed = True

    def abandon(self) -> None:
        """The socket was dropped unclosed (``__del__``): stop the I/O thread."""
        self.engine.stop()
