"""Cross-check against MuJoCo (another engine) through the MJCF export (sdjax.io.mjcf).

MuJoCo's ``qvel = T nu_sd`` with ``T = blockdiag(E, A0^T, P)`` (world-frame base velocity,
body-frame angular velocity, depth-first joints) and ``d(qvel)/dt = T d(nu_sd)/dt``, so
``M_sd = T^T M_mj T``, ``c_sd = T^T c_mj``, generalized forces ``f_mj = T^-T f_sd = T f_sd``.
"""

import numpy as np
import pytest

import sdjax
from sdjax.io.mjcf import mujoco_coordinates, to_mjcf
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample
from helpers import assert_close, random_state, with_frames

mujoco = pytest.importorskip("mujoco")

CASES = {
    "sample": spacedyn_sample,
    "arm7": free_flying_arm_7dof,
    # Several end points on one body and one on the base: MuJoCo sites on the same bodies.
    "random_tree": lambda: with_frames(random_model(81, 9, gravity=True, passive=True, chain_probability=0.5)),
    # Base modes: MuJoCo slides and a hinge for a planar base (tilted reference attitude), a
    # jointless base body for a fixed one.
    "planar_tree": lambda: with_frames(
        sdjax.edit_model(random_model(83, 6, gravity=True, passive=True), base="planar")
    ),
    "fixed_tree": lambda: sdjax.edit_model(random_model(84, 6, gravity=True, passive=True), base="fixed"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_mass_matrix_bias_and_forward_dynamics(name):
    model = CASES[name]()
    pose = random_state(model, 99)  # places a fixed base; a planar base's height and reference attitude
    mj_model = mujoco.MjModel.from_xml_string(to_mjcf(model, base_pose=pose))
    assert mj_model.nv == model.num_velocities and mj_model.nsite == model.num_end_points
    data = mujoco.MjData(mj_model)
    rng = np.random.default_rng(0)
    for seed in range(3):
        state = random_state(model, seed)
        if model.base != "floating":  # the pose the MJCF fixes (planar: its height, and any yaw)
            turn = np.asarray(sdjax.rotation.rpy_to_matrix(np.array([0.0, 0.0, rng.uniform(-3, 3)])))
            attitude = (
                turn @ np.asarray(pose.base_rotation) if model.base == "planar" else np.asarray(pose.base_rotation)
            )
            position = (
                np.asarray(pose.base_position)
                if model.base == "fixed"
                else np.append(np.asarray(state.base_position)[:2], np.asarray(pose.base_position)[2])
            )
            state = sdjax.make_state(
                model,
                base_position=position,
                base_rotation=attitude,
                base_linear_velocity=state.base_linear_velocity,
                base_angular_velocity=state.base_angular_velocity,
                q=state.q,
                qd=state.qd,
            )
        qpos, qvel, t = mujoco_coordinates(model, state, pose)
        tau = rng.normal(size=model.num_joints)
        data.qpos[:], data.qvel[:] = qpos, qvel
        data.qfrc_applied[:] = t @ np.concatenate([np.zeros(model.num_base_velocities), tau])
        mujoco.mj_forward(mj_model, data)
        full = np.zeros((mj_model.nv, mj_model.nv))
        mujoco.mj_fullM(mj_model, data, full)
        # float64 on both sides, O(n) sums of O(1-1e3) terms: ~1e-15 relative.
        assert_close(sdjax.inertia_matrix(model, state), t.T @ full @ t, 1e-11, "mass matrix")
        # MuJoCo's qfrc_bias excludes its passive forces, like sdjax's bias.
        assert_close(sdjax.bias_forces(model, state), t.T @ data.qfrc_bias, 1e-11, "bias")
        base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
        # MuJoCo includes joint springs and dampers (qfrc_passive) as sdjax does.
        free = np.asarray(sdjax.model.free_coordinates(model, np.concatenate([base_acc, qdd])))
        assert_close(t @ free, data.qacc, 1e-9, "forward dynamics")  # cond(H)
        kin = sdjax.forward_kinematics(model, state)
        # Sites are numbered in body (depth-first) order; look them up by name.
        sites = [mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_SITE, name) for name in model.end_point_names]
        assert_close(kin.end_point_position, data.site_xpos[sites], 1e-12, "end points")
        assert_close(kin.end_point_rotation, data.site_xmat[sites].reshape(-1, 3, 3), 1e-12, "end-point frames")


def test_rk4_step_matches_mujoco():
    model = random_model(82, 5, gravity=True)
    dt = 0.01
    mj_model = mujoco.MjModel.from_xml_string(to_mjcf(model, timestep=dt, integrator="RK4"))
    data = mujoco.MjData(mj_model)
    state = random_state(model, 1, scale=0.5)
    qpos, qvel, _ = mujoco_coordinates(model, state)
    data.qpos[:], data.qvel[:] = qpos, qvel
    for _ in range(10):
        mujoco.mj_step(mj_model, data)
    end = sdjax.rollout(model, state, dt, 10).states
    last = sdjax.State(
        *(
            x[-1]
            for x in (
                end.base_position,
                end.base_quaternion,
                end.base_linear_velocity,
                end.base_angular_velocity,
                end.q,
                end.qd,
            )
        )
    )
    qpos_sd, qvel_sd, _ = mujoco_coordinates(model, last)
    # Both are classical RK4 on the same ODE; MuJoCo integrates the attitude on the manifold
    # (quaternion exponential) and sdjax in quaternion coordinates: O(dt^5) per step apart.
    assert_close(qvel_sd, data.qvel, 1e-7, "qvel after 10 RK4 steps")
    assert_close(qpos_sd[:3], data.qpos[:3], 1e-7, "base position")
    assert_close(qpos_sd[7:], data.qpos[7:], 1e-7, "joint positions")
