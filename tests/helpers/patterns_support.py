"""Shared helpers for the pattern-layer tests (``test_rfc*.py``, ``test_patterns_*.py``).

This module holds no tests. Everything here synchronises on something observable (a
received message, a socket monitor event, a poll, a send that stays blocked), never on a
sleep, and every wait is bounded by a deadline.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import zmq
from zmqtest import SocketEvents

from spark_zmq.free_ports import free_tcp_port
from spark_zmq.patterns import PatternSocket
from spark_zmq.patterns.wires.libzmq import LibzmqWire

TRANSPORTS = ("tcp", "inproc")

#: Generous bound for anything that should happen "soon" (a connection, a delivery).
SOON_S = 10.0
#: How long a sender must stay blocked before the whole path to a stalled receiver counts
#: as full (libzmq's I/O thread moves messages asynchronously, so the first EAGAIN of a
#: tcp sender can be transient; a sender blocked this long is not).
STALL_S = 0.3
#: Idle time after which "nothing more arrives" is accepted in negative checks.
QUIET_S = 0.3
#: Small kernel socket buffers, so that a tcp path fills after a few messages.
SMALL_BUFFERS = {"sndbuf": 4096, "rcvbuf": 4096}


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def bind_spec(transport: str) -> str:
    """An endpoint to bind: a fresh port (``*``) for tcp, a fresh name for inproc."""
    if transport == "tcp":
        return "@tcp://127.0.0.1:*"
    if transport == "inproc":
        return f"@inproc://{unique_name()}"
    raise AssertionError(transport)


def unbound_address(transport: str) -> str:
    """An address nothing is bound to yet (for connect-before-bind tests).

    For tcp, a free port *below* the OS's ephemeral range (``spark_zmq.free_ports``). Not an ephemeral port such as ``bind("*")`` hands
    out: a socket that keeps reconnecting to an ephemeral port nobody listens on can be
    given that very port as its own source port and connect to itself (TCP simultaneous
    open), and the port is then taken when the peer finally tries to bind it.
    """
    if transport == "inproc":
        return f"inproc://{unique_name()}"
    return f"tcp://127.0.0.1:{free_tcp_port()}"


def recv_n(sock: PatternSocket, n: int, timeout: float = SOON_S) -> list[bytes]:
    """Exactly ``n`` message bodies, each within ``timeout``."""
    return [sock.recv(timeout=timeout) for _ in range(n)]


def drain(sock: PatternSocket, quiet: float = QUIET_S, limit: int = 1_000_000) -> list[list[bytes]]:
    """Every message that arrives until nothing has arrived for ``quiet`` seconds."""
    out: list[list[bytes]] = []
    while len(out) < limit:
        try:
            out.extend(sock.recv_batch(1000, timeout=quiet))
        except TimeoutError:
            break
    return out


class Monitor(SocketEvents):
    """A socket monitor whose waits default to ``SOON_S`` (see ``zmqtest.SocketEvents``)."""

    def wait_for(self, event: int, count: int = 1, timeout: float = SOON_S) -> dict:
        return super().wait_for(event, count, timeout)


#: The events ``PeerEvents`` waits on; pass as ``monitor=`` when making the socket.
PEER_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED


class PeerEvents:
    """Connection events of a pattern socket made with ``monitor=PEER_EVENTS``, on either
    wire: its ``handshakes`` watch reads libzmq's monitor on ``LibzmqWire`` and the
    engine's own events on ``EngineWire`` (which has no libzmq socket to monitor), so a
    scenario waits the same way whatever the socket class."""

    def __init__(self, sock: PatternSocket) -> None:
        self.sock = sock
        self.seen: Counter[int] = Counter()

    def wait_for(self, event: int, count: int = 1, timeout: float = SOON_S) -> None:
        """Return once ``count`` events ``event`` have been seen in all (since creation)."""
        deadline = time.monotonic() + timeout
        while self.seen[event] < count:
            left = deadline - time.monotonic()
            assert left > 0, f"saw {self.seen[event]} of {count} event(s) {event} within {timeout}s ({dict(self.seen)})"
            for ev, _value, _address in self.sock.handshakes.poll(min(left, 0.5)):
                self.seen[ev] += 1


def prime_round_robin(sender: PatternSocket, receivers: Sequence[PatternSocket], timeout: float = SOON_S) -> None:
    """Return once ``sender`` routes to every receiver and no priming message is in flight.

    Sends ``b"prime"`` messages until each receiver has got at least one, then receives
    until every priming message sent has arrived somewhere. A sender that binds learns of
    a connecting peer asynchronously, so this is the handshake before counting who gets what.
    """
    deadline = time.monotonic() + timeout
    sent = received = 0
    primed = [False] * len(receivers)
    while not all(primed) or received < sent:
        assert time.monotonic() < deadline, f"priming: {primed.count(True)}/{len(receivers)} peers reached"
        if not all(primed):
            sender.send(b"prime", timeout=timeout)
            sent += 1
        for i, r in enumerate(receivers):
            try:
                batch = r.recv_batch(1000, timeout=0.01)
            except TimeoutError:
                continue
            assert all(m == [b"prime"] for m in batch), batch
            received += len(batch)
            primed[i] = True


def fill_until_blocked(
    send: Callable[[bytes, float], None], make: Callable[[int], bytes], stall: float = STALL_S, limit: int = 100_000
) -> list[bytes]:
    """Send ``make(0), make(1), ...`` until one send stays blocked for ``stall`` seconds.

    Returns what was accepted. The message that timed out was not accepted (libzmq queues
    a message whole or not at all), so it is not in the list.
    """
    accepted: list[bytes] = []
    for i in range(limit):
        message = make(i)
        try:
            send(message, stall)
        except TimeoutError:
            return accepted
        accepted.append(message)
    raise AssertionError(f"sender never blocked after {limit} messages: the queues are not bounded")


def fill_nodrop_xpub_until_blocked(
    raw: zmq.Socket, make: Callable[[int], Sequence[bytes]], stall: float = STALL_S, limit: int = 100_000
) -> int:
    """Like ``fill_until_blocked`` for a raw XPUB with ZMQ_XPUB_NODROP (whose POLLOUT is
    always set, so the only way to wait is a short retry). Returns the count accepted."""
    accepted = 0
    last_progress = time.monotonic()
    pause = threading.Event()
    while accepted < limit:
        try:
            raw.send_multipart(list(make(accepted)), zmq.NOBLOCK)
        except zmq.Again:
            if time.monotonic() - last_progress > stall:
                return accepted
            pause.wait(0.001)
            continue
        accepted += 1
        last_progress = time.monotonic()
    raise AssertionError(f"XPUB (nodrop) never blocked after {limit} messages")


def assert_rotation(sources: Sequence[object], n_sources: int, rounds: int) -> None:
    """Fair queuing: each of the first ``rounds`` windows of ``n_sources`` consecutive
    messages holds exactly one message from every source."""
    head = list(sources[: n_sources * rounds])
    assert len(head) == n_sources * rounds, head
    for r in range(rounds):
        window = head[r * n_sources : (r + 1) * n_sources]
        assert len(set(window)) == n_sources, (
            f"round {r}: {window!r} is not one message from each of {n_sources} peers (first messages: {head!r})"
        )


def run_threads(targets: Iterable[Callable[[], None]], timeout: float = 60.0) -> None:
    """Run callables in threads; re-raise the first exception any of them raised."""
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(fn), daemon=True) for fn in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "worker threads did not finish in time"
    if errors:
        raise errors[0]


def close_all(*socks: PatternSocket | None) -> None:
    for s in socks:
        if s is not None:
            s.close(linger=0)


# ---------------------------------------------------------------------------------------
# Pipeline scenarios, shared by 30/PIPELINE (Push/Pull) and 49/SCATTERGATHER
# (Scatter/Gather, which speak PUSH/PULL on the wire). Each takes the sender and receiver
# classes and a transport; the RFC modules name one test per spec line around them.
# ---------------------------------------------------------------------------------------

PAYLOAD_1K = b"p" * 1000


def scenario_round_robin(
    sender_cls: type, receiver_cls: type, transport: str, sender_binds: bool, n: int = 4, rounds: int = 3
) -> None:
    """N peers, N*rounds messages: every peer gets exactly ``rounds``, in strict rotation."""
    sender = None
    receivers: list[PatternSocket] = []
    try:
        if sender_binds:
            sender = sender_cls(bind_spec(transport))
            receivers = [receiver_cls(">" + sender.last_endpoint) for _ in range(n)]
            prime_round_robin(sender, receivers)  # wait until every peer is attached
        else:
            receivers = [receiver_cls(bind_spec(transport)) for _ in range(n)]
            # A connecting sender owns a queue per peer from connect() on (the RFC's
            # "SHALL create this queue when initiating an outgoing connection"): no wait.
            sender = sender_cls(",".join(">" + r.last_endpoint for r in receivers))
        for i in range(n * rounds):
            sender.send(b"%d" % i, timeout=SOON_S)
        per_peer = [sorted(int(m) for m in recv_n(r, rounds)) for r in receivers]
        assert sorted(i for ids in per_peer for i in ids) == list(range(n * rounds)), per_peer
        for ids in per_peer:
            # consecutive messages go to consecutive peers, so a peer's ids are n apart
            assert [i - ids[0] for i in ids] == [k * n for k in range(rounds)], per_peer
    finally:
        close_all(sender, *receivers)


def scenario_fair_queue(sender_cls: type, receiver_cls: type, transport: str, n: int = 3, hwm: int = 5) -> None:
    """N senders each fill their whole path to one stalled receiver; the receiver then
    takes one message from each in turn, and finally gets every accepted message."""
    receiver = receiver_cls(bind_spec(transport), hwm=hwm, **SMALL_BUFFERS)
    senders = [sender_cls(">" + receiver.last_endpoint, hwm=hwm, **SMALL_BUFFERS) for _ in range(n)]
    try:
        per_sender: list[list[bytes]] = [[] for _ in senders]

        def filler(k: int) -> Callable[[], None]:
            def run() -> None:
                per_sender[k] = fill_until_blocked(
                    lambda m, t: senders[k].send(m, timeout=t), lambda i: b"%d:%d:" % (k, i) + PAYLOAD_1K
                )

            return run

        run_threads([filler(k) for k in range(n)])  # each thread fills its own sender
        accepted = [m for mine in per_sender for m in mine]
        assert receiver.poll_recv(SOON_S)
        head = recv_n(receiver, 3 * n)
        assert_rotation([m.split(b":")[0] for m in head], n, 3)
        got = head + recv_n(receiver, len(accepted) - len(head))
        assert Counter(got) == Counter(accepted), "messages lost, duplicated or not the accepted ones"
        for k in range(n):  # and each peer's messages in the order it sent them
            mine = [m for m in got if m.startswith(b"%d:" % k)]
            assert mine == [m for m in accepted if m.startswith(b"%d:" % k)]
    finally:
        close_all(*senders, receiver)


def scenario_blocks_without_peers(sender_cls: type, receiver_cls: type, transport: str) -> None:
    """No peer: ``send`` raises ``TimeoutError`` after its timeout, and without a timeout
    stays blocked until a peer connects, which then gets the message."""
    sender = sender_cls(bind_spec(transport))
    receiver = None
    try:
        started = time.monotonic()
        try:
            sender.send(b"refused", timeout=0.2)
        except TimeoutError as exc:
            assert "no peer available" in str(exc)
        else:
            raise AssertionError("send succeeded with no peer")
        assert time.monotonic() - started >= 0.2

        done = threading.Event()
        errors: list[BaseException] = []

        def blocked_send() -> None:
            try:
                sender.send(b"waited", timeout=None)
                done.set()
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        thread = threading.Thread(target=blocked_send, daemon=True)
        thread.start()
        assert not done.wait(QUIET_S), "send(timeout=None) returned with no peer"
        receiver = receiver_cls(">" + sender.last_endpoint)
        assert done.wait(SOON_S), f"send stayed blocked after a peer connected {errors!r}"
        thread.join(SOON_S)
        assert not errors, errors
        assert receiver.recv(timeout=SOON_S) == b"waited"
    finally:
        close_all(sender, receiver)


def scenario_refuses_without_available_peers(
    sender_cls: type, receiver_cls: type, transport: str, hwm: int = 5
) -> None:
    """A message refused for want of an available peer (none connected; every queue full)
    is not taken: it never reaches a peer that becomes available later."""
    sender = sender_cls(bind_spec(transport), hwm=hwm, **SMALL_BUFFERS)
    receiver = None
    try:
        for timeout in (0, 0.05):
            try:
                sender.send(b"refused-no-peer", timeout=timeout)
            except TimeoutError:
                pass
            else:
                raise AssertionError("a message was accepted with no peer")
        receiver = receiver_cls(">" + sender.last_endpoint, hwm=hwm, **SMALL_BUFFERS)
        accepted = fill_until_blocked(lambda m, t: sender.send(m, timeout=t), lambda i: b"%d:" % i + PAYLOAD_1K)
        for timeout in (0, 0.05):
            try:
                sender.send(b"refused-full", timeout=timeout)
            except TimeoutError:
                pass
            else:
                raise AssertionError("a message was accepted while every queue was full")
        assert recv_n(receiver, len(accepted)) == accepted
        sender.send(b"after", timeout=SOON_S)
        # a refused message, had it been queued after all, would come before this one
        assert receiver.recv(timeout=SOON_S) == b"after"
    finally:
        close_all(sender, receiver)


def scenario_per_peer_incoming_queues(sender_cls: type, receiver_cls: type, transport: str, hwm: int = 5) -> None:
    """The receiver keeps a queue per peer: one peer filling its queue does not stop
    another peer from sending; both are delivered whole."""
    receiver = receiver_cls(bind_spec(transport), hwm=hwm, **SMALL_BUFFERS)
    first = sender_cls(">" + receiver.last_endpoint, hwm=hwm, **SMALL_BUFFERS)
    second = sender_cls(">" + receiver.last_endpoint, hwm=hwm, **SMALL_BUFFERS)
    try:
        from_first = fill_until_blocked(lambda m, t: first.send(m, timeout=t), lambda i: b"a%d:" % i + PAYLOAD_1K)
        from_second = [b"b%d:" % i + PAYLOAD_1K for i in range(hwm)]
        for m in from_second:  # room in its own queue although the first peer's is full
            second.send(m, timeout=SOON_S)
        got = recv_n(receiver, len(from_first) + len(from_second))
        assert [m for m in got if m.startswith(b"a")] == from_first
        assert [m for m in got if m.startswith(b"b")] == from_second
    finally:
        close_all(first, second, receiver)


def queue_capacity_inproc(sender_cls: type, receiver_cls: type, send_hwm: int, recv_hwm: int) -> int:
    """How many 1 KiB messages a sender accepts into one inproc peer that never reads.

    Between libzmq sockets inproc has no kernel buffers, so this is exactly the sum of the
    configured queue limits, and ``send(timeout=0)`` measures it at once. The engine's
    inproc is a socketpair (small buffers here) and its I/O thread connects and moves data
    asynchronously, so there the count is taken once the handshake is done and a send
    stays blocked for ``STALL_S``: the limits plus what the kernel buffers hold.
    """
    receiver = receiver_cls(bind_spec("inproc"), hwm=recv_hwm, **SMALL_BUFFERS)
    on_libzmq = issubclass(receiver_cls.wire_class, LibzmqWire)
    sender = sender_cls(">" + receiver.last_endpoint, hwm=send_hwm, monitor=PEER_EVENTS, **SMALL_BUFFERS)
    try:
        if on_libzmq:
            for n in range(100_000):
                try:
                    sender.send(PAYLOAD_1K, timeout=0)
                except TimeoutError:
                    return n
            raise AssertionError("the queue never filled")
        PeerEvents(sender).wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        return len(fill_until_blocked(lambda m, t: sender.send(m, timeout=t), lambda i: PAYLOAD_1K))
    finally:
        close_all(sender, receiver)


def scenario_send_timeout_zero_after_drain(
    sender_cls: type, receiver_cls: type, hwm: int = 4, rounds: int = 100
) -> None:
    """inproc: right after the receiver drained a full queue, the peer is available again
    and ``send(timeout=0)`` succeeds (regression: a pending libzmq "activate_write" made it
    time out spuriously)."""
    receiver = receiver_cls(bind_spec("inproc"), hwm=hwm)
    sender = sender_cls(">" + receiver.last_endpoint, hwm=hwm)
    try:
        for r in range(rounds):
            n = 0
            while True:
                try:
                    sender.send(b"fill", timeout=0)
                    n += 1
                except TimeoutError:
                    break
            assert n > 0
            recv_n(receiver, n)
            sender.send(b"after-drain-%d" % r, timeout=0)  # must not raise
            assert receiver.recv(timeout=SOON_S) == b"after-drain-%d" % r
    finally:
        close_all(sender, receiver)


def scenario_no_discard_when_full(sender_cls: type, receiver_cls: type, transport: str, hwm: int = 5) -> None:
    """Queues full: the sender blocks or times out instead of discarding; once the receiver
    drains, everything accepted arrives, in order, and nothing that timed out does."""
    receiver = receiver_cls(bind_spec(transport), hwm=hwm, **SMALL_BUFFERS)
    sender = sender_cls(">" + receiver.last_endpoint, hwm=hwm, **SMALL_BUFFERS)
    try:
        accepted = fill_until_blocked(lambda m, t: sender.send(m, timeout=t), lambda i: b"%d:" % i + PAYLOAD_1K)
        refused = b"%d:" % len(accepted) + PAYLOAD_1K
        assert len(accepted) >= hwm
        done = threading.Event()

        def blocked_send() -> None:
            sender.send(b"blocked", timeout=SOON_S * 3)
            done.set()

        thread = threading.Thread(target=blocked_send, daemon=True)
        thread.start()
        assert not done.wait(QUIET_S), "a send into full queues returned: something was discarded"
        got = recv_n(receiver, len(accepted) + 1)
        assert done.wait(SOON_S)
        thread.join(SOON_S)
        assert got == accepted + [b"blocked"]
        assert refused not in got
        sender.send(b"marker", timeout=SOON_S)
        assert receiver.recv(timeout=SOON_S) == b"marker"  # nothing else was queued
    finally:
        close_all(sender, receiver)


def scenario_full_peer_is_skipped(sender_cls: type, receiver_cls: type, transport: str, hwm: int = 5) -> None:
    """A connecting sender keeps a queue for a peer that does not exist yet; when that
    queue is full (exactly ``hwm``) the peer is unavailable and the rest goes to the live
    peer without blocking; the queued messages reach the late peer once it binds."""
    absent = unbound_address(transport)
    live = receiver_cls(bind_spec(transport))
    sender = sender_cls(f">{absent},>{live.last_endpoint}", hwm=hwm)
    late = None
    try:
        total = 10 * hwm
        for i in range(total):
            sender.send(b"%d" % i, timeout=SOON_S)
        late = receiver_cls("@" + absent)
        to_late = recv_n(late, hwm)
        to_live = recv_n(live, total - hwm)
        assert sorted(int(m) for m in to_late + to_live) == list(range(total))
        # while both queues had room the two peers alternated
        assert [int(m) for m in to_late] == sorted(int(m) for m in to_late)
        assert int(to_late[-1]) <= 2 * hwm, to_late
    finally:
        close_all(sender, live, late)


def scenario_connect_before_bind(sender_cls: type, receiver_cls: type, transport: str, connecting: str) -> None:
    """The connecting side (``"sender"`` or ``"receiver"``) exists before its peer binds."""
    address = unbound_address(transport)
    sender = receiver = None
    try:
        if connecting == "sender":
            sender = sender_cls(">" + address)
            for i in range(3):  # queued at once (timeout=0): the queue exists before the peer
                sender.send(b"early-%d" % i, timeout=0)
            receiver = receiver_cls("@" + address)
            assert recv_n(receiver, 3) == [b"early-0", b"early-1", b"early-2"]
        else:
            receiver = receiver_cls(">" + address)
            sender = sender_cls("@" + address)
            sender.send(b"to-early-receiver", timeout=SOON_S)
            assert receiver.recv(timeout=SOON_S) == b"to-early-receiver"
    finally:
        close_all(sender, receiver)


def scenario_disconnected_peer_queue_discarded(sender_cls: type, receiver_cls: type, hwm: int = 5) -> None:
    """tcp only (libzmq reports no connect/disconnect events for inproc). A bound sender's
    queue for a peer that disconnects is destroyed: its messages are never rerouted to
    another peer."""
    sender = sender_cls("@tcp://127.0.0.1:*", hwm=hwm, monitor=PEER_EVENTS, **SMALL_BUFFERS)
    monitor = PeerEvents(sender)
    first = second = None
    try:
        first = receiver_cls(">" + sender.last_endpoint, hwm=hwm, **SMALL_BUFFERS)
        monitor.wait_for(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        stranded = fill_until_blocked(
            lambda m, t: sender.send(m, timeout=t), lambda i: b"stranded-%d:" % i + PAYLOAD_1K
        )
        assert stranded
        first.close(linger=0)
        monitor.wait_for(zmq.EVENT_DISCONNECTED)
        second = receiver_cls(">" + sender.last_endpoint)
        for i in range(3):
            sender.send(b"after-%d" % i, timeout=SOON_S)
        got = recv_n(second, 3)
        assert got == [b"after-0", b"after-1", b"after-2"], (
            f"{sum(m.startswith(b'stranded') for m in got)} messages queued for the disconnected peer were rerouted"
        )
    finally:
        close_all(sender, first, second)


def scenario_received_messages_survive_peer_disconnect(sender_cls: type, receiver_cls: type) -> None:
    """tcp only. What the receiver already holds from a peer that then disconnects is
    still delivered (the deliberate deviation documented in the RFC modules)."""
    receiver = receiver_cls("@tcp://127.0.0.1:*", monitor=PEER_EVENTS)
    monitor = PeerEvents(receiver)
    sender = sender_cls(">" + receiver.last_endpoint, linger=-1)
    try:
        for i in range(5):
            sender.send(b"m%d" % i, timeout=SOON_S)
        sender.close(linger=-1)  # flushes, then disconnects
        monitor.wait_for(zmq.EVENT_DISCONNECTED)
        assert recv_n(receiver, 5) == [b"m%d" % i for i in range(5)]
    finally:
        close_all(sender, receiver)


BINARY_MESSAGES = [b"", b"\x00", bytes(range(256)), b"\xff" * 70_000, b"x" * 1_000_000]


def scenario_messages_unmodified(sender_cls: type, receiver_cls: type, transport: str, multipart: bool) -> None:
    """Bytes in, same bytes out: empty, binary, large; bytes/bytearray/memoryview; and a
    mutable buffer changed right after ``send`` returned does not change the message.

    Everything is sent before the receiver exists (the connecting sender queues it), so
    the messages are certainly still queued when the buffers are changed.
    """
    address = unbound_address(transport)
    sender = sender_cls(">" + address)
    receiver = None
    try:
        for m in BINARY_MESSAGES:
            sender.send(m, timeout=0)
        big = bytearray(b"A" * 200_000)
        sender.send(big, timeout=0)
        big[:] = b"B" * len(big)
        view_source = bytearray(b"C" * 100_000)
        sender.send(memoryview(view_source), timeout=0)
        view_source[:10] = b"D" * 10
        expected = [[m] for m in BINARY_MESSAGES] + [[b"A" * 200_000], [b"C" * 100_000]]
        if multipart:
            frames = [b"", bytes(range(256)), bytearray(b"E" * 100_000), b"F" * 100_000]
            sender.send(frames, timeout=0)
            frames[2][:] = b"G" * 100_000
            expected.append([b"", bytes(range(256)), b"E" * 100_000, b"F" * 100_000])
        receiver = receiver_cls("@" + address)
        got = [receiver.recv_multipart(timeout=SOON_S) for _ in expected]
        assert [list(map(len, m)) for m in got] == [list(map(len, m)) for m in expected]
        assert got == expected
    finally:
        close_all(sender, receiver)


def scenario_interop(ours_cls: type, transport: str) -> None:
    """A pattern class against a plain pyzmq socket of the opposite PUSH/PULL role, both
    as the binding and as the connecting side."""
    ctx = zmq.Context.instance()
    ours_sends = ours_cls.can_send
    plain_type = zmq.PULL if ours_sends else zmq.PUSH
    for ours_binds in (True, False):
        plain = ctx.socket(plain_type)
        plain.linger = 0
        ours = None
        try:
            if ours_binds:
                ours = ours_cls(bind_spec(transport))
                plain.connect(ours.last_endpoint)
            else:
                plain.bind(bind_spec(transport)[1:])
                ours = ours_cls(">" + plain.getsockopt_string(zmq.LAST_ENDPOINT))
            messages = [b"interop-%d" % i for i in range(20)] + [bytes(range(256))]
            if ours_sends:
                for m in messages:
                    ours.send(m, timeout=SOON_S)
                plain.rcvtimeo = int(SOON_S * 1000)
                got = [plain.recv_multipart() for _ in messages]
                assert got == [[m] for m in messages]  # one frame each
            else:
                plain.sndtimeo = int(SOON_S * 1000)
                for m in messages:
                    plain.send(m)
                assert recv_n(ours, len(messages)) == messages
        finally:
            plain.close(linger=0)
            close_all(ours)
