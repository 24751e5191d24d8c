"""Every notebook in ``notebooks/`` runs from top to bottom (so none of them rots).

Each notebook's source is a py:percent script beside it (``NAME.py``, built into ``NAME.ipynb`` by
``notebooks/build_notebooks.py``): the tests below check that every stored notebook holds exactly
the cells of its source, that its outputs are those of a complete full-size run, and that numbers
its text quotes from that run match the stored outputs; so running the source runs the notebook's
code. Each source runs in the test process (its own working directory, matplotlib's settings,
NumPy's print options and JAX's standard dtype promotion restored afterwards; warnings shown, not
raised, as in a kernel), with ``SDJAX_NOTEBOOK_QUICK=1`` in the environment: notebooks read it in
their first code cell (``QUICK = os.environ.get("SDJAX_NOTEBOOK_QUICK") == "1"``) to shorten
simulations so that the whole set runs in a few minutes on a 2-core CPU. The stored notebooks keep
the outputs of a full-size run. Figures are drawn with matplotlib's non-interactive backend.

In the test process rather than a fresh Jupyter kernel each: a kernel's start and its imports of
JAX, sdjax and matplotlib took 4.2 s per notebook, and in one process the notebooks share the
programs they compile from the library. The 14 notebooks of the time in one process, cold caches,
2-core CPU, same sitting: 287 s in kernels, 261 s here.
"""

from __future__ import annotations

import pathlib
import re
import runpy
import signal
import sys
import warnings

import jax
import numpy as np
import pytest
from helpers import release_compiled_code

NOTEBOOKS_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))

#: Seconds one notebook may take in quick mode (a notebook that hangs fails its test, not CI).
TIMEOUT = 900


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    """The notebook's source runs to its end in quick mode (any exception fails the test)."""
    matplotlib = pytest.importorskip("matplotlib")
    monkeypatch.setenv("SDJAX_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(path.with_suffix(".py"))])
    import matplotlib.pyplot as plt

    def overdue(signum, frame):
        raise TimeoutError(f"{path.name}: still running after {TIMEOUT} s")

    alarm = hasattr(signal, "SIGALRM")  # (POSIX; elsewhere a hanging notebook hangs its test)
    if alarm:
        previous = signal.signal(signal.SIGALRM, overdue)
        signal.alarm(TIMEOUT)
    try:
        with (
            warnings.catch_warnings(),
            matplotlib.rc_context(),
            np.printoptions(),
            jax.numpy_dtype_promotion("standard"),
        ):
            warnings.simplefilter("default")  # (as a kernel shows them: the suite's "error" is for sdjax's tests)
            runpy.run_path(str(path.with_suffix(".py")), run_name="__main__")
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        plt.close("all")
        # (a large notebook's programs hold ~4,000 memory mappings: bounded per notebook, not
        # only at the module's end)
        release_compiled_code()


#: The notebooks' sources: one py:percent script per notebook (``NAME.py`` beside ``NAME.ipynb``),
#: read by linters and reviewers; ``notebooks/build_notebooks.py`` writes (and executes) the
#: notebooks from them.
SOURCES = sorted(p for p in NOTEBOOKS_DIR.glob("*.py") if p.read_text().startswith("# %%"))


def test_every_notebook_has_a_source():
    """Each stored notebook has its py:percent source and each source its stored notebook; the only
    other Python file in ``notebooks/`` is the driver (no notebook lives in string literals)."""
    assert NOTEBOOKS, "no notebooks found"
    assert sorted(p.stem for p in NOTEBOOKS) == sorted(p.stem for p in SOURCES)
    others = sorted(p.name for p in NOTEBOOKS_DIR.glob("*.py") if p not in SOURCES)
    assert others == ["build_notebooks.py"], f"notebooks/ holds Python files that are not notebook sources: {others}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_notebook_matches_its_source(path):
    """The stored ``.ipynb`` holds exactly the cells of its py:percent source (rebuild it with
    ``python notebooks/build_notebooks.py --execute NAME.ipynb``; after a change of text only,
    ``python notebooks/build_notebooks.py NAME.ipynb`` keeps the stored outputs)."""
    jupytext = pytest.importorskip("jupytext")
    nbformat = pytest.importorskip("nbformat")
    source = path.with_suffix(".py")
    assert source.exists(), f"{path.name} has no source {source.name}"
    stored = nbformat.read(path, as_version=4)
    expected = jupytext.read(source)
    pairs = [(cell.cell_type, cell.source) for cell in expected.cells]
    assert [(cell.cell_type, cell.source) for cell in stored.cells] == pairs, (
        f"{path.name} is out of date with {source.name}"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_notebook_is_a_full_run(path):
    """The stored outputs come from a complete full-size execution: every code cell ran, none
    raised, and the first one printed "full run" (not "quick mode")."""
    nbformat = pytest.importorskip("nbformat")
    code = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code), f"{path.name}: not every code cell was executed"
    assert not [o for cell in code for o in cell.outputs if o.get("output_type") == "error"], (
        f"{path.name}: stored error output"
    )
    assert "".join(o.get("text", "") for o in code[0].outputs).startswith("full run"), (
        f"{path.name}: not a full-size run"
    )


#: Numbers a notebook's text quotes from its stored full run: (regular expression on the stored
#: text outputs, the phrase its markdown must contain, ``{1}``, ``{2}``, ... the matched groups).
QUOTED = {
    "motion_planning.ipynb": [
        (
            r"base attitude change: straight line ([0-9.]+) deg, optimised ([0-9.]+) deg",
            "turns the base by {2} deg instead of {1} deg",
        ),
        (r"IMPROVEMENT_FACTOR = ([0-9.]+)", "**{1}x less base attitude disturbance**"),
        (
            r"end-point error: +straight line ([0-9.]+) mm, optimised ([0-9.]+) mm",
            "end-point errors of {2} mm (optimised) and {1} mm (straight line)",
        ),
        (
            r"reactionless_plan +\| +([0-9.e+-]+) \| +([0-9.e+-]+) \|",
            "`reactionless_plan` ends on the target ({1} mm) with a base attitude change of {2} deg",
        ),
        (r"REACTIONLESS_FACTOR = ([0-9.e+-]+)", "{1}x less than the straight line"),
        (r"largest on the way ([0-9.]+) deg", "turning the base by up to {1} deg on the way"),
        (
            r"peak \|tau\| +([0-9.]+) N m \(torque ratio [0-9.]+: the same path over ([0-9.]+)x",
            "peak torque, {1} N m, is 3.3x the 20 N m limit, so the same path needs {2}x the duration",
        ),
        (
            r"RNS resolved rates \(kinematic\) +\| +([0-9.e+-]+) \| +([0-9.e+-]+) \|",
            "keeps the base still throughout ({2} deg) but stalls {1} mm short of the target",
        ),
        (r"J\* P: ([0-9.]+) m at the start, ([0-9.e+-]+) m at the end", "falls from {1} m to {2} m"),
        (
            r"meet the torque limits in [0-9.]+ s: duration ([0-9.]+) s, peak \|tau\| ([0-9.]+) N m",
            "the plan then takes {1} s with a peak torque of {2} N m",
        ),
        (r"PLANNING_SECONDS = ([0-9.]+)", "its re-timing took {1} s together, compilation included"),
        (
            r"shortest feasible ([0-9.]+) s \(re-timing the unconstrained path: ([0-9.]+) s\)",
            "meets the torque limits in {1} s instead of {2} s",
        ),
        (
            r"([0-9.]+) N m at 7x finer steps; there: end-point error ([0-9.e+-]+) mm, base attitude change ([0-9.e+-]+) deg",
            "peak {1} N m at seven times finer steps, where the plan still ends {2} mm from the target and turns the base by {3} deg",
        ),
        (
            r"baseline computed in [0-9.]+ s\n.*\n  base attitude change ([0-9.]+) deg",
            "the straight joint-space line turns the base by {1} deg",
        ),
    ],
    "inertia_identification.ipynb": [
        (r"base parameters from 3 random records: ([0-9]+) of 70", "reach the same rank, {1} of 70"),
        (
            r"sinusoidal +[0-9.e+-]+ +([0-9.]+) +([0-9.e+-]+)\s+optimal +[0-9.e+-]+ +([0-9.]+) +([0-9.e+-]+)",
            "condition number of the base regressor from {1} to {3} and raises its smallest singular value from {2} to {4}",
        ),
        (
            r"sinusoidal +([0-9.e+-]+) +([0-9.e+-]+)\s+optimal +([0-9.e+-]+) +([0-9.e+-]+)",
            "error at noise 1e-3 falls from {1} to {3} (largest single error {2} to {4})",
        ),
        (r"designed in ([0-9.]+) s", "The design took {1} s here"),
    ],
    "monte_carlo.ipynb": [
        (r"final joint error ([0-9.e+-]+) rad, meets the requirement: True", "on its goal ({1} rad)"),
        (
            r"P\(final joint error < 0.05 rad\) = ([0-9.]+), 95 % interval \[([0-9.]+), ([0-9.]+)\] \(4096",
            "probability {1} (95 % interval [{2}, {3}], 4096 samples)",
        ),
        (
            r"0.05 N m instead of 0.5: P\(final joint error < 0.05 rad\) = ([0-9.]+), 95 % interval \[([0-9.]+), ([0-9.]+)\]",
            "the probability rises to {1} ([{2}, {3}])",
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(QUOTED), ids=lambda n: n.removesuffix(".ipynb"))
def test_quoted_numbers_match_the_stored_outputs(name):
    """Numbers stated in a notebook's text are the ones its stored outputs print (after a new full
    run, correct the text in the source and run ``python notebooks/build_notebooks.py NAME.ipynb``)."""
    nbformat = pytest.importorskip("nbformat")
    cells = nbformat.read(NOTEBOOKS_DIR / name, as_version=4).cells
    printed = "".join(o.get("text", "") for cell in cells if cell.cell_type == "code" for o in cell.outputs)
    text = "\n".join(cell.source for cell in cells if cell.cell_type == "markdown")
    for pattern, phrase in QUOTED[name]:
        match = re.search(pattern, printed)
        assert match, f"{name}: no output matches {pattern!r}"
        expected = phrase.format(match.group(0), *match.groups())
        assert expected in text, f"{name}: the text should say {expected!r} (from the stored outputs)"
