"""The loss policy (``failOnDataLoss``) and the loss record every layer hands it: no Spark,
no sockets."""

from __future__ import annotations

import logging

import pytest

from spark_zmq.ingest.loss import DataLossError, LossPolicy, LostRange


def test_a_spool_loss_reads_as_it_always_did_also_narrowed():
    """Protocol 1 sends a relay's losses as these words: they must not change."""
    loss = LostRange(3, 10, 20, "record at byte 96: checksum mismatch", path="/s/ch-3/10-0.seg")
    assert loss.describe() == "offsets 10..20 of channel 3 in /s/ch-3/10-0.seg (record at byte 96: checksum mismatch)"
    assert loss.within(12, 30).describe() == (
        "offsets 12..20 of channel 3 in /s/ch-3/10-0.seg (record at byte 96: checksum mismatch)"
    )
    assert loss.count == 10 and loss.within(12, 15).count == 3


def test_words_made_elsewhere_are_kept_and_messages_override_the_count():
    loss = LostRange(0, 5, 9, text="the relay's own words", messages=2)
    assert loss.describe() == "the relay's own words" and loss.count == 2
    assert loss.within(6, 9).count == 3  # narrowed: the offsets, not the other spool's message count


@pytest.mark.parametrize("counted, hint", [(True, "they are logged and counted"), (False, "they are logged)")])
def test_fail_raises_naming_the_offsets(counted, hint):
    policy = LossPolicy.from_option(True, counted=counted)
    with pytest.raises(DataLossError) as error:
        policy.lose(LostRange(1, 4, 8, "gone", path="f.seg"))
    assert "offsets 4..8 of channel 1 in f.seg (gone)" in str(error.value)
    assert "failOnDataLoss=false" in str(error.value) and hint in str(error.value)
    assert policy.lost == 0


def test_skip_logs_and_counts(caplog):
    policy = LossPolicy.from_option(False, counted=True)
    with caplog.at_level(logging.WARNING, logger="spark_zmq.ingest.loss"):
        policy(LostRange(0, 0, 5, "a"))
        policy.lose(LostRange(1, 7, 9, "b"))
    assert policy.lost == 7
    assert "offsets 7..9 of channel 1 (b)" in caplog.text and "failOnDataLoss=false" in caplog.text
