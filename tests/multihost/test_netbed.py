"""The bed itself (tests/helpers/netbed.py), without Spark: addresses, faults, private
directories and a teardown that leaves nothing behind."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import textwrap

import netbed
import pytest

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(120)]

SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 9000)); s.listen(16); print("listening", flush=True)
    while True:
        c, _ = s.accept(); c.sendall(b"hello"); c.close()
""")
CLIENT = textwrap.dedent("""
    import socket, sys
    try:
        c = socket.create_connection((sys.argv[1], 9000), timeout=float(sys.argv[2]))
        print(c.recv(5).decode() or "closed")
    except ConnectionRefusedError:
        print("refused")
    except (TimeoutError, socket.timeout):
        print("timeout")
""")


@pytest.fixture
def small_bed():
    reason = netbed.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    bed = netbed.NetBed(["a", "b"])
    try:
        yield bed
    finally:
        bed.close()


def _serve(bed, host):
    server = bed.run(host, [sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "listening"
    return server


def _connect(bed, host, peer, timeout=1.5) -> str:
    out = bed.exec(host, [sys.executable, "-c", CLIENT, bed.addr(peer), str(timeout)], timeout=timeout + 30)
    return out.stdout.strip() or out.stderr.strip()


def test_hosts_have_benchmarking_addresses_and_reach_each_other(small_bed):
    bench = ipaddress.ip_network("198.18.0.0/15")
    assert all(ipaddress.ip_address(small_bed.addr(h)) in bench for h in small_bed.hosts)
    assert small_bed.addr("a") != small_bed.addr("b")
    _serve(small_bed, "b")
    assert _connect(small_bed, "a", "b") == "hello"
    # each namespace has its own loopback and only its own address besides
    out = small_bed.exec("a", ["ip", "-o", "-4", "addr", "show"]).stdout
    assert "127.0.0.1" in out and small_bed.addr("a") in out and small_bed.addr("b") not in out


@pytest.mark.parametrize("direction", ["both", "in", "out"])
def test_drop_makes_the_peer_silent_and_heal_restores_it(small_bed, direction):
    _serve(small_bed, "b")
    small_bed.drop("a", peer="b", direction=direction)
    assert _connect(small_bed, "a", "b") == "timeout"
    small_bed.heal("a")
    assert _connect(small_bed, "a", "b", timeout=10) == "hello"


def test_drop_without_a_peer_cuts_every_host_but_not_loopback(small_bed):
    _serve(small_bed, "b")
    small_bed.drop("b")
    assert _connect(small_bed, "a", "b") == "timeout"
    local = small_bed.exec("b", [sys.executable, "-c", CLIENT.replace("sys.argv[1]", "'127.0.0.1'"), "x", "3"])
    assert local.stdout.strip() == "hello"
    small_bed.heal("b")
    assert _connect(small_bed, "a", "b", timeout=10) == "hello"


def test_reject_refuses_at_once(small_bed):
    _serve(small_bed, "b")
    small_bed.reject("a", "b")
    assert _connect(small_bed, "a", "b", timeout=10) == "refused"
    small_bed.heal("a")
    small_bed.reject("b", "a")  # the same from the other side
    assert _connect(small_bed, "a", "b", timeout=10) == "refused"
    small_bed.heal("b")
    assert _connect(small_bed, "a", "b") == "hello"


def test_link_down_and_up(small_bed):
    _serve(small_bed, "b")
    small_bed.link_down("b")
    assert _connect(small_bed, "a", "b") == "timeout"
    small_bed.link_up("b")
    netbed.poll(lambda: _connect(small_bed, "a", "b") == "hello", 20, 0.2, "b back on the bridge")


def test_private_dirs_are_seen_only_by_the_process(small_bed, tmp_path):
    private = tmp_path / "private"
    private.mkdir()
    proc = small_bed.run(
        "a",
        ["sh", "-c", 'echo secret > "$0/file" && cat "$0/file"', str(private)],
        private_dirs=[str(private)],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "secret" and proc.returncode == 0
    assert os.listdir(private) == []


def test_close_leaves_nothing_behind(tmp_path):
    if netbed.unavailable_reason():
        pytest.skip(netbed.unavailable_reason())
    bed = netbed.NetBed(["a", "b"])
    stubborn = bed.run(
        "a",
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, "
            "signal.SIG_IGN)\nprint('up', flush=True)\nwhile True: time.sleep(1)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout.readline().strip() == "up"
    # a process in the namespace that the bed did not start (another session, no group)
    outsider = subprocess.Popen(["ip", "netns", "exec", bed.ns("b"), "setsid", "sleep", "600"])
    netbed.poll(
        lambda: outsider.pid in netbed._netns_pids(bed.ns("b")) or any(netbed._netns_pids(bed.ns("b"))),
        10,
        0.05,
        "the outsider to start",
    )
    names = [bed.ns(h) for h in bed.hosts]
    bed.close(grace_s=0.5)  # the stubborn one ignores SIGTERM: SIGKILL it after half a second
    assert stubborn.poll() == -signal.SIGKILL
    outsider.wait(10)
    left = netbed._netns_names()
    assert not set(names) & set(left)
    assert not os.path.exists(f"/sys/class/net/{bed.bridge}")
    bed.close()  # twice is fine


def test_two_beds_do_not_collide():
    if netbed.unavailable_reason():
        pytest.skip(netbed.unavailable_reason())
    with netbed.NetBed(["a"]) as one, netbed.NetBed(["a"]) as two:
        assert one.ns("a") != two.ns("a") and one.bridge != two.bridge and one.subnet != two.subnet


def test_a_dead_owners_bed_is_swept():
    if netbed.unavailable_reason():
        pytest.skip(netbed.unavailable_reason())
    helpers = os.path.dirname(netbed.__file__)
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys, os; sys.path.insert(0, {helpers!r})\n"
            "import netbed\nb = netbed.NetBed(['x'])\nb.run('x', ['sleep', '600'])\n"
            "print(b.ns('x'), b.bridge, flush=True)\nos._exit(0) if sys.stdin.read() else None",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    ns, bridge = owner.stdout.readline().split()
    owner.kill()  # no atexit, no finalizer: the bed stays behind
    owner.wait(10)
    assert ns in netbed._netns_names()
    sleeper = netbed._netns_pids(ns)
    assert ns in netbed.sweep_stale()
    assert ns not in netbed._netns_names()
    assert not os.path.exists(f"/sys/class/net/{bridge}")
    assert all(not netbed._alive(p) or netbed._zombie(p) for p in sleeper)
