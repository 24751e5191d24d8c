"""SpaceDyn C++ ``.def`` model files (sdjax.io.spacedyn_def).

Reference: ``tests/data/spacedyn_sample.def`` is the SpaceDyn v1.2 sample robot written by
hand in the C++ writer's layout; :func:`sdjax.models.spacedyn_sample` builds the same robot
from SpaceDyn's MATLAB arrays (``sample_v1r2.m``), an independent description.
"""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest

from sdjax.io.spacedyn_def import model_from_def, model_to_def, save_def
from sdjax.models import random_model, spacedyn_sample
from helpers import MODEL_ARRAY_FIELDS

DATA = pathlib.Path(__file__).parent / "data"
SAMPLE = (DATA / "spacedyn_sample.def").read_text()
ARRAYS = MODEL_ARRAY_FIELDS


def _upper(tensors: np.ndarray) -> np.ndarray:
    """Inertia tensors rebuilt from their upper triangle (what a .def file stores)."""
    return np.triu(tensors) + np.swapaxes(np.triu(tensors, 1), -1, -2)


def assert_same_model(a, b, angle_atol: float = 0.0) -> None:
    assert a.parent == b.parent and a.joint_type == b.joint_type and a.end_point_link == b.end_point_link
    for field in ARRAYS:
        atol = angle_atol if field.endswith("rpy") else 0.0
        want = np.asarray(getattr(b, field))
        if field.endswith("inertia"):
            # Built tensors (R I R^T) are symmetric only to round-off; the file keeps one triangle.
            want = _upper(want)
        np.testing.assert_allclose(np.asarray(getattr(a, field)), want, rtol=0, atol=atol, err_msg=field)


def test_sample_file_is_the_spacedyn_sample():
    model = model_from_def(DATA / "spacedyn_sample.def")
    # Identical arrays: the file's numbers are exact in binary and deg2rad(+-90) == +-pi/2.
    assert_same_model(model, spacedyn_sample())
    assert model.name == "spacedyn_sample"


def test_layout_variants_give_the_same_model():
    reference = spacedyn_sample()
    # LINK_NUMBER counting links (6) instead of bodies (7).
    assert_same_model(model_from_def(SAMPLE.replace("###LINK_NUMBER 7", "###LINK_NUMBER 6")), reference)
    # The second vector labelled CtoJ_i_i (centroid -> joint, read by its name: no sign change).
    variant = re.sub(r"JtoC_(\d)_\1\[ 0 0 0.5 \]", r"CtoJ_\1_\1[ 0 0 -0.5 ]", SAMPLE)
    assert "JtoC_3_3" not in variant and "CtoJ_3_3[ 0 0 -0.5 ]" in variant
    assert_same_model(model_from_def(variant), reference)
    # EE as 0/1 flags (SpaceDyn's SE), and CtoE/rpyE labelled by link number.
    assert_same_model(model_from_def(SAMPLE.replace("EE[ 0 0 1 0 0 2 ]", "EE[ 0 0 1 0 0 1 ]")), reference)
    by_link = (
        SAMPLE.replace("CtoE_1", "CtoE_3")
        .replace("CtoE_2", "CtoE_6")
        .replace("rpyE_1", "rpyE_3")
        .replace("rpyE_2", "rpyE_6")
    )
    assert_same_model(model_from_def(by_link), reference)
    # Values spread over lines, inline comments, several inertia entries on one line, no rpyE.
    compact = SAMPLE.replace("BB[ 0 1 2 0 4 5 ]", "BB[ 0 1 2   # arm 1\n 0 4 5 ]  # arm 2")
    compact = compact.replace("I11= 10\nI22= 10\nI33= 10", "I11=10 I22= 10  I33 = 10")
    compact = compact.replace("rpyE_1[ 0 0 90 ]", "").replace("rpyE_2[ 0 0 90 ]", "")
    model = model_from_def(compact, name="compact")
    assert model.name == "compact"
    np.testing.assert_array_equal(model.end_point_rpy, 0.0)
    np.testing.assert_array_equal(model.link_inertia, reference.link_inertia)


def test_end_point_numbers_and_inertia_products():
    # EE numbers end points out of link order: end point 1 is on link 6.
    text = SAMPLE.replace("EE[ 0 0 1 0 0 2 ]", "EE[ 0 0 2 0 0 1 ]").replace("CtoE_1[ 0 0.5 0 ]", "CtoE_1[ 0 0.7 0 ]")
    model = model_from_def(text)
    assert model.end_point_link == (3, 6)
    np.testing.assert_array_equal(model.centroid_to_end_point, [[0, 0.5, 0], [0, 0.7, 0]])
    # Products of inertia are the tensor's off-diagonal entries, symmetric.
    text = SAMPLE.replace(
        "###Link0\nI11= 10\nI22= 10\nI33= 10\nI12= 0\nI13= 0\nI23= 0",
        "###Link0\nI11= 10\nI22= 9\nI33= 8\nI12= -0.5\nI13= 0.25\nI23= -0.125",
    )
    np.testing.assert_array_equal(
        model_from_def(text).base_inertia, [[10, -0.5, 0.25], [-0.5, 9, -0.125], [0.25, -0.125, 8]]
    )


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_round_trip(seed, tmp_path):
    model = random_model(seed, 7)  # branches, prismatic joints, end points, products of inertia
    path = tmp_path / "m.def"
    save_def(model, path)
    back = model_from_def(path)
    # Lengths, masses and inertias are written with shortest round-trip reprs (exact); angles
    # go through degrees and back, a few ulp of |angle| <= pi: 1e-15 rad.
    assert_same_model(back, model, angle_atol=1e-15)
    assert back.name == "m"
    assert_same_model(model_from_def(model_to_def(spacedyn_sample())), spacedyn_sample())


def test_writer_refuses_passive_joints():
    with pytest.raises(
        ValueError, match=r"model_to_def: link 1 \('link1'\) has joint_stiffness .* the .def format has none"
    ):
        model_to_def(random_model(0, 3, passive=True))


def _edit(old: str, new: str) -> str:
    assert old in SAMPLE, old
    return SAMPLE.replace(old, new, 1)


@pytest.mark.parametrize(
    "text, message",
    [
        (_edit("###LINK_NUMBER 7", "###LINK_NUMBERS"), "missing ###LINK_NUMBER line|line 6: LINK_NUMBER expects one"),
        (
            _edit("###LINK_NUMBER 7", "###LINK_NUMBER seven"),
            "line 6: LINK_NUMBER expects one non-negative integer, got 'seven'",
        ),
        (_edit("###LINK_NUMBER 7", "###LINK_NUMBER \u00b2"), "line 6: LINK_NUMBER expects one non-negative integer"),
        (_edit("###LINK_NUMBER 7", "###LINK_NUMBER " + "9" * 5000), r"line 6: LINK_NUMBER expects .*\.\.\.'$"),
        (
            _edit("###LINK_NUMBER 7", "###LINK_NUMBER 7\n###LINK_NUMBER 7"),
            r"line 7: LINK_NUMBER given twice \(first on line 6\)",
        ),
        (_edit("###LINK_NUMBER 7", "###LINK_NUMBER 99999"), "line 6: LINK_NUMBER 99999 exceeds the limit"),
        (_edit("###LINK_NUMBER 7", ""), "missing ###LINK_NUMBER line"),
        (
            _edit("###LINK_NUMBER 7", "###LINK_NUMBER 5"),
            r"line 9: BB: expected 4 entries \(LINK_NUMBER 5 bodies on line 6\) or 5 \(links\), got 6",
        ),
        (
            _edit("BB[ 0 1 2 0 4 5 ]", "BB[ 0 1 2 0 4 6 ]"),
            "line 9: BB: entry 6 is 6; the parent of link 6 must be a lower body 0..5",
        ),
        (_edit("BB[ 0 1 2 0 4 5 ]", "BB[ 0 1 2 0 4 1.5 ]"), "line 9: BB: '1.5' is not an integer"),
        (
            _edit("J_type[ 0 0 1 0 0 1 ]", "J_type[ 0 0 2 0 0 1 ]"),
            r"line 12: J_type: entry 3 is 2; unknown joint type \(0 = revolute, 1 = prismatic\)",
        ),
        (_edit("J_type[ 0 0 1 0 0 1 ]", "J_type[ 0 0 1 0 0 ]"), r"line 12: J_type: expected 6 value\(s\), got 5"),
        (_edit("J_type[ 0 0 1 0 0 1 ]", ""), r"missing block J_type\["),
        (
            _edit("EE[ 0 0 1 0 0 2 ]", "EE[ 0 0 1 0 0 3 ]"),
            r"line 15: EE: end-point numbers \[1, 3\] must be 0/1 flags or exactly 1..2",
        ),
        (_edit("EE[ 0 0 1 0 0 2 ]", "EE[ 0 0 1 0 0 -1 ]"), "line 15: EE: entries must be 0"),
        (_edit("rpy2[ 90 0 0 ]", "rpy2[ 90 zero 0 ]"), "line 19: rpy2: 'zero' is not a number"),
        (_edit("rpy2[ 90 0 0 ]", "rpy2[ 90 1_0 0 ]"), "line 19: rpy2: '1_0' is not a number"),
        (_edit("rpy2[ 90 0 0 ]", "rpy2[ 90 inf 0 ]"), "line 19: rpy2: 'inf' is not a finite number"),
        (_edit("rpy2[ 90 0 0 ]", "rpy2[ 90 0 ]"), r"line 19: rpy2: expected 3 value\(s\), got 2"),
        (_edit("rpy3[ 0 0 0 ]", ""), r"missing block rpy3\["),
        (_edit("rpy3[ 0 0 0 ]", "rpy3[ 0 0 0 ]\nrpy3[ 0 0 0 ]"), r"line 21: rpy3 given twice \(first on line 20\)"),
        (
            _edit("rpy6[ 0 0 0 ]", "rpy6[ 0 0 0 ]\nrpy7[ 0 0 0 ]"),
            r"line 24: rpy7: unknown or unused key \(links 1..6, end points 1..2\)",
        ),
        (_edit("CtoJ_0_4", "CtoJ_1_4"), r"line 36: CtoJ_1_4: link 4 has parent 0 in BB \(line 9\); expected CtoJ_0_4"),
        (_edit("CtoJ_4_5[ 0 0 0.5 ]", ""), r"missing block CtoJ_4_5\["),
        (
            _edit("JtoC_2_2[ 0 0 0.5 ]", "JtoC_2_2[ 0 0 0.5 ]\nCtoJ_2_2[ 0 0 -0.5 ]"),
            r"line 32: CtoJ_2_2: link 2 has both JtoC_2_2 \(line 31\) and CtoJ_2_2; give one",
        ),
        (_edit("JtoC_0_0[ 0 0 0 ]", "JtoC_0_0[ 0 0 1 ]"), r"line 26: JtoC_0_0: must be \[ 0 0 0 \]"),
        (_edit("JtoC_5_5[ 0 0 0.5 ]", ""), r"missing block JtoC_5_5\["),
        (
            _edit("CtoE_2", "CtoE_4"),
            r"CtoE blocks \[1, 4\]: expected CtoE_1..CtoE_2 .* or CtoE_<link> for the end-point links \[3, 6\]",
        ),
        (
            _edit("mass[ 100 10 10 10 10 10 10 ]", "mass[ 100 10 10 10 10 10 ]"),
            r"line 54: mass: expected 7 value\(s\), got 6",
        ),
        (
            _edit("mass[ 100 10 10 10 10 10 10 ]", "mass[ 100 10 10 10 10 10 -10 ]"),
            r"link_mass\[5\]: link 6 \('link6'\) mass must be non-negative",
        ),
        (
            _edit("###Link6\nI11= 1\n", "###Link6\n"),
            r"I11=: expected 7 entries \(base and 6 links, in order\), got 6 \(lines",
        ),
        (_edit("###Link6\nI11= 1\n", "###Link6\nI11= one\n"), "line 110: I11: 'one' is not a number"),
        (_edit("###Link6\nI11= 1\n", "###Link6\nI11=\n"), r"line 110: I11: expected 1 value\(s\), got 0"),
        (
            _edit("BB[ 0 1 2 0 4 5 ]", "BB[ 0 1 2 0 4 5"),
            r"line 9: BB\[ has no closing '\]' before the next block on line 12",
        ),
        (
            _edit("mass[ 100 10 10 10 10 10 10 ]", "mass[ 100 10 10 10 10 10 10"),
            r"line 54: mass\[ has no closing '\]'$",
        ),
        (_edit("###EOF 777", "EOF 777"), "line 117: cannot read 'EOF 777'"),
        (
            _edit("###Link2\nI11= 1\nI22= 0.1\nI33= 1", "###Link2\nI11= 1\nI22= 0.1\nI33= -5"),
            "link 2.*not positive semidefinite",
        ),
    ],
)
def test_malformed(text, message):
    with pytest.raises(ValueError, match=message):
        model_from_def(text)


def test_unphysical_inertia_is_accepted_as_spacedyn_does():
    """Principal moments (1, 0.1, 5) break the triangle inequality: SpaceDyn simulates such
    a model, so the reader accepts it with one warning naming the link; "physical" refuses."""
    text = _edit("###Link2\nI11= 1\nI22= 0.1\nI33= 1", "###Link2\nI11= 1\nI22= 0.1\nI33= 5")
    with pytest.warns(
        UserWarning, match=r"\.def text: the inertia tensors of link 2 .* violate the triangle inequality"
    ):
        model = model_from_def(text)
    assert float(model.link_inertia[1, 2, 2]) == 5.0
    with pytest.raises(ValueError, match=r"link 2.*triangle inequality.*inertia_check='positive_definite'"):
        model_from_def(text, inertia_check="physical")


def test_file_errors(tmp_path, monkeypatch):
    import sdjax.io.spacedyn_def as module

    with pytest.raises(ValueError, match="no such .def file"):
        model_from_def(tmp_path / "missing.def")
    path = tmp_path / "big.def"
    path.write_text(SAMPLE)
    monkeypatch.setattr(module, "MAX_FILE_BYTES", 100)
    with pytest.raises(ValueError, match="bytes exceeds the .def size limit of 100"):
        model_from_def(path)
