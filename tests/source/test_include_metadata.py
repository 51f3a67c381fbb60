"""``includeMetadata`` (formats ``json`` and ``arrow``): the declared columns ``topic string,
partition int, offset long, timestamp timestamp``, last in the schema, are filled as the
``raw`` format fills them, so rows of a query subscribed to several topics can be told
apart and traced back to their offset.

The decoder tests need no Spark: whatever the messages and the mode, a row's metadata is
that of the message it came from, and the data columns are exactly what decoding without
the option gives. The rest read through Spark from plain pyzmq producers on real sockets.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType, TimestampType
from zmqtest import Producer, examples, run_available_now, wait_until

from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.options import OptionError
from spark_zmq.source.decoders import Decoder, MalformedMessageError, make_decoder

pytestmark = pytest.mark.timeout(180)

METADATA = [
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
]
DATA = [StructField("id", LongType()), StructField("reading", DoubleType())]
FIRST = 500


def _arrow(ids: list[int]) -> bytes:
    batch = pa.record_batch({"id": pa.array(ids, pa.int64()), "reading": pa.array([i / 2 for i in ids])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


_json_message = st.one_of(
    st.builds(lambda i: json.dumps({"id": i, "reading": i / 2}).encode(), st.integers(0, 10**6)),
    st.sampled_from([b"null", b"42", b"[]", b"{", b"", b"\xff", b'{"id": "x"}']),
)
_arrow_message = st.one_of(
    st.builds(_arrow, st.lists(st.integers(0, 10**6), min_size=0, max_size=5)),
    st.sampled_from([b"", b"\x00" * 8, b"garbage"]),
)


def _rows(decoder: Decoder, batch: pa.RecordBatch, channel: int = 3) -> list[dict]:
    return [row for out in decoder.decode(batch, channel, FIRST) for row in out.to_pylist()]


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fmt_messages=st.one_of(
        st.tuples(st.just("json"), st.lists(_json_message, max_size=30)),
        st.tuples(st.just("arrow"), st.lists(_arrow_message, max_size=12)),
    ),
    mode=st.sampled_from(["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]),
    topics=st.booleans(),
)
def test_each_row_carries_its_own_messages_metadata(fmt_messages, mode, topics):
    fmt, messages = fmt_messages
    topic_frames = [b"t%d" % (i % 3) for i in range(len(messages))] if topics else None
    batch = messages_to_batch(messages, topic_frames, fmt, 1_700_000_000_000_000)
    plain = make_decoder(fmt, StructType(DATA), mode=mode)
    with_meta = make_decoder(fmt, StructType(DATA + METADATA), mode=mode, include_metadata=True)
    try:
        expected = _rows(plain, batch)
    except MalformedMessageError as exc:
        with pytest.raises(MalformedMessageError) as again:
            _rows(with_meta, batch)
        assert str(again.value) == str(exc)
        return
    got = _rows(with_meta, batch)
    assert [{k: r[k] for k in ("id", "reading")} for r in got] == expected
    offsets = [r["offset"] for r in got]
    assert offsets == sorted(offsets) and all(FIRST <= o < FIRST + len(messages) for o in offsets)
    for row in got:
        index = row["offset"] - FIRST
        assert row["partition"] == 3
        assert row["topic"] == (None if topic_frames is None else topic_frames[index].decode())
        assert row["timestamp"] is not None
        if fmt == "arrow":  # every row of a message has that message's offset
            assert row["id"] in pa.ipc.open_stream(messages[index]).read_all().column("id").to_pylist()
        elif row["id"] is not None:
            assert json.loads(messages[index])["id"] == row["id"]
    if fmt == "json" and mode == "PERMISSIVE":
        assert offsets == [FIRST + i for i in range(len(messages))]


@pytest.mark.parametrize(
    "fields, fragment",
    [
        (DATA, "which must be the last four of the declared schema (id, reading)"),
        (METADATA + DATA, "which must be the last four"),
        (DATA + METADATA[:3] + [StructField("timestamp", StringType())], "which must be the last four"),
        (
            [StructField("offset", LongType())] + DATA + METADATA,
            "the message column 'offset' has the name of a metadata",
        ),
    ],
)
def test_a_schema_without_the_columns_last_or_with_a_clash_is_refused(fields, fragment):
    with pytest.raises(OptionError, match="option 'includeMetadata'") as error:
        make_decoder("json", StructType(fields), include_metadata=True)
    assert fragment in str(error.value)
    with pytest.raises(OptionError, match="applies to formats 'json' and 'arrow'"):
        make_decoder("text", StructType(DATA + METADATA), include_metadata=True)


@pytest.mark.spark
def test_a_sub_query_on_two_topics_tells_them_apart_and_traces_offsets(spark, free_port, spool_dir, tmp_path):
    """The issue's case: json over sub, two topics; each row says its topic and offset."""
    import zmq

    endpoint = f"tcp://127.0.0.1:{free_port}"
    messages = [
        [b"alpha" if i % 2 == 0 else b"beta", json.dumps({"id": i, "reading": i / 2}).encode()] for i in range(200)
    ]
    df = (
        spark.readStream.format("zmq")
        .option("pattern", "sub")
        .option("endpoints", "@" + endpoint)
        .option("topics", "alpha,beta")
        .option("format", "json")
        .option("includeMetadata", "true")
        .option("spoolDir", spool_dir)
        .schema("id long, reading double, topic string, partition int, offset long, timestamp timestamp")
        .load()
    )
    query = (
        df.writeStream.format("memory")
        .queryName("include_metadata_sub")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        wait_until(
            lambda: query.lastProgress and query.lastProgress["sources"][0]["latestOffset"],
            120,
            "the reader's first offsets (its socket bound)",
        )
        publisher = Producer(endpoint, [], socket_type=zmq.PUB)
        wait_until(lambda: _sends_through(publisher, spark), 60, "the subscription to reach the publisher")
        publisher.messages = messages
        publisher.start()
        publisher.finish()
        wait_until(lambda: spark.table("include_metadata_sub").where("id >= 0").count() >= 200, 120, "200 rows")
        rows = spark.table("include_metadata_sub").where("id >= 0").collect()
        assert sorted(r.id for r in rows) == list(range(200))
        assert all(r.topic == ("alpha" if r.id % 2 == 0 else "beta") for r in rows)
        assert all(r.partition == 0 and r.timestamp is not None for r in rows)
        by_offset = sorted(rows, key=lambda r: r.offset)
        assert [r.id for r in by_offset] == list(range(200))  # offsets follow arrival order
        assert len({r.offset for r in rows}) == 200
    finally:
        query.stop()


def _sends_through(publisher, spark) -> bool:
    """Publish a probe (id -1) until one arrives: SUB joins late (RFC 29), probes are dropped."""
    publisher.socket.send_multipart([b"alpha", json.dumps({"id": -1, "reading": 0}).encode()])
    return spark.table("include_metadata_sub").where("id < 0").count() > 0


@pytest.mark.spark
def test_arrow_rows_carry_their_message_offset_in_a_stream(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, [_arrow([0, 1, 2]), _arrow([3]), _arrow([4, 5])]).start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("includeMetadata", "true")
        .option("spoolDir", spool_dir)
        .option("timeout", 2)
        .option("startingOffsets", "earliest")
        .schema("id long, reading double, topic string, partition int, offset long, timestamp timestamp")
        .load()
    )
    rows, error = run_available_now(spark, df, tmp_path, "include_metadata_arrow", timeout=150)
    assert error is None, error
    assert sorted((r.id, r.offset, r.topic, r.partition) for r in rows) == [
        (0, 0, None, 0),
        (1, 0, None, 0),
        (2, 0, None, 0),
        (3, 1, None, 0),
        (4, 2, None, 0),
        (5, 2, None, 0),
    ]
