"""The notebooks run from top to bottom without an error; each asserts its own claims in code."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_the_chapters_are_there_in_reading_order():
    names = [path.stem for path in NOTEBOOKS]
    assert names == [
        "01_attention_by_hand",
        "02_build_the_block",
        "03_training_vs_inference",
        "04_eight_stages",
        "04b_the_evidence",
        "05_train_and_translate",
        "06_decoder_only",
        "07_deploy",
    ]


BUILT_INLINE = ["01_attention_by_hand", "02_build_the_block", "03_training_vs_inference", "06_decoder_only"]


@pytest.mark.parametrize("name", BUILT_INLINE)
def test_chapter_builds_its_pieces_inline_and_asserts_them_against_kformer(name):
    """The reader sees the code (NumPy, or plain loops around kformer's layers) and asserts check it against kformer."""
    notebook = nbformat.read(NOTEBOOKS[0].parent / f"{name}.ipynb", as_version=4)
    code = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    inline = [source for source in code if ("@" in source or "np.exp" in source or "def " in source)]
    assert len(inline) >= 2, name
    checks = "\n".join(code)
    assert checks.count("assert") >= 6, name
    assert "kformer." in checks


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_chapter_ends_with_exercises_whose_solutions_are_asserted(path):
    name = path.stem
    notebook = nbformat.read(path, as_version=4)
    sources = [(cell.cell_type, cell.source) for cell in notebook.cells]
    start = next(i for i, (kind, source) in enumerate(sources) if kind == "markdown" and "## Exercises" in source)
    after = sources[start:]
    solutions = [i for i, (kind, source) in enumerate(after) if kind == "markdown" and "*Solution.*" in source]
    assert len(solutions) >= 2, name
    for i in solutions:  # each solution folded, its prose followed by a code cell that asserts it, folded too
        assert after[i][1].startswith("<details>") and after[i][1].endswith("</details>"), (name, after[i][1])
        kind, source = after[i + 1]
        assert kind == "code" and "assert" in source, (name, source)
        folded = notebook.cells[start + i + 1].metadata.get("jupyter", {})
        assert folded.get("source_hidden") and folded.get("outputs_hidden"), (name, source)  # no answer in view


CODE_EXERCISES = {  # chapter: the function its exercise asks the learner to write
    "02_build_the_block": "pre_ln_encoder_layer",
    "03_training_vs_inference": "my_ranking_scores",
    "04b_the_evidence": "attention_parameters",
    "06_decoder_only": "my_top_p",
}


@pytest.mark.parametrize("name, function", CODE_EXERCISES.items())
def test_an_exercise_asks_for_code_and_its_folded_solution_checks_the_learners_without_replacing_it(name, function):
    """The learner's cell defines the function as a stub (None until written); the solution's hidden cell checks
    the learner's once written and never defines a function of that name, so "Run all" keeps the learner's."""
    cells = nbformat.read(NOTEBOOKS[0].parent / f"{name}.ipynb", as_version=4).cells
    start = next(i for i, cell in enumerate(cells) if "## Exercises" in cell.source)
    stub = next(i for i, cell in enumerate(cells) if f"def {function}(" in cell.source)
    assert stub > start and "Your code here" in cells[stub].source and "return None" in cells[stub].source
    assert not cells[stub].metadata.get("jupyter", {}).get("source_hidden")
    solution = next(i for i in range(stub + 1, len(cells)) if cells[i].metadata.get("jupyter", {}).get("source_hidden"))
    assert f"if {function}(" in cells[solution].source and "is not None" in cells[solution].source
    assert f"def {function}(" not in cells[solution].source


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


NOISE = ("INFO:", "cuInit", "XNNPACK", "oneDNN", "absl::")  # TensorFlow's and LiteRT's notes, read as failures


def start_up_noise(notebook):
    """The stderr lines of a notebook's outputs that are TensorFlow's or LiteRT's notes, not errors."""
    lines = [
        line
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.get("name") == "stderr"
        for line in output.text.splitlines()
    ]
    return [line for line in lines if any(marker in line for marker in NOISE)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_a_committed_chapter_shows_no_start_up_noise(path):
    assert not start_up_noise(nbformat.read(path, as_version=4)), path.name


@pytest.mark.slow  # minutes each
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_executes(path):
    """Runs a copy (the committed file is not touched); a failing assert in any cell fails the test."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    assert not start_up_noise(notebook), start_up_noise(notebook)  # quiet_start keeps the red lines away
