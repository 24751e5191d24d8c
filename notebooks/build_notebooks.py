"""Write the worked-example notebooks from their py:percent sources (and optionally execute them,
full size, with outputs).

    python notebooks/build_notebooks.py                                  # write every .ipynb (see below)
    python notebooks/build_notebooks.py --execute                        # write and run them all (full-size outputs stored)
    python notebooks/build_notebooks.py --execute monte_carlo.ipynb      # one of them (or several names)

Every notebook's source is the py:percent script beside it (``NAME.py`` -> ``NAME.ipynb``, read by
jupytext): the code that linters and reviewers see, and a plain Python script as well. The first
code cell of each reads ``SDJAX_NOTEBOOK_QUICK``: with ``SDJAX_NOTEBOOK_QUICK=1`` it runs short
horizons and small batches (``SDJAX_NOTEBOOK_QUICK=1 python notebooks/NAME.py`` runs one as a
script). tests/test_notebooks.py runs every stored notebook in quick mode and checks that it holds
exactly the cells of its source.

Without ``--execute`` a stored notebook whose code cells are those of its source keeps its outputs
and takes the source's text (markdown cells); one whose code changed is written without outputs.
Numbers a notebook's text quotes from its full run must be the ones its stored outputs print
(tests/test_notebooks.py checks those it knows of): after ``--execute NAME.ipynb``, correct them in
``NAME.py`` and run this script again without ``--execute``.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent

#: Seconds one cell may take in a full-size execution (the longest notebooks run for tens of minutes).
TIMEOUT = 3600


def percent_sources() -> dict[str, pathlib.Path]:
    """``{notebook file name: its py:percent source}`` for every ``NAME.py`` in ``notebooks/`` that
    starts with a cell marker (this script does not)."""
    return {p.with_suffix(".ipynb").name: p for p in sorted(HERE.glob("*.py")) if p.read_text().startswith("# %%")}


def text_update(stored: nbformat.NotebookNode, built: nbformat.NotebookNode) -> nbformat.NotebookNode | None:
    """``stored`` with the markdown of ``built`` if the two have the same cells but for their text
    (so the stored outputs still belong to the code), else None."""
    if [(c.cell_type, c.source if c.cell_type == "code" else None) for c in stored.cells] != [
        (c.cell_type, c.source if c.cell_type == "code" else None) for c in built.cells
    ]:
        return None
    for old, new in zip(stored.cells, built.cells):
        old.source = new.source
    return stored


def main(argv: list[str]) -> None:
    """Write (with ``--execute``: run full size, then write) the notebooks named in ``argv``, or all."""
    import jupytext

    sources = percent_sources()
    execute = "--execute" in argv
    only = [a for a in argv if not a.startswith("--")]
    unknown = sorted(set(only) - set(sources))
    if unknown:
        raise SystemExit(f"no py:percent source for {unknown}; notebooks: {sorted(sources)}")
    for name, source in sources.items():
        if only and name not in only:
            continue
        nb = jupytext.read(source)
        path = HERE / name
        if execute:
            import nbclient

            nbclient.NotebookClient(nb, timeout=TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
            note = "executed"
        else:
            updated = text_update(nbformat.read(path, as_version=4), nb) if path.exists() else None
            nb, note = (nb, "no outputs: run it with --execute") if updated is None else (updated, "stored outputs kept")
        nbformat.write(nb, path)
        print("wrote", path, f"{path.stat().st_size / 1e6:.2f} MB ({note})")


if __name__ == "__main__":
    main(sys.argv[1:])
