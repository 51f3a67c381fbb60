"""Every notebook runs headless, top to bottom, without a cell error."""

from __future__ import annotations

import glob
import os

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

#: what each notebook's output must show (its own cells also assert their results)
EXPECTED = {
    "quickstart.ipynb": ["4000 rows", "final lag 0"],
    "arrow_pipelines.ipynb": ["stage2 received 20000 rows, each once", "5000 rows"],
}
NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_without_errors(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    name = os.path.basename(path)
    assert name in EXPECTED, f"add {name}'s expected output to EXPECTED in {__file__}"
    for expected in EXPECTED[name]:
        assert expected in text, f"{name}: {expected!r} not in its output"
