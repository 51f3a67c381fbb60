"""Hostile input through Spark on real sockets: no message may crash a worker, kill a
receiver or fail a DROPMALFORMED query; malformed messages follow ``mode``."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from zmqtest import Producer, arrow_message, run_available_now

from spark_zmq.arrow import guard as arrow_guard

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

BIG = json.dumps({"id": 99, "name": "x" * (3 << 20)}).encode()  # over pyarrow's default 1 MiB JSON block
JSON_MESSAGES = [
    b"null",
    b'{"id": 1, "name": "one"}',
    b'{"id": 2, "name": "two"}',
    b"42",
    b"[]",
    b'"x"',
    b'{"id": 3, "name": "three"}',
    BIG,
]
NOT_OBJECTS = ["null", "42", "[]", '"x"']


def _run_available_now(spark, df, tmp_path, name):
    return run_available_now(spark, df, tmp_path, name, timeout=240)


def _source(spark, endpoint, spool_dir, fmt, schema, **options):
    reader = (
        spark.readStream.format("zmq")
        .option("endpoints", "@" + endpoint)
        .option("format", fmt)
        .option("spoolDir", spool_dir)
        .option("timeout", 2)
        .schema(schema)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_json_non_objects_and_a_3mib_object_permissive(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, JSON_MESSAGES).start()
    df = _source(
        spark,
        endpoint,
        spool_dir,
        "json",
        "id long, name string, _corrupt_record string",
        columnNameOfCorruptRecord="_corrupt_record",
    )
    rows, error = _run_available_now(spark, df, tmp_path, "hostile_json_permissive")
    assert error is None
    assert len(rows) == len(JSON_MESSAGES)
    assert sorted(r._corrupt_record for r in rows if r._corrupt_record is not None) == sorted(NOT_OBJECTS)
    assert all(r.id is None and r.name is None for r in rows if r._corrupt_record is not None)
    good = {r.id: r.name for r in rows if r._corrupt_record is None}
    assert sorted(good) == [1, 2, 3, 99]
    assert good[3] == "three" and good[99] == "x" * (3 << 20)


def test_json_null_first_failfast_names_offset_0(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, JSON_MESSAGES).start()
    df = _source(spark, endpoint, spool_dir, "json", "id long, name string", mode="FAILFAST")
    _, error = _run_available_now(spark, df, tmp_path, "hostile_json_failfast")
    assert error and "malformed json message at channel 0, offset 0" in error and "not an object" in error


def test_json_dropmalformed_keeps_only_the_objects(spark, free_port, spool_dir, tmp_path):
    endpoint = f"tcp://127.0.0.1:{free_port}"
    Producer(endpoint, JSON_MESSAGES).start()
    df = _source(spark, endpoint, spool_dir, "json", "id long, name string", mode="DROPMALFORMED")
    rows, error = _run_available_now(spark, df, tmp_path, "hostile_json_drop")
    assert error is None
    assert sorted(r.id for r in rows) == [1, 2, 3, 99]


def _good(k: int, compression=None) -> bytes:
    batch = pa.record_batch(
        {"id": pa.array([10 * k + j for j in range(3)], pa.int64()), "name": pa.array([f"n{k}-{j}" for j in range(3)])}
    )
    if compression is None:
        return arrow_message(batch)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _compression_bomb() -> bytes:
    """A ~1 KB zstd message whose buffers claim 1 TiB decompressed."""
    message = bytearray(_good(0, "zstd"))
    for entry in arrow_guard.message_layout(bytes(message)):
        for _, offset, length in entry.get("buffers", []):
            if length >= 8:
                at = entry["body"] + offset
                message[at : at + 8] = (1 << 40).to_bytes(8, "little")
    return bytes(message)


def test_arrow_dropmalformed_survives_corrupt_messages_and_keeps_receiving(spark, free_port, spool_dir, tmp_path):
    before = [_good(k, (None, "lz4", "zstd")[k % 3]) for k in range(30)]
    after = [_good(k, (None, "lz4", "zstd")[k % 3]) for k in range(30, 60)]
    truncated = before[0][: len(before[0]) // 2]
    flipped = bytearray(before[1])
    flipped[0] ^= 0x01  # the continuation marker: the stream no longer frames
    utf8 = arrow_message(pa.record_batch({"id": pa.array([7], pa.int64()), "name": pa.array(["ab"])})).replace(
        b"ab", b"\xff\xfe"
    )
    corrupt = [truncated, bytes(flipped), _compression_bomb(), utf8, b"\xff\xff\xff\xff" + b"\x00" * 3]
    endpoint = f"tcp://127.0.0.1:{free_port}"
    # paced, so the corrupt messages land in receive batches of their own and in mixed ones,
    # and messages keep arriving after them on the same receiver
    Producer(endpoint, before + corrupt + after, rate=200).start()
    df = _source(spark, endpoint, spool_dir, "arrow", "id long, name string", mode="DROPMALFORMED")
    rows, error = _run_available_now(spark, df, tmp_path, "hostile_arrow_drop")
    assert error is None
    expected = sorted(10 * k + j for k in range(60) for j in range(3))
    assert sorted(r.id for r in rows) == expected
    assert all(r.name == f"n{r.id // 10}-{r.id % 10}" for r in rows)
