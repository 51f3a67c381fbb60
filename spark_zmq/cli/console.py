"""The CLI's terminal output: errors and warnings on stderr, and the live progress bar.

Why stderr: printed messages go to stdout, which must stay clean for pipes; error lines
are printed unbroken, for grep and logs.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["err_console", "print_error", "progress_bar"]

err_console = Console(stderr=True, soft_wrap=True)  # error lines unbroken, for grep and logs


def print_error(text: str) -> None:
    """One ``error:`` line on stderr (``text`` printed as is: paths and Z85 keys hold ``[``)."""
    err_console.print("[red]error:[/] " + escape(text))


def progress_bar(total: int | None, show: bool, what: str) -> Progress:
    """A live count (a bar when ``total`` is known) and rate of ``what``, on stderr."""
    columns = [
        TextColumn(f"[bold]{what}"),
        BarColumn() if total else TextColumn(""),
        MofNCompleteColumn() if total else TextColumn("{task.completed:,.0f}"),
        TextColumn("{task.fields[rate]:>10,.0f} msg/s"),
        TimeElapsedColumn(),
    ]
    return Progress(*columns, console=err_console, disable=not show, transient=False)
