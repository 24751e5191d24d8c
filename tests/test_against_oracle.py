"""sdjax against the NumPy oracle of the SpaceDyn equations (tests/spacedyn_oracle.py).

sdjax uses spatial vectors about the base centroid, composite bodies and subtree sums; the
oracle follows seed 000's recursions (eqs 3.8-3.15), Jacobian-product inertia matrix
(3.19-3.28) and joint-by-joint Newton-Euler (3.30-3.39) literally. Random trees with branches,
prismatic joints, end points and gravity, over many seeds.
"""

import numpy as np
import pytest

import sdjax
from sdjax.models import random_model, spacedyn_sample, free_flying_arm_7dof
from helpers import assert_close, random_state, three_arm_tree
from spacedyn_oracle import SpaceDynOracle

# float64 round-off accumulated over O(n) recursion steps and O(n^2) sums of products of
# O(1-100) quantities stays below ~1e-13 relative; 1e-11 leaves a margin for the 30-link trees.
RTOL = 1e-11

CASES = (
    [("sample", None), ("arm7", None), ("three_arm", 3)]
    + [("random", (seed, n)) for seed, n in [(0, 1), (1, 2), (2, 4), (3, 6), (4, 9), (5, 12), (6, 16), (7, 30)]]
    + [("random_chain", (seed, 8)) for seed in (10, 11)]
)


def build(kind, arg):
    if kind == "sample":
        return spacedyn_sample()
    if kind == "arm7":
        return free_flying_arm_7dof()
    if kind == "three_arm":
        return three_arm_tree(arg)
    seed, n = arg
    if kind == "random_chain":
        return random_model(seed, n, chain_probability=1.0, prismatic_probability=0.5, gravity=True)
    return random_model(seed, n, gravity=True)


def unpack(state):
    return (
        np.asarray(state.base_position),
        np.asarray(state.base_rotation),
        np.asarray(state.q),
        np.asarray(state.base_linear_velocity),
        np.asarray(state.base_angular_velocity),
        np.asarray(state.qd),
    )


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request):
    model = build(*request.param)
    oracle = SpaceDynOracle(sdjax.model_to_spacedyn_arrays(model), gravity=np.asarray(model.gravity))
    return model, oracle


def test_kinematics(case):
    model, oracle = case
    for seed in range(3):
        state = random_state(model, seed)
        R0, A0, q, v0, w0, qd = unpack(state)
        AA = oracle.rotations(A0, q)
        RR, PP = oracle.positions(R0, A0, AA, q)
        kin = sdjax.forward_kinematics(model, state)
        n = model.num_joints
        assert_close(kin.rotation[1:], np.reshape(AA, (n, 3, 3)), RTOL, "link rotations (eq 3.1)")
        assert_close(kin.centroid[1:], np.reshape(RR, (n, 3)), RTOL, "link centroids")
        assert_close(kin.joint_position, np.reshape(PP, (n, 3)), RTOL, "joint positions")
        ends = oracle.end_points(AA, RR)
        assert_close(kin.end_point_position, np.reshape([e[0] for e in ends], (-1, 3)), RTOL, "end-point positions")
        assert_close(kin.end_point_rotation, np.reshape([e[1] for e in ends], (-1, 3, 3)), RTOL, "end-point rotations")
        masses = np.concatenate([[oracle.m0], oracle.m])
        com = (masses @ np.vstack([R0] + RR)) / masses.sum()
        assert_close(sdjax.center_of_mass(model, state), com, RTOL, "centre of mass")


def test_velocities_and_accelerations(case):
    model, oracle = case
    rng = np.random.default_rng(0)
    for seed in range(3):
        state = random_state(model, seed)
        R0, A0, q, v0, w0, qd = unpack(state)
        vd0, wd0 = rng.normal(size=(2, 3))
        qdd = rng.normal(size=model.num_joints)
        AA = oracle.rotations(A0, q)
        vv, ww = oracle.velocities(A0, AA, q, v0, w0, qd)
        vd, wd = oracle.accelerations(A0, AA, q, w0, ww, vd0, wd0, qd, qdd)
        lin, ang = sdjax.link_velocities(model, state)
        assert_close(lin, np.vstack([v0] + vv), RTOL, "centroid velocities (eqs 3.9, 3.13)")
        assert_close(ang, np.vstack([w0] + ww), RTOL, "angular velocities (eqs 3.8, 3.12)")
        lin, ang = sdjax.link_accelerations(model, state, np.concatenate([vd0, wd0]), qdd)
        assert_close(lin, np.vstack([vd0] + vd), RTOL, "centroid accelerations (eqs 3.11, 3.15)")
        assert_close(ang, np.vstack([wd0] + wd), RTOL, "angular accelerations (eqs 3.10, 3.14)")


def test_jacobians(case):
    model, oracle = case
    state = random_state(model, 7)
    R0, A0, q, v0, w0, qd = unpack(state)
    AA = oracle.rotations(A0, q)
    RR, PP = oracle.positions(R0, A0, AA, q)
    jac = sdjax.link_jacobians(model, state)
    for i in range(model.num_joints):
        assert_close(
            jac[i + 1, :, 6:], oracle.point_jacobian_joints(AA, PP, i, RR[i]), RTOL, f"J_T/J_R of link {i + 1}"
        )
    ends = oracle.end_points(AA, RR)
    jac_e = sdjax.end_point_jacobians(model, state)
    for e, link in enumerate(model.end_point_link):
        pe = ends[e][0]
        assert_close(jac_e[e, :, 6:], oracle.point_jacobian_joints(AA, PP, link - 1, pe), RTOL, f"J_m of end point {e}")
        jb = np.block([[np.eye(3), -oracle_tilde(pe - R0)], [np.zeros((3, 3)), np.eye(3)]])
        assert_close(jac_e[e, :, :6], jb, RTOL, f"J_b of end point {e}")


def oracle_tilde(a):
    from spacedyn_oracle import tilde

    return tilde(a)


def test_inertia_matrix(case):
    model, oracle = case
    for seed in range(3):
        state = random_state(model, seed)
        R0, A0, q, v0, w0, qd = unpack(state)
        AA = oracle.rotations(A0, q)
        RR, PP = oracle.positions(R0, A0, AA, q)
        expected = oracle.inertia_matrix(R0, A0, AA, RR, PP)
        assert_close(sdjax.inertia_matrix(model, state), expected, RTOL, "H (eqs 3.19-3.28)")


def test_inverse_dynamics_with_end_point_loads(case):
    model, oracle = case
    rng = np.random.default_rng(1)
    n, ne = model.num_joints, model.num_end_points
    for seed in range(3):
        state = random_state(model, seed)
        R0, A0, q, v0, w0, qd = unpack(state)
        vd0, wd0 = rng.normal(size=(2, 3))
        qdd = rng.normal(size=n)
        f_on_robot, t_on_robot = rng.normal(size=(2, ne, 3))
        # eq 3.32's f_e is the load the end point exerts on its environment: minus ours.
        f_env, t_env = np.zeros((3, n)), np.zeros((3, n))
        links = np.asarray(model.end_point_link) - 1
        f_env[:, links], t_env[:, links] = -f_on_robot.T, -t_on_robot.T
        AA = oracle.rotations(A0, q)
        RR, _ = oracle.positions(R0, A0, AA, q)
        expected = oracle.newton_euler(R0, A0, AA, RR, q, v0, w0, vd0, wd0, qd, qdd, f_env, t_env)
        base, tau = sdjax.inverse_dynamics(
            model, state, np.concatenate([vd0, wd0]), qdd, end_point_force=f_on_robot, end_point_torque=t_on_robot
        )
        assert_close(np.concatenate([base, tau]), expected, RTOL, "Newton-Euler (eqs 3.30-3.39)")


def test_forward_dynamics_with_all_inputs(case):
    model, oracle = case
    rng = np.random.default_rng(2)
    n, ne = model.num_joints, model.num_end_points
    for seed in range(3):
        state = random_state(model, seed)
        R0, A0, q, v0, w0, qd = unpack(state)
        F0, N0 = rng.normal(size=(2, 3))
        tau = rng.normal(size=n)
        fh, th = rng.normal(size=(2, ne, 3))
        Fh, Th = np.zeros((3, n)), np.zeros((3, n))
        links = np.asarray(model.end_point_link) - 1
        Fh[:, links], Th[:, links] = fh.T, th.T
        expected = oracle.forward_dynamics(R0, A0, q, v0, w0, qd, F0, N0, tau, Fh, Th)
        base_acc, qdd = sdjax.forward_dynamics(
            model, state, tau, base_force=F0, base_torque=N0, end_point_force=fh, end_point_torque=th
        )
        # The solve amplifies round-off by cond(H) (~1e3-1e5 for these trees).
        assert_close(np.concatenate([base_acc, qdd]), expected, 1e-9, "forward dynamics (eq 3.29)")
