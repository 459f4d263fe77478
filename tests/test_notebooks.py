"""The notebooks run from top to bottom without an error; each asserts its own claims in code."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_four_chapters_are_there():
    names = [path.stem for path in NOTEBOOKS]
    assert names == ["01_attention_by_hand", "02_eight_stages", "03_train_and_translate", "04_deploy"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_is_a_chapter_committed_with_its_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    first, last = notebook.cells[0], notebook.cells[-1]
    assert first.cell_type == "markdown" and "What this notebook shows" in first.source
    assert last.cell_type == "markdown" and "What to take away" in last.source
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.outputs for cell in code if "print(" in cell.source or "plt.show()" in cell.source), path.name
    assert not [cell for cell in code for output in cell.outputs if output.output_type == "error"]
    assert any("image/png" in output.get("data", {}) for cell in code for output in cell.outputs)


@pytest.mark.slow  # minutes each
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_executes(path):
    """Runs a copy (the committed file is not touched); a failing assert in any cell fails the test."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
