"""Properties of ``spark_zmq.request``'s executor side, without Spark: replies from a
hostile service never raise anything but ``ReplyMismatch`` and never make a column of the
wrong length or type; and ``ServiceCall`` over real sockets, against a ROUTER worker that
answers in a shuffled order, returns every input row once, in input order."""

from __future__ import annotations

import random
import threading

import pyarrow as pa
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_zmq.options import RequestOptions
from spark_zmq.requester.call import ServiceCall
from spark_zmq.requester.codec import ArrowCodec, ReplyMismatch, Unit, ValueCodec, codec_for

pytestmark = pytest.mark.timeout(300)

REPLY = pa.schema([("doubled", pa.int64()), ("label", pa.string())])


def stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def unit(rows: int) -> Unit:
    batch = pa.record_batch({"x": pa.array(range(rows), pa.int64())})
    return Unit(batch, 0, [b""])


def good_reply(rows: int) -> bytes:
    return stream(
        pa.table(
            {
                "doubled": pa.array([2 * i for i in range(rows)], pa.int64()),
                "label": pa.array([str(i) for i in range(rows)]),
            }
        )
    )


@st.composite
def hostile_reply(draw):
    rows = draw(st.integers(1, 40))
    kind = draw(st.sampled_from(["bytes", "flip", "truncate", "rows", "schema", "frames"]))
    body = good_reply(rows)
    if kind == "bytes":
        return rows, [draw(st.binary(max_size=300))]
    if kind == "flip":
        data = bytearray(body)
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return rows, [bytes(data)]
    if kind == "truncate":
        return rows, [body[: draw(st.integers(0, len(body) - 1))]]
    if kind == "rows":
        return rows, [good_reply(draw(st.integers(0, 60).filter(lambda n: n != rows)))]
    if kind == "schema":
        return rows, [stream(pa.table({"doubled": pa.array(["a"] * rows), "other": pa.array([1] * rows)}))]
    return rows, [body] * draw(st.sampled_from([0, 2, 3]))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(hostile_reply())
def test_an_arrow_reply_fits_exactly_or_is_refused_with_a_reason(case):
    rows, frames = case
    codec = ArrowCodec(REPLY, batch_rows=1000, max_reply_bytes=1 << 20)
    try:
        table = codec.reply(frames, unit(rows))
    except ReplyMismatch as exc:
        assert str(exc)
        return
    assert table.num_rows == rows and table.schema == REPLY
    table.validate(full=True)


@given(st.lists(st.binary(max_size=50), min_size=0, max_size=3), st.booleans())
def test_a_text_or_raw_reply_is_one_frame_and_utf8_for_text(frames, text):
    codec = ValueCodec("value", pa.schema([("reply", pa.string() if text else pa.binary())]), text_reply=text)
    try:
        value = codec.reply(frames, unit(1))
    except ReplyMismatch:
        assert len(frames) != 1 or text
        return
    assert len(frames) == 1
    assert value == (frames[0].decode("utf-8") if text else frames[0])


def test_a_worker_error_reply_is_a_mismatch_naming_the_workers_message():
    codec = ArrowCodec(REPLY, batch_rows=10, max_reply_bytes=1 << 20)
    with pytest.raises(ReplyMismatch, match="answered with an error: model not loaded"):
        codec.reply([b"ERROR", b"model not loaded"], unit(3))


class ShufflingWorker(threading.Thread):
    """A ROUTER that holds up to ``hold`` requests and answers them in a random order
    (``x`` doubled for arrow; ``v:`` + the body for text)."""

    def __init__(self, fmt: str, seed: int, hold: int) -> None:
        super().__init__(daemon=True)
        self.fmt, self.rng, self.hold = fmt, random.Random(seed), hold
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        self.stop = threading.Event()

    def answer(self, body: bytes) -> bytes:
        if self.fmt == "text":
            return b"v:" + body
        x = pa.ipc.open_stream(body).read_all().column("x")
        return (
            good_reply(0)
            if len(x) == 0
            else stream(
                pa.table(
                    {
                        "doubled": pa.array([None if v is None else 2 * v for v in x.to_pylist()], pa.int64()),
                        "label": pa.array([str(v) for v in x.to_pylist()]),
                    }
                )
            )
        )

    def run(self) -> None:
        held = []
        while not self.stop.is_set():
            if self.sock.poll(10):
                held.append(self.sock.recv_multipart())
                if len(held) < self.hold:
                    continue
            if held:
                frames = held.pop(self.rng.randrange(len(held)))
                self.sock.send_multipart(frames[:-1] + [self.answer(frames[-1])])
        self.sock.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 30), min_size=0, max_size=6),
    batch_rows=st.integers(1, 8),
    in_flight=st.integers(1, 6),
    fmt=st.sampled_from(["arrow", "text"]),
    nulls=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_every_row_comes_back_once_in_input_order(sizes, batch_rows, in_flight, fmt, nulls, seed):
    worker = ShufflingWorker(fmt, seed, hold=min(in_flight, 3))
    worker.start()
    try:
        options = RequestOptions.parse(
            {
                "endpoints": worker.endpoint,
                "format": fmt,
                "batchRows": str(batch_rows),
                "maxInFlight": str(in_flight),
                "timeout": "30s",
            }
        )
        reply = REPLY if fmt == "arrow" else pa.schema([("reply", pa.string())])
        codec = codec_for(
            fmt,
            reply_schema=reply,
            batch_rows=batch_rows,
            max_reply_bytes=1 << 20,
            request_column="value",
            corrupt_column=None,
        )
        start, batches = 0, []
        for n in sizes:
            xs = list(range(start, start + n))
            values = [None if nulls and x % 3 == 0 else str(x) for x in xs]
            batches.append(pa.record_batch({"x": pa.array(xs, pa.int64()), "value": pa.array(values, pa.string())}))
            start += n
        out = list(ServiceCall(options, codec, passthrough=[0, 1])(iter(batches)))
    finally:
        worker.stop.set()
        worker.join(10)
    table = pa.Table.from_batches(out) if out else None
    assert sum(b.num_rows for b in out) == start
    # one output batch per input batch, however many requests it took (arrow sends none
    # for an empty one), as Spark's own mapInArrow gives: Spark pays per batch
    assert [b.num_rows for b in out] == ([n for n in sizes if n] if fmt == "arrow" else sizes)
    if start:
        assert table.column("x").to_pylist() == list(range(start))
        if fmt == "arrow":
            assert table.column("doubled").to_pylist() == [2 * x for x in range(start)]
        else:
            assert table.column("reply").to_pylist() == [
                None if nulls and x % 3 == 0 else f"v:{x}" for x in range(start)
            ]
