"""Documentation generated from the options table: the options reference page
(``docs/options.md``), Markdown tables, the plain-text manual ``help(ZmqDataSource)``
shows, and ``python -m spark_zmq.options``.

Why generated: the docs cannot drift from what the parser accepts (a test fails when the
committed ``docs/options.md`` differs from ``options_page``).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence

from .table import SIDES, TABLES, queries_of

__all__ = ["markdown_table", "manual", "readme_block", "update_readme", "options_page", "main"]

#: where the generated options reference lives, relative to the repository's root
OPTIONS_PAGE = "docs/options.md"

_TITLES = {
    "source": 'spark.readStream.format("zmq") / spark.read.format("zmq")',
    "sink": 'df.writeStream.format("zmq") / df.write.format("zmq")',
    "request": "spark_zmq.request(df, endpoints, reply_schema=..., **options)",
}


def markdown_table(side: str) -> str:
    """The README's options table for ``side`` (``source`` or ``sink``)."""
    lines = ["| option | type | valid values | default | meaning |", "|---|---|---|---|---|"]
    for spec in TABLES[side]:
        cells = [f"`{spec.name}`", spec.kind, spec.valid_text(), spec.default_doc or "none", spec.doc]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _page_table(side: str) -> str:
    """``side``'s table for the options page: the README table's columns plus, for the
    source, which queries (streaming, batch) read each option."""
    queries = side == "source"
    head = "| option | type | valid values | default |" + (" queries |" if queries else "") + " meaning |"
    lines = [head, "|---|---|---|---|" + ("---|" if queries else "") + "---|"]
    for spec in TABLES[side]:
        cells = [f"`{spec.name}`", spec.kind, spec.valid_text(), spec.default_doc or "none"]
        if queries:
            cells.append(", ".join(queries_of(spec)))
        cells.append(spec.doc)
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


_PAGE_INTRO = """# Options

Generated from `spark_zmq/options/table.py`, the table that also parses and checks the
options: `python -m spark_zmq.options --write-docs docs/options.md` rewrites this page,
and a test fails when it differs from the table.

Option names are case-insensitive, an empty value means the default, integers may use `_`
between digits, byte sizes take a `KiB`/`MiB`/`GiB`/`TiB` suffix, and an unknown option or
a value out of range fails when the DataFrame is defined, naming the option: an unknown
name gets the closest valid one, and Kafka's option names their counterpart here
([coming-from-kafka.md](coming-from-kafka.md)). `help(spark_zmq.datasource.ZmqDataSource)`
shows the same in plain text.
"""

_PAGE_SECTIONS = {
    "source": (
        "Source",
        '`spark.readStream.format("zmq")` and `spark.read.format("zmq")`. '
        "The queries column says which read an option: `streaming` (`readStream`), `batch` (`read`). "
        "More in [source.md](source.md).",
    ),
    "sink": (
        "Sink",
        '`df.writeStream.format("zmq")` and `df.write.format("zmq")`; every option applies '
        "to both. More in [sink.md](sink.md).",
    ),
    "request": (
        "Request",
        "`spark_zmq.request(df, endpoints, reply_schema=..., **options)`: keyword "
        "arguments in camelCase or snake_case. More in [request-reply.md](request-reply.md).",
    ),
}


def options_page() -> str:
    """``docs/options.md``: every option of the source, the sink and ``request``."""
    out = [_PAGE_INTRO]
    for side in SIDES:
        title, text = _PAGE_SECTIONS[side]
        out += [f"## {title}", "", text, "", _page_table(side)]
    return "\n".join(out)


def manual() -> str:
    """Every option as plain text: the body of ``help(ZmqDataSource)``."""
    out = [
        "Options are case-insensitive; an empty value means the default. Integers may use '_'",
        "between digits; byte sizes take a KiB, MiB, GiB or TiB suffix. A bad or unknown option",
        "fails when the DataFrame is defined, with an error naming the option and what is valid.",
    ]
    for side in SIDES:
        out += ["", f"{side.capitalize()} options, {_TITLES[side]}:", ""]
        for spec in TABLES[side]:
            out.append(f"  {spec.name} ({spec.kind})")
            body = (
                f"{_plain(spec.doc)} Valid: {_plain(spec.valid_text())}. Default: {_plain(spec.default_doc or 'none')}."
            )
            out += textwrap.wrap(body, width=88, initial_indent="      ", subsequent_indent="      ")
    return "\n".join(out) + "\n"


def _plain(text: str) -> str:
    return text.replace("**", "").replace("`", "")


def _marker(side: str) -> tuple[str, str]:
    return f"<!-- options:{side} -->", f"<!-- /options:{side} -->"


def readme_block(text: str, side: str) -> str | None:
    """What ``text`` (a README) holds between the ``side`` markers, or ``None``."""
    start, end = _marker(side)
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(start) : j].strip("\n") + "\n"


def update_readme(text: str) -> str:
    """``text`` with the generated tables between their markers."""
    for side in SIDES:
        start, end = _marker(side)
        i, j = text.find(start), text.find(end)
        if i < 0 or j < i:
            raise ValueError(f"README has no {start} ... {end} markers")
        text = text[: i + len(start)] + "\n" + markdown_table(side) + text[j:]
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spark_zmq.options``: print or update the generated options docs."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_zmq.options", description="The connector's options, generated from one table."
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--markdown",
        choices=("source", "sink", "request", "all"),
        nargs="?",
        const="all",
        help="print the Markdown options table(s)",
    )
    group.add_argument("--manual", action="store_true", help="print the plain-text manual (as help() shows it)")
    group.add_argument("--update-readme", metavar="README", help="rewrite the tables between the markers in README")
    group.add_argument("--check-readme", metavar="README", help="exit 1 if README's tables differ from the table")
    group.add_argument(
        "--write-docs",
        metavar="PAGE",
        nargs="?",
        const=OPTIONS_PAGE,
        help=f"write the options reference page (default {OPTIONS_PAGE})",
    )
    group.add_argument(
        "--check-docs",
        metavar="PAGE",
        nargs="?",
        const=OPTIONS_PAGE,
        help=f"exit 1 if the options reference page (default {OPTIONS_PAGE}) differs from the table",
    )
    args = parser.parse_args(argv)
    if args.markdown:
        sides = SIDES if args.markdown == "all" else (args.markdown,)
        sys.stdout.write("\n".join(markdown_table(side) for side in sides))
    elif args.manual:
        sys.stdout.write(manual())
    elif args.write_docs:
        with open(args.write_docs, "w", encoding="utf-8") as f:
            f.write(options_page())
    elif args.check_docs:
        with open(args.check_docs, encoding="utf-8") as f:
            if f.read() != options_page():
                print(
                    f"{args.check_docs} differs from the options table; run "
                    f"python -m spark_zmq.options --write-docs {args.check_docs}",
                    file=sys.stderr,
                )
                return 1
    elif args.update_readme:
        with open(args.update_readme, encoding="utf-8") as f:
            text = f.read()
        with open(args.update_readme, "w", encoding="utf-8") as f:
            f.write(update_readme(text))
    else:
        with open(args.check_readme, encoding="utf-8") as f:
            text = f.read()
        stale = [side for side in SIDES if readme_block(text, side) != markdown_table(side)]
        if stale:
            print(
                f"{args.check_readme}: the {' and '.join(stale)} options table(s) differ from the generated ones; "
                f"run python -m spark_zmq.options --update-readme {args.check_readme}",
                file=sys.stderr,
            )
            return 1
    return 0
