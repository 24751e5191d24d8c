"""One entry point for model files (sdjax.io.loader) and the DH table file format
(sdjax.io.dh.model_from_dh_file)."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

import sdjax
from sdjax.io import dh_matrix, euler123_to_matrix, load_model, model_from_dh, model_from_dh_file, save_model
from sdjax.models import random_model, spacedyn_sample
from helpers import MODEL_ARRAY_FIELDS

DATA = pathlib.Path(__file__).parent / "data"
FIELDS = MODEL_ARRAY_FIELDS


def _same(a: sdjax.Model, b: sdjax.Model, atol: float = 0.0) -> None:
    assert (a.parent, a.joint_type, a.end_point_link) == (b.parent, b.joint_type, b.end_point_link)
    for field in FIELDS:
        np.testing.assert_allclose(
            np.asarray(getattr(a, field)), np.asarray(getattr(b, field)), rtol=0, atol=atol, err_msg=field
        )


# ------------------------------------------------------------------------------------------
# load_model / save_model.


def test_load_dispatches_on_suffix(tmp_path):
    from sdjax.io.urdf import model_from_urdf
    from sdjax.io.spacedyn_def import model_from_def

    _same(load_model(DATA / "spacedyn_sample.def"), model_from_def(DATA / "spacedyn_sample.def"))
    _same(load_model(DATA / "satellite_arm7.urdf"), model_from_urdf(DATA / "satellite_arm7.urdf"))
    _same(load_model(DATA / "dh_arm.dh"), model_from_dh_file(DATA / "dh_arm.dh"))
    # Suffixes are case-insensitive; dtype is passed on.
    upper = tmp_path / "ARM.URDF"
    shutil.copy(DATA / "satellite_arm7.urdf", upper)
    assert load_model(str(upper), dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("suffix", [".json", ".urdf", ".def"])
def test_save_then_load(suffix, tmp_path):
    model = random_model(4, 5)  # branches, prismatic joints, end points; no passive joints
    path = tmp_path / f"model{suffix}"
    save_model(model, path)
    back = load_model(path)
    if suffix == ".urdf":
        # URDF frames are re-expressed and its default end points are the leaves: compare the
        # dynamics (inertia matrix) at a random state instead of fields. 1e-13: only the
        # joint-frame angles change, by round-off (URDF rpy <-> SpaceDyn RPY).
        from helpers import random_state

        state = random_state(model, 0)
        h0, h1 = sdjax.inertia_matrix(model, state), sdjax.inertia_matrix(back, state)
        assert float(np.max(np.abs(h1 - h0))) < 1e-13 * float(np.max(np.abs(h0)))
    else:
        # JSON is exact; .def writes angles in degrees (a few ulp) and one inertia triangle.
        _same(back, model, atol=1e-13)


def test_loader_errors(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"unknown model-file suffix '.stl'; known: \['.def', '.dh', '.json', '.mat', '.mjcf', '.urdf', '.xml'\]",
    ):
        load_model(tmp_path / "robot.stl")
    with pytest.raises(ValueError, match="missing.urdf: no such model file"):
        load_model(tmp_path / "missing.urdf")
    with pytest.raises(
        ValueError, match=r"no model writer for suffix '.dh'; writers exist for \['.def', '.json', '.mat', '.urdf'\]"
    ):
        save_model(spacedyn_sample(), tmp_path / "arm.dh")
    with pytest.raises(ValueError, match="link 1 .* joint stiffness"):
        save_model(random_model(0, 3, passive=True), tmp_path / "passive.urdf")
    with pytest.raises(ValueError, match="line 6: LINK_NUMBER expects one"):
        bad = tmp_path / "bad.def"
        bad.write_text((DATA / "spacedyn_sample.def").read_text().replace("###LINK_NUMBER 7", "###LINK_NUMBER x"))
        load_model(bad)
    for suffix in (".def", ".json", ".dh", ".urdf"):  # text formats: a binary or Latin-1 file names itself
        latin = tmp_path / f"latin{suffix}"
        latin.write_bytes(b"caf\xe9 \xff\xfe")
        with pytest.raises(ValueError, match=f"latin{suffix}: not a UTF-8 text .* file"):
            load_model(latin)


# ------------------------------------------------------------------------------------------
# DH table files.


def test_dh_file_matches_the_table():
    model = model_from_dh_file(DATA / "dh_arm.dh")
    deg = np.pi / 180
    direct = model_from_dh(
        d=[0.25, 0.0, 0.3, 0.1, 0.0],
        theta_offset=np.array([0, 30, 0, -45, 0]) * deg,
        alpha=np.array([90, 0, -90, 90, 0]) * deg,
        a=[0.0, 0.5, 0.2, 0.05, 0.1],
        b=[0.1, 0.5, 0.1, 0.05, 0.25],
        link_mass=[9, 20, 7, 4, 3],
        link_inertia=[
            [[0.06, 0.001, 0], [0.001, 0.05, 0], [0, 0, 0.04]],
            [[0.05, 0, 0.01], [0, 1.7, 0], [0.01, 0, 1.7]],
            np.diag([0.3, 0.3, 0.02]),
            [[0.01, 0, 0], [0, 0.012, 0.001], [0, 0.001, 0.011]],
            np.diag([0.008, 0.009, 0.007]),
        ],
        base_mass=300,
        base_inertia=[[40, 1.5, -0.5], [1.5, 45, 0.25], [-0.5, 0.25, 35]],
        joint_type="RRPRR",
        mount_position=[0.6, 0.1, 0.4],
        mount_euler=np.array([10, 80, -30]) * deg,
        joint_stiffness=[0, 0, 50, 0, 0],
        joint_damping=[0.5, 0, 2, 0, 0],
        gravity=[0, 0, -1.62],
    )
    _same(model, direct)
    assert model.name == "dh_test_arm"


def test_dh_file_end_effector_follows_the_dh_chain():
    """sdjax's end point equals the end-effector frame J_EE of the DH chain of homogeneous
    transforms (eqs 1, 8, 9), evaluated independently with dh_matrix."""
    model = model_from_dh_file(DATA / "dh_arm.dh")
    deg = np.pi / 180
    d = np.array([0.25, 0.0, 0.3, 0.1, 0.0])
    theta = np.array([0, 30, 0, -45, 0]) * deg
    alpha = np.array([90, 0, -90, 90, 0]) * deg
    c = np.array([0.0, 0.5, 0.2, 0.05, 0.1]) + np.array([0.1, 0.5, 0.1, 0.05, 0.25])
    rng = np.random.default_rng(3)
    for _ in range(3):
        q = rng.uniform(-1, 1, size=5)
        state = sdjax.make_state(model, q=q)  # base at the origin, base frame = inertial frame
        kin = sdjax.forward_kinematics(model, state)
        t = np.eye(4)
        t[:3, :3] = euler123_to_matrix(np.array([10, 80, -30]) * deg)
        t[:3, 3] = [0.6, 0.1, 0.4]
        for i in range(5):
            revolute = model.joint_type[i] == "R"
            t = t @ dh_matrix(
                theta[i] + (q[i] if revolute else 0.0), d[i] + (0.0 if revolute else q[i]), alpha[i], c[i]
            )
        # Metres and rotation entries of O(1) through 6 chained transforms: round-off ~1e-15.
        np.testing.assert_allclose(kin.end_point_position[0], t[:3, 3], rtol=0, atol=1e-13)
        np.testing.assert_allclose(kin.end_point_rotation[0], t[:3, :3], rtol=0, atol=1e-13)


_DH_HEAD = "sdjax-dh 1\nbase_mass 10\nbase_inertia 1 1 1 0 0 0\n"
_DH_TABLE = "joints\ntype d theta_offset alpha a b mass ixx iyy izz ixy ixz iyz\n"
_DH_ROW = "R 0.1 0 0 0.1 0.1 1 0.01 0.01 0.01 0 0 0\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "line 1: the first line must be 'sdjax-dh 1'"),
        ("sdjax-dh 2\n" + _DH_TABLE + _DH_ROW, "line 1: the first line must be 'sdjax-dh 1'"),
        (_DH_HEAD + "colour red\n" + _DH_TABLE + _DH_ROW, "line 4: unknown setting 'colour'"),
        (_DH_HEAD + "base_mass 11\n" + _DH_TABLE + _DH_ROW, r"line 4: base_mass given twice \(first on line 2\)"),
        (_DH_HEAD + "gravity 0 0\n" + _DH_TABLE + _DH_ROW, r"line 4: gravity expects 3 value\(s\), got 2"),
        (_DH_HEAD + "gravity 0 0 g\n" + _DH_TABLE + _DH_ROW, "line 4: gravity must be numbers, got '0 0 g'"),
        (_DH_HEAD + "angle_unit grad\n" + _DH_TABLE + _DH_ROW, "line 4: angle_unit must be 'rad' or 'deg', got 'grad'"),
        ("sdjax-dh 1\nbase_inertia 1 1 1 0 0 0\n" + _DH_TABLE + _DH_ROW, "missing setting 'base_mass'"),
        (_DH_HEAD, "missing the 'joints' line and joint table"),
        (_DH_HEAD + "joints\n", "line 4: 'joints' must be followed by the column header and at least one row"),
        (
            _DH_HEAD + "joints\ntype d alpha theta_offset a b mass ixx iyy izz ixy ixz iyz\n" + _DH_ROW,
            "line 5: the column header must be type d theta_offset",
        ),
        (_DH_HEAD + _DH_TABLE, "line 5: the joint table has no rows"),
        (_DH_HEAD + _DH_TABLE + "R 0.1 0 0 0.1 0.1 1 0.01 0.01 0.01 0 0\n", r"line 6: expected 13 columns"),
        (
            _DH_HEAD + _DH_TABLE + "S 0.1 0 0 0.1 0.1 1 0.01 0.01 0.01 0 0 0\n",
            "line 6: joint type 'S'; expected 'R' or 'P'",
        ),
        (
            _DH_HEAD + _DH_TABLE + "R 0.1 0 x 0.1 0.1 1 0.01 0.01 0.01 0 0 0\n",
            "line 6: the row values after the type must be numbers",
        ),
        (
            _DH_HEAD + _DH_TABLE + "R 0.1 0 0 0.1 0.1 -1 0.01 0.01 0.01 0 0 0\n",
            r"link_mass\[0\] \(link 1\) must be positive",
        ),
        (  # (Python's float() reads "1_0" as 10)
            _DH_HEAD + _DH_TABLE + "R 0.1 0 0 0.1 0.1 1_0 0.01 0.01 0.01 0 0 0\n",
            "line 6: the row values after the type must be numbers",
        ),
    ],
)
def test_dh_file_malformed(text, message, tmp_path):
    path = tmp_path / "arm.dh"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        model_from_dh_file(path)


def test_dh_file_limits(tmp_path, monkeypatch):
    import sdjax.io.dh as dh

    with pytest.raises(ValueError, match="no such DH file"):
        model_from_dh_file(tmp_path / "missing.dh")
    path = tmp_path / "arm.dh"
    path.write_text(_DH_HEAD + _DH_TABLE + _DH_ROW * 3)
    assert model_from_dh_file(path).num_joints == 3 and model_from_dh_file(path).name == "arm"
    monkeypatch.setattr(dh, "MAX_LINKS", 2)
    with pytest.raises(ValueError, match="3 joints exceeds the limit of 2"):
        model_from_dh_file(path)
    monkeypatch.setattr(dh, "MAX_DH_FILE_BYTES", 10)
    with pytest.raises(ValueError, match="bytes exceeds the DH file size limit of 10"):
        model_from_dh_file(path)


def _matlab_jsonencode(lp: dict) -> str:
    """SpaceDyn's LP struct as MATLAB's jsonencode writes it: matrices as lists of rows, row
    vectors as flat lists, 1x1 values as bare numbers, char arrays as strings."""

    def encode(value):
        if isinstance(value, str):
            return value
        arr = np.asarray(value)
        if arr.size == 1:
            return arr.reshape(()).item()
        return arr.tolist()

    return json.dumps({key: encode(value) for key, value in lp.items()})


@pytest.mark.parametrize("builder", [spacedyn_sample, lambda: random_model(5, 1)], ids=["sample", "one_link"])
def test_spacedyn_lp_json(tmp_path, builder):
    """load_model reads SpaceDyn's LP struct saved by MATLAB's jsonencode, exactly (JSON keeps
    every float64 digit), including a one-link model whose vectors jsonencode writes as numbers."""
    model = builder()
    path = tmp_path / "lp.json"
    path.write_text(_matlab_jsonencode(sdjax.model_to_spacedyn_arrays(model)))
    back = load_model(path)
    assert back.name == "lp" and back.parent == model.parent and back.joint_type == model.joint_type
    assert back.end_point_link == model.end_point_link
    for field in (
        "base_mass",
        "base_inertia",
        "link_mass",
        "link_inertia",
        "parent_centroid_to_joint",
        "centroid_to_joint",
        "joint_rpy",
        "centroid_to_end_point",
        "end_point_rpy",
    ):
        np.testing.assert_array_equal(getattr(back, field), getattr(model, field), err_msg=field)
    data = json.loads(path.read_text())
    data["cc"] = "oops"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"lp.json: SpaceDyn cc"):
        load_model(path)
    data.pop("cc")
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"lp.json: SpaceDyn LP: missing field\(s\) \['cc'\]"):
        load_model(path)


@pytest.mark.parametrize(
    "builder",
    [spacedyn_sample, lambda: random_model(5, 1), lambda: random_model(8, 6)],
    ids=["sample", "one_link", "tree"],
)
def test_spacedyn_lp_mat(tmp_path, builder):
    """load_model reads SpaceDyn's LP struct from a level 5 MAT-file, exactly, in the layouts
    MATLAB writes (vectors as 1 x n rows, scalars as 1 x 1), as a struct variable or one
    variable per field (save -struct), with J_type a char row or a cell array; save_model
    writes it back."""
    import scipy.io

    model = builder()
    lp = sdjax.model_to_spacedyn_arrays(model)
    fields = (
        "base_mass",
        "base_inertia",
        "link_mass",
        "link_inertia",
        "parent_centroid_to_joint",
        "centroid_to_joint",
        "joint_rpy",
        "centroid_to_end_point",
        "end_point_rpy",
    )

    def check(back, name):
        assert back.name == name and back.parent == model.parent and back.joint_type == model.joint_type
        assert back.end_point_link == model.end_point_link
        for field in fields:
            np.testing.assert_array_equal(getattr(back, field), getattr(model, field), err_msg=field)

    scipy.io.savemat(tmp_path / "robot.mat", {"LP": lp, "note": "a robot"}, oned_as="row")
    check(load_model(tmp_path / "robot.mat"), "robot")
    cells = dict(lp, J_type=np.array(list(lp["J_type"]), dtype=object))
    scipy.io.savemat(tmp_path / "fields.mat", cells, oned_as="column")  # save -struct, column vectors
    check(load_model(tmp_path / "fields.mat"), "fields")
    save_model(model, tmp_path / "again.mat")
    check(load_model(tmp_path / "again.mat"), "again")


def test_spacedyn_lp_mat_errors(tmp_path):
    import scipy.io

    lp = sdjax.model_to_spacedyn_arrays(spacedyn_sample())
    path = tmp_path / "two.mat"
    scipy.io.savemat(path, {"LP": lp, "LP2": lp})
    with pytest.raises(
        ValueError, match=r"two.mat: several link-parameter structs \['LP', 'LP2'\]; choose one with variable="
    ):
        load_model(path)
    assert sdjax.model_from_mat(path, variable="LP2").num_joints == 6
    with pytest.raises(ValueError, match=r"no variable 'LP3'; the file holds \['LP', 'LP2'\]"):
        sdjax.model_from_mat(path, variable="LP3")
    scipy.io.savemat(tmp_path / "none.mat", {"x": np.eye(3)})
    with pytest.raises(ValueError, match=r"none.mat: no SpaceDyn link parameters .* the file holds \['x'\]"):
        load_model(tmp_path / "none.mat")
    scipy.io.savemat(tmp_path / "short.mat", {"LP": {k: v for k, v in lp.items() if k != "cc"}})
    with pytest.raises(ValueError, match=r"short.mat: SpaceDyn LP: missing field\(s\) \['cc'\]"):
        load_model(tmp_path / "short.mat")
    # What NumPy would keep as an object or read as something else: a struct or a sparse matrix
    # where numbers go (SciPy's objects: a RecursionError before), complex numbers (the imaginary
    # part dropped), a char array for BB (a raw TypeError), text for a number ('1' read as 1.0).
    import scipy.sparse

    for field, value, message in (
        ("m", {"a": np.ones(3)}, r"SpaceDyn LP\.m: a MATLAB struct; expected numbers or chars"),
        ("c0", scipy.sparse.csc_matrix(lp["c0"]), r"SpaceDyn LP\.c0: a MATLAB sparse matrix; expected numbers"),
        ("c0", lp["c0"] + 5j, r"SpaceDyn LP\.c0: complex numbers; expected real numbers"),
        ("BB", "abc", r"SpaceDyn BB: expected integers, got text 'abc'"),
        ("m0", "1", r"SpaceDyn m0 must be real numbers \(expected real numbers, got text\)"),
    ):
        odd = {**{k: v for k, v in lp.items() if k != "num_q"}, field: value}  # (num_q is checked against BB first)
        scipy.io.savemat(tmp_path / "odd.mat", {"LP": odd})
        with pytest.raises(ValueError, match=r"odd\.mat: " + message):
            load_model(tmp_path / "odd.mat")
    (tmp_path / "junk.mat").write_bytes(b"not a mat file at all" * 10)
    with pytest.raises(ValueError, match="junk.mat: not a readable MATLAB .mat file"):
        load_model(tmp_path / "junk.mat")
    # A -v7.3 file (HDF5 with MATLAB's 128-byte header, version 0x0200) is refused with the fix.
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64".ljust(116, b" ") + b"\x00" * 8 + b"\x00\x02IM"
    (tmp_path / "v73.mat").write_bytes(header + b"\x00" * 512)
    with pytest.raises(
        ValueError, match=r"v73.mat: a MATLAB -v7.3 \(HDF5\) file; re-save it with save\('v73.mat', 'LP', '-v7'\)"
    ):
        load_model(tmp_path / "v73.mat")
