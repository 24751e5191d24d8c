"""Control and planning building blocks (sdjax.control; seed 003 eqs 103-115).

* Gains (eqs 113-114) and the joint PD law against their formulas; a PD rollout settles.
* Computed torque (eqs 112-115): the estimated terms against the generalized dynamics of
  :mod:`sdjax.gjm` and the inverse dynamics (fixed base); with the exact model and the law
  evaluated continuously, the joint error follows the closed-form solution of
  ``e'' + Kd e' + Kp e = 0`` to RK4 accuracy (checked by its dt^4 convergence); with
  perturbed masses in a rollout the tracking error grows with the mass error.
* Resolved motion rate control (eqs 110-111): the rates produce the requested velocity
  (including the momentum offset); damped least squares stays bounded at a singularity
  where the pseudo-inverse blows up; a closed-loop free-floating rollout moves the end point
  along a straight line while the base moves.
* Inverse kinematics with a convergence report: fixed base (pose, limits, unreachable
  targets, float32) and floating base (centre of mass fixed; base attitude checked against
  an independent, finer integration of eq 109 along the reported joint path).
* Reaction null space: projector identities; a rollout driven by projected rates leaves the
  base attitude unchanged while the unprojected manoeuvre turns it.
* jit / vmap / grad, float32, and every ValueError.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from helpers import random_state
from sdjax.integrate import state_derivative
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample
from sdjax.models.builtin import free_flying_arm_initial_q
from sdjax.rotation import quat_conjugate, quat_multiply, quat_normalize, quat_rate

# float64 round-off of identities between two O(n) evaluations of the same quantities
# (inertia matrices with condition ~1e3): observed ~1e-14; 1e-10 leaves margin.
RTOL = 1e-10


@pytest.fixture(scope="module")
def arm():
    return free_flying_arm_7dof()


@pytest.fixture(scope="module")
def arm_state(arm):
    return sdjax.make_state(arm, q=free_flying_arm_initial_q())


def perturbed(model: sdjax.Model, scale) -> sdjax.Model:
    """The model with link masses and inertias scaled by ``scale`` (an uncertain payload)."""
    return eqx.tree_at(
        lambda m: (m.link_mass, m.link_inertia), model, (model.link_mass * scale, model.link_inertia * scale)
    )


def attitude_angle(quat_a, quat_b) -> float:
    """Angle (rad) of the rotation between two attitude quaternions (accurate near zero)."""
    rel = np.asarray(quat_multiply(quat_conjugate(jnp.asarray(quat_a)), jnp.asarray(quat_b)), np.float64)
    return float(2.0 * np.arctan2(np.linalg.norm(rel[:3]), abs(rel[3])))


def closed_loop_rk4(model, law, state, dt, num_steps):
    """Classical RK4 of the closed loop with the law evaluated at every stage (a continuous
    controller), so that the closed loop is a smooth ODE and RK4 is fourth order.
    Returns the joint positions ``(num_steps + 1, n)``."""

    def rate(t, s):
        return state_derivative(model, s, sdjax.make_controls(model, tau=law(t, s)))

    def axpy(a, x, y):
        return jax.tree.map(lambda u, v: u + a * v, y, x)

    def step(s, k):
        t = k.astype(dt.dtype) * dt
        k1 = rate(t, s)
        k2 = rate(t + 0.5 * dt, axpy(0.5 * dt, k1, s))
        k3 = rate(t + 0.5 * dt, axpy(0.5 * dt, k2, s))
        k4 = rate(t + dt, axpy(dt, k3, s))
        new = jax.tree.map(lambda y, a, b, c, d: y + dt / 6.0 * (a + 2.0 * b + 2.0 * c + d), s, k1, k2, k3, k4)
        new = eqx.tree_at(lambda x: x.base_quaternion, new, quat_normalize(new.base_quaternion))
        return new, new.q

    _, qs = jax.lax.scan(step, state, jnp.arange(num_steps, dtype=jnp.int32))
    return jnp.concatenate([state.q[None], qs])


# ------------------------------------------------------------------------------------------
# Gains and joint PD.


def test_torque_limited_gains():
    kp, kd = sdjax.torque_limited_gains(np.array([40.0, 10.0]), 0.5)
    # Eq 113: Kp = tau_max / e_max; eq 114 read as critical damping: Kd = 2 sqrt(Kp).
    np.testing.assert_allclose(kp, [80.0, 20.0], rtol=1e-15)
    np.testing.assert_allclose(kd, 2.0 * np.sqrt([80.0, 20.0]), rtol=1e-15)
    kp, kd = sdjax.torque_limited_gains(40.0, 0.5, inertia=np.array([2.0, 8.0]), damping_ratio=0.7)
    np.testing.assert_allclose(kd, 2.0 * 0.7 * np.sqrt(80.0 * np.array([2.0, 8.0])), rtol=1e-15)
    for bad in (
        dict(tau_max=-1.0, max_error=0.5),
        dict(tau_max=1.0, max_error=0.0),
        dict(tau_max=1.0, max_error=1.0, inertia=-2.0),
    ):
        with pytest.raises(ValueError, match="must be positive"):
            sdjax.torque_limited_gains(**bad)


def test_joint_pd_law_and_rollout(sample_model):
    model = sample_model
    state = random_state(model, 3)
    kp, kd = np.arange(1.0, 7.0), 2.5
    q_d, qd_d = np.full(6, 0.3), np.linspace(-0.2, 0.2, 6)
    tau = sdjax.JointPD(kp, kd, (q_d, qd_d))(jnp.asarray(0.0), state)
    np.testing.assert_allclose(tau, kp * (q_d - state.q) + kd * (qd_d - state.qd), rtol=1e-14)
    # A callable reference: the quintic at mid-motion.
    ref = sdjax.QuinticJointReference(np.zeros(6), q_d, 2.0)
    tau = sdjax.JointPD(kp, kd, ref)(jnp.asarray(1.0), state)
    q_mid, qd_mid, _ = ref(jnp.asarray(1.0))
    np.testing.assert_allclose(q_mid, 0.5 * q_d, rtol=1e-14)  # s(1/2) = 1/2
    np.testing.assert_allclose(qd_mid, 1.875 * q_d / 2.0, rtol=1e-14)  # ds/dx(1/2) = 15/8
    np.testing.assert_allclose(tau, kp * (q_mid - state.q) + kd * (qd_mid - state.qd), rtol=1e-14)
    # SpaceDyn's sample run (tau = 10 (q_des - q) - 10 qd): JointPD reproduces it exactly.
    q_des = np.array([0.3, 0.2, 0.1, 0.6, 0.5, 0.4])
    start = sdjax.make_state(model)
    run = eqx.filter_jit(lambda law: sdjax.rollout(model, start, 0.01, 400, law).states.q)
    qs = run(sdjax.JointPD(10.0, 10.0, q_des))
    reference = sdjax.rollout(
        model, start, 0.01, 400, lambda t, s: 10.0 * (jnp.asarray(q_des) - s.q) - 10.0 * s.qd
    ).states.q
    np.testing.assert_allclose(qs, reference, rtol=0, atol=1e-13)  # same arithmetic, round-off only
    # The loop converges, slowly (Kd = 10 N m s/rad on joint inertias of ~10-60 kg m^2):
    # after 4 s the largest error is ~16% of the largest step (observed 0.094 of 0.6 rad).
    assert np.max(np.abs(qs[-1] - q_des)) < 0.2 * np.max(q_des)


# ------------------------------------------------------------------------------------------
# Computed torque (eqs 112-115).


#: A branched tree with a prismatic joint, gravity and passive (visco-elastic) joints.
TREE = random_model(20, 6, gravity=True, passive=True)


@jax.jit
def _computed_torque_quantities(state, momentum, u):
    """Everything test_computed_torque_terms compares, in one compiled function."""
    model = TREE
    carrying = sdjax.with_momentum(model, state, momentum)
    rest = eqx.tree_at(lambda s: (s.base_linear_velocity, s.base_angular_velocity), state, (jnp.zeros(3), jnp.zeros(3)))
    tau = sdjax.computed_torque(model, carrying, u, momentum=momentum)
    return dict(
        terms=sdjax.computed_torque_terms(model, state, momentum=momentum),
        measured=sdjax.computed_torque_terms(model, carrying, momentum="measured"),
        fixed=sdjax.computed_torque_terms(model, state, base="fixed"),
        tau_fixed=sdjax.computed_torque(model, state, u, base="fixed"),
        reduced=(sdjax.generalized_inertia_matrix(model, state), sdjax.generalized_bias(model, state, momentum)),
        full=(sdjax.inertia_matrix(model, state)[6:, 6:], sdjax.bias_forces(model, rest)[6:]),
        passive=sdjax.passive_joint_torques(model, state),
        qdd=sdjax.forward_dynamics(model, carrying, tau)[1],
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_computed_torque_terms(seed):
    rng = np.random.default_rng(seed)
    state = random_state(TREE, seed)
    u = rng.normal(size=6)
    out = _computed_torque_quantities(state, jnp.asarray(rng.normal(size=6)), jnp.asarray(u))
    passive = out["passive"]
    # Floating: H* and C* of gjm, minus the passive torques; eq 109's twist for `momentum`.
    h, c = out["terms"]
    np.testing.assert_allclose(h, out["reduced"][0], rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(c, out["reduced"][1] - passive, rtol=RTOL, atol=RTOL)
    # "measured": the state's own twist; equal to the above for a state carrying `momentum`.
    np.testing.assert_allclose(out["measured"][1], c, rtol=RTOL, atol=RTOL)
    # Fixed: H_m and inverse dynamics with the base at rest (gravity included).
    h_fixed, c_fixed = out["fixed"]
    np.testing.assert_allclose(h_fixed, out["full"][0], rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(c_fixed, out["full"][1] - passive, rtol=RTOL, atol=RTOL)
    np.testing.assert_allclose(out["tau_fixed"], h_fixed @ u + c_fixed, rtol=RTOL, atol=RTOL)
    # The floating torque realises qdd = u in the full forward dynamics (no base wrench).
    np.testing.assert_allclose(out["qdd"], u, rtol=RTOL, atol=RTOL)


def test_computed_torque_exact_model_gives_designed_error_dynamics(arm, arm_state):
    """Exact model, law evaluated continuously: e = q_d - q obeys e'' + Kd e' + Kp e = 0."""
    kp = np.array([16.0, 9.0, 25.0, 12.0, 20.0, 30.0, 10.0])
    kd = np.array([5.0, 3.0, 6.0, 4.0, 5.0, 7.0, 2.0])  # all under-damped (zeta 0.3-0.7)
    e0 = np.array([0.2, -0.15, 0.1, 0.25, -0.2, 0.1, 0.3])
    q_d = arm_state.q + e0
    law = sdjax.ComputedTorque(arm, kp, kd, q_d)
    num_steps = 150
    run = jax.jit(lambda dt: closed_loop_rk4(arm, law, arm_state, dt, num_steps))

    def closed_form(t):  # e(0) = e0, e'(0) = 0 (the arm starts at rest)
        omega, zeta = np.sqrt(kp), kd / (2.0 * np.sqrt(kp))
        omega_d = omega * np.sqrt(1.0 - zeta**2)
        t = t[:, None]
        return np.exp(-zeta * omega * t) * (
            e0 * np.cos(omega_d * t) + zeta * omega * e0 / omega_d * np.sin(omega_d * t)
        )

    errors = {}
    for dt in (0.02, 0.01):
        t = dt * np.arange(num_steps + 1)
        e = q_d - np.asarray(run(jnp.asarray(dt)))
        # Compare on the common interval [0, 1.5] s (the finer run covers half of the coarse one).
        keep = t <= 1.5 + 1e-12
        errors[dt] = np.max(np.abs(e[keep] - closed_form(t[keep])))
    # The only error left is RK4's: halving dt divides it by ~2^4 = 16 (observed 16.3:
    # 8.3e-8 -> 5.1e-9 rad, against an initial error of 0.3 rad). Bounds: ratio in
    # [12, 20] (fourth order) and 5e-8 rad at dt = 0.01 s.
    ratio = errors[0.02] / errors[0.01]
    assert 12.0 < ratio < 20.0, (errors, ratio)
    assert errors[0.01] < 5e-8, errors


def test_computed_torque_model_error_grows_with_mass_error(arm, arm_state):
    """Perturbed link masses/inertias in H~, C~ (eq 115): tracking error grows with the error."""
    q_goal = arm_state.q + np.array([0.5, -0.4, 0.3, 0.6, -0.5, 0.4, 0.5])
    reference = sdjax.QuinticJointReference(arm_state.q, q_goal, 2.0)
    scales = np.array([1.0, 1.1, 1.25, 1.5])

    @jax.jit
    def tracking_error(scale):
        law = sdjax.ComputedTorque(perturbed(arm, scale), 16.0, 8.0, reference)
        traj = sdjax.rollout(arm, arm_state, 0.01, 250, law)
        q_d = jax.vmap(lambda t: reference(t)[0])(traj.time)
        return jnp.max(jnp.abs(q_d - traj.states.q))

    errors = np.asarray(jax.vmap(tracking_error)(jnp.asarray(scales)))
    # Exact model: only the zero-order hold of the 100 Hz controller remains (observed
    # 6.9e-4 rad); link masses/inertias +10%, +25%, +50% give 7.3e-3, 1.6e-2, 2.6e-2 rad:
    # monotone in the mass error. Bounds: 2e-3 rad for the exact model, 5x more at +10%.
    assert errors[0] < 2e-3, errors
    assert errors[1] > 5.0 * errors[0], errors
    assert np.all(np.diff(errors) > 0), errors


# ------------------------------------------------------------------------------------------
# Resolved motion rate control (eqs 110-111).


@eqx.filter_jit
def _resolved_rates_quantities(arm, state, velocity, momentum, point):
    """Everything test_resolved_rates_produce_requested_velocity compares, in one compile."""
    pose = sdjax.resolved_motion_rates(arm, state, velocity, momentum=momentum)
    # Independent check: these joint rates with eq 109's base twist (same momentum) give the
    # end-point velocity through the full Jacobian.
    moving = sdjax.with_momentum(arm, eqx.tree_at(lambda s: s.qd, state, pose.joint_rates), momentum)
    achieved = sdjax.end_point_jacobians(arm, moving)[0] @ moving.generalized_velocity
    position = sdjax.resolved_motion_rates(arm, state, velocity[:3], task="position")
    jac_position, offset = sdjax.task_jacobian(arm, state, task="position")
    on_link = sdjax.resolved_motion_rates(arm, state, velocity[:3], link=4, point=point, task="position", base="fixed")
    jac_link = sdjax.point_jacobian(arm, state, 4, point)[:3, 6:]
    return pose, achieved, position, jac_position, offset, on_link, jac_link


def test_resolved_rates_produce_requested_velocity(arm, arm_state):
    momentum = jnp.array([0.5, -0.3, 0.2, 2.0, -1.0, 0.5])
    velocity = jnp.array([0.1, -0.05, 0.08, 0.05, 0.1, -0.02])
    point = jnp.array([0.1, 0.0, 0.0])  # on the elbow link, 0.1 m along its x from the centroid
    pose, achieved, position, jac_position, offset, on_link, jac_link = _resolved_rates_quantities(
        arm, arm_state, velocity, momentum, point
    )
    # Full pose with non-zero momentum (eqs 110-111 with the offset); exact: no damping here.
    # Tolerance: round-off of 6x6 solves with condition ~30 on velocities ~0.1.
    assert float(pose.damping) == 0.0
    np.testing.assert_allclose(achieved, velocity, rtol=0, atol=1e-12)
    np.testing.assert_allclose(pose.task_velocity, velocity, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.prod(pose.manipulability.singular_values), pose.manipulability.measure, rtol=1e-12)
    # Translation only (3 rows, 4-fold redundant): the minimum-norm solution J^+ v.
    np.testing.assert_allclose(
        position.joint_rates, np.linalg.pinv(np.asarray(jac_position)) @ velocity[:3], rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(offset, 0.0)
    # A point on a link with a fixed base: J_m qd = v.
    np.testing.assert_allclose(jac_link @ on_link.joint_rates, velocity[:3], rtol=0, atol=1e-12)


def test_damped_least_squares_bounded_at_singularity(arm):
    # Stretched arm with a 1e-4 rad elbow bend: the full-pose generalized Jacobian has
    # sigma_min ~ 5e-5 (a singular configuration of the floating arm). Request 0.1 (m/s,
    # rad/s) along its worst task direction plus 0.1 along the best one.
    state = sdjax.make_state(arm, q=np.array([0.0, 0.0, 0.0, 1e-4, 0.0, 0.0, 0.0]))
    jac, _ = sdjax.task_jacobian(arm, state)
    u, sigma, _ = np.linalg.svd(np.asarray(jac))
    assert sigma[-1] < 1e-4
    velocity = 0.1 * (u[:, -1] + u[:, 0])
    plain = np.linalg.pinv(np.asarray(jac)) @ velocity
    rates = sdjax.resolved_motion_rates(arm, state, velocity)
    lam = float(rates.damping)
    norm = float(np.linalg.norm(rates.joint_rates))
    assert np.all(np.isfinite(rates.joint_rates))
    assert lam > 0.99 * sdjax.control.DEFAULT_MAX_DAMPING  # sigma_min << threshold: full damping
    # Every singular direction is scaled by sigma / (sigma^2 + lambda^2) <= 1 / (2 lambda).
    assert norm <= np.linalg.norm(velocity) / (2.0 * lam) * (1 + 1e-12)
    assert np.linalg.norm(plain) > 100.0 * norm, (np.linalg.norm(plain), norm)  # observed ~2e3 vs ~1
    # The well-conditioned direction is still served (damping 0.05 against sigma_max ~ 2).
    np.testing.assert_allclose(u[:, 0] @ (jac @ rates.joint_rates), 0.1, rtol=1e-3)
    # Exactly singular (fixed base, stretched arm, translation: sigma_min = 0): still finite.
    straight = sdjax.make_state(arm)
    rates = sdjax.resolved_motion_rates(arm, straight, velocity[:3], task="position", base="fixed")
    assert np.all(np.isfinite(rates.joint_rates)) and float(rates.manipulability.min_singular_value) < 1e-12
    assert np.linalg.norm(rates.joint_rates) <= np.linalg.norm(velocity[:3]) / (2.0 * float(rates.damping)) * (
        1 + 1e-12
    )

    # Gradients of the damped solution stay finite at the singularity.
    def rates_norm(q):
        moved = eqx.tree_at(lambda s: s.q, straight, q)
        return jnp.sum(
            sdjax.resolved_motion_rates(arm, moved, velocity[:3], task="position", base="fixed").joint_rates ** 2
        )

    grad = jax.grad(rates_norm)(straight.q)
    assert np.all(np.isfinite(grad))


def test_damped_least_squares_schedule_and_weights():
    rng = np.random.default_rng(0)
    u, _, vt = np.linalg.svd(rng.normal(size=(3, 5)), full_matrices=False)
    b = rng.normal(size=3)
    eps, lam_max = 0.1, 0.2
    for sigma_min in (0.5, 0.05, 0.0):
        jac = u @ np.diag([2.0, 1.0, sigma_min]) @ vt
        out = sdjax.damped_least_squares(jac, b, singular_threshold=eps, max_damping=lam_max)
        lam_sq = lam_max**2 * (1 - (sigma_min / eps) ** 2) if sigma_min < eps else 0.0
        expected = jac.T @ np.linalg.solve(jac @ jac.T + lam_sq * np.eye(3), b)
        np.testing.assert_allclose(out.solution, expected, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out.damping, np.sqrt(lam_sq), rtol=1e-12)
        np.testing.assert_allclose(out.min_singular_value, sigma_min, atol=1e-7)  # sqrt of an eigenvalue ~1e-16
    # Over-determined (m > n) and weighted: the weighted least-squares solution.
    jac, b, w = rng.normal(size=(6, 3)), rng.normal(size=6), np.array([1.0, 1.0, 1.0, 0.1, 0.1, 0.1])
    out = sdjax.damped_least_squares(jac, b, weights=w)
    expected = np.linalg.lstsq(np.sqrt(w)[:, None] * jac, np.sqrt(w) * b, rcond=None)[0]
    np.testing.assert_allclose(out.solution, expected, rtol=1e-12)


def test_resolved_rate_law_follows_straight_line(arm, arm_state):
    """Closed-loop RMRC in a free-floating rollout: the end point follows a straight line."""
    x0, _ = sdjax.task_pose(arm, arm_state)
    goal = x0 + jnp.array([0.25, -0.2, 0.15])  # 0.37 m
    path = sdjax.LinePath(x0, goal, 3.0)
    law = sdjax.ResolvedRateLaw(arm, path, position_gain=5.0, rate_gain=40.0, task="position")
    traj = sdjax.rollout(arm, arm_state, 0.01, 400, law)
    pos = np.asarray(jax.vmap(lambda s: sdjax.task_pose(arm, s)[0])(traj.states))
    desired = np.asarray(jax.vmap(lambda t: path(t)[0])(traj.time))
    direction = np.asarray(goal - x0) / np.linalg.norm(goal - x0)
    rel = pos - np.asarray(x0)
    off_line = np.linalg.norm(rel - (rel @ direction)[:, None] * direction, axis=1)
    # Observed: 0.85 um off the line, 11 um from the moving set point, 9e-8 m from the goal
    # 1 s after the motion ends; what remains is the 100 Hz zero-order hold (without the
    # servo's feed-forward, the 1/Kv lag gives 0.16 mm and 1.1 mm). Tolerances: 10 um,
    # 0.1 mm and 1 um.
    assert off_line.max() < 1e-5, off_line.max()
    assert np.linalg.norm(pos - desired, axis=1).max() < 1e-4
    assert np.linalg.norm(pos[-1] - np.asarray(goal)) < 1e-6
    # The base floats: it translates ~9 mm and turns ~4 deg while momentum stays zero.
    assert np.linalg.norm(np.asarray(traj.states.base_position[-1] - traj.states.base_position[0])) > 5e-3
    assert attitude_angle(traj.states.base_quaternion[0], traj.states.base_quaternion[-1]) > np.radians(2.0)
    final = jax.tree.map(lambda x: x[-1], traj.states)
    np.testing.assert_allclose(sdjax.system_momentum(arm, final), 0.0, atol=1e-9)  # RK4 round-off


# ------------------------------------------------------------------------------------------
# Inverse kinematics.


def test_inverse_kinematics_fixed_base_pose(arm, arm_state):
    target = sdjax.make_state(arm, q=arm_state.q + np.array([0.3, -0.2, 0.4, -0.3, 0.2, 0.3, -0.4]))
    x, rot = sdjax.task_pose(arm, target)
    result = sdjax.inverse_kinematics(arm, arm_state, x, rot)
    assert bool(result.converged) and 0 < int(result.iterations) < 20
    reached_x, reached_rot = sdjax.task_pose(arm, result.state)
    # Default tolerance sqrt(eps) = 1.5e-8 (m, rad); Newton overshoots it by orders of magnitude.
    assert np.linalg.norm(reached_x - x) <= 1.5e-8 and float(result.position_error) <= 1.5e-8
    assert np.max(np.abs(reached_rot - rot)) <= 1.5e-8 and float(result.orientation_error) <= 1.5e-8
    np.testing.assert_array_equal(result.state.base_position, arm_state.base_position)
    np.testing.assert_array_equal(result.waypoints[0], arm_state.q)
    np.testing.assert_array_equal(result.waypoints[-1], result.q)
    # Orientation only.
    result = sdjax.inverse_kinematics(arm, arm_state, target_rotation=rot)
    assert bool(result.converged) and float(result.position_error) == 0.0


def test_inverse_kinematics_reports_failure(arm, arm_state):
    x, _ = sdjax.task_pose(arm, arm_state)
    far = x + jnp.array([10.0, 0.0, 0.0])  # 10 m away from a 2.6 m arm
    result = sdjax.inverse_kinematics(arm, arm_state, far, max_iterations=30)
    assert not bool(result.converged) and int(result.iterations) == 30
    assert np.all(np.isfinite(result.q)) and float(result.position_error) > 5.0
    # Joint limits: a box of +-0.05 rad around the start cannot reach a target 0.3 rad away.
    goal, _ = sdjax.task_pose(arm, sdjax.make_state(arm, q=arm_state.q + 0.3))
    lower, upper = arm_state.q - 0.05, arm_state.q + 0.05
    result = sdjax.inverse_kinematics(arm, arm_state, goal, joint_limits=(lower, upper), max_iterations=30)
    assert not bool(result.converged)
    assert np.all(result.q >= lower) and np.all(result.q <= upper) and bool(np.any(result.at_joint_limit))
    # Limits that allow the solution: converged, reported within limits.
    result = sdjax.inverse_kinematics(arm, arm_state, goal, joint_limits=(arm_state.q - 1.0, arm_state.q + 1.0))
    assert bool(result.converged) and not bool(np.any(result.at_joint_limit))


def test_inverse_kinematics_floating_base(arm, arm_state):
    x0, _ = sdjax.task_pose(arm, arm_state)
    goal = x0 + jnp.array([-0.3, 0.25, -0.2])
    result = sdjax.inverse_kinematics(arm, arm_state, goal, base="floating", max_iterations=50)
    assert bool(result.converged)
    reached, _ = sdjax.task_pose(arm, result.state)
    assert np.linalg.norm(reached - goal) <= 1.5e-8
    # Zero momentum: the centre of mass has not moved (exact by construction, round-off).
    np.testing.assert_allclose(
        sdjax.center_of_mass(arm, result.state), sdjax.center_of_mass(arm, arm_state), rtol=0, atol=1e-12
    )
    turned = attitude_angle(arm_state.base_quaternion, result.state.base_quaternion)
    assert turned > np.radians(2.0), turned  # the base reacts (observed 0.126 rad, 7 deg)
    # Independent check of the path dependence: integrate eq 109 along the reported joint
    # path with 16x finer RK4 steps; the base attitude agrees to RK4 error.
    k = int(result.iterations)
    segments = jnp.stack([result.waypoints[:k], result.waypoints[1 : k + 1]], axis=1)

    @jax.jit
    def integrate(quat, segments):
        def segment(quat, ends):
            q_a, q_b = ends
            dq = q_b - q_a

            def omega(s, quat):
                state = sdjax.make_state(arm, base_quaternion=quat, q=q_a + s * dq)
                return quat_rate(quat, sdjax.base_twist_from_joint_rates(arm, state, dq)[3:])

            def sub(quat, i):
                h = 1.0 / 64
                s = i.astype(quat.dtype) * h
                k1 = omega(s, quat)
                k2 = omega(s + h / 2, quat + h / 2 * k1)
                k3 = omega(s + h / 2, quat + h / 2 * k2)
                k4 = omega(s + h, quat + h * k3)
                return quat_normalize(quat + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)), None

            return jax.lax.scan(sub, quat, jnp.arange(64, dtype=jnp.int32))[0], None

        return jax.lax.scan(segment, quat, segments)[0]

    fine = integrate(arm_state.base_quaternion, segments)
    # 4 RK4 steps per segment (segments <= 0.2 rad) against 64: observed 3e-10 rad.
    assert attitude_angle(fine, result.state.base_quaternion) < 1e-7
    # Path dependence: one straight joint-space segment from the start to the same final q
    # leaves the base at another attitude (observed 2.2e-3 rad), so the waypoints matter.
    direct = integrate(arm_state.base_quaternion, jnp.stack([arm_state.q, result.q])[None])
    assert attitude_angle(direct, result.state.base_quaternion) > 1e-5


def test_inverse_kinematics_float32(arm, arm_state):
    arm32 = arm.astype(jnp.float32)
    state32 = jax.tree.map(lambda x: x.astype(jnp.float32), arm_state)
    goal, _ = sdjax.task_pose(arm, sdjax.make_state(arm, q=arm_state.q + 0.2))
    result = sdjax.inverse_kinematics(arm32, state32, goal.astype(jnp.float32))
    assert result.q.dtype == jnp.float32 and bool(result.converged)
    # Default tolerance sqrt(eps32) = 3.5e-4 m; check in float64.
    reached, _ = sdjax.task_pose(arm, sdjax.make_state(arm, q=np.asarray(result.q, np.float64)))
    assert np.linalg.norm(reached - goal) < 3.5e-4


# ------------------------------------------------------------------------------------------
# Reaction null space.


@eqx.filter_jit
def _rns_quantities(model, state, qd):
    projector = sdjax.reaction_null_space_projector(model, state)
    rates = sdjax.reaction_null_space_rates(model, state, qd)
    # Independently, eq 109's base angular velocity for the projected and the raw rates.
    return (
        projector,
        sdjax.base_twist_from_joint_rates(model, state, rates)[3:],
        sdjax.base_twist_from_joint_rates(model, state, qd)[3:],
    )


def test_reaction_null_space_projector(arm, sample_model):
    for model, state in ((arm, random_state(arm, 4)), (sample_model, random_state(sample_model, 5))):
        n = model.num_joints
        qd = np.random.default_rng(n).normal(size=n)
        projector, w_projected, w_raw = _rns_quantities(model, state, jnp.asarray(qd))
        projector = np.asarray(projector)
        # Round-off of a pseudo-inverse of a 3 x n matrix with condition ~10-100.
        np.testing.assert_allclose(projector, projector.T, atol=1e-14)
        np.testing.assert_allclose(projector @ projector, projector, atol=1e-12)
        assert round(float(np.trace(projector))) == n - 3  # rank n - 3
        assert np.linalg.norm(w_projected) < 1e-12 * np.linalg.norm(qd)
        assert np.linalg.norm(w_raw) > 1e-3


class _RatesCommand(eqx.Module):
    """Smooth joint-rate manoeuvre ``qd = b(t) d``, optionally projected on the RNS."""

    direction: jax.Array
    project: jax.Array  # 1.0: project, 0.0: raw

    def __call__(self, t, state):
        bump = jnp.sin(jnp.pi * jnp.clip(t / 2.0, 0.0, 1.0)) ** 2  # 0 -> 1 -> 0 over 2 s
        raw = bump * self.direction.astype(state.q.dtype)
        projected = sdjax.reaction_null_space_rates(ARM7, state, raw)
        return raw + self.project.astype(raw.dtype) * (projected - raw)


ARM7 = free_flying_arm_7dof()


def test_reaction_null_space_rollout_leaves_attitude(arm_state):
    direction = jnp.asarray([0.3, -0.4, 0.5, 0.4, -0.3, 0.5, 0.4])

    @jax.jit
    def run(project):
        law = sdjax.RateServo(ARM7, _RatesCommand(direction, project), 50.0)
        traj = sdjax.rollout(ARM7, arm_state, 0.01, 250, law)
        return traj.states.base_quaternion, traj.states.q

    quat_rns, q_rns = run(jnp.asarray(1.0))
    quat_raw, q_raw = run(jnp.asarray(0.0))
    turn_rns = max(attitude_angle(arm_state.base_quaternion, qt) for qt in np.asarray(quat_rns))
    turn_raw = max(attitude_angle(arm_state.base_quaternion, qt) for qt in np.asarray(quat_raw))
    moved = np.linalg.norm(np.asarray(q_rns[-1] - q_rns[0]))
    # The projected manoeuvre still moves the arm (observed 0.89 rad in joint space, 1.08
    # raw) but the base turns by at most 7.6e-7 rad against 0.227 rad (13 deg) for the raw
    # manoeuvre: ratio 3.3e-6. What leaks is the 100 Hz zero-order hold of the servo (with
    # feedforward=False the servo lag 1/Kv adds: 4.7e-4 rad, ratio 2e-3). Bounds: 1e-5 rad,
    # ratio 1e-4.
    assert moved > 0.5
    assert turn_raw > np.radians(5.0), turn_raw
    assert turn_rns < 1e-5, turn_rns
    assert turn_rns / turn_raw < 1e-4, (turn_rns, turn_raw)


# ------------------------------------------------------------------------------------------
# Transformations and float32.


def test_jit_vmap_grad(arm, arm_state):
    states = jax.vmap(lambda q: eqx.tree_at(lambda s: s.q, arm_state, q))(arm_state.q + 0.1 * jnp.arange(3.0)[:, None])
    velocity = jnp.array([0.1, 0.0, -0.1])
    batched = jax.vmap(lambda s: sdjax.resolved_motion_rates(arm, s, velocity, task="position").joint_rates)(states)
    looped = [
        sdjax.resolved_motion_rates(arm, jax.tree.map(lambda x: x[i], states), velocity, task="position").joint_rates
        for i in range(3)
    ]
    np.testing.assert_allclose(batched, np.stack(looped), rtol=1e-12, atol=1e-14)
    # Gradient of the computed torque with respect to the estimated masses vs central
    # differences (step 1e-4 kg on ~10 kg: truncation ~1e-9, round-off ~1e-12 relative).
    law = sdjax.ComputedTorque(arm, 10.0, 5.0, (arm_state.q + 0.1, jnp.full(7, 0.05)))
    moving = sdjax.with_momentum(arm, eqx.tree_at(lambda s: s.qd, arm_state, jnp.linspace(-0.3, 0.3, 7)))

    @jax.jit
    def torque_norm(masses):
        return jnp.sum(eqx.tree_at(lambda c: c.estimated_model.link_mass, law, masses)(jnp.asarray(0.0), moving) ** 2)

    grad = jax.grad(torque_norm)(arm.link_mass)
    step = 1e-4
    masses = arm.link_mass
    fd = np.array(
        [(torque_norm(masses.at[i].add(step)) - torque_norm(masses.at[i].add(-step))) / (2 * step) for i in range(7)]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


@eqx.filter_jit
def _dtype_quantities(model, state):
    dtype = state.q.dtype
    velocity = jnp.asarray([0.1, -0.05, 0.08, 0.05, 0.1, -0.02], dtype)
    rates = sdjax.resolved_motion_rates(model, state, velocity).joint_rates
    tau = sdjax.ComputedTorque(model, 10.0, 5.0, state.q + 0.1)(jnp.asarray(0.0, dtype), state)
    return rates, tau, sdjax.reaction_null_space_projector(model, state)


def test_float32(arm, arm_state):
    state32 = jax.tree.map(lambda x: x.astype(jnp.float32), arm_state)
    out32 = _dtype_quantities(arm.astype(jnp.float32), state32)
    out64 = _dtype_quantities(arm, arm_state)
    assert all(x.dtype == jnp.float32 for x in out32)
    # float32 round-off (6e-8) amplified by the Jacobian's condition number (~30) and by the
    # 6x6 and 7x7 solves: observed ~1e-6 relative; bounds 1e-4 relative.
    rates, tau, projector = out64
    np.testing.assert_allclose(out32[0], rates, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(rates))))
    np.testing.assert_allclose(out32[1], tau, rtol=1e-4, atol=1e-4 * float(np.max(np.abs(tau))))
    np.testing.assert_allclose(out32[2], projector, atol=1e-4)


# ------------------------------------------------------------------------------------------
# Bad inputs.


def test_bad_inputs(arm, arm_state):
    x, rot = sdjax.task_pose(arm, arm_state)
    ik = sdjax.inverse_kinematics
    with pytest.raises(ValueError, match="give target_position"):
        ik(arm, arm_state)
    with pytest.raises(ValueError, match=r"target_position: expected shape \(3,\)"):
        ik(arm, arm_state, np.zeros(2))
    with pytest.raises(ValueError, match="unknown end point 1"):
        ik(arm, arm_state, x, end_point=1)
    with pytest.raises(ValueError, match=r"link: index 0 out of range; expected 1\.\.7"):
        ik(arm, arm_state, x, link=0)
    with pytest.raises(TypeError, match=r"link: expected a static integer index 1\.\.7, got float 2\.0"):
        ik(arm, arm_state, x, link=2.0)
    with pytest.raises(ValueError, match="point: give a point together with link"):
        ik(arm, arm_state, x, point=np.zeros(3))
    with pytest.raises(ValueError, match="inverse_kinematics: position_tolerance: must be positive"):
        ik(arm, arm_state, x, position_tolerance=0.0)
    with pytest.raises(TypeError, match="inverse_kinematics: position_tolerance: expected numbers, got str"):
        ik(arm, arm_state, x, position_tolerance="tight")
    with pytest.raises(ValueError, match="inverse_kinematics: orientation_tolerance: must be positive"):
        ik(arm, arm_state, x, rot, orientation_tolerance=-1e-6)
    with pytest.raises(ValueError, match="inverse_kinematics: max_step: must be positive"):
        ik(arm, arm_state, x, max_step=0.0)
    with pytest.raises(ValueError, match="max_iterations: must be an integer >= 1"):
        ik(arm, arm_state, x, max_iterations=0)
    with pytest.raises(ValueError, match="substeps: must be an integer >= 1"):
        ik(arm, arm_state, x, substeps=0)
    with pytest.raises(ValueError, match="inverse_kinematics: base: unknown base mode 'hover'"):
        ik(arm, arm_state, x, base="hover")
    with pytest.raises(ValueError, match="lower must be <= upper"):
        ik(arm, arm_state, x, joint_limits=(np.ones(7), -np.ones(7)))
    with pytest.raises(ValueError, match=r"joint_limits lower: expected shape \(7,\)"):
        ik(arm, arm_state, x, joint_limits=(np.ones(6), np.ones(6)))
    with pytest.raises(TypeError, match=r"inverse_kinematics: joint_limits: expected a \(lower, upper\) pair"):
        ik(arm, arm_state, x, joint_limits=np.ones(7))
    with pytest.raises(ValueError, match=r"inverse_kinematics: joint_limits: expected .* got 3 items"):
        ik(arm, arm_state, x, joint_limits=(np.ones(7),) * 3)
    rmrc = sdjax.resolved_motion_rates
    with pytest.raises(ValueError, match=r"task_velocity: expected shape \(3,\)"):
        rmrc(arm, arm_state, np.zeros(6), task="position")
    with pytest.raises(ValueError, match="unknown value 'twist'"):
        rmrc(arm, arm_state, np.zeros(6), task="twist")
    with pytest.raises(ValueError, match="momentum applies to base='floating' only"):
        rmrc(arm, arm_state, np.zeros(6), base="fixed", momentum=np.zeros(6))
    with pytest.raises(ValueError, match="resolved_motion_rates: weights: must be positive"):
        rmrc(arm, arm_state, np.zeros(6), weights=np.array([1.0, 1.0, 1.0, 0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="singular_threshold must be a finite non-negative"):
        rmrc(arm, arm_state, np.zeros(6), singular_threshold=-0.1)
    with pytest.raises(ValueError, match="unknown end point"):
        rmrc(spacedyn_sample(), random_state(spacedyn_sample(), 0), np.zeros(6), end_point=2)
    with pytest.raises(ValueError, match=r"jacobian expected shape \(m, n\)"):
        sdjax.damped_least_squares(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="max_damping must be a finite non-negative"):
        sdjax.damped_least_squares(np.eye(3), np.zeros(3), max_damping=-1.0)
    with pytest.raises(ValueError, match=r"rhs: expected shape \(3,\)"):
        sdjax.damped_least_squares(np.eye(3), np.zeros(2))
    with pytest.raises(ValueError, match="ComputedTorque: base: unknown base mode 'hovering'"):
        sdjax.ComputedTorque(arm, 1.0, 1.0, arm_state.q, base="hovering")
    # mode=, the earlier name of base=, still works with a warning.
    with pytest.warns(DeprecationWarning, match="mode= is now spelled base="):
        assert sdjax.ComputedTorque(arm, 1.0, 1.0, arm_state.q, mode="fixed").base == "fixed"
    with pytest.warns(DeprecationWarning, match="mode= is now spelled base="):
        old = sdjax.computed_torque(arm, arm_state, np.ones(7), mode="fixed")
    np.testing.assert_array_equal(old, sdjax.computed_torque(arm, arm_state, np.ones(7), base="fixed"))
    with pytest.raises(ValueError, match="momentum: expected None"):
        sdjax.ComputedTorque(arm, 1.0, 1.0, arm_state.q, momentum="estimated")
    with pytest.raises(ValueError, match=r"kp: expected a scalar or shape \(7,\)"):
        sdjax.ComputedTorque(arm, np.ones(6), 1.0, arm_state.q)
    with pytest.raises(ValueError, match=r"ComputedTorque: kp: must be non-negative and finite"):
        sdjax.ComputedTorque(arm, -1.0, 1.0, arm_state.q)
    with pytest.raises(ValueError, match=r"reference q_d: expected shape \(7,\)"):
        sdjax.JointPD(1.0, 1.0, np.zeros(6))(jnp.asarray(0.0), arm_state)
    with pytest.raises(ValueError, match=r"kp has shape \(6,\)"):
        sdjax.JointPD(np.ones(6), 1.0, np.zeros(7))(jnp.asarray(0.0), arm_state)
    with pytest.raises(ValueError, match="a reference tuple is"):
        sdjax.JointPD(1.0, 1.0, (np.zeros(7),) * 4)
    with pytest.raises(ValueError, match="QuinticJointReference: duration: must be positive"):
        sdjax.QuinticJointReference(np.zeros(7), np.ones(7), 0.0)
    with pytest.raises(TypeError, match="QuinticJointReference: duration: expected numbers, got str"):
        sdjax.QuinticJointReference(np.zeros(7), np.ones(7), "2 s")
    with pytest.raises(ValueError, match="LinePath: duration: must be positive"):
        sdjax.LinePath(np.zeros(3), np.ones(3), -1.0)
    with pytest.raises(TypeError, match="ResolvedRateLaw: path: expected a function"):
        sdjax.ResolvedRateLaw(arm, np.zeros(3), position_gain=1.0, rate_gain=1.0)
    with pytest.raises(ValueError, match=r"position_gain: expected a scalar or shape \(3,\)"):
        sdjax.ResolvedRateLaw(arm, sdjax.LinePath(x, x, 1.0), position_gain=np.ones(6), rate_gain=1.0)
    with pytest.raises(TypeError, match="RateServo: rate_command: expected a function"):
        sdjax.RateServo(arm, np.zeros(7), 1.0)
    with pytest.raises(ValueError, match=r"qd_desired: expected shape \(7,\)"):
        sdjax.reaction_null_space_rates(arm, arm_state, np.zeros(6))


def test_quintic_reference_computes_in_floating_point_and_refuses_non_finite_ends():
    """An integer time gives the same point as the float one (not a duration truncated to an
    integer: 2.5 s became 2, 0.5 s became 0 and a NaN); a NaN or inf end is refused."""

    def quintic(x):  # s(x) = 10 x^3 - 15 x^4 + 6 x^5, written out independently
        return 10 * x**3 - 15 * x**4 + 6 * x**5

    reference = sdjax.QuinticJointReference(np.zeros(7), np.ones(7), 2.5)
    for t in (1, np.int32(1), jnp.asarray(1)):
        q, qd, _ = reference(t)
        assert q.dtype == jnp.float64
        np.testing.assert_allclose(q, np.full(7, quintic(1 / 2.5)), rtol=1e-14)
        np.testing.assert_allclose(qd, np.full(7, 30 * 0.4**2 * 0.6**2 / 2.5), rtol=1e-14)
    np.testing.assert_allclose(reference(1)[0], reference(1.0)[0], rtol=0)
    short = sdjax.QuinticJointReference(np.zeros(7), np.ones(7), 0.5)
    np.testing.assert_array_equal(short(0)[0], np.zeros(7))  # was NaN (0 / int(0.5))
    np.testing.assert_array_equal(short(1)[0], np.ones(7))
    np.testing.assert_allclose(sdjax.QuinticJointReference(np.zeros(2), np.ones(2), 2, start_time=1)(2)[0], 0.5)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^QuinticJointReference: goal: must be finite, got \["):
            sdjax.QuinticJointReference(np.zeros(7), np.full(7, bad), 2.0)
        with pytest.raises(ValueError, match=r"^QuinticJointReference: start: must be finite"):
            sdjax.QuinticJointReference(np.full(7, bad), np.zeros(7), 2.0)
        with pytest.raises(ValueError, match=r"^QuinticJointReference: start_time: must be finite"):
            sdjax.QuinticJointReference(np.zeros(7), np.ones(7), 2.0, start_time=bad)
    with pytest.raises(TypeError, match=r"^QuinticJointReference: goal: expected numbers, got str"):
        sdjax.QuinticJointReference(np.zeros(2), "up", 2.0)
    with pytest.raises(ValueError, match=r"start and goal expected two \(n,\) vectors"):
        sdjax.QuinticJointReference(np.zeros(2), np.ones(3), 2.0)
    # Under jit the ends are traced: built and evaluated, values not checked.
    moved = jax.jit(lambda goal: sdjax.QuinticJointReference(jnp.zeros(2), goal, 2.0)(1)[0])(jnp.ones(2))
    np.testing.assert_allclose(moved, np.full(2, quintic(0.5)), rtol=1e-14)
