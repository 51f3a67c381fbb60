"""Every notebook runs headless, top to bottom, without a cell error, and shows what it
promises a reader: its tables (as rich display data, with their column names) and its
plots (as ``image/png``, which Jupyter's inline backend produces in a live kernel and in
an executed copy alike)."""

from __future__ import annotations

import base64
import glob
import html
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: what each notebook's output must show (its own cells also assert their results):
#: ``text`` in its printed output; ``tables``, the column names of each table it displays,
#: in order; ``plots``, how many cells draw with matplotlib (each must show an image)
EXPECTED = {
    "quickstart.ipynb": {
        "text": ["4000 rows", "final lag 0"],
        "tables": [["sensor", "avg(reading)", "count(1)"]],
        "plots": 1,
    },
    "arrow_pipelines.ipynb": {
        "text": ["stage2 received 20000 rows, each once", "5000 rows"],
        "tables": [["rows", "distinct_seq", "min(seq)", "max(seq)"], ["seq", "sensor", "ts", "reading", "fahrenheit"]],
        "plots": 1,
    },
}
NOTEBOOKS = sorted(
    glob.glob(
        os.path.join(
            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "notebooks", "*.ipynb"
        )
    )
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _columns(table_html: str) -> list[str]:
    """The column names in an HTML table's header (pandas' index header cell is empty)."""
    head = re.search(r"<thead>(.*?)</thead>", table_html, re.S)
    cells = re.findall(r"<th[^>]*>(.*?)</th>", head.group(1) if head else "", re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", cell)).strip() for cell in cells if cell.strip()]


def _rich(output) -> dict:
    """An output's display data (``{}`` for a stream or an error)."""
    return output.get("data", {}) if output.get("output_type") in ("display_data", "execute_result") else {}


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_and_shows_its_tables_and_plots(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    name = os.path.basename(path)
    assert name in EXPECTED, f"add {name}'s expected output to EXPECTED in {__file__}"
    expected = EXPECTED[name]
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    outputs = [o for cell in cells for o in cell.get("outputs", [])]

    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, f"{name}: " + "\n".join(f"{o.get('ename')}: {o.get('evalue')}" for o in errors)

    text = "".join(o.get("text", "") for o in outputs)
    for wanted in expected["text"]:
        assert wanted in text, f"{name}: {wanted!r} not in its output"

    tables = []
    for output in outputs:
        data = _rich(output)
        if "<table" in data.get("text/html", ""):
            columns = _columns(data["text/html"])
            tables.append(columns)
            plain = data.get("text/plain", "")
            assert all(column in plain for column in columns), f"{name}: text/plain lacks {columns}:\n{plain}"
    assert tables == expected["tables"], f"{name}: tables shown (by column names) differ"

    plot_cells = [cell for cell in cells if "plt." in cell.source]
    assert len(plot_cells) == expected["plots"], f"{name}: {len(plot_cells)} cells plot, expected {expected['plots']}"
    for cell in plot_cells:
        images = [_rich(o)["image/png"] for o in cell.outputs if "image/png" in _rich(o)]
        assert images, f"{name}: a plot cell shows no image/png:\n{cell.source}"
        assert all(base64.b64decode(image).startswith(PNG_SIGNATURE) for image in images)
