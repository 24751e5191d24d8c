"""MJCF import (sdjax.io.mjcf_import) checked against MuJoCo on the same files: joint
accelerations of forward dynamics, kinetic energy, site positions, the joint-space inertia
matrix and bias of fixed-base models, and a round trip through sdjax's own exporter."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.io.mjcf import mujoco_coordinates, to_mjcf
from sdjax.io.mjcf_import import import_mjcf, state_from_mujoco
from sdjax.models import random_model
from helpers import assert_close, random_state

mujoco = pytest.importorskip("mujoco")

# A free-flying body with the features the reader maps: defaults classes, Euler angles in
# degrees, a body with two hinges about different anchors, a hinge and a slide with a
# non-zero ref, a welded child with mass, sites, damping and a spring, inertia from geoms.
FLOATING = """
<mujoco model="servicer">
  <compiler angle="degree" eulerseq="xyz"/>
  <option gravity="0 0 0"><flag contact="disable" limit="disable"/></option>
  <default>
    <joint damping="0.3"/>
    <default class="wrist"><joint axis="0 1 0" damping="0.05"/></default>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1"/>
    <body name="bus" pos="0.1 -0.2 0.3" euler="10 20 30">
      <freejoint name="root"/>
      <geom type="box" size="0.5 0.4 0.3" mass="200"/>
      <site name="antenna" pos="0 0 0.35" euler="0 90 0"/>
      <body name="shoulder" pos="0.5 0 0.2" euler="0 -30 15">
        <joint name="yaw" axis="0 0 1" pos="0 0 0.02" ref="12"/>
        <joint name="pitch" class="wrist" pos="0.03 0 0.05" stiffness="4"/>
        <geom type="capsule" fromto="0 0 0 0.6 0 0" size="0.05" mass="4"/>
        <body name="forearm" pos="0.6 0 0" quat="0.9 0.1 0.3 -0.2">
          <joint name="extend" type="slide" axis="1 0.2 0" ref="0.05" damping="1.5"/>
          <geom type="cylinder" fromto="0 0 0 0.4 0 0" size="0.04" mass="2"/>
          <body name="camera" pos="0.4 0.02 0" euler="5 0 0">
            <geom type="box" size="0.05 0.04 0.03" mass="0.7"/>
            <site name="lens" pos="0.05 0 0"/>
          </body>
          <body name="hand" pos="0.42 0 0.01">
            <joint name="roll" class="wrist" axis="1 0 0"/>
            <geom type="sphere" size="0.06" mass="1.2" pos="0.04 0.01 0"/>
            <site name="tool" pos="0.1 0 0" euler="0 0 45"/>
          </body>
        </body>
      </body>
      <body name="paddle" pos="-0.5 0 0">
        <joint name="drive" axis="0 1 0"/>
        <geom type="box" size="0.8 0.02 0.4" pos="-0.8 0 0" mass="6"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _mujoco_state(m, rng):
    """Random ``(qpos, qvel)``: the free joint first (MuJoCo's order), then the hinges/slides."""
    qpos = m.qpos0.copy()
    qpos[:3] = rng.normal(size=3)
    quat = rng.normal(size=4)
    qpos[3:7] = quat / np.linalg.norm(quat)
    qpos[7:] += rng.uniform(-1.0, 1.0, size=m.nq - 7)
    return qpos, rng.normal(size=m.nv)


def test_floating_mjcf_against_mujoco():
    info = import_mjcf(FLOATING)
    model = info.model
    m = mujoco.MjModel.from_xml_string(FLOATING)
    assert model.name == "servicer" and model.base == "floating" and model.num_joints == m.nv - 6 == 5
    # Sites and the welded camera body are frames; the scenery (the floor) is dropped.
    assert set(model.end_point_names) >= {"antenna", "lens", "tool", "camera"}
    assert float(model.total_mass) == pytest.approx(float(np.sum(m.body_mass)), rel=1e-14)
    for d, state in _assert_floating_dynamics_match(info, m, trials=3):
        kin = sdjax.forward_kinematics(model, state)
        for site in ("antenna", "lens", "tool"):
            e = model.end_point_index(site)
            s = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, site)
            assert_close(kin.end_point_position[e], d.site_xpos[s], 1e-13, f"site {site} position")
            assert_close(kin.end_point_rotation[e], d.site_xmat[s].reshape(3, 3), 1e-13, f"site {site} rotation")


def _assert_floating_dynamics_match(info, m, trials):
    """Joint accelerations and kinetic energy of a floating-base import against MuJoCo's at random
    states and joint forces; yields MuJoCo's data and the sdjax state of each trial."""
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    for trial in range(trials):
        qpos, qvel = _mujoco_state(m, rng)
        tau = rng.normal(size=m.nv - 6)
        d.qpos[:], d.qvel[:] = qpos, qvel
        d.qfrc_applied[:] = 0.0
        d.qfrc_applied[[m.jnt_dofadr[j] for j in info.joint_ids]] = tau
        mujoco.mj_forward(m, d)
        state = state_from_mujoco(info, m, qpos, qvel)
        _, qdd = sdjax.forward_dynamics(info.model, state, tau)
        expected = np.array([d.qacc[m.jnt_dofadr[j]] for j in info.joint_ids])
        # Joint accelerations do not depend on the base frame convention; both engines solve
        # with a Cholesky factor of a matrix of condition ~1e4: agreement to ~1e-10 relative.
        assert_close(qdd, expected, 1e-10, f"joint accelerations, trial {trial}")
        energy = 0.5 * qvel @ (_full_inertia(m, d) @ qvel)
        assert_close(sdjax.kinetic_energy(info.model, state), energy, 1e-12, "kinetic energy")
        yield d, state


def _full_inertia(m, d):
    full = np.zeros((m.nv, m.nv))
    mujoco.mj_fullM(m, d, full)
    return full


FIXED = """
<mujoco model="bench_arm">
  <option gravity="0.3 -0.2 -9.81"><flag contact="disable" limit="disable"/></option>
  <worldbody>
    <body name="pedestal" pos="0 0 0.5">
      <geom type="cylinder" size="0.2 0.5" mass="50"/>
      <body name="link1" pos="0 0 0.5" axisangle="0 0 1 30" childclass="arm">
        <joint name="j1" axis="0 0 1" damping="0.2"/>
        <geom type="capsule" fromto="0 0 0 0 0 0.4" size="0.05" mass="3"/>
        <body name="link2" pos="0 0 0.4" xyaxes="0 1 0 -1 0 0">
          <joint name="j2" axis="0 1 0" pos="0 0 0.03"/>
          <joint name="j3" axis="1 0 0"/>
          <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.04" mass="2"/>
          <body name="link3" pos="0.5 0 0" zaxis="0 1 1">
            <joint name="j4" type="slide" axis="0 0 1"/>
            <geom type="box" size="0.05 0.05 0.1" mass="1"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <default><default class="arm"><joint damping="0.1"/></default></default>
</mujoco>
"""


def test_fixed_base_mjcf_inertia_and_bias_against_mujoco():
    info = import_mjcf(FIXED)
    model = info.model
    m = mujoco.MjModel.from_xml_string(FIXED)
    d = mujoco.MjData(m)
    assert model.base == "fixed" and model.num_joints == m.nv == 4
    np.testing.assert_array_equal(np.asarray(model.gravity), [0.3, -0.2, -9.81])
    rng = np.random.default_rng(1)
    order = [m.jnt_dofadr[j] for j in info.joint_ids]
    for trial in range(3):
        qpos, qvel = rng.uniform(-1, 1, size=m.nq), rng.normal(size=m.nv)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        state = state_from_mujoco(info, m, qpos, qvel)
        h = _full_inertia(m, d)[np.ix_(order, order)]
        assert_close(sdjax.inertia_matrix(model, state), h, 1e-13, "H")  # sums of O(1) products
        # MuJoCo's bias holds Coriolis, centrifugal and gravity forces; damping is passive.
        bias = d.qfrc_bias[order]
        assert_close(sdjax.bias_forces(model, state), bias, 1e-12, "bias")
        assert_close(sdjax.passive_joint_torques(model, state), d.qfrc_passive[order], 1e-13, "damping")


# Joint equalities (MuJoCo's form of URDF's <mimic>): a gripper's mirrored slide fingers and a
# geared hinge with an offset and non-zero reference positions (q1 = a1 q2 + a0 + q1_0 - a1 q2_0).
GRIPPER = """
<mujoco model="gripper">
  <compiler angle="radian"/>
  <option gravity="0 0.5 -9.81"><flag contact="disable" limit="disable"/></option>
  <worldbody>
    <body name="palm" pos="0 0 0.3">
      <joint name="wrist" axis="0 0 1" ref="0.2" damping="0.1"/>
      <geom type="box" size="0.05 0.08 0.02" mass="0.8"/>
      <body name="left" pos="0 0.04 0.05">
        <joint name="left_slide" type="slide" axis="0 1 0"/>
        <geom type="box" size="0.01 0.01 0.04" mass="0.1"/>
      </body>
      <body name="right" pos="0 -0.04 0.05">
        <joint name="right_slide" type="slide" axis="0 1 0"/>
        <geom type="box" size="0.01 0.01 0.04" mass="0.1"/>
      </body>
      <body name="cam" pos="0.05 0 0.04">
        <joint name="cam_hinge" axis="1 0 0" ref="-0.3"/>
        <geom type="capsule" fromto="0 0 0 0 0.1 0" size="0.01" mass="0.05"/>
      </body>
    </body>
  </worldbody>
  <equality>
    <joint name="mirror" joint1="right_slide" joint2="left_slide" polycoef="0 -1 0 0 0"/>
    <joint name="gear" joint1="cam_hinge" joint2="wrist" polycoef="0.05 2 0 0 0"/>
  </equality>
</mujoco>
"""


def test_joint_equalities_are_mimic_joints_against_mujoco():
    """The linear joint equalities load as mimic joints; at configurations on MuJoCo's own
    constraint (its equality residual ``efc_pos`` is zero there, which checks the offset), the
    inertia matrix and bias are MuJoCo's projected on the coordinates: ``G^T M G``, ``G^T c``."""
    info = import_mjcf(GRIPPER)
    model = info.model
    m = mujoco.MjModel.from_xml_string(GRIPPER)
    d = mujoco.MjData(m)
    assert model.base == "fixed" and model.num_joints == 4 and model.num_velocities == 2
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in info.joint_ids]
    order = [m.jnt_dofadr[j] for j in info.joint_ids]
    rng = np.random.default_rng(5)
    for trial in range(3):
        state = sdjax.make_state(model, q=rng.uniform(-0.5, 0.5, 2), qd=rng.normal(size=2))
        qpos, qvel = np.zeros(m.nq), np.zeros(m.nv)
        qpos[[m.jnt_qposadr[j] for j in info.joint_ids]] = np.asarray(state.q)
        qvel[order] = np.asarray(state.qd)
        d.qpos[:], d.qvel[:] = qpos, qvel
        mujoco.mj_forward(m, d)
        equality_rows = np.asarray(d.efc_type) == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        # On the constraint: MuJoCo's residual is round-off of q1 - a1 q2 - (a0 + q1_0 - a1 q2_0).
        assert np.max(np.abs(np.asarray(d.efc_pos)[equality_rows])) < 1e-15
        g = np.asarray(sdjax.model.joint_coordinate_map(model))
        # As the fixed-base test above: sums of O(1) products (H), Newton-Euler sums (bias).
        full = _full_inertia(m, d)[np.ix_(order, order)]
        assert_close(sdjax.inertia_matrix(model, state), g.T @ full @ g, 1e-13, f"G^T M G, trial {trial}")
        assert_close(sdjax.bias_forces(model, state), g.T @ d.qfrc_bias[order], 1e-12, f"G^T c, trial {trial}")
        assert_close(state_from_mujoco(info, m, qpos, qvel).q, state.q, 1e-15, "state from MuJoCo")
        # A MuJoCo state slightly off the soft equality: the mimic joints follow their leaders.
        qpos_off = qpos.copy()
        qpos_off[m.jnt_qposadr[info.joint_ids[names.index("right_slide")]]] += 1e-6
        assert_close(state_from_mujoco(info, m, qpos_off, qvel).q, state.q, 1e-15, "mimic joints from leaders")
    assert model.mimic_leader[names.index("right_slide")] == names.index("left_slide") + 1
    assert model.mimic_leader[names.index("cam_hinge")] == names.index("wrist") + 1
    # Exported (the mimic joints as joint equalities) and read back: the same mechanism, on
    # MuJoCo's constraint, with the same kinetic energy as MuJoCo's 1/2 qvel^T M qvel.
    text = to_mjcf(model)
    again_info, m2 = import_mjcf(text), mujoco.MjModel.from_xml_string(text)
    d2 = mujoco.MjData(m2)
    qpos, qvel, t = mujoco_coordinates(model, state)
    np.testing.assert_allclose(qvel, t @ np.asarray(sdjax.generalized_velocity(model, state)), rtol=0, atol=1e-15)
    d2.qpos[:], d2.qvel[:] = qpos, qvel
    mujoco.mj_forward(m2, d2)
    assert (
        np.max(np.abs(np.asarray(d2.efc_pos)[np.asarray(d2.efc_type) == int(mujoco.mjtConstraint.mjCNSTR_EQUALITY)]))
        < 1e-15
    )
    again = state_from_mujoco(again_info, m2, qpos, qvel)
    assert again_info.model.num_velocities == 2 and sum(map(bool, again_info.model.mimic_leader)) == 2
    # A quadratic form of O(1) terms on both sides: round-off ~1e-15 relative; 1e-13 for margin.
    energy = 0.5 * qvel @ (_full_inertia(m2, d2) @ qvel)
    assert_close(sdjax.kinetic_energy(again_info.model, again), energy, 1e-13, "exported: energy")
    assert_close(sdjax.kinetic_energy(model, state), energy, 1e-13, "energy")


def test_round_trip_through_the_exporter():
    """sdjax -> to_mjcf -> import: the same kinetic energy and joint accelerations at the same
    physical state (a random tree with branches and prismatic joints, under gravity)."""
    model = random_model(12, 7, gravity=True)
    state = random_state(model, 3)
    text = to_mjcf(model)
    back = import_mjcf(text)
    m = mujoco.MjModel.from_xml_string(text)
    qpos, qvel, t = mujoco_coordinates(model, state)
    again = state_from_mujoco(back, m, qpos, qvel)
    assert_close(sdjax.kinetic_energy(back.model, again), sdjax.kinetic_energy(model, state), 1e-12, "energy")
    tau_mujoco = np.random.default_rng(4).normal(size=model.num_joints)  # MuJoCo's dof order
    permutation = t[6:, 6:]
    _, qdd = sdjax.forward_dynamics(model, state, permutation.T @ tau_mujoco)
    slots = [m.jnt_dofadr[j] - 6 for j in back.joint_ids]
    _, qdd_back = sdjax.forward_dynamics(back.model, again, tau_mujoco[slots])
    assert_close(qdd_back, (permutation @ np.asarray(qdd))[slots], 1e-10, "joint accelerations")  # cond(H) ~ 1e3


def test_refusals():
    ball = FLOATING.replace('<joint name="roll" class="wrist" axis="1 0 0"/>', '<joint name="roll" type="ball"/>')
    with pytest.raises(ValueError, match="joint 'roll' of body 'hand' is a ball joint"):
        import_mjcf(ball)
    with pytest.raises(ValueError, match="joint 'drive' has armature 0.1; rotor inertia is not modelled"):
        import_mjcf(
            FLOATING.replace('<joint name="drive" axis="0 1 0"/>', '<joint name="drive" axis="0 1 0" armature="0.1"/>')
        )
    for equality, message in (
        ('<connect body1="hand" body2="paddle" anchor="0 0 0"/>', "equality constraint 'equality 0' .* not supported"),
        ('<joint name="cubic" joint1="yaw" joint2="drive" polycoef="0 1 0 0.2 0"/>', "joint equality 'cubic' is not"),
        ('<joint name="held" joint1="yaw"/>', "joint equality 'held' is not a linear coupling of two joints"),
        ('<joint name="off" joint1="yaw" joint2="drive" active="false"/>', "joint equality 'off' is not"),
    ):
        coupled = FLOATING.replace("</worldbody>", f"</worldbody><equality>{equality}</equality>")
        with pytest.raises(ValueError, match=message):
            import_mjcf(coupled)
    with pytest.raises(ValueError, match=r"joint 'pitch' has a spring .* with rest position 0.0052"):
        import_mjcf(FLOATING.replace('stiffness="4"', 'stiffness="4" springref="0.3"'))  # degrees here
    with pytest.raises(ValueError, match="MJCF string: not well-formed XML"):
        import_mjcf("<mujoco><worldbody><body><joint type='hinge'/></body></worldbody>")
    with pytest.raises(ValueError, match="MJCF string: MuJoCo cannot compile it"):
        import_mjcf("<mujoco><worldbody><body><joint type='spiral'/></body></worldbody></mujoco>")
    # Counted before MuJoCo compiles: 300 x 100 replicated bodies from a 250-byte file.
    replicated = (
        "<mujoco><worldbody><body><freejoint/><geom size='0.1'/><replicate count='300' offset='0.1 0 0'>"
        "<replicate count='100' offset='0 0.1 0'><body><joint/><geom size='0.01'/></body></replicate>"
        "</replicate></body></worldbody></mujoco>"
    )
    with pytest.raises(ValueError, match="MJCF string: declares more than 20000 bodies"):
        import_mjcf(replicated)
    # What MuJoCo allocates for what sdjax does not use, capped from the attributes: a 291-byte
    # file asking for a 20000 x 20000 height field took 3.2 GB before MuJoCo gave up.
    with pytest.raises(ValueError, match=r"MJCF string: height fields of more than 16777216 samples in all"):
        import_mjcf(
            FLOATING.replace(
                "<worldbody>", '<asset><hfield name="h" nrow="20000" ncol="20000" size="1 1 1 1"/></asset><worldbody>'
            )
        )
    with pytest.raises(ValueError, match=r"MJCF string: textures of more than 67108864 pixels in all"):
        import_mjcf(
            FLOATING.replace(
                "<worldbody>",
                '<asset><texture name="t" type="skybox" builtin="checker" width="4000" height="4000"/></asset><worldbody>',
            )
        )
    # MuJoCo reads mass="nan" as "not given" (the geom's mass then comes from its density).
    with pytest.raises(ValueError, match=r"MJCF string: <geom mass='nan'> is not a number"):
        import_mjcf(FLOATING.replace('mass="1.2"', 'mass="nan"'))
    # URDF text: MuJoCo converts it by its own rules (a root link's mass dropped); sdjax's reader is elsewhere.
    with pytest.raises(ValueError, match=r"MJCF string: a URDF file \(root element <robot>\), not MJCF"):
        import_mjcf('<robot name="r"><link name="a"/></robot>')
    with pytest.raises(ValueError, match="DOCTYPE/ENTITY declarations are not accepted"):
        import_mjcf('<!DOCTYPE m [<!ENTITY a "x">]><mujoco/>')
    with pytest.raises(ValueError, match="no such MJCF file"):
        import_mjcf("/nonexistent/robot.xml")


ATTACHED_ARM = """
<mujoco model="arm">
  <worldbody>
    <body name="mount" pos="0 0 0.1">
      <geom type="cylinder" size="0.05 0.02" mass="0.5"/>
      <body name="upper" pos="0 0 0.04" euler="0.2 0 0.1">
        <joint name="shoulder" axis="0 1 0" damping="0.1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1.5"/>
        <body name="lower" pos="0.3 0 0">
          <joint name="elbow" axis="0 0.6 0.8"/>
          <geom type="capsule" fromto="0 0 0 0.25 0 0.05" size="0.02" mass="0.8"/>
          <site name="tip" pos="0.25 0 0.05"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _attaching(count: int, model: str = "arm") -> str:
    """A free bus carrying ``count`` copies of :data:`ATTACHED_ARM` (``<replicate>`` of an ``<attach>``)."""
    return f"""
<mujoco model="bus_with_arms">
  <option gravity="0 0 0"><flag contact="disable"/></option>
  <asset><model name="arm" file="arm.xml"/></asset>
  <worldbody>
    <body name="bus"><freejoint/><geom type="box" size="0.4 0.3 0.2" mass="120"/>
      <replicate count="{count}" euler="0 0 120"><frame pos="0.4 0 0">
        <attach model="{model}" body="mount" prefix="arm_"/>
      </frame></replicate>
    </body>
  </worldbody>
</mujoco>"""


def test_attached_models_against_mujoco_and_counted_before_compiling(tmp_path):
    """MuJoCo's ``<attach>`` (a model inserted from another file) imports like the same bodies
    written in place, and counts toward :data:`MAX_BODIES` before MuJoCo builds anything: a
    replicated attachment of a 3-body file was not counted at all (1 body declared)."""
    (tmp_path / "arm.xml").write_text(ATTACHED_ARM)
    three_arms = tmp_path / "bus.xml"
    three_arms.write_text(_attaching(3))
    info = import_mjcf(three_arms)
    m = mujoco.MjModel.from_xml_path(str(three_arms))
    assert info.model.num_joints == m.nv - 6 == 6 and m.nbody == 1 + 1 + 3 * 3 and m.nsite == 3
    for d, state in _assert_floating_dynamics_match(info, m, trials=2):
        kin = sdjax.forward_kinematics(info.model, state)
        for s in range(m.nsite):  # (the tip of each copy, named with MuJoCo's prefix and suffix)
            e = info.model.end_point_index(m.site(s).name)
            assert_close(kin.end_point_position[e], d.site_xpos[s], 1e-13, f"site {m.site(s).name} position")
    # 10,000 copies of 3 bodies from a 600-byte file: refused before MuJoCo compiles it.
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(_attaching(10_000))
    with pytest.raises(ValueError, match=rf"{bomb}: declares more than 20000 bodies"):
        import_mjcf(bomb)
    unknown = tmp_path / "unknown.xml"
    unknown.write_text(_attaching(1, model="gripper"))
    with pytest.raises(ValueError, match=r"unknown.xml: <attach model='gripper'>: no <asset><model> of that name"):
        import_mjcf(unknown)
    (tmp_path / "arm.xml").unlink()
    with pytest.raises(ValueError, match=r"bus.xml: <attach model='arm'>: its file 'arm.xml' is not found"):
        import_mjcf(three_arms)


def test_load_model_reads_mjcf(tmp_path):
    path = tmp_path / "servicer.xml"
    path.write_text(FLOATING)
    model = sdjax.load_model(path)
    assert model.num_joints == 5 and model.base == "floating"
    assert sdjax.load_model(path, base="fixed").base == "fixed"


def test_floating_mjcf_in_float32():
    """The servicer (a massless frame link, ``H`` of condition 1.2e5) loads in float32: the check
    that ``H`` is not singular was float64's bound scaled to float32 (condition 18) and refused it."""
    model64 = import_mjcf(FLOATING).model
    model32 = import_mjcf(FLOATING, dtype=jnp.float32).model
    assert model32.link_mass.dtype == jnp.float32
    rng = np.random.default_rng(4)
    for _ in range(3):
        q = rng.uniform(-1.0, 1.0, model64.num_joint_coordinates)
        state = sdjax.make_state(model64, q=q, qd=rng.normal(size=model64.num_joints))
        tau = rng.normal(size=model64.num_joints)
        expected = np.concatenate(sdjax.forward_dynamics(model64, state, tau))
        state32 = jax.tree.map(lambda x: x.astype(jnp.float32), state)
        got = np.concatenate(sdjax.forward_dynamics(model32, state32, tau.astype(np.float32)))
        # float32 round-off times the condition number: 1.4e-2 at worst, measured up to 1.2e-4
        assert_close(got, expected, 1e-3, "float32 accelerations")
