"""The bench's CPU accounting (``bench/cpu.py``) leaves the producers out even when one has
finished sending and exited, unreaped, before the second snapshot: a zombie's command
line reads empty, and the producer's CPU was counted as the connector's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(60)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench"))

import cpu  # noqa: E402


def test_an_exited_unreaped_producer_is_still_not_counted():
    burn = "import sys, time\nend = time.process_time() + 0.3\nsys.stdin.readline()\nwhile time.process_time() < end: pass\n"
    producer = subprocess.Popen([sys.executable, "-c", burn, "producer.py"], stdin=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", burn, "not-a-producer"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not all(any(str(p.pid) == str(k[0]) for k in cpu.snapshot()) for p in (producer, other)):
            assert time.monotonic() < deadline
        before = cpu.snapshot()
        assert {before[k].cmdline.endswith("producer.py") for k in before if k[0] == producer.pid} == {True}
        for p in (producer, other):
            p.stdin.write(b"go\n")
            p.stdin.flush()
        # both exit; wait without reaping (a zombie has state Z and an empty command line)
        while not all(open(f"/proc/{p.pid}/stat").read().split(") ")[1].startswith("Z") for p in (producer, other)):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        after = cpu.snapshot(follow=before)
        assert [after[k].cmdline for k in after if k[0] == producer.pid] == [""]
        counted = cpu.used(before, after, cpu.not_producer)
        assert 0.2 <= counted < 0.55, counted  # the other process's 0.3 s, not the producer's too
    finally:
        for p in (producer, other):
            p.kill()
            p.wait()
