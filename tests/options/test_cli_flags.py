"""The CLI's flags that stand for options are made from the options table (``option_flag``):
their defaults, the defaults their help shows and the flag names errors use come from the
table's rows, and a command's options map and error renaming come from the same
declarations as its ``--help``.

What is checked on the commands as they parse their arguments (``typer.main.get_command``), so the
help a user reads is what is tested, not the function that made it."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.core import TyperOption
from typer.testing import CliRunner

from spark_zmq.cli import CURVE_FLAGS, app
from spark_zmq.cli.flags import ConsumePattern, Format
from spark_zmq.cli.servers import relay_command
from spark_zmq.cli.source_flags import declared_flags, flag_name, given_options, option_flags, usage_error
from spark_zmq.options import MiB, OptionError, SourceOptions
from spark_zmq.options.table import SOURCE_OPTIONS, TABLES

pytestmark = pytest.mark.timeout(60)

#: each subcommand's function, by command name
COMMANDS = {info.name or info.callback.__name__.replace("_", "-"): info.callback for info in app.registered_commands}
#: each subcommand as it parses its arguments (typer's click command)
CLICK: dict[str, Any] = typer.main.get_command(app).commands
#: every option name of every table (source, sink, request)
OPTION_NAMES = {spec.name for table in TABLES.values() for spec in table}

#: flags named like an option that stand for something else, and what
NOT_THE_OPTION = {
    ("produce", "hwm"): "the load generator's send high-water mark, 10,000 (the sink's hwm is 1000)",
    ("produce", "format"): "the load generator's message format, json by default (the sink's raw)",
    ("produce", "rows_per_message"): "the load generator's rows per Arrow message, 1000 (the sink's 10,000)",
    ("produce", "topic"): "the load generator's topics, used in turn (the sink's topic is one fixed topic)",
    ("consume", "timeout"): "seconds without a message before consume stops, none by default (the source's "
    "timeout ends a bounded batch read)",
    ("relay-readers", "timeout"): "seconds to wait for the relay's answer",
    ("ping", "timeout"): "seconds to wait for the service's answer",
    ("broker", "hwm"): "the broker's queue bound, from spark_zmq.requestreply.broker_defaults",
}


def _camel(name: str) -> str:
    """``max_message_bytes`` or ``--max-message-bytes`` -> ``maxMessageBytes``."""
    first, *rest = re.split(r"[-_]", name.lstrip("-"))
    return first + "".join(word.capitalize() for word in rest)


def _options(command: str) -> list[TyperOption]:
    return [p for p in CLICK[command].params if isinstance(p, TyperOption) and p.name != "help"]


def _named_after_an_option(command: str, param: TyperOption) -> bool:
    names = {_camel(param.name or "")} | {_camel(o) for o in param.opts if o.startswith("--")}
    return bool(names & OPTION_NAMES) and (command, param.name) not in NOT_THE_OPTION


#: (command, parameter) of every flag that stands for an option: named after one, or declared
OPTION_PARAMS = sorted(
    {(command, p.name or "") for command in CLICK for p in _options(command) if _named_after_an_option(command, p)}
    | {(command, name) for command, fn in COMMANDS.items() for name in declared_flags(fn)}
)


def _param(command: str, name: str) -> TyperOption:
    return next(p for p in _options(command) if p.name == name)


def _declared(command: str, name: str):
    flag = declared_flags(COMMANDS[command]).get(name)
    assert flag is not None, f"spark-zmq {command}: {name} stands for an option but is not made by option_flag"
    return flag


def _documented(spec) -> str:
    return (spec.default_doc or "none").replace("`", "").replace("**", "")


def test_the_flags_standing_for_options_are_found():
    """The commands and flags below must be among those checked (a rename that hid them
    from the name match would empty the checks)."""
    found = set(OPTION_PARAMS)
    for expected in [
        ("relay", "hwm"),
        ("relay", "max_message_bytes"),
        ("relay", "max_spool_bytes"),
        ("relay", "topics"),
        ("relay", "fsync"),
        ("relay", "pattern"),
        ("relay", "format"),
        ("relay", "heartbeat_ttl"),
        ("relay", "curve_certificate"),
        ("produce", "pattern"),
        ("produce", "heartbeat_interval"),
        ("consume", "pattern"),
        ("consume", "format"),
        ("consume", "topic"),
        ("broker", "max_message_bytes"),
        ("broker", "heartbeat_timeout"),
        ("relay-readers", "curve_server_key"),
    ]:
        assert expected in found, expected
    for command, name in NOT_THE_OPTION:
        assert name in {p.name for p in _options(command)}, (command, name)
        assert name not in declared_flags(COMMANDS[command]), (command, name)


@pytest.mark.parametrize("command, name", OPTION_PARAMS)
def test_every_flag_named_after_an_option_is_made_from_the_table(command, name):
    flag = _declared(command, name)
    assert flag.spec in TABLES[flag.spec.side]
    assert flag.flag in _param(command, name).opts


@pytest.mark.parametrize("command, name", OPTION_PARAMS)
def test_a_flags_default_is_none_or_the_tables(command, name):
    spec = _declared(command, name).spec
    param = _param(command, name)
    if param.required:
        return
    default = getattr(param.default, "value", param.default)
    assert default is None or default == spec.default, (command, name, param.default, spec.default)


@pytest.mark.parametrize("command, name", OPTION_PARAMS)
def test_a_flags_help_ends_with_the_tables_documented_default(command, name):
    spec = _declared(command, name).spec
    param = _param(command, name)
    help_text = param.help or ""
    if param.required:  # the command needs it: the table's default never applies
        assert "Default" not in help_text, (command, name, help_text)
        return
    assert help_text.endswith(f" Default {_documented(spec)}."), (command, name, help_text)
    assert not param.show_default, f"{command} {name}: the default is stated twice"


@pytest.mark.parametrize("command", sorted(CLICK))
def test_no_help_shows_a_default_number_the_table_does_not_have(command):
    """A number after "Default" in any flag's help is a table's documented default, shown
    by ``option_flag``: a default typed into a help text is a copy that drifts."""
    for param in _options(command):
        for shown in re.findall(r"\bDefault:? (.*?)\.(?=\s|$)", param.help or ""):
            if not re.search(r"\d", shown):
                continue
            flag = _declared(command, param.name or "")
            assert shown == _documented(flag.spec), (command, param.name, shown)


def test_the_option_to_flag_map_round_trips():
    """relay names options by flags from its declarations: one flag per option, the flag
    the command parses, and derived from the option's name unless the command names it."""
    flags = option_flags(relay_command)
    declared = declared_flags(relay_command)
    assert len(flags) == len(declared) == len(set(flags.values()))
    for name, flag in declared.items():
        assert flags[flag.spec.name] == flag.flag
        assert flag.flag in _param("relay", name).opts
    own = {option: flag for option, flag in flags.items() if flag != flag_name(option)}
    assert own == {"spoolFsync": "--fsync"}
    assert all(_camel(flag) == option for option, flag in flags.items() if option not in own)
    assert {"maxMessageBytes", "maxSpoolBytes", "hwm", "topics", "heartbeatTtl", "curveCertificate"} <= set(flags)
    assert CURVE_FLAGS == tuple(flag_name(o) for o in ("curveCertificate", "curveServerKey", "curveAuthorizedKeys"))


def test_the_options_map_comes_from_the_same_declarations():
    """What relay's flags hold becomes the options map by their declarations: each value
    under its option, a flag not given left out (the table's default applies)."""
    declared = declared_flags(relay_command)
    assert given_options(relay_command, {name: None for name in declared}) == {}
    values: dict[str, Any] = {
        "endpoints": "tcp://127.0.0.1:5555",
        "spool_dir": "/tmp/spark-zmq-spool",
        "pattern": ConsumePattern.sub,
        "format": Format.arrow,
        "topics": "a,b",
        "max_spool_bytes": "2 GiB",
        "hwm": 5,
        "max_message_bytes": "1MiB",
        "fsync": True,
        "heartbeat_interval": "1",
        "heartbeat_timeout": "20",
        "heartbeat_ttl": "0",
    }
    raw = given_options(relay_command, values)
    assert set(raw) == {declared[name].spec.name for name in values}
    options = SourceOptions.parse(raw)
    assert (options.pattern, options.format, options.topics) == ("sub", "arrow", ["a", "b"])
    assert (options.hwm, options.max_message_bytes, options.max_spool_bytes) == (5, MiB, 2 << 30)
    assert options.spool_fsync is True and options.spool_dir == "/tmp/spark-zmq-spool"
    assert (options.heartbeat_interval, options.heartbeat_timeout, options.heartbeat_ttl) == (1.0, 20.0, 0.0)


def test_an_option_error_names_the_flag():
    error = usage_error(
        OptionError("option 'hwm' = '0' is out of range; expected an integer", "hwm"), option_flags(relay_command)
    )
    assert error.param_hint == "'--hwm'" and error.message == "--hwm = '0' is out of range; expected an integer"


#: a value each kind refuses (the flag's own check or the table's)
WRONG = {
    "int": "0",
    "bytes": "x",
    "seconds": "-1",
    "choice": "bogus",
    "list": "a",
    "certificate": "/nonexistent/x.key_secret",
    "publickey": "abc",
    "authorized": "/nonexistent",
    "endpoints": "tcp://nohost:x",
    "path": "\x00",
}
#: flags that take no wrong value
NO_WRONG_VALUE = {("relay", "fsync"): "a boolean flag", ("consume", "topic"): "any text is a topic prefix"}


def _base_args(command: str, tmp_path) -> list[str]:
    from zmqtest import free_ports

    first, second = free_ports(2)
    return {
        "relay": [
            "relay",
            "--endpoints",
            f"@tcp://127.0.0.1:{first}",
            "--listen",
            f"tcp://127.0.0.1:{second}",
            "--spool-dir",
            str(tmp_path / "spool"),
        ],
        "relay-readers": ["relay-readers", "--listen", f"tcp://127.0.0.1:{first}", "--timeout", "0.5"],
        "ping": ["ping", f"tcp://127.0.0.1:{first}", "--timeout", "0.5"],
        "broker": [
            "broker",
            "--frontend",
            f"@tcp://127.0.0.1:{first}",
            "--backend",
            f"@tcp://127.0.0.1:{second}",
            "--status-interval",
            "0.1",
        ],
        "produce": [
            "produce",
            f"tcp://127.0.0.1:{first}",
            "--no-progress",
            "--count",
            "1",
            "--peer-wait",
            "0",
            "--linger",
            "0",
        ],
        "consume": ["consume", f"@tcp://127.0.0.1:{first}", "--no-progress", "--count", "1", "--timeout", "0.2"],
    }[command]


def _spec_of(command: str, name: str):
    """The option a flag stands for: as declared, else (on a command that does not declare
    it) the source option of its name."""
    flag = declared_flags(COMMANDS[command]).get(name)
    return flag.spec if flag is not None else next(s for s in SOURCE_OPTIONS if s.name == _camel(name))


@pytest.mark.parametrize("command, name", [p for p in OPTION_PARAMS if p not in NO_WRONG_VALUE])
def test_a_wrong_value_names_the_flag_and_exits_2(tmp_path, command, name):
    param = _param(command, name)
    flag = next(o for o in param.opts if o.startswith("--"))
    args = _base_args(command, tmp_path)
    if flag in args:
        args = args[: args.index(flag)] + args[args.index(flag) + 2 :]
    result = CliRunner().invoke(app, [*args, flag, WRONG[_spec_of(command, name).kind]])
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())
    assert result.exit_code == 2, (command, flag, text)
    assert flag in text and "Traceback" not in text, (command, flag, text)
