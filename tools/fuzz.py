#!/usr/bin/env python
"""Fuzz the source side's decoders in forked children under a memory cap.

Why a separate command and not only property tests: the failures that matter here kill
the process (a segfault in pyarrow's JSON reader, an allocation of what a compressed
buffer claims), and a crash inside pytest hides every other result. Each group of inputs
runs in a child forked from this process (``os.fork``; this process never starts Arrow's
thread pool or any other thread before forking) with ``RLIMIT_AS`` set to the child's
address space at fork time plus ``--memory-mb``, and a time limit per input. The child
reports each input it starts and finishes on a pipe, so the parent knows which input a
crash (child killed by a signal), a hang (no progress within ``--input-seconds``) or an
unclear exception (anything but the documented error classes, or an output that breaks
the decoder's contract) belongs to. Offending inputs are saved under ``--out`` and can be
replayed with ``--replay FILE``.

Targets:
  json         Decoder("json") on batches of 1-40 messages: valid objects, mutations,
               non-objects (null first), NUL, invalid UTF-8, deep nesting, huge numbers
  arrow        Decoder("arrow") on batches of 1-6 Arrow IPC messages: valid streams
               (compressed lz4/zstd, string/binary/list/dictionary/view/nested/null
               columns), bit flips, truncation, extension, rewritten metadata fields,
               compression bombs, expansion bombs; and arrow_guard.read_batches alone
  arrow-count  arrow_guard.count_rows on the same kinds of messages (never raises)
  text         Decoder("raw"/"text") on arbitrary bytes
  all          every target, the time split evenly

Usage: python tools/fuzz.py --target all --seconds 60 [--seed S] [--memory-mb M] [--out DIR]
Exit status: 0 when nothing was found, 1 otherwise.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import re
import resource
import select
import signal
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from pyspark.sql.types import (  # noqa: E402
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

from spark_zmq.source import arrow_guard  # noqa: E402
from spark_zmq.source import decode as decode_module  # noqa: E402
from spark_zmq.source.decode import Decoder, MalformedMessageError  # noqa: E402
from spark_zmq.source.receiver import messages_to_batch  # noqa: E402

TARGETS = ("json", "arrow", "arrow-count", "text")
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
MAGIC = b"SPARKZMQ-FUZZ-1\n"


# -- inputs ------------------------------------------------------------------------------


@dataclass
class Case:
    """One input: the messages of one spool batch (or one message for arrow-count)."""

    target: str
    kind: str
    messages: list
    params: dict = field(default_factory=dict)

    def dump(self) -> bytes:
        header = json.dumps({"target": self.target, "kind": self.kind, "params": self.params}).encode()
        out = [MAGIC, struct.pack("<I", len(header)), header, struct.pack("<I", len(self.messages))]
        for m in self.messages:
            out += [struct.pack("<Q", len(m)), m]
        return b"".join(out)

    @staticmethod
    def load(data: bytes) -> "Case":
        if not data.startswith(MAGIC):
            raise ValueError("not a fuzz case file")
        pos = len(MAGIC)
        (n,) = struct.unpack_from("<I", data, pos)
        header = json.loads(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
        (count,) = struct.unpack_from("<I", data, pos)
        pos += 4
        messages = []
        for _ in range(count):
            (size,) = struct.unpack_from("<Q", data, pos)
            messages.append(data[pos + 8 : pos + 8 + size])
            pos += 8 + size
        return Case(header["target"], header["kind"], messages, header["params"])


def mutate(rng: random.Random, data: bytes, tokens: tuple = ()) -> bytes:
    """A few random edits: bit flips, byte sets, interesting ints, cuts, inserts, splices."""
    buf = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        op = rng.randrange(10)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[rng.randrange(len(buf))] = rng.choice((0, 0xFF, 0x7F, 0x80, 0x0A, 0x22, 0x7B, 0x7D, rng.randrange(256)))
        elif op == 2 and len(buf) >= 8:
            i = rng.randrange(len(buf) - 7)
            value = rng.choice((0, -1, 1, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, -(2**63), 10**12, 7, 8, 16))
            width = rng.choice((4, 8))
            buf[i : i + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        elif op == 3:
            del buf[pos:]  # truncate
        elif op == 4:
            buf[pos:pos] = rng.randbytes(rng.randrange(1, 32))
        elif op == 5 and buf:
            lo = rng.randrange(len(buf))
            hi = min(len(buf), lo + rng.randrange(1, 64))
            del buf[lo:hi]
        elif op == 6 and buf:
            lo = rng.randrange(len(buf))
            chunk = bytes(buf[lo : lo + rng.randrange(1, 256)])
            buf[pos:pos] = chunk * rng.choice((1, 2, 100))
        elif op == 7 and tokens:
            buf[pos:pos] = rng.choice(tokens)
        elif op == 8:
            buf += rng.randbytes(rng.randrange(1, 64))
        elif op == 9 and len(buf) >= 8:  # an aligned int32 (lengths, offsets, view fields)
            i = rng.randrange(len(buf) // 4) * 4
            value = rng.choice((-1, -65536, -(2**31), 2**31 - 1, 13, 1 << 20, 0))
            buf[i : i + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
    return bytes(buf)


# json ------------------------------------------------------------------------------------

JSON_SCHEMA = StructType([
    StructField("id", LongType()),
    StructField("name", StringType()),
    StructField("score", DoubleType()),
    StructField("tags", ArrayType(StringType())),
    StructField("inner", StructType([StructField("a", IntegerType()), StructField("b", ArrayType(LongType()))])),
    StructField("ts", TimestampType()),
    StructField("_corrupt", StringType()),
])
JSON_TOKENS = (b"null", b"\n", b"\r", b"\x00", b"\xff", b"\xc3", b"{", b"}", b"[", b"]", b'"', b"\\", b",", b":",
               b"1e999", b"-0", b"NaN", b"\\ud800", b'"id":', b"{}", b"\n{}\n", b" null ")
NON_OBJECTS = (b"null", b"42", b"[]", b'"x"', b"true", b"false", b"-1.5e3", b" null", b"null\n", b"[{}]", b"",
               b"   ", b"\n", b"{", b"}", b"{}{}", b"{}\nnull", b"{} null {}", b"nul", b'"{}"')


def _json_value(rng: random.Random, depth: int = 0):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((0, -1, 2**31, 2**63 - 1, -(2**63), rng.randrange(-10**6, 10**6)))
    if kind == 2:
        return rng.choice((0.5, -1e300, 1e-300, rng.random()))
    if kind == 3:
        return "".join(rng.choice("ab\u00e9\u4e2d\U0001f600\"\\\n\t\u0000") for _ in range(rng.randrange(12)))
    if kind == 4:
        return rng.choice((True, False))
    if kind == 5:
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(("a", "b", "id", "x", "")): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def json_object(rng: random.Random) -> bytes:
    obj = {}
    if rng.random() < 0.9:
        obj["id"] = rng.randrange(-10**9, 10**9)
    if rng.random() < 0.7:
        obj["name"] = "n%d" % rng.randrange(10**6) + rng.choice(("", "\u00e9", "\U0001f600", '"q"', "\\"))
    if rng.random() < 0.5:
        obj["score"] = rng.random()
    if rng.random() < 0.4:
        obj["tags"] = ["t%d" % i for i in range(rng.randrange(4))]
    if rng.random() < 0.3:
        obj["inner"] = {"a": rng.randrange(1000), "b": [rng.randrange(10) for _ in range(rng.randrange(3))]}
    if rng.random() < 0.2:
        obj["ts"] = "2024-05-01T12:00:00Z"
    if rng.random() < 0.3:
        obj["extra"] = _json_value(rng)
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5, indent=rng.choice((None, None, None, 1)))
    return rng.choice(("", "", " ", "\n", "\t")) + text + rng.choice(("", "", "", "\n", "\r\n", " "))


def json_message(rng: random.Random) -> tuple[str, bytes]:
    r = rng.random()
    if r < 0.01:  # larger than pyarrow's default 1 MiB block
        return "valid", json.dumps({"id": 1, "name": "x" * rng.choice((1 << 20, 3 << 20))}).encode()
    if r < 0.45:
        return "valid", json_object(rng).encode()
    return "hostile", _hostile_json(rng, r)


def _hostile_json(rng: random.Random, r: float) -> bytes:
    if r < 0.7:
        return mutate(rng, json_object(rng).encode(), JSON_TOKENS)
    if r < 0.8:
        return rng.choice(NON_OBJECTS)
    if r < 0.85:
        return rng.randbytes(rng.randrange(40))
    if r < 0.9:
        depth = rng.choice((100, 10_000, 200_000))
        field_name = rng.choice(("tags", "inner", "x", "id"))
        opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
        return b'{"%s":' % field_name.encode() + opener * depth + b"1" + closer * depth + b"}"
    if r < 0.95:
        return rng.choice((b'{"id": %s}' % (b"9" * rng.choice((19, 20, 400, 5000))), b'{"score": 1e999}',
                           b'{"id": 1, "id": 2}', b'{"name": "%s"}' % (b"x" * rng.randrange(1 << 16)),
                           b'{"id": 1}' * rng.randrange(2, 5), b'{"id": 1}\n' * 3))
    return json_object(rng).encode() * rng.randrange(2, 4)


def gen_json(rng: random.Random) -> Case:
    picked = [json_message(rng) for _ in range(rng.choice((1, 2, 5, 10, 40)))]
    if rng.random() < 0.2:
        picked.insert(0, ("hostile", b"null"))
    return Case("json", "batch", [m for _, m in picked], {
        "mode": rng.choice(MODES), "corrupt": rng.random() < 0.7,
        "max_message_bytes": rng.choice((1 << 10, 1 << 20, 64 << 20)),
        "valid": [i for i, (kind, _) in enumerate(picked) if kind == "valid"],
        # pyarrow's JSON reader splits its input into blocks: small ones put many block
        # starts (where a top-level null crashes it) into a small batch
        "min_block": rng.choice((1 << 20, 4096, 256, 1)),
    })


# arrow -----------------------------------------------------------------------------------

ARROW_TARGETS = {
    "ints": StructType([StructField("i", LongType()), StructField("s", StringType())]),
    "wide": StructType([
        StructField("i", LongType()), StructField("s", StringType()), StructField("b", BinaryType()),
        StructField("l", ArrayType(IntegerType())), StructField("st", StructType([StructField("x", IntegerType()), StructField("y", StringType())])),
        StructField("d", StringType()), StructField("v", StringType()), StructField("n", LongType()),
        StructField("ts", TimestampType()),
    ]),
    "strict": StructType([StructField("i", LongType(), False)]),
}


def ipc(batches: list, compression: Optional[str] = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression, use_threads=False)
    with pa.ipc.new_stream(sink, batches[0].schema, options=options) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _views(n: int, length: int, data: bytes) -> pa.Array:
    """A string_view array of n views all pointing at the same ``length`` bytes of data."""
    view = struct.pack("<iiii", length, int.from_bytes(data[:4], "little", signed=True), 0, 0)
    return pa.Array.from_buffers(pa.string_view(), n, [None, pa.py_buffer(view * n), pa.py_buffer(data)])


def arrow_batch(rng: random.Random) -> pa.RecordBatch:
    full = rng.random() < 0.5  # every column of the 'wide' target, in some type that converts
    n = rng.choice((0, 1, 3, 17, 100))
    ints = pa.array([rng.randrange(-2**40, 2**40) if rng.random() > 0.1 else None for _ in range(n)], pa.int64())
    words = [rng.choice(("", "a", "\u00e9t\u00e9", "\U0001f600", "x" * 40)) if rng.random() > 0.1 else None for _ in range(n)]
    columns = {"i": ints}
    if full or rng.random() < 0.8:
        columns["s"] = pa.array(words, rng.choice((pa.string(), pa.large_string(), pa.string_view())))
    if full or rng.random() < 0.5:
        columns["b"] = pa.array([w.encode() if w is not None else None for w in words], rng.choice((pa.binary(), pa.large_binary())))
    if full or rng.random() < 0.5:
        columns["l"] = pa.array([[rng.randrange(100) for _ in range(rng.randrange(3))] if rng.random() > 0.1 else None for _ in range(n)],
                                rng.choice((pa.list_(pa.int32()), pa.large_list(pa.int64()), pa.list_view(pa.int32()))))
    if full or rng.random() < 0.5:
        columns["st"] = pa.StructArray.from_arrays([pa.array(range(n), pa.int32()), pa.array(words, pa.string())], names=["x", "y"])
    if full or rng.random() < 0.5:
        columns["d"] = pa.array(words, pa.string()).dictionary_encode()
    if full or rng.random() < 0.5:
        columns["v"] = pa.array(words, pa.string_view())
    if full or rng.random() < 0.5:
        columns["n"] = pa.nulls(n)
    if full or rng.random() < 0.4:
        columns["ts"] = pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", "UTC"))
    if rng.random() < 0.2:
        columns["extra"] = pa.array([[{"k": w}] for w in words], pa.list_(pa.struct([("k", pa.string())])))
    return pa.record_batch(columns)


def _layout(message: bytes) -> list[dict]:
    """Positions (in ``message``) of the metadata fields the bombs rewrite."""
    out = []
    pos = 0
    end = len(message)
    while pos + 8 <= end:
        length = struct.unpack_from("<I", message, pos)[0]
        pos += 4
        if length == 0xFFFFFFFF:
            length = struct.unpack_from("<I", message, pos)[0]
            pos += 4
        if length == 0 or pos + length > end:
            break
        meta = memoryview(message)[pos : pos + length]
        header_type, header, body_length = arrow_guard._message_header(meta, length)
        body = pos + length
        entry = {"type": header_type, "body": body, "meta": pos}
        batch = header
        if header_type == 2:
            data = arrow_guard._target(meta, length, header, 1)
            batch = arrow_guard._table(meta, length, data) if data else None
        if header_type in (2, 3) and batch:
            entry["length_at"] = arrow_guard._field(meta, length, batch, 0)
            count, at = arrow_guard._struct_vector(meta, length, arrow_guard._target(meta, length, batch, 1), 16)
            entry["nodes"] = [pos + at + 16 * i for i in range(count)]
            count, at = arrow_guard._struct_vector(meta, length, arrow_guard._target(meta, length, batch, 2), 16)
            entry["buffers"] = [(pos + at + 16 * i, *struct.unpack_from("<qq", meta, at + 16 * i)) for i in range(count)]
            entry["compressed"] = bool(arrow_guard._target(meta, length, batch, 3))
        out.append(entry)
        pos = body + body_length
    return out


def bomb(rng: random.Random) -> tuple[str, bytes]:
    """Messages built to make a reader allocate or loop without bound."""
    kind = rng.randrange(7)
    if kind == 0:  # compressed buffer claiming a huge uncompressed length
        message = bytearray(ipc([arrow_batch(rng)], rng.choice(("lz4", "zstd"))))
        for entry in _layout(bytes(message)):
            for _, offset, length in entry.get("buffers", []):
                if length >= 8 and rng.random() < 0.7:
                    claim = rng.choice((2**31, 5 << 30, 2**40, 2**62, 2**63 - 1, -2))
                    at = entry["body"] + offset
                    message[at : at + 8] = (claim & (2**64 - 1)).to_bytes(8, "little")
        return "compression-claim", bytes(message)
    if kind == 1:  # a real zstd bomb: many MiB of zeros in a few KB
        size = rng.choice((4 << 20, 32 << 20))
        blob = pa.record_batch({"i": pa.array([1], pa.int64()), "b": pa.array([bytes(size)], pa.large_binary())})
        return "zstd-zeros", ipc([blob], "zstd")
    if kind == 2:  # rows claimed in metadata
        message = bytearray(ipc([arrow_batch(rng)], rng.choice((None, "zstd"))))
        for entry in _layout(bytes(message)):
            targets = ([entry["length_at"]] if entry.get("length_at") else []) + entry.get("nodes", [])
            for at in targets:
                if rng.random() < 0.6:
                    message[at : at + 8] = rng.choice((10**7 + 1, 2**31, 2**40, 2**63 - 1)).to_bytes(8, "little")
        return "row-claim", bytes(message)
    if kind == 3:  # a valid dictionary that expands when decoded
        n = rng.choice((100_000, 2_000_000))
        indices = pa.array(np.zeros(n, dtype=np.int8))
        dictionary = pa.array(["x" * rng.choice((1 << 10, 1 << 16))])
        return "dictionary-expansion", ipc([pa.record_batch({"i": pa.nulls(n, pa.int64()), "s": pa.DictionaryArray.from_arrays(indices, dictionary)})], "zstd")
    if kind == 4:  # string views all pointing at one long value
        n = rng.choice((10_000, 1_000_000))
        views = _views(n, 1 << 16, b"y" * (1 << 16))
        return "view-expansion", ipc([pa.record_batch({"i": pa.nulls(n, pa.int64()), "s": views})], "zstd")
    if kind == 5:  # a null child claiming 2**40 elements inside a list: metadata rewritten,
        # since building it for real would allocate the list's 2**40 / 8-byte validity
        message = bytearray(ipc([pa.record_batch({"l": pa.LargeListArray.from_arrays(pa.array([0, 1000], pa.int64()), pa.nulls(1000))})]))
        for entry in _layout(bytes(message)):
            if entry["type"] == 3 and len(entry.get("nodes", ())) == 2 and len(entry["buffers"]) >= 2:
                huge = (2**40).to_bytes(8, "little")
                message[entry["nodes"][1] : entry["nodes"][1] + 16] = huge + huge  # length, null count
                _, offset, _ = entry["buffers"][1]
                at = entry["body"] + offset + 8
                message[at : at + 8] = huge
        return "null-child", bytes(message)
    # deep nesting in the schema
    t = pa.int32()
    for _ in range(rng.choice((60, 70, 200))):
        t = pa.list_(t)
    return "deep-schema", ipc([pa.record_batch({"i": pa.array([], pa.int64()), "l": pa.array([], t)})])


class ArrowSeeds:
    """Valid messages, built once in the parent (single-threaded) and mutated per input."""

    def __init__(self, rng: random.Random, count: int = 48) -> None:
        self.messages = []
        for _ in range(count):
            batches = [arrow_batch(rng)]
            for _ in range(rng.choice((0, 0, 1, 3))):
                try:
                    other = arrow_batch(rng).select(batches[0].schema.names).cast(batches[0].schema)
                    other.validate(full=True)  # pyarrow 26 casts list_view to invalid lists
                    batches.append(other)
                except (pa.ArrowException, KeyError, ValueError):  # other columns or types: repeat the first
                    batches.append(batches[0].slice(rng.randrange(batches[0].num_rows + 1)))
            self.messages.append(ipc(batches, rng.choice((None, None, "lz4", "zstd"))))
        self.bombs = []
        while len(self.bombs) < 12:
            try:
                self.bombs.append(bomb(rng))
            except (pa.ArrowException, ValueError, OverflowError):  # pyarrow refused to write it
                pass

    def message(self, rng: random.Random) -> tuple[str, bytes]:
        r = rng.random()
        if r < 0.2:
            return "valid", rng.choice(self.messages)
        if r < 0.7:
            return "mutated", mutate(rng, rng.choice(self.messages))
        if r < 0.8:
            return "truncated", rng.choice(self.messages)[: rng.randrange(1, 200)]
        if r < 0.9:
            name, message = rng.choice(self.bombs)
            return name, message if rng.random() < 0.5 else mutate(rng, message)
        if r < 0.95:
            return "spliced", rng.choice(self.messages)[: rng.randrange(400)] + rng.choice(self.messages)[rng.randrange(400) :]
        return "random", rng.choice((b"", b"\xff\xff\xff\xff", b"\xff\xff\xff\xff\x00\x00\x00\x00")) + rng.randbytes(rng.randrange(200))


def gen_arrow(rng: random.Random, seeds: ArrowSeeds) -> Case:
    picked = [seeds.message(rng) for _ in range(rng.choice((1, 2, 6)))]
    return Case("arrow", "+".join(sorted({k for k, _ in picked})), [m for _, m in picked], {
        "mode": rng.choice(MODES), "schema": rng.choice(sorted(ARROW_TARGETS)),
        "max_message_bytes": rng.choice((1 << 20, 64 << 20)),
        "valid": [i for i, (kind, _) in enumerate(picked) if kind == "valid"],
    })


def gen_arrow_count(rng: random.Random, seeds: ArrowSeeds) -> Case:
    kind, message = seeds.message(rng)
    return Case("arrow-count", kind, [message])


def gen_text(rng: random.Random) -> Case:
    messages = []
    for _ in range(rng.choice((1, 3, 30))):
        r = rng.random()
        if r < 0.4:
            messages.append(rng.randbytes(rng.randrange(64)))
        elif r < 0.7:
            messages.append(mutate(rng, "h\u00e9llo w\u00f6rld \U0001f600".encode(), (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00")))
        else:
            messages.append(b"ok %d" % rng.randrange(1000))
    return Case("text", "batch", messages, {"format": rng.choice(("raw", "text"))})


# -- running one case (in the child) --------------------------------------------------------


class Unclear(Exception):
    """An outcome outside the contract: reported as a finding."""


def _check_output(out: list, decoder: Decoder) -> int:
    rows = 0
    for batch in out:
        if not isinstance(batch, pa.RecordBatch):
            raise Unclear(f"decoder yielded {type(batch).__name__}, not a RecordBatch")
        if not batch.schema.equals(decoder.target):
            raise Unclear(f"output schema {batch.schema} differs from the target {decoder.target}")
        try:
            batch.validate(full=True)
        except Exception as exc:  # noqa: BLE001
            raise Unclear(f"output batch is invalid: {exc}") from None
        rows += batch.num_rows
    return rows


def run_case(case: Case) -> None:
    """Raise ``Unclear`` when the case's outcome breaks the contract; return otherwise."""
    p = case.params
    if case.target == "arrow-count":
        try:
            rows = arrow_guard.count_rows(case.messages[0])
        except BaseException as exc:  # noqa: BLE001
            raise Unclear(f"count_rows raised {type(exc).__name__}: {exc}") from None
        if not isinstance(rows, int) or rows < 1:
            raise Unclear(f"count_rows returned {rows!r}")
        if rows > 1 and rows > arrow_guard.MAX_ROWS:
            raise Unclear(f"count_rows returned {rows} > MAX_ROWS")
        try:
            real = sum(b.num_rows for b in arrow_guard.read_batches(case.messages[0]))
        except arrow_guard.MalformedArrowError:
            return
        except BaseException as exc:  # noqa: BLE001
            raise Unclear(f"read_batches raised {type(exc).__name__}: {exc}") from None
        if rows != max(1, real):
            raise Unclear(f"count_rows says {rows}, the message holds {real} rows")
        return
    if case.target == "text":
        decoder = Decoder(p["format"], _fixed(p["format"]))
        batch = messages_to_batch(case.messages, None, p["format"], 0)
        try:
            out = list(decoder.decode(batch, 0, 0))
        except BaseException as exc:  # noqa: BLE001
            raise Unclear(f"{p['format']} decode raised {type(exc).__name__}: {exc}") from None
        if _check_output(out, decoder) != len(case.messages):
            raise Unclear("row count differs from the message count")
        values = [v for b in out for v in b.column(0).to_pylist()]
        for message, value in zip(case.messages, values):
            expected = message if p["format"] == "raw" else message.decode("utf-8", "replace")
            if value != expected:
                raise Unclear(f"value {value!r} differs from {expected!r}")
        return
    if case.target == "json":
        decode_module._MIN_JSON_BLOCK = p.get("min_block", 1 << 20)
        decoder = Decoder("json", JSON_SCHEMA, mode=p["mode"], corrupt_column="_corrupt" if p["corrupt"] else None,
                          max_message_bytes=p["max_message_bytes"])
    else:
        for message in case.messages:
            try:
                arrow_guard.read_batches(message)
            except arrow_guard.MalformedArrowError:
                pass
            except BaseException as exc:  # noqa: BLE001
                raise Unclear(f"read_batches raised {type(exc).__name__}: {exc}") from None
        decoder = Decoder("arrow", ARROW_TARGETS[p["schema"]], mode=p["mode"], max_message_bytes=p["max_message_bytes"])
    must_parse = _must_parse(case, decoder)
    batch = messages_to_batch(case.messages, None, case.target, 0)
    try:
        out = list(decoder.decode(batch, 3, 100))
    except MalformedMessageError as exc:
        allowed = p["mode"] == "FAILFAST" or (case.target == "arrow" and p["mode"] == "PERMISSIVE")
        if not allowed:
            raise Unclear(f"MalformedMessageError under {p['mode']}: {exc}") from None
        found = re.search(r"channel 3, offset (\d+)", str(exc))
        if not found:
            raise Unclear(f"error does not name the channel and an offset: {exc}")
        if int(found.group(1)) - 100 in must_parse:
            raise Unclear(f"a valid message was reported malformed: {exc}")
        return
    except BaseException as exc:  # noqa: BLE001
        raise Unclear(f"decode raised {type(exc).__name__}: {exc}") from None
    rows = _check_output(out, decoder)
    if decoder.malformed > len(case.messages) - len(must_parse):
        raise Unclear(f"{decoder.malformed} of {len(case.messages)} messages malformed, but {len(must_parse)} are valid")
    if case.target == "json":
        n = len(case.messages)
        expected = n if p["mode"] == "PERMISSIVE" else n - decoder.malformed
        if rows != expected:
            raise Unclear(f"{rows} rows from {n} messages ({decoder.malformed} malformed) under {p['mode']}")
        if p["mode"] == "FAILFAST" and decoder.malformed:
            raise Unclear("FAILFAST counted malformed messages but did not raise")


def _must_parse(case: Case, decoder: Decoder) -> set:
    """Indices of the valid messages the decoder must accept: valid JSON objects within
    maxMessageBytes; valid Arrow streams that plain pyarrow converts to the target."""
    valid = case.params.get("valid", [])
    if case.target == "json":
        return {i for i in valid if len(case.messages[i]) <= case.params["max_message_bytes"]}
    ok = set()
    for i in valid:
        try:
            for b in pa.ipc.open_stream(case.messages[i]):
                b.validate(full=True)
                for f in decoder.target:
                    column = b.column(f.name).cast(f.type)
                    if not f.nullable and column.null_count:
                        raise ValueError("nulls")
            ok.add(i)
        except Exception:  # noqa: BLE001 - not convertible: the decoder may refuse it too
            pass
    return ok


def _fixed(fmt: str) -> StructType:
    from spark_zmq.schemas import fixed_schema

    return fixed_schema(fmt)


# -- the forked runner ----------------------------------------------------------------------


@dataclass
class Finding:
    target: str
    what: str  # crash | hang | unclear | exit
    detail: str
    path: str = ""


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(cases: list, fd: int, memory_bytes: int) -> None:
    try:
        limit = _address_space() + memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        faulthandler.disable()  # a crash is the parent's finding, not a traceback on stderr
        for i, case in enumerate(cases):
            os.write(fd, b"S %d\n" % i)
            try:
                run_case(case)
                os.write(fd, b"R %d ok\n" % i)
            except Unclear as exc:
                os.write(fd, b"R %d unclear %s\n" % (i, json.dumps(str(exc)[:2000]).encode()))
            except BaseException:  # noqa: BLE001 - a bug in the harness or a MemoryError outside the decoder
                os.write(fd, b"R %d unclear %s\n" % (i, json.dumps(traceback.format_exc()[-2000:]).encode()))
    finally:
        os._exit(0)


def run_group(cases: list, memory_bytes: int, input_seconds: float) -> list:
    """Run ``cases`` in one forked child; [(index, what, detail)] for the offending ones."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(cases, write_fd, memory_bytes)
    os.close(write_fd)
    findings = []
    started = -1
    pending = b""
    deadline = time.monotonic() + input_seconds
    status = None
    try:
        while True:
            ready, _, _ = select.select([read_fd], [], [], max(0.0, min(0.2, deadline - time.monotonic())))
            if ready:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    parts = line.split(b" ", 3)
                    if parts[0] == b"S":
                        started = int(parts[1])
                        deadline = time.monotonic() + input_seconds
                    elif parts[0] == b"R" and parts[2] == b"unclear":
                        findings.append((int(parts[1]), "unclear", json.loads(parts[3])))
            elif time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                findings.append((started, "hang", f"no result within {input_seconds}s"))
                break
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and not any(what == "hang" for _, what, _ in findings):
        findings.append((started, "crash", f"child killed by signal {signal.Signals(os.WTERMSIG(status)).name}"))
    elif os.WIFEXITED(status) and os.WEXITSTATUS(status) != 0:
        findings.append((started, "exit", f"child exited with status {os.WEXITSTATUS(status)}"))
    return findings


def fuzz(targets: list, seconds: float, seed: int, memory_mb: int, out_dir: str, input_seconds: float) -> int:
    rng = random.Random(seed)
    seeds = ArrowSeeds(random.Random(seed + 1)) if {"arrow", "arrow-count"} & set(targets) else None
    generators: dict[str, Callable[[random.Random], Case]] = {
        "json": gen_json,
        "arrow": lambda r: gen_arrow(r, seeds),
        "arrow-count": lambda r: gen_arrow_count(r, seeds),
        "text": gen_text,
    }
    group_size = {"json": 24, "arrow": 12, "arrow-count": 200, "text": 50}
    findings: list[Finding] = []
    tried = {}
    share = seconds / len(targets)
    for target in targets:
        stop = time.monotonic() + share
        count = 0
        while time.monotonic() < stop:
            cases = [generators[target](rng) for _ in range(group_size[target])]
            for index, what, detail in run_group(cases, memory_mb << 20, input_seconds):
                suspects = [index] if index >= 0 else list(range(len(cases)))
                if what in ("crash", "exit") and index >= 0:
                    # confirm alone: a crash may be an earlier input's doing
                    alone = run_group([cases[index]], memory_mb << 20, input_seconds)
                    if not alone:
                        suspects = list(range(index + 1))
                        detail += " (only after the inputs before it in its group)"
                findings.append(_save(out_dir, target, what, detail, [cases[i] for i in suspects]))
                print(f"  FOUND {what} in {target}: {_summary(detail)} -> {findings[-1].path}", flush=True)
            count += len(cases)
        tried[target] = count
    print("inputs tried: " + ", ".join(f"{t} {n:,}" for t, n in tried.items()))
    print(f"findings: {len(findings)}" + ("" if not findings else f" (saved under {out_dir})"))
    for f in findings:
        print(f"  {f.target}: {f.what}: {_summary(f.detail)} [{f.path}]")
    return 1 if findings else 0


def _summary(detail: str) -> str:
    lines = [line for line in detail.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:300]


def _save(out_dir: str, target: str, what: str, detail: str, cases: list) -> Finding:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for case in cases:
        name = f"{target}-{what}-{case.kind.replace('+', '_')}-{os.getpid()}-{time.monotonic_ns()}.case"
        path = os.path.join(out_dir, name)
        with open(path, "wb") as f:
            f.write(case.dump())
        paths.append(path)
    with open(os.path.join(out_dir, "findings.txt"), "a") as f:
        f.write(f"{target}\t{what}\t{' '.join(paths)}\t{json.dumps(detail)}\n")
    return Finding(target, what, detail, paths[-1] if paths else "")


def replay(path: str) -> int:
    with open(path, "rb") as f:
        case = Case.load(f.read())
    print(f"target {case.target}, kind {case.kind}, params {case.params}, {len(case.messages)} message(s)")
    try:
        run_case(case)
    except Unclear as exc:
        print(f"UNCLEAR: {exc}")
        return 1
    print("ok")
    return 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=TARGETS + ("all",), default="all")
    parser.add_argument("--seconds", type=float, default=60, help="total time budget, split evenly over the targets")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--memory-mb", type=int, default=1536, help="address space a child may add to what it had at fork")
    parser.add_argument("--input-seconds", type=float, default=20, help="time limit per input")
    parser.add_argument("--out", default="fuzz-findings", help="directory for offending inputs")
    parser.add_argument("--replay", help="run one saved case in this process and print the outcome")
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    # a safety net for this process too (children lower it to their own cap)
    limit = _address_space() + max(4096, 2 * args.memory_mb) * (1 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    targets = list(TARGETS) if args.target == "all" else [args.target]
    print(f"fuzzing {', '.join(targets)} for {args.seconds:g}s, seed {seed}, memory cap +{args.memory_mb} MiB per child", flush=True)
    return fuzz(targets, args.seconds, seed, args.memory_mb, args.out, args.input_seconds)


if __name__ == "__main__":
    sys.exit(main())
