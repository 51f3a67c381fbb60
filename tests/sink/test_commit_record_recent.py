"""The sink's memory of a streaming write's recent commits (``RecentBatches``): what the
next commit record names in ``spark_zmq.recent`` so that it repairs a lost one. Spark
makes a new writer for each commit, so the memory is a file of the driver's."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from spark_zmq.sink.commit_record import RecentBatches, commit_record


def test_each_commit_names_the_querys_recent_batches_across_writers(tmp_path):
    directory = str(tmp_path / "sink")
    for b in range(12):
        # a new RecentBatches per commit, as Spark makes a new writer per commit
        earlier = RecentBatches(directory, keep=8).remember("q", b, {0: (f"a{b}", 1)})
        assert sorted(earlier) == list(range(max(0, b - 8), b))
    assert RecentBatches(directory).remember("other", 5, {0: ("x", 1)}) == {}  # per writing query
    # a batch run again after a restart is named by its latest commit; later batches are not "recent"
    assert RecentBatches(directory).remember("q", 3, {0: ("again", 2)}) == {}
    assert RecentBatches(directory).remember("q", 4, {0: ("b4", 1)})[3] == {0: ("again", 2)}
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"


def test_the_record_carries_them(tmp_path):
    schema = pa.schema([("id", pa.int64())])
    record = commit_record(schema, "q", 5, {0: ("a", 2)}, {4: {0: ("b", 3), 1: ("c", 1)}})
    metadata = pa.ipc.open_stream(record).schema.metadata
    assert json.loads(metadata[b"spark_zmq.recent"]) == {
        "4": {"0": {"attempt_id": "b", "messages": 3}, "1": {"attempt_id": "c", "messages": 1}}
    }
    assert b"spark_zmq.recent" not in pa.ipc.open_stream(commit_record(schema, "q", 5, {0: ("a", 2)})).schema.metadata


def test_a_directory_others_may_use_is_not_trusted(tmp_path, caplog):
    directory = tmp_path / "shared"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    with caplog.at_level("WARNING"):
        assert RecentBatches(str(directory)).remember("q", 1, {0: ("a", 1)}) == {}
    assert "not a directory of this user's alone" in caplog.text


@pytest.mark.parametrize("content", ["not json", '{"1": 5}'])
def test_a_damaged_file_costs_only_the_repair(tmp_path, content, caplog):
    recent = RecentBatches(str(tmp_path / "sink"))
    recent.remember("q", 0, {0: ("a", 1)})
    path = next((tmp_path / "sink").iterdir())
    path.write_text(content)
    with caplog.at_level("WARNING"):
        assert recent.remember("q", 1, {0: ("b", 1)}) == {}
    assert "could not be read" in caplog.text
    assert recent.remember("q", 2, {0: ("c", 1)}) == {1: {0: ("b", 1)}}  # the file is whole again
