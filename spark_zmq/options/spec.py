"""What an option is: ``OptionSpec`` (one row of the table), ``OptionError``, and the limits
and number formats that the table, the parsers and the docs share.

Why apart from the table: the parsers (``kinds``), the parser of a whole map (``parse``)
and the generated docs (``docs``) all read rows and raise or show the same numbers, while
the table itself is only data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import SparkZmqError

__all__ = [
    "OptionError",
    "OptionSpec",
    "Default",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "INT32_MAX",
    "INT64_MAX",
    "show",
    "show_bytes",
    "quote",
]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
#: the largest value of a C ``int``: every ZeroMQ socket option set here is one
INT32_MAX = (1 << 31) - 1
#: the largest signed 64-bit integer: offsets and byte counts (Spark's ``long``)
INT64_MAX = (1 << 63) - 1


class OptionError(SparkZmqError, ValueError):
    """A data source option is missing, unknown or has an invalid value.

    ``option`` is the option's name (as the table spells it, or the unknown key as given;
    Kafka's spelling for a Kafka option that arrives lower-cased) so callers and tests can
    tell which option was refused.
    """

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        self.option = option


#: an ``OptionSpec`` default: the value, or a function of the options parsed before it
Default = Any | Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class OptionSpec:
    """One option: everything the parser, the README and ``help()`` need to know.

    ``kind`` is one of ``int``, ``bytes`` (an integer number of bytes, optionally with a
    ``KiB``/``MiB``/``GiB``/``TiB`` suffix), ``seconds`` (a finite decimal number),
    ``bool``, ``choice``, ``string``, ``list`` (comma-separated strings), ``host``,
    ``endpoints`` and ``path``. ``default`` is the parsed default (``None`` = unset), or a
    function of the options parsed before it; ``default_doc`` is how the docs show it.
    ``minimum``/``maximum`` bound numeric kinds (inclusive). ``only_for`` restricts the
    option to some patterns, ``only_formats`` to some formats (a value other than the
    default's "off", ``None``/``false``/empty, is an error with another pattern or format).
    ``range_note`` says why the range is what it is.
    """

    name: str
    side: str
    kind: str
    attr: str
    doc: str
    default: Default = None
    default_doc: str = ""
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()
    only_for: tuple[str, ...] = ()
    only_formats: tuple[str, ...] = ()
    valid_doc: str = ""
    range_note: str = ""
    required: bool = False
    #: ``seconds`` only: 0 is valid too (it switches something off)
    allow_zero: bool = False

    @property
    def key(self) -> str:
        """The lower-cased key Spark's case-insensitive option map uses."""
        return self.name.lower()

    @property
    def numeric(self) -> bool:
        return self.kind in ("int", "bytes", "seconds")

    def default_for(self, parsed: dict[str, Any]) -> Any:
        return self.default(parsed) if callable(self.default) else self.default

    def valid_text(self) -> str:
        """What values are valid, for the docs (plain text with Markdown code spans)."""
        if self.valid_doc:
            text = self.valid_doc
        elif self.kind == "choice":
            text = ", ".join(f"`{c}`" for c in self.choices)
        elif self.kind == "bool":
            text = "`true`, `false`"
        elif self.kind == "int":
            text = f"integer, {show(self.minimum)} to {show(self.maximum)}"
        elif self.kind == "bytes":
            text = f"bytes, {show_bytes(self.minimum)} to {show_bytes(self.maximum)}"
        elif self.kind == "seconds":
            text = f"seconds, finite, {'>=' if self.allow_zero else '>'} 0 and <= {show(self.maximum)}"
        elif self.kind == "duration":
            text = f"seconds (`5`), or with a unit (`500ms`, `5s`, `1min`); > 0 and <= {show(self.maximum)} s"
        else:
            text = self.kind
        if self.range_note:
            text += f" ({self.range_note})"
        if self.only_for:
            text += f"; {', '.join(f'`{p}`' for p in self.only_for)} only"
        if self.only_formats:
            text += f"; format {', '.join(f'`{f}`' for f in self.only_formats)} only"
        return text


def show(value: int | float | None) -> str:
    """A limit as the docs and errors show it (``2^31-1``, ``1,000``, ``0.5``)."""
    if value == INT64_MAX:
        return "2^63-1"
    if value == INT32_MAX:
        return "2^31-1"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def show_bytes(value: int | float | None) -> str:
    """A byte limit as the docs and errors show it, in the largest whole unit (``64 MiB``)."""
    if value in (INT64_MAX, INT32_MAX) or value is None:
        return show(value)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit}"
    return show(value)


def quote(raw: str, limit: int = 60) -> str:
    """``repr(raw)``, shortened: an error message must stay readable whatever the value."""
    text = repr(raw)
    return text if len(text) <= limit else text[: limit - 4] + "...'"
