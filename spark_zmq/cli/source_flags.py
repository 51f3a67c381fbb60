"""The CLI's flags that stand for options of the data source (or of the sink, or of
``spark_zmq.request``), generated from the options table: ``option_flag``.

Why generated: a flag such as relay's ``--max-message-bytes`` means what the option
``maxMessageBytes`` means, so its name, its documented default, its metavar and the name
the option's errors are reported under all follow from the option's row; written by hand
they were a second copy that drifted (a default typed into a help text, a flag missing
from the map that renames options to flags in errors). What a command says of the flag
beyond the option (what it receives, for whom) is the one thing it writes itself.

A command reads its declarations back (``declared_flags``): the options map it builds
from its flags (``given_options``) and the option -> flag names that turn an
``OptionError`` into a usage error naming the flag (``option_flags``, ``usage_error``)
come from the same ``option_flag`` calls as its ``--help``.
"""

from __future__ import annotations

import enum
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

import typer
from typer.models import OptionInfo

from ..options import OptionError, OptionSpec
from ..options.table import TABLES

__all__ = [
    "OptionFlag",
    "option_flag",
    "option_spec",
    "flag_name",
    "documented_default",
    "declared_flags",
    "option_flags",
    "given_options",
    "usage_error",
]

#: the metavar of a flag by its option's kind; a kind not here keeps click's (INTEGER,
#: TEXT, the choices, a boolean flag's none)
_METAVARS = {
    "bytes": "BYTES",
    "seconds": "SECONDS",
    "duration": "DURATION",
    "list": "LIST",
    "endpoints": "ENDPOINTS",
    "relays": "ADDRESSES",
    "path": "PATH",
    "host": "HOST",
    "ports": "PORT[-PORT]",
    "name": "NAME",
    "certificate": "FILE",
    "publickey": "FILE|Z85",
    "authorized": "DIR|*",
}


class _FromKind:
    """The metavar ``option_flag`` takes from the option's kind unless told otherwise."""

    def __repr__(self) -> str:
        return "<metavar from the option's kind>"


_FROM_KIND: Any = _FromKind()


class OptionFlag(OptionInfo):
    """A typer option that stands for a table option: ``spec`` is the option's row and
    ``flag`` the long name it is given and reported under (``--max-message-bytes``)."""

    def __init__(self, *, spec: OptionSpec, flag: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.flag = flag


def option_spec(side: str, name: str) -> OptionSpec:
    """The row of option ``name`` in the ``side`` table (``source``, ``sink``, ``request``)."""
    for spec in TABLES[side]:
        if spec.name == name:
            return spec
    raise KeyError(f"the {side} options have no {name!r}")


def flag_name(option: str) -> str:
    """The flag an option is given by default: camelCase -> ``--kebab-case``
    (``maxMessageBytes`` -> ``--max-message-bytes``)."""
    return "--" + re.sub(r"(?<!^)(?=[A-Z])", "-", option).lower()


def _plain(text: str) -> str:
    """The docs' Markdown as a terminal shows it."""
    return text.replace("**", "").replace("`", "")


def documented_default(side: str, name: str) -> str:
    """How the options table documents option ``name``'s default (``64 MiB``), in plain text."""
    return _plain(option_spec(side, name).default_doc or "none").rstrip(".")


def option_flag(
    option: str,
    *decls: str,
    help: str | None = None,
    side: str = "source",
    required: bool = False,
    table_default: bool = False,
    panel: str | None = None,
    metavar: Any = _FROM_KIND,
    **kwargs: Any,
) -> Any:
    """A typer option for the ``side`` table's option ``option``.

    ``decls``: the flag's names; a long one (``--fsync/--no-fsync``) replaces the one derived
    from the option's name, short ones (``-f``) are added to it. ``help``: what the flag
    means for this command (else the table's description); the table's documented default
    is appended to it, except for a ``required`` flag (its default never applies).

    The default is ``None``: a flag not given leaves the option to the table's default, as
    an option not set does. ``table_default``: the flag's default is the table's parsed
    default instead, for a command that uses the value itself rather than parsing an
    options map. ``metavar``: from the option's kind (``BYTES``, ``SECONDS``, ``FILE``) unless
    given; ``None`` keeps click's, for a flag that does not take the option's text (an
    integer where the option takes ``64MiB``). ``kwargs`` go to ``typer.Option`` (``min``,
    ``max``, ...)."""
    spec = option_spec(side, option)
    long = [d for d in decls if d.startswith("--")]
    names = list(decls) if long else [flag_name(option), *decls]
    text = help if help is not None else _plain(spec.doc)
    if required:
        default: Any = ...
    else:
        text = f"{text} Default {documented_default(side, option)}."
        default = spec.default if table_default else None
        if callable(default):
            raise ValueError(f"option {option!r}'s default depends on other options: a flag cannot take it")
    return OptionFlag(
        spec=spec,
        flag=names[0].split("/")[0],
        default=default,
        param_decls=names,
        help=text,
        metavar=_METAVARS.get(spec.kind) if metavar is _FROM_KIND else metavar,
        rich_help_panel=panel,
        show_default=False,
        **kwargs,
    )


def declared_flags(command: Callable[..., Any]) -> dict[str, OptionFlag]:
    """``command``'s flags made by ``option_flag``, by parameter name."""
    return {
        name: p.default
        for name, p in inspect.signature(command).parameters.items()
        if isinstance(p.default, OptionFlag)
    }


def option_flags(command: Callable[..., Any]) -> dict[str, str]:
    """Option name -> flag, for every option ``command`` has a flag for."""
    return {flag.spec.name: flag.flag for flag in declared_flags(command).values()}


def _raw(value: Any) -> str:
    """A flag's value as the options map holds it (a string, as Spark passes options)."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def given_options(command: Callable[..., Any], values: Mapping[str, Any]) -> dict[str, str]:
    """The options map of ``command``'s flags that were given: ``values`` holds the
    command's arguments by parameter name, and a flag left at ``None`` is left out, so the
    table's default applies."""
    return {
        flag.spec.name: _raw(values[name])
        for name, flag in declared_flags(command).items()
        if values.get(name) is not None
    }


def usage_error(exc: OptionError, flags: Mapping[str, str]) -> typer.BadParameter:
    """``exc`` as a usage error (exit code 2) that names flags, not options: ``flags`` maps
    option names to flags (``option_flags``); the flag at fault is the error's hint."""
    text = str(exc)
    for option, flag in flags.items():
        text = text.replace(f"option '{option}'", flag).replace(f"'{option}'", flag)
    hint = flags.get(exc.option or "")
    if hint and text.startswith(hint + ": "):
        text = text[len(hint) + 2 :]
    return typer.BadParameter(text, param_hint=f"'{hint}'" if hint else None)
