"""An idle relay waits in the kernel: its threads wake up a few times in seconds, not ten
times a second each (its receiver and its fetch service used to look around every 100 ms),
so relays, and the receiver processes a query lingers, cost no CPU while no message comes.

Wake-ups are counted as the kernel counts them, the context switches of the process's
threads, not as CPU time: load on the machine does not change how often an idle thread
wakes up."""

from __future__ import annotations

import glob
import json
import time

import pytest
import zmq
from relaytest import RelayProcess, stop_relays
from zmqtest import free_ports

pytestmark = pytest.mark.timeout(120)

#: the window wake-ups are counted over, seconds
_WINDOW_S = 3.0


def _wakeups(pid: int) -> int:
    total = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status) as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:  # a thread that ended meanwhile
            pass
    return total


def test_an_idle_relay_wakes_up_a_few_times_in_seconds_and_still_answers_and_stops_at_once(tmp_path):
    data, listen = free_ports(2)
    process = RelayProcess(f"@tcp://127.0.0.1:{data}", f"tcp://127.0.0.1:{listen}", str(tmp_path / "spool"))
    dealer = zmq.Context.instance().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(process.listen)
    try:
        hello = json.dumps({"op": "hello", "id": 1}).encode()
        dealer.send_multipart([b"", hello])
        assert dealer.poll(10_000), process.errors()  # serving: every thread started
        dealer.recv_multipart()
        before = _wakeups(process.pid)
        time.sleep(_WINDOW_S)  # the measured window (nothing is waited for)
        woke = _wakeups(process.pid) - before
        # before: about 22 a second (receiver and fetch service 10 each, the main loop 2)
        assert woke < 8 * _WINDOW_S, f"an idle relay woke up {woke} times in {_WINDOW_S} s"
        # what waits long is woken when it must be: a request is answered at once, and a stop
        dealer.send_multipart([b"", hello.replace(b'"id": 1', b'"id": 2')])
        assert dealer.poll(5_000), process.errors()
        started = time.monotonic()
        stop_relays([process])
        assert time.monotonic() - started < 5, "the idle relay took more than 5 s to stop"
    finally:
        dealer.close()
        stop_relays([process])
