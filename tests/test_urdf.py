"""URDF import and export (sdjax.io.urdf).

Reference: Pinocchio's own URDF parser (``pin.buildModelFromUrdf`` with a free-flyer root), an
independent reading of the same files (fixed-joint merging, axes, inertial frames, continuous
joints as ``(cos, sin)``). The two descriptions differ in coordinates:

- Pinocchio's configuration is the root-link frame pose ``(p, R)``, its velocity the root-link
  twist ``(v, w)`` in the root-link frame; sdjax's base is the base centroid ``r0 = p + R c``
  (``c``: the free-flyer body's centre of mass in the root-link frame, which Pinocchio reports
  as ``inertias[1].lever``) with inertial-frame ``v0``, ``w0``.
- ``nu_pin = T nu_sd`` with ``T = [[R^T, skew(c) R^T, 0], [0, R^T, 0], [0, 0, P]]``
  (``v = R^T v0 - (R^T w0) x c``; ``P`` places sdjax joint rates at Pinocchio's velocity
  indices, found by joint name). Power: ``tau_sd = T^T tau_pin``, so ``H_sd = T^T M T``.
  Differentiating ``nu_pin``: ``a_pin = T a_sd + [-R^T (w0 x v0); 0; 0]`` (``d/dt R^T = -R^T
  skew(w0)``; the ``skew(c) R^T w0`` term contributes ``R^T (w0 x w0) = 0``), hence
  ``c_sd = T^T (M tdot + nle)`` and ``a_sd = T^-1 (aba(T^-T tau_sd) - tdot)``.
"""

from __future__ import annotations

import pathlib
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.io.urdf import (
    import_urdf,
    model_from_urdf,
    model_to_urdf,
    pinocchio_from_state,
    save_urdf,
    state_from_pinocchio,
)
from sdjax.models import random_model, spacedyn_sample
from helpers import random_state

DATA = pathlib.Path(__file__).parent / "data"
URDFS = ["satellite_arm7", "two_arm_servicer", "wheel_satellite", "massless_links"]
NUM_STATES = 20


def _skew(v: np.ndarray) -> np.ndarray:
    return np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def _states(model: sdjax.Model, seed: int, count: int = NUM_STATES) -> list[sdjax.State]:
    return [random_state(model, seed + k) for k in range(count)]


def _batch(states: list[sdjax.State]) -> sdjax.State:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _one_state_dynamics(model, state, tau, wrench):
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau, base_force=wrench[:3], base_torque=wrench[3:])
    return sdjax.inertia_matrix(model, state), sdjax.bias_forces(model, state), jnp.concatenate([base_acc, qdd])


#: One compiled program per model topology (and names), reused by every test that evaluates a
#: model of that topology: an exported-and-reimported URDF model shares it with the original.
_BATCH_DYNAMICS = eqx.filter_jit(jax.vmap(_one_state_dynamics, in_axes=(None, 0, 0, 0)))


def _sdjax_dynamics(model: sdjax.Model, states: list[sdjax.State], tau: np.ndarray, wrench: np.ndarray):
    """Inertia matrix, bias forces and forward dynamics (with base force/torque and joint
    torques) at a batch of states."""
    h, c, a = _BATCH_DYNAMICS(model, _batch(states), jnp.asarray(tau), jnp.asarray(wrench))
    return np.asarray(h), np.asarray(c), np.asarray(a)


def _rel(actual, expected, scale=None) -> float:
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = np.max(np.abs(expected)) if scale is None else scale
    return float(np.max(np.abs(actual - expected)) / scale)


# ------------------------------------------------------------------------------------------
# Against Pinocchio's URDF parser.


def _imported_by_both(name: str):
    """``(pinocchio module, sdjax's UrdfImport, Pinocchio's own parse with a free flyer)`` of
    ``tests/data/<name>.urdf``; skips the test where Pinocchio is not installed."""
    pin = pytest.importorskip("pinocchio")
    path = DATA / f"{name}.urdf"
    return pin, import_urdf(path), pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())


@pytest.mark.parametrize("name", URDFS)
def test_against_pinocchio_urdf_parser(name):
    pin, info, pm = _imported_by_both(name)
    model = info.model
    pm.gravity = pin.Motion.Zero()
    data = pm.createData()
    n = model.num_joints
    assert pm.nv == 6 + n
    # The base centroid in the root-link frame: Pinocchio's free-flyer body centre of mass
    # (its own merge of the root link and the links fixed to it). 1e-14 m: sums of a few
    # products of O(1) numbers.
    c = np.asarray(pm.inertias[1].lever)
    np.testing.assert_allclose(info.root_to_base, c, rtol=0, atol=1e-14)
    # Total mass: fixed merges preserve it. Round-off of a sum of ~10 numbers ~ 1e-13 kg.
    assert abs(float(model.total_mass) - sum(i.mass for i in pm.inertias)) < 1e-10

    # Joint slots by URDF joint name (Pinocchio orders its joints its own way).
    jids = [pm.getJointId(j) for j in info.joint_names]
    perm = np.zeros((n, n))
    for k, jid in enumerate(jids):
        perm[pm.idx_vs[jid] - 6, k] = 1.0

    rng = np.random.default_rng(7)
    states = _states(model, 100)
    tau = rng.normal(scale=5.0, size=(NUM_STATES, n))
    wrench = rng.normal(scale=20.0, size=(NUM_STATES, 6))
    h_sd, c_sd, a_sd = _sdjax_dynamics(model, states, tau, wrench)
    damping = np.asarray(model.joint_damping)
    for k, state in enumerate(states):
        rot = np.asarray(state.base_rotation)
        r0, v0, w0 = (
            np.asarray(x) for x in (state.base_position, state.base_linear_velocity, state.base_angular_velocity)
        )
        q, qd = np.asarray(state.q), np.asarray(state.qd)
        q_pin = np.zeros(pm.nq)
        q_pin[:3] = r0 - rot @ c
        q_pin[3:7] = np.asarray(state.base_quaternion)
        for i, jid in enumerate(jids):
            iq = pm.idx_qs[jid]
            if pm.nqs[jid] == 2:  # continuous joint: (cos q, sin q)
                q_pin[iq : iq + 2] = np.cos(q[i]), np.sin(q[i])
            else:
                q_pin[iq] = q[i]
        t = np.zeros((6 + n, 6 + n))
        t[:3, :3] = t[3:6, 3:6] = rot.T
        t[:3, 3:6] = _skew(c) @ rot.T
        t[6:, 6:] = perm
        nu = np.concatenate([v0, w0, qd])
        v_pin = t @ nu
        tdot = np.zeros(6 + n)
        tdot[:3] = -rot.T @ np.cross(w0, v0)

        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        nle = pin.rnea(pm, data, q_pin, v_pin, np.zeros(pm.nv))
        # Inertia matrix: sums of O(n) composite-inertia terms of O(1)-conditioned geometry,
        # round-off ~ n * 1e-16 of the largest entry (the ~700 kg total mass or the system
        # inertia); 1e-12 leaves a wide margin.
        assert _rel(h_sd[k], t.T @ m @ t) < 1e-12, f"{name} state {k}: inertia matrix"
        # Bias forces: same round-off, relative to the largest term summed (|M tdot| or |nle|),
        # which keeps the bound meaningful after cancellation.
        expected_c = t.T @ (m @ tdot + nle)
        scale = max(np.max(np.abs(m @ tdot)), np.max(np.abs(nle)), 1e-300)
        assert _rel(c_sd[k], expected_c, scale) < 1e-12, f"{name} state {k}: bias forces"
        # Forward dynamics (ABA). sdjax applies the URDF <dynamics damping> as -D qd; Pinocchio's
        # ABA does not, so it is added to the Pinocchio joint torques here.
        tau_sd = np.concatenate([wrench[k], tau[k] - damping * qd])
        tau_pin = np.linalg.solve(t.T, tau_sd)
        a_pin = pin.aba(pm, data, q_pin, v_pin, tau_pin)
        expected_a = np.linalg.solve(t, a_pin - tdot)
        # Two solvers of H a = f - c (Cholesky vs articulated bodies) differ by up to
        # ~cond(H) * eps relative to |a|; cond(H) is 8e3 to 2e5 here (measured; hundreds of kg of
        # bus against 0.01 kg m^2 wheels and wrist links), so 1e-14 * cond(H) (floor 1e-12) is
        # ~50x that bound.
        cond = np.linalg.cond(m)
        assert _rel(a_sd[k], expected_a) < max(1e-12, 1e-14 * cond), f"{name} state {k}: forward dynamics"

        # The conversion helpers reproduce the same coordinates and invert each other.
        q_h, v_h = pinocchio_from_state(info, pm, state)
        np.testing.assert_allclose(q_h, q_pin, rtol=0, atol=1e-14)  # one product of O(1) numbers
        np.testing.assert_allclose(v_h, v_pin, rtol=0, atol=1e-13)  # |nu| ~ 3, products of O(1)
        back = state_from_pinocchio(info, pm, q_h, v_h)
        for field in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
            got, want = np.asarray(getattr(back, field)), np.asarray(getattr(state, field))
            if field == "q":  # continuous joints come back wrapped into (-pi, pi]; random q already is
                got = np.angle(np.exp(1j * (got - want))) + want
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-13, err_msg=field)  # a few O(1) products


@pytest.mark.parametrize("name", URDFS)
def test_end_points_against_pinocchio_frames(name):
    """End points sit on the leaf frames that Pinocchio keeps as frames of the same names."""
    pin, info, pm = _imported_by_both(name)
    model = info.model
    data = pm.createData()
    state = random_state(model, 5)
    q_pin, _ = pinocchio_from_state(info, pm, state)
    pin.framesForwardKinematics(pm, data, q_pin)
    kin = sdjax.forward_kinematics(model, state)
    for e, link_name in enumerate(info.end_point_names):
        frame = data.oMf[pm.getFrameId(link_name)]
        # Positions ~1-3 m through <= 10 chained transforms: round-off ~1e-15 relative.
        np.testing.assert_allclose(kin.end_point_position[e], frame.translation, rtol=0, atol=1e-12)
        np.testing.assert_allclose(kin.end_point_rotation[e], frame.rotation, rtol=0, atol=1e-12)


def test_joint_data_and_documented_choices():
    info = import_urdf(DATA / "satellite_arm7.urdf")
    model = info.model
    assert info.root_link == "bus"
    assert model.name == "satellite_arm7"
    assert info.joint_names == (
        "shoulder_yaw",
        "shoulder_pitch",
        "upper_arm_roll",
        "elbow",
        "forearm_extend",
        "wrist_tilt",
        "wrist_roll",
    )
    assert model.joint_type == ("R", "R", "R", "R", "P", "R", "R")
    # <dynamics damping> is kept (viscous, like sdjax's D); friction and limits are not.
    np.testing.assert_array_equal(model.joint_damping, [0.8, 0, 0.5, 0, 20.0, 0, 0])
    # Default end points: every welded link (the wrist's sensor, gripper and tool flange, then
    # the antenna welded to the base), named after the URDF links.
    assert info.end_point_names == ("ft_sensor", "gripper", "tool0", "antenna") == model.end_point_names
    assert model.end_point_link == (7, 7, 7, 0)
    # Total mass of the file's <mass> values: nothing lost in the fixed merges.
    file_masses = 420 + 6.5 + 9 + 8 + 22 + 12 + 5 + 4 + 3 + 0.8 + 2.5
    assert float(model.total_mass) == pytest.approx(file_masses, rel=1e-15, abs=0)
    assert import_urdf(DATA / "two_arm_servicer.urdf").continuous == (False,) * 4 + (True,) * 4
    # Explicit end points and none.
    picked = import_urdf(DATA / "satellite_arm7.urdf", end_points=["ft_sensor", "upper_arm", "antenna"])
    assert picked.end_point_names == ("ft_sensor", "upper_arm", "antenna") and picked.model.end_point_link == (7, 3, 0)
    assert model_from_urdf(DATA / "satellite_arm7.urdf", end_points=()).num_end_points == 0
    assert model_from_urdf(DATA / "satellite_arm7.urdf", base_link="bus", name="x").name == "x"
    g = model_from_urdf(DATA / "satellite_arm7.urdf", gravity=[0, 0, -3.7]).gravity
    np.testing.assert_array_equal(g, [0, 0, -3.7])


def test_fixed_merge_matches_single_link():
    """A link split in two by a fixed joint (masses, rotated inertials) has the dynamics of
    the same link written as one inertial computed by hand (parallel axis + rotation)."""
    m1, c1 = 2.0, np.array([0.1, 0.0, 0.0])
    m2, c2 = 3.0, np.array([0.5, 0.2, 0.0])  # in link frame: fixed joint at (0.4, 0, 0) + origin (0.1, 0.2, 0) rotated
    i1 = np.diag([0.01, 0.02, 0.02])
    # part 2: inertia diag(0.03, 0.01, 0.025) in a frame rotated by 90 deg about z: swaps xx and yy.
    i2 = np.diag([0.01, 0.03, 0.025])
    m = m1 + m2
    c = (m1 * c1 + m2 * c2) / m
    inertia = i1 + i2
    for mk, ck in ((m1, c1), (m2, c2)):
        d = ck - c
        inertia = inertia + mk * (d @ d * np.eye(3) - np.outer(d, d))

    head = """<robot name="r"><link name="b"><inertial><mass value="50"/>
      <inertia ixx="5" ixy="0" ixz="0" iyy="6" iyz="0" izz="7"/></inertial></link>
      <joint name="j" type="revolute"><parent link="b"/><child link="a"/><origin xyz="0.3 0 0"/>
      <axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>"""
    split = (
        head
        + """<link name="a"><inertial><origin xyz="0.1 0 0"/><mass value="2"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.02"/></inertial></link>
      <joint name="f" type="fixed"><parent link="a"/><child link="a2"/><origin xyz="0.4 0 0" rpy="0 0 1.5707963267948966"/></joint>
      <link name="a2"><inertial><origin xyz="0.2 -0.1 0" rpy="0 0 0"/><mass value="3"/>
      <inertia ixx="0.03" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.025"/></inertial></link></robot>"""
    )
    f = lambda x: repr(float(x))  # noqa: E731
    whole = (
        head
        + f"""<link name="a"><inertial><origin xyz="{f(c[0])} {f(c[1])} {f(c[2])}"/><mass value="{f(m)}"/>
      <inertia ixx="{f(inertia[0, 0])}" ixy="{f(inertia[0, 1])}" ixz="{f(inertia[0, 2])}" iyy="{f(inertia[1, 1])}"
       iyz="{f(inertia[1, 2])}" izz="{f(inertia[2, 2])}"/></inertial></link></robot>"""
    )
    a, b = model_from_urdf(split, end_points=()), model_from_urdf(whole, end_points=())
    state = random_state(a, 3)
    # Same dynamics to round-off of O(1) sums (1e-13 relative).
    assert _rel(sdjax.inertia_matrix(a, state), sdjax.inertia_matrix(b, state)) < 1e-13
    assert _rel(sdjax.bias_forces(a, state), sdjax.bias_forces(b, state)) < 1e-13


# ------------------------------------------------------------------------------------------
# Export and round trip.


def _round_trip_models():
    models = [model_from_urdf(DATA / f"{n}.urdf") for n in URDFS]
    models.append(spacedyn_sample())
    models.append(random_model(2, 6))  # branches, prismatic joints, end points on inner links
    return models


@pytest.mark.parametrize("index", range(len(URDFS) + 2))
def test_round_trip_same_dynamics(index, tmp_path):
    model = _round_trip_models()[index]
    path = tmp_path / "m.urdf"
    save_urdf(model, path)
    info = import_urdf(path, gravity=model.gravity)  # the exported frames are found by default
    back = info.model
    # Exported frames are the sdjax frames: the base centroid is the root origin.
    np.testing.assert_allclose(info.root_to_base, 0.0, atol=1e-15)
    assert back.parent == model.parent and back.joint_type == model.joint_type
    assert back.end_point_link == model.end_point_link and back.link_names == model.link_names
    # An end point named like a link (a moving leaf's own frame) is exported as a frame link
    # with "_" appended, the one name change of the round trip.
    assert back.end_point_names == tuple(e + "_" if e in model.link_names else e for e in model.end_point_names)
    np.testing.assert_array_equal(back.joint_damping, model.joint_damping)
    states = _states(model, 100, NUM_STATES)
    rng = np.random.default_rng(index)
    tau = rng.normal(size=(NUM_STATES, model.num_joints))
    wrench = rng.normal(size=(NUM_STATES, 6))
    h0, c0, a0 = _sdjax_dynamics(model, states, tau, wrench)
    h1, c1, a1 = _sdjax_dynamics(back, states, tau, wrench)
    # The only change is RPY -> URDF rpy -> RPY of the joint frames (a few ulp per angle), so
    # everything agrees to ~1e-15 relative; forward dynamics amplifies by cond(H) <= ~1e5.
    assert _rel(h1, h0) < 1e-13
    assert _rel(c1, c0, max(np.max(np.abs(c0)), 1.0)) < 1e-13
    assert _rel(a1, a0) < 1e-10
    kin0, kin1 = sdjax.forward_kinematics(model, states[0]), sdjax.forward_kinematics(back, states[0])
    np.testing.assert_allclose(kin1.end_point_position, kin0.end_point_position, atol=1e-13)  # metres, O(1) sums
    np.testing.assert_allclose(kin1.end_point_rotation, kin0.end_point_rotation, atol=1e-13)


def test_export_refuses_stiffness_and_is_usable_by_spacedyn():
    with pytest.raises(ValueError, match="link 1 .* joint stiffness .*URDF has no joint stiffness"):
        model_to_urdf(random_model(0, 3, passive=True))
    # A loaded model runs through the SpaceDyn-compatible API (calc_hh = inertia matrix).
    model = model_from_urdf(model_to_urdf(spacedyn_sample()))
    from sdjax import spacedyn

    sv = spacedyn.init_SV(model)
    hh = np.asarray(spacedyn.calc_hh(model, sv))
    # At q = 0 the upper-left block is the total mass times E (exact sum of the masses).
    np.testing.assert_allclose(hh[:3, :3], 160.0 * np.eye(3), rtol=1e-15)


# ------------------------------------------------------------------------------------------
# Refusals: each its own clear error.

_BASE = '<link name="b"><inertial><mass value="10"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
_LINK = '<link name="{0}"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>'
_JOINT = '<joint name="{0}" type="{1}"><parent link="{2}"/><child link="{3}"/>{4}</joint>'


def _robot(*parts: str) -> str:
    return '<robot name="t">' + "".join(parts) + "</robot>"


@pytest.mark.parametrize(
    "text, message",
    [
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "floating", "b", "a", "")),
            "joint 'j': type 'floating' is not supported",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "planar", "b", "a", "")),
            "joint 'j': type 'planar' is not supported",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "spherical", "b", "a", "")),
            "joint 'j': unknown joint type 'spherical'",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<mimic joint="k"/>')),
            "joint 'j' <mimic joint='k'>: no revolute, continuous or prismatic joint of that name",
        ),
        (_robot(_BASE, _LINK.format("a")), r"several root links \['b', 'a'\]"),
        (
            _robot(
                _BASE,
                _LINK.format("a"),
                _LINK.format("c"),
                _JOINT.format("j", "revolute", "b", "a", ""),
                _JOINT.format("k", "revolute", "c", "a", ""),
            ),
            "link 'a' is the child of joints 'j' and 'k'",
        ),
        (
            _robot(
                _BASE,
                _LINK.format("a"),
                _LINK.format("c"),
                _JOINT.format("j", "revolute", "a", "c", ""),
                _JOINT.format("k", "revolute", "c", "a", ""),
            ),
            r"links \['a', 'c'\] are not connected to the root 'b'",
        ),
        (_robot(_LINK.format("a"), _JOINT.format("j", "revolute", "a", "a", "")), "no root link"),
        (_robot(_BASE, _JOINT.format("j", "revolute", "b", "ghost", "")), "joint 'j': link 'ghost' is not defined"),
        (
            _robot(_BASE, '<link name="a"/>', _JOINT.format("j", "revolute", "b", "a", "")),
            r"joint 1 \(link 1 \('a'\)\) moves no mass or inertia",
        ),
        (
            _robot(
                _BASE,
                '<link name="a"/>',
                _LINK.format("c"),
                _JOINT.format("j", "revolute", "b", "a", ""),
                _JOINT.format("k", "revolute", "a", "c", ""),
            ),
            r"inertia matrix is singular at q = \[0.0, 0.0\].*massless",
        ),  # two coaxial joints around a massless link
        (
            _robot('<link name="b"/>', _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", "")),
            r"the base \(root link 'b'\) has no mass",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<axis xyz="0 0 0"/>')),
            r"joint 'j' <axis xyz>: the joint axis must be non-zero",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<axis xyz="1 0"/>')),
            r"joint 'j' <axis xyz>: expected 3 number\(s\)",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<origin xyz="0 0 abc"/>')),
            r"joint 'j' <origin xyz>: expected 3 number\(s\), got '0 0 abc'",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<origin xyz="0 0 1_0"/>')),
            r"joint 'j' <origin xyz>: expected 3 number\(s\), got '0 0 1_0'",
        ),
        (
            _robot(
                _BASE,
                _LINK.format("a"),
                _JOINT.format("j", "revolute", "b", "a", '<axis xyz="1 0 0"/><axis xyz="0 1 0"/>'),
            ),
            r"joint 'j': <axis> given 2 times; expected at most one",
        ),
        (
            _robot(
                _BASE.replace('<mass value="10"/>', '<mass value="10"/><mass value="20"/>'),
                _LINK.format("a"),
                _JOINT.format("j", "fixed", "b", "a", ""),
            ),
            r"link 'b' <inertial>: <mass> given 2 times; expected at most one",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<origin rpy="0 nan 0"/>')),
            r"joint 'j' <origin rpy>: values must be finite",
        ),
        (
            _robot(_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<dynamics damping="-1"/>')),
            r"joint 'j' <dynamics damping>: must be non-negative",
        ),
        (
            _robot(_BASE, _LINK.format("a"), '<joint name="j"><parent link="b"/><child link="a"/></joint>'),
            "joint 'j': missing type attribute",
        ),
        (
            _robot(_BASE, _LINK.format("a"), '<joint name="j" type="fixed"><parent link="b"/></joint>'),
            r"joint 'j': missing <child link=...>",
        ),
        (_robot(_BASE, _LINK.format("a"), _LINK.format("a")), "duplicate link name 'a'"),
        (
            _robot(
                _BASE,
                _LINK.format("a"),
                _LINK.format("c"),
                _JOINT.format("j", "fixed", "b", "a", ""),
                _JOINT.format("j", "fixed", "b", "c", ""),
            ),
            "duplicate joint name 'j'",
        ),
        (
            _robot(
                '<link name="b"><inertial><mass value="-1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
            ),
            r"link 'b' <inertial>: mass must be non-negative",
        ),
        (
            _robot(
                '<link name="b"><inertial><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>'
            ),
            r"link 'b' <inertial>: missing <mass>",
        ),
        (
            _robot('<link name="b"><inertial><mass value="1"/></inertial></link>'),
            r"link 'b' <inertial>: missing <inertia>",
        ),
        (
            _robot(
                '<link name="b"><inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0"/></inertial></link>'
            ),
            r"link 'b' <inertial> <inertia izz>: missing",
        ),
        (
            _robot(
                '<link name="b"><inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="5"/></inertial></link>'
            ),
            "triangle inequality",
        ),
        (_robot("<link/>"), "<link> without a name"),
        (_robot('<joint type="fixed"/>'), "<joint> without a name"),
        (_robot(), "no <link> elements"),
        ("<model/>", "the root element must be <robot>"),
        ("<robot><link name='b'>", "not well-formed XML"),
        ('<!DOCTYPE r [<!ENTITY e "x">]><robot name="&e;"/>', "DOCTYPE/ENTITY declarations are not accepted"),
    ],
)
def test_refusals(text, message):
    with pytest.raises(ValueError, match=message):
        model_from_urdf(text)


def test_refusals_end_points_and_files(tmp_path):
    arm = DATA / "satellite_arm7.urdf"
    with pytest.raises(ValueError, match="end_points: link 'nowhere' is not defined"):
        model_from_urdf(arm, end_points=["nowhere"])
    with pytest.raises(ValueError, match=r"end_points: links \['tool0'\] are listed more than once"):
        model_from_urdf(arm, end_points=["tool0", "gripper", "tool0"])
    with pytest.raises(ValueError, match="end_points: expected a sequence of link names, got the string 'tool0'"):
        model_from_urdf(arm, end_points="tool0")
    with pytest.raises(ValueError, match="base_link 'gripper': the root link of the URDF tree is 'bus'"):
        model_from_urdf(arm, base_link="gripper")
    two_leaves = _robot(
        _BASE,
        _LINK.format("a"),
        '<link name="t1"/><link name="t2"/>',
        _JOINT.format("j", "revolute", "b", "a", ""),
        _JOINT.format("f1", "fixed", "a", "t1", ""),
        _JOINT.format("f2", "fixed", "a", "t2", ""),
    )
    both = model_from_urdf(two_leaves)  # two frames on one link: both kept, in document order
    assert both.end_point_link == (1, 1) and both.end_point_names == ("t1", "t2")
    assert model_from_urdf(two_leaves, end_points=["t2"]).end_point_link == (1,)
    with pytest.raises(ValueError, match="no such URDF file"):
        model_from_urdf(tmp_path / "missing.urdf")
    big = tmp_path / "big.urdf"
    big.write_text("<robot>" + " " * 10 + "</robot>")


def test_size_limits(tmp_path, monkeypatch):
    import sdjax.io.urdf as urdf_module

    big = tmp_path / "big.urdf"
    big.write_text("<robot>" + " " * 10 + "</robot>")
    monkeypatch.setattr(urdf_module, "MAX_FILE_BYTES", 8)
    with pytest.raises(ValueError, match="big.urdf: 25 bytes exceeds the URDF size limit of 8"):
        model_from_urdf(big)
    with pytest.raises(ValueError, match="URDF string: 20 characters exceeds the URDF size limit of 8"):
        model_from_urdf("<robot>" + " " * 5 + "</robot>")
    monkeypatch.setattr(urdf_module, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(urdf_module, "MAX_ELEMENTS", 3)
    with pytest.raises(ValueError, match="more than 3 XML elements"):
        model_from_urdf(_robot(_BASE))


def test_pinocchio_helpers_refuse_another_model():
    pin = pytest.importorskip("pinocchio")
    info = import_urdf(DATA / "satellite_arm7.urdf")
    other = pin.buildModelFromUrdf(str(DATA / "two_arm_servicer.urdf"), pin.JointModelFreeFlyer())
    with pytest.raises(ValueError, match="joint 'shoulder_yaw' is not in the Pinocchio model"):
        pinocchio_from_state(info, other, random_state(info.model, 0))


# ------------------------------------------------------------------------------------------
# Base modes from the file: a world root.


def test_fixed_base_against_pinocchio():
    """A root link ``world`` welded to the arm gives a fixed base; checked against Pinocchio's
    own parse of the file without a root joint (its universe is the world link)."""
    pin = pytest.importorskip("pinocchio")
    path = DATA / "fixed_base_arm.urdf"
    gravity = np.array([0.0, 0.0, -9.81])
    info = import_urdf(path, gravity=gravity)
    model = info.model
    assert model.base == "fixed" and info.root_link == "world" and model.num_velocities == model.num_joints
    pm = pin.buildModelFromUrdf(str(path))
    pm.gravity = pin.Motion(gravity, np.zeros(3))
    data = pm.createData()
    n = model.num_joints
    assert pm.nv == n
    perm = np.zeros((n, n))
    for k, joint in enumerate(info.joint_names):
        perm[pm.idx_vs[pm.getJointId(joint)], k] = 1.0
    rng = np.random.default_rng(3)
    damping = np.asarray(model.joint_damping)
    for _ in range(5):
        # Continuous joints are (cos q, sin q) pairs in Pinocchio: go through an angle vector.
        angles = sdjax.make_state(model, base_position=info.root_to_base, q=rng.uniform(-np.pi, np.pi, size=n))
        q_pin, _ = pinocchio_from_state(info, pm, angles)
        v_pin = rng.normal(size=pm.nv)
        state = state_from_pinocchio(info, pm, q_pin, v_pin)
        # The base sits where the file welds it: the world origin moved to the base centroid.
        np.testing.assert_allclose(np.asarray(state.base_position), info.root_to_base, rtol=0, atol=0)
        tau = rng.normal(scale=5.0, size=n)
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        # As test_against_pinocchio_urdf_parser: sums of O(n) composite-inertia terms, round-off
        # ~n * 1e-16 of the largest entry or term; 1e-12 leaves a wide margin.
        assert _rel(sdjax.inertia_matrix(model, state), perm.T @ m @ perm) < 1e-12
        nle = pin.rnea(pm, data, q_pin, v_pin, np.zeros(n))
        assert _rel(sdjax.bias_forces(model, state), perm.T @ nle) < 1e-12
        base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
        expected = perm.T @ pin.aba(pm, data, q_pin, v_pin, perm @ (tau - damping * np.asarray(state.qd)))
        # Cholesky against articulated bodies: ~cond(M) * eps relative (cond(M) < 1e3 here).
        assert _rel(qdd, expected) < max(1e-12, 1e-14 * np.linalg.cond(m))
        assert np.all(np.asarray(base_acc) == 0)
        # The reaction the mount carries at rest under gravity: the whole weight (sdjax's base
        # wrench holds the system still: F0 = -M g), to round-off of a sum of n + 1 weights.
        rest = eqx.tree_at(lambda s: s.qd, state, jnp.zeros(n))
        wrench, _ = sdjax.inverse_dynamics(model, rest)
        np.testing.assert_allclose(np.asarray(wrench[:3]), -float(model.total_mass) * gravity, rtol=1e-13, atol=1e-10)
        q_back, v_back = pinocchio_from_state(info, pm, state)
        np.testing.assert_allclose(v_back, v_pin, rtol=0, atol=0)
        np.testing.assert_allclose(q_back, q_pin, rtol=0, atol=1e-15)  # cos/sin of arctan2 of them


_PLANAR_WORLD = (
    '<link name="world"/><joint name="float" type="planar"><parent link="world"/><child link="b"/>{0}</joint>'
)


def test_world_joint_sets_the_base_mode():
    chain = (_BASE, _LINK.format("a"), _JOINT.format("j", "revolute", "b", "a", '<origin xyz="0.5 0 0"/>'))
    floating = model_from_urdf(_robot(*chain))
    assert floating.base == "floating"
    # world -planar-> b: a planar base (the plane normal is the default axis rotated onto z).
    planar = model_from_urdf(_robot(_PLANAR_WORLD.format('<axis xyz="0 0 1"/>'), *chain))
    assert planar.base == "planar" and planar.link_names == ("a",) and planar.num_velocities == 4
    tilted = model_from_urdf(_robot(_PLANAR_WORLD.format('<origin rpy="0 1.5707963267948966 0"/>'), *chain))
    assert tilted.base == "planar"
    # The same arrays as the file without the world link, given the mode explicitly.
    explicit = model_from_urdf(_robot(*chain), base="planar")
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(np.all(a == b)), planar, explicit))
    free = model_from_urdf(
        _robot(
            '<link name="world"/><joint name="f" type="floating"><parent link="world"/><child link="b"/></joint>',
            *chain,
        )
    )
    assert free.base == "floating" and free.link_names == ("a",)
    # Overrides: a file without a world link as a fixed base, a welded world as a floating one.
    assert model_from_urdf(_robot(*chain), base="fixed").base == "fixed"
    welded = _robot(
        '<link name="world"/><joint name="w" type="fixed"><parent link="world"/><child link="b"/></joint>', *chain
    )
    assert model_from_urdf(welded).base == "fixed"
    assert model_from_urdf(welded, base="floating").base == "floating"
    # A massless world welded to a massless link: fine for a fixed base, refused floating.
    bare = _robot('<link name="world"/>', _LINK.format("a"), _JOINT.format("j", "revolute", "world", "a", ""))
    assert model_from_urdf(bare).base == "fixed"
    with pytest.raises(ValueError, match=r"the base \(root link 'world'\) has no mass: a floating base.*base='fixed'"):
        model_from_urdf(bare, base="floating")
    with pytest.raises(ValueError, match="plane of this planar joint has normal"):
        model_from_urdf(_robot(_PLANAR_WORLD.format(""), *chain))  # default axis x: a vertical plane
    with pytest.raises(ValueError, match="link 'world' joins the tree by the planar joint 'float'.*only joint"):
        model_from_urdf(
            _robot(
                _PLANAR_WORLD.format('<axis xyz="0 0 1"/>'),
                *chain,
                _LINK.format("c"),
                _JOINT.format("k", "fixed", "world", "c", ""),
            )
        )
    with pytest.raises(ValueError, match="base: unknown base mode 'hovering'"):
        model_from_urdf(_robot(*chain), base="hovering")


def test_mimic_joints_against_pinocchio():
    """``<mimic>`` joints (a geared wrist and a mirrored gripper finger) loaded as
    :class:`sdjax.constraints.JointCoupling`: the constrained dynamics of the full tree moves as
    Pinocchio's mimic model of the same file (reduced coordinates: ``crba``, ``rnea``): inertia
    matrix ``G^T H G``, accelerations, and the leader torques of the inverse dynamics."""
    pin = pytest.importorskip("pinocchio")
    from sdjax import constraints as C

    path = DATA / "mimic_gripper.urdf"
    with pytest.raises(ValueError, match=r"joint 'wrist_joint': <mimic joint='joint2'>.*mimic='constraints'"):
        import_urdf(path, mimic="refuse")
    gravity = np.array([0.0, 0.3, -9.81])
    info = import_urdf(path, gravity=gravity, mimic="constraints")
    model, couplings = info.model, info.couplings
    n = model.num_joints
    followers = {c.follower - 1: c for c in couplings}  # by column of q (joint i is q[i - 1])
    assert [(c.follower, c.leader, float(c.multiplier), float(c.offset)) for c in couplings] == [
        (3, 2, 2.0, 0.1),  # joint numbers 1..n
        (6, 5, 1.0, 0.005),
    ]
    independent = [k for k in range(n) if k not in followers]
    g = np.zeros((n, len(independent)))  # qd = G qd_independent
    for col, k in enumerate(independent):
        g[k, col] = 1.0
    for c in couplings:
        g[c.follower - 1] = float(c.multiplier) * g[c.leader - 1]
    pm_full, pm = pin.buildModelFromUrdf(str(path)), pin.buildModelFromUrdf(str(path), mimic=True)
    pm.gravity = pin.Motion(gravity, np.zeros(3))
    assert pm.nv == len(independent)
    perm = np.zeros((pm.nv, len(independent)))  # Pinocchio's reduced velocity order
    for col, k in enumerate(independent):
        perm[pm.idx_vs[pm.getJointId(info.joint_names[k])], col] = 1.0
    rng = np.random.default_rng(8)
    for _ in range(3):
        q = np.zeros(n)
        q[independent] = rng.uniform(-1.0, 1.0, size=len(independent))
        for c in couplings:
            q[c.follower - 1] = float(c.multiplier) * q[c.leader - 1] + float(c.offset)
        qd = g @ rng.normal(size=len(independent))
        state = sdjax.make_state(model, base_position=info.root_to_base, q=q, qd=qd)
        assert np.max(np.abs(np.asarray(C.position_errors(model, state, couplings)))) < 1e-15
        q_full, _ = pinocchio_from_state(info, pm_full, state)
        q_pin = np.zeros(pm.nq)
        for j in range(1, pm.njoints):
            if pm.nqs[j]:
                jf = pm_full.getJointId(pm.names[j])
                q_pin[pm.idx_qs[j] : pm.idx_qs[j] + pm.nqs[j]] = q_full[
                    pm_full.idx_qs[jf] : pm_full.idx_qs[jf] + pm.nqs[j]
                ]
        v_pin = perm @ np.asarray(qd)[independent]
        data = pm.createData()  # (Pinocchio 4.1's crba on a mimic model reads stale data when reused)
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        # Sums of O(n) composite-inertia terms: round-off ~1e-16 relative.
        assert _rel(g.T @ np.asarray(sdjax.inertia_matrix(model, state)) @ g, perm.T @ m @ perm) < 1e-12
        tau = rng.normal(scale=2.0, size=n)
        result = C.constrained_forward_dynamics(model, state, tau, couplings)
        # Pinocchio's reduced equations: the follower torques act on their leaders (G^T tau).
        bias = pin.rnea(pm, data, q_pin, v_pin, np.zeros(pm.nv))
        expected = perm.T @ np.linalg.solve(m, perm @ (g.T @ tau) - bias)
        # Schur complement on H against Pinocchio's reduced solve: ~cond * eps (cond < 1e4 here).
        assert _rel(np.asarray(result.qdd)[independent], expected) < 1e-11
        assert _rel(np.asarray(result.qdd), g @ expected) < 1e-11  # the followers follow
        # Inverse dynamics with the followers unactuated: the leader torques Pinocchio needs.
        actuated = np.array([k not in followers for k in range(n)])
        tau_id, _ = C.constrained_inverse_dynamics(model, state, None, result.qdd, couplings, actuated=actuated)
        needed = perm.T @ pin.rnea(pm, data, q_pin, v_pin, perm @ expected)
        assert _rel(np.asarray(tau_id)[independent], needed) < 1e-11


@pytest.mark.parametrize("name", ["mimic_gripper", "panda"])
def test_mimic_coordinates_against_pinocchio(name):
    """``<mimic>`` joints loaded by default as mimic joints of the model (reduced coordinates)
    against Pinocchio's mimic model of the same file (``buildModelFromUrdf(..., mimic=True)``),
    on a geared wrist with an offset and a mirrored finger (``mimic_gripper``) and on Franka's
    Panda as its authors wrote it (tests/data/README.md): inertia matrix, bias forces, forward
    dynamics (a mimic joint's torque and damping acting on its leader) and inverse dynamics."""
    pin = pytest.importorskip("pinocchio")
    path = DATA / f"{name}.urdf"
    gravity = np.array([0.0, 0.3, -9.81])
    info = import_urdf(path, gravity=gravity, base="fixed")
    model = info.model
    independent = model.independent_joints
    n, nc = model.num_joints, len(independent)
    assert model.has_mimic and model.num_velocities == nc < n
    s = np.asarray(sdjax.model.joint_coordinate_map(model))  # qd = S qd_c
    pm_full, pm = pin.buildModelFromUrdf(str(path)), pin.buildModelFromUrdf(str(path), mimic=True)
    pm.gravity = pin.Motion(gravity, np.zeros(3))
    assert pm.nv == nc
    perm = np.zeros((nc, nc))  # Pinocchio's reduced velocity order from sdjax's coordinates
    for col, k in enumerate(independent):
        perm[pm.idx_vs[pm.getJointId(info.joint_names[k])], col] = 1.0
    damping = np.asarray(model.joint_damping)
    rng = np.random.default_rng(8)
    for _ in range(3):
        state = sdjax.make_state(
            model, base_position=info.root_to_base, q=rng.uniform(-1.0, 1.0, size=nc), qd=rng.normal(size=nc)
        )
        q_pin, v_pin = pinocchio_from_state(info, pm, state)
        # The plain parse of the file sees the same configuration, mimic joints included.
        q_full, _ = pinocchio_from_state(info, pm_full, state)
        for k in range(n):
            jf, leader = pm_full.getJointId(info.joint_names[k]), model.mimic_leader[k]
            if leader:
                expected_q = float(model.mimic_multiplier[k]) * float(state.q[leader - 1]) + float(
                    model.mimic_offset[k]
                )
                np.testing.assert_allclose(q_full[pm_full.idx_qs[jf]], expected_q, rtol=1e-15, atol=1e-15)
        np.testing.assert_array_equal(v_pin, perm @ np.asarray(state.qd)[independent])
        data = pm.createData()  # (Pinocchio 4.1's crba on a mimic model reads stale data when reused)
        m = pin.crba(pm, data, q_pin)
        m = np.triu(m) + np.triu(m, 1).T
        # Sums of O(n) composite-inertia terms: round-off ~1e-16 relative; 1e-12 leaves a margin.
        assert _rel(sdjax.inertia_matrix(model, state), perm.T @ m @ perm) < 1e-12
        nle = pin.rnea(pm, data, q_pin, v_pin, np.zeros(nc))
        assert _rel(sdjax.bias_forces(model, state), perm.T @ nle, np.max(np.abs(nle)) + 1e-300) < 1e-12
        tau = rng.normal(scale=2.0, size=n)  # torques on every joint, the mimic ones included
        base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
        applied = s.T @ (tau - damping * np.asarray(state.qd))  # virtual power: G^T of the joint loads
        expected = perm.T @ np.linalg.solve(m, perm @ applied - nle)
        # Cholesky against Pinocchio's dense solve: ~cond(M) * eps relative (cond < 1e6 here).
        assert _rel(np.asarray(qdd)[independent], expected) < max(1e-11, 1e-15 * np.linalg.cond(m))
        np.testing.assert_allclose(qdd, s @ np.asarray(qdd)[independent], rtol=0, atol=1e-15 * np.max(np.abs(qdd)))
        assert np.all(np.asarray(base_acc) == 0)
        _, tau_id = sdjax.inverse_dynamics(model, state, None, qdd)
        needed = perm.T @ pin.rnea(pm, data, q_pin, v_pin, perm @ np.asarray(qdd)[independent])
        # The coordinates' torque on the leaders (passive terms removed), nothing on mimic joints.
        assert _rel(np.asarray(tau_id)[independent], needed + s.T @ (damping * np.asarray(state.qd))) < 1e-12
        assert np.all(np.delete(np.asarray(tau_id), independent) == 0)
        # Round trip: the inverse dynamics' torques reproduce the accelerations.
        assert _rel(sdjax.forward_dynamics(model, state, tau_id)[1], qdd) < 1e-11


def test_mimic_joints_survive_files_and_edits(tmp_path):
    """A model with mimic joints written to JSON and URDF and read back, appended to another
    model, and locked: the same relations and the same dynamics."""
    model = model_from_urdf(DATA / "mimic_gripper.urdf")
    assert model.has_mimic
    for suffix in (".json", ".urdf"):
        sdjax.save_model(model, tmp_path / f"m{suffix}")
        back = sdjax.load_model(tmp_path / f"m{suffix}")
        assert back.mimic_leader == model.mimic_leader
        np.testing.assert_array_equal(back.mimic_multiplier, model.mimic_multiplier)
        np.testing.assert_array_equal(back.mimic_offset, model.mimic_offset)
    sdjax.make_state(model, q=np.linspace(0.1, 0.5, model.num_joint_coordinates))  # the coordinates: accepted
    with pytest.raises(ValueError, match=r"make_state: joint \d+ .* mimics joint \d+ .* must be"):
        sdjax.make_state(model, q=np.linspace(0.1, 0.6, model.num_joints))  # mimic joints off their leaders
    with pytest.raises(ValueError, match="SpaceDyn's link parameters|mimic joints"):
        sdjax.save_model(model, tmp_path / "m.def")
    # Appended behind another arm: the relations renumbered with the links.
    arm = spacedyn_sample()
    combined = sdjax.editing.append_model(arm, model, 0, prefix="g_")
    n0 = arm.num_joints
    assert combined.mimic_leader == (0,) * n0 + tuple(n0 + leader if leader else 0 for leader in model.mimic_leader)
    # Locking a whole relation at consistent positions: no mimic joint left where it was.
    leader = next(j for j in model.mimic_leader if j)
    follower = model.mimic_leader.index(leader) + 1
    with pytest.raises(ValueError, match="belongs to a mimic relation"):
        sdjax.editing.lock_joints(model, [leader], [0.2])
    q_leader = 0.2
    q_follower = float(model.mimic_multiplier[follower - 1]) * q_leader + float(model.mimic_offset[follower - 1])
    locked = sdjax.editing.lock_joints(model, [leader, follower], [q_leader, q_follower])
    assert locked.num_joints == model.num_joints - 2
    assert sum(1 for j in locked.mimic_leader if j) == sum(1 for j in model.mimic_leader if j) - 1


@pytest.mark.parametrize(
    "joints, message",
    [
        (
            _JOINT.format("j", "revolute", "b", "a", '<mimic joint="nope"/>')
            + _JOINT.format("k", "revolute", "a", "c", ""),
            "joint 'j' <mimic joint='nope'>: no revolute, continuous or prismatic joint",
        ),
        (
            _JOINT.format("j", "revolute", "b", "a", '<mimic joint="k"/>') + _JOINT.format("k", "fixed", "a", "c", ""),
            "joint 'j' <mimic joint='k'>: no revolute",
        ),
        (
            _JOINT.format("j", "revolute", "b", "a", '<mimic joint="k"/>')
            + _JOINT.format("k", "revolute", "a", "c", '<mimic joint="j"/>'),
            "mimics another itself",
        ),
        (
            _JOINT.format("j", "revolute", "b", "a", '<mimic joint="k" multiplier="x"/>')
            + _JOINT.format("k", "revolute", "a", "c", ""),
            "<mimic multiplier>: expected 1 number",
        ),
    ],
)
def test_mimic_refusals(joints, message):
    text = _robot(_BASE, _LINK.format("a"), _LINK.format("c"), joints)
    with pytest.raises(ValueError, match=re.escape(message)):
        import_urdf(text, mimic="constraints")


def test_mimic_on_a_fixed_joint_is_ignored():
    text = _robot(
        _BASE,
        _LINK.format("a"),
        _LINK.format("c"),
        _JOINT.format("j", "fixed", "b", "a", '<mimic joint="k"/>'),
        _JOINT.format("k", "revolute", "a", "c", ""),
    )
    info = import_urdf(text)  # nothing to couple: loads with the default too
    assert info.model.num_joints == 1 and info.couplings == ()


def test_mimic_option_is_checked():
    with pytest.raises(
        ValueError, match=r"mimic: unknown value 'ignore'; choose one of \['coordinates', 'constraints', 'refuse'\]"
    ):
        import_urdf(DATA / "fixed_base_arm.urdf", mimic="ignore")


def test_link_limit_is_checked_before_building():
    from sdjax.io.urdf import MAX_LINKS

    links = "".join(f'<link name="l{i}"/>' for i in range(MAX_LINKS + 1))
    joints = "".join(_JOINT.format(f"j{i}", "fixed", f"l{i}", f"l{i + 1}", "") for i in range(MAX_LINKS))
    with pytest.raises(ValueError, match=f"{MAX_LINKS + 1} links exceeds the limit of {MAX_LINKS}"):
        import_urdf(_robot(links, joints))
