"""Momentum-reduced dynamics and the generalized Jacobian (seed 003) against independent
references.

* The closed forms of seed 003 for ``dH*/dt`` (eqs 62-79) and ``dH*/dq_k`` (eqs 81-102),
  written here in NumPy from the SpaceDyn oracle's positions, velocities and Jacobians
  (generalised from a chain to trees and prismatic joints), against sdjax's autodiff.
* The generalized equation of motion with zero momentum (eqs 47-48) and with non-zero
  momentum (eq 44, corrected, see ``test_generalized_bias_with_momentum``) against
  ``generalized_bias``, and ``reduced_forward_dynamics`` against the full forward dynamics.
* Momentum from the inertia matrix (eq 42) against the body-by-body sums of
  :mod:`sdjax.momentum`; the base twist of eq 109 against momentum conservation.
* The generalized Jacobian with its momentum offset (eq 110) against the recursive
  velocity of the point; manipulability against NumPy's SVD and determinant.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from helpers import assert_close, random_state, spacedyn_end_points_only, with_frames
from sdjax.models import random_model, spacedyn_sample
from sdjax.rotation import quat_multiply
from spacedyn_oracle import EZ, SpaceDynOracle, tilde

# float64 round-off over O(n) recursions and 6x6 solves of matrices with condition ~1e3-1e4:
# observed errors are ~1e-14 relative; 1e-10 leaves margin while a wrong term shows at O(1).
RTOL = 1e-10

#: A branched tree with prismatic joints, gravity and passive joints; a prismatic-heavy
#: chain; the SpaceDyn sample (two arms with a prismatic joint each). The 7-joint arm is used
#: by the single-model tests below. (Each model costs a compile per function.)
MODELS = {
    "sample": spacedyn_sample,
    "random_tree_6": lambda: with_frames(
        random_model(4, 6, gravity=True, passive=True)
    ),  # several frames per body, base frames
    "random_chain_4": lambda: random_model(7, 4, chain_probability=1.0, prismatic_probability=0.5),
}


@pytest.fixture(params=sorted(MODELS), scope="module")
def model(request):
    return MODELS[request.param]()


def random_momentum(seed: int, scale: float = 5.0) -> np.ndarray:
    return scale * np.random.default_rng(seed).normal(size=6)


# ------------------------------------------------------------------------------------------
# Closed forms of seed 003 (NumPy).


def closed_form_generalized_inertia_rate(model, state) -> tuple[np.ndarray, np.ndarray]:
    """``(H*, dH*/dt)`` by seed 003 eqs 28-36 and 62-79, for a tree with revolute and
    prismatic joints. With the base at rest and ``qd = e_k`` the same formulas give
    ``dH*/dq_k`` (eqs 81-102 are eqs 65-79 with ``d/dt`` replaced by ``d/dq_k``)."""
    # H* does not involve end points; the oracle's SpaceDyn layout holds one per link at most.
    oracle = SpaceDynOracle(sdjax.model_to_spacedyn_arrays(spacedyn_end_points_only(model)))
    r0, a0 = np.asarray(state.base_position), np.asarray(state.base_rotation)
    v0, w0 = np.asarray(state.base_linear_velocity), np.asarray(state.base_angular_velocity)
    q, qd = np.asarray(state.q), np.asarray(state.qd)
    n = oracle.n
    links = oracle.rotations(a0, q)
    centroids, joints = oracle.positions(r0, a0, links, q)
    velocities, angular = oracle.velocities(a0, links, q, v0, w0, qd)

    def parent_motion(j):
        b = oracle.BB[j]
        return (r0, v0, w0) if b == 0 else (centroids[b - 1], velocities[b - 1], angular[b - 1])

    axes = [links[j] @ EZ for j in range(n)]
    axis_rates = [np.cross(angular[j], axes[j]) for j in range(n)]  # eq 67: dk/dt = w_j x k
    joint_rates = []  # the joint point is fixed on the parent body
    for j in range(n):
        rb, vb, wb = parent_motion(j)
        joint_rates.append(vb + np.cross(wb, joints[j] - rb))

    def jacobians(i):
        """``J_T, J_R, dJ_T/dt, dJ_R/dt`` of link i's centroid (eqs 33, 35, 71-73)."""
        jt, jr, jt_dot, jr_dot = (np.zeros((3, n)) for _ in range(4))
        for j in oracle.path(i):
            if oracle.J[j] == "R":
                lever, lever_rate = centroids[i] - joints[j], velocities[i] - joint_rates[j]
                jt[:, j] = np.cross(axes[j], lever)
                jt_dot[:, j] = np.cross(axis_rates[j], lever) + np.cross(axes[j], lever_rate)
                jr[:, j] = axes[j]
                jr_dot[:, j] = axis_rates[j]
            else:
                jt[:, j] = axes[j]
                jt_dot[:, j] = axis_rates[j]
        return jt, jr, jt_dot, jr_dot

    mass = oracle.mass
    inertia0 = a0 @ oracle.I0 @ a0.T
    h_s = inertia0.copy()
    h_s_dot = tilde(w0) @ inertia0 - inertia0 @ tilde(w0)
    first, first_dot = np.zeros(3), np.zeros(3)
    j_ts, j_ts_dot, h_sq, h_sq_dot = np.zeros((3, n)), np.zeros((3, n)), np.zeros((3, n)), np.zeros((3, n))
    h_m, h_m_dot = np.zeros((n, n)), np.zeros((n, n))
    for i in range(n):
        m = oracle.m[i]
        jt, jr, jt_dot, jr_dot = jacobians(i)
        inertia = links[i] @ oracle.I[i] @ links[i].T  # eq 30
        inertia_dot = tilde(angular[i]) @ inertia - inertia @ tilde(angular[i])  # eq 70
        r0i, r0i_dot = centroids[i] - r0, velocities[i] - v0
        first += m * r0i  # eq 14
        first_dot += m * r0i_dot  # eq 75
        h_s += inertia - m * tilde(r0i) @ tilde(r0i)  # eq 29
        h_s_dot += inertia_dot - m * (tilde(r0i_dot) @ tilde(r0i) + tilde(r0i) @ tilde(r0i_dot))  # eq 76
        j_ts += m * jt  # eq 32
        j_ts_dot += m * jt_dot  # eq 78
        h_sq += inertia @ jr + m * tilde(r0i) @ jt  # eq 34
        h_sq_dot += inertia_dot @ jr + inertia @ jr_dot + m * (tilde(r0i_dot) @ jt + tilde(r0i) @ jt_dot)  # eq 79
        h_m += jr.T @ inertia @ jr + m * jt.T @ jt  # eq 36
        h_m_dot += (
            jr_dot.T @ inertia @ jr
            + jr.T @ inertia_dot @ jr
            + jr.T @ inertia @ jr_dot
            + m * (jt_dot.T @ jt + jt.T @ jt_dot)
        )  # eq 66
    h_0 = np.block([[mass * np.eye(3), -tilde(first)], [tilde(first), h_s]])  # eq 28
    h_0_dot = np.block([[np.zeros((3, 3)), -tilde(first_dot)], [tilde(first_dot), h_s_dot]])  # eq 74
    h_0m, h_0m_dot = np.vstack([j_ts, h_sq]), np.vstack([j_ts_dot, h_sq_dot])  # eqs 31, 77
    inverse_coupling = np.linalg.solve(h_0, h_0m)
    h_star = h_m - h_0m.T @ inverse_coupling  # eq 45
    h_star_dot = h_m_dot - (  # eq 65
        h_0m_dot.T @ inverse_coupling + inverse_coupling.T @ h_0m_dot - inverse_coupling.T @ h_0_dot @ inverse_coupling
    )
    return h_star, h_star_dot


def test_generalized_inertia_derivatives_match_closed_forms(model):
    for seed in range(2):
        state = random_state(model, seed)
        h_star, h_star_dot = closed_form_generalized_inertia_rate(model, state)
        assert_close(sdjax.generalized_inertia_matrix(model, state), h_star, RTOL, "H* (eq 45)")
        gradient, rate = sdjax.generalized_inertia_derivatives(model, state)
        assert_close(rate, h_star_dot, RTOL, "dH*/dt (eqs 62-79)")
        for k in range(model.num_joints):
            unit = eqx.tree_at(
                lambda s: (s.base_linear_velocity, s.base_angular_velocity, s.qd),
                state,
                (jnp.zeros(3), jnp.zeros(3), jnp.zeros(model.num_joints).at[k].set(1.0)),
            )
            _, partial = closed_form_generalized_inertia_rate(model, unit)
            assert_close(gradient[..., k], partial, RTOL, f"dH*/dq_{k} (eqs 81-102)")


def test_generalized_inertia_ignores_base_pose(arm7_model):
    """``H*`` is the zero-momentum kinetic-energy metric: invariant under moving the base."""
    state = random_state(arm7_model, 0)
    moved = eqx.tree_at(
        lambda s: (s.base_position, s.base_quaternion),
        state,
        (state.base_position + 3.0, jnp.array([0.3, -0.5, 0.1, 0.8]) / np.sqrt(0.99)),
    )
    assert_close(
        sdjax.generalized_inertia_matrix(arm7_model, moved),
        sdjax.generalized_inertia_matrix(arm7_model, state),
        RTOL,
        "H*",
    )


# ------------------------------------------------------------------------------------------
# Momentum and base motion (eqs 42, 109).


def test_system_momentum_matches_body_sums(model):
    state = random_state(model, 1)
    momentum = sdjax.system_momentum(model, state)
    assert_close(momentum[:3], sdjax.linear_momentum(model, state), RTOL, "P")
    assert_close(momentum[3:], sdjax.angular_momentum(model, state, about="origin"), RTOL, "L_O")


def test_base_twist_from_joint_rates_carries_the_momentum(model):
    state = random_state(model, 2)
    for momentum in (None, random_momentum(0)):
        twist = sdjax.base_twist_from_joint_rates(model, state, state.qd, momentum)
        consistent = sdjax.with_momentum(model, state, momentum)
        assert_close(
            jnp.concatenate([consistent.base_linear_velocity, consistent.base_angular_velocity]), twist, RTOL, "twist"
        )
        expected = np.zeros(6) if momentum is None else momentum
        assert_close(sdjax.system_momentum(model, consistent), expected, RTOL, "momentum of the eq 109 state")


def test_zero_momentum_base_motion_is_conserved_in_a_rollout(arm7_model):
    """A floating manoeuvre started with the eq 109 twist keeps zero momentum, and the base
    twist along the way is eq 109's for the current joint rates."""
    state = sdjax.with_momentum(arm7_model, random_state(arm7_model, 3, scale=0.3))
    trajectory = sdjax.rollout(arm7_model, state, 0.002, 100, lambda t, s: jnp.sin(3.0 * t) * jnp.ones(7))
    final = jax.tree.map(lambda x: x[-1], trajectory.states)
    # The momentum is a sum of body momenta of size ~|H_b x0d|; RK4 at dt = 2 ms keeps it to
    # ~1e-12 of that over 100 steps (local error ~dt^5); 1e-9 is the conservation test's bound.
    twist = jnp.concatenate([final.base_linear_velocity, final.base_angular_velocity])
    scale = float(jnp.max(jnp.abs(sdjax.inertia_matrix(arm7_model, final)[:6, :6] @ twist)))
    assert np.max(np.abs(sdjax.system_momentum(arm7_model, final))) < 1e-9 * scale
    predicted = sdjax.base_twist_from_joint_rates(arm7_model, final)
    assert_close(twist, predicted, 1e-8, "eq 109 along a rollout")


# ------------------------------------------------------------------------------------------
# Generalized equation of motion (eqs 44-50).


@eqx.filter_jit
def _reduced_terms(model, state, momentum):
    """Seed 003 eq 44's terms by autodiff: ``H*``, ``dH*/dt qd - 1/2 d(qd^T H* qd)/dq`` and the
    momentum terms ``d/dt(A) M`` (total derivative along the motion), ``d(qd^T A M)/dq`` and
    ``1/2 d(M^T H_b^-1 M)/dq`` with ``A = H_bm^T H_b^-1`` and ``M = M_r0``."""

    def at(base_position, quaternion, q):
        return eqx.tree_at(lambda s: (s.base_position, s.base_quaternion, s.q), state, (base_position, quaternion, q))

    def reduced(q):
        return sdjax.generalized_inertia_matrix(model, at(state.base_position, state.base_quaternion, q))

    def momentum_terms(base_position, quaternion, q):
        s = at(base_position, quaternion, q)
        h = sdjax.inertia_matrix(model, s)
        linear, angular = momentum[:3], momentum[3:]
        about_base = jnp.concatenate([linear, angular - jnp.cross(base_position, linear)])
        solved = jnp.linalg.solve(h[:6, :6], about_base)
        return h[:6, 6:].T @ solved, 0.5 * about_base @ solved

    qd = state.qd
    _, rate = jax.jvp(reduced, (state.q,), (qd,))
    velocity_term = rate @ qd - 0.5 * jax.grad(lambda q: qd @ reduced(q) @ qd)(state.q)
    quaternion_rate = 0.5 * quat_multiply(
        jnp.concatenate([state.base_angular_velocity, jnp.zeros(1)]), state.base_quaternion
    )
    positions = (state.base_position, state.base_quaternion, state.q)
    _, (coupling_rate, _) = jax.jvp(momentum_terms, positions, (state.base_linear_velocity, quaternion_rate, qd))
    coupling_gradient = jax.grad(lambda q: qd @ momentum_terms(state.base_position, state.base_quaternion, q)[0])(
        state.q
    )
    amended_gradient = jax.grad(lambda q: momentum_terms(state.base_position, state.base_quaternion, q)[1])(state.q)
    return velocity_term, coupling_rate, coupling_gradient, amended_gradient


def test_generalized_bias_zero_momentum(model):
    """Eqs 47-48: ``C = dH*/dt qd - 1/2 d(qd^T H* qd)/dq``."""
    for seed in range(2):
        state = sdjax.with_momentum(model, random_state(model, seed))
        velocity_term, *_ = _reduced_terms(model, state, jnp.zeros(6))
        assert_close(sdjax.generalized_bias(model, state), velocity_term, RTOL, "C* (eq 48)")


def test_generalized_bias_with_momentum(model):
    """Non-zero momentum: Routh reduction of the Lagrangian in ``(base pose, q)`` with the
    momentum fixed gives

        H* qdd + [dH*/dt qd - 1/2 d(qd^T H* qd)/dq] + d/dt(A) M - d(qd^T A M)/dq
               + 1/2 d(M^T H_b^-1 M)/dq = tau,

    ``A = H_bm^T H_b^-1``. Seed 003 eq 44 as printed lacks the term ``- d(qd^T A M)/dq`` (the
    gyroscopic partner of ``d/dt(A) M``) and has the opposite sign on the last term; this test
    pins the corrected form, and shows that the printed one is off."""
    for seed in range(2):
        momentum = jnp.asarray(random_momentum(seed + 10))
        state = sdjax.with_momentum(model, random_state(model, seed), momentum)
        velocity_term, coupling_rate, coupling_gradient, amended_gradient = _reduced_terms(model, state, momentum)
        exact = sdjax.generalized_bias(model, state, momentum)
        corrected = velocity_term + coupling_rate - coupling_gradient + amended_gradient
        assert_close(exact, corrected, RTOL, "C* with momentum (corrected eq 44)")
        as_printed = velocity_term + coupling_rate - amended_gradient
        assert np.max(np.abs(np.asarray(as_printed - exact))) > 1e-6 * np.max(np.abs(np.asarray(exact)))


def test_reduced_forward_dynamics_matches_full_dynamics(model):
    rng = np.random.default_rng(5)
    for momentum in (None, random_momentum(3)):
        state = sdjax.with_momentum(model, random_state(model, 4), momentum)
        tau = rng.normal(size=model.num_joints)
        base_acc, qdd = sdjax.reduced_forward_dynamics(model, state, tau, momentum)
        expected_base, expected_qdd = sdjax.forward_dynamics(model, state, tau)
        assert_close(qdd, expected_qdd, RTOL, "qdd")
        assert_close(base_acc, expected_base, RTOL, "base acceleration (eq 43)")
        # and the generalized equation H* qdd + C* = tau (+ passive torques) itself
        lhs = sdjax.generalized_inertia_matrix(model, state) @ qdd + sdjax.generalized_bias(model, state, momentum)
        assert_close(lhs, tau + sdjax.passive_joint_torques(model, state), RTOL, "H* qdd + C* = tau")


# ------------------------------------------------------------------------------------------
# Generalized Jacobian (eq 110) and manipulability.


def test_generalized_jacobian_with_momentum_predicts_point_velocity(model):
    """``J* qd + offset`` equals the point's velocity from the recursive link velocities."""
    rng = np.random.default_rng(7)
    momentum = random_momentum(1)
    state = sdjax.with_momentum(model, random_state(model, 6), momentum)
    velocities, angular = sdjax.link_velocities(model, state)
    frames = sdjax.forward_kinematics(model, state)
    for link in (0, model.num_joints):
        point = rng.normal(size=3)
        jac = sdjax.generalized_jacobian(model, state, link, point)
        offset = sdjax.generalized_velocity_offset(model, state, link, point, momentum)
        v, w, rotation = velocities[link], angular[link], frames.rotation[link]
        expected = np.concatenate([v + np.cross(w, rotation @ point), w])
        assert_close(jac @ state.qd + offset, expected, RTOL, f"point on body {link}")
    ends = sdjax.end_point_generalized_jacobians(model, state) @ state.qd + sdjax.end_point_velocity_offsets(
        model, state, momentum
    )
    twist = np.concatenate([state.base_linear_velocity, state.base_angular_velocity, state.qd])
    assert_close(ends, sdjax.end_point_jacobians(model, state) @ twist, RTOL, "end points")
    assert_close(
        sdjax.end_point_velocity_offsets(model, state),
        np.zeros((model.num_end_points, 6)),
        0.0,
        "zero momentum, zero offset",
    )


def test_manipulability_matches_numpy(arm7_model):
    state = random_state(arm7_model, 8)
    jac = np.asarray(sdjax.end_point_generalized_jacobians(arm7_model, state)[0])
    result = sdjax.manipulability(jac)
    sigma = np.linalg.svd(jac, compute_uv=False)
    assert_close(result.singular_values, sigma, 1e-12, "singular values")
    # det of a 6x6 Gram matrix of O(1) entries: relative round-off ~1e-15 * cond.
    assert_close(result.measure, np.sqrt(np.linalg.det(jac @ jac.T)), 1e-10, "Yoshikawa measure")
    assert_close(result.condition_number, np.linalg.cond(jac), 1e-10, "condition number")
    # Rank-deficient: a repeated column in a 2x3 matrix of rank 1.
    singular = sdjax.manipulability(np.array([[1.0, 2.0, 2.0], [2.0, 4.0, 4.0]]))
    assert float(singular.min_singular_value) < 1e-14 and float(singular.measure) < 1e-14


def test_manipulability_gradient_is_finite(arm7_model):
    """The measure is differentiable in the joint angles (distinct singular values)."""
    state = random_state(arm7_model, 9)

    def measure(q):
        s = eqx.tree_at(lambda s: s.q, state, q)
        return sdjax.manipulability(sdjax.end_point_generalized_jacobians(arm7_model, s)[0][:3]).measure

    measure = jax.jit(measure)
    grad = jax.jit(jax.grad(measure))(state.q)
    step = 1e-6
    k = 2
    fd = (measure(state.q.at[k].add(step)) - measure(state.q.at[k].add(-step))) / (2 * step)
    assert np.all(np.isfinite(np.asarray(grad)))
    # central difference: truncation O(step^2) ~1e-12, cancellation ~1e-16/1e-6 = 1e-10 relative.
    assert_close(grad[k], fd, 1e-7, "d measure / dq")


def test_vmap_over_states_and_momenta(arm7_model):
    states = [random_state(arm7_model, s) for s in range(3)]
    momenta = jnp.asarray(np.stack([random_momentum(s) for s in range(3)]))
    batched = jax.tree.map(lambda *x: jnp.stack(x), *states)
    out = jax.vmap(lambda s, m: sdjax.reduced_forward_dynamics(arm7_model, s, None, m)[1])(batched, momenta)
    for k, s in enumerate(states):
        assert_close(out[k], sdjax.reduced_forward_dynamics(arm7_model, s, None, momenta[k])[1], 1e-12, "vmap")


def test_bad_inputs_raise(arm7_model):
    state = random_state(arm7_model, 0)
    with pytest.raises(ValueError, match="momentum"):
        sdjax.base_twist_from_joint_rates(arm7_model, state, momentum=np.zeros(5))
    with pytest.raises(ValueError, match="qd"):
        sdjax.base_twist_from_joint_rates(arm7_model, state, qd=np.zeros(6))
    with pytest.raises(ValueError, match="tau"):
        sdjax.reduced_forward_dynamics(arm7_model, state, np.zeros(3))
    with pytest.raises(ValueError, match="manipulability"):
        sdjax.manipulability(np.zeros(6))


def test_generalized_jacobian_matches_finite_differences_along_a_floating_rollout(arm7_model):
    """Seed 003 eq 110 against the motion itself: along a free-floating rollout that carries
    momentum, central differences of the end-point position and attitude equal
    ``J* qd + offset`` at the middle sample."""
    momentum = random_momentum(4, scale=2.0)
    state = sdjax.with_momentum(arm7_model, random_state(arm7_model, 11, scale=0.5), momentum)
    dt, steps = 5e-4, 40
    trajectory = sdjax.rollout(arm7_model, state, dt, steps, lambda t, s: 0.5 * jnp.cos(2.0 * t) * jnp.ones(7))
    kinematics = jax.vmap(lambda s: sdjax.forward_kinematics(arm7_model, s))(trajectory.states)
    position, rotation = kinematics.end_point_position[:, 0], kinematics.end_point_rotation[:, 0]
    for k in (1, steps // 2, steps - 1):
        middle = jax.tree.map(lambda x: x[k], trajectory.states)
        predicted = sdjax.end_point_generalized_jacobians(arm7_model, middle)[0] @ middle.qd
        predicted = predicted + sdjax.end_point_velocity_offsets(arm7_model, middle, momentum)[0]
        linear = (position[k + 1] - position[k - 1]) / (2 * dt)
        spin = (rotation[k + 1] - rotation[k - 1]) @ rotation[k].T / (2 * dt)  # skew(w) + O(dt^2)
        angular = 0.5 * jnp.array([spin[2, 1] - spin[1, 2], spin[0, 2] - spin[2, 0], spin[1, 0] - spin[0, 1]])
        # Central differences: truncation dt^2/6 |x'''| < 1e-6 (the light wrist links reach
        # accelerations of ~10-50 rad/s^2 under 0.5 N m); RK4's own error is ~dt^4. 1e-5 is
        # safe while a missing offset or a wrong J* column shows at O(1e-1) relative.
        assert_close(linear, predicted[:3], 1e-5, f"end-point velocity, sample {k}")
        assert_close(angular, predicted[3:], 1e-5, f"end-point angular velocity, sample {k}")


def test_generalized_inertia_is_symmetric_positive_definite(model):
    for seed in range(3):
        h_star = np.asarray(sdjax.generalized_inertia_matrix(model, random_state(model, seed)))
        # Symmetric up to the round-off of one product H_bm^T (H_b^-1 H_bm).
        assert np.max(np.abs(h_star - h_star.T)) <= 1e-13 * np.max(np.abs(h_star))
        # A Schur complement of the SPD H is SPD (its smallest eigenvalue >= H's).
        assert np.min(np.linalg.eigvalsh(h_star)) > 0.0
