"""The engine's paced reads: a socket that only receives reads in turns at least
``READ_PACING_S`` apart, so a streaming producer's data is taken in few large reads rather
than one per wake-up (poller.py says why); a socket that sends is never paced.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time

import pytest
import zmq

from spark_zmq.patterns import ZmtpPull
from spark_zmq.patterns.reroutingpush import ReroutingPush
from spark_zmq.patterns.wires.zmtp.poller import READ_PACING_S, Poller

pytestmark = pytest.mark.timeout(60)


def _turn_times(pace_s: float, seconds: float = 0.3) -> list[float]:
    """When a ``Poller`` paced by ``pace_s`` ran the read callback of a socket that a
    writer thread keeps readable for ``seconds``."""
    lock = threading.Lock()
    poller = Poller(lock, "pacing test", pace_s=pace_s)
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    times: list[float] = []
    done = threading.Event()

    def on_read(mask: int) -> None:
        times.append(time.monotonic())
        try:
            while reader.recv(65536):
                pass
        except BlockingIOError:
            pass

    def write() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            writer.send(b"x" * 64)
        done.set()

    poller.selector.register(reader, selectors.EVENT_READ, on_read)
    loop = threading.Thread(target=poller.run, args=(done.is_set, lambda now: 0.05), daemon=True)
    loop.start()
    write()
    with lock:
        poller.wake()
    loop.join(10)
    assert not loop.is_alive()
    poller.close()
    reader.close()
    writer.close()
    return times


def test_a_paced_loop_reads_a_busy_socket_at_most_once_a_pace():
    times = _turn_times(0.005)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 10, times  # the reads went on all along
    assert min(gaps) >= 0.005, f"two reads {min(gaps) * 1e3:.2f} ms apart"


def test_an_unpaced_loop_reads_as_soon_as_data_comes():
    times = _turn_times(0.0)
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    assert gaps[len(gaps) // 2] < 0.005, "the unpaced loop waited between reads"


def test_pull_is_paced_push_is_not_and_pull_still_takes_every_message(ctx):
    pull = ZmtpPull("@tcp://127.0.0.1:*")
    push = ReroutingPush("@tcp://127.0.0.1:*")
    try:
        assert pull._wire.engine._poller.pace_s == READ_PACING_S > 0  # type: ignore[attr-defined]
        assert push._wire.engine._poller.pace_s == 0  # type: ignore[attr-defined]
        peer = ctx.socket(zmq.PUSH)
        peer.connect(pull.last_endpoint)
        sent = [b"%06d" % i for i in range(20_000)]
        for message in sent:
            peer.send(message)
        got: list[bytes] = []
        while len(got) < len(sent):
            got += pull.recv_block(len(sent) - len(got), timeout=10).values()
        assert got == sent
    finally:
        pull.close(linger=0)
        push.close(linger=0)
