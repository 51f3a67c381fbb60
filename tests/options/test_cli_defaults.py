"""The CLI's defaults are the library's: a flag's default is read from the options table or
the object it configures, never typed in again (a copy drifts, and ``--help`` then says
what the program does not do)."""

from __future__ import annotations

import inspect

import pytest

from spark_zmq.cli.flags import source_default
from spark_zmq.cli.servers import BROKER_MAX_MESSAGE_BYTES, broker_command, relay_command
from spark_zmq.options import SourceOptions
from spark_zmq.requestreply import Broker

pytestmark = pytest.mark.timeout(30)


def _flag_defaults(command) -> dict:
    return {name: p.default.default for name, p in inspect.signature(command).parameters.items()}


def test_the_broker_flags_default_to_the_brokers_own_defaults():
    flags = _flag_defaults(broker_command)
    broker = {name: p.default for name, p in inspect.signature(Broker.__init__).parameters.items()}
    for name in ("hwm", "reply_timeout", "request_ttl", "hold_limit"):
        assert flags[name] == broker[name], name


def test_the_broker_command_bounds_messages_as_the_source_does():
    source = SourceOptions.parse({"endpoints": "@tcp://127.0.0.1:5555"})
    assert _flag_defaults(broker_command)["max_message_bytes"] == BROKER_MAX_MESSAGE_BYTES == source.max_message_bytes


def test_a_flags_help_shows_the_tables_default():
    assert source_default("maxMessageBytes") == "64 MiB"
    assert source_default("hwm") == "10000"


def test_no_flag_types_a_default_into_its_help():
    """A number after "Default" in a flag's help is a copy of a default: it comes from the
    table (``source_default``) or from the flag's own default (typer shows it)."""
    import re

    from spark_zmq.cli import broker, metrics_flag, servers, traffic

    for module in (servers, broker, metrics_flag, traffic):
        source = inspect.getsource(module)
        typed = re.findall(r"Default \d[^\"]*", source)
        assert not typed, f"{module.__name__}: defaults typed into help texts: {typed}"


def test_the_relays_heartbeat_help_shows_the_tables_defaults():
    helps = {name: p.default.help for name, p in inspect.signature(relay_command).parameters.items()}
    assert helps["heartbeat_interval"].endswith(f"Default {source_default('heartbeatInterval')}.")
    assert helps["heartbeat_timeout"].endswith(f"Default {source_default('heartbeatTimeout')}.")
    assert helps["heartbeat_ttl"].endswith(f"Default {source_default('heartbeatTtl')}.")
