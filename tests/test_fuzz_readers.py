"""Every reader refuses damaged input cleanly: fuzz tests with a seeded generator of mutated files.

Each reader gets files derived from a valid one by a few random edits (a number replaced by
``nan``/``inf``/a huge, negative or malformed value, a line deleted, duplicated or swapped, the
file truncated, a byte changed, a delimiter inserted; for ``.npz`` archives also entries
deleted, replaced by arrays of other shapes and dtypes, and metadata values of other types).
The property asserted for every mutant: the reader returns a valid result, or raises a
``ValueError`` whose message names the file. Any other exception (``KeyError``, ``IndexError``,
``RecursionError``, ...), or a crash of the process, fails the test and names the seed that
reproduces it (``_mutant(source, seed)``).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import re
import warnings

import numpy as np
import pytest

import sdjax
from sdjax.io import load_model, save_model
from sdjax.models import spacedyn_sample
from helpers import random_state

DATA = pathlib.Path(__file__).parent / "data"

#: Mutants per source file: 100 keep the module near 10 s on a 2-core CPU. The campaign that
#: found the bugs fixed with this test ran 4000 per file (80 s; ``SDJAX_FUZZ_MUTANTS=4000``);
#: the seeds that failed then are replayed by test_seeds_that_found_bugs.
MUTANTS = int(os.environ.get("SDJAX_FUZZ_MUTANTS", "100"))

_NUMBER = re.compile(rb"-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_NUMBER_SUBSTITUTES = [b"nan", b"inf", b"-inf", b"-1", b"0", b"1e308", b"-0", b"abc", b"", b"1e-320", b"99999999999"]
_DELIMITERS = [b"<", b">", b"{", b"}", b"[", b"]", b'"', b",", b"#", b"=", b"\x00", b"\xff"]


def _text_edit(data: bytes, rng: random.Random) -> bytes:
    """One random edit of a text file (the kinds listed in the module docstring)."""
    lines = data.split(b"\n")
    kind = rng.randrange(7)
    numbers = list(_NUMBER.finditer(data))
    if kind == 0 and numbers:
        m = rng.choice(numbers)
        return data[: m.start()] + rng.choice(_NUMBER_SUBSTITUTES) + data[m.end() :]
    if kind == 1 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
        return b"\n".join(lines)
    if kind == 2:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return b"\n".join(lines)
    if kind == 3:
        return data[: rng.randrange(len(data) + 1)]
    if kind == 4:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    i = rng.randrange(max(len(data), 1))
    if kind == 5:
        return data[:i] + bytes([rng.randrange(256)]) + data[i + 1 :]
    return data[:i] + rng.choice(_DELIMITERS) + data[i:]


def _mutant(source: bytes, seed: str) -> bytes:
    """One to three random edits of ``source``, reproducible from ``seed``."""
    rng = random.Random(seed)
    data = source
    for _ in range(rng.randint(1, 3)):
        data = _text_edit(data, rng)
    return data


def _binary_mutant(source: bytes, seed: str) -> bytes:
    """One to four changed bytes, and a truncation in three mutants of ten."""
    rng = random.Random(seed)
    data = bytearray(source)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.randrange(256)
    if rng.random() < 0.3:
        data = data[: rng.randrange(len(data))]
    return bytes(data)


_ODD_VALUES = [None, -1, 0, 1e300, "x", [], {}, [1, 2], True]


def _npz_mutant(source: pathlib.Path, seed: str, path: pathlib.Path) -> None:
    """Write to ``path`` an ``.npz`` derived from ``source``: raw damage (a byte changed, the file
    truncated), an entry deleted, an entry replaced by an array of another shape or dtype
    (object arrays included), or one value of the JSON metadata replaced by another type."""
    rng = random.Random(seed)
    kind = rng.randrange(5)
    if kind < 2:
        path.write_bytes(_binary_mutant(source.read_bytes(), seed))
        return
    with np.load(source, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    name = rng.choice(sorted(arrays))
    if kind == 2:
        del arrays[name]
    elif kind == 3 or name != "meta":
        old = arrays[name]
        shape = rng.choice([(), (0,), (1,), (7,), (2, 3), old.shape + (1,), old.shape[1:]])
        dtype = rng.choice([np.float64, np.float32, np.int64, np.bool_, np.complex128, "U3", object])
        arrays[name] = np.zeros(shape, dtype=dtype)
        if arrays[name].dtype == np.float64 and arrays[name].size:
            arrays[name].flat[0] = rng.choice([np.nan, np.inf, -1.0, 1e308])
    else:
        meta = json.loads(str(arrays["meta"]))
        node = meta
        for _ in range(6):  # walk down a random path, then replace the value found there
            keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = rng.choice(keys)
            if isinstance(node[key], (dict, list)) and node[key] and rng.random() < 0.5:
                node = node[key]
                continue
            node[key] = rng.choice(_ODD_VALUES)
            break
        arrays["meta"] = np.array(json.dumps(meta))
    with open(path, "wb") as f:
        np.savez(f, **arrays)  # object arrays are pickled: the readers must refuse, not unpickle


def _assert_clean(read, path: pathlib.Path, seed: str) -> None:
    """``read(path)`` returns, or raises a ValueError naming the file; nothing else. Warnings are
    allowed (a mutated inertia the SpaceDyn readers accept as SpaceDyn does, with a warning)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            read(path)
    except ValueError as err:
        assert path.name in str(err), f"seed {seed!r}: the message does not name the file: {err}"
    except Exception as err:  # noqa: BLE001 (the property under test: no other exception)
        pytest.fail(f"seed {seed!r}: {type(err).__name__} instead of a ValueError naming the file: {err}")


def _campaign(read, path: pathlib.Path, source: bytes, prefix: str, mutate=_mutant) -> None:
    """``MUTANTS`` mutants of ``source`` written to ``path`` (seeds ``prefix-0``, ``prefix-1``, ...),
    each read cleanly (:func:`_assert_clean`)."""
    for k in range(MUTANTS):
        seed = f"{prefix}-{k}"
        path.write_bytes(mutate(source, seed))
        _assert_clean(read, path, seed)


TEXT_SOURCES = [
    "spacedyn_sample.def",
    "dh_arm.dh",
    "spacedyn_sample_v1r2.json",
    "satellite_arm7.urdf",
    "two_arm_servicer.urdf",
    "mimic_gripper.urdf",
]


@pytest.mark.parametrize("name", TEXT_SOURCES)
def test_text_model_readers(name, tmp_path):
    source = (DATA / name).read_bytes()
    _campaign(load_model, tmp_path / f"mutant{pathlib.Path(name).suffix}", source, name)


def test_sdjax_json_model_reader(tmp_path):
    """The sdjax-model JSON format (the LP JSON is among TEXT_SOURCES)."""
    save_model(spacedyn_sample(), tmp_path / "sample.json")
    source = (tmp_path / "sample.json").read_bytes()
    _campaign(load_model, tmp_path / "mutant.json", source, "sdjax-json")


def test_mjcf_reader(tmp_path, monkeypatch):
    pytest.importorskip("mujoco")
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory
    from sdjax.io.mjcf import to_mjcf

    source = to_mjcf(spacedyn_sample()).encode()
    _campaign(load_model, tmp_path / "mutant.xml", source, "mjcf")


def test_mat_reader(tmp_path):
    """Damaged ``.mat`` files: SciPy's reader alone crashes the interpreter (segmentation fault) on
    some (1 of these 100: seed ``"mat-29"``; in the first campaign a truncated file whose first
    element declared more bytes than remained); the structure check in :mod:`sdjax.io.spacedyn_mat`
    refuses them first (a crash here fails the whole run)."""
    pytest.importorskip("scipy")
    save_model(spacedyn_sample(), tmp_path / "sample.mat")
    source = (tmp_path / "sample.mat").read_bytes()
    _campaign(load_model, tmp_path / "mutant.mat", source, "mat", mutate=_binary_mutant)


def test_mat_reader_structure_checks(tmp_path):
    """The structure check itself: a truncated element, a compressed element expanding beyond
    the cap, and a dimension/size mismatch are each refused with the file named; valid files
    written by SciPy in both layouts (plain and compressed) pass."""
    import scipy.io

    from sdjax.io import spacedyn_mat

    lp = {
        "BB": np.array([[0.0, 1.0]]),
        "J_type": "RR",
        "cells": np.array(["R", "P"], dtype=object),
        "nested": {"a": np.eye(2)},
    }
    for compressed in (False, True):
        scipy.io.savemat(tmp_path / "ok.mat", {"LP": lp}, do_compression=compressed)
        spacedyn_mat._check_mat5(str(tmp_path / "ok.mat"), spacedyn_mat.MAX_EXPANDED_BYTES)
    scipy.io.savemat(tmp_path / "plain.mat", {"x": np.arange(6.0)})
    data = (tmp_path / "plain.mat").read_bytes()
    (tmp_path / "short.mat").write_bytes(data[:-9])
    with pytest.raises(
        ValueError,
        match=r"short\.mat: not a readable MATLAB \.mat file \(byte 128: element of \d+ bytes runs past its end",
    ):
        load_model(tmp_path / "short.mat")
    # The 6 doubles' data element (type miDOUBLE = 9, 48 bytes) declared as 40 bytes: the sizes
    # no longer agree with the 1x6 dimensions (SciPy writes a vector as a row).
    at = data.index((9).to_bytes(4, "little") + (48).to_bytes(4, "little"))
    (tmp_path / "mismatch.mat").write_bytes(
        data[:at] + (9).to_bytes(4, "little") + (40).to_bytes(4, "little") + data[at + 8 :]
    )
    with pytest.raises(ValueError, match=r"mismatch\.mat: .*40 data bytes for a 1x6 array"):
        load_model(tmp_path / "mismatch.mat")
    scipy.io.savemat(
        tmp_path / "zeros.mat", {"x": np.zeros(100_000)}, do_compression=True
    )  # 800 kB of zeros compress to ~1 kB
    with pytest.raises(ValueError, match=r"zeros\.mat: .*expands beyond the size limit"):
        spacedyn_mat._check_mat5(str(tmp_path / "zeros.mat"), 100_000)


@pytest.fixture(scope="module")
def saved_files(tmp_path_factory):
    """A run file and a Monte-Carlo results file, written by the library."""
    from sdjax.montecarlo import MonteCarloResults
    from sdjax.simulation import SimulationRun

    folder = tmp_path_factory.mktemp("saved")
    model = spacedyn_sample()
    trajectory = sdjax.rollout(model, random_state(model, 0), 0.01, 3)
    SimulationRun(model, trajectory, info={"dt": 0.01}).save(folder / "run.npz")
    MonteCarloResults({"peak": np.arange(5.0)}, {"mass": np.ones((5, 2))}, 1, 5, {"steps": 3}).save(folder / "mc.npz")
    return folder


@pytest.mark.parametrize("name", ["run.npz", "mc.npz"])
def test_npz_readers(name, saved_files, tmp_path):
    from sdjax.montecarlo import MonteCarloResults
    from sdjax.simulation import load_run

    read = load_run if name == "run.npz" else MonteCarloResults.load
    path = tmp_path / "mutant.npz"
    for k in range(MUTANTS):
        seed = f"{name}-{k}"
        _npz_mutant(saved_files / name, seed, path)
        _assert_clean(read, path, seed)
    # The pristine file still reads (the mutants above are not refused for a reason they share).
    read(saved_files / name)


def test_mutants_differ_from_their_sources():
    """The generator edits: most mutants differ from the source (the fuzz tests are not vacuous)."""
    source = (DATA / "satellite_arm7.urdf").read_bytes()
    changed = sum(_mutant(source, f"x-{k}") != source for k in range(50))
    assert changed >= 45  # an edit can be a no-op (a line swapped with itself, a truncation at the end)


#: Mutants that broke a reader before it was fixed (seed -> what happened then).
FOUND = {
    "mimic_gripper.urdf-7": "an inertia of 1e308: overflow (RuntimeWarning) in the inertia check",
    "mimic_gripper.urdf-33": "a joint axis of 1e308: overflow in its norm",
    "mjcf-1140": "axis 0 1e308 1: MuJoCo compiles it to zero, divided by its zero norm",
    "mjcf-1513": "a body quat with 1e308: compiled to zero, divided by its zero norm",
    "run.npz-87": "meta info a list: a ValueError from dict() without the file name",
    "run.npz-460": "meta dtype []: NumPy's empty structured dtype, a TypeError from JAX",
    "mc.npz-163": "a damaged zip header: NotImplementedError from zipfile",
    "mat-29": "a damaged .mat: SciPy's loadmat crashed the interpreter (segmentation fault)",
}


@pytest.mark.parametrize("seed", sorted(FOUND))
def test_seeds_that_found_bugs(seed, saved_files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes its warnings to MUJOCO_LOG.TXT in the working directory
    from sdjax.io.mjcf import to_mjcf
    from sdjax.montecarlo import MonteCarloResults
    from sdjax.simulation import load_run

    source_name = seed.rsplit("-", 1)[0]
    if source_name == "mat":
        save_model(spacedyn_sample(), tmp_path / "sample.mat")
        path = tmp_path / "mutant.mat"
        path.write_bytes(_binary_mutant((tmp_path / "sample.mat").read_bytes(), seed))
        read = load_model
    elif source_name.endswith(".npz"):
        path = tmp_path / "mutant.npz"
        _npz_mutant(saved_files / source_name, seed, path)
        read = load_run if source_name == "run.npz" else MonteCarloResults.load
    else:
        if source_name == "mjcf":
            pytest.importorskip("mujoco")
        source = to_mjcf(spacedyn_sample()).encode() if source_name == "mjcf" else (DATA / source_name).read_bytes()
        path = tmp_path / ("mutant.xml" if source_name == "mjcf" else f"mutant{pathlib.Path(source_name).suffix}")
        path.write_bytes(_mutant(source, seed))
        read = load_model
    with pytest.raises(ValueError, match=re.escape(path.name)):
        read(path)
