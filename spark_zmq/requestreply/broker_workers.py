"""The worker side of the broker (``WorkerSide``, a part of ``Broker``): which workers are idle
(the one idle longest first), which hold a request and which request, the connection each
came on, and what each message from the backend means.

Why these checks (see ``broker``'s docstring): a reply is forwarded only from the worker
connection holding that request; a worker gone holding a request costs that request (its
client resends it); a worker back under the same routing id (a fixed ZMQ_ROUTING_ID) is
served again; a worker that holds a request past ``hold_limit`` is counted as having lost
it (the broker does not resend it: its client's own timeout does).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Any

import zmq

from .broker_stats import envelope, is_reply

if TYPE_CHECKING:
    from ..patterns.reqrep import Router
    from .broker_clients import ClientQueues, Frames

__all__ = ["READY", "READ_BATCH", "WorkerSide"]

log = logging.getLogger("spark_zmq.requestreply.broker")

#: at most this many messages are read from one socket before the other is looked at
READ_BATCH = 256
#: what a worker sends, as its first and only frame, to say it can take a request
READY = b"READY"
#: forgotten workers remembered, so a reply sent just before a disconnection still counts
_DEPARTED_REMEMBERED = 10_000


def _fd(frame: zmq.Frame) -> int | None:
    """The descriptor of the connection a frame came on (None: inproc, or unknown)."""
    try:
        fd = frame.get(zmq.SRCFD)
    except zmq.ZMQError:
        return None
    return None if fd is None or fd < 0 else fd


class WorkerSide:
    """The backend half of ``Broker``: its methods work on the broker's worker tables
    (``_idle``, ``_busy``, ``_fd_of``, ``_workers_at_fd``, ``_departed``) and counters."""

    # what this part uses of ``Broker``, which sets it (annotations only: nothing at run time)
    _backend: Router
    _clients: ClientQueues
    _idle: collections.OrderedDict[bytes, None]
    _busy: dict[bytes, tuple[bytes, ...]]
    _held_since: collections.OrderedDict[bytes, float]
    _overdue: set[bytes]
    _fd_of: dict[bytes, int]
    _workers_at_fd: dict[int, set[bytes]]
    _departed: collections.OrderedDict[bytes, tuple[tuple[bytes, ...] | None, int | None]]
    request_ttl: float | None
    hold_limit: float | None
    requests_forwarded: int
    malformed: int
    requests_lost: int
    workers_gone: int
    replies_unexpected: int
    workers_reconnected: int
    requests_expired: int

    if TYPE_CHECKING:

        def _recv(self, sock: zmq.Socket[bytes], side: str) -> Frames | None: ...
        def _return(self, payload: Frames) -> None: ...
        def _read_monitors(self) -> None: ...

    def _read_backend(self, back: zmq.Socket[Any]) -> None:
        for _ in range(READ_BATCH):
            frames = self._recv(back, "backend")
            if frames is None:
                return
            if frames:
                self._on_worker_message(frames)
            self._dispatch()

    def _on_worker_message(self, frames: Frames) -> None:
        worker = frames[0].bytes
        if worker in self._departed:
            if not self._from_departed(worker, frames):
                return
        elif worker in self._fd_of and self._fd_of[worker] != _fd(frames[-1]):
            # the same routing id on another connection (ROUTER_HANDOVER): the old one is gone
            self._forget(worker, "it reconnected with the same routing id", gone=False)
            self._reconnected(worker)
        held = self._busy.pop(worker, None)
        if self._release(worker):
            self.requests_lost -= 1  # counted when it passed hold_limit: what follows counts it again, or not
        was_busy = held is not None
        if len(frames) < 3 or len(frames[1]) != 0:
            # not from a REQ socket (which always sends the empty delimiter)
            self._drop_from_worker(worker, was_busy, "no REQ delimiter")
            return
        payload = frames[2:]
        if len(payload) == 1 and len(payload[0]) == len(READY) and payload[0].bytes == READY:
            if was_busy or worker in self._idle:
                # a worker restarting its loop while known: what it held is lost; keep it once
                self._drop_from_worker(worker, was_busy, "READY from a worker already known")
                return
            self._register(worker, frames[-1])
            self._make_idle(worker)
            return
        if not is_reply(payload):
            self._drop_from_worker(worker, was_busy, "a reply without [envelope, b'', body]")
            return
        if not was_busy:
            if worker in self._idle:
                self._unexpected(worker, "a reply from a worker that holds no request")
                return
            # a connection that was given no request (a new one, or a worker that
            # reconnected while it held one): the reply is not forwarded, whoever sent
            # it; its REQ has sent, so it now waits for work like a worker that said READY
            self._unexpected(worker, "a reply from a connection that was given no request")
            self._register(worker, frames[-1])
            self._make_idle(worker)
            return
        self._make_idle(worker)
        if envelope(payload) != held:
            self.requests_lost += 1  # what it held is not coming back
            self._unexpected(worker, "a reply to another request than the one it holds")
            return
        self._return(payload)

    def _from_departed(self, worker: bytes, frames: Frames) -> bool:
        """A message from a worker that was forgotten. A reply read after its connection
        closed (libzmq still held it) still goes to its client, and the request was not
        lost after all. ``READY``, or a reply on another connection, is the worker back
        under the same routing id (a fixed ZMQ_ROUTING_ID): True, to take it as new."""
        payload = frames[2:]
        if len(frames) >= 3 and len(frames[1]) == 0 and is_reply(payload):
            held, fd = self._departed[worker]
            if held is not None and envelope(payload) == held:
                del self._departed[worker]
                self.requests_lost -= 1
                self._return(payload)
                return False
            if fd == _fd(frames[-1]):
                self._unexpected(worker, "a reply to no request it held, after it was gone")
                return False
        elif not (len(frames) == 3 and len(frames[1]) == 0 and frames[2].bytes == READY):
            return False
        del self._departed[worker]
        self._reconnected(worker)
        return True

    def _reconnected(self, worker: bytes) -> None:
        self.workers_reconnected += 1
        if self.workers_reconnected <= 10:
            log.warning(
                "Broker: worker %r is back on a new connection with the same routing id; serving it%s",
                worker,
                " (further ones are counted, not logged)" if self.workers_reconnected == 10 else "",
            )

    def _unexpected(self, worker: bytes, why: str) -> None:
        """A reply the broker does not forward (see the module's docstring)."""
        self.replies_unexpected += 1
        if self.replies_unexpected <= 10:
            log.warning(
                "Broker: dropped a reply from backend peer %r: %s%s",
                worker,
                why,
                " (further ones are counted, not logged)" if self.replies_unexpected == 10 else "",
            )

    def _drop_from_worker(self, worker: bytes, was_busy: bool, why: str) -> None:
        self.malformed += 1
        if self.malformed <= 10:
            log.warning(
                "Broker: dropped a message from backend peer %r: %s%s",
                worker,
                why,
                " (further ones are counted, not logged)" if self.malformed == 10 else "",
            )
        if was_busy:
            # its REQ has sent, so it waits for work again; the request it held is lost
            self.requests_lost += 1
            self._make_idle(worker)

    def _make_idle(self, worker: bytes) -> None:
        self._idle.pop(worker, None)
        self._idle[worker] = None

    def _register(self, worker: bytes, frame: zmq.Frame) -> None:
        """Remember the connection a new worker came on (its file descriptor), so that its
        disconnection, which the monitor reports by descriptor, tells that it is gone.

        A descriptor is reused once closed, so the disconnections are read first: one that
        happened before this message arrived is then never taken for this worker's. A worker
        whose own disconnection came first (it sent and died at once) stays listed until the
        descriptor's next disconnection or its first request (EHOSTUNREACH)."""
        self._read_monitors()
        fd = _fd(frame)
        if fd is None:
            return  # inproc: no descriptor; a gone worker is found by EHOSTUNREACH
        self._workers_at_fd.setdefault(fd, set()).add(worker)
        self._fd_of[worker] = fd

    def _on_disconnect(self, fd: int) -> None:
        for worker in self._workers_at_fd.pop(fd, ()):
            self._forget(worker, f"its connection (descriptor {fd}) closed")

    def _forget(self, worker: bytes, why: str, gone: bool = True) -> None:
        log.debug("Broker: forgetting worker %r: %s", worker, why)
        known = worker in self._idle
        self._idle.pop(worker, None)
        held = self._busy.pop(worker, None)
        was_busy = held is not None
        if was_busy and not self._release(worker):  # (an overdue one was counted already)
            self.requests_lost += 1
        fd = self._fd_of.pop(worker, None)
        if fd is not None:
            self._workers_at_fd.get(fd, set()).discard(worker)
        if (known or was_busy) and gone:
            self.workers_gone += 1
            self._departed[worker] = (held, fd)
            while len(self._departed) > _DEPARTED_REMEMBERED:
                self._departed.popitem(last=False)

    def _dispatch(self) -> None:
        """Give waiting requests to idle workers, the one idle longest first, the requests
        round-robin across the clients that are reading their replies."""
        back = self._backend.zmq_socket
        while self._idle:
            taken = self._clients.next_request()
            if taken is None:
                return
            client, (arrived, frames) = taken
            if self.request_ttl is not None and time.monotonic() - arrived > self.request_ttl:
                self._expired(client, time.monotonic() - arrived)
                continue
            worker = next(iter(self._idle))
            try:
                back.send_multipart([worker, b"", *frames], zmq.NOBLOCK, copy=False)
            except zmq.ZMQError as exc:
                self._clients.put_back(client, (arrived, frames))
                if exc.errno not in (zmq.EHOSTUNREACH, zmq.EAGAIN):
                    raise
                # gone (EHOSTUNREACH), or an idle REQ with a full queue, which no working
                # worker has: either way not a worker to wait for; the request stays first
                self._forget(worker, "unreachable" if exc.errno == zmq.EHOSTUNREACH else "its queue is full")
                continue
            del self._idle[worker]
            self._busy[worker] = envelope(frames)
            self._held_since[worker] = time.monotonic()
            self.requests_forwarded += 1

    def _expired(self, client: bytes, waited: float) -> None:
        """A request that waited longer than ``request_ttl``: its client has resent it or
        given up, so no worker is given it."""
        self.requests_expired += 1
        if self.requests_expired <= 10:
            log.warning(
                "Broker: dropped a request of client %r that waited %.1f s for a worker (request_ttl %g s)%s",
                client,
                waited,
                self.request_ttl,
                " (further ones are counted, not logged)" if self.requests_expired == 10 else "",
            )

    def _release(self, worker: bytes) -> bool:
        """The worker no longer holds its request; True if it was overdue (counted lost)."""
        self._held_since.pop(worker, None)
        if worker in self._overdue:
            self._overdue.discard(worker)
            return True
        return False

    def _check_holds(self, now: float) -> None:
        """Count as lost the requests held longer than ``hold_limit`` (once each; the broker
        does not resend them: their clients' own timeouts do). The worker stays known: a
        late reply still goes to its client, and it takes work again once it answers."""
        if self.hold_limit is None:
            return
        since = self._held_since
        while since:
            worker, at = next(iter(since.items()))
            if now - at <= self.hold_limit:
                return
            del since[worker]
            self._overdue.add(worker)
            self.requests_lost += 1
            if len(self._overdue) <= 10:
                log.warning(
                    "Broker: worker %r has held a request for more than %g s (hold_limit): counted lost; "
                    "its client's timeout resends it",
                    worker,
                    self.hold_limit,
                )
