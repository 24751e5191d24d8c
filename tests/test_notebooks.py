"""Every notebook in ``notebooks/`` runs from top to bottom (so none of them rots).

Each notebook is executed in a fresh kernel, from a temporary copy, with
``SDJAX_NOTEBOOK_QUICK=1`` in the environment: notebooks read it in their first code cell
(``QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"``) to shorten simulations so that
the whole set runs in a few minutes on a 2-core CPU. The stored notebooks keep the outputs of
a full-size run. Figures are drawn with matplotlib's non-interactive backend.
"""

from __future__ import annotations

import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))

#: Seconds one notebook may take in quick mode (a cell that hangs fails the test, not CI).
TIMEOUT = 900


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("SDJAX_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"


#: Notebook sources kept as py:percent scripts (read by linters and reviewers), each paired with
#: the stored, executed notebook of the same name.
SOURCES = sorted(p for p in (pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.py") if p.read_text().startswith("# %%"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_stored_notebook_matches_its_source(source):
    """The stored ``.ipynb`` holds exactly the cells of its py:percent source (rebuild it with
    ``python notebooks/build_notebooks.py --execute NAME.ipynb``)."""
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    stored = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    expected = jupytext.read(source)
    pairs = [(cell.cell_type, cell.source) for cell in expected.cells]
    assert [(cell.cell_type, cell.source) for cell in stored.cells] == pairs, f"{source.with_suffix('.ipynb').name} is out of date with {source.name}"
