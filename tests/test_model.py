"""Model building, derived connection data, validation (every rule), file formats."""

import json
import re

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.io.json_model import MAX_LINKS
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample
from helpers import assert_close, random_state


def base_kwargs(n=3, **overrides):
    """Valid fields of a 3-link chain with an end point on link 3."""
    kwargs = dict(
        parent=tuple(range(n)),
        joint_type="R" * n,
        base_mass=50.0,
        base_inertia=np.diag([5.0, 6.0, 7.0]),
        link_mass=np.ones(n),
        link_inertia=np.tile(np.diag([0.1, 0.1, 0.05]), (n, 1, 1)),
        parent_centroid_to_joint=np.tile([0.0, 0.0, 0.5], (n, 1)),
        centroid_to_joint=np.tile([0.0, 0.0, -0.5], (n, 1)),
        end_point_link=(n,),
        centroid_to_end_point=[[0.0, 0.0, 0.5]],
    )
    kwargs.update(overrides)
    return kwargs


# ------------------------------------------------------------------------------------------
# Derived connection data of the SpaceDyn sample (seed 000 section 3.1 definitions).


def test_sample_connection_data(sample_model):
    m = sample_model
    assert m.parent == (0, 1, 2, 0, 4, 5)
    assert m.joint_type == ("R", "R", "P", "R", "R", "P")
    # S_ij = +1 if i = B_j, -1 if i = j (3.1 item 3); arms 1-2-3 and 4-5-6.
    expected_s = -np.eye(6, dtype=int)
    expected_s[0, 1] = expected_s[1, 2] = expected_s[3, 4] = expected_s[4, 5] = 1
    np.testing.assert_array_equal(m.incidence_matrix, expected_s)
    np.testing.assert_array_equal(m.base_incidence, [1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(m.end_link_flags, [0, 0, 1, 0, 0, 1])
    assert m.end_point_paths == ((1, 2, 3), (4, 5, 6))
    assert m.path_to_link(5) == (4, 5)
    assert float(m.total_mass) == 160.0
    assert m.num_velocities == 12


def test_branching_paths():
    m = sdjax.Model(
        **base_kwargs(5, parent=(0, 1, 1, 0, 4), end_point_link=(2, 3, 5), centroid_to_end_point=np.zeros((3, 3)))
    )
    assert m.end_point_paths == ((1, 2), (1, 3), (4, 5))
    np.testing.assert_array_equal(m.incidence_matrix[0], [-1, 1, 1, 0, 0])


def test_sample_matches_shared_model_file(sample_model):
    """The built-in sample equals the project's SpaceDyn v1.2 model file (tests/data copy)."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parent / "data" / "spacedyn_sample_v1r2.json"  # copy of shared/models
    data = json.loads(path.read_text())
    lp = {k: data[k] for k in ("BB", "J_type", "c0", "cc", "ce", "Qi", "Qe", "SE", "m0", "m", "inertia0", "inertia")}
    from_file = sdjax.model_from_lp(lp)
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
        np.testing.assert_array_equal(getattr(from_file, field), getattr(sample_model, field), err_msg=field)
    assert (from_file.parent, from_file.joint_type, from_file.end_point_link) == (
        sample_model.parent,
        sample_model.joint_type,
        sample_model.end_point_link,
    )


# ------------------------------------------------------------------------------------------
# Validation: each rule of DESIGN.md "Errors" has its own error.


@pytest.mark.parametrize(
    "overrides, pattern",
    [
        (dict(parent=(0, 2, 1)), r"Model\.parent\[1\].*link 2.*parent < link index"),
        (dict(parent=(0, -1, 1)), r"Model\.parent\[1\]"),
        (dict(joint_type="RXR"), r"Model\.joint_type\[1\]: unknown joint type 'X'.*link 2"),
        (dict(joint_type="RR"), r"Model\.joint_type: expected 3 joint types"),
        (dict(link_mass=[1.0, -1e-3, 1.0]), r"Model\.link_mass\[1\]: link 2.*mass must be non-negative"),
        (dict(link_mass=[1.0, 1.0, -2.0]), r"Model\.link_mass\[2\]: link 3.*mass must be non-negative"),
        (dict(base_mass=0.0), r"Model\.base_mass: mass must be positive"),
        (dict(link_mass=[1.0, 1.0]), r"Model\.link_mass: expected shape \(3,\)"),
        (dict(link_inertia=np.ones((3, 3))), r"Model\.link_inertia: expected shape \(3, 3, 3\)"),
        (dict(centroid_to_joint=np.zeros((3, 2))), r"Model\.centroid_to_joint: expected shape \(3, 3\)"),
        (dict(gravity=[0.0, 9.8]), r"Model\.gravity: expected shape \(3,\)"),
        (dict(end_point_link=(4,)), r"Model\.end_point_link\[0\]: body 4 does not exist"),
        (dict(end_point_link=(-1,)), r"Model\.end_point_link\[0\]: body -1 does not exist"),
        (
            dict(
                end_point_link=(3, 0),
                centroid_to_end_point=np.zeros((2, 3)),
                end_point_rpy=np.zeros((2, 3)),
                end_point_names=("a",),
            ),
            r"Model\.end_point_names: expected 2 names",
        ),
        (
            dict(
                end_point_link=(3, 3),
                centroid_to_end_point=np.zeros((2, 3)),
                end_point_rpy=np.zeros((2, 3)),
                end_point_names=("a", "a"),
            ),
            r"Model\.end_point_names: names must be unique, repeated: \['a'\]",
        ),
        (dict(end_point_link=(2, 3)), r"Model\.centroid_to_end_point: expected shape \(2, 3\)"),
        (dict(link_mass=[1.0, np.nan, 1.0]), r"Model\.link_mass\[1\] \(link 2 .*not finite"),
        (
            dict(parent_centroid_to_joint=[[0, 0, 1], [0, 0, np.inf], [0, 0, 1]]),
            r"parent_centroid_to_joint\[1, 2\] \(link 2.*not finite",
        ),
        (
            dict(centroid_to_end_point=[[0.0, np.nan, 0.0]]),
            r"centroid_to_end_point\[0, 1\] \(end point 'end_point1' on body 3\).*not finite",
        ),
        # A finite but absurd value (a corrupted file's 1e308) is refused before any product of
        # two model values could overflow.
        (dict(link_mass=[1.0, 1e308, 1.0]), r"Model\.link_mass\[1\] \(link 2 .*beyond 1e\+100 in size \(1e\+308\)"),
        (dict(joint_stiffness=[1.0, -1.0, 0.0]), r"Model\.joint_stiffness\[1\]: link 2.*non-negative"),
        (dict(joint_damping=[0.0, 0.0, -0.1]), r"Model\.joint_damping\[2\]: link 3.*non-negative"),
        (dict(link_names=("a", "b", "a")), r"link_names: names must be unique"),
        (dict(link_mass="heavy"), r"Model\.link_mass"),
    ],
)
def test_invalid_model_raises(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        sdjax.Model(**base_kwargs(**overrides))


def test_inertia_not_symmetric():
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    inertia[1, 0, 1] = 0.01
    with pytest.raises(ValueError, match=r"link_inertia\[1\]: inertia tensor of link 2 .* is not symmetric"):
        sdjax.Model(**base_kwargs(link_inertia=inertia))


def test_inertia_not_positive_definite():
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    inertia[2] = np.diag([0.1, -0.1, 0.1])
    with pytest.raises(ValueError, match=r"link_inertia\[2\]: inertia tensor of link 3 .* not positive semidefinite"):
        sdjax.Model(**base_kwargs(link_inertia=inertia))
    with pytest.raises(ValueError, match=r"base_inertia: inertia tensor of the base is not positive definite"):
        sdjax.Model(**base_kwargs(base_inertia=np.diag([1.0, -1.0, 1.0])))


def test_massless_and_inertia_less_links():
    """Zero mass and singular inertia are accepted while the inertia matrix H stays positive
    definite, and refused naming the joint when it does not (checked structurally, then H at
    two configurations)."""
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    # A massless, inertia-less middle link between two joints: its joint still moves link 3.
    # Had joints 2 and 3 been coaxial (all joints of base_kwargs turn about one line), they
    # would move link 3 alike and H would be singular: joint 3 is tilted by 90 degrees.
    inertia[1] = 0.0
    tilted = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [np.pi / 2, 0.0, 0.0]]
    with pytest.raises(
        ValueError, match=r"inertia matrix is singular at q = \[0.0, 0.0, 0.0\].*mostly along joint [23]"
    ):
        sdjax.Model(**base_kwargs(link_mass=[1.0, 0.0, 1.0], link_inertia=inertia))
    model = sdjax.Model(**base_kwargs(link_mass=[1.0, 0.0, 1.0], link_inertia=inertia, joint_rpy=tilted))
    h = np.asarray(sdjax.inertia_matrix(model, random_state(model, 0)))
    assert np.linalg.eigvalsh(h)[0] > 1e-6 * np.linalg.eigvalsh(h)[-1]  # well conditioned enough to factor
    # The same link as the last of the chain: its joint moves nothing.
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    inertia[2] = 0.0
    with pytest.raises(
        ValueError, match=r"joint 3 \(link 3 \('link3'\)\) moves no mass or inertia .*subtree \['link3'\]"
    ):
        sdjax.Model(**base_kwargs(link_mass=[1.0, 1.0, 0.0], link_inertia=inertia))
    # A thin rod along its own joint axis (z), centroid on the axis: positive mass, no inertia
    # about the axis, so joint 3 moves no kinetic energy: H is singular.
    inertia[2] = np.diag([0.1, 0.1, 0.0])
    with pytest.raises(ValueError, match=r"inertia matrix is singular at q = \[0.0, 0.0, 0.0\].*mostly along joint 3"):
        sdjax.Model(**base_kwargs(link_inertia=inertia))
    # The same rod with its centroid off the axis is a valid body (Pinocchio accepts both).
    sdjax.Model(**base_kwargs(link_inertia=inertia, centroid_to_joint=[[0.0, 0.0, -0.5]] * 2 + [[0.2, 0.0, -0.5]]))


def test_inertia_triangle_inequality():
    # Principal moments (1, 1, 3): 1 + 1 < 3, positive definite but not a rigid body.
    rot = np.asarray(sdjax.rpy_to_matrix(jnp.array([0.3, -0.2, 0.5])))
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    inertia[0] = rot @ np.diag([1.0, 1.0, 3.0]) @ rot.T
    with pytest.raises(
        ValueError,
        match=r"link_inertia\[0\]: inertia tensor of link 1 .* triangle inequality.*inertia_check='positive_definite'",
    ):
        sdjax.Model(**base_kwargs(link_inertia=inertia))
    accepted = sdjax.Model(
        **base_kwargs(link_inertia=inertia), inertia_check="positive_definite"
    )  # the explicit opt-out
    np.testing.assert_array_equal(accepted.link_inertia[0], inertia[0])
    with pytest.raises(ValueError, match=r"Model.inertia_check: unknown value 'loose'"):
        sdjax.Model(**base_kwargs(link_inertia=inertia), inertia_check="loose")
    # Equality (a flat plate: I3 = I1 + I2) is a valid rigid body.
    inertia[0] = np.diag([1.0, 2.0, 3.0])
    sdjax.Model(**base_kwargs(link_inertia=inertia))


def test_validation_skipped_for_traced_values_but_shapes_checked():
    import jax

    def build(mass):
        return sdjax.Model(**base_kwargs(link_mass=mass)).link_mass.sum()

    # Inside jit values are unknown: building works, and the mass is differentiable.
    assert float(jax.jit(build)(jnp.ones(3))) == 3.0
    with pytest.raises(ValueError, match="expected shape"):
        jax.jit(build)(jnp.ones(2))


def test_astype_and_dtype_argument():
    m = sdjax.Model(**base_kwargs(), dtype=jnp.float32)
    assert all(x.dtype == jnp.float32 for x in (m.link_mass, m.link_inertia, m.gravity))
    assert m.astype(jnp.float64).link_inertia.dtype == jnp.float64
    # A value the precision cannot hold is refused by field, whether the model is built in it
    # or cast to it (float32: 1e-50 becomes 0, a massless link; 1e39 becomes inf).
    for mass, becomes in [(1e-50, "0.0"), (1e39, "inf")]:
        kwargs = base_kwargs()
        kwargs["link_mass"] = np.array([1.0, mass, 1.0])
        message = re.escape(f"Model.link_mass[1]: {mass!r} is beyond the range of float32 (it becomes {becomes})")
        with pytest.raises(ValueError, match=message):
            sdjax.Model(**kwargs, dtype=jnp.float32)
        with pytest.raises(ValueError, match=message):
            sdjax.Model(**kwargs).astype(jnp.float32)


def test_stack_models():
    import equinox as eqx

    a = random_model(3, 4)
    b2 = eqx.tree_at(lambda m: m.base_mass, a, a.base_mass * 2)
    stacked = sdjax.stack_models([a, b2])
    assert stacked.link_inertia.shape == (2, 4, 3, 3)
    np.testing.assert_allclose(stacked.base_mass, [float(a.base_mass), 2 * float(a.base_mass)])
    with pytest.raises(ValueError, match="differs from model 0"):
        sdjax.stack_models([a, random_model(4, 4)])
    with pytest.raises(ValueError, match="at least one"):
        sdjax.stack_models([])


# ------------------------------------------------------------------------------------------
# SpaceDyn arrays.


def test_spacedyn_arrays_round_trip():
    for model in (spacedyn_sample(), free_flying_arm_7dof(), random_model(5, 9)):
        lp = sdjax.model_to_spacedyn_arrays(model)
        back = sdjax.model_from_lp(lp)
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
        assert back.parent == model.parent and back.end_point_link == model.end_point_link


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda lp: lp.update(BB=[0, 3, 2, 0, 4, 5]), r"BB\(2\) = 3: the parent of link 2"),
        (lambda lp: lp.update(J_type="RRPRR"), r"J_type: expected 6 joint types"),
        (lambda lp: lp["c0"].__setitem__((0, 1), 0.3), r"c0\(1, 2\).*must be zero.*attached to the base"),
        (lambda lp: lp["cc"].__setitem__((0, 0, 2), 0.3), r"cc\(:, 1, 3\).*link 3 is not a child of link 1"),
        (lambda lp: lp["ce"].__setitem__((1, 0), 0.3), r"ce\(2, 1\).*end point"),
        (lambda lp: lp["Qe"].__setitem__((1, 1), 0.3), r"Qe\(2, 2\).*end point"),
        (lambda lp: lp.update(SE=[0, 0, 2, 0, 0, 1]), r"SE: entries must be 0 or 1"),
        (lambda lp: lp.update(cc=np.zeros((3, 6, 5))), r"SpaceDyn cc expected shape \(3, 6, 6\)"),
        (lambda lp: lp.update(inertia=np.zeros((3, 17))), r"SpaceDyn inertia expected shape \(3, 18\)"),
        (lambda lp: lp.update(S0=[1, 0, 0, 0, 0, 0]), r"S0: .* does not match BB"),
        (lambda lp: lp.update(SS=np.eye(6)), r"SS: does not match BB"),
        (lambda lp: lp.update(mass=170.0), r"mass: 170.0 is not m0 \+ sum\(m\)"),
        (lambda lp: lp.update(num_q=5), r"num_q = 5 does not match"),
        (lambda lp: lp.pop("inertia0"), r"missing field\(s\) \['inertia0'\]"),
        (lambda lp: lp.update(Gravity=[0, 0, -9.8]), r"unknown field\(s\) \['Gravity'\]"),
    ],
)
def test_spacedyn_array_errors(change, pattern):
    lp = sdjax.model_to_spacedyn_arrays(spacedyn_sample())
    lp = {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in lp.items()}
    change(lp)
    with pytest.raises(ValueError, match=pattern):
        sdjax.model_from_lp(lp)


def test_spacedyn_inertia_policy(tmp_path):
    """SpaceDyn readers accept what SpaceDyn accepts (positive definite) with one warning naming
    every body that breaks the triangle inequality; "physical" refuses; not positive definite
    is refused everywhere."""
    lp = sdjax.model_to_spacedyn_arrays(spacedyn_sample())
    lp["inertia"] = np.array(lp["inertia"])
    lp["inertia"][:, 6:9] = np.diag([1.0, 0.1, 3.0])  # link 3: 1 + 0.1 < 3
    lp["inertia0"] = np.diag([1.0, 1.0, 2.5])  # the base: 1 + 1 < 2.5
    with pytest.warns(
        UserWarning, match=r"the base, link 3 \('link3'\) violate the triangle inequality.*accepted as SpaceDyn"
    ):
        model = sdjax.model_from_lp(lp)
    assert model.inertia_check == "positive_definite"
    np.testing.assert_array_equal(model.link_inertia[2], np.diag([1.0, 0.1, 3.0]))  # kept as given
    with pytest.raises(ValueError, match=r"base_inertia: inertia tensor of the base violates the triangle inequality"):
        sdjax.model_from_lp(lp, inertia_check="physical")
    path = tmp_path / "bad.def"
    sdjax.save_model(model, path)  # the same tensors through a .def file, then an LP JSON file
    with pytest.warns(UserWarning, match=r"bad.def: the inertia tensors of the base, link 3 \('link3'\) violate"):
        sdjax.load_model(path)
    path = tmp_path / "bad.json"  # an sdjax JSON file keeps the model's inertia check
    sdjax.save_model(model, path)
    assert sdjax.load_model(path).inertia_check == "positive_definite"
    path = tmp_path / "bad_lp.json"
    path.write_text(json.dumps({k: np.asarray(v).tolist() if not isinstance(v, str) else v for k, v in lp.items()}))
    with pytest.warns(UserWarning, match=r"SpaceDyn model 'bad_lp': the inertia tensors of the base, link 3"):
        sdjax.load_model(path)
    lp["inertia"][:, 6:9] = np.diag([1.0, -0.1, 3.0])  # not positive definite: refused
    with pytest.raises(
        ValueError, match=r"link_inertia\[2\]: inertia tensor of link 3 \('link3'\) is not positive semidefinite"
    ):
        sdjax.model_from_lp(lp)


# ------------------------------------------------------------------------------------------
# JSON model files.


def test_json_round_trip_exact(tmp_path):
    for model in (spacedyn_sample(), free_flying_arm_7dof(), random_model(7, 11, gravity=True, passive=True)):
        path = tmp_path / f"{model.name}.json"
        sdjax.save_json_model(model, path)
        back = sdjax.load_json_model(path)
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
            "joint_stiffness",
            "joint_damping",
            "gravity",
        ):
            np.testing.assert_array_equal(getattr(back, field), getattr(model, field), err_msg=field)
        assert (
            back.parent,
            back.joint_type,
            back.end_point_link,
            back.end_point_names,
            back.link_names,
            back.name,
        ) == (model.parent, model.joint_type, model.end_point_link, model.end_point_names, model.link_names, model.name)


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda d: d.update(format="urdf"), r"model\.format: expected 'sdjax-model'"),
        (lambda d: d.update(version=3), r"model\.version: this sdjax reads versions \[1, 2\], got 3"),
        (lambda d: d.update(version=True), r"model\.version"),
        (lambda d: d.update(colour="red"), r"model: unknown key\(s\) \['colour'\]"),
        (lambda d: d["links"][1].pop("mass"), r"model\.links\[1\]: missing key\(s\) \['mass'\]"),
        (
            lambda d: d["links"][1].update(inertia=[[1, 0], [0, 1]]),
            r"model\.links\[1\]\.inertia: expected shape \(3, 3\)",
        ),
        (lambda d: d["links"][2].update(parent="arm"), r"model\.links\[2\]\.parent: expected an integer"),
        (lambda d: d["links"][0].update(mass=-1.0), r"link_mass\[0\]: link 1 .*mass must be non-negative"),
        (lambda d: d["end_points"][0].update(offset=[0, 0, 0]), r"end_points\[0\]: unknown key"),
        (lambda d: d["end_points"][1].update(body=7), r"end_points\[1\]\.body: expected a body index 0\.\.6"),
        (
            lambda d: d["end_points"][1].update(name=d["end_points"][0]["name"]),
            r"end_point_names: names must be unique",
        ),
        (lambda d: d["end_points"][0].pop("name"), r"end_points\[0\]: missing key\(s\) \['name'\]"),
        (
            lambda d: d["links"][2].update(end_point=None),
            r"links\[2\]: unknown key\(s\) \['end_point'\]",
        ),  # version 1 only
        (lambda d: d.update(end_points={}), r"model\.end_points: expected a list"),
        (lambda d: d.update(links={}), r"model\.links: expected a list"),
        (lambda d: d["base"].pop("inertia"), r"model\.base: missing key"),
        (lambda d: d["links"][1].update(name=None), r"model\.links\[1\]\.name: expected a string, got NoneType"),
        (lambda d: d["links"][1].update(name=[1, 2]), r"model\.links\[1\]\.name: expected a string, got list"),
        (lambda d: d.update(name={"a": 1}), r"model\.name: expected a string, got dict"),
        (lambda d: d["links"][1].update(mass=True), r"model\.links\[1\]\.mass: expected numbers"),  # (not 1.0)
        (lambda d: d["base"].update(inertia=[[True, 0, 0], [0, 1, 0], [0, 0, 1]]), r"inertia: expected numbers"),
    ],
)
def test_json_errors(tmp_path, change, pattern):
    data = sdjax.model_to_dict(spacedyn_sample())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=pattern):
        sdjax.load_json_model(path)


def test_json_refuses_non_finite_and_garbage(tmp_path):
    text = json.dumps(sdjax.model_to_dict(spacedyn_sample())).replace('"m0"', '"m0"')
    text = text.replace('"mass": 100.0', '"mass": NaN', 1)
    path = tmp_path / "nan.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="non-finite number NaN"):
        sdjax.load_json_model(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        sdjax.load_json_model(path)


def test_json_refuses_duplicate_keys_text_numbers_unbounded_integers_and_names_the_file(tmp_path):
    """What Python's decoder and NumPy read as something else: a key given twice (the last one
    silently won: a 5 kg base where the file also says 100), a number written as text (``"5"``
    read as 5.0), an integer beyond float64's range (an ``OverflowError`` inside NumPy); a
    ``TypeError`` of the model's checks names the file as a ``ValueError`` does."""
    path = tmp_path / "m.json"
    text = json.dumps(sdjax.model_to_dict(spacedyn_sample()))
    path.write_text(text.replace('"mode": "floating"', '"mode": "floating", "mass": 5.0', 1))
    with pytest.raises(ValueError, match=r"m\.json: JSON with key 'mass' given twice in one object"):
        sdjax.load_json_model(path)
    path.write_text(text.replace('"mass": 10.0', '"mass": "10"', 1))
    with pytest.raises(ValueError, match=r"m\.json: model\.links\[0\]\.mass: expected numbers .*got text"):
        sdjax.load_json_model(path)
    path.write_text(text.replace('"mass": 10.0', '"mass": 1' + "0" * 400, 1))
    with pytest.raises(ValueError, match=r"m\.json: JSON with an integer of 401 digits, beyond float64's range"):
        sdjax.load_json_model(path)
    path.write_text(text.replace('"mode": "floating"', '"mode": ["floating"]', 1))
    with pytest.raises(TypeError, match=r"m\.json: Model\.base: expected one of"):
        sdjax.load_json_model(path)
    path.write_text(text)
    with pytest.raises(
        ValueError, match=r"m\.json: Model: dtype: expected a floating dtype \(e\.g\. jnp\.float32\), got int32"
    ):
        sdjax.load_model(path, dtype=np.int32)


def test_json_read_past_a_byte_order_mark(tmp_path):
    """A model file that starts with a UTF-8 byte-order mark (as some editors write) reads as the
    same model."""
    model = spacedyn_sample()
    path = tmp_path / "marked.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(sdjax.model_to_dict(model)).encode())
    np.testing.assert_array_equal(np.asarray(sdjax.load_json_model(path).link_mass), np.asarray(model.link_mass))


def test_json_refuses_nesting_too_deep_for_the_parser(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="deep.json: JSON nested too deeply to read"):
        sdjax.load_json_model(path)


def test_json_refuses_absurd_sizes(tmp_path):
    data = sdjax.model_to_dict(spacedyn_sample())
    data["links"] = [data["links"][0]] * (MAX_LINKS + 1)
    with pytest.raises(ValueError, match=f"{MAX_LINKS + 1} links exceeds the limit"):
        sdjax.model_from_dict(data)


# ------------------------------------------------------------------------------------------
# Reference-pose builder.


def test_reference_pose_builder_reproduces_the_pose():
    """Build from base-frame data at q = 0; forward kinematics at q = 0 gives the data back."""
    rng = np.random.default_rng(0)
    parent = (0, 1, 2, 1, 0)
    axes = rng.normal(size=(5, 3))
    axes[2] = [1.0, 0.0, 0.0]
    joints = rng.normal(size=(5, 3))
    centroids = joints + rng.normal(scale=0.3, size=(5, 3))
    from sdjax.models.random import random_inertia

    inertias = np.array([random_inertia(rng, 2.0, 0.3) for _ in range(5)])
    ends = rng.normal(size=(2, 3))
    end_rot = np.asarray(sdjax.rpy_to_matrix(jnp.asarray(rng.normal(size=(2, 3)))))
    model = sdjax.model_from_reference_pose(
        parent,
        "RRPRP",
        axes,
        joints,
        centroids,
        np.full(5, 2.0),
        inertias,
        40.0,
        np.diag([3.0, 4.0, 5.0]),
        end_point_link=(3, 4),
        end_point_position=ends,
        end_point_rotation=end_rot,
    )
    state = sdjax.make_state(model)
    kin = sdjax.forward_kinematics(model, state)
    rtol = 1e-12  # pure float64 rotations/translations of O(1) vectors
    assert_close(kin.centroid[1:], centroids, rtol, "centroids")
    assert_close(kin.joint_position, joints, rtol, "joint positions")
    assert_close(kin.joint_axis, axes / np.linalg.norm(axes, axis=1, keepdims=True), rtol, "joint axes")
    assert_close(kin.end_point_position, ends, rtol, "end points")
    assert_close(kin.end_point_rotation, end_rot, rtol, "end-point frames")
    world_inertia = kin.rotation[1:] @ model.link_inertia @ np.swapaxes(kin.rotation[1:], 1, 2)
    assert_close(world_inertia, inertias, rtol, "inertias")


def _two_link_reference_pose(**overrides):
    """A two-link chain (z, then y axis) in its reference pose; ``overrides`` replace arguments."""
    kwargs = dict(
        parent=[0, 1],
        joint_type="RR",
        joint_axis=[[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]],
        joint_position=[[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]],
        link_centroid=[[0.0, 0.0, 1.5], [0.0, 0.0, 2.5]],
        link_mass=[1.0, 1.0],
        link_inertia=np.tile(np.diag([0.1, 0.1, 0.05]), (2, 1, 1)),
        base_mass=10.0,
        base_inertia=np.eye(3),
    )
    kwargs.update(overrides)
    return sdjax.model_from_reference_pose(**kwargs)


def test_reference_pose_end_point_on_the_base():
    """An end point on body 0 is measured from the base centroid in the base frame (it was
    measured from the last link's centroid, ``centroids[0 - 1]``, and steered that link's x axis);
    forward kinematics at q = 0 gives its position and frame back."""
    rotation = np.asarray(sdjax.rpy_to_matrix(jnp.array([0.3, -0.2, 0.5])))
    model = _two_link_reference_pose(
        end_point_link=[0, 2],
        end_point_position=[[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]],
        end_point_rotation=[rotation, np.eye(3)],
    )
    assert_close(model.centroid_to_end_point[0], [1.0, 0.0, 0.0], 1e-15, "base end point offset")
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    assert_close(kin.end_point_position, [[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]], 1e-14, "end points")
    assert_close(kin.end_point_rotation[0], rotation, 1e-14, "base end-point frame")
    assert_close(kin.joint_axis, [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]], 1e-15, "axes")


def test_reference_pose_refuses_misshapen_arrays():
    """Every array argument has its exact shape: a transposed or flattened one was reshaped into
    a wrong model, a wrong size gave NumPy's reshape error, a wrong mass shape Model's message."""
    joints = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    cases = [
        ("joint_position", joints.T, "(2, 3)", "(3, 2)"),
        ("joint_axis", [0.0, 0.0, 1.0, 0.0, 1.0, 0.0], "(2, 3)", "(6,)"),
        ("joint_axis", [0.0, 0.0, 1.0, 0.0], "(2, 3)", "(4,)"),
        ("link_centroid", [[0.0, 0.0, 1.5]], "(2, 3)", "(1, 3)"),
        ("link_mass", [1.0], "(2,)", "(1,)"),
        ("link_inertia", np.tile(np.eye(3), (2, 1, 1)).reshape(2, 9), "(2, 3, 3)", "(2, 9)"),
        ("base_mass", [10.0], "()", "(1,)"),
        ("base_inertia", np.eye(3).ravel(), "(3, 3)", "(9,)"),
        ("joint_stiffness", [1.0], "(2,)", "(1,)"),
        ("gravity", [0.0, 0.0, -9.8, 0.0], "(3,)", "(4,)"),
    ]
    for name, value, expected, got in cases:
        message = f"model_from_reference_pose: {name}: expected shape {re.escape(expected)}.*got shape {re.escape(got)}"
        with pytest.raises(ValueError, match=message):
            _two_link_reference_pose(**{name: value})
    for name, value, expected, got in [
        ("end_point_position", [1.0, 0.0, 0.0], "(1, 3)", "(3,)"),
        ("end_point_rotation", np.eye(3), "(1, 3, 3)", "(3, 3)"),
    ]:
        message = f"model_from_reference_pose: {name}: expected shape {re.escape(expected)}.*got shape {re.escape(got)}"
        with pytest.raises(ValueError, match=message):
            _two_link_reference_pose(end_point_link=[2], **{name: value})
    with pytest.raises(TypeError, match="model_from_reference_pose: base_inertia: expected real numbers, got text"):
        _two_link_reference_pose(base_inertia="abc")
    with pytest.raises(TypeError, match="model_from_reference_pose: link_mass: expected real numbers"):
        _two_link_reference_pose(link_mass=[1.0 + 1.0j, 1.0])


def test_reference_pose_refuses_non_finite_and_huge_values():
    """A non-finite or huge entry is refused by argument and row (an infinite axis hit an
    'unreachable' assertion, a 1e200 axis overflowed its norm into a message about an inertia);
    a tiny axis is normalised without underflow."""
    for name, value, row in [
        ("joint_axis", [[0.0, 0.0, np.inf], [0.0, 1.0, 0.0]], 0),
        ("joint_axis", [[0.0, 0.0, 1.0], [0.0, 1e200, 0.0]], 1),
        ("joint_position", [[0.0, 0.0, 1.0], [0.0, np.nan, 2.0]], 1),
        ("link_centroid", [[0.0, 0.0, -np.inf], [0.0, 0.0, 2.5]], 0),
        ("link_mass", [1.0, np.nan], 1),
        ("link_inertia", np.stack([np.eye(3), np.full((3, 3), np.nan)]), 1),
    ]:
        with pytest.raises(
            ValueError, match=rf"model_from_reference_pose: {name}\[{row}\]: must be finite and at most 1e\+100"
        ):
            _two_link_reference_pose(**{name: value})
    with pytest.raises(ValueError, match=r"model_from_reference_pose: base_mass: must be finite"):
        _two_link_reference_pose(base_mass=np.inf)
    with pytest.raises(ValueError, match=r"model_from_reference_pose: end_point_position\[0\]: must be finite"):
        _two_link_reference_pose(end_point_link=[2], end_point_position=[[0.0, np.nan, 3.0]])
    with pytest.raises(ValueError, match=r"model_from_reference_pose: joint_axis\[1\]: must be a non-zero vector"):
        _two_link_reference_pose(joint_axis=[[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    model = _two_link_reference_pose(joint_axis=[[0.0, 0.0, 1e-170], [0.0, 3e-200, 0.0]])
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    assert_close(kin.joint_axis, [[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]], 1e-15, "tiny axes, normalised")


def test_reference_pose_refuses_improper_end_point_rotations():
    """An end-point frame must be a proper rotation (5 E, a matrix of ones and a reflection were
    loaded as some roll-pitch-yaw); the message names the argument and the end point."""
    for rotation, defect in [
        (5.0 * np.eye(3), "R\\^T R differs from the identity"),
        (np.ones((3, 3)), "R\\^T R differs from the identity"),
        (np.diag([1.0, 1.0, -1.0]), "a reflection"),
    ]:
        with pytest.raises(
            ValueError,
            match=rf"model_from_reference_pose: end_point_rotation\[1\]: expected a proper rotation matrix.*{defect}",
        ):
            _two_link_reference_pose(
                end_point_link=[1, 2],
                end_point_position=[[0.0, 0.0, 1.5], [0.0, 0.0, 3.0]],
                end_point_rotation=[np.eye(3), rotation],
            )
    # a float32 rotation is judged at float32's round-off
    model = _two_link_reference_pose(
        end_point_link=[2],
        end_point_position=[[0.0, 0.0, 3.0]],
        end_point_rotation=np.asarray(sdjax.rpy_to_matrix(jnp.array([0.1, 0.2, 0.3])), np.float32)[None],
    )
    assert model.num_end_points == 1


def test_reference_pose_refuses_bad_parents_and_end_point_bodies():
    """Parents and end-point bodies are integer indices in range (parent 0.9 was truncated to 0;
    end-point body 3 of a two-link model raised a bare IndexError)."""
    with pytest.raises(
        TypeError,
        match=r"model_from_reference_pose: parent\[1\]: expected a static integer index 0\.\.1, got float 0\.9",
    ):
        _two_link_reference_pose(parent=[0, 0.9])
    with pytest.raises(TypeError, match=r"model_from_reference_pose: parent: expected a sequence of integers, got int"):
        _two_link_reference_pose(parent=5)
    # Integer-valued entries of any kind, as Model takes them (a JAX array, whole floats from a file).
    expected = _two_link_reference_pose()
    for parent in (jnp.asarray([0, 1]), np.array([0.0, 1.0])):
        assert _two_link_reference_pose(parent=parent).parent == expected.parent
    with pytest.raises(
        ValueError, match=r"model_from_reference_pose: parent\[1\]: index 2 out of range; expected 0\.\.1"
    ):
        _two_link_reference_pose(parent=[0, 2])
    with pytest.raises(
        ValueError, match=r"model_from_reference_pose: parent\[0\]: index -1 out of range; expected 0\.\.0"
    ):
        _two_link_reference_pose(parent=[-1, 1])
    with pytest.raises(
        ValueError,
        match=r"model_from_reference_pose: end_point_link\[0\]: index 3 out of range; expected 0\.\.2 \(0 = base, 1\.\.2 = links\)",
    ):
        _two_link_reference_pose(end_point_link=[3], end_point_position=[[1.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match=r"model_from_reference_pose: end_point_link\[0\]: expected a static integer"):
        _two_link_reference_pose(end_point_link=[1.5], end_point_position=[[1.0, 0.0, 0.0]])
    # integer parents of any kind still build (NumPy integers, a range)
    model = _two_link_reference_pose(parent=np.arange(2))
    assert model.parent == (0, 1)


def test_make_state_attitude_inputs(sample_model):
    rpy = jnp.array([0.3, -0.4, 1.2])
    rot = sdjax.rpy_to_matrix(rpy)
    a = sdjax.make_state(sample_model, base_rpy=rpy)
    b = sdjax.make_state(sample_model, base_rotation=rot)
    c = sdjax.make_state(sample_model, base_quaternion=2.0 * a.base_quaternion)
    d = sdjax.make_state(sample_model, base_direction_cosines=rot.T)
    for s in (a, b, c, d):
        assert_close(s.base_rotation, rot, 1e-14, "base rotation")  # float64 conversions of O(1) values
    assert_close(jnp.linalg.norm(c.base_quaternion), 1.0, 1e-15, "normalised")
    with pytest.raises(ValueError, match="at most one"):
        sdjax.make_state(sample_model, base_rpy=rpy, base_rotation=rot)
    with pytest.raises(ValueError, match=re.escape("make_state: q: expected shape (6,), got shape (5,)")):
        sdjax.make_state(sample_model, q=np.zeros(5))
    with pytest.raises(ValueError, match="non-zero"):
        sdjax.make_state(sample_model, base_quaternion=np.zeros(4))
    # Non-finite values are refused by name (a NaN state gave a NaN trajectory without a word);
    # under jit they are not (values are not known), shapes are.
    for name, value in [("q", [np.nan] * 6), ("qd", [0, 0, np.inf, 0, 0, 0]), ("base_angular_velocity", [np.inf, 0, 0]),
                        ("base_rpy", [np.nan, 0, 0]), ("base_quaternion", [np.nan, 0, 0, 1]),
                        ("base_rotation", np.full((3, 3), np.nan)), ("base_position", [0, np.nan, 0])]:  # fmt: skip
        with pytest.raises(ValueError, match=f"make_state: {name}: must be finite"):
            sdjax.make_state(sample_model, **{name: value})
    with pytest.raises(TypeError, match="make_state: q: expected numbers, got str"):
        sdjax.make_state(sample_model, q="abcdef")
    with pytest.raises(ValueError, match="make_state: q: must be finite"):  # (1e39 is inf in float32)
        sdjax.make_state(sample_model.astype(jnp.float32), q=[1e39] + [0.0] * 5)
    traced = jax.jit(lambda q: sdjax.make_state(sample_model, q=q).q)(jnp.full(6, jnp.nan))
    assert np.all(np.isnan(np.asarray(traced)))
    with pytest.raises(ValueError, match=r"State.q/State.qd: expected shape \(6,\)"):
        sdjax.inertia_matrix(sample_model, random_state(free_flying_arm_7dof(), 0))


def test_massless_links_in_float32():
    """The singularity check of ``H`` in float32 judges against float32's round-off (``2 N eps``),
    not float64's bound scaled by the ratio of the two epsilons (which refused every float32
    model with a massless link whose ``H`` had a condition number above 18, among them the
    servicer of test_mjcf_import, condition 1.2e5 at ``q = 0``). (The 42-DOF human.urdf of
    example-robot-data stays refused in float32: at its second configuration the smallest
    eigenvalue, 8.4e-6 of the largest, is below 2 N eps = 1.0e-5.)"""
    inertia = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    inertia[1] = 0.0
    tilted = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [np.pi / 2, 0.0, 0.0]]
    kwargs = base_kwargs(link_mass=[1.0, 0.0, 1.0], link_inertia=inertia, joint_rpy=tilted)
    model = sdjax.Model(**kwargs, dtype=jnp.float32)
    h = np.asarray(sdjax.inertia_matrix(model, sdjax.make_state(model)), np.float64)
    values = np.linalg.eigvalsh(h)
    assert 1e2 < values[-1] / values[0] < 1e4  # well within float32's reach (refused before)
    # and singular models are still refused in float32, naming the precision
    with pytest.raises(ValueError, match=r"singular at float32 precision .*mostly along joint [23]"):
        sdjax.Model(**base_kwargs(link_mass=[1.0, 0.0, 1.0], link_inertia=inertia), dtype=jnp.float32)
    rod = np.tile(np.diag([0.1, 0.1, 0.05]), (3, 1, 1))
    rod[2] = np.diag([0.1, 0.1, 0.0])
    with pytest.raises(ValueError, match=r"singular at float32 precision .*mostly along joint 3"):
        sdjax.Model(**base_kwargs(link_inertia=rod), dtype=jnp.float32)
    assert sdjax.model.singular_rtol(13, jnp.float64) == sdjax.model.SINGULAR_RTOL  # float64 unchanged


def test_host_data_is_converted_without_compiling_a_program_per_field():
    """A model built from NumPy arrays (and a state from a rotation matrix) outside any trace:
    JAX converts a NumPy array by compiling a program per shape and dtype, and applies each
    operation of an un-jitted function as a program of its own (22 for a rotation matrix's
    quaternion). Fields (given and default) are converted by NumPy, compiling nothing; a
    conversion runs as one program.
    The shapes are this test's own (21 links, a batch of 19 rotations), so no earlier test's
    compilation is reused."""
    compiled: list[str] = []

    def listener(event, duration, **kwargs):
        if event.endswith("backend_compile_duration"):
            compiled.append(kwargs.get("fun_name", "?"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        n = 21
        fields = base_kwargs(n, link_mass=np.arange(1, n + 1), joint_rpy=np.zeros((n, 3)))  # (integer masses)
        model = sdjax.Model(**fields)
        field_programs = list(compiled)
        rotations = sdjax.rotation.rpy_to_matrix(np.random.default_rng(0).uniform(-3, 3, size=(19, 3)))
        compiled.clear()
        quats = sdjax.rotation.matrix_to_quat(np.asarray(rotations))
        conversion_programs = len(compiled)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert model.link_mass.dtype == jnp.float64 and float(model.link_mass[-1]) == n
    assert field_programs == [], f"building the model compiled {field_programs}"
    assert conversion_programs == 1
    # (A round trip through the quaternion: float64 round-off of a few dozen operations, ~1e-15.)
    assert_close(sdjax.rotation.quat_to_matrix(quats), rotations, 1e-14, "round trip")
