"""Massless-arm orbiter-payload dynamics (seed 004 section 2, appendices A and C).

References: finite differences (Jacobian, relative velocities), a NumPy re-derivation of the
seed's body-frame equations (eqs 2-3 .. 2-12, RMSFM) and of eq 2-14's rotation chain, closed-form
rigid-body motion (free bodies with zero torque; a locked arm spinning about a principal axis),
conservation of momentum, the energy/work balance, and the full multibody sdjax model with the
arm's real masses (the approximation's validity, section 1).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
import sdjax.massless_arm as ma
from sdjax.models.srms import GRAPPLE_Q, LB, LINK_MASS, ORBITER_MASS, TORQUE_LIMIT, srms_system
from sdjax.rotation import rotation_vector_to_matrix

DT = 0.05  # s; every simulation below uses this step and NUM_STEPS so that one compilation serves all
NUM_STEPS = 200


def random_system(seed: int) -> ma.MasslessArmSystem:
    """A random six-joint chain (random joint frames, offsets, inertias) holding a random payload."""
    rng = np.random.default_rng(seed)

    def inertia(scale):
        a = rng.normal(size=(3, 3))
        rot = np.linalg.qr(a)[0]
        return (
            scale * rot @ np.diag(rng.uniform(1.0, 1.8, 3)) @ rot.T
        )  # eigenvalues within a factor 1.8: triangle inequality holds

    arm = sdjax.Model(
        parent=(0, 1, 2, 3, 4, 5),
        joint_type="RRRRRR",
        base_mass=rng.uniform(3e3, 6e3),
        base_inertia=inertia(4e3),
        link_mass=rng.uniform(1.0, 5.0, 6),
        link_inertia=np.stack([inertia(0.5) for _ in range(6)]),
        parent_centroid_to_joint=rng.normal(scale=0.8, size=(6, 3)),
        centroid_to_joint=rng.normal(scale=0.5, size=(6, 3)),
        joint_rpy=rng.uniform(-np.pi, np.pi, size=(6, 3)),
        end_point_link=(6,),
        centroid_to_end_point=rng.normal(scale=0.5, size=(1, 3)),
        end_point_rpy=rng.uniform(-np.pi, np.pi, size=(1, 3)),
        name="random_arm",  # one static name: one compilation for every seed
    )
    rot = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    rot = rot * np.sign(np.linalg.det(rot))
    return ma.MasslessArmSystem(arm, rng.uniform(500.0, 2000.0), inertia(800.0), rng.normal(size=3), rot)


def random_state(system: ma.MasslessArmSystem, seed: int, scale: float = 0.1) -> ma.MasslessArmState:
    """A consistent state (payload where the arm holds it) with random poses and rates."""
    rng = np.random.default_rng(seed + 100)
    return ma.make_massless_state(
        system,
        q=rng.uniform(-np.pi, np.pi, 6),
        qd=scale * rng.normal(size=6),
        orbiter_position=rng.normal(size=3),
        orbiter_rotation=np.asarray(rotation_vector_to_matrix(jnp.asarray(rng.normal(size=3)))),
        orbiter_velocity=scale * rng.normal(size=3),
        orbiter_angular_velocity=scale * rng.normal(size=3),
    )


def rot_np(rotvec) -> np.ndarray:
    return np.asarray(rotation_vector_to_matrix(jnp.asarray(rotvec, jnp.float64)))


def quat_matrix(q) -> np.ndarray:
    return np.asarray(sdjax.rotation.quat_to_matrix(jnp.asarray(q)))


def at(traj_states, k):
    return jax.tree.map(lambda x: x[k], traj_states)


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def srms():
    return srms_system()


# ------------------------------------------------------------------------------------------
# Appendix A / eq 2-14: kinematics.


@pytest.mark.parametrize("seed", SEEDS)
def test_jacobian_matches_finite_differences(seed):
    """Eq A-14: columns of J are the tip's linear and angular velocity per joint rate."""
    system = random_system(seed)
    q = np.random.default_rng(seed).uniform(-np.pi, np.pi, 6)
    kin = ma.arm_kinematics(system, q)
    h = 1e-6
    fd = np.zeros((6, 6))
    for j in range(6):
        dq = np.zeros(6)
        dq[j] = h
        plus, minus = ma.arm_kinematics(system, q + dq), ma.arm_kinematics(system, q - dq)
        fd[:3, j] = (np.asarray(plus.tip_position) - np.asarray(minus.tip_position)) / (2 * h)
        drot = np.asarray(plus.tip_rotation) @ np.asarray(minus.tip_rotation).T
        fd[3:, j] = np.asarray(sdjax.rotation.unskew(jnp.asarray(drot))) / (2 * h)
    # Central differences: truncation O(h^2) ~ 1e-12, round-off ~ 1e-16 * |x| / h ~ 1e-10 for |x| ~ 3 m.
    np.testing.assert_allclose(np.asarray(kin.jacobian), fd, atol=1e-8)


def test_srms_rotation_chain_matches_eq_2_14(srms):
    """Eq 2-14: B21 = T_PE T1(th6) T3(th5) T2(th2 + th3 + th4) T3(th1) T_LB, written out with
    passive elementary rotations (the SRMS pitch joints are positive when the arm rises,
    i.e. about -y of the longeron frame, so T2 takes -(th2 + th3 + th4))."""

    def passive(axis, angle):
        c, s = np.cos(angle), np.sin(angle)
        return {
            1: np.array([[1, 0, 0], [0, c, s], [0, -s, c]]),
            2: np.array([[c, 0, -s], [0, 1, 0], [s, 0, c]]),
            3: np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]]),
        }[axis]

    t_lb = np.diag([-1.0, 1.0, -1.0])  # orbiter (x fwd, z down) -> longeron (x aft, z up)
    t_pe = np.asarray(srms.payload_rotation).T
    rng = np.random.default_rng(3)
    for _ in range(5):
        th = rng.uniform(-np.pi, np.pi, 6)
        b21 = (
            t_pe
            @ passive(1, th[5])
            @ passive(3, th[4])
            @ passive(2, -(th[1] + th[2] + th[3]))
            @ passive(3, th[0])
            @ t_lb
        )
        _, b2 = ma.payload_pose(srms, np.zeros(3), np.eye(3), th)  # B2 = B1 B12 with B1 = E (eq 2-13)
        np.testing.assert_allclose(np.asarray(b2), b21.T, atol=1e-13)  # products of 7 rotations: round-off


def test_srms_model_data(srms):
    """Seed section 2's masses: orbiter 180,000 lb, payload 65,000 lb, arm about 500 lb; q = 0 is singular."""
    assert abs(float(srms.orbiter_mass) / LB - 180_000) < 1e-6
    assert abs(float(srms.payload_mass) / LB - 65_000) < 1e-6
    assert abs(LINK_MASS.sum() / LB - 500) < 1.0
    assert abs(ORBITER_MASS - 180_000 * 0.45359237) < 1e-3  # the SI value: 180,000 lb at 0.45359237 kg/lb
    assert float(ma.smallest_singular_value(srms, np.zeros(6))) < 1e-12  # straight arm
    assert float(ma.smallest_singular_value(srms, GRAPPLE_Q)) > 0.5


# ------------------------------------------------------------------------------------------
# Eqs 2-3 .. 2-12 against a NumPy re-derivation in the seed's body-frame form.


def seed_equations(system, state, tau, loads):
    """Eqs 2-3 .. 2-12 as written in the seed (body-frame F1, M1, w1; RMSFM), plain NumPy.

    The seed's six-vectors are moment/rotation first: {M_e; F_e} = J_seed^-T tau with
    J_seed = J with its row blocks swapped."""
    f = lambda x: np.asarray(x, np.float64)  # noqa: E731
    kin = ma.arm_kinematics(system, state.q)
    jac = f(kin.jacobian)
    j_seed = np.vstack([jac[3:], jac[:3]])
    me_fe = np.linalg.solve(j_seed.T, f(tau))  # eq 2-3
    me, fe = me_fe[:3], me_fe[3:]
    b1, b2 = quat_matrix(state.orbiter_quaternion), quat_matrix(state.payload_quaternion)
    b21 = b2.T @ b1
    p1, p2 = f(kin.tip_position), f(system.payload_to_tip)
    m1, m2 = float(system.orbiter_mass), float(system.payload_mass)
    a1m, a2m = f(system.orbiter_inertia), f(system.payload_inertia)
    w1, w2 = b1.T @ f(state.orbiter_angular_velocity), b2.T @ f(state.payload_angular_velocity)  # body rates
    f1, m1b = b1.T @ f(loads.orbiter_force), b1.T @ f(loads.orbiter_moment)  # body-frame external loads
    f2, m2b = b2.T @ f(loads.payload_force), b2.T @ f(loads.payload_moment)
    rdd1 = b1 @ (f1 - fe) / m1 + f(loads.orbiter_gravity)  # eq 2-4
    w1d = np.linalg.solve(a1m, m1b - me - np.cross(p1, fe) - np.cross(w1, a1m @ w1))  # eq 2-5
    fr2 = b21 @ fe
    rdd2 = (b2 @ f2 + b1 @ fe) / m2 + f(loads.payload_gravity)  # eq 2-8
    w2d = np.linalg.solve(a2m, m2b + b21 @ me + np.cross(p2, fr2) - np.cross(w2, a2m @ w2))  # eq 2-9
    b12 = b21.T
    v_r = (
        b1.T @ (f(state.payload_velocity) - f(state.orbiter_velocity)) + np.cross(p1, w1) - b12 @ np.cross(p2, w2)
    )  # eq 2-10
    w_r = b12 @ w2 - w1  # eq 2-11
    thd = np.linalg.solve(j_seed, np.concatenate([w_r, v_r]))  # eq 2-12
    return dict(
        rdd1=rdd1,
        rdd2=rdd2,
        w1d=w1d,
        w2d=w2d,
        thd=thd,
        me=me,
        fe=fe,
        fr2=fr2,
        mr1=-me - np.cross(p1, fe),
        mr2=b21 @ me + np.cross(p2, fr2),
        v_r=v_r,
        w_r=w_r,
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_state_derivative_matches_seed_equations(seed):
    system = random_system(seed)
    rng = np.random.default_rng(seed + 7)
    state = random_state(system, seed)
    # Perturb the payload velocity so that eq 2-12 is exercised off the consistent manifold too.
    state = eqx.tree_at(
        lambda s: s.payload_velocity, state, state.payload_velocity + 0.05 * jnp.asarray(rng.normal(size=3))
    )
    tau = 100.0 * rng.normal(size=6)
    loads = ma.make_loads(
        jnp.float64,
        **{
            k: rng.normal(scale=50.0, size=3)
            for k in ("orbiter_force", "orbiter_moment", "payload_force", "payload_moment")
        },
        orbiter_gravity=rng.normal(size=3),
        payload_gravity=rng.normal(size=3),
    )
    ref = seed_equations(system, state, tau, loads)
    rate = ma.two_body_state_derivative(system, state, tau, loads)
    b1, b2 = quat_matrix(state.orbiter_quaternion), quat_matrix(state.payload_quaternion)
    # Tolerances: 6x6 solves with condition numbers up to ~1e3 (normal equations in the damped
    # solver square it): ~1e-10 relative.
    assert rel_err(rate.orbiter_velocity, ref["rdd1"]) < 1e-9
    assert rel_err(rate.payload_velocity, ref["rdd2"]) < 1e-9
    assert rel_err(b1.T @ np.asarray(rate.orbiter_angular_velocity), ref["w1d"]) < 1e-9  # d(B w_b)/dt = B dw_b/dt
    assert rel_err(b2.T @ np.asarray(rate.payload_angular_velocity), ref["w2d"]) < 1e-9
    assert rel_err(rate.q, ref["thd"]) < 1e-9
    loads_ = ma.interaction_loads(system, state, tau)
    assert rel_err(loads_.end_effector_force, ref["fe"]) < 1e-9
    assert rel_err(loads_.end_effector_moment, ref["me"]) < 1e-9
    assert rel_err(loads_.orbiter_moment, ref["mr1"]) < 1e-9
    assert rel_err(loads_.payload_force, ref["fr2"]) < 1e-9
    assert rel_err(loads_.payload_moment, ref["mr2"]) < 1e-9
    # Equal and opposite in the inertial frame.
    np.testing.assert_allclose(
        b1 @ np.asarray(loads_.orbiter_force) + b2 @ np.asarray(loads_.payload_force),
        0.0,
        atol=1e-9 * np.abs(ref["fe"]).max(),
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_virtual_work_of_end_effector_load(seed):
    """tau . qd = [F_e; M_e] . [V_R; w_R] (eq C-9 = C-23: the arm neither stores nor loses energy)."""
    system = random_system(seed)
    state = random_state(system, seed)
    tau = np.random.default_rng(seed).normal(size=6)
    wrench = ma.end_effector_wrench(system, state.q, tau)
    qd = ma.joint_rates(system, state)
    np.testing.assert_allclose(
        float(jnp.dot(tau, qd)), float(jnp.dot(wrench, ma.relative_velocity(system, state))), rtol=1e-9
    )  # solve round-off


@pytest.mark.parametrize("seed", SEEDS)
def test_relative_velocity_matches_finite_differences(seed):
    """Eqs 2-10, 2-11: V_R and w_R are the time derivatives of the tip position and attitude seen
    from the orbiter frame, here differentiated numerically along each body's free motion."""
    system = random_system(seed)
    state = random_state(system, seed, scale=0.3)

    def relative_pose(t):
        b1 = rot_np(np.asarray(state.orbiter_angular_velocity) * t) @ quat_matrix(state.orbiter_quaternion)
        b2 = rot_np(np.asarray(state.payload_angular_velocity) * t) @ quat_matrix(state.payload_quaternion)
        r1 = np.asarray(state.orbiter_position) + t * np.asarray(state.orbiter_velocity)
        r2 = np.asarray(state.payload_position) + t * np.asarray(state.payload_velocity)
        tip = r2 + b2 @ np.asarray(system.payload_to_tip)
        return b1.T @ (tip - r1), b1.T @ b2

    h = 1e-5
    (xp, rp), (xm, rm) = relative_pose(h), relative_pose(-h)
    v_fd = (xp - xm) / (2 * h)
    w_fd = np.asarray(sdjax.rotation.unskew(jnp.asarray(rp @ rm.T))) / (2 * h)  # orbiter-frame relative rotation rate
    vel = np.asarray(ma.relative_velocity(system, state))
    np.testing.assert_allclose(vel[:3], v_fd, atol=1e-8)  # O(h^2) truncation ~ 1e-10 with |x| ~ 3 m
    np.testing.assert_allclose(vel[3:], w_fd, atol=1e-8)
    # And eq 2-12 inverts it: the state was built with these joint rates.
    qd = np.asarray(ma.joint_rates(system, state))
    np.testing.assert_allclose(np.asarray(ma.arm_kinematics(system, state.q).jacobian) @ qd, vel, atol=1e-10)


# ------------------------------------------------------------------------------------------
# Closed-form motion, conservation laws, energy.


@pytest.fixture(scope="module")
def free_run():
    """SRMS, zero torque: both bodies are free (slow relative motion, so that the arm's
    kinematics can follow it without leaving its workspace)."""
    system = srms_system()
    rng = np.random.default_rng(5)
    state = ma.make_massless_state(
        system,
        q=GRAPPLE_Q,
        qd=0.003 * rng.normal(size=6),
        orbiter_velocity=0.01 * rng.normal(size=3),
        orbiter_angular_velocity=0.002 * rng.normal(size=3),
        orbiter_rotation=rot_np(rng.normal(size=3)),
    )
    return system, state, ma.simulate_two_body(system, state, DT, NUM_STEPS, None)


def test_zero_torque_bodies_move_freely(free_run):
    """With tau = 0 the massless arm transmits nothing: each centre of mass moves at constant
    velocity and each body keeps its own angular momentum; the joint angles still follow the
    relative motion (eq 2-12), so the payload stays where the arm's kinematics puts it."""
    system, state, traj = free_run
    end = at(traj.states, -1)
    t = DT * NUM_STEPS
    np.testing.assert_allclose(
        end.orbiter_position, state.orbiter_position + t * state.orbiter_velocity, atol=1e-12
    )  # RK4 is exact on a zero acceleration
    np.testing.assert_allclose(end.payload_position, state.payload_position + t * state.payload_velocity, atol=1e-12)
    for quat, w, inertia in (
        ("orbiter_quaternion", "orbiter_angular_velocity", system.orbiter_inertia),
        ("payload_quaternion", "payload_angular_velocity", system.payload_inertia),
    ):

        def spin(s):
            rot = quat_matrix(getattr(s, quat))
            return rot @ np.asarray(inertia) @ rot.T @ np.asarray(getattr(s, w))

        # Torque-free body: angular momentum conserved up to RK4's O(dt^4) error over 10 s.
        assert rel_err(spin(end), spin(state)) < 1e-8
    position, attitude = ma.closure_error(system, end)
    assert (
        float(jnp.linalg.norm(position)) < 1e-8 and float(jnp.linalg.norm(attitude)) < 1e-8
    )  # integration error of eq 2-12


@pytest.mark.parametrize("which", ("srms", pytest.param("random", marks=pytest.mark.slow)))
def test_momentum_conserved_and_energy_balance(which):
    """No external loads: the interaction loads are equal and opposite, so total linear momentum
    is conserved (a linear invariant: RK4 keeps it to round-off) and angular momentum is
    conserved up to integration error. The kinetic energy changes by the work of the joint
    torques (eq C-9): with torques held over each step, W = sum_k tau_k . (q_k+1 - q_k)."""
    seed = 0
    if which == "random":  # a random arm whose motion under these torques stays clear of singularities
        system = random_system(seed)
        state = random_state(system, seed, scale=0.05)
        size = 20.0
    else:
        system = srms_system()
        state = ma.make_massless_state(
            system, q=GRAPPLE_Q, qd=0.002 * np.ones(6), orbiter_angular_velocity=[0.001, -0.002, 0.0005]
        )
        size = 300.0
    rng = np.random.default_rng(seed)
    taus = jnp.asarray(
        size * np.cumsum(rng.normal(size=(NUM_STEPS, 6)), axis=0) / np.sqrt(NUM_STEPS)
    )  # smooth-ish random torques
    traj = ma.simulate_two_body(system, state, DT, NUM_STEPS, taus)
    momenta = np.asarray(jax.vmap(lambda s: ma.momentum(system, s))(traj.states))
    scale_p = np.abs(momenta[:, :3]).max()
    assert np.abs(momenta[:, :3] - momenta[0, :3]).max() < 1e-11 * scale_p  # round-off of 200 steps
    scale_l = np.abs(momenta[:, 3:]).max()
    assert np.abs(momenta[:, 3:] - momenta[0, 3:]).max() < 1e-7 * scale_l  # RK4 error and closure drift
    energy = np.asarray(jax.vmap(lambda s: ma.two_body_kinetic_energy(system, s))(traj.states))
    work = np.concatenate(
        [[0.0], np.cumsum(np.sum(np.asarray(taus) * np.diff(np.asarray(traj.states.q), axis=0), axis=1))]
    )
    change = energy - energy[0]
    assert np.abs(change).max() > 1e-3 * energy[0]  # the torques do change the energy
    assert np.abs(change - work).max() < 1e-6 * np.abs(change).max()  # O(dt^4) integration error of KE and q


def test_locked_arm_moves_as_one_rigid_body(srms):
    """A locked arm (stiff joint hold) makes orbiter and payload one rigid body. Started spinning
    about a principal axis of the composite body through its centre of mass, the exact solution
    is a steady rotation; the massless model follows it with an error ~ 1/(servo stiffness)."""
    system = srms
    q = GRAPPLE_Q
    probe = ma.make_massless_state(system, q=q)
    m1, m2 = float(system.orbiter_mass), float(system.payload_mass)
    r1, r2 = np.zeros(3), np.asarray(probe.payload_position)
    com = (m1 * r1 + m2 * r2) / (m1 + m2)
    b2 = quat_matrix(probe.payload_quaternion)
    inertia = np.asarray(system.orbiter_inertia) + b2 @ np.asarray(system.payload_inertia) @ b2.T
    for m, r in ((m1, r1), (m2, r2)):
        d = r - com
        inertia = inertia + m * (d @ d * np.eye(3) - np.outer(d, d))
    axis = np.linalg.eigh(inertia)[1][:, 0]  # the minor axis: a stable spin
    omega = 0.02 * axis  # rad/s
    state = ma.make_massless_state(
        system, q=q, orbiter_angular_velocity=omega, orbiter_velocity=np.cross(omega, r1 - com)
    )
    np.testing.assert_allclose(
        np.asarray(state.payload_velocity), np.cross(omega, r2 - com), atol=1e-12
    )  # a rigid motion at t = 0
    t = DT * NUM_STEPS
    rot = rot_np(omega * t)
    exact_payload = com + rot @ (r2 - com)
    errors = []
    gain = jnp.diag(ma.joint_space_inertia(system, state))  # 1 s rate loop (stable with DT: see the servo tests)
    for hold in (0.1, 1.0):  # position gain K_p, 1/s: static stiffness K_v K_p grows 10x
        ctrl = ma.ArmController(ma.JointHoldCommand(q, hold), ma.JointRateServo(gain))
        end = at(ma.simulate_two_body(system, state, DT, NUM_STEPS, ctrl).states, -1)
        errors.append(float(np.linalg.norm(np.asarray(end.payload_position) - exact_payload)))
        # Angular momentum is shared between the bodies; the composite spin rate stays put.
        np.testing.assert_allclose(np.asarray(end.orbiter_angular_velocity), omega, atol=0.05 * np.linalg.norm(omega))
    assert errors[0] < 1e-2  # m: centripetal load ~ 0.02^2 x 30 t x 3 m ~ 40 N on a soft hold
    assert errors[1] < errors[0] / 4  # stiffer hold, smaller deviation (static part ~ 1/(K_v K_p))


# ------------------------------------------------------------------------------------------
# The full multibody model (the seed's checkout: the approximation's validity).


def test_joint_space_inertia_is_massless_limit_of_generalized_inertia(srms):
    """J^T Phi^-1 J equals the free-floating generalized inertia H* (seed 003 eq 45) of the full
    model as the arm's masses go to zero."""
    state = ma.make_massless_state(srms, q=GRAPPLE_Q, orbiter_rotation=rot_np([0.1, -0.2, 0.3]))
    m_theta = np.asarray(ma.joint_space_inertia(srms, state))
    for scale, tol in ((1e-6, 1e-8), (1.0, 1e-2)):  # difference ~ scale x (arm / payload inertia ~ 4e-3)
        system = srms_system(link_mass_scale=scale)
        full = ma.full_multibody_model(system)
        h_star = np.asarray(sdjax.generalized_inertia_matrix(full, ma.multibody_state(system, state)))
        assert rel_err(h_star, m_theta) < tol, scale


@pytest.fixture(scope="module")
def berthing():
    """One manoeuvre flown by both models for three arm-mass scales: joint rates commanded by the
    resolved-rate law along a 4 m line in 8 s, rate servo, SRMS torque limits."""
    results = {}
    for scale in (1.0, 0.1, 0.01):
        system = srms_system(2000.0, link_mass_scale=scale)  # a light payload: the approximation's weak case
        state = ma.make_massless_state(system, q=GRAPPLE_Q)
        kin = ma.arm_kinematics(system, GRAPPLE_Q)
        path = sdjax.LinePath(
            kin.tip_position, kin.tip_position + jnp.array([0.3, 0.0, -0.4]), 8.0, 0.5, rotation=kin.tip_rotation
        )
        gain = (
            jnp.diag(ma.joint_space_inertia(system, state)) / 2.0
        )  # 2 s rate loop: M^-1 K eigenvalues <= 10/s, DT x 10 = 0.5 (stable ZOH)
        ctrl = ma.ArmController(ma.ResolvedRateCommand(system.arm, path, 0.5), ma.JointRateServo(gain, TORQUE_LIMIT))
        massless = ma.simulate_two_body(system, state, DT, NUM_STEPS, ctrl)
        full = ma.full_multibody_model(system)
        ref = sdjax.rollout(full, ma.multibody_state(system, state), DT, NUM_STEPS, ctrl.multibody_law())
        payload = jax.vmap(lambda s: ma.multibody_payload_pose(system, full, s)[0])(ref.states)
        results[scale] = dict(
            q=float(np.abs(np.asarray(ref.states.q - massless.states.q)).max()),
            tau=rel_err(ref.controls.tau, massless.tau),
            payload=float(np.linalg.norm(np.asarray(payload - massless.states.payload_position), axis=1).max()),
            orbiter=float(
                np.linalg.norm(np.asarray(ref.states.base_position - massless.states.orbiter_position), axis=1).max()
            ),
            moved=float(
                np.linalg.norm(np.asarray(massless.states.payload_position[-1] - massless.states.payload_position[0]))
            ),
        )
    return results


def test_full_multibody_model_converges_to_massless_arm(berthing):
    """The difference between the full model and the massless arm shrinks in proportion to the
    arm's mass (seed section 1: "the lighter the payload, the worse the approximation")."""
    r = berthing
    assert r[1.0]["moved"] > 0.3  # the manoeuvre happened
    for key in ("q", "tau", "payload", "orbiter"):
        assert r[0.1][key] < r[1.0][key] / 5, key  # first order in the arm mass: 10x smaller (at least 5x)
        assert r[0.01][key] < r[0.1][key] / 5, key
    assert r[1.0]["tau"] < 0.3  # 227 kg arm against a 2000 kg payload: torques within 30%
    assert r[0.01]["payload"] < 1e-3  # m; 2.3 kg of arm


# ------------------------------------------------------------------------------------------
# Transformations.


def test_jit_vmap(srms):
    state = ma.make_massless_state(srms, q=GRAPPLE_Q, qd=0.01 * np.ones(6))
    tau = jnp.linspace(-100.0, 100.0, 6)
    rate = ma.two_body_state_derivative(srms, state, tau)
    jitted = jax.jit(ma.two_body_state_derivative)(srms, state, tau)
    assert rel_err(jitted.payload_velocity, rate.payload_velocity) < 1e-12  # same arithmetic, different fusion
    masses = jnp.array([1e4, 2e4, 3e4])

    def payload_accel(mass):
        system = eqx.tree_at(lambda s: s.payload_mass, srms, mass)
        return ma.two_body_state_derivative(system, state, tau).payload_velocity

    batched = jax.vmap(payload_accel)(masses)
    for k, m in enumerate(masses):
        # vmap runs the same operations batched; only summation order may differ: round-off
        assert rel_err(batched[k], payload_accel(m)) < 1e-12


@pytest.mark.slow  # ~40 s: compiles the reverse-mode rollout
def test_grad_through_simulation(srms):
    """Gradient of the final payload position w.r.t. the payload mass, through the RK4 rollout,
    against central differences."""
    state = ma.make_massless_state(srms, q=GRAPPLE_Q, qd=0.01 * np.ones(6))
    taus = jnp.tile(jnp.linspace(-100.0, 100.0, 6), (NUM_STEPS, 1))

    def final_x(mass):
        system = eqx.tree_at(lambda s: s.payload_mass, srms, mass)
        return ma.simulate_two_body(system, state, DT, NUM_STEPS, taus).states.payload_position[-1, 0]

    m0, h = 29_000.0, 1.0
    grad = float(jax.grad(final_x)(jnp.asarray(m0)))
    fd = (float(final_x(jnp.asarray(m0 + h))) - float(final_x(jnp.asarray(m0 - h)))) / (2 * h)
    assert np.isfinite(grad) and abs(grad - fd) < 1e-5 * abs(fd)  # O(h^2) truncation of a smooth function of 1/m


# ------------------------------------------------------------------------------------------
# Bad input.


def test_singular_configuration_is_reported_or_damped(srms):
    straight = np.zeros(6)  # arm stretched along the longeron: rank-deficient J
    with pytest.raises(ValueError, match="singular configuration"):
        ma.check_configuration(srms, straight)
    ma.check_configuration(srms, GRAPPLE_Q)  # fine away from it
    wrench = np.asarray(ma.end_effector_wrench(srms, straight, 100.0 * np.ones(6)))
    assert np.all(np.isfinite(wrench))  # documented damped fallback: bounded by |tau| / (2 max_damping)
    assert np.linalg.norm(wrench) <= np.linalg.norm(100.0 * np.ones(6)) / (2 * float(srms.max_damping)) * (1 + 1e-9)
    state = ma.make_massless_state(srms, q=straight, qd=0.01 * np.ones(6))
    rate = ma.two_body_state_derivative(srms, state, np.ones(6))
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(rate))
    grad = jax.grad(lambda q: jnp.sum(ma.end_effector_wrench(srms, q, jnp.ones(6)) ** 2))(jnp.asarray(straight))
    assert np.all(np.isfinite(np.asarray(grad)))  # no NaN in gradients either


@pytest.mark.slow  # ~20 s: compiles the checked rollout
def test_checked_simulation_stops_at_singularity(srms):
    state = ma.make_massless_state(srms, q=np.zeros(6), qd=0.01 * np.ones(6))
    with pytest.raises(Exception, match="singular configuration"):
        ma.simulate_two_body(srms, state, DT, NUM_STEPS, None, check=True)


def test_bad_inputs(srms):
    arm = srms.arm
    with pytest.raises(ValueError, match="payload_mass: mass must be positive"):
        ma.MasslessArmSystem(arm, -1000.0, np.eye(3))
    with pytest.raises(ValueError, match="payload_inertia: expected shape"):
        ma.MasslessArmSystem(arm, 1000.0, np.ones(3))
    with pytest.raises(ValueError, match="not positive definite"):
        ma.MasslessArmSystem(arm, 1000.0, -np.eye(3))
    with pytest.raises(ValueError, match="payload_rotation: expected a proper rotation"):
        ma.MasslessArmSystem(arm, 1000.0, np.eye(3), payload_rotation=2 * np.eye(3))
    with pytest.raises(ValueError, match="not finite"):
        ma.MasslessArmSystem(arm, 1000.0, np.eye(3), payload_to_tip=[np.nan, 0, 0])
    with pytest.raises(ValueError, match="six-joint serial chain"):
        ma.MasslessArmSystem(sdjax.models.spacedyn_sample(), 1000.0, np.eye(3))
    with pytest.raises(ValueError, match="mass must be positive"):
        srms_system(0.0)
    with pytest.raises(ValueError, match="expected shape"):
        ma.arm_kinematics(srms, np.zeros(5))
    with pytest.raises(ValueError, match="expected shape"):
        ma.end_effector_wrench(srms, GRAPPLE_Q, np.zeros(7))
    with pytest.raises(ValueError, match="expected shape"):
        ma.MasslessArmState(*(jnp.zeros(3),) * 8, jnp.zeros(6))  # quaternions need 4
    with pytest.raises(ValueError, match="torque sequence expected shape"):
        ma.simulate_two_body(srms, ma.make_massless_state(srms, q=GRAPPLE_Q), DT, 3, jnp.zeros((3, 5)))
    with pytest.raises(ValueError, match="num_steps"):
        ma.simulate_two_body(srms, ma.make_massless_state(srms, q=GRAPPLE_Q), DT, -1)
    with pytest.raises(ValueError, match="gain"):
        ma.JointRateServo(-1.0)
    with pytest.raises(ValueError, match="torque_limit"):
        ma.JointRateServo(1.0, np.zeros(6))
    with pytest.raises(TypeError, match="ResolvedRateCommand: path: expected a function"):
        ma.ResolvedRateCommand(arm, None, 1.0)
    with pytest.raises(ValueError, match="make_loads: payload_force"):
        ma.make_loads(payload_force=np.zeros(2))


def test_torque_limit_saturates():
    servo = ma.JointRateServo(np.full(6, 1e4), TORQUE_LIMIT)
    tau = np.asarray(servo(jnp.ones(6), jnp.zeros(6)))
    np.testing.assert_allclose(tau, TORQUE_LIMIT, rtol=1e-15)  # clipped exactly
    np.testing.assert_allclose(
        np.asarray(servo(jnp.full(6, 1e-3), jnp.zeros(6))), 10.0, rtol=1e-12
    )  # linear below the limit


@pytest.mark.parametrize(
    "old, new",
    [
        ("simulate", "simulate_two_body"),
        ("rk4_step", "two_body_rk4_step"),
        ("state_derivative", "two_body_state_derivative"),
        ("kinetic_energy", "two_body_kinetic_energy"),
        ("passive_joint_torques", "passive_flexibility_torques"),
    ],
)
def test_renamed_functions_keep_their_old_names_for_one_release(old, new):
    """The names that collided with sdjax's own functions (``sdjax.simulate`` simulates a Model)
    still import, with a DeprecationWarning naming the new name, and are not exported."""
    with pytest.warns(DeprecationWarning, match=f"renamed sdjax.massless_arm.{new}"):
        assert getattr(ma, old) is getattr(ma, new)
    with pytest.warns(DeprecationWarning, match=new):
        exec(f"from sdjax.massless_arm import {old}", {})
    assert old not in ma.__all__ and new in ma.__all__
    assert getattr(sdjax, old) is not getattr(ma, new)  # the top-level name means something else
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ma.no_such_name
