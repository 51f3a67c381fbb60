"""``QueryStart``: the first batch's start kept in the spool directory (pure file logic;
the restart it exists for is driven through Spark in tests/e2e/test_restarts.py)."""

from __future__ import annotations

import os

import pytest

from spark_zmq.source.offsets import ChannelOffsets
from spark_zmq.source.query_start import FILE_NAME, QueryStart

SPOOL = "a" * 32


def test_remembers_until_forgotten(tmp_path):
    start = QueryStart(str(tmp_path / "spool"))
    assert start.recall(SPOOL, 2) is None
    start.remember(ChannelOffsets({"0": 5, "1": 7}, SPOOL))
    assert start.recall(SPOOL, 2) == ChannelOffsets({"0": 5, "1": 7}, SPOOL)
    assert oct(os.stat(tmp_path / "spool").st_mode & 0o777) == "0o700"
    start.forget()
    start.forget()  # idempotent
    assert start.recall(SPOOL, 2) is None


def test_another_spool_or_other_channels_are_not_this_querys_start(tmp_path):
    start = QueryStart(str(tmp_path))
    start.remember(ChannelOffsets({"0": 5}, SPOOL))
    assert start.recall("b" * 32, 1) is None  # the spool was recreated
    assert start.recall(SPOOL, 2) is None


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{",
        b"[]",
        b'{"0": 1, "spool": 1}',
        b'{"0": -1, "spool": "%s"}' % SPOOL.encode(),
        b'{"0": true, "spool": "%s"}' % SPOOL.encode(),
        b'{"spool": "%s"}' % SPOOL.encode(),
        b"\xff\xfe",
        b" " * 70_000,
    ],
)
def test_a_damaged_file_is_ignored_with_a_warning(tmp_path, caplog, content):
    (tmp_path / FILE_NAME).write_bytes(content)
    assert QueryStart(str(tmp_path)).recall(SPOOL, 1) is None
    assert FILE_NAME in caplog.text
