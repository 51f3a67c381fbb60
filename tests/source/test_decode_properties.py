"""The decoders survive any input: property tests (Hypothesis) and one regression test per
reported bug.

These run in this process, so an input that crashes the worker would take pytest down:
the crash-prone inputs are searched for by ``tools/fuzz.py`` in forked children instead
(``test_fuzz_smoke.py``), and the regression tests for the crashes run in a subprocess.
Here: whatever the bytes, decode raises nothing but ``MalformedMessageError`` (json: only
under FAILFAST; arrow: under PERMISSIVE and FAILFAST), every output batch has exactly the
target schema and passes full validation, row counts add up, valid messages are never
called malformed, and ``count_rows`` never raises and counts valid messages exactly.
"""

from __future__ import annotations

import json
import pickle
import re
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from zmqtest import examples

from spark_zmq.arrow import guard as arrow_guard
from spark_zmq.ingest.receiver import messages_to_batch
from spark_zmq.options import OptionError, SourceOptions
from spark_zmq.source.decoders import (
    ArrowDecoder,
    DecodeError,
    Decoder,
    JsonDecoder,
    MalformedMessageError,
    RawDecoder,
    SchemaMismatchError,
    TextDecoder,
    decoder_for,
    make_decoder,
)
from spark_zmq.source.decoders import json as json_decoder
from spark_zmq.sparkglue.schemas import fixed_schema

pytestmark = pytest.mark.timeout(600)

PROPERTY = settings(
    max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
FIRST = 1000  # first offset of the decoded batches: error messages must name first + index

JSON_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("score", DoubleType()),
        StructField("tags", ArrayType(StringType())),
        StructField("inner", StructType([StructField("a", IntegerType()), StructField("b", ArrayType(LongType()))])),
        StructField("_corrupt", StringType()),
    ]
)


def decode_all(decoder: Decoder, messages: list, fmt: str) -> list:
    batch = messages_to_batch(messages, None, fmt, 0)
    return list(decoder.decode(batch, 2, FIRST))


def check_batches(out: list, decoder: Decoder) -> int:
    for batch in out:
        assert batch.schema.equals(decoder.target), batch.schema
        batch.validate(full=True)
    return sum(b.num_rows for b in out)


def failed_index(exc: MalformedMessageError) -> int:
    found = re.search(r"at channel 2, offset (\d+)", str(exc))
    assert found, str(exc)
    return int(found.group(1)) - FIRST


# -- JSON strategies ---------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)

json_objects = st.fixed_dictionaries(
    {},
    optional={
        "id": st.integers(-(2**63), 2**63 - 1) | st.none(),
        "name": st.text(max_size=30) | st.none(),
        "score": st.floats(allow_nan=False, allow_infinity=False, width=64),
        "tags": st.lists(st.text(max_size=8) | st.none(), max_size=4) | st.none(),
        "inner": st.fixed_dictionaries(
            {},
            optional={
                "a": st.integers(-(2**31), 2**31 - 1),
                "b": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
            },
        ),
        "extra": json_values,
        "\u00e9\U0001f600": json_values,
    },
)


@st.composite
def json_texts(draw) -> bytes:
    """A valid JSON object, in any layout JSON allows around and inside it."""
    obj = draw(json_objects)
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, None, 0, 2])))
    before = draw(st.sampled_from(["", "", " ", "\n", "\t", "\r\n", " " * 20]))
    after = draw(st.sampled_from(["", "", " ", "\n", "\r\n", "\t \n"]))
    return (before + text + after).encode()


NON_OBJECTS = [b"null", b"42", b"[]", b'"text"', b"true", b"false", b"-1.5e3", b"[{}]", b" null ", b"null\n", b""]
TOKENS = [
    b"null",
    b"\n",
    b"\r",
    b"\x00",
    b"\xff",
    b"\xc3",
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b"\\",
    b",",
    b":",
    b"1e999",
    b"\\ud800",
    b"{}",
    b" null ",
    b'"id":1,',
    b"\n{}\n",
]


@st.composite
def mutated(draw, valid: bytes, tokens: list) -> bytes:
    buf = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 5))
        pos = draw(st.integers(0, len(buf)))
        if op == 0 and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == 1:
            del buf[pos:]
        elif op == 2:
            buf[pos:pos] = draw(st.sampled_from(tokens))
        elif op == 3:
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == 4 and len(buf) >= 8:
            i = min(pos, len(buf) - 8)
            value = draw(st.sampled_from([0, 2**64 - 1, 2**31 - 1, 2**31, 2**40, 2**63 - 1, 10**7 + 1]))
            buf[i : i + 8] = value.to_bytes(8, "little")
        elif op == 5:
            del buf[pos : pos + draw(st.integers(1, 32))]
    return bytes(buf)


@st.composite
def json_messages(draw) -> tuple[list, list]:
    """(messages, indices of the valid objects among them)."""
    messages, valid = [], []
    for i in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["valid", "valid", "mutated", "non-object", "bytes"]))
        if kind == "valid":
            messages.append(draw(json_texts()))
            valid.append(i)
        elif kind == "mutated":
            messages.append(draw(mutated(draw(json_texts()), TOKENS)))
        elif kind == "non-object":
            messages.append(draw(st.sampled_from(NON_OBJECTS)))
        else:
            messages.append(draw(st.binary(max_size=40)))
    if draw(st.booleans()):
        messages.insert(0, draw(st.sampled_from(NON_OBJECTS)))
        valid = [i + 1 for i in valid]
    return messages, valid


# -- JSON properties --------------------------------------------------------------------------


@PROPERTY
@given(json_messages(), st.sampled_from(MODES), st.booleans(), st.sampled_from([1 << 20, 64, 1]))
def test_json_decode_follows_mode_for_any_messages(case, mode, with_corrupt_column, min_block):
    messages, valid = case
    decoder = make_decoder("json", JSON_SCHEMA, mode=mode, corrupt_column="_corrupt" if with_corrupt_column else None)
    default_block = json_decoder._MIN_JSON_BLOCK
    json_decoder._MIN_JSON_BLOCK = min_block  # small blocks: many block starts in pyarrow's reader
    try:
        out = decode_all(decoder, messages, "json")
    except MalformedMessageError as exc:
        assert mode == "FAILFAST"
        assert failed_index(exc) not in valid, "a valid object was reported malformed"
        return
    finally:
        json_decoder._MIN_JSON_BLOCK = default_block
    rows = check_batches(out, decoder)
    assert decoder.malformed <= len(messages) - len(valid)
    if mode == "PERMISSIVE":
        assert rows == len(messages)
        table = pa.Table.from_batches(out, schema=decoder.target) if out else None
        for i in valid:
            obj = json.loads(messages[i])
            assert table.column("id")[i].as_py() == obj.get("id")
            assert table.column("name")[i].as_py() == obj.get("name")
            if with_corrupt_column:
                assert table.column("_corrupt")[i].as_py() is None
        if with_corrupt_column:
            for i in set(range(len(messages))) - set(valid):
                corrupt = table.column("_corrupt")[i].as_py()
                if corrupt is not None:
                    assert corrupt == messages[i].decode("utf-8", "replace")
    elif mode == "DROPMALFORMED":
        assert rows == len(messages) - decoder.malformed
    else:
        assert decoder.malformed == 0 and rows == len(messages)


@PROPERTY
@given(st.lists(json_values.filter(lambda v: not isinstance(v, dict)), min_size=1, max_size=5), st.integers(0, 3))
def test_json_values_that_are_not_objects_are_malformed_wherever_they_are(values, position):
    good = b'{"id": 7, "name": "ok"}'
    bad = [json.dumps(v).encode() for v in values]
    messages = [good] * position + bad + [good]
    decoder = make_decoder("json", JSON_SCHEMA, corrupt_column="_corrupt")
    table = pa.Table.from_batches(decode_all(decoder, messages, "json"))
    assert table.num_rows == len(messages) and decoder.malformed == len(bad)
    assert table.column("_corrupt").to_pylist() == [None] * position + [b.decode() for b in bad] + [None]
    with pytest.raises(MalformedMessageError) as info:
        decode_all(make_decoder("json", JSON_SCHEMA, mode="FAILFAST"), messages, "json")
    assert failed_index(info.value) == position


@PROPERTY
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=20), st.sampled_from(MODES))
def test_json_decode_of_arbitrary_bytes(messages, mode):
    decoder = make_decoder("json", JSON_SCHEMA, mode=mode, corrupt_column="_corrupt")
    try:
        rows = check_batches(decode_all(decoder, messages, "json"), decoder)
    except MalformedMessageError:
        assert mode == "FAILFAST"
        return
    assert rows == (len(messages) if mode == "PERMISSIVE" else len(messages) - decoder.malformed)


# -- raw / text --------------------------------------------------------------------------------


@PROPERTY
@given(st.lists(st.binary(max_size=40) | st.text(max_size=20).map(str.encode), min_size=1, max_size=30))
def test_text_replaces_invalid_utf8_and_raw_passes_bytes_through(messages):
    for fmt in ("raw", "text"):
        decoder = make_decoder(fmt, fixed_schema(fmt))
        out = decode_all(decoder, messages, fmt)
        assert check_batches(out, decoder) == len(messages)
        values = [v for b in out for v in b.column("value").to_pylist()]
        expected = messages if fmt == "raw" else [m.decode("utf-8", "replace") for m in messages]
        assert values == expected
        assert [o for b in out for o in b.column("offset").to_pylist()] == list(range(FIRST, FIRST + len(messages)))


# -- Arrow strategies ----------------------------------------------------------------------


def ipc(batches: list, compression=None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


WORDS = st.none() | st.text(max_size=12)
INT64 = st.integers(-(2**63), 2**63 - 1)
# column name -> (the Arrow types it is sent as, the Spark type it converts to)
ARROW_COLUMNS = {
    "i": ([pa.int64()], LongType()),
    "s": ([pa.string(), pa.large_string(), pa.string_view()], StringType()),
    "b": ([pa.binary(), pa.large_binary()], BinaryType()),
    "l": ([pa.list_(pa.int32()), pa.large_list(pa.int32()), pa.list_view(pa.int32())], ArrayType(IntegerType())),
    "d": ([pa.dictionary(pa.int32(), pa.string())], StringType()),
    "st": (
        [pa.struct([("x", pa.int32()), ("y", pa.string())])],
        StructType([StructField("x", IntegerType()), StructField("y", StringType())]),
    ),
    "n": ([pa.null()], LongType()),
    "ts": ([pa.timestamp("us", "UTC")], TimestampType()),
    "ls": ([pa.list_(pa.string())], ArrayType(StringType())),
}


def _column(draw, name: str, arrow_type: pa.DataType, n: int) -> pa.Array:
    def rows(values):
        return draw(st.lists(values, min_size=n, max_size=n))

    if name == "i":
        return pa.array(rows(st.none() | INT64), arrow_type)
    if name == "s":
        return pa.array(rows(WORDS), arrow_type)
    if name == "b":
        return pa.array(rows(st.none() | st.binary(max_size=12)), arrow_type)
    if name == "l":
        return pa.array(rows(st.none() | st.lists(st.integers(-100, 100), max_size=4)), arrow_type)
    if name == "d":
        return pa.array(rows(WORDS), pa.string()).dictionary_encode()
    if name == "st":
        pairs = rows(st.tuples(st.integers(-(2**31), 2**31 - 1), WORDS))
        return pa.StructArray.from_arrays(
            [pa.array([p[0] for p in pairs], pa.int32()), pa.array([p[1] for p in pairs], pa.string())],
            names=["x", "y"],
        )
    if name == "n":
        return pa.nulls(n)
    if name == "ts":
        return pa.array(rows(st.none() | st.integers(0, 2**50)), arrow_type)
    return pa.array(rows(st.none() | st.lists(WORDS, max_size=3)), arrow_type)


@st.composite
def arrow_streams(draw) -> tuple[bytes, int, StructType]:
    """(valid IPC stream message, its rows, a Spark schema it converts to)."""
    names = draw(st.lists(st.sampled_from(sorted(ARROW_COLUMNS)), min_size=1, max_size=5, unique=True))
    types = {name: draw(st.sampled_from(ARROW_COLUMNS[name][0])) for name in names}
    batches = []
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.integers(0, 12))
        batches.append(pa.record_batch({name: _column(draw, name, types[name], n) for name in names}))
    message = ipc(batches, draw(st.sampled_from([None, "lz4", "zstd"])))
    spark = StructType([StructField(name, ARROW_COLUMNS[name][1]) for name in names])
    return message, sum(b.num_rows for b in batches), spark


ARROW_TOKENS = [b"\xff\xff\xff\xff", b"\x00" * 8, b"\xff" * 8, b"\x7f\xff\xff\xff", b"\x00\x00\x00\x80"]


# -- Arrow properties ------------------------------------------------------------------------


@PROPERTY
@given(arrow_streams())
def test_count_rows_and_read_batches_agree_with_pyarrow_on_valid_messages(stream):
    message, rows, spark = stream
    assert arrow_guard.count_rows(message) == max(1, rows)
    reference = pa.ipc.open_stream(message).read_all()
    got = arrow_guard.read_batches(message)
    assert pa.Table.from_batches(got, schema=reference.schema).equals(reference)
    decoder = make_decoder("arrow", spark, mode="FAILFAST")
    out = decode_all(decoder, [message], "arrow")
    assert check_batches(out, decoder) == rows
    converted = [row for b in out for row in b.to_pylist()]
    assert len(converted) == rows


@PROPERTY
@given(st.data(), st.sampled_from(MODES))
def test_arrow_decode_of_mutated_messages_follows_mode(data, mode):
    message, rows, spark = data.draw(arrow_streams())
    broken = data.draw(mutated(message, ARROW_TOKENS))
    count = arrow_guard.count_rows(broken)
    assert isinstance(count, int) and 1 <= count <= arrow_guard.MAX_ROWS
    try:
        arrow_guard.read_batches(broken)
    except arrow_guard.MalformedArrowError:
        pass
    decoder = make_decoder("arrow", spark, mode=mode)
    try:
        out = decode_all(decoder, [message, broken, message], "arrow")
    except MalformedMessageError as exc:
        assert mode in ("PERMISSIVE", "FAILFAST")
        assert failed_index(exc) == 1, "a valid message was reported malformed"
        return
    got = check_batches(out, decoder)
    assert got >= 2 * rows  # the valid messages around the broken one
    assert decoder.malformed <= 1


@PROPERTY
@given(st.binary(max_size=300), st.sampled_from(MODES))
def test_arrow_arbitrary_bytes(message, mode):
    assert arrow_guard.count_rows(message) >= 1
    assert arrow_guard.count_rows(b"\xff\xff\xff\xff" + message) >= 1
    decoder = make_decoder("arrow", StructType([StructField("i", LongType())]), mode=mode)
    try:
        check_batches(decode_all(decoder, [message, b"\xff\xff\xff\xff" + message], "arrow"), decoder)
    except MalformedMessageError:
        assert mode != "DROPMALFORMED"


# -- regression tests, one per reported bug -------------------------------------------------


def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter: a crash fails the test instead of pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def test_json_null_first_is_a_malformed_record_not_a_worker_crash():
    result = _run_isolated("""
        from pyspark.sql.types import StructType, StructField, LongType, StringType
        from spark_zmq.source.decoders import make_decoder
        from spark_zmq.ingest.receiver import messages_to_batch
        schema = StructType([StructField("id", LongType()), StructField("_corrupt_record", StringType())])
        decoder = make_decoder("json", schema, corrupt_column="_corrupt_record")
        batch = messages_to_batch([b"null", b'{"id": 1}', b"42"], None, "json", 0)
        print([row for b in decoder.decode(batch, 0, 0) for row in b.to_pylist()])
    """)
    assert result.returncode == 0, f"decoder died (status {result.returncode}): {result.stderr[-2000:]}"
    assert (
        "[{'id': None, '_corrupt_record': 'null'}, {'id': 1, '_corrupt_record': None}, {'id': None, '_corrupt_record': '42'}]"
        in result.stdout
    )


@pytest.mark.parametrize("value", [b"null", b"42", b"[]", b'"text"', b"true"])
def test_json_non_object_after_the_first_message_fails_failfast(value):
    with pytest.raises(MalformedMessageError, match=r"offset 1001 .*not an object"):
        decode_all(make_decoder("json", JSON_SCHEMA, mode="FAILFAST"), [b'{"id": 1}', value, b'{"id": 2}'], "json")


def test_json_object_larger_than_the_default_block_parses():
    big = json.dumps({"id": 5, "name": "x" * (3 << 20)}).encode()
    decoder = make_decoder("json", JSON_SCHEMA, mode="FAILFAST")
    rows = [r for b in decode_all(decoder, [b'{"id": 1}', big], "json") for r in b.to_pylist()]
    assert [r["id"] for r in rows] == [1, 5] and len(rows[1]["name"]) == 3 << 20


def test_failfast_errors_locate_the_message_and_are_no_option_errors():
    """A read task's errors are its own (``DecodeError``), never ``OptionError``, and name
    the message's channel and offset as attributes too, for json and arrow alike."""
    with pytest.raises(MalformedMessageError) as info:
        decode_all(make_decoder("json", JSON_SCHEMA, mode="FAILFAST"), [b'{"id": 1}', b"42"], "json")
    assert (info.value.channel, info.value.offset) == (2, FIRST + 1)
    assert isinstance(info.value, DecodeError) and not isinstance(info.value, OptionError)
    with pytest.raises(MalformedMessageError) as info:
        decode_all(make_decoder("arrow", StructType([StructField("i", LongType())])), [b"not arrow"], "arrow")
    assert (info.value.channel, info.value.offset) == (2, FIRST)
    again = pickle.loads(pickle.dumps(info.value))
    assert (str(again), again.channel, again.offset) == (str(info.value), 2, FIRST)


def test_raw_schema_naming_a_column_the_format_lacks_fails_on_decode():
    decoder = make_decoder("raw", StructType([StructField("value", BinaryType()), StructField("key", StringType())]))
    with pytest.raises(
        SchemaMismatchError,
        match="column 'key' is not produced by format 'raw'; its columns are "
        "value, topic, partition, offset, timestamp",
    ):
        decode_all(decoder, [b"x"], "raw")


def test_one_decoder_class_per_format():
    for fmt, cls in [("raw", RawDecoder), ("text", TextDecoder), ("json", JsonDecoder), ("arrow", ArrowDecoder)]:
        schema = fixed_schema(fmt) or StructType([StructField("id", LongType())])
        options = SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:5999", "format": fmt})
        assert type(decoder_for(options, schema)) is cls and type(make_decoder(fmt, schema)) is cls
    with pytest.raises(ValueError, match="no decoder for format 'csv'"):
        make_decoder("csv", StructType([]))


def test_json_message_over_max_message_bytes_is_malformed():
    decoder = make_decoder("json", JSON_SCHEMA, mode="DROPMALFORMED", max_message_bytes=1024)
    rows = [
        r
        for b in decode_all(decoder, [b'{"id": 1}', json.dumps({"id": 2, "name": "x" * 2000}).encode()], "json")
        for r in b.to_pylist()
    ]
    assert [r["id"] for r in rows] == [1] and decoder.malformed == 1
    with pytest.raises(MalformedMessageError, match="exceeds maxMessageBytes"):
        decode_all(
            make_decoder("json", JSON_SCHEMA, mode="FAILFAST", max_message_bytes=1024),
            [b"{" + b" " * 2000 + b"}"],
            "json",
        )


@pytest.mark.parametrize(
    "message",
    [
        b'{"id": 1} {"id": 2}',
        b'{"id": 1}\n{"id": 2}',
        b'{"name": "\xff"}',
        b'{"name": "a\x00b"}',
        b'{"id": 1}\x00',
        b'{"id": 1, "id": 2}',
        b'{"id": 123456789012345678901234567890}',
        b'{"score": 1e999}',
        b'{"tags": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"name": "\\ud800"}',
    ],
)
def test_json_hostile_objects_follow_mode(message):
    for mode in MODES:
        decoder = make_decoder("json", JSON_SCHEMA, mode=mode, corrupt_column="_corrupt")
        try:
            out = decode_all(decoder, [b'{"id": 0}', message], "json")
        except MalformedMessageError as exc:
            assert mode == "FAILFAST" and failed_index(exc) == 1
            continue
        assert check_batches(out, decoder) == (2 if mode == "PERMISSIVE" else 2 - decoder.malformed)
        assert decoder.malformed == 1


def test_json_deep_nesting_in_an_ignored_field_parses_on_the_fast_path():
    deep = b'{"id": 3, "other": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    rows = [
        r for b in decode_all(make_decoder("json", JSON_SCHEMA, mode="FAILFAST"), [deep], "json") for r in b.to_pylist()
    ]
    assert rows[0]["id"] == 3


def test_json_map_columns_are_refused_when_the_decoder_is_made():
    from pyspark.sql.types import MapType

    with pytest.raises(ValueError, match="cannot decode the declared schema"):
        make_decoder("json", StructType([StructField("m", MapType(StringType(), LongType()))]))


def _first_batch(message: bytes) -> dict:
    """Where the first record batch's metadata fields and body are in ``message``."""
    entries = _layout(message)
    return next(e for e in entries if e["type"] == 3)


def _layout(message: bytes) -> list:
    return arrow_guard.message_layout(message)


def test_arrow_non_monotonic_offsets_never_reach_spark():
    message = bytearray(ipc([pa.record_batch({"s": pa.array(["ab", "cd", "ef"])})]))
    entry = _first_batch(bytes(message))
    _, offset, _ = entry["buffers"][1]  # the offsets of column s
    at = entry["body"] + offset + 4
    message[at : at + 4] = (5).to_bytes(4, "little")  # offsets 0, 5, 4, 6
    schema = StructType([StructField("s", StringType())])
    decoder = make_decoder("arrow", schema, mode="DROPMALFORMED")
    assert decode_all(decoder, [bytes(message)], "arrow") == [] and decoder.malformed == 1
    with pytest.raises(MalformedMessageError, match="offset 1000 cannot be read .*[Oo]ffset"):
        decode_all(make_decoder("arrow", schema, mode="FAILFAST"), [bytes(message)], "arrow")


def test_arrow_invalid_utf8_in_a_string_column_never_reaches_spark():
    message = ipc([pa.record_batch({"s": pa.array(["ab", "cd"])})]).replace(b"abcd", b"a\xffcd")
    decoder = make_decoder("arrow", StructType([StructField("s", StringType())]), mode="DROPMALFORMED")
    assert decode_all(decoder, [message], "arrow") == [] and decoder.malformed == 1


def test_arrow_compression_bomb_is_refused_before_decompression():
    message = bytearray(ipc([pa.record_batch({"b": pa.array([b"x" * 1000], pa.large_binary())})], "zstd"))
    entry = _first_batch(bytes(message))
    for _, offset, length in entry["buffers"]:
        if length >= 8:
            message[entry["body"] + offset : entry["body"] + offset + 8] = (2**40).to_bytes(8, "little")
    assert len(message) < 2048
    with pytest.raises(arrow_guard.MalformedArrowError, match="claims 1,099,511,627,776 bytes decompressed"):
        arrow_guard.read_batches(bytes(message))
    assert arrow_guard.count_rows(bytes(message)) == 1


def test_arrow_rows_over_the_cap_are_refused():
    message = ipc([pa.record_batch({"i": pa.nulls(arrow_guard.MAX_ROWS + 1, pa.int64())})])
    with pytest.raises(arrow_guard.MalformedArrowError, match="rows"):
        arrow_guard.read_batches(message)
    assert arrow_guard.count_rows(message) == 1


def test_arrow_expansion_bombs_are_refused_before_the_cast():
    schema = pa.schema([("s", pa.string())])
    dictionary = pa.DictionaryArray.from_arrays(pa.array(np.zeros(1_000_000, dtype=np.int8)), pa.array(["x" * 65536]))
    with pytest.raises(arrow_guard.MalformedArrowError, match="would take about"):
        arrow_guard.read_batches(ipc([pa.record_batch({"s": dictionary})], "zstd"), schema=schema)
    view = np.array([65536, int.from_bytes(b"yyyy", "little"), 0, 0], dtype="<i4").tobytes()
    views = pa.Array.from_buffers(
        pa.string_view(), 1_000_000, [None, pa.py_buffer(view * 1_000_000), pa.py_buffer(b"y" * 65536)]
    )
    with pytest.raises(arrow_guard.MalformedArrowError, match="views reference more than"):
        arrow_guard.read_batches(ipc([pa.record_batch({"s": views})], "zstd"), schema=schema)


@pytest.mark.parametrize("make", ["duplicate names", "invalid utf-8 name", "missing column", "big-endian", "truncated"])
def test_arrow_unreadable_messages_are_dropped_under_dropmalformed(make):
    good = ipc([pa.record_batch({"id": pa.array([1, 2], pa.int64())})])
    if make == "duplicate names":
        bad = ipc([pa.record_batch([pa.array([1]), pa.array([2])], names=["id", "id"])])
    elif make == "invalid utf-8 name":
        bad = ipc([pa.record_batch({"i\u00e9": pa.array([1])})]).replace("i\u00e9".encode(), b"i\xff\xfe")
    elif make == "missing column":
        bad = ipc([pa.record_batch({"other": pa.array([1])})])
    elif make == "big-endian":
        bad = _big_endian(good)
    else:
        bad = good[: len(good) // 2]
    decoder = make_decoder("arrow", StructType([StructField("id", LongType())]), mode="DROPMALFORMED")
    out = decode_all(decoder, [good, bad, good], "arrow")
    assert [r["id"] for b in out for r in b.to_pylist()] == [1, 2, 1, 2] and decoder.malformed == 1


@pytest.mark.parametrize("mode", MODES)
def test_arrow_messages_are_read_where_a_sliced_spool_batch_holds_them_and_a_null_one_is_malformed(mode):
    """The decoder reads each message as a slice of the column's data buffer: in a batch a
    read task sliced (a range starting inside a record) the offsets are the slice's, and
    a null message (a spool no receiver wrote) is malformed, never a crash or another
    message's rows."""
    messages = [ipc([pa.record_batch({"id": pa.array([10 * i, 10 * i + 1], pa.int64())})]) for i in range(4)]
    column = pa.array([messages[0], messages[1], None, messages[3]], pa.large_binary())
    spool = messages_to_batch(messages, None, "arrow", 0)
    spool = pa.RecordBatch.from_arrays([column] + spool.columns[1:], schema=spool.schema)
    decoder = make_decoder("arrow", StructType([StructField("id", LongType())]), mode=mode)
    sliced = spool.slice(1)  # offsets FIRST + 1 .. FIRST + 3
    if mode == "DROPMALFORMED":
        out = list(decoder.decode(sliced, 2, FIRST + 1))
        assert [r["id"] for b in out for r in b.to_pylist()] == [10, 11, 30, 31] and decoder.malformed == 1
        return
    with pytest.raises(MalformedMessageError, match="null message") as info:
        list(decoder.decode(sliced, 2, FIRST + 1))
    assert failed_index(info.value) == 2


def _big_endian(message: bytes) -> bytes:
    """``message`` with its schema marked big-endian. pyarrow writes no such streams and
    omits the default (little) endianness field, so the schema table's vtable entry for it
    is pointed at 4 bytes that hold 1: the count of its one-field ``fields`` vector."""
    entry = _layout(message)[0]
    meta = memoryview(message)[entry["meta"] :]
    position, vtable, size = entry["table"]
    fields = entry["fields_at"]
    assert size >= 6 and int.from_bytes(meta[fields : fields + 4], "little") == 1 and fields > position
    out = bytearray(message)
    at = entry["meta"] + vtable + 4
    out[at : at + 2] = (fields - position).to_bytes(2, "little")
    big = bytes(out)
    assert pa.ipc.open_stream(big, options=pa.ipc.IpcReadOptions(ensure_native_endian=False)).schema is not None
    return big


def test_arrow_null_string_view_with_a_negative_length_is_malformed_not_a_crash():
    # found by tools/fuzz.py: validation skips null views, pyarrow's cast to string copies them
    result = _run_isolated("""
        import numpy as np, pyarrow as pa
        from pyspark.sql.types import StructType, StructField, StringType
        from spark_zmq.source.decoders import make_decoder
        from spark_zmq.ingest.receiver import messages_to_batch
        views = np.array([1, 97, 0, 0, -65536, 32767, 0, 0, 1, 98, 0, 0], np.int32).tobytes()
        column = pa.Array.from_buffers(pa.string_view(), 3, [pa.py_buffer(bytes([0b101])), pa.py_buffer(views)])
        column.validate(full=True)  # valid to Arrow: null slots are not checked
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, pa.schema([("s", pa.string_view())])) as writer:
            writer.write_batch(pa.record_batch([column], names=["s"]))
        good = sink.getvalue().to_pybytes().replace(views, np.array([1, 97, 0, 0, 0, 0, 0, 0, 1, 98, 0, 0], np.int32).tobytes())
        decoder = make_decoder("arrow", StructType([StructField("s", StringType())]), mode="DROPMALFORMED")
        batch = messages_to_batch([sink.getvalue().to_pybytes(), good], None, "arrow", 0)
        print([row for b in decoder.decode(batch, 0, 0) for row in b.to_pylist()], decoder.malformed)
    """)
    assert result.returncode == 0, f"decoder died (status {result.returncode}): {result.stderr[-2000:]}"
    assert "[{'s': 'a'}, {'s': None}, {'s': 'b'}] 1" in result.stdout


def test_arrow_not_null_columns_refuse_nulls():
    decoder = make_decoder("arrow", StructType([StructField("id", LongType(), False)]), mode="DROPMALFORMED")
    out = decode_all(
        decoder,
        [ipc([pa.record_batch({"id": pa.array([1, None])})]), ipc([pa.record_batch({"id": pa.array([3])})])],
        "arrow",
    )
    assert [r["id"] for b in out for r in b.to_pylist()] == [3]


def test_arrow_list_view_columns_convert_to_valid_lists():
    message = ipc([pa.record_batch({"l": pa.array([[1, 2], None, []], pa.list_view(pa.int32()))})], "lz4")
    decoder = make_decoder("arrow", StructType([StructField("l", ArrayType(IntegerType()))]), mode="FAILFAST")
    out = decode_all(decoder, [message], "arrow")
    check_batches(out, decoder)
    assert [r["l"] for b in out for r in b.to_pylist()] == [[1, 2], None, []]


def test_receiver_counts_rows_of_corrupt_arrow_messages_as_one_instead_of_dying():
    good = ipc([pa.record_batch({"id": pa.array([1, 2, 3], pa.int64())})])
    bomb = bytearray(ipc([pa.record_batch({"b": pa.array([b"x" * 100])})], "zstd"))
    entry = _first_batch(bytes(bomb))
    for _, offset, length in entry["buffers"]:
        if length >= 8:
            bomb[entry["body"] + offset : entry["body"] + offset + 8] = (2**62).to_bytes(8, "little")
    batch = messages_to_batch([good, bytes(bomb), b"garbage", good[:-20], good], None, "arrow", 0)
    assert batch.column("rows").to_pylist() == [3, 1, 1, 1, 3]
