"""The bound endpoints of one ZMTP engine (libzmq's listeners): listening, accepting (paused
a while when the OS refuses, as on EMFILE), inproc accepts from connecting threads, and
closing them (an ipc path unlinked, an inproc name freed).

A listener only hands what it accepts to the session manager (``sessions.Sessions``, which
makes it a connection), through the one callback it is made with: the listening sockets
and their accept loop are a job of their own, apart from the connections they produce.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
from typing import TYPE_CHECKING, Protocol

from . import transport

if TYPE_CHECKING:
    from .owner import Settings
    from .poller import Poller
    from .state import SharedState

#: the engine's logger: one name for all its parts, so one logging setting covers the engine
log = logging.getLogger("spark_zmq.patterns.wires.zmtp.engine")

_ACCEPT_RETRY_S = 0.2


class Adopt(Protocol):
    """Makes an accepted socket a connection (``Sessions._adopt``): the socket, the peer's
    address, no connector, and the endpoint that accepted it (``None``: the address)."""

    def __call__(
        self, sock: socket.socket, address: str, connector: None, *, endpoint: str | None = None
    ) -> object: ...


class Listeners:
    """The listening sockets and inproc names of one session manager (see the module's
    docstring). Its methods run on the I/O thread, but for ``listen`` (before the thread
    starts) and the inproc accept (a connecting thread, lock taken)."""

    def __init__(self, settings: Settings, state: SharedState, poller: Poller, adopt: Adopt) -> None:
        #: the socket's name in log lines (``label``)
        self._settings = settings
        #: ``closing`` is read there
        self._state = state
        self._lock = state.lock
        self._poller = poller
        self._selector = poller.selector
        self._adopt = adopt
        self._accept_failing = False
        self._listeners: list[tuple[socket.socket, str, transport.Address]] = []
        self._inproc_names: list[str] = []

    def listen(self, endpoint: str) -> str:
        """Listen on ``endpoint`` now (errors surface in the caller); returns the real address."""
        address = transport.parse_address(endpoint, bind=True)
        if address.transport == "inproc":
            transport.register_inproc(address.host, self._accept_inproc)
            self._inproc_names.append(address.host)
            return f"inproc://{address.host}"
        sock, actual = transport.listen(address)
        self._listeners.append((sock, actual, address))
        self._selector.register(sock, selectors.EVENT_READ, lambda mask, s=sock, a=actual: self._on_accept(s, a))
        return actual

    def _on_accept(self, listener: socket.socket, actual: str) -> None:
        for _ in range(64):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: stop listening a while, log once
                if not self._accept_failing:
                    log.warning(
                        "%s: cannot accept connections on %s (%s); retrying every %.1f s",
                        self._settings.label,
                        actual,
                        exc,
                        _ACCEPT_RETRY_S,
                    )
                self._accept_failing = True
                self._selector.unregister(listener)
                self._poller.at(
                    _ACCEPT_RETRY_S,
                    lambda: self._selector.register(
                        listener, selectors.EVENT_READ, lambda mask: self._on_accept(listener, actual)
                    ),
                )
                return
            if self._accept_failing:
                self._accept_failing = False
                log.warning("%s: accepting connections on %s again", self._settings.label, actual)
            peer_address = f"tcp://{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else actual
            self._adopt(sock, peer_address, None, endpoint=actual)

    def _accept_inproc(self, sock: socket.socket, address: str) -> None:
        """Called by a connecting thread (``transport.connect_inproc``)."""
        with self._lock:
            if self._state.closing:
                sock.close()
                return
            self._poller.call_soon(lambda: self._adopt(sock, address, None))

    def close(self) -> None:
        """Stop listening: the listening sockets closed (an ipc path unlinked), the inproc
        names freed (the I/O thread, its selector still open)."""
        for sock, actual, address in self._listeners:
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
            if address.transport == "ipc" and not actual.startswith("ipc://@"):
                try:
                    os.unlink(actual[len("ipc://") :])
                except OSError:
                    pass
        self._listeners.clear()
        for name in self._inproc_names:
            transport.unregister_inproc(name)
        self._inproc_names.clear()
