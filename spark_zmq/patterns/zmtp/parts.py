"""What the parts of ``Engine`` (``_Sessions``, ``_Stream``) see of each other: the
engine's state and the methods one part calls on another, declared once for the type
checker.

Only the type checker reads this module: the parts derive from ``EngineParts`` under
``TYPE_CHECKING`` alone (at run time they derive from ``object``, as before), so nothing
changes in how the I/O thread looks attributes up. ``Engine`` derives from both parts and
sets every attribute in its ``__init__``; the methods are ``Engine``'s or a part's, and mypy
checks their signatures against the ones declared here.
"""

from __future__ import annotations

import collections
import selectors
import socket
import threading
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

if TYPE_CHECKING:
    from ..curve import Curve
    from ..heartbeat import Heartbeat
    from . import transport
    from .codec import EngineMessage, ZmtpError
    from .connection import Connection, Connector
    from .curve import CurveClient, CurveServer
    from .null import NullMechanism
    from .poller import Poller
    from .policies import FairQueue, RoundRobin

    #: the security mechanism of one connection
    Mechanism = Union[NullMechanism, CurveClient, CurveServer]


class EngineParts:
    """The engine's state and methods as its parts use them (see the module's docstring)."""

    socket_type: bytes
    receive_only: bool
    multipart: bool
    peer_types: dict[bytes, bytes]
    label: str
    hwm: int
    max_message_bytes: Optional[int]
    reconnect_ivl_s: float
    handshake_ivl_s: float
    curve: Optional[Curve]
    heartbeat: Heartbeat
    _ping: bytes
    _ack_liveness_bytes: int
    heartbeat_timeouts: int
    broken_connections: int
    sequence_gaps: int
    rcvbuf: Optional[int]
    sndbuf: Optional[int]
    reconnect_ivl_max_s: float
    tcp_options: list[tuple[int, int, int]]
    immediate: bool
    on_event: Optional[Callable[[int, int, str], None]]
    lock: threading.Lock
    cond: threading.Condition
    _lb: RoundRobin
    _fq: FairQueue
    orphans: collections.deque[EngineMessage]
    discarded_multipart: int
    resent: int
    lost_peers: int
    closing: bool
    waiters: int
    _poller: Poller
    _selector: selectors.BaseSelector
    _accept_failing: bool
    _listeners: list[tuple[socket.socket, str, transport.Address]]
    _inproc_names: list[str]
    _connections: set[Connection]
    _connections_due: float
    _mechanism_keys: Optional[dict[str, Any]]
    _refused_logged: set[tuple[str, str]]

    # -- Engine
    def call_soon(self, fn: Callable[[], object]) -> None: ...

    # -- _Sessions
    def _due(self, at: float) -> None: ...
    def _lost(self, conn: Connection, code: int) -> None: ...
    def _fail(self, conn: Connection, exc: ZmtpError) -> None: ...
    def _close(self, conn: Connection, *, requeue: bool, quiet: bool = False) -> None: ...
    def _emit(self, event: int, value: int, address: str) -> None: ...
    def _connect(self, connector: Connector) -> None: ...

    # -- _Stream
    def _set_events(self, conn: Connection, events: int) -> None: ...
    def _start_greeting(self, conn: Connection) -> None: ...
    def _heartbeat(self, conn: Connection, now: float) -> float: raise NotImplementedError
    def _flush(self, conn: Connection) -> None: ...
    def _write(self, conn: Connection) -> None: ...
    def new_mechanism(self, conn: Connection) -> Mechanism: raise NotImplementedError
