"""The sink's encoders, without Spark or sockets: each format's messages for given Arrow
batches, byte for byte, in the shape its pattern sends (bare payloads for push/scatter,
``(topic, payload)`` for pub), and the Arrow encoder's numbering and ``last`` mark."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from spark_zmq.options import SinkOptions
from spark_zmq.sink.encoders import (
    ArrowEncoder,
    ArrowTopicEncoder,
    JsonEncoder,
    RawEncoder,
    RowTopics,
    TaskHeader,
    TextEncoder,
    arrow_message,
    check_schema,
    encoder_for,
)

pytestmark = pytest.mark.timeout(60)

HEADER: TaskHeader = {"query_id": "q-1", "batch_id": 7, "partition": 3, "attempt": 1, "attempt_id": "run-a"}


def options(**given: str) -> SinkOptions:
    return SinkOptions.parse({"endpoints": "tcp://127.0.0.1:1", **given})


def batch(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(columns)


def encode_all(encoder, batches) -> list:
    out = []
    for b in batches:
        out += encoder.encode(b)
    return out + encoder.finish()


def read(message: bytes) -> tuple[pa.Table, dict[str, str]]:
    table = pa.ipc.open_stream(message).read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return table, meta


# -- which encoder -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, pattern, extra, expected",
    [
        ("raw", "push", {}, RawEncoder),
        ("raw", "scatter", {}, RawEncoder),
        ("text", "push", {}, TextEncoder),
        ("json", "push", {}, JsonEncoder),
        ("arrow", "push", {}, ArrowEncoder),
        ("arrow", "scatter", {}, ArrowEncoder),
        ("raw", "pub", {"topic": "t"}, RowTopics),
        ("json", "pub", {}, RowTopics),
        ("arrow", "pub", {}, ArrowTopicEncoder),
    ],
)
def test_encoder_for_picks_the_format_in_its_patterns_shape(fmt, pattern, extra, expected):
    encoder = encoder_for(options(format=fmt, pattern=pattern, **extra), HEADER)
    assert type(encoder) is expected
    assert encoder.fmt == fmt


# -- raw and text --------------------------------------------------------------------------


def test_raw_sends_each_binary_value_as_it_is_and_a_null_as_an_empty_message():
    encoder = encoder_for(options(format="raw"), HEADER)
    rows = batch(value=pa.array([b"\x00\xff", None, b"", b"abc"], pa.binary()), id=pa.array([1, 2, 3, 4]))
    assert encoder.encode(rows) == [b"\x00\xff", b"", b"", b"abc"]
    assert encoder.finish() == []


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string(), pa.large_binary()])
@pytest.mark.parametrize("fmt", ["raw", "text"])
def test_a_string_value_is_sent_as_its_utf8_bytes(fmt, kind):
    values = ["é-1", None, "", "x"]
    column = pa.array([v if v is None or not pa.types.is_large_binary(kind) else v.encode() for v in values], kind)
    payloads = encoder_for(options(format=fmt), HEADER).encode(batch(value=column))
    assert payloads == [b"\xc3\xa9-1", b"", b"", b"x"]
    assert all(type(p) is bytes for p in payloads)


def test_raw_pub_with_a_fixed_topic_frames_every_row_with_it():
    encoder = encoder_for(options(format="raw", pattern="pub", topic="news"), HEADER)
    rows = batch(value=pa.array(["a", None]), topic=pa.array(["x", "y"]))  # the column is data here
    assert encoder.encode(rows) == [(b"news", b"a"), (b"news", b"")]


def test_an_empty_fixed_topic_is_a_topic_frame_of_its_own():
    encoder = encoder_for(options(format="text", pattern="pub", topic=""), HEADER)
    assert encoder.encode(batch(value=pa.array(["a"]))) == [(b"", b"a")]


def test_raw_pub_takes_each_rows_topic_from_its_column_a_null_topic_as_the_empty_one():
    encoder = encoder_for(options(format="raw", pattern="pub"), HEADER)
    rows = batch(value=pa.array([b"1", b"2", b"3"], pa.binary()), topic=pa.array(["a", None, "b"]))
    assert encoder.encode(rows) == [(b"a", b"1"), (b"", b"2"), (b"b", b"3")]


# -- json ----------------------------------------------------------------------------------


def test_json_sends_each_row_as_one_object_binary_as_text_and_unicode_unescaped():
    encoder = encoder_for(options(format="json"), HEADER)
    rows = batch(id=pa.array([1, None]), name=pa.array(["é", "b"]), blob=pa.array([b"\xff", b"ok"], pa.binary()))
    assert encoder.encode(rows) == [
        json.dumps({"id": 1, "name": "é", "blob": "\ufffd"}, ensure_ascii=False).encode(),
        b'{"id": null, "name": "b", "blob": "ok"}',
    ]


def test_json_push_keeps_a_topic_column_as_data():
    rows = batch(id=pa.array([1]), topic=pa.array(["t"]))
    assert encoder_for(options(format="json"), HEADER).encode(rows) == [b'{"id": 1, "topic": "t"}']


def test_json_pub_routes_by_the_topic_column_and_leaves_it_out_of_the_object():
    encoder = encoder_for(options(format="json", pattern="pub"), HEADER)
    rows = batch(id=pa.array([1, 2]), topic=pa.array([None, "t"]))
    assert encoder.encode(rows) == [(b"", b'{"id": 1}'), (b"t", b'{"id": 2}')]


def test_json_pub_with_a_fixed_topic_keeps_the_topic_column_in_the_object():
    encoder = encoder_for(options(format="json", pattern="pub", topic="f"), HEADER)
    rows = batch(id=pa.array([1]), topic=pa.array(["t"]))
    assert encoder.encode(rows) == [(b"f", b'{"id": 1, "topic": "t"}')]


# -- arrow ---------------------------------------------------------------------------------


def ids(n: int, start: int = 0) -> pa.RecordBatch:
    return batch(id=pa.array(range(start, start + n), pa.int64()))


def test_arrow_slices_by_rows_per_message_numbers_across_batches_and_marks_only_the_last():
    encoder = encoder_for(options(format="arrow", rowsPerMessage="4"), HEADER)
    first = encoder.encode(ids(10))
    assert len(first) == 2  # the third message (rows 8-9) is held back
    second = encoder.encode(ids(5, start=10))
    assert len(second) == 2  # rows 8-9, then 10-13; 14 held
    rest = encoder.finish()
    messages = first + second + rest
    assert len(rest) == 1 and encoder.finish() == []
    tables = [read(m) for m in messages]
    assert [t.column("id").to_pylist() for t, _ in tables] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9],
        [10, 11, 12, 13],
        [14],
    ]
    assert [meta["spark_zmq.sequence"] for _, meta in tables] == ["0", "1", "2", "3", "4"]
    assert [meta["spark_zmq.last"] for _, meta in tables] == ["false"] * 4 + ["true"]
    for _, meta in tables:
        assert {f"spark_zmq.{k}": str(v) for k, v in HEADER.items()}.items() <= meta.items()


def test_arrow_messages_are_the_ipc_streams_arrow_message_makes():
    rows = batch(id=pa.array([1, 2, 3], pa.int64()), value=pa.array(["a", None, "c"]))
    encoder = encoder_for(options(format="arrow", rowsPerMessage="2"), HEADER)
    assert encode_all(encoder, [rows]) == [
        arrow_message(rows.slice(0, 2), {**HEADER, "sequence": 0, "last": "false"}),
        arrow_message(rows.slice(2, 2), {**HEADER, "sequence": 1, "last": "true"}),
    ]


def test_arrow_keeps_the_schemas_own_metadata_beside_the_header():
    rows = ids(1).replace_schema_metadata({b"origin": b"test"})
    (message,) = encode_all(encoder_for(options(format="arrow"), HEADER), [rows])
    _, meta = read(message)
    assert meta["origin"] == "test" and meta["spark_zmq.last"] == "true"


def test_an_empty_batch_makes_no_message_and_does_not_disturb_the_numbering():
    encoder = encoder_for(options(format="arrow", rowsPerMessage="2"), HEADER)
    out = encoder.encode(ids(0)) + encoder.encode(ids(3)) + encoder.encode(ids(0, start=3)) + encoder.finish()
    assert [read(m)[1]["spark_zmq.sequence"] for m in out] == ["0", "1"]
    assert encoder_for(options(format="arrow"), HEADER).finish() == []  # a task without rows sends nothing


def test_arrow_pub_groups_a_batch_by_topic_column_and_leaves_the_column_out():
    encoder = encoder_for(options(format="arrow", pattern="pub", rowsPerMessage="2"), HEADER)
    rows = batch(id=pa.array([1, 2, 3, 4, 5]), topic=pa.array(["a", None, "a", "b", "a"]))
    out = encode_all(encoder, [rows])
    got = [(topic, *read(m)) for topic, m in out]
    assert [(topic, table.column("id").to_pylist()) for topic, table, _ in got] == [
        (b"a", [1, 3]),
        (b"a", [5]),
        (b"", [2]),
        (b"b", [4]),
    ]
    assert all(table.schema.names == ["id"] for _, table, _ in got)
    assert [meta["spark_zmq.sequence"] for _, _, meta in got] == ["0", "1", "2", "3"]
    assert [meta["spark_zmq.last"] for _, _, meta in got] == ["false", "false", "false", "true"]


def test_arrow_pub_with_a_fixed_topic_sends_whole_rows_under_it():
    encoder = encoder_for(options(format="arrow", pattern="pub", topic="t"), HEADER)
    rows = batch(id=pa.array([1]), topic=pa.array(["x"]))
    ((topic, message),) = encode_all(encoder, [rows])
    assert topic == b"t" and read(message)[0].schema.names == ["id", "topic"]


@given(sizes=st.lists(st.integers(0, 40), max_size=8), step=st.integers(1, 12), pub=st.booleans())
def test_arrow_messages_give_back_the_rows_numbered_in_order_with_one_last(sizes, step, pub):
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    extra = {"pattern": "pub", "topic": "t"} if pub else {}
    encoder = encoder_for(options(format="arrow", rowsPerMessage=str(step), **extra), HEADER)
    messages = encode_all(encoder, [ids(n, start) for n, start in zip(sizes, starts)])
    payloads = [m for _, m in messages] if pub else messages
    tables = [read(m) for m in payloads]
    assert [i for t, _ in tables for i in t.column("id").to_pylist()] == list(range(sum(sizes)))
    assert all(0 < t.num_rows <= step for t, _ in tables)
    assert [int(meta["spark_zmq.sequence"]) for _, meta in tables] == list(range(len(tables)))
    assert [meta["spark_zmq.last"] for _, meta in tables] == ["false"] * (len(tables) - 1) + ["true"] * bool(tables)


# -- the schema, on the driver -------------------------------------------------------------


@pytest.mark.parametrize(
    "given, fields, says",
    [
        ({"format": "raw"}, [StructField("id", LongType())], "sends the 'value' column"),
        ({"format": "text"}, [StructField("value", LongType())], "must be binary or string"),
        ({"format": "json", "pattern": "pub"}, [StructField("id", LongType())], "pattern 'pub' needs a topic"),
        (
            {"format": "arrow", "pattern": "pub"},
            [StructField("topic", BinaryType())],
            "column 'topic' must be a string",
        ),
    ],
)
def test_check_schema_names_the_column_and_the_fix(given, fields, says):
    with pytest.raises(ValueError, match=says):
        check_schema(options(**given), StructType(fields))


@pytest.mark.parametrize(
    "given, fields",
    [
        ({"format": "raw"}, [StructField("value", BinaryType())]),
        (
            {"format": "text", "pattern": "pub"},
            [StructField("value", StringType()), StructField("topic", StringType())],
        ),
        ({"format": "json", "pattern": "pub", "topic": "t"}, [StructField("id", LongType())]),
        ({"format": "arrow"}, [StructField("id", LongType())]),
    ],
)
def test_check_schema_admits_what_the_encoders_can_send(given, fields):
    check_schema(options(**given), StructType(fields))
