"""``includeHeaders`` (format ``arrow``): each row's ``headers map<string,string>`` holds the
custom metadata of the Arrow message it came in, plus ``spark_zmq.row``, its position in
that message.

Spark takes a declared schema as it is (a Python data source cannot add a column to it),
so the user declares the ``headers`` column and the source fills it instead of reading it
from the message. The first tests need no Spark (the map building, its byte cap, hostile
messages); the rest read through Spark from plain pyzmq PUSH producers on real sockets.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BooleanType, LongType, MapType, StringType, StructField, StructType
from zmqtest import Producer, examples, run_available_now

from spark_zmq.arrow import guard as arrow_guard
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.options import OptionError, SourceOptions
from spark_zmq.source.decoders import (
    ROW_KEY,
    Decoder,
    MalformedMessageError,
    decoder_for,
    headers_column,
    headers_template,
    make_decoder,
)
from spark_zmq.source.decoders import base as decoders_base

pytestmark = pytest.mark.timeout(180)

PROPERTY = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEADERS = StructField("headers", MapType(StringType(), StringType(), True), True)
SCHEMA = StructType([StructField("id", LongType(), True), HEADERS])
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
# what the sink puts into every arrow message it sends (spark_zmq/sink/encoders/arrow.py)
SINK_KEYS = [
    b"spark_zmq.query_id",
    b"spark_zmq.batch_id",
    b"spark_zmq.partition",
    b"spark_zmq.sequence",
    b"spark_zmq.attempt",
    b"spark_zmq.attempt_id",
    b"spark_zmq.last",
]


def ipc(batches: list, metadata=None, compression=None) -> bytes:
    """One Arrow IPC stream message of ``batches``, ``metadata`` on its schema."""
    schema = batches[0].schema.with_metadata(metadata) if metadata is not None else batches[0].schema
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch.replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()


def ids(lo: int, hi: int) -> pa.RecordBatch:
    return pa.record_batch(
        {"id": pa.array(range(lo, hi), pa.int64()), "extra": pa.array(["x"] * (hi - lo), pa.string())}
    )


def expected(metadata, position: int) -> dict:
    """The headers a row at ``position`` of a message with ``metadata`` must get."""
    out = {}
    for key, value in (metadata or {}).items():
        out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    out.pop(ROW_KEY, None)
    out[ROW_KEY] = str(position)
    return out


def decode(decoder: Decoder, messages: list) -> list[pa.RecordBatch]:
    out = list(decoder.decode(messages_to_batch(messages, None, "arrow", 0), 0, 1000))
    for batch in out:
        assert batch.schema.equals(decoder.target)
        batch.validate(full=True)
    return out


def rows_of(out: list[pa.RecordBatch]) -> list[dict]:
    return [{**row, "headers": dict(row["headers"])} for batch in out for row in batch.to_pylist()]


# -- the map column, without Spark ------------------------------------------------------------

metadata_bytes = st.one_of(st.binary(max_size=12), st.sampled_from(SINK_KEYS + [ROW_KEY.encode(), b"\xff\xfe", b""]))
metadata = st.one_of(st.none(), st.dictionaries(metadata_bytes, st.binary(max_size=16), max_size=8))


@PROPERTY
@given(metadata, st.integers(0, 2**40), st.integers(0, 40), st.booleans())
def test_headers_column_is_the_metadata_then_the_row_on_every_row(meta, first, rows, values_nullable):
    map_type = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=values_nullable))
    column = headers_column(headers_template(meta), first, rows, map_type)
    column.validate(full=True)
    assert column.type == map_type and len(column) == rows and column.null_count == 0
    got = column.to_pylist()
    for i, row in enumerate(got):
        assert [k for k, _ in row][-1] == ROW_KEY  # the source's key comes last, exactly once
        assert [k for k, _ in row].count(ROW_KEY) == 1
        assert dict(row) == expected(meta, first + i)


@PROPERTY
@given(metadata, st.lists(st.integers(0, 6), min_size=1, max_size=4), st.sampled_from([None, "lz4", "zstd"]))
def test_decoded_rows_carry_their_message_metadata_and_position(meta, sizes, compression):
    batches, start = [], 0
    for size in sizes:
        batches.append(ids(start, start + size))
        start += size
    message = ipc(batches, meta, compression)
    plain = ipc([ids(100, 102)])
    decoder = make_decoder("arrow", SCHEMA, mode="FAILFAST", include_headers=True)
    rows = rows_of(decode(decoder, [message, plain]))
    assert [r["id"] for r in rows] == list(range(start)) + [100, 101]
    for r in rows[:start]:
        assert r["headers"] == expected(meta, r["id"])  # ids number the rows across the batches
    assert [r["headers"] for r in rows[start:]] == [{ROW_KEY: "0"}, {ROW_KEY: "1"}]


ARROW_TOKENS = [b"\xff\xff\xff\xff", b"\x00" * 8, b"\xff" * 8, b"\x7f\xff\xff\xff", b"\x00\x00\x00\x80"]


@PROPERTY
@given(st.data(), st.sampled_from(MODES))
def test_hostile_messages_only_ever_follow_mode(data, mode):
    """Bytes flipped, cut or inserted anywhere (metadata included): nothing but
    ``MalformedMessageError`` (FAILFAST, PERMISSIVE), never an invalid batch."""
    message = bytearray(ipc([ids(0, 3), ids(3, 5)], data.draw(metadata)))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(message)))
        op = data.draw(st.integers(0, 2))
        if op == 0 and message:
            message[min(pos, len(message) - 1)] ^= 1 << data.draw(st.integers(0, 7))
        elif op == 1:
            del message[pos : pos + data.draw(st.integers(1, 32))]
        else:
            message[pos:pos] = data.draw(st.sampled_from(ARROW_TOKENS) | st.binary(min_size=1, max_size=8))
    decoder = make_decoder("arrow", SCHEMA, mode=mode, include_headers=True)
    try:
        out = decode(decoder, [bytes(message)])
    except MalformedMessageError:
        assert mode != "DROPMALFORMED"
        return
    for row in rows_of(out):
        assert ROW_KEY in row["headers"]


def test_a_message_whose_headers_would_exceed_the_cap_is_malformed():
    """The map repeats on every row: rows x metadata is capped like decompressed buffers."""
    many = pa.record_batch({"id": pa.array(range(20_000), pa.int64())})
    message = ipc([many], {b"k": b"v" * 4096})  # ~80 MB of headers from a 60 KB message
    cap = 16 * 1024 * 1024  # max_body_bytes for maxMessageBytes = 1 MiB
    with pytest.raises(MalformedMessageError, match="headers column would copy about"):
        decode(
            make_decoder("arrow", SCHEMA, mode="FAILFAST", include_headers=True, max_message_bytes=1 << 20), [message]
        )
    dropping = make_decoder("arrow", SCHEMA, mode="DROPMALFORMED", include_headers=True, max_message_bytes=1 << 20)
    assert dropping.max_body_bytes == cap
    assert decode(dropping, [message, ipc([ids(0, 2)], {b"k": b"v"})])[0].num_rows == 2
    assert dropping.malformed == 1


def test_a_message_without_metadata_is_never_over_the_cap():
    """The row key alone is not capped: rows are (arrow_guard.MAX_ROWS), so includeHeaders
    never makes a message without metadata malformed, even of many tiny rows."""
    tiny = pa.record_batch({"flag": pa.array([True] * 50_000, pa.bool_())})
    message = ipc([tiny])
    assert len(message) < 16 * 1024
    schema = StructType([StructField("flag", BooleanType()), HEADERS])
    decoder = make_decoder("arrow", schema, mode="FAILFAST", include_headers=True, max_message_bytes=16 * 1024)
    assert decoder.max_body_bytes == 256 * 1024 < 50_000 * len(ROW_KEY)
    rows = rows_of(decode(decoder, [message]))
    assert len(rows) == 50_000 and rows[-1]["headers"] == {ROW_KEY: "49999"}


def test_large_outputs_are_split_and_row_positions_run_on(monkeypatch):
    monkeypatch.setattr(decoders_base, "_MAX_OUTPUT_BATCH_BYTES", 4096)
    message = ipc([ids(0, 300), ids(300, 500)], {b"spark_zmq.sequence": b"7"})
    out = decode(make_decoder("arrow", SCHEMA, include_headers=True), [message])
    assert len(out) > 2
    rows = rows_of(out)
    assert [r["id"] for r in rows] == list(range(500))
    assert all(r["headers"] == {"spark_zmq.sequence": "7", ROW_KEY: str(r["id"])} for r in rows)


def test_a_schema_of_headers_only_counts_the_message_rows():
    schema = StructType([StructField("headers", MapType(StringType(), StringType(), False), False)])
    out = decode(make_decoder("arrow", schema, include_headers=True), [ipc([ids(0, 2), ids(2, 3)], {b"a": b"b"})])
    assert [dict(r["headers"]) for b in out for r in b.to_pylist()] == [{"a": "b", ROW_KEY: str(i)} for i in range(3)]


def test_without_the_option_a_headers_column_is_read_from_the_message_as_before():
    column = pa.array([[("from", "message")]], pa.map_(pa.string(), pa.string()))
    message = ipc([pa.record_batch({"id": pa.array([1], pa.int64()), "headers": column})], {b"k": b"v"})
    out = decode(make_decoder("arrow", SCHEMA), [message])
    assert rows_of(out) == [{"id": 1, "headers": {"from": "message"}}]
    assert arrow_guard.read_batches(message)[0].num_rows == 1  # read_batches itself is unchanged


# -- the option and the schema, without Spark ---------------------------------------------------

SRC = {"endpoints": "@tcp://127.0.0.1:5999"}


def test_option_parsing():
    assert SourceOptions.parse({**SRC, "format": "arrow"}).include_headers is False
    assert SourceOptions.parse({**SRC, "format": "arrow", "INCLUDEHEADERS": " True "}).include_headers is True
    assert SourceOptions.parse({**SRC, "format": "json", "includeHeaders": "false"}).include_headers is False
    with pytest.raises(OptionError, match="option 'includeHeaders' = 'maybe' is not a boolean; expected true or false"):
        SourceOptions.parse({**SRC, "format": "arrow", "includeHeaders": "maybe"})
    for fmt in ("raw", "text", "json"):
        with pytest.raises(OptionError, match="option 'includeHeaders' applies to format 'arrow' only") as info:
            SourceOptions.parse({**SRC, "format": fmt, "includeHeaders": "true"})
        assert info.value.option == "includeHeaders" and f"format is {fmt!r}" in str(info.value)


@pytest.mark.parametrize(
    "schema, fragment",
    [
        (StructType([StructField("id", LongType())]), "which the declared schema (id) lacks"),
        (
            StructType([StructField("id", LongType()), StructField("Headers", MapType(StringType(), StringType()))]),
            "column 'Headers' differs in case",
        ),
        (StructType([StructField("headers", StringType())]), "must be declared map<string,string>, not string"),
        (StructType([StructField("headers", MapType(StringType(), LongType()))]), "not map<string,bigint>"),
    ],
)
def test_a_schema_without_a_headers_map_column_is_refused_naming_the_option(schema, fragment):
    options = SourceOptions.parse({**SRC, "format": "arrow", "includeHeaders": "true"})
    with pytest.raises(OptionError) as info:
        decoder_for(options, schema)
    assert info.value.option == "includeHeaders" and "option 'includeHeaders'" in str(info.value)
    assert fragment in str(info.value)


# -- through Spark, on real sockets ---------------------------------------------------------------


def _batch_read(spark, endpoint: str, schema: str, messages: int, **options):
    reader = (
        spark.read.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("pattern", "pull")
        .option("format", "arrow")
        .option("includeHeaders", "true")
        .option("maxMessages", messages)
        .option("timeout", 30)
        .schema(schema)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.spark
def test_batch_read_fills_headers_from_each_message(spark, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    sink_like = {
        b"spark_zmq.query_id": b"q-1",
        b"spark_zmq.batch_id": b"4",
        b"spark_zmq.partition": b"1",
        b"spark_zmq.sequence": b"0",
        b"spark_zmq.attempt": b"0",
        b"spark_zmq.attempt_id": b"ab12",
        b"spark_zmq.last": b"true",
    }
    not_utf8 = {b"caf\xe9": b"\xff\xfeok", b"plain": b"text"}
    messages = [ipc([ids(0, 2), ids(2, 5)], sink_like), ipc([ids(10, 12)], not_utf8), ipc([ids(20, 21)])]
    Producer(endpoint, messages).start()
    rows = _batch_read(spark, endpoint, "id long, headers map<string,string>", len(messages)).collect()
    got = {r.id: r.headers for r in rows}
    assert sorted(got) == [0, 1, 2, 3, 4, 10, 11, 20]
    for i in range(5):  # one message, two record batches: positions run across both
        assert got[i] == {**{k.decode(): v.decode() for k, v in sink_like.items()}, ROW_KEY: str(i)}
    assert got[10] == {"caf\ufffd": "\ufffd\ufffdok", "plain": "text", ROW_KEY: "0"}
    assert got[11] == {"caf\ufffd": "\ufffd\ufffdok", "plain": "text", ROW_KEY: "1"}
    assert got[20] == {ROW_KEY: "0"}  # a message without metadata


@pytest.mark.spark
def test_batch_read_takes_the_headers_column_where_it_is_declared(spark, free_port):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, [ipc([ids(0, 2)], {b"spark_zmq.sequence": b"9"})]).start()
    df = _batch_read(spark, endpoint, "headers map<string,string> not null, id long", 1)
    assert df.columns == ["headers", "id"]
    rows = sorted(df.collect(), key=lambda r: r.id)
    assert [(r.id, r.headers) for r in rows] == [(i, {"spark_zmq.sequence": "9", ROW_KEY: str(i)}) for i in (0, 1)]


@pytest.mark.spark
def test_stream_read_fills_headers(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    messages = [
        ipc([ids(0, 2), ids(2, 3)], {b"spark_zmq.batch_id": b"0"}),
        ipc([ids(3, 4)], {b"spark_zmq.batch_id": b"1"}),
        ipc([ids(4, 6)]),
    ]
    Producer(endpoint, messages).start()
    df = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", "arrow")
        .option("includeHeaders", "true")
        .option("spoolDir", spool_dir)
        .option("timeout", 2)
        .schema("id long, headers map<string,string>")
        .load()
    )
    rows, error = run_available_now(spark, df, tmp_path, "include_headers_stream", timeout=150)
    assert error is None
    got = {r.id: r.headers for r in rows}
    assert got == {
        0: {"spark_zmq.batch_id": "0", ROW_KEY: "0"},
        1: {"spark_zmq.batch_id": "0", ROW_KEY: "1"},
        2: {"spark_zmq.batch_id": "0", ROW_KEY: "2"},
        3: {"spark_zmq.batch_id": "1", ROW_KEY: "0"},
        4: {ROW_KEY: "0"},
        5: {ROW_KEY: "1"},
    }


@pytest.mark.spark
@pytest.mark.parametrize(
    "options, schema, fragment",
    [
        (
            {"format": "json"},
            "id long, headers map<string,string>",
            "option 'includeHeaders' applies to format 'arrow' only; format is 'json'",
        ),
        ({"format": "text"}, None, "option 'includeHeaders' applies to format 'arrow' only; format is 'text'"),
        (
            {"format": "arrow", "includeHeaders": "maybe"},
            "id long, headers map<string,string>",
            "option 'includeHeaders' = 'maybe' is not a boolean",
        ),
        (
            {"format": "arrow"},
            "id long",
            "option 'includeHeaders' = true fills the column 'headers map<string,string>'",
        ),
        ({"format": "arrow"}, "id long, headers string", "must be declared map<string,string>, not string"),
        ({"format": "arrow"}, None, "schema('sensor string, reading double, headers map<string,string>')"),
    ],
)
def test_bad_uses_fail_naming_the_option(spark, free_port, options, schema, fragment):
    reader = (
        spark.read.format("zmq")
        .option("endpoints", f"@tcp://127.0.0.1:{free_port}")
        .option("includeHeaders", "true")
        .option("timeout", 1)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    if schema is not None:
        reader = reader.schema(schema)
    with pytest.raises(Exception) as info:
        reader.load().collect()
    assert fragment in str(info.value) and "includeHeaders" in str(info.value)
