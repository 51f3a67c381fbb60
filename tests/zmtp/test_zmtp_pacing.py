"""The engine's paced reads: a socket that only receives pauses ``READ_PACING_S`` after each
turn while its turns read a streaming amount on average (``STREAMING_TURN_BYTES``), so a
streaming producer's data is taken in few large reads rather than one per wake-up (poller.py
says why); turns that read a message or a few are followed by no pause, and a socket that
sends is never paced.
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
from spark_zmq.patterns.wires.zmtp.poller import READ_PACING_S, STREAMING_TURN_BYTES, Poller

pytestmark = pytest.mark.timeout(60)


def _turn_times(pace_s: float, reported_bytes: int, seconds: float = 0.3, first: int | None = None) -> list[float]:
    """When a ``Poller`` paced by ``pace_s`` ran the read callback of a socket that a writer
    thread keeps readable for ``seconds``; the callback says it read ``reported_bytes``
    (``first`` at its first call, if given)."""
    lock = threading.Lock()
    poller = Poller(lock, "pacing test", pace_s=pace_s)
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    times: list[float] = []
    done = threading.Event()

    def on_read(mask: int) -> int:
        times.append(time.monotonic())
        try:
            while reader.recv(65536):
                pass
        except BlockingIOError:
            pass
        return first if first is not None and len(times) == 1 else reported_bytes

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


def test_a_paced_loop_pauses_after_each_streaming_turn():
    times = _turn_times(0.005, reported_bytes=STREAMING_TURN_BYTES * 4)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert len(times) >= 10, times  # the reads went on all along
    assert min(gaps) >= 0.005, f"two streaming turns {min(gaps) * 1e3:.2f} ms apart"


def test_a_paced_loop_never_pauses_after_a_turn_that_read_little():
    # a pause of 0.2 s would allow at most two turns in the writer's 0.3 s
    times = _turn_times(0.2, reported_bytes=STREAMING_TURN_BYTES - 1)
    assert len(times) >= 10, f"only {len(times)} turns: the loop paused after small reads"


def test_a_paced_loop_stops_pausing_once_its_turns_read_little():
    # one streaming turn (the mean reaches the threshold) pauses 0.2 s; the small turns
    # after it bring the mean down at once, so the loop reads on without pauses
    times = _turn_times(0.2, reported_bytes=100, seconds=0.6, first=STREAMING_TURN_BYTES * 4)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps and gaps[0] >= 0.2, "the streaming turn was not followed by the pause"
    assert len(times) >= 10, f"only {len(times)} turns: the loop went on pausing after small reads"


def test_an_unpaced_loop_never_pauses():
    times = _turn_times(0.0, reported_bytes=10 * STREAMING_TURN_BYTES)
    assert len(times) >= 10, f"only {len(times)} turns"


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
