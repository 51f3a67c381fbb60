"""A spooled record is written from the batch's own buffers (``RecordEncoder``): its bytes
must be exactly the header and ``RecordBatch.serialize()`` the reader expects, for any
batch the receivers make, one after another on the same encoder. No Spark."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.spool_format import RecordEncoder, encode_record_header

pytestmark = pytest.mark.timeout(120)

#: small messages and large ones (1 to 5 kB); a large one repeats a short random piece, so
#: it costs Hypothesis a few bytes of entropy: drawn byte by byte, 40 of them to a batch
#: overran its buffer and were thrown away, leaving mostly small batches to the test
_large = st.builds(
    lambda piece, times: (piece * times)[:5000], st.binary(min_size=1, max_size=16), st.integers(1000, 5000)
)
_message = st.one_of(st.binary(max_size=64), _large)
_topic = st.one_of(st.none(), st.binary(max_size=12))
_batch = st.integers(1, 40).flatmap(
    lambda n: st.tuples(
        st.lists(_message, min_size=n, max_size=n),
        st.one_of(st.none(), st.lists(_topic, min_size=n, max_size=n)),
        st.sampled_from(["raw", "text", "json"]),
    )
)


@settings(max_examples=examples(150), deadline=None)  # a tenth of them in the inner loop
@given(batches=st.lists(_batch, min_size=1, max_size=4), first=st.integers(0, 1 << 40), seed=st.integers(0, 2**32 - 1))
def test_every_record_is_the_header_and_the_serialised_batch(batches, first, seed):
    encoder = RecordEncoder()
    for values, topics, fmt in batches:
        batch = messages_to_batch(values, topics, fmt, 1_767_225_600_000_000)
        pieces, size = encoder.encode(first, batch, seed)
        written = b"".join(bytes(piece) for piece in pieces)
        body = batch.serialize()
        assert written == encode_record_header(first, batch.num_rows, body, seed) + body.to_pybytes()
        assert size == len(written)
        first += batch.num_rows


def test_a_batch_of_an_arrow_message_of_a_megabyte_is_written_whole():
    import pyarrow as pa

    table = pa.table({"x": list(range(200_000))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    message = sink.getvalue().to_pybytes()
    batch = messages_to_batch([message, b"not arrow"], None, "arrow", 0)
    pieces, size = RecordEncoder().encode(7, batch, 1)
    body = batch.serialize()
    assert b"".join(bytes(p) for p in pieces) == encode_record_header(7, 2, body, 1) + body.to_pybytes()
    assert size > 1 << 20
