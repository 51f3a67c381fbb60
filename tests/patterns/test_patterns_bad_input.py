"""Bad input to ``spark_zmq.patterns``: every mistake gets a clear exception whose message
names the offending value and says what is valid (docs/architecture.md, "Guarantees": bad input).

Checked on the classes of both wires (libzmq's and the engine's ``ReroutingPush`` and
``ZmtpPull``, the sink's ``push`` and the source's ``pull``: docs/patterns.md, "Which wire
carries each pattern"): the checks live in ``PatternSocket``, above the wires, and these
tests keep it so for both."""

from __future__ import annotations

import pytest
from patterns_support import SOON_S, bind_spec, close_all, unbound_address

from spark_zmq.patterns import (
    PATTERNS,
    Gather,
    Pub,
    Pull,
    Push,
    ReroutingPush,
    Scatter,
    SocketClosedError,
    Sub,
    XPub,
    XSub,
    ZmtpPull,
    parse_endpoints,
    socket_for,
)

pytestmark = pytest.mark.timeout(30)

ALL_CLASSES = [Push, Pull, ReroutingPush, ZmtpPull, Scatter, Gather, Pub, Sub, XPub, XSub]
VALID_FORMS = "'@tcp://*:5555' (bind), '>tcp://host:5555' (connect)"


# -- endpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec,offending,hint",
    [
        ("udp://127.0.0.1:5555", "'udp://127.0.0.1:5555'", VALID_FORMS),
        ("127.0.0.1:5555", "'127.0.0.1:5555'", VALID_FORMS),
        ("tcp:/127.0.0.1:5555", "'tcp:/127.0.0.1:5555'", VALID_FORMS),
        ("tcp://", "'tcp://'", VALID_FORMS),
        ("tcp://127.0.0.1", "'tcp://127.0.0.1'", "tcp://HOST:PORT"),
        ("tcp://127.0.0.1:port", "'tcp://127.0.0.1:port'", "tcp://HOST:PORT"),
        ("tcp://127.0.0.1:70000", "'tcp://127.0.0.1:70000'", "outside 1..65535"),
        (">tcp://127.0.0.1:*", "'>tcp://127.0.0.1:*'", "only makes sense when binding"),
        (">tcp://*:5555", "'>tcp://*:5555'", "to connect, name the host"),
        ("@inproc://", "'@inproc://'", VALID_FORMS),
        ("@tcp://127.0.0.1:*, ftp://x:1", "'ftp://x:1'", VALID_FORMS),  # the bad one of several
    ],
)
@pytest.mark.parametrize("cls", [Pull, Push, ZmtpPull, ReroutingPush])
def test_unparsable_endpoint_names_the_endpoint_and_the_valid_forms(cls, spec, offending, hint):
    with pytest.raises(ValueError) as info:
        cls(spec)
    message = str(info.value)
    assert "invalid ZeroMQ endpoint" in message
    assert offending in message
    assert hint in message


@pytest.mark.parametrize("spec", ["", " , ", []])
def test_no_endpoint_at_all_is_a_clear_error(spec):
    with pytest.raises(ValueError, match="no ZeroMQ endpoint given") as info:
        Pull(spec)
    assert VALID_FORMS in str(info.value)
    assert repr(spec) in str(info.value)


@pytest.mark.parametrize("spec,type_name", [(5555, "int"), (None, "NoneType"), ({"a": 1}, "dict")])
def test_endpoints_of_the_wrong_type_name_the_type(spec, type_name):
    with pytest.raises(TypeError, match="endpoints must be a string or a sequence of strings") as info:
        Pull(spec)
    assert f"not {type_name}" in str(info.value)


def test_endpoint_parsing_happens_before_any_socket_exists():
    # a good endpoint before a bad one must not stay bound after the error
    good = "@" + unbound_address("tcp")
    with pytest.raises(ValueError, match="'udp://x:1'"):
        Pull(f"{good},udp://x:1")
    again = Pull(good)  # the port is still free
    close_all(again)


def test_parse_endpoints_defaults_and_prefixes():
    assert [str(e) for e in parse_endpoints("tcp://h:1, @tcp://*:2, >inproc://x", default_bind=False)] == [
        ">tcp://h:1",
        "@tcp://*:2",
        ">inproc://x",
    ]
    assert [e.bind for e in parse_endpoints(["tcp://*:1", "ipc:///tmp/x"], default_bind=True)] == [True, True]


def test_an_endpoint_already_in_use_names_the_address():
    first = Pull(bind_spec("tcp"))
    try:
        with pytest.raises(OSError) as info:
            Pull("@" + first.last_endpoint)
        assert repr(first.last_endpoint) in str(info.value)
        assert "already bound" in str(info.value)
    finally:
        close_all(first)


# -- patterns -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope", "PUSHPULL", "", "pair"])
def test_unknown_pattern_names_it_and_lists_the_valid_ones(name):
    with pytest.raises(ValueError) as info:
        socket_for(name)
    message = str(info.value)
    assert f"unknown ZeroMQ pattern {name!r}" in message
    for valid in PATTERNS:
        assert valid in message


def test_pattern_of_the_wrong_type_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown ZeroMQ pattern None; valid patterns: push, pull"):
        socket_for(None)


@pytest.mark.parametrize("name,cls", [("pull", Pull), ("GATHER", Gather), ("Sub", Sub), ("xpub", XPub)])
def test_known_patterns_resolve_case_insensitively(name, cls):
    assert socket_for(name) is cls


# -- options ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_unknown_option_names_it_and_lists_the_valid_options(cls):
    with pytest.raises(TypeError) as info:
        cls(bind_spec("inproc"), hwm=10, high_water_mark=10, colour="blue")
    message = str(info.value)
    assert f"unknown option(s) 'colour', 'high_water_mark' for {cls.__name__}" in message
    assert "valid options: hwm, linger, reconnect_ivl, max_message_bytes" in message
    if cls in (Sub, XSub):
        assert "topics" in message
    if cls is XPub:
        assert "verbose" in message


def test_an_option_of_another_pattern_is_unknown_here():
    with pytest.raises(TypeError, match="unknown option\\(s\\) 'topics' for Pub") as info:
        Pub(bind_spec("inproc"), topics="a")
    assert "topics" not in str(info.value).split("valid options:")[1]


@pytest.mark.parametrize(
    "options,fragment",
    [
        ({"hwm": -1}, "option 'hwm' must be a non-negative integer, got -1"),
        ({"hwm": "10"}, "option 'hwm' must be a non-negative integer, got '10'"),
        ({"hwm": 2.5}, "option 'hwm' must be a non-negative integer, got 2.5"),
        ({"max_message_bytes": 0}, "option 'max_message_bytes' must be a positive integer, got 0"),
        ({"reconnect_ivl": True}, "option 'reconnect_ivl' must be a positive integer, got True"),
        ({"sndbuf": -5}, "option 'sndbuf' must be a positive integer, got -5"),
        ({"linger": "soon"}, "option 'linger' must be an integer number of milliseconds >= 0, or -1"),
        ({"linger": -2}, "got -2"),
        ({"linger": None}, "got None"),
    ],
)
def test_bad_option_value_names_the_option_the_value_and_what_is_valid(options, fragment):
    with pytest.raises(ValueError) as info:
        Push(bind_spec("inproc"), **options)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "topics,fragment",
    [
        ([1], "topics entries must be str or bytes (a subscription prefix), not int 1"),
        ([b"ok", None], "topics entries must be str or bytes (a subscription prefix), not NoneType None"),
        (3.5, "topics must be a str or bytes prefix or a list of them (None = everything), not float 3.5"),
    ],
)
@pytest.mark.parametrize("cls", [Sub, XSub])
def test_bad_topics_name_the_value_and_what_is_valid(cls, topics, fragment):
    with pytest.raises(TypeError) as info:
        cls(">" + unbound_address("inproc"), topics=topics)
    assert fragment in str(info.value)


def test_bad_topic_in_subscribe_names_the_value():
    sub = Sub(">" + unbound_address("inproc"))
    try:
        with pytest.raises(TypeError, match="topic entries must be str or bytes .*, not int 5"):
            sub.subscribe(5)
    finally:
        close_all(sub)


# -- messages -----------------------------------------------------------------------------


@pytest.fixture(params=[(Push, Pull), (ReroutingPush, ZmtpPull)], ids=["libzmq", "engine"])
def push_pull(request):
    push_cls, pull_cls = request.param
    pull = pull_cls(bind_spec("inproc"), max_message_bytes=100)
    push = push_cls(">" + pull.last_endpoint, max_message_bytes=100)
    yield push, pull
    close_all(push, pull)


@pytest.mark.parametrize(
    "message,fragments",
    [
        (
            "text",
            ["the message must be bytes-like (bytes, bytearray, memoryview)", "not str 'text'", "'text'.encode()"],
        ),
        (42, ["the message must be bytes-like", "not int 42"]),
        (None, ["the message must be bytes-like", "not NoneType None"]),
        ({"k": "v"}, ["not dict {'k': 'v'}"]),
        ([b"ok", "bad"], ["frame 1 of the message must be bytes-like", "not str 'bad'"]),
        ([b"ok", b"ok", 7], ["frame 2 of the message", "not int 7"]),
    ],
)
def test_non_bytes_message_names_the_value_and_what_is_valid(push_pull, message, fragments):
    push, pull = push_pull
    with pytest.raises(TypeError) as info:
        push.send(message, timeout=0)
    for fragment in fragments:
        assert fragment in str(info.value)
    push.send(b"next", timeout=SOON_S)  # nothing of the refused message went out
    assert pull.recv_multipart(timeout=SOON_S) == [b"next"]


def test_a_long_bad_value_is_shortened_in_the_message(push_pull):
    push, _ = push_pull
    with pytest.raises(TypeError) as info:
        push.send("x" * 10_000, timeout=0)
    assert len(str(info.value)) < 400


@pytest.mark.parametrize("message", [b"x" * 101, bytearray(500), memoryview(b"y" * 101), [b"ok", b"z" * 101]])
def test_oversized_message_names_its_size_and_the_limit(push_pull, message):
    push, pull = push_pull
    with pytest.raises(ValueError) as info:
        push.send(message, timeout=0)
    message_text = str(info.value)
    assert "exceeds max_message_bytes=100" in message_text
    assert "message of 101 bytes" in message_text or "message of 500 bytes" in message_text
    push.send(b"a" * 100, timeout=SOON_S)  # exactly the limit is fine
    assert pull.recv(timeout=SOON_S) == b"a" * 100


def test_empty_frame_list_is_refused():
    pull = Pull(bind_spec("inproc"))
    push = Push(">" + pull.last_endpoint)
    try:
        with pytest.raises(ValueError, match="cannot send a message with no frames"):
            push.send([], timeout=0)
    finally:
        close_all(push, pull)


@pytest.mark.parametrize("frames", [[b"a", b"b"], (b"a",)])
def test_scatter_refuses_a_list_or_tuple_of_frames(frames):
    gather = Gather(bind_spec("inproc"))
    scatter = Scatter(">" + gather.last_endpoint)
    try:
        with pytest.raises(ValueError) as info:
            scatter.send(frames, timeout=0)
        assert "Scatter sends single-part messages only (49/SCATTERGATHER)" in str(info.value)
        assert f"got a {type(frames).__name__} of {len(frames)} frames" in str(info.value)
    finally:
        close_all(scatter, gather)


# -- calls --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "timeout,exc,fragment", [(-1, ValueError, "got -1"), ("5", TypeError, "got '5'"), (True, TypeError, "got True")]
)
def test_bad_timeout_names_the_value(timeout, exc, fragment):
    pull = Pull(bind_spec("inproc"))
    push = Push(">" + pull.last_endpoint)
    try:
        for call in (lambda: push.send(b"x", timeout=timeout), lambda: pull.recv(timeout=timeout)):
            with pytest.raises(exc) as info:
                call()
            assert "timeout must be None or" in str(info.value) and fragment in str(info.value)
    finally:
        close_all(push, pull)


def test_bad_batch_size_names_the_value():
    pull = Pull(bind_spec("inproc"))
    try:
        with pytest.raises(ValueError, match="max_messages must be >= 1, got 0"):
            pull.recv_batch(0, timeout=0)
    finally:
        close_all(pull)


@pytest.mark.parametrize("cls", [Push, Pull, ReroutingPush, ZmtpPull, Scatter, Gather])
def test_wrong_direction_names_what_the_socket_does(cls):
    sock = cls(bind_spec("inproc"))
    try:
        if cls.can_send:
            with pytest.raises(TypeError, match=f"{cls.__name__} only sends; it has no recv"):
                sock.recv(timeout=0)
        else:
            with pytest.raises(TypeError, match=f"{cls.__name__} only receives; it has no send"):
                sock.send(b"x", timeout=0)
    finally:
        close_all(sock)


@pytest.mark.parametrize("cls", ALL_CLASSES)
def test_a_closed_socket_says_so(cls):
    sock = cls(bind_spec("inproc"))
    sock.close()
    sock.close()  # idempotent
    assert sock.closed
    call = (lambda: sock.send(b"x", timeout=0)) if cls.can_send else (lambda: sock.recv(timeout=0))
    with pytest.raises(SocketClosedError, match=f"{cls.__name__} is closed"):
        call()
