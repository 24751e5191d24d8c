"""Integration: conservation laws, energy balance, convergence orders, the Rodrigues step,
rollout forms, checkpointing, checks."""

import math
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import random_model
from helpers import assert_close, random_state


def final(traj):
    return jax.tree.map(lambda x: x[-1], traj.states)


@pytest.fixture(scope="module")
def free_tree():
    """A branched tree with prismatic joints and passive joints, no gravity (free flight)."""
    return random_model(31, 8, passive=True)


def test_momentum_conserved_in_free_flight(free_tree):
    model = free_tree
    state = random_state(model, 0, scale=0.5)
    traj = sdjax.rollout(model, state, 0.002, 500)  # 1 s of RK4, internal passive forces only
    end = final(traj)
    p0, p1 = sdjax.linear_momentum(model, state), sdjax.linear_momentum(model, end)
    l0, l1 = sdjax.angular_momentum(model, state), sdjax.angular_momentum(model, end)
    # Issue requirement: relative drift < 1e-9 with RK4 at a sensible step.
    assert float(jnp.linalg.norm(p1 - p0) / jnp.linalg.norm(p0)) < 1e-9
    assert float(jnp.linalg.norm(l1 - l0) / jnp.linalg.norm(l0)) < 1e-9
    # The centre of mass moves uniformly.
    com_expected = sdjax.center_of_mass(model, state) + 1.0 * p0 / model.total_mass
    assert_close(sdjax.center_of_mass(model, end), com_expected, 1e-9, "CoM drift")


def test_energy_conserved_without_dissipation():
    model = random_model(32, 6)
    state = random_state(model, 1, scale=0.5)
    traj = sdjax.rollout(model, state, 0.002, 500)
    e0, e1 = sdjax.kinetic_energy(model, state), sdjax.kinetic_energy(model, final(traj))
    # RK4 energy error ~ C dt^4 over 1 s: measured ~1e-12 relative here.
    assert abs(float(e1 - e0)) < 1e-9 * float(e0)


def test_energy_balance_equals_work_of_torques():
    """With tau and F0 held over each step, the work per step is exactly tau.dq + F0.dr0; the
    change of T + V (gravity) matches it to integration error."""
    model = random_model(33, 5, gravity=True)
    state = random_state(model, 2, scale=0.3)
    rng = np.random.default_rng(2)
    steps = 200
    controls = sdjax.Controls(
        tau=jnp.asarray(rng.normal(size=(steps, model.num_joints))),
        base_force=jnp.asarray(rng.normal(size=(steps, 3))),
        base_torque=jnp.zeros((steps, 3)),
        end_point_force=jnp.zeros((steps, model.num_end_points, 3)),
        end_point_torque=jnp.zeros((steps, model.num_end_points, 3)),
    )
    traj = sdjax.rollout(model, state, 0.002, steps, controls)
    energy = jax.vmap(lambda s: sdjax.kinetic_energy(model, s) + sdjax.potential_energy(model, s))(traj.states)
    work = jnp.sum(controls.tau * jnp.diff(traj.states.q, axis=0), axis=1) + jnp.sum(
        controls.base_force * jnp.diff(traj.states.base_position, axis=0), axis=1
    )
    # Per-step RK4 error ~ dt^5: ~1e-12 J here, against per-step work ~1e-2 J.
    assert_close(jnp.diff(energy), work, 1e-9, "energy balance")
    assert float(jnp.max(jnp.abs(work))) > 1e-4  # the test exercises real work


def _error(a, b):
    leaves = jax.tree.leaves(jax.tree.map(lambda x, y: jnp.max(jnp.abs(x - y)), a, b))
    return max(float(x) for x in leaves)


@pytest.mark.parametrize(
    "integrator, order, dts", [("rk4", 4, (0.04, 0.02, 0.01)), ("euler", 1, (0.004, 0.002, 0.001))]
)
def test_convergence_order(integrator, order, dts):
    """Global error ratio for halved steps: 2^4 for RK4, 2 for Euler, against a fine RK4
    reference (constant control law, so zero-order hold adds no error)."""
    model = random_model(34, 4)
    state = random_state(model, 3, scale=0.5)
    law = lambda t, s: jnp.ones_like(s.q)  # noqa: E731 - constant law: no sampling error
    ref = final(sdjax.rollout(model, state, dts[-1] / 8, int(round(0.4 / (dts[-1] / 8))), law, integrator="rk4"))
    errors = [
        _error(final(sdjax.rollout(model, state, dt, int(round(0.4 / dt)), law, integrator=integrator)), ref)
        for dt in dts
    ]
    ratios = [errors[k] / errors[k + 1] for k in range(len(errors) - 1)]
    for r in ratios:
        # Asymptotic ratio 2^order; +-30% for the pre-asymptotic regime.
        assert 0.7 * 2**order < r < 1.3 * 2**order, (errors, ratios)


def test_rodrigues_step_is_exact_for_free_rotation():
    """A base alone with isotropic inertia spins at constant w: eq 3.4 reproduces
    A(t) = exp(skew(w t)) A(0) exactly, with either Euler variant."""
    model = sdjax.Model(
        (),
        "",
        base_mass=10.0,
        base_inertia=3.0 * np.eye(3),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        parent_centroid_to_joint=np.zeros((0, 3)),
        centroid_to_joint=np.zeros((0, 3)),
    )
    w = jnp.array([0.3, -1.1, 0.7])
    state = sdjax.make_state(
        model, base_rpy=[0.2, 0.1, -0.4], base_angular_velocity=w, base_linear_velocity=[1.0, 0.0, 0.0]
    )
    for semi_implicit in (False, True):
        s = state
        for _ in range(50):
            s = sdjax.euler_step(model, s, 0.1, semi_implicit=semi_implicit)
        expected = sdjax.rotation.rotation_vector_to_matrix(w * 5.0) @ state.base_rotation
        assert_close(s.base_rotation, expected, 1e-13, "Rodrigues attitude")  # 50 float64 products
        assert_close(s.base_position, jnp.array([5.0, 0.0, 0.0]), 1e-13, "uniform motion")


def test_rollout_control_forms_agree():
    model = random_model(35, 5, gravity=True)
    state = random_state(model, 4, scale=0.3)
    steps = 30
    taus = jnp.asarray(np.random.default_rng(4).normal(size=(steps, model.num_joints)))
    by_sequence = sdjax.rollout(model, state, 0.01, steps, taus)
    by_law = sdjax.rollout(model, state, 0.01, steps, lambda t, s: taus[jnp.round(t / 0.01).astype(jnp.int32)])
    controls = sdjax.Controls(
        tau=taus,
        base_force=jnp.zeros((steps, 3)),
        base_torque=jnp.zeros((steps, 3)),
        end_point_force=jnp.zeros((steps, model.num_end_points, 3)),
        end_point_torque=jnp.zeros((steps, model.num_end_points, 3)),
    )
    by_controls = sdjax.rollout(model, state, 0.01, steps, controls)
    for other in (by_law, by_controls):
        # The same arithmetic in three compiled programs: equal to round-off (bitwise with LLVM's
        # default optimisation; the test suite's opt level 0 can round one operation apart).
        assert _error(other.states, by_sequence.states) < 1e-14  # states of size ~1-10: a few ulp
    assert_close(by_sequence.time, 0.01 * np.arange(steps + 1), 1e-15, "time stamps")
    np.testing.assert_array_equal(by_sequence.controls.tau, taus)
    # Manual stepping gives the same states.
    s = state
    for k in range(steps):
        s = sdjax.rk4_step(model, s, 0.01, sdjax.make_controls(model, tau=taus[k]))
    # the same compiled step in the same order: equal up to round-off of the scan's fusion
    assert _error(s, final(by_sequence)) < 1e-14


def test_rollout_bad_arguments(sample_model):
    state = sdjax.make_state(sample_model)
    with pytest.raises(ValueError, match="unknown integrator 'rk45'"):
        sdjax.rollout(sample_model, state, 0.01, 10, integrator="rk45")
    with pytest.raises(TypeError, match="rollout: num_steps: expected an integer, got float 2.5"):
        sdjax.rollout(sample_model, state, 0.01, 2.5)
    with pytest.raises(ValueError, match="rollout: num_steps: must be an integer >= 0, got -1"):
        sdjax.rollout(sample_model, state, 0.01, -1)
    with pytest.raises(ValueError, match=r"torque sequence expected shape \(10, 6\)"):
        sdjax.rollout(sample_model, state, 0.01, 10, jnp.zeros((10, 5)))
    with pytest.raises(ValueError, match="leading axis of num_steps=10"):
        sdjax.rollout(sample_model, state, 0.01, 10, jnp.zeros((9, 6)))
    with pytest.raises(ValueError, match=r"tau: expected shape \(6,\)"):
        sdjax.rollout(sample_model, state, 0.01, 10, lambda t, s: jnp.zeros(5))
    assert sdjax.rollout(sample_model, state, 0.01, 0).states.q.shape == (1, 6)


def test_checkpointed_rollout_same_values_and_gradients(sample_model):
    state = random_state(sample_model, 5, scale=0.2)

    def loss(masses, checkpoint):
        model = eqx.tree_at(lambda m: m.link_mass, sample_model, masses)
        traj = sdjax.rollout(model, state, 0.01, 40, lambda t, s: -s.qd, checkpoint=checkpoint)
        return jnp.sum(traj.states.base_angular_velocity[-1] ** 2) + jnp.sum(traj.states.q[-1] ** 2)

    masses = sample_model.link_mass
    v0, g0 = jax.value_and_grad(loss)(masses, False)
    v1, g1 = jax.value_and_grad(loss)(masses, True)
    # Same arithmetic, recomputed; XLA may fuse differently (last-digit differences).
    assert_close(v1, v0, 1e-13, "checkpointed value")
    assert_close(g1, g0, 1e-12, "checkpointed gradient")
    assert bool(jnp.all(jnp.isfinite(g0))) and float(jnp.max(jnp.abs(g0))) > 0


@pytest.mark.parametrize("form", ["open-loop rk4", "closed-loop euler"])
def test_second_derivatives_through_a_rollout(form):
    """Hessians of a loss through rollouts equal central differences of its gradient: the
    scan's forward sweep, which a second derivative differentiates again, holds the steps'
    batchable evaluations (both failed before 2026-12-07). Open loop (a scan of routed RK4
    rollouts, the held step) reverse over reverse; closed loop (the forward dynamics in a scan
    of Euler steps) forward over reverse (``jax.hessian``); a branched tree with a prismatic and
    a passive joint."""
    model = random_model(12, 4, chain_probability=0.3, passive=True)
    assert "P" in model.joint_type and len(set(model.parent)) < model.num_joints
    state = random_state(model, 3, scale=0.5)
    n = model.num_joints

    def loss(tau):
        if form == "open-loop rk4":  # (two segments of a multiple-shooting plan: a scan of rollouts)

            def segment(start, scale):
                return final(sdjax.rollout(model, start, 0.05, 2, jnp.broadcast_to(scale * tau, (2, n)))), None

            end = jax.lax.scan(segment, state, jnp.array([1.0, 0.5]))[0]
        else:
            law = lambda t, x: tau - 0.5 * x.qd  # noqa: E731
            end = final(sdjax.rollout(model, state, 0.05, 3, law, integrator="euler"))
        # (scaled so that the Hessian's entries are of order one: 0.15 s of torque moves little)
        return 100 * (jnp.sum(jnp.sin(end.q)) + jnp.sum(end.qd**2) + jnp.sum(end.base_angular_velocity**2))

    tau = jnp.asarray(np.random.default_rng(4).normal(size=n))
    gradient = jax.jit(jax.grad(loss))
    h = 1e-5
    differences = jnp.stack([(gradient(tau + h * e) - gradient(tau - h * e)) / (2 * h) for e in jnp.eye(n)], axis=1)
    assert float(jnp.max(jnp.abs(differences))) > 0.1  # (a real second derivative)
    hessian = jax.jacrev(jax.jacrev(loss)) if form == "open-loop rk4" else jax.hessian(loss)
    # central differences: truncation h^2 = 1e-10 times the third derivative, round-off
    # 1e-16 / h ~ 1e-11 of the gradient's scale
    assert_close(hessian(tau), differences, 1e-7, form)


def test_check_flags_report_non_finite(sample_model):
    bad = eqx.tree_at(lambda s: s.qd, sdjax.make_state(sample_model), jnp.full(6, jnp.nan))
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(sdjax.forward_dynamics(sample_model, bad, check=True))
    with pytest.raises(Exception, match="non-finite"):
        jax.block_until_ready(sdjax.rollout(sample_model, bad, 0.01, 3, check=True).states.q)
    # Without the flag the NaN is returned, not hidden.
    assert bool(jnp.all(jnp.isnan(sdjax.forward_dynamics(sample_model, bad)[1])))


def test_quaternion_stays_normalised(sample_model):
    state = random_state(sample_model, 6, scale=2.0)
    traj = sdjax.rollout(sample_model, state, 0.01, 100, integrator="rk4")
    norms = jnp.linalg.norm(traj.states.base_quaternion, axis=1)
    assert_close(norms, jnp.ones_like(norms), 1e-15, "unit quaternion")  # normalised every step


# ------------------------------------------------------------------------------------------
# Environment loads (evaluated at every stage) and point loads.


def test_point_loads_at_end_points_equal_end_point_loads(free_tree):
    """A load at an end point through point_loads (Jacobian transpose) gives the same motion as
    the same load through the Newton-Euler end-point path."""
    model = free_tree
    state = random_state(model, 3, scale=0.5)
    rng = np.random.default_rng(3)
    force, torque = rng.normal(size=(model.num_end_points, 3)), rng.normal(size=(model.num_end_points, 3))
    position = sdjax.forward_kinematics(model, state).end_point_position
    loads = sdjax.point_loads(model, state, model.end_point_link, position, force, torque)
    via_points = sdjax.generalized_acceleration(model, state, loads)
    via_end_points = sdjax.generalized_acceleration(
        model, state, sdjax.make_controls(model, end_point_force=force, end_point_torque=torque)
    )
    # Two exact routes to the same generalized force; agreement to round-off of H^-1.
    assert_close(via_points, via_end_points, 1e-10, "point loads vs end-point loads")


def test_point_loads_do_the_virtual_power_of_the_load(free_tree):
    """Q . [v0; w0; qd] = sum f . v_p + n . w_body for loads anywhere on the tree."""
    model = free_tree
    state = random_state(model, 4, scale=0.5)
    rng = np.random.default_rng(4)
    bodies = (0, 2, 5, model.num_joints)
    offsets = rng.normal(size=(len(bodies), 3)) * 0.3  # body frame, from each centroid
    force, torque = rng.normal(size=(len(bodies), 3)), rng.normal(size=(len(bodies), 3))
    kin = sdjax.forward_kinematics(model, state)
    index = np.asarray(bodies)
    points = kin.centroid[index] + jnp.einsum("kij,kj->ki", kin.rotation[index], offsets)
    loads = sdjax.point_loads(model, state, bodies, points, force, torque)
    velocity = jnp.concatenate([state.base_linear_velocity, state.base_angular_velocity, state.qd])
    power = loads.base_force @ velocity[:3] + loads.base_torque @ velocity[3:6] + loads.tau @ velocity[6:]
    # Independent point velocities: each point's Jacobian from the public point_jacobian.
    expected = 0.0
    for k, body in enumerate(bodies):
        twist = sdjax.point_jacobian(model, state, body, offsets[k]) @ velocity
        expected = expected + force[k] @ twist[:3] + torque[k] @ twist[3:]
    # Sums of a dozen O(1) products: round-off.
    assert abs(float(power - expected)) < 1e-11 * max(1.0, abs(float(expected)))
    with pytest.raises(ValueError, match=r"point_loads: bodies\[0\]: index 9 out of range; expected 0..8"):
        sdjax.point_loads(model, state, (model.num_joints + 1,), points[:1], force[:1])
    with pytest.raises(ValueError, match="forces"):
        sdjax.point_loads(model, state, bodies, points, force[:2])


def test_environment_loads_are_evaluated_at_every_stage(sample_model):
    """A spring on the centre of mass, F = -k x_com applied at the base centroid, makes the
    centre of mass a harmonic oscillator (momentum theorem: M x_com'' = F). Evaluated at every
    RK4 stage it converges at fourth order; a zero-order-hold control law only at first."""
    model = eqx.tree_at(lambda m: m.gravity, sample_model, jnp.zeros(3))
    mass = float(model.total_mass)
    stiffness = mass * (2 * np.pi / 4.0) ** 2  # 4 s period
    state = sdjax.make_state(model, q=np.full(model.num_joints, 0.2), base_position=[0.3, -0.2, 0.1])
    x0 = np.asarray(sdjax.center_of_mass(model, state))
    omega, duration = np.sqrt(stiffness / mass), 2.0

    def spring(t, s):
        return sdjax.make_controls(model, base_force=-stiffness * sdjax.center_of_mass(model, s))

    errors, held_errors = [], []
    for steps in (20, 40):
        dt = duration / steps
        traj = sdjax.rollout(model, state, dt, steps, environment=spring)
        held = sdjax.rollout(model, state, dt, steps, control=spring)
        exact = x0 * np.cos(omega * duration)
        errors.append(np.linalg.norm(np.asarray(sdjax.center_of_mass(model, final(traj))) - exact))
        held_errors.append(np.linalg.norm(np.asarray(sdjax.center_of_mass(model, final(held))) - exact))
    # Halving dt divides an RK4 error by ~16 (order 4; 10 allows for the pre-asymptotic
    # range) and the zero-order-hold error by ~2 (order 1).
    assert errors[0] / errors[1] > 10.0, errors
    assert 1.5 < held_errors[0] / held_errors[1] < 2.5, held_errors
    assert errors[1] < 1e-3 * held_errors[1]
    # Euler steps see the environment too: order one, but the same oscillator.
    euler = sdjax.rollout(model, state, 0.001, 2000, environment=spring, integrator="euler")
    assert np.linalg.norm(np.asarray(sdjax.center_of_mass(model, final(euler))) - x0 * np.cos(omega * duration)) < 5e-3
    with pytest.raises(TypeError, match="environment"):
        sdjax.rollout(model, state, 0.01, 2, environment=lambda t, s: s.q)


def test_rollout_refuses_a_bad_step(sample_model):
    """dt = nan, inf, 0 or negative is refused (not a silent NaN trajectory): at once for a
    Python number (also where the state's precision turns it into inf or 0), when the compiled
    program runs for an array; a string or None is a TypeError."""
    state = sdjax.make_state(sample_model)
    for dt, message in [(float("nan"), "must be finite"), (float("inf"), "must be finite"), (0.0, "must be positive"),
                        (-0.01, "must be positive")]:  # fmt: skip
        with pytest.raises(ValueError, match=f"rollout: dt: {message}"):
            sdjax.rollout(sample_model, state, dt, 3)
    single = sample_model.astype(jnp.float32)
    state32 = sdjax.make_state(single)
    for dt, becomes in [(1e39, "inf"), (1e-50, "0.0")]:  # (beyond float32's range; below its smallest)
        with pytest.raises(
            ValueError,
            match=re.escape(
                f"rollout: dt: must be positive and finite in the state's precision, got {dt!r}, which is {becomes} in float32"
            ),
        ):
            sdjax.rollout(single, state32, dt, 3)
    for dt in ("0.01", None, True):
        with pytest.raises(TypeError, match="rollout: dt: expected a number"):
            sdjax.rollout(sample_model, state, dt, 3)
    with pytest.raises(ValueError, match="rollout: dt must be a scalar"):
        sdjax.rollout(sample_model, state, jnp.ones(2), 3)
    with pytest.raises(Exception, match="rollout: dt: must be positive and finite"):
        sdjax.rollout(sample_model, state, jnp.asarray(jnp.nan), 3)
    with pytest.raises(ValueError, match=r"rollout: num_steps: 1000000000000 exceeds the longest loop XLA runs"):
        sdjax.rollout(sample_model, state, 0.01, 10**12)
    # A NumPy integer is a step count like a Python int (not traced as an array).
    assert sdjax.rollout(sample_model, state, 0.01, np.int64(3)).states.q.shape == (4, 6)
    good = sdjax.rollout(sample_model, state, jnp.asarray(0.01), 3)  # an array step runs
    assert np.all(np.isfinite(np.asarray(good.states.q)))


@pytest.mark.parametrize("passive", ["damping", "stiffness"])
def test_max_stable_step_separates_bounded_from_diverging_rollouts(passive):
    """Below the reported step a rollout of a model with a stiff passive joint stays bounded,
    just above it the fastest mode grows at once (RK4's stability function on the real axis
    for damping, on the imaginary axis for stiffness); Euler is never stable on an undamped
    spring."""
    model = random_model(3, 3, gravity=False)
    stiff = jnp.asarray([0.0, 0.0, 40.0], model.dtype)
    zero = jnp.zeros(3, model.dtype)
    model = eqx.tree_at(
        lambda m: (m.joint_damping, m.joint_stiffness), model, (stiff, zero) if passive == "damping" else (zero, stiff)
    )
    state = sdjax.make_state(model, q=[0.05, -0.03, 0.02], qd=[0.1, -0.1, 0.2])  # small motion about the linearisation
    step = sdjax.max_stable_step(model, state)
    assert 0 < step < 1.0
    speed = lambda dt: float(np.max(np.abs(np.asarray(sdjax.rollout(model, state, dt, 400).states.qd[-1]))))  # noqa: E731
    start = float(np.max(np.abs(np.asarray(state.qd))))
    assert speed(0.9 * step) < 10 * start  # bounded (decays, or oscillates for the stiffness)
    assert not speed(1.1 * step) < 1e6 * start  # |R| >= 1.4 per step over 400 steps (or non-finite)
    if passive == "damping":  # real rates: Euler's limit 2 / lambda against RK4's 2.785 / lambda
        assert sdjax.max_stable_step(model, state, integrator="euler") == pytest.approx(2 / 2.785 * step, rel=1e-3)
    else:
        assert sdjax.max_stable_step(model, state, integrator="euler") == 0.0
    unforced = eqx.tree_at(lambda m: (m.joint_damping, m.joint_stiffness), model, (zero, zero))
    assert sdjax.max_stable_step(unforced) == math.inf


def _slider(mass: float, stiffness: float, damping: float, base: str = "fixed") -> sdjax.Model:
    """One prismatic joint carrying a point-like mass: ``m x'' + d x' + k x = 0``."""
    return sdjax.Model(
        parent=(0,),
        joint_type="P",
        base_mass=1000.0,
        base_inertia=np.eye(3) * 100.0,
        link_mass=[mass],
        link_inertia=np.eye(3)[None] * 1e-3,
        parent_centroid_to_joint=[[0.0, 0.0, 0.0]],
        centroid_to_joint=[[0.0, 0.0, 0.0]],
        joint_stiffness=[stiffness],
        joint_damping=[damping],
        base=base,
    )


def test_implicit_euler_converges_to_the_damped_oscillator():
    """Against the exact solution of m x'' + d x' + k x = 0 (matrix exponential): first order
    (halving the step halves the error), and stable at steps where RK4 diverges."""
    from scipy.linalg import expm

    m, k, d = 2.0, 50.0, 3.0
    model = _slider(m, k, d)
    state = sdjax.make_state(model, q=[0.1], qd=[0.0])
    exact = expm(np.array([[0.0, 1.0], [-k / m, -d / m]]) * 1.0) @ np.array([0.1, 0.0])
    errors = []
    for dt in (2e-3, 1e-3, 5e-4):
        end = sdjax.rollout(model, state, dt, int(round(1.0 / dt)), integrator="implicit").states
        errors.append(abs(float(end.q[-1, 0]) - exact[0]) + abs(float(end.qd[-1, 0]) - exact[1]))
    # First order: ratios -> 2 (measured 1.99, 2.0); the error is O(dt) of the O(0.1) motion.
    assert 1.8 < errors[0] / errors[1] < 2.2 and 1.8 < errors[1] / errors[2] < 2.2, errors
    assert errors[0] < 1e-2
    assert sdjax.max_stable_step(model, integrator="implicit") == math.inf


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_implicit_euler_is_stable_where_rk4_is_not(base):
    """Damping far too stiff for the link it moves (200 N s/m on 5 g) with a 1 ms step: RK4 is
    far above its stable step and blows up; the implicit step damps the joint out and keeps the
    rest of the motion (free-floating momentum stays bounded and the base keeps moving)."""
    model = random_model(3, 4, gravity=False)
    model = sdjax.edit_model(
        model, base=base, link_mass=model.link_mass.at[-1].set(0.005), link_inertia=model.link_inertia.at[-1].multiply(1e-4),
        joint_damping=jnp.asarray([0.0, 0.0, 0.0, 200.0]), joint_stiffness=jnp.asarray([0.0, 0.0, 20.0, 0.0]),
    )  # fmt: skip
    state = random_state(model, 4, scale=0.3)
    dt = 1e-3
    assert sdjax.max_stable_step(model, state) < 0.1 * dt
    rk4 = sdjax.rollout(model, state, dt, 300).states.qd[-1]
    assert not np.all(np.abs(np.asarray(rk4)) < 1e3), "RK4 should diverge at this step"
    implicit = sdjax.rollout(model, state, dt, 300, integrator="implicit").states
    assert np.all(np.isfinite(np.asarray(implicit.qd)))
    # The damped slider creeps at the quasi-static rate F / d of the inertial loads the other
    # links put on it (measured 1.1-1.3e-3 m/s; it started at 0.26 m/s).
    assert abs(float(implicit.qd[-1, -1])) < 1e-2, "the damped joint settles"

    # Physical damping and the scheme's own dissipation: the energy (kinetic + springs) does not
    # grow (RK4 at this step multiplies it by orders of magnitude).
    def energy(s):
        return float(sdjax.kinetic_energy(model, s)) + 0.5 * float(jnp.sum(model.joint_stiffness * s.q**2))

    assert energy(jax.tree.map(lambda x: x[-1], implicit)) <= energy(state)
    # A short step matches RK4 to first order where both are stable.
    stable = sdjax.max_stable_step(model, state)
    a = sdjax.rollout(model, state, 0.5 * stable, 200).states.q[-1]
    b = sdjax.rollout(model, state, 0.5 * stable, 200, integrator="implicit").states.q[-1]
    # Over 100 * stable of time: Euler's O(dt) error on motions of O(1) rad/s.
    assert_close(b, a, 50 * stable, "implicit vs RK4 at a stable step")


def test_newmark_average_acceleration_on_the_oscillator():
    """On m x'' + k x = 0 the average-acceleration rule is the trapezoidal rule: the discrete
    motion is exactly x_n = A cos(n theta), theta = 2 arctan(w dt / 2) (no amplitude error, a
    closed-form phase lag), and the energy is conserved, at a step RK4 would also manage but
    with its own amplitude decay."""
    m, k = 2.0, 50.0
    model = _slider(m, k, 0.0)
    amplitude, dt, steps = 0.1, 0.05, 200
    state = sdjax.make_state(model, q=[amplitude], qd=[0.0])
    end = sdjax.rollout(model, state, dt, steps, integrator="newmark").states
    theta = 2.0 * np.arctan(np.sqrt(k / m) * dt / 2.0)
    expected = amplitude * np.cos(theta * np.arange(steps + 1))
    # A linear problem: Newton converges in one iteration; round-off of 200 steps.
    assert_close(end.q[:, 0], expected, 1e-12, "trapezoidal-rule solution")
    energy = 0.5 * m * np.asarray(end.qd[:, 0]) ** 2 + 0.5 * k * np.asarray(end.q[:, 0]) ** 2
    assert np.max(np.abs(energy - energy[0])) < 1e-12 * energy[0]
    assert sdjax.max_stable_step(model, integrator="newmark") == math.inf


def test_newmark_is_second_order_on_a_free_floating_tree():
    """Against an RK4 reference at a 16x smaller step: halving the step divides the error by
    about four (second order), base attitude included."""
    model = random_model(5, 3, gravity=False)
    state = random_state(model, 6, scale=0.5)
    duration = 0.4
    reference = jax.tree.map(lambda x: x[-1], sdjax.rollout(model, state, duration / 320, 320).states)

    def error(steps):
        end = jax.tree.map(
            lambda x: x[-1], sdjax.rollout(model, state, duration / steps, steps, integrator="newmark").states
        )
        return float(np.max(np.abs(np.asarray(end.q - reference.q)))) + float(
            np.max(np.abs(np.asarray(end.base_quaternion - reference.base_quaternion)))
        )

    errors = [error(10), error(20), error(40)]
    # Second order: ratios near 4 (measured 3.9-4.0).
    assert 3.3 < errors[0] / errors[1] < 4.7 and 3.3 < errors[1] / errors[2] < 4.7, errors


_STEPS = ["rk4_step", "euler_step", "implicit_euler_step", "newmark_step", "simpson_step", "adaptive_step"]


@pytest.mark.parametrize("name", _STEPS)
def test_single_steps_refuse_a_bad_step_as_rollout_does(sample_model, name):
    """dt = nan gave a NaN state, an array of steps a raw broadcasting error: the check of
    rollout's dt (check_step), naming the step function."""
    step = getattr(sdjax, name)
    state = sdjax.make_state(sample_model, q=np.full(6, 0.2), qd=np.full(6, 0.1))
    for dt, message in [(np.nan, "must be finite"), (np.inf, "must be finite"), (0.0, "must be positive"),
                        (-0.01, "must be positive")]:  # fmt: skip
        with pytest.raises(ValueError, match=f"^{name}: dt: {message}"):
            step(sample_model, state, dt)
    for dt in ("0.01", None, True):
        with pytest.raises(TypeError, match=f"^{name}: dt: expected a number"):
            step(sample_model, state, dt)
    with pytest.raises(ValueError, match=rf"^{name}: dt must be a scalar, got shape \(2,\)"):
        step(sample_model, state, np.zeros(2))
    # (a traced step, an argument of the jitted step: its shape only; a rollout checks its traced
    # step when it runs, once, not in every step of its loop)
    # A good step, a Python number or an array, gives the same state.
    assert _error(step(sample_model, state, 0.01), step(sample_model, state, jnp.asarray(0.01))) < 1e-14


def test_rollout_refuses_a_bad_start_time_control_or_flag(sample_model):
    state = sdjax.make_state(sample_model, q=np.full(6, 0.2))
    for t0 in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^rollout: t0: must be finite"):
            sdjax.rollout(sample_model, state, 0.01, 3, t0=t0)
    for t0 in ("a", None, True):
        with pytest.raises(TypeError, match=r"^rollout: t0: expected a number"):
            sdjax.rollout(sample_model, state, 0.01, 3, t0=t0)
    with pytest.raises(ValueError, match=r"^rollout: t0: expected a scalar, got shape \(2,\)"):
        sdjax.rollout(sample_model, state, 0.01, 3, t0=np.zeros(2))
    np.testing.assert_allclose(
        sdjax.rollout(sample_model, state, 0.01, 3, t0=np.float64(1.0)).time, 1 + 0.01 * np.arange(4)
    )
    for control, shown in [("pd", "str 'pd'"), (object(), "object")]:
        with pytest.raises(TypeError, match=rf"^rollout: control: expected None, a function .*, got {shown}"):
            sdjax.rollout(sample_model, state, 0.01, 3, control)
    with pytest.raises(TypeError, match=r"^rollout: control: the control law returned None"):
        sdjax.rollout(sample_model, state, 0.01, 3, lambda t, s: None)
    for integrator in (5, ["rk4"], sdjax.RK4):
        with pytest.raises(TypeError, match=r"^rollout: expected an sdjax.Integrator or one of \["):
            sdjax.rollout(sample_model, state, 0.01, 3, integrator=integrator)
    with pytest.raises(ValueError, match=r"^rollout: unknown integrator 'rk5'"):
        sdjax.rollout(sample_model, state, 0.01, 3, integrator="rk5")
    for flag in ("checkpoint", "check"):
        with pytest.raises(TypeError, match=rf"^rollout: {flag}: expected a bool, got str"):
            sdjax.rollout(sample_model, state, 0.01, 3, **{flag: "no"})
