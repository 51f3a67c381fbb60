"""The sizing rules of libzmq's queues in front of the broker and toward each client
(``frontend_rcvhwm``, ``frontend_sndhwm``), as properties: pure arithmetic, no sockets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_zmq.requestreply.broker_defaults import (
    FRONTEND_QUEUE_BYTES,
    FRONTEND_RCVHWM_MIN,
    FRONTEND_SNDHWM_MIN,
    frontend_rcvhwm,
    frontend_sndhwm,
)

pytestmark = pytest.mark.timeout(60)

RULES = [(frontend_rcvhwm, FRONTEND_RCVHWM_MIN), (frontend_sndhwm, FRONTEND_SNDHWM_MIN)]
hwms = st.integers(1, 1_000_000)
sizes = st.none() | st.integers(1, 1 << 31)


@pytest.mark.parametrize("rule, least", RULES, ids=["rcvhwm", "sndhwm"])
@given(hwm=hwms, max_message_bytes=sizes)
def test_a_queue_is_never_above_hwm_nor_below_its_least(rule, least, hwm, max_message_bytes):
    queue = rule(hwm, max_message_bytes)
    assert 1 <= queue <= hwm
    assert queue >= min(hwm, least)


@pytest.mark.parametrize("rule, least", RULES, ids=["rcvhwm", "sndhwm"])
@given(hwm=hwms, max_message_bytes=st.integers(1, 1 << 31))
def test_a_queue_holds_at_most_its_byte_budget_or_its_least_messages(rule, least, hwm, max_message_bytes):
    """What libzmq may queue per connection is bounded in bytes: the budget, or, where
    messages are so large that it holds fewer than the least, the least of them."""
    queue = rule(hwm, max_message_bytes)
    assert queue * max_message_bytes <= max(FRONTEND_QUEUE_BYTES, least * max_message_bytes)


@pytest.mark.parametrize("rule, least", RULES, ids=["rcvhwm", "sndhwm"])
@given(hwm=hwms, smaller=st.integers(1, 1 << 30), larger=st.integers(1, 1 << 30))
def test_larger_messages_never_get_a_longer_queue(rule, least, hwm, smaller, larger):
    smaller, larger = sorted((smaller, larger))
    assert rule(hwm, larger) <= rule(hwm, smaller)


@pytest.mark.parametrize("rule, least", RULES, ids=["rcvhwm", "sndhwm"])
def test_an_unknown_message_size_takes_the_least_queue(rule, least):
    assert rule(1000, None) == least
    assert rule(1, None) == 1
