"""The options table: every rule it declares is enforced, and everything documented about
the options (docs/options.md, ``help(ZmqDataSource)``) is generated from it.

Why these tests exist: options are the connector's user interface, and a value libzmq or
Python cannot take (``hwm=0`` means an unbounded queue, ``timeout=inf`` never ends, a
relative ``spoolDir`` means another directory on every restart) must fail when the
DataFrame is defined, with the option named. All but the last test run without Spark.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pathlib
import pydoc
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest
import zmq

from spark_zmq.options import (
    INT32_MAX,
    INT64_MAX,
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    GiB,
    KiB,
    MiB,
    OptionError,
    SinkOptions,
    SourceOptions,
    default_spool_dir,
    manual,
    markdown_table,
    readme_block,
)
from spark_zmq.options.docs import options_page
from spark_zmq.options.table import REQUEST_OPTIONS
from spark_zmq.patterns import Pull, parse_endpoints

pytestmark = pytest.mark.timeout(60)

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = {"endpoints": "@tcp://127.0.0.1:5999"}
SNK = {"endpoints": "tcp://127.0.0.1:5999"}


def source(**options: str) -> SourceOptions:
    return SourceOptions.parse({**SRC, **options})


def sink(**options: str) -> SinkOptions:
    return SinkOptions.parse({**SNK, **options})


def refused(parse, options: dict, *fragments: str) -> OptionError:
    with pytest.raises(OptionError) as info:
        parse(options)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    return info.value


# -- the table itself ---------------------------------------------------------------------


def test_every_option_has_a_kind_a_doc_and_a_documented_default():
    for spec in SOURCE_OPTIONS + SINK_OPTIONS:
        assert spec.doc and spec.default_doc and spec.valid_text(), spec.name
        if spec.numeric:
            assert spec.minimum is not None and spec.maximum is not None, spec.name
        if spec.kind == "choice":
            assert spec.choices, spec.name


def test_the_hidden_options_are_declared_and_documented():
    names = {spec.name for spec in SOURCE_OPTIONS}
    for hidden in (
        "spoolAccess",
        "spoolServerHost",
        "spoolFsync",
        "failOnDataLoss",
        "minPartitions",
        "mode",
        "columnNameOfCorruptRecord",
        "hwm",
        "maxMessageBytes",
    ):
        assert hidden in names
    assert "rowsPerMessage" in {spec.name for spec in SINK_OPTIONS}


def test_the_option_objects_keep_their_attributes_and_drop_raw():
    opts = source()
    for attr in (
        "pattern",
        "endpoints",
        "format",
        "topics",
        "max_rows_per_trigger",
        "max_bytes_per_trigger",
        "starting_offsets",
        "max_spool_bytes",
        "spool_dir",
        "spool_fsync",
        "fail_on_data_loss",
        "min_partitions",
        "max_messages",
        "timeout",
        "mode",
        "corrupt_column",
        "hwm",
        "spool_access",
        "spool_server_host",
        "max_message_bytes",
    ):
        assert hasattr(opts, attr), attr
    out = sink()
    for attr in ("pattern", "endpoints", "format", "topic", "send_timeout_ms", "rows_per_message", "hwm"):
        assert hasattr(out, attr), attr
    assert not hasattr(opts, "raw") and not hasattr(out, "raw")
    assert SourceOptions.KNOWN == tuple(s.name for s in SOURCE_OPTIONS)


def test_defaults():
    opts = source()
    assert (opts.pattern, opts.format, opts.topics, opts.starting_offsets) == ("pull", "raw", [], "latest")
    assert (opts.max_rows_per_trigger, opts.max_bytes_per_trigger, opts.min_partitions) == (None, None, None)
    assert (opts.max_spool_bytes, opts.hwm, opts.max_message_bytes) == (GiB, 10_000, 64 * MiB)
    assert (opts.max_messages, opts.timeout, opts.mode, opts.corrupt_column) == (10_000, 5.0, "PERMISSIVE", None)
    assert (opts.spool_fsync, opts.fail_on_data_loss, opts.spool_access, opts.spool_server_host) == (
        False,
        True,
        "auto",
        None,
    )
    assert opts.endpoints[0].bind
    out = sink()
    assert (out.pattern, out.format, out.topic, out.send_timeout_ms, out.rows_per_message, out.hwm) == (
        "push",
        "raw",
        None,
        30_000,
        10_000,
        1000,
    )
    assert not out.endpoints[0].bind


def test_an_empty_value_means_the_default():
    opts = source(pattern="", hwm=" ", timeout="", spoolFsync="", spoolDir="")
    assert (opts.pattern, opts.hwm, opts.timeout, opts.spool_fsync) == ("pull", 10_000, 5.0, False)


# -- names --------------------------------------------------------------------------------


def test_unknown_options_are_named_with_the_valid_ones_listed():
    error = refused(
        SourceOptions.parse,
        {**SRC, "hwmm": "5", "Colour": "blue"},
        "unknown source option(s) 'Colour', 'hwmm' (did you mean 'hwm'?)",
        "valid options: pattern, endpoints",
    )
    assert error.option == "Colour"
    for spec in SOURCE_OPTIONS:
        assert spec.name in str(error)
    refused(
        SinkOptions.parse,
        {**SNK, "maxMessageBytes": "2048"},
        "unknown sink option(s) 'maxMessageBytes'",
        "rowsPerMessage",
    )


@pytest.mark.parametrize(
    "given, says",
    [
        ("maxRowPerTrigger", "'maxRowPerTrigger' (did you mean 'maxRowsPerTrigger'?)"),
        ("spoolfsynch", "(did you mean 'spoolFsync'?)"),
        ("maxOffsetsPerTrigger", "'maxOffsetsPerTrigger' (Kafka's option; here 'maxRowsPerTrigger'"),
        # Spark hands a data source its option keys lower-cased: Kafka's names get Kafka's spelling back
        ("maxoffsetspertrigger", "'maxOffsetsPerTrigger' (Kafka's option; here 'maxRowsPerTrigger'"),
        ("kafka.bootstrap.servers", "'kafka.bootstrap.servers' (Kafka's option; here 'endpoints'"),
        ("subscribe", "'subscribe' (Kafka's option; here 'topics'"),
        ("minOffsetsPerTrigger", "'minOffsetsPerTrigger' (Kafka's option; here 'minRowsPerTrigger'"),
        ("endingTimestamp", "'endingTimestamp' (a Kafka option without a counterpart here"),
        ("kafka.linger.ms", "'kafka.linger.ms' (a Kafka client setting"),
    ],
)
def test_unknown_options_suggest_the_closest_name_or_the_kafka_counterpart(given, says):
    refused(SourceOptions.parse, {**SRC, given: "1"}, says)


def test_kafka_options_that_exist_here_are_accepted_and_the_map_names_real_options():
    from spark_zmq.options.parse import KAFKA_OPTIONS

    assert (
        SourceOptions.parse(
            {
                **SRC,
                "startingOffsets": "earliest",
                "failOnDataLoss": "false",
                "minPartitions": "3",
                "includeHeaders": "false",
            }
        ).starting_offsets
        == "earliest"
    )
    every = {spec.name for spec in SOURCE_OPTIONS + SINK_OPTIONS}
    assert {c for c, _ in KAFKA_OPTIONS.values() if c is not None} <= every
    refused(SinkOptions.parse, {**SNK, "subscribe": "a"}, "'subscribe' (a Kafka option of the other side")


def test_keys_are_case_insensitive_and_spark_keys_are_ignored():
    opts = SourceOptions.parse(
        {
            "ENDPOINTS": "@tcp://127.0.0.1:5999",
            "MaxRowsPerTrigger": "7",
            "HWM": "3",
            "path": "x",
            "checkpointLocation": "/c",
            "queryName": "q",
        }
    )
    assert (opts.max_rows_per_trigger, opts.hwm) == (7, 3)


def test_one_option_spelled_twice_with_different_values_is_an_error():
    error = refused(SourceOptions.parse, {**SRC, "hwm": "5", "HWM": "6"}, "'hwm' is given twice")
    assert error.option == "hwm"
    assert source(hwm="5", HWM="5").hwm == 5


# -- numbers ------------------------------------------------------------------------------


@pytest.mark.parametrize("parse", [SourceOptions.parse, SinkOptions.parse], ids=["source", "sink"])
def test_hwm_zero_is_refused_because_it_means_an_unbounded_queue(parse):
    base = SRC if parse is SourceOptions.parse else SNK
    error = refused(parse, {**base, "hwm": "0"}, "option 'hwm' = '0' is out of range", "from 1 to 2^31-1", "unlimited")
    assert error.option == "hwm"
    refused(parse, {**base, "hwm": str(2**31)}, "option 'hwm'", "out of range")
    assert parse({**base, "hwm": str(INT32_MAX)}).hwm == INT32_MAX
    assert parse({**base, "hwm": "1"}).hwm == 1


def test_send_timeout_ms_range():
    refused(SinkOptions.parse, {**SNK, "sendTimeoutMs": "0"}, "option 'sendTimeoutMs' = '0' is out of range")
    refused(SinkOptions.parse, {**SNK, "sendTimeoutMs": str(2**31)}, "option 'sendTimeoutMs'", "2^31-1")
    assert sink(sendTimeoutMs=str(INT32_MAX)).send_timeout_ms == INT32_MAX
    assert sink(sendTimeoutMs="1").send_timeout_ms == 1


def test_max_message_bytes_range_units_and_default():
    assert source().max_message_bytes == 67_108_864
    refused(
        SourceOptions.parse,
        {**SRC, "maxMessageBytes": "1023"},
        "option 'maxMessageBytes' = '1023' is out of range",
        "from 1 KiB to 2^31-1",
    )
    refused(SourceOptions.parse, {**SRC, "maxMessageBytes": str(2**31)}, "option 'maxMessageBytes'")
    refused(SourceOptions.parse, {**SRC, "maxMessageBytes": "2GiB"}, "option 'maxMessageBytes' = '2GiB'")
    assert source(maxMessageBytes="1024").max_message_bytes == KiB
    assert source(maxMessageBytes="16 MiB").max_message_bytes == 16 * MiB
    assert source(maxMessageBytes="1_048_576").max_message_bytes == MiB
    refused(SourceOptions.parse, {**SRC, "maxMessageBytes": "16MB"}, "is not a number of bytes", "KiB, MiB")


@pytest.mark.parametrize(
    "value", ["inf", "-inf", "Infinity", "nan", "NaN", "1e400", "0", "-1", "0.0", "86401", "1e-400"]
)
def test_timeout_must_be_finite_positive_and_at_most_a_day(value):
    error = refused(
        SourceOptions.parse, {**SRC, "timeout": value}, f"option 'timeout' = {value!r} is out of range", "<= 86,400"
    )
    assert error.option == "timeout"


@pytest.mark.parametrize("value", ["five", "5s", "1,5", "٥", ""])
def test_timeout_that_is_not_a_number(value):
    if value == "":
        assert source(timeout=value).timeout == 5.0
        return
    refused(SourceOptions.parse, {**SRC, "timeout": value}, f"option 'timeout' = {value!r} is not a number")


def test_timeout_accepts_decimals_up_to_a_day():
    assert source(timeout="0.25").timeout == 0.25
    assert source(timeout=" 86400 ").timeout == 86400.0
    assert source(timeout="1e1").timeout == 10.0


def test_max_spool_bytes_is_at_least_one_mib():
    refused(SourceOptions.parse, {**SRC, "maxSpoolBytes": str(MiB - 1)}, "option 'maxSpoolBytes'", "from 1 MiB")
    assert source(maxSpoolBytes=str(MiB)).max_spool_bytes == MiB
    assert source(maxSpoolBytes="4GiB").max_spool_bytes == 4 * GiB


@pytest.mark.parametrize(
    "name,parse,cap",
    [
        ("maxRowsPerTrigger", SourceOptions.parse, INT64_MAX),
        ("maxBytesPerTrigger", SourceOptions.parse, INT64_MAX),
        ("maxMessages", SourceOptions.parse, INT32_MAX),
        ("minPartitions", SourceOptions.parse, INT32_MAX),
        ("rowsPerMessage", SinkOptions.parse, INT32_MAX),
    ],
)
def test_counts_are_positive_and_bounded(name, parse, cap):
    base = SRC if parse is SourceOptions.parse else SNK
    spec = next(s for s in SOURCE_OPTIONS + SINK_OPTIONS if s.name == name)
    for bad in ("0", "-5", str(cap + 1), "9" * 5000):
        error = refused(parse, {**base, name: bad}, f"option {name!r}", "out of range")
        assert len(str(error)) < 400  # a huge value is shortened in the message
    for bad in ("1.5", "ten", "1e3", "١٢", "0x10", "1 000"):
        refused(parse, {**base, name: bad}, f"option {name!r}", "is not")
    assert getattr(parse({**base, name: str(cap)}), spec.attr) == cap
    assert getattr(parse({**base, name: "1_000"}), spec.attr) == 1000
    assert getattr(parse({**base, name: " +7 "}), spec.attr) == 7


def test_existing_message_for_a_negative_count_is_kept():
    refused(
        SourceOptions.parse, {**SRC, "maxRowsPerTrigger": "-5"}, "option 'maxRowsPerTrigger' = '-5' is out of range"
    )


# -- choices, booleans, strings -----------------------------------------------------------


def test_choices_are_case_insensitive_and_canonical():
    assert source(pattern="GATHER").pattern == "gather"
    assert source(mode="failfast").mode == "FAILFAST"
    assert source(spoolAccess="Fetch").spool_access == "fetch"
    refused(
        SourceOptions.parse,
        {**SRC, "pattern": "req"},
        "option 'pattern' = 'req' is not valid; valid values: pull, gather, sub",
    )
    refused(SourceOptions.parse, {**SRC, "mode": "PERMIſſIVE"}, "option 'mode'")  # no Unicode case folding


def test_booleans():
    assert source(spoolFsync="TRUE").spool_fsync is True
    assert source(failOnDataLoss="no").fail_on_data_loss is False
    refused(SourceOptions.parse, {**SRC, "spoolFsync": "maybe"}, "option 'spoolFsync' = 'maybe' is not a boolean")


def test_pattern_only_options():
    refused(SourceOptions.parse, {**SRC, "topics": "a"}, "option 'topics' only applies to pattern 'sub'")
    assert SourceOptions.parse({"endpoints": "tcp://h:1", "pattern": "sub", "topics": " a, ,b "}).topics == ["a", "b"]
    refused(SinkOptions.parse, {**SNK, "topic": ""}, "option 'topic' only applies to pattern 'pub'")
    assert sink(pattern="pub", topic="").topic == ""


def test_spool_server_host_must_be_a_host_and_never_a_wildcard():
    assert source(spoolServerHost="10.0.0.5").spool_server_host == "10.0.0.5"
    assert source(spoolServerHost="[::1]").spool_server_host == "[::1]"
    for wildcard in ("*", "0.0.0.0", "[::]"):
        refused(SourceOptions.parse, {**SRC, "spoolServerHost": wildcard}, "option 'spoolServerHost'", "wildcard")
    refused(
        SourceOptions.parse, {**SRC, "spoolServerHost": "driver host"}, "option 'spoolServerHost'", "not a host name"
    )


@pytest.mark.parametrize("spelling", ["0", "0x0", "00.0.0.0", "0.0", "[::ffff:0.0.0.0]", "[0:0::0]"])
def test_spool_server_host_is_checked_by_the_address_it_means_not_its_text(spelling):
    """Each of these is 0.0.0.0 to the resolver and bound every interface (#43)."""
    from spark_zmq.ingest.fetch import bind_address

    refused(SourceOptions.parse, {**SRC, "spoolServerHost": spelling}, "option 'spoolServerHost'", "wildcard")
    with pytest.raises(ValueError, match="wildcard"):
        bind_address(spelling)
    assert bind_address("127.1") == "127.0.0.1" and source(spoolServerHost="127.1").spool_server_host == "127.1"


def test_endpoints_errors_name_the_option():
    refused(SourceOptions.parse, {}, "option 'endpoints' is required")
    refused(
        SourceOptions.parse,
        {"endpoints": "tcp//nowhere"},
        "option 'endpoints'",
        "invalid ZeroMQ endpoint 'tcp//nowhere'",
    )
    refused(SourceOptions.parse, {"endpoints": "@tcp://*:5999,@tcp://*:5999"}, "option 'endpoints'", "bound twice")
    refused(SourceOptions.parse, {"endpoints": "@tcp://*:٥٥٥٥"}, "option 'endpoints'")
    refused(SourceOptions.parse, {"endpoints": "@inproc://a\x00b"}, "option 'endpoints'", "control character")
    refused(SourceOptions.parse, {"endpoints": "@ipc:///" + "x" * 200}, "option 'endpoints'", "at most")


def test_endpoint_parsing_refuses_what_libzmq_cannot_take():
    for bad, why in [
        ("tcp://a b:1", "not a host name"),
        ("tcp://h\u00e9:1", "not a host name"),
        ("inproc://x\ny", "control character"),
        ("ipc:///tmp/\ud800", "not valid UTF-8"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_endpoints(bad, default_bind=False)
    assert parse_endpoints("tcp://my-host_1.example:80, ipc://*, ipc://@abstract", default_bind=True)


# -- spoolDir -----------------------------------------------------------------------------


def test_a_relative_spool_dir_is_an_error_saying_to_give_an_absolute_path():
    error = refused(
        SourceOptions.parse,
        {**SRC, "spoolDir": "spool"},
        "option 'spoolDir' = 'spool' is a relative path",
        "give an absolute path",
    )
    assert error.option == "spoolDir"
    refused(SourceOptions.parse, {**SRC, "spoolDir": "./a/b"}, "relative path")


def test_spool_dir_expands_the_home_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert source(spoolDir="~/zmq/spool").spool_dir == str(tmp_path / "zmq" / "spool")
    assert source(spoolDir=" /data/spool/ ").spool_dir == "/data/spool"
    refused(SourceOptions.parse, {**SRC, "spoolDir": "/data/\x00"}, "option 'spoolDir'", "NUL")


def test_default_spool_dir_is_in_the_users_state_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    opts = source()
    assert opts.spool_dir.startswith(str(tmp_path / "state" / "spark-zmq" / "spool") + os.sep)
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert source().spool_dir.startswith(str(tmp_path / "home" / ".local" / "state" / "spark-zmq" / "spool") + os.sep)
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec says: ignore it
    assert source().spool_dir.startswith(str(tmp_path / "home" / ".local" / "state") + os.sep)


def test_default_spool_dir_is_not_a_temporary_directory(monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    spool = source().spool_dir
    assert not spool.startswith(tempfile.gettempdir() + os.sep) and not spool.startswith("/tmp/")
    assert os.path.isabs(spool)


def test_default_spool_dir_is_deterministic_per_stream(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    a = source().spool_dir
    assert source(hwm="5", maxRowsPerTrigger="10").spool_dir == a  # not identifying options
    assert SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:6000"}).spool_dir != a
    assert source(format="json").spool_dir != a
    sub = SourceOptions.parse({"endpoints": "tcp://h:1", "pattern": "sub", "topics": "x"})
    assert sub.spool_dir != SourceOptions.parse({"endpoints": "tcp://h:1", "pattern": "sub"}).spool_dir
    key = "pull|@tcp://127.0.0.1:5999|raw|"  # how the digest has always been derived
    assert os.path.basename(a) == hashlib.sha256(key.encode()).hexdigest()[:16]
    assert default_spool_dir("pull", source().endpoints, "raw", []) == a


# -- generated documentation --------------------------------------------------------------


def test_the_committed_options_page_is_the_generated_one():
    page = ROOT / "docs" / "options.md"
    assert page.read_text(encoding="utf-8") == options_page(), (
        "docs/options.md differs from the table in spark_zmq/options/table.py; "
        "run: python -m spark_zmq.options --write-docs docs/options.md"
    )
    for spec in SOURCE_OPTIONS + SINK_OPTIONS + REQUEST_OPTIONS:
        assert f"| `{spec.name}` |" in options_page()


def test_the_options_page_says_which_queries_read_each_source_option():
    source = options_page().split("## Source")[1].split("## Sink")[0]
    rows = {
        line.split(" | ")[0].strip("| `"): line.split(" | ")[4]
        for line in source.splitlines()
        if line.startswith("| `")
    }
    assert rows["maxRowsPerTrigger"] == "streaming" and rows["maxMessages"] == "batch"
    assert rows["hwm"] == "streaming, batch" and rows["spoolDir"] == "streaming"


def test_generator_command_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "spark_zmq.options", "--markdown"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert out == "\n".join(markdown_table(side) for side in ("source", "sink", "request"))
    check = subprocess.run(
        [sys.executable, "-m", "spark_zmq.options", "--check-docs", str(ROOT / "docs" / "options.md")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    stale = tmp_path / "options.md"
    stale.write_text("# Options\n| old |\n", encoding="utf-8")
    check = subprocess.run(
        [sys.executable, "-m", "spark_zmq.options", "--check-docs", str(stale)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 1 and "--write-docs" in check.stderr
    subprocess.run([sys.executable, "-m", "spark_zmq.options", "--write-docs", str(stale)], check=True, timeout=60)
    assert stale.read_text(encoding="utf-8") == options_page()
    readme = tmp_path / "README.md"
    readme.write_text(
        "x\n<!-- options:source -->\n| old |\n<!-- /options:source -->\n"
        "<!-- options:sink -->\n<!-- /options:sink -->\n<!-- options:request -->\n<!-- /options:request -->\n",
        encoding="utf-8",
    )
    subprocess.run([sys.executable, "-m", "spark_zmq.options", "--update-readme", str(readme)], check=True, timeout=60)
    assert readme_block(readme.read_text(encoding="utf-8"), "sink") == markdown_table("sink")


def test_help_of_the_data_source_lists_every_option():
    from spark_zmq.datasource import ZmqDataSource

    text = pydoc.render_doc(ZmqDataSource, renderer=pydoc.plaintext)
    assert manual().splitlines()[0] in ZmqDataSource.__doc__
    for spec in SOURCE_OPTIONS + SINK_OPTIONS:
        assert f"  {spec.name} ({spec.kind})" in ZmqDataSource.__doc__, spec.name
        assert spec.name in text
    assert "64 MiB" in text and "2^31-1" in text and "XDG_STATE_HOME" in text


# -- ipc:// bind never deletes a file -----------------------------------------------------


@pytest.fixture
def short_dir():
    """A directory with a short path: an ipc path is at most 107 bytes."""
    path = tempfile.mkdtemp(prefix="zo-", dir="/tmp" if os.path.isdir("/tmp") else None)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_ipc_bind_refuses_an_existing_regular_file_and_leaves_it_alone(short_dir):
    path = os.path.join(short_dir, "data.txt")
    with open(path, "w") as f:
        f.write("precious")
    with pytest.raises(FileExistsError) as info:
        Pull(f"@ipc://{path}")
    message = str(info.value)
    assert f"ipc://{path}" in message and "a regular file" in message and "not a socket" in message
    assert info.value.errno == errno.EEXIST
    with open(path) as f:
        assert f.read() == "precious"


def test_ipc_bind_refuses_a_symlink_and_a_directory(short_dir):
    target = os.path.join(short_dir, "target")
    with open(target, "w") as f:
        f.write("keep")
    link = os.path.join(short_dir, "link")
    os.symlink(target, link)
    with pytest.raises(FileExistsError, match="a symbolic link"):
        Pull(f"@ipc://{link}")
    assert os.path.islink(link) and open(target).read() == "keep"
    sub = os.path.join(short_dir, "dir")
    os.mkdir(sub)
    with pytest.raises(FileExistsError, match="a directory"):
        Pull(f"@ipc://{sub}")
    assert os.path.isdir(sub)


def test_ipc_bind_replaces_a_stale_socket_file_and_works(short_dir):
    path = os.path.join(short_dir, "stale.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a socket file nobody listens on: what a crashed process leaves
    dead.close()
    assert os.path.exists(path)
    pull = Pull(f"@ipc://{path}")
    push = zmq.Context.instance().socket(zmq.PUSH)
    try:
        push.connect(f"ipc://{path}")
        push.send(b"hello")
        assert pull.recv(timeout=10) == b"hello"
    finally:
        push.close(0)
        pull.close()


def test_ipc_bind_refuses_a_socket_file_a_live_process_listens_on(short_dir):
    path = os.path.join(short_dir, "live.sock")
    first = Pull(f"@ipc://{path}")
    try:
        with pytest.raises(OSError) as info:
            Pull(f"@ipc://{path}")
        assert info.value.errno == errno.EADDRINUSE and f"ipc://{path}" in str(info.value)
    finally:
        first.close()


def test_ipc_bind_of_a_new_path_and_ipc_connect_are_unchanged(short_dir):
    path = os.path.join(short_dir, "fresh.sock")
    with Pull(f"@ipc://{path}") as pull, Pull(f">ipc://{os.path.join(short_dir, 'data.txt')}"):
        assert pull.last_endpoint == f"ipc://{path}"


# -- end to end ---------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "option,value,expected",
    [
        ("hwm", "0", "option 'hwm' = '0' is out of range"),
        ("maxMessageBytes", "100", "option 'maxMessageBytes' = '100' is out of range"),
        ("maxMessageBytes", str(2**40), "option 'maxMessageBytes'"),
        ("spoolDir", "relative/spool", "option 'spoolDir' = 'relative/spool' is a relative path"),
        ("timeout", "inf", "option 'timeout' = 'inf' is out of range"),
    ],
)
def test_a_bad_option_fails_load_naming_the_option(spark, free_port, option, value, expected):
    reader = spark.readStream.format("zmq").option("endpoints", f"@tcp://127.0.0.1:{free_port}").option(option, value)
    with pytest.raises(Exception) as info:
        reader.load()
    assert expected in str(info.value)


def test_help_of_the_data_source_is_a_manual_schemas_guarantees_and_examples():
    from spark_zmq.datasource import ZmqDataSource

    text = pydoc.render_doc(ZmqDataSource, renderer=pydoc.plaintext)
    for fragment in (
        'spark.readStream.format("zmq")',
        'df.write.format("zmq").mode("append")',
        "value binary, topic string, partition int, offset long, timestamp timestamp",
        "exactly once per checkpointed query",
        "at least once",
        "includeMetadata",
    ):
        assert fragment in text, fragment
