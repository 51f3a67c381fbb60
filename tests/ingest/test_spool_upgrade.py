"""Spool format versions: what this version writes, and a spool an older version left.

``data/spool-v1`` is a spool written by the previous release's code (format version 1,
whose record bodies carry a CRC-32): two channels, one of them with a second segment
after a roll. A query upgraded across a restart must drain it, then go on writing the
current format beside it. No Spark.
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib

import pytest
import xxhash

from spark_zmq.ingest.batches import messages_to_batch
from spark_zmq.ingest.loss import DataLossError
from spark_zmq.ingest.spool import Spool
from spark_zmq.ingest.spool_format import (
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    SpoolFormatError,
    decode_segment_header,
)
from spark_zmq.ingest.spool_layout import channel_dir
from spark_zmq.ingest.spool_reader import read_range, skip_loss

pytestmark = pytest.mark.timeout(60)

V1_SPOOL = os.path.join(os.path.dirname(__file__), "data", "spool-v1")
V1_CHANNEL_0 = [b"v1-%d" % i for i in range(10)] + [b"topic-a", b"no-topic"] + [b"after-roll-%d" % i for i in range(5)]
V1_TOPICS_0 = [None] * 10 + ["a", None] + [None] * 5


@pytest.fixture()
def v1_spool(tmp_path) -> str:
    """A private copy of the version-1 spool (git does not keep its 0700/0600 modes)."""
    target = str(tmp_path / "spool")
    shutil.copytree(V1_SPOOL, target)
    return target


def _messages(spool_dir: str, channel: int, start: int, end: int, on_loss=None) -> list[tuple]:
    rows = []
    for _first, batch in read_range(spool_dir, channel, start, end, on_loss=on_loss):
        rows += zip(batch.column("value").to_pylist(), batch.column("topic").to_pylist())
    return rows


def _segments(spool_dir: str, channel: int) -> list[str]:
    directory = channel_dir(spool_dir, channel)
    return [os.path.join(directory, name) for name in sorted(os.listdir(directory))]


def test_a_spool_written_in_format_version_1_is_recovered_and_read_whole(v1_spool):
    spool = Spool(v1_spool, 2)
    try:
        ch0, ch1 = spool.channels
        assert (ch0.next_offset, ch1.next_offset) == (17, 1)
        assert ch0.lost == [] and ch1.lost == []
        assert _messages(v1_spool, 0, 0, 17) == list(zip(V1_CHANNEL_0, V1_TOPICS_0))
        assert _messages(v1_spool, 1, 0, 1) == [(b"other channel", None)]
        # a range starting inside a version-1 record, through the roll
        assert [v for v, _ in _messages(v1_spool, 0, 11, 14)] == V1_CHANNEL_0[11:14]
    finally:
        spool.close()


def test_after_an_upgrade_new_records_follow_the_old_ones_in_the_current_format(v1_spool):
    spool = Spool(v1_spool, 2)
    try:
        spool.channels[0].append(messages_to_batch([b"new-0", b"new-1"], None, "raw", 0))
    finally:
        spool.close()
    with open(_segments(v1_spool, 0)[-1], "rb") as newest:
        assert decode_segment_header(newest.read(SEGMENT_HEADER_SIZE)).first == 17
    reopened = Spool(v1_spool, 2)  # recovery reads both formats
    try:
        assert reopened.channels[0].next_offset == 19 and reopened.channels[0].lost == []
        assert [v for v, _ in _messages(v1_spool, 0, 15, 19)] == V1_CHANNEL_0[15:] + [b"new-0", b"new-1"]
    finally:
        reopened.close()


def test_a_flipped_bit_in_a_version_1_body_is_still_a_loss_naming_the_offsets(v1_spool):
    first = _segments(v1_spool, 0)[0]
    with open(first, "r+b") as segment:
        segment.seek(SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE + 100)
        byte = segment.read(1)
        segment.seek(-1, os.SEEK_CUR)
        segment.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(DataLossError, match=r"offsets 0\.\.10 of channel 0 .*checksum mismatch"):
        _messages(v1_spool, 0, 0, 17)
    # skipping the damaged record leaves the rest, at their own offsets
    assert [v for v, _ in _messages(v1_spool, 0, 0, 17, on_loss=skip_loss)] == V1_CHANNEL_0[10:]


def test_this_version_writes_format_2_whose_body_checksum_is_xxh3_64(tmp_path):
    spool_dir = str(tmp_path / "spool")
    spool = Spool(spool_dir, 1)
    try:
        spool.channels[0].append(messages_to_batch([b"a" * 1000, b"b"], None, "raw", 0))
    finally:
        spool.close()
    with open(_segments(spool_dir, 0)[0], "rb") as segment:
        data = segment.read()
    assert struct.unpack_from("<8sI", data, 0) == (b"ZMQSPOOL", 2)
    magic, version, _flags, first, count, size, body_sum, _crc = struct.unpack_from(
        "<4sHHqIQQI", data, SEGMENT_HEADER_SIZE
    )
    assert (magic, version, first, count) == (b"ZSPB", 2, 0, 2)
    body = data[SEGMENT_HEADER_SIZE + RECORD_HEADER_SIZE :][:size]
    assert body_sum == xxhash.xxh3_64_intdigest(body)


def test_a_segment_of_a_newer_format_is_refused_naming_the_versions_this_one_reads(tmp_path):
    spool_dir = str(tmp_path / "spool")
    spool = Spool(spool_dir, 1)
    try:
        spool.channels[0].append(messages_to_batch([b"x"], None, "raw", 0))
    finally:
        spool.close()
    path = _segments(spool_dir, 0)[-1]
    with open(path, "rb") as segment:
        header = bytearray(segment.read(SEGMENT_HEADER_SIZE))
    struct.pack_into("<I", header, 8, 3)  # the version, after the magic
    struct.pack_into("<I", header, 48, zlib.crc32(bytes(header[:48])))  # the header's own checksum
    with pytest.raises(SpoolFormatError, match="segment format version 3 is not supported .*reads 1 and 2"):
        decode_segment_header(bytes(header))
