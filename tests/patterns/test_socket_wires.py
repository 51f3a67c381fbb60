"""One socket API over two wires: ``PatternSocket`` checks and keeps the socket's state, a
wire (``LibzmqWire`` or ``EngineWire``) does the I/O, and both wait by one rule
(``deadlines``).

The structure: no engine class does its own sending, receiving or closing (it names its
wire), every socket's wire has every member of ``SocketWire``, and neither the API class
nor the engine keeps a waiting loop of its own. The behaviour that rule gives, on both
wires alike: a receive blocked in another thread raises ``SocketClosedError`` within a
slice of ``close()``, and ``timeout=0`` looks once (a queued message is returned, an empty
queue times out at once).
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import zmq

from spark_zmq.patterns import (
    Dealer,
    Gather,
    PatternSocket,
    Pub,
    Pull,
    Push,
    Rep,
    Req,
    ReroutingPush,
    Router,
    Scatter,
    SendTimeoutError,
    SocketClosedError,
    Sub,
    XPub,
    XSub,
    ZmtpPull,
    deadlines,
)
from spark_zmq.patterns.scattergather import ZmtpPatternSocket
from spark_zmq.patterns.wires import contract as wire_contract
from spark_zmq.patterns.wires.engine import EngineWire
from spark_zmq.patterns.wires.libzmq import LibzmqWire
from spark_zmq.patterns.wires.zmtp.engine import Engine

pytestmark = pytest.mark.timeout(30)

ENGINE_CLASSES = [ZmtpPatternSocket, Scatter, Gather, ZmtpPull, ReroutingPush]
LIBZMQ_CLASSES = [Push, Pull, Pub, Sub, XPub, XSub, Req, Rep, Dealer, Router]
#: what the API class does for every socket, whichever its wire
API_METHODS = [
    "send",
    "send_many",
    "recv",
    "recv_multipart",
    "recv_batch",
    "recv_values",
    "poll_recv",
    "close",
    "__del__",
    "__enter__",
    "__exit__",
    "__repr__",
    "_frames",
]

#: how long close() may take to reach a blocked receive: a wait slice, plus scheduling
CLOSE_REACHES_WAITER_S = deadlines.WAIT_SLICE_S + 0.15


def _protocol_members(protocol: type) -> set[str]:
    names = {name for name in vars(protocol) if not name.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


@pytest.mark.parametrize("cls", ENGINE_CLASSES, ids=lambda c: c.__name__)
def test_an_engine_socket_names_its_wire_and_leaves_the_api_to_pattern_socket(cls):
    assert issubclass(cls, PatternSocket)
    overridden = [
        name for klass in cls.__mro__[: cls.__mro__.index(PatternSocket)] for name in API_METHODS if name in vars(klass)
    ]
    assert not overridden, f"{cls.__name__} overrides {overridden} of PatternSocket"
    assert cls.wire_class is EngineWire


def _spec_members(protocol: type) -> set[str]:
    """Every member a spec protocol declares, its bases' included (``_configure`` too)."""
    return {
        name
        for klass in protocol.__mro__
        if klass.__dict__.get("_is_protocol")
        for name in vars(klass)
        if name == "_configure" or not name.startswith("_")
    }


@pytest.mark.parametrize("cls", ENGINE_CLASSES[1:] + LIBZMQ_CLASSES, ids=lambda c: c.__name__)
def test_every_socket_class_offers_what_its_wire_reads_of_it(cls):
    """A wire reads its socket through a spec protocol (``wires.contract``), not through the
    API class, so that no wire imports the class that holds it; every class that names the
    wire must still have every member of that wire's spec (as attributes of the class or,
    for the checked options, of an instance)."""
    spec = wire_contract.EngineSocketSpec if cls.wire_class is EngineWire else wire_contract.LibzmqSocketSpec
    instance_attributes = {"endpoints", "max_message_bytes", "heartbeat"}
    missing = sorted(name for name in _spec_members(spec) if name not in instance_attributes and not hasattr(cls, name))
    assert not missing, f"{cls.__name__} lacks {missing} of {spec.__name__}"
    assert instance_attributes <= _spec_members(spec)


@pytest.mark.parametrize("cls", LIBZMQ_CLASSES, ids=lambda c: c.__name__)
def test_a_libzmq_socket_has_a_libzmq_wire(cls):
    assert issubclass(cls, PatternSocket)
    assert issubclass(cls.wire_class, LibzmqWire)  # type: ignore[arg-type]


def test_the_waiting_rule_is_written_once():
    """No ``_wait`` loop in the API class; the libzmq wire and the engine both step by
    ``deadlines.next_slice``."""
    assert not hasattr(PatternSocket, "_wait")
    assert "next_slice" in inspect.getsource(LibzmqWire.wait)
    assert "next_slice" in inspect.getsource(Engine._wait_until)


def _make(cls: type[PatternSocket]) -> PatternSocket:
    if cls.default_bind:
        return cls("@tcp://127.0.0.1:*")
    return cls(">tcp://127.0.0.1:1")  # connect: no peer needed to exist


@pytest.mark.parametrize("cls", LIBZMQ_CLASSES + ENGINE_CLASSES[1:], ids=lambda c: c.__name__)
def test_every_socket_has_a_wire_with_every_member_of_the_protocol(cls):
    sock = _make(cls)
    try:
        wire = sock._wire
        missing = sorted(
            name
            for name in _protocol_members(wire_contract.SocketWire)
            if not hasattr(type(wire), name) and name not in vars(wire)
        )
        assert not missing, f"{type(wire).__name__} lacks {missing}"
        assert wire.state is sock._state  # type: ignore[attr-defined]  # one state, the API class's
        if isinstance(wire, EngineWire):
            with pytest.raises(AttributeError, match=f"{cls.__name__} speaks ZMTP itself; it has no libzmq socket"):
                sock.zmq_socket  # noqa: B018
        else:
            assert isinstance(sock.zmq_socket, zmq.Socket)
    finally:
        sock.close(linger=0)


def _inside(thread: threading.Thread, names: set[str], within_s: float) -> None:
    """Return once ``thread`` runs inside one of the functions ``names`` (its stack, as the
    interpreter reports it), so the test acts while the call is really blocked."""
    deadline = time.monotonic() + within_s
    pause = threading.Event()
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name in names:
                return
            frame = frame.f_back
        pause.wait(0.002)
    raise AssertionError(f"the receiving thread never reached {sorted(names)}")


def _blocked_receive(call: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException], list[float]]:
    raised: list[BaseException] = []
    when: list[float] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # the test reads it
            raised.append(exc)
        when.append(time.monotonic())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised, when


@pytest.mark.parametrize("cls", [Pull, ZmtpPull, Gather], ids=lambda c: c.__name__)
@pytest.mark.parametrize("call", ["recv", "recv_values", "poll_recv"])
def test_close_from_another_thread_ends_a_blocked_receive_within_a_slice_on_both_wires(cls, call):
    sock = cls("@tcp://127.0.0.1:*")
    try:
        calls: dict[str, Callable[[], Any]] = {
            "recv": lambda: sock.recv(timeout=None),
            "recv_values": lambda: sock.recv_values(100, timeout=None),
            "poll_recv": lambda: sock.poll_recv(timeout=None),
        }
        thread, raised, when = _blocked_receive(calls[call])
        # the libzmq wire polls, the engine's callers wait on its condition
        _inside(thread, {"wait", "_wait_until", "poll"}, 10.0)
        closed_at = time.monotonic()
        sock.close()
        thread.join(5.0)
        assert not thread.is_alive()
        assert len(raised) == 1 and isinstance(raised[0], SocketClosedError), raised
        assert when[0] - closed_at < CLOSE_REACHES_WAITER_S, when[0] - closed_at
        with pytest.raises(SocketClosedError):
            sock.recv(timeout=0)
    finally:
        sock.close(linger=0)


@pytest.mark.parametrize("cls", [Pull, ZmtpPull, Gather], ids=lambda c: c.__name__)
def test_a_timeout_of_zero_looks_once_on_both_wires(cls):
    sock = cls("@tcp://127.0.0.1:*")
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"{cls.__name__}.recv timed out"):
            sock.recv_values(10, timeout=0)
        assert sock.poll_recv(timeout=0) is False
        assert time.monotonic() - started < deadlines.WAIT_SLICE_S  # no slice waited
        push.setsockopt(zmq.LINGER, 0)
        push.connect(sock.last_endpoint)
        push.send(b"one")
        assert sock.poll_recv(timeout=10.0)  # it arrived; now timeout=0 must find it
        assert sock.poll_recv(timeout=0) is True
        assert sock.recv_values(10, timeout=0) == ([b"one"], None)
        with pytest.raises(TimeoutError):
            sock.recv(timeout=0)
    finally:
        push.close(0)
        ctx.term()
        sock.close(linger=0)


@pytest.mark.parametrize("cls", [Push, ReroutingPush, Scatter], ids=lambda c: c.__name__)
def test_a_send_with_no_peer_times_out_with_the_same_message_on_both_wires(cls):
    sock = cls("@tcp://127.0.0.1:*")  # bound, and nobody connects: no peer at all
    try:
        with pytest.raises(TimeoutError, match=rf"{cls.__name__}\.send timed out \(no peer available on "):
            sock.send(b"x", timeout=0)
        with pytest.raises(SendTimeoutError) as info:
            sock.send_many([b"a", b"b"], timeout=0.05)
        assert info.value.sent == 0
    finally:
        sock.close(linger=0)
