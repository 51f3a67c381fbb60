"""The relay's control requests and answers as named types (``spark_zmq.relay.messages``),
without a relay or a socket: each reads back what it writes, through JSON; the bytes are
the ones the hand-written JSON of both ends always were; hostile requests are refused with
errors naming the field, and no input makes a reader fail any other way."""

from __future__ import annotations

import json
import re
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zmqtest import examples, free_ports

from spark_zmq.ingest.loss import LostRange
from spark_zmq.ingest.runtime import RangeInfo
from spark_zmq.relay import messages as m
from spark_zmq.relay.client import RelayClient, RelayError
from spark_zmq.relay.protocol import MAX_ADVANCE, PROTOCOL, Op

pytestmark = pytest.mark.timeout(120)

INT63 = (1 << 63) - 1
offsets = st.integers(0, INT63)
channels = st.integers(0, 99_999)
texts = st.text(max_size=12)
reals = st.floats(min_value=0, max_value=1e9, allow_nan=False) | st.integers(0, 10**6)
readers = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True)
sessions = st.text(min_size=1, max_size=64)
int_lists = st.lists(offsets, max_size=4)
hints = st.none() | st.tuples(texts, offsets)
losses = st.builds(m.WireLoss, offsets, offsets, texts)

REQUESTS = {
    Op.HELLO: st.just(m.HelloRequest()),
    Op.ATTACH: st.just(m.AttachRequest()),
    Op.DETACH: st.just(m.DetachRequest()),
    Op.STATE: st.just(m.StateRequest()),
    Op.START: st.just(m.StartRequest()),
    Op.READERS: st.just(m.ReadersRequest()),
    Op.REMOVE_READER: st.builds(m.RemoveReaderRequest, readers),
    Op.COUNT: st.builds(m.CountRequest, channels, offsets, offsets),
    Op.END_WITHIN: st.builds(m.EndWithinRequest, channels, offsets, offsets, st.none() | offsets, st.none() | offsets),
    Op.LOST: st.builds(m.LostRequest, channels, offsets, offsets),
    Op.ADVANCE: st.builds(m.AdvanceRequest, channels, st.integers(0, MAX_ADVANCE)),
    Op.LOCATE: st.builds(m.LocateRequest, channels, offsets),
    Op.RELEASE: st.builds(m.ReleaseRequest, st.dictionaries(channels, offsets, max_size=4)),
    Op.DESCRIBE: st.builds(m.DescribeRequest, st.dictionaries(channels, st.tuples(offsets, offsets), max_size=4)),
    Op.AT_TIME: st.builds(m.AtTimeRequest, offsets),
}

state = st.builds(
    m.StateAnswer, int_lists, int_lists, st.lists(texts, max_size=2), reals, offsets, offsets, st.none() | int_lists
)
description = st.builds(
    m.RelayDescription,
    texts,
    channels,
    texts,
    texts,
    texts,
    texts,
    st.lists(texts, max_size=2),
    st.booleans(),
    readers,
    offsets,
)
ranges = st.builds(m.RangeDescription, offsets, offsets, hints, st.lists(losses, max_size=2))
entries = st.builds(m.ReaderEntry, readers, int_lists, offsets, st.booleans(), st.none() | reals, int_lists, int_lists)
ANSWERS = st.one_of(
    st.just(m.Done()),
    st.builds(m.HelloAnswer, texts, channels, texts, st.booleans(), offsets),
    st.builds(m.AttachAnswer, description, state, st.none() | int_lists),
    state,
    st.builds(m.CountAnswer, offsets, offsets),
    st.builds(m.EndWithinAnswer, offsets),
    st.builds(m.LostAnswer, st.lists(losses, max_size=3)),
    st.builds(m.LocateAnswer, hints),
    st.builds(m.DescribeAnswer, st.dictionaries(channels, ranges, max_size=3)),
    st.builds(m.AtTimeAnswer, st.lists(st.builds(m.TimeStart, offsets, st.none() | losses), max_size=3)),
    st.builds(
        m.ReadersAnswer,
        st.lists(entries, max_size=2),
        int_lists,
        int_lists,
        texts,
        st.builds(m.Retention, st.none() | offsets, st.none() | reals),
        offsets,
    ),
)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def _through_json(wire: dict) -> dict:
    return json.loads(json.dumps(wire))


def test_every_op_has_one_request_type():
    assert set(m.REQUESTS) == set(Op) == set(REQUESTS)
    assert all(kind.op is op for op, kind in m.REQUESTS.items())
    assert {op for op, kind in m.REQUESTS.items() if not kind.leased} == {Op.HELLO, Op.READERS, Op.REMOVE_READER}
    for kind in m.REQUESTS.values():  # the type that reads the answer is the one the type checker sees
        (declared,) = typing.get_args(kind.__orig_bases__[0])
        assert kind.answer_type is declared, kind.__name__


@settings(max_examples=examples(300), deadline=None)
@given(
    request=st.sampled_from(sorted(REQUESTS)).flatmap(lambda op: REQUESTS[op]),
    reader=readers,
    session=sessions,
    request_id=st.none() | st.integers(0, INT63) | texts,
)
def test_every_request_reads_back_what_it_writes(request, reader, session, request_id):
    sent = m.Envelope(request, reader, session, request_id)
    assert m.Envelope.from_wire(_through_json(sent.to_wire())) == sent
    assert type(request).from_wire(_through_json(request.to_wire())) == request


@settings(max_examples=examples(300), deadline=None)
@given(answer=ANSWERS)
def test_every_answer_reads_back_what_it_writes(answer):
    assert type(answer).from_wire(_through_json(answer.to_wire())) == answer


@given(refused=st.builds(m.LeaseRefused, reals, reals, readers))
def test_a_lease_refusal_reads_back_what_it_writes(refused):
    assert m.LeaseRefused.from_wire(_through_json(refused.to_wire()), "other") == refused


def test_each_request_reads_its_answer_into_its_answer_type():
    """``ask`` gives the caller the answer's type: each request's ``answer`` reads the JSON
    the relay sends for that op."""
    state = m.StateAnswer([5], [0], [], 0.5, 0, 0, [3])
    readers_answer = m.ReadersAnswer([], [5], [0], "s", m.Retention(), 10)
    relay = m.RelayDescription("s", 1, "/d", "o", "raw", "pull", ["@tcp://*:1"], True, "default", 3)
    answers = {
        Op.HELLO: m.HelloAnswer("s", 1, "raw", False, 2),
        Op.ATTACH: m.AttachAnswer(relay, state, [4]),
        Op.DETACH: m.Done(),
        Op.STATE: state,
        Op.START: state,
        Op.RELEASE: state,
        Op.READERS: readers_answer,
        Op.REMOVE_READER: readers_answer,
        Op.COUNT: m.CountAnswer(3, 30),
        Op.END_WITHIN: m.EndWithinAnswer(4),
        Op.LOST: m.LostAnswer([m.WireLoss(1, 2, "w")]),
        Op.ADVANCE: m.Done(),
        Op.LOCATE: m.LocateAnswer(("seg", 8)),
        Op.DESCRIBE: m.DescribeAnswer({0: m.RangeDescription(1, 2, None, [])}),
        Op.AT_TIME: m.AtTimeAnswer([m.TimeStart(4, m.WireLoss(0, 4, "freed"))]),
    }
    requests = [
        m.HelloRequest(),
        m.AttachRequest(),
        m.DetachRequest(),
        m.StateRequest(),
        m.StartRequest(),
        m.ReleaseRequest({0: 1}),
        m.ReadersRequest(),
        m.RemoveReaderRequest("a"),
        m.CountRequest(0, 0, 1),
        m.EndWithinRequest(0, 0, 1),
        m.LostRequest(0, 0, 1),
        m.AdvanceRequest(0, 1),
        m.LocateRequest(0, 1),
        m.DescribeRequest({0: (0, 1)}),
        m.AtTimeRequest(1),
    ]
    assert {request.op for request in requests} == set(Op)
    for request in requests:
        op = request.op
        assert request.answer(_through_json({**answers[op].to_wire(), "id": 1})) == answers[op], op


# -- the bytes: what both ends wrote by hand, key by key -------------------------------------------


@pytest.mark.parametrize(
    "request_, fields",
    [
        (m.AttachRequest(), {}),
        (m.CountRequest(0, 12, 30), {"channel": 0, "start": 12, "end": 30}),
        (m.EndWithinRequest(1, 0, 500, 10, None), {"channel": 1, "start": 0, "end": 500, "rows": 10, "bytes": None}),
        (m.LostRequest(0, 12, 30), {"channel": 0, "start": 12, "end": 30}),
        (m.AdvanceRequest(0, 800), {"channel": 0, "offset": 800}),
        (m.LocateRequest(2, 7), {"channel": 2, "offset": 7}),
        (m.ReleaseRequest({0: 500, 1: 3}), {"offsets": {"0": 500, "1": 3}}),
        (m.DescribeRequest({0: (12, 30), 3: (0, 1)}), {"ranges": {"0": [12, 30], "3": [0, 1]}}),
        (m.AtTimeRequest(1_700_000_000_000), {"timestamp": 1_700_000_000_000}),
        (m.RemoveReaderRequest("b"), {"name": "b"}),
    ],
)
def test_a_typed_request_is_the_bytes_the_client_always_sent(request_, fields):
    old = {"op": request_.op.value, "id": 7, "session": "s", "reader": "default", **fields}
    assert json.dumps(m.Envelope(request_, "default", "s", 7).to_wire()) == json.dumps(old)


def test_typed_answers_are_the_bytes_the_relay_always_sent():
    state = m.StateAnswer([500], [0], ["channel 0 (@tcp://*:1): OSError()"], 0.25, 1, 2, [100])
    old_state = {
        "latest": [500],
        "earliest": [0],
        "errors": ["channel 0 (@tcp://*:1): OSError()"],
        "idle": 0.25,
        "rejected": 1,
        "broken": 2,
        "committed": [100],
    }
    relay = m.RelayDescription("sp", 1, "/spool", "own", "arrow", "pull", ["@tcp://*:1"], True, "r", 9)
    old_relay = {
        "protocol": PROTOCOL,
        "spool": "sp",
        "channels": 1,
        "spoolDir": "/spool",
        "owner": "own",
        "format": "arrow",
        "pattern": "pull",
        "endpoints": ["@tcp://*:1"],
        "held": True,
        "reader": "r",
        "controlRequests": 9,
    }
    entry = m.ReaderEntry("a", [100], 1_700_000_000_000, True, 0.5, [400], [0])
    pairs = [
        (
            m.HelloAnswer("sp", 1, "raw", False, 4),
            {"protocol": PROTOCOL, "spool": "sp", "channels": 1, "format": "raw", "held": False, "controlRequests": 4},
        ),
        (m.AttachAnswer(relay, state, None), {**old_relay, **old_state, "attendedUntil": None}),
        (state, old_state),
        (m.LeaseRefused(1.5, 8.5, "r"), {"refused": {"idle": 1.5, "lapses": 8.5, "reader": "r"}}),
        (m.CountAnswer(3, 30), {"rows": 3, "bytes": 30}),
        (m.EndWithinAnswer(10), {"end": 10}),
        (m.LocateAnswer(("0-0.seg", 17)), {"at": ["0-0.seg", 17]}),
        (m.LocateAnswer(None), {"at": None}),
        (
            m.DescribeAnswer({0: m.RangeDescription(3, 30, ("0-0.seg", 0), [m.WireLoss(10, 20, "w")])}),
            {"ranges": {"0": {"rows": 3, "bytes": 30, "at": ["0-0.seg", 0], "lost": [[10, 20, "w"]]}}},
        ),
        (
            m.AtTimeAnswer([m.TimeStart(5, None), m.TimeStart(9, m.WireLoss(0, 9, "freed"))]),
            {"starts": [[5, None], [9, [0, 9, "freed"]]]},
        ),
        (
            m.ReadersAnswer([entry], [500], [0], "sp", m.Retention(None, 60), 1234),
            {
                "readers": [
                    {
                        "name": "a",
                        "committed": [100],
                        "registered": 1_700_000_000_000,
                        "held": True,
                        "idle": 0.5,
                        "behind": [400],
                        "lost": [0],
                    }
                ],
                "latest": [500],
                "earliest": [0],
                "spool": "sp",
                "retention": {"bytes": None, "seconds": 60},
                "bytes": 1234,
            },
        ),
        (m.Done(), {}),
    ]
    for answer, old in pairs:
        assert json.dumps(answer.to_wire()) == json.dumps(old), answer


def test_losses_and_hints_convert_to_and_from_what_the_ingest_holds():
    lost = LostRange(0, 10, 20, "checksum mismatch", path="/spool/x.seg")
    wire = m.WireLoss.of(lost, (12, 30))
    assert (wire.first, wire.end) == (10, 20) and wire.words.startswith("offsets 12..20 of channel 0")
    described = m.RangeDescription.of(RangeInfo(5, 50, [lost], ("0-0.seg", 3)), 12, 30)
    assert described.at == ("0-0.seg", 3) and described.lost == [wire]
    info = described.range_info(4, "relay at X")
    assert (info.rows, info.bytes, info.hint) == (5, 50, ("0-0.seg", 3))
    assert (info.lost[0].channel, info.lost[0].describe()) == (4, f"{wire.words} (relay at X)")
    assert m.RangeDescription.of(RangeInfo(0, 0, [], ()), 0, 0).at is None


# -- hostile requests: refused, naming the field -----------------------------------------------------

_S = {"session": "s"}
_INT = "must be an integer from 0 to 2^63-1"


@pytest.mark.parametrize(
    "wire, message",
    [
        ({"op": "nope", **_S}, "bad request: unknown op 'nope'"),
        ({"op": ["count"], **_S}, "bad request: unknown op"),
        ({**_S}, "bad request: unknown op None"),
        ({"op": "state", "reader": "no spaces", **_S}, "bad request: 'reader': 'no spaces' is not a reader name"),
        ({"op": "state", "reader": 7, **_S}, "bad request: 'reader': int is not a reader name"),
        ({"op": "state"}, "bad request: 'session' must be a string of 1 to 64 characters"),
        ({"op": "detach", "session": ""}, "'session' must be a string of 1 to 64 characters"),
        ({"op": "count", "session": "x" * 65}, "'session' must be a string of 1 to 64 characters"),
        ({"op": "attach", "session": ["x"]}, "'session' must be a string of 1 to 64 characters"),
        ({"op": "count", "start": 0, "end": 1, **_S}, f"bad request: 'channel' {_INT}"),
        ({"op": "count", "channel": -1, "start": 0, "end": 1, **_S}, f"'channel' {_INT}"),
        ({"op": "count", "channel": True, "start": 0, "end": 1, **_S}, f"'channel' {_INT}"),
        ({"op": "count", "channel": 0.0, "start": 0, "end": 1, **_S}, f"'channel' {_INT}"),
        ({"op": "count", "channel": "0", "start": 0, "end": 1, **_S}, f"'channel' {_INT}"),
        ({"op": "lost", "channel": 0, "start": 1 << 63, "end": 1, **_S}, f"'start' {_INT}"),
        ({"op": "lost", "channel": 0, "start": 0, **_S}, f"'end' {_INT}"),
        ({"op": "end_within", "channel": 0, "start": 0, "end": 1, "rows": -1, **_S}, f"'rows' {_INT}"),
        ({"op": "end_within", "channel": 0, "start": 0, "end": 1, "bytes": "1", **_S}, f"'bytes' {_INT}"),
        ({"op": "locate", "channel": 0, "offset": 10**20, **_S}, f"'offset' {_INT}"),
        (
            {"op": "advance", "channel": 0, "offset": (1 << 63) - 2, **_S},
            f"bad request: 'offset' {(1 << 63) - 2} of 'advance' is past {MAX_ADVANCE} (2^62)",
        ),
        ({"op": "advance", "channel": 0, "offset": MAX_ADVANCE + 1, **_S}, "of 'advance' is past"),
        ({"op": "release", **_S}, "bad request: 'offsets' must be an object {channel: offset}"),
        ({"op": "release", "offsets": [500], **_S}, "'offsets' must be an object"),
        ({"op": "release", "offsets": {"0": "x"}, **_S}, f"bad request: '0' {_INT}"),
        ({"op": "release", "offsets": {"0": -5}, **_S}, f"bad request: '0' {_INT}"),
        ({"op": "release", "offsets": {"x": 5}, **_S}, "bad request: channel 'x' of 'offsets' is not a channel number"),
        ({"op": "release", "offsets": {"-1": 5}, **_S}, "channel '-1' of 'offsets' is not a channel number"),
        ({"op": "release", "offsets": {"٣": 5}, **_S}, "of 'offsets' is not a channel number"),
        ({"op": "release", "offsets": {"100000": 5}, **_S}, "channel '100000' of 'offsets' is not a channel number"),
        (
            {"op": "describe", "ranges": [[0, 1]], **_S},
            "bad request: 'ranges' must be an object {channel: [start, end]}",
        ),
        ({"op": "describe", "ranges": {"0": [1]}, **_S}, "bad request: range '0': [1]"),
        ({"op": "describe", "ranges": {"0": [1, 2, 3]}, **_S}, "bad request: range '0': [1, 2, 3]"),
        ({"op": "describe", "ranges": {"0": {"start": 1}}, **_S}, "bad request: range '0'"),
        ({"op": "describe", "ranges": {"9999999": [0, 1]}, **_S}, "bad request: range '9999999'"),
        ({"op": "describe", "ranges": {"0": [-1, 2]}, **_S}, f"bad request: 'start' {_INT}"),
        ({"op": "describe", "ranges": {"0": [1, 1 << 63]}, **_S}, f"bad request: 'end' {_INT}"),
        ({"op": "at_time", "timestamp": "now", **_S}, f"bad request: 'timestamp' {_INT}"),
        ({"op": "remove_reader"}, "bad request: 'name': NoneType is not a reader name"),
        ({"op": "remove_reader", "name": "../x"}, "bad request: 'name': '../x' is not a reader name"),
    ],
)
def test_a_hostile_request_is_refused_naming_what_is_wrong(wire, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        m.Envelope.from_wire(wire)


def test_requests_that_need_no_lease_ignore_a_missing_or_bad_session():
    assert m.Envelope.from_wire({"op": "hello"}) == m.Envelope(m.HelloRequest())
    assert m.Envelope.from_wire({"op": "readers", "session": 5, "id": 3}) == m.Envelope(m.ReadersRequest(), id=3)
    assert m.Envelope.from_wire({"op": "remove_reader", "name": "a", "session": ""}).request == m.RemoveReaderRequest(
        "a"
    )


def test_what_a_request_may_carry_is_read_at_its_bounds():
    top = {"op": "count", "channel": 99_999, "start": INT63, "end": INT63, **_S}
    assert m.Envelope.from_wire(top).request == m.CountRequest(99_999, INT63, INT63)
    assert m.Envelope.from_wire(
        {"op": "advance", "channel": 0, "offset": MAX_ADVANCE, **_S}
    ).request == m.AdvanceRequest(0, MAX_ADVANCE)
    assert m.Envelope.from_wire(
        {"op": "end_within", "channel": 0, "start": 0, "end": 1, **_S}
    ).request == m.EndWithinRequest(0, 0, 1, None, None)
    # "00" and "0" name one channel (the last one given wins, as it always did)
    assert m.Envelope.from_wire({"op": "release", "offsets": {"0": 1, "00": 2}, **_S}).request == m.ReleaseRequest(
        {0: 2}
    )


def test_huge_requests_are_read_in_bounded_time_and_refused_in_bounded_words():
    many = {str(c): [0, 1] for c in range(20_000)}
    assert len(m.Envelope.from_wire({"op": "describe", "ranges": many, **_S}).request.ranges) == 20_000
    for wire in (
        {"op": "release", "offsets": {"9" * 100_000: 1}, **_S},
        {"op": "describe", "ranges": {"0": list(range(100_000))}, **_S},
        {"op": "describe", "ranges": {"x" * 100_000: [0, 1]}, **_S},
        {"op": "release", "offsets": {"9" * 100_000: "x"}, **_S},
        {"op": "x" * 100_000, **_S},
    ):
        with pytest.raises(ValueError) as refused:
            m.Envelope.from_wire(wire)
        assert len(str(refused.value)) < 200


@settings(max_examples=examples(500), deadline=None)
@given(
    wire=st.fixed_dictionaries(
        {"op": st.sampled_from([op.value for op in Op] + ["other"]), "session": st.one_of(st.just("s"), _json)},
        optional={
            "channel": _json | st.integers(-2, 3),
            "start": _json | st.integers(-2, 10**20),
            "end": _json | st.integers(-2, 10**20),
            "offset": _json | st.integers(-2, 10**20),
            "offsets": _json | st.dictionaries(st.text(max_size=6), _json | st.integers(-2, 10**20), max_size=3),
            "rows": _json,
            "bytes": _json,
            "id": _json,
            "reader": _json | readers,
            "name": _json | readers,
            "timestamp": _json | st.integers(-2, 10**20),
            "ranges": _json
            | st.dictionaries(
                st.sampled_from(["0", "1", "-1", "x", "00", "9" * 7]),
                st.lists(_json | st.integers(-2, 10**20), max_size=3),
                max_size=3,
            ),
        },
    )
)
def test_any_request_is_read_or_refused_as_a_bad_request_never_failing_otherwise(wire):
    try:
        envelope = m.Envelope.from_wire(wire)
    except ValueError as exc:
        assert str(exc).startswith("bad request: "), exc
        return
    assert envelope.request.op.value == wire["op"]
    assert m.Envelope.from_wire(_through_json(envelope.to_wire())) == envelope


# -- answers the query cannot read: errors naming the field --------------------------------------------

_HELLO = {"protocol": PROTOCOL, "spool": "s", "channels": 1, "format": "raw", "held": False, "controlRequests": 1}


@pytest.mark.parametrize(
    "kind, wire, message",
    [
        (m.CountAnswer, {"bytes": 1}, "no 'rows'"),
        (m.CountAnswer, {"rows": -1, "bytes": 1}, "'rows' must be an integer from 0 to 2^63-1, not -1"),
        (m.CountAnswer, {"rows": 1, "bytes": 1 << 63}, "'bytes' must be an integer from 0 to 2^63-1"),
        (m.CountAnswer, {"rows": True, "bytes": 1}, "'rows' must be an integer"),
        (m.EndWithinAnswer, {"end": "10"}, "'end' must be an integer"),
        (m.LostAnswer, {"lost": [[1, 2]]}, "'lost' must hold losses [first, end, words]"),
        (m.LostAnswer, {"lost": {}}, "'lost' must be a list"),
        (m.LocateAnswer, {"at": ["seg"]}, "'at' must be null or [segment, position]"),
        (m.LocateAnswer, {}, "no 'at'"),
        (m.StateAnswer, {"latest": [1, "2"], "earliest": [0], "idle": 0}, "'latest' must be an integer"),
        (m.StateAnswer, {"latest": [1], "earliest": [0], "idle": "0"}, "'idle' must be a number"),
        (m.StateAnswer, {"latest": [1], "earliest": [0], "idle": 0, "errors": "x"}, "'errors' must be a list"),
        (m.DescribeAnswer, {"ranges": {"x": {}}}, "'ranges' must be keyed by channel"),
        (m.DescribeAnswer, {"ranges": {"0": []}}, "'ranges' must be an object"),
        (m.AtTimeAnswer, {"starts": [[1]]}, "'starts' must hold [offset, loss]"),
        (
            m.ReadersAnswer,
            {"readers": [{"name": 1}], "latest": [], "earliest": [], "spool": "s", "bytes": 0},
            "'name' must be a string",
        ),
        (m.HelloAnswer, {**_HELLO, "protocol": 2}, "speaks protocol 2, this connector 1"),
        (m.HelloAnswer, {**_HELLO, "protocol": True}, "speaks protocol True"),
        (m.AttachAnswer, {"protocol": 0}, "speaks protocol 0, this connector 1: run the same spark-zmq version"),
        (m.AttachAnswer, {"protocol": PROTOCOL}, "no 'spool'"),
    ],
)
def test_an_answer_the_query_cannot_read_is_an_error_naming_the_field(kind, wire, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        kind.from_wire(wire)


def test_an_answer_without_the_fields_an_earlier_relay_left_out_reads_as_their_defaults():
    state = m.StateAnswer.from_wire({"latest": [5], "earliest": [0], "idle": 1})
    assert (state.errors, state.rejected, state.broken, state.committed) == ([], 0, 0, None)
    attached = m.AttachAnswer.from_wire(
        {
            "protocol": PROTOCOL,
            "spool": "s",
            "channels": 1,
            "spoolDir": "/d",
            "owner": "o",
            "format": "raw",
            "latest": [5],
            "earliest": [0],
            "idle": 0.5,
        }
    )
    assert attached.attended_until is None and attached.relay.spool_dir == "/d" and attached.state.latest == [5]


@settings(max_examples=examples(300), deadline=None)
@given(
    wire=st.dictionaries(
        st.sampled_from(
            [
                "protocol",
                "spool",
                "channels",
                "format",
                "held",
                "spoolDir",
                "owner",
                "latest",
                "earliest",
                "idle",
                "rows",
                "bytes",
                "end",
                "lost",
                "at",
                "ranges",
                "starts",
                "readers",
                "spool",
                "retention",
                "refused",
                "attendedUntil",
                "committed",
                "errors",
            ]
        ),
        _json | st.integers(0, 10) | st.lists(st.integers(0, 10), max_size=2),
        max_size=8,
    ),
    kind=st.sampled_from(
        [
            m.Done,
            m.HelloAnswer,
            m.AttachAnswer,
            m.StateAnswer,
            m.CountAnswer,
            m.EndWithinAnswer,
            m.LostAnswer,
            m.LocateAnswer,
            m.DescribeAnswer,
            m.AtTimeAnswer,
            m.ReadersAnswer,
        ]
    ),
)
def test_any_answer_is_read_or_refused_with_a_value_error_never_failing_otherwise(wire, kind):
    try:
        answer = kind.from_wire(wire)
    except ValueError:
        return
    assert kind.from_wire(_through_json(answer.to_wire())) == answer


def test_the_client_names_the_relay_when_it_cannot_read_an_answer(monkeypatch):
    client = RelayClient(f"tcp://127.0.0.1:{free_ports(1)[0]}", "s", timeout_s=1)
    try:
        monkeypatch.setattr(client, "_exchange", lambda *a: {"protocol": 2, "id": 1})
        with pytest.raises(
            RelayError,
            match=r"the relay at tcp://127\.0\.0\.1:\d+ speaks protocol 2, this connector "
            r"1: run the same spark-zmq version on both sides",
        ):
            client.ask(m.AttachRequest())
        monkeypatch.setattr(client, "_exchange", lambda *a: {"rows": -1, "bytes": 0, "id": 1})
        with pytest.raises(RelayError, match=r"answered 'count' with what this connector cannot read: 'rows' must"):
            client.ask(m.CountRequest(0, 0, 1))
    finally:
        client.close()
