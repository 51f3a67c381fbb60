"""``spark_zmq.worker.serve`` against requests built to hurt it, on real sockets: the
worker runs in a process of its own (so its peak memory, VmHWM in /proc, is its own), the
attacker is a plain pyzmq REQ socket."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
import zmq
from zmqtest import free_ports, peak_rss_bytes

pytestmark = pytest.mark.timeout(120)

WORKER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    from spark_zmq.worker import serve

    def handler(batch):
        if batch.num_rows == 1:  # an answer far larger than the request
            return pa.RecordBatch.from_pydict({"y": [b"x" * 2_000_000]})
        return batch

    def ready(addresses):
        print("ready", flush=True)

    serve(handler, sys.argv[1], format="arrow", broker=False, max_message_bytes=int(sys.argv[2]),
          on_ready=ready)
""")


def _ipc(batch: pa.RecordBatch, compression=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


@pytest.fixture
def worker():
    (port,) = free_ports(1)
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, f"@tcp://127.0.0.1:{port}", str(1 << 20)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "ready"
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{port}")

    def ask(body: bytes) -> list[bytes]:
        sock.send(body)
        assert sock.poll(60_000), "the worker did not answer"
        return sock.recv_multipart()

    yield process, ask
    sock.close(0)
    process.kill()
    process.wait(10)


def test_a_zstd_bomb_is_refused_before_it_is_decompressed(worker):
    """64 MB of zeros in a few KB of zstd, to a worker whose max_message_bytes is 1 MiB (so
    it accepts at most 16 MiB decompressed): an error reply, the worker's peak memory does
    not move by the bomb's size, and the next request is served."""
    process, ask = worker
    bomb = _ipc(pa.RecordBatch.from_pydict({"x": pa.array(np.zeros(8_000_000, dtype=np.int64))}), "zstd")
    assert len(bomb) < 100_000
    before = peak_rss_bytes(process.pid)
    reply = ask(bomb)
    assert reply[0] == b"ERROR" and len(reply) == 2, reply[:1]
    assert b"decompress" in reply[1] or b"bytes" in reply[1], reply[1]
    grown = peak_rss_bytes(process.pid) - before
    assert grown < 32 << 20, f"the worker's peak memory grew by {grown / 2**20:.0f} MiB"
    small = _ipc(pa.RecordBatch.from_pydict({"x": [1, 2, 3]}))
    assert pa.ipc.open_stream(ask(small)[0]).read_all().column("x").to_pylist() == [1, 2, 3]


def test_a_reply_over_max_message_bytes_becomes_an_error_reply_and_the_worker_goes_on(worker):
    process, ask = worker
    reply = ask(_ipc(pa.RecordBatch.from_pydict({"x": [1]})))  # the handler answers 2 MB
    assert reply[0] == b"ERROR" and len(reply) == 2
    assert b"more than max_message_bytes (1,048,576)" in reply[1], reply[1]
    assert process.poll() is None, "the worker ended"
    small = _ipc(pa.RecordBatch.from_pydict({"x": [4, 5]}))
    assert pa.ipc.open_stream(ask(small)[0]).read_all().column("x").to_pylist() == [4, 5]
