"""Integrators as objects (:class:`sdjax.Integrator`), Kutta/Simpson, adaptive integration,
and the implicit treatment of environment loads.

References: the names map to the same schemes (bitwise); Simpson's third order from error
ratios against a converged reference; the adaptive integrator against fine RK4; the
generalized force of end-point loads against the principle of virtual power with velocities
from differentiated kinematics; the load derivatives against central differences; an
environment spring-damper against the same passive joint (closed form of the implicit step);
a rover sliding on a slope against ``g (sin - mu cos)``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
import sdjax.contact as sc
from sdjax.integrate import _displaced
from sdjax.models import point_mass_probe, random_model, rover
from helpers import assert_close, random_state


def _state_vector(states: sdjax.State) -> jax.Array:
    return jnp.concatenate(
        [x.reshape(x.shape[0], -1) if x.ndim > 1 else x[:, None] for x in jax.tree.leaves(states)], axis=-1
    )


def test_names_and_objects_are_the_same_schemes():
    """Every name of INTEGRATORS runs the scheme of its object (identical numbers); options
    reach the scheme; a user-written Integrator subclass plugs into rollout; bad names and
    options are refused with the option named."""
    model = random_model(3, 4, gravity=True, passive=True)
    state = random_state(model, 1, scale=0.5)
    tau = jnp.asarray(np.random.default_rng(0).normal(size=(5, model.num_joints)))
    for name, scheme in sdjax.INTEGRATORS.items():
        by_name = sdjax.rollout(model, state, 0.01, 5, tau, integrator=name)
        by_object = sdjax.rollout(model, state, 0.01, 5, tau, integrator=scheme)
        for a, b in zip(jax.tree.leaves(by_name), jax.tree.leaves(by_object)):
            np.testing.assert_array_equal(a, b, err_msg=name)  # the same computation
    symplectic = sdjax.rollout(model, state, 0.01, 5, tau, integrator=sdjax.Euler(semi_implicit=True))
    one = sdjax.euler_step(model, state, 0.01, sdjax.make_controls(model, tau[0]), semi_implicit=True)
    assert_close(symplectic.states.q[1], one.q, 1e-15, "Euler(semi_implicit=True) is euler_step(semi_implicit=True)")

    class Heun(sdjax.Integrator):
        order = 2

        def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
            rate = lambda s: sdjax.state_derivative(model, s, controls)  # noqa: E731
            k1 = rate(state)
            k2 = rate(jax.tree.map(lambda x, d: x + dt * d, state, k1))
            return jax.tree.map(lambda x, a, b: x + 0.5 * dt * (a + b), state, k1, k2)

    heun = sdjax.rollout(model, state, 1e-3, 20, integrator=Heun())
    fine = sdjax.rollout(model, state, 1e-4, 200)
    assert_close(heun.states.q[-1], fine.states.q[-1], 1e-5, "user integrator")  # (second order at 1 ms over 20 ms)
    with pytest.raises(ValueError, match="unknown integrator 'rk5'"):
        sdjax.rollout(model, state, 0.01, 2, integrator="rk5")
    with pytest.raises(ValueError, match="Newmark: need 0 <= beta"):
        sdjax.Newmark(beta=0.7)
    with pytest.raises(ValueError, match="Adaptive: rtol and atol"):
        sdjax.Adaptive(rtol=0.0)
    with pytest.raises(ValueError, match="Adaptive: solver"):
        sdjax.Adaptive(solver="euler")


def test_runge_kutta4_step_on_a_linear_system_and_its_first_stage_aux():
    """One RK4 step of y' = A y is the degree-4 Taylor polynomial of exp(A dt) applied to y
    (closed form); with ``has_aux`` the same step comes back with the first stage's aux, the
    rate's extra output at (t, y) itself."""
    from sdjax.integrate import runge_kutta4

    a = jnp.asarray([[0.0, 1.0], [-4.0, -0.3]])
    y, dt = jnp.asarray([0.7, -0.2]), 0.1
    taylor = sum(np.linalg.matrix_power(np.asarray(a) * dt, k) / np.prod(np.arange(1, k + 1)) for k in range(5))
    step = runge_kutta4(lambda x, _: a @ x, y, dt)
    np.testing.assert_allclose(step, taylor @ np.asarray(y), rtol=0, atol=1e-15)  # round-off of O(1) values
    with_aux, aux = runge_kutta4(lambda x, offset: (a @ x, (x, offset)), y, dt, has_aux=True)
    np.testing.assert_allclose(with_aux, step, rtol=0, atol=1e-15)  # the same arithmetic (fusion may differ)
    np.testing.assert_array_equal(aux[0], y)  # the first stage is at y itself, offset 0
    assert float(aux[1]) == 0.0


def test_simpson_is_third_order():
    """Kutta's method with Simpson's weights: halving the step divides the error by ~8 on a
    free-floating branched tree with gravity and passive joints."""
    model = random_model(5, 6, gravity=True, passive=True)
    state = random_state(model, 2, scale=0.5)
    duration = 0.4
    reference = _state_vector(sdjax.rollout(model, state, 1e-4, 4000).states)[-1]
    errors = []
    for dt in (0.04, 0.02, 0.01):
        states = sdjax.rollout(model, state, dt, int(round(duration / dt)), integrator="simpson").states
        errors.append(float(jnp.max(jnp.abs(_state_vector(states)[-1] - reference))))
    ratios = [errors[0] / errors[1], errors[1] / errors[2]]
    # Third order: 2^3 = 8, approached as dt -> 0 (observed ratios listed in the message).
    assert all(6.0 < r < 10.0 for r in ratios), (errors, ratios)


def test_adaptive_integration_over_long_output_steps():
    """The adaptive integrator, given output steps of 0.25 s, matches RK4 at 1 ms to its
    tolerance and its gradient matches RK4's."""
    pytest.importorskip("diffrax")
    model = random_model(7, 5, gravity=True)
    state = random_state(model, 3, scale=0.5)
    fine = _state_vector(sdjax.rollout(model, state, 1e-3, 1000).states)[-1]
    coarse = sdjax.rollout(model, state, 0.25, 4, integrator=sdjax.Adaptive(rtol=1e-10, atol=1e-12))
    # RK4 at 1 ms has a global error ~1e-11 on this 1 s coast; the adaptive local tolerance 1e-10.
    assert_close(_state_vector(coarse.states)[-1], fine, 1e-8, "adaptive vs RK4")

    def loss(qd, integrator, dt, steps):
        s = eqx.tree_at(lambda s: s.qd, state, qd)
        return jnp.sum(jnp.sin(sdjax.rollout(model, s, dt, steps, integrator=integrator).states.q[-1]))

    ours = jax.grad(loss)(state.qd, sdjax.Adaptive(rtol=1e-10, atol=1e-12), 0.25, 4)
    expected = jax.grad(loss)(state.qd, "rk4", 1e-3, 1000)
    assert_close(ours, expected, 1e-6, "adaptive gradient")  # (two discretisations of one flow, each ~1e-9)
    with pytest.raises(Exception, match="max_steps|maximum number of solver steps"):
        jax.block_until_ready(
            sdjax.rollout(model, state, 1.0, 1, integrator=sdjax.Adaptive(rtol=1e-12, atol=1e-14, max_steps=4)).states.q
        )


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_generalized_loads_by_virtual_power(base):
    """Q . v equals the power of the base and end-point loads and the joint torques, with the
    end points' velocities from differentiating their positions along the motion (not from
    the Jacobian code), in each base mode."""
    model = sdjax.edit_model(random_model(13, 7, gravity=True), base=base)
    state = random_state(model, 4)
    rng = np.random.default_rng(5)
    n, ne = model.num_joints, model.num_end_points
    controls = sdjax.make_controls(
        model,
        rng.normal(size=n),
        rng.normal(size=3),
        rng.normal(size=3),
        rng.normal(size=(ne, 3)),
        rng.normal(size=(ne, 3)),
    )
    loads = sdjax.generalized_loads(model, state, controls)
    velocity = rng.normal(size=model.num_velocities)
    moving = _displaced(model, state, jnp.zeros(model.num_velocities), velocity)

    def end_points(t):
        return sdjax.forward_kinematics(model, _displaced(model, state, t * velocity, velocity)).end_point_position

    _, end_point_velocity = jax.jvp(end_points, (0.0,), (1.0,))
    _, angular = sdjax.link_velocities(model, moving)
    end_point_angular = angular[np.asarray(model.end_point_link)]
    power = (
        jnp.sum(controls.end_point_force * end_point_velocity)
        + jnp.sum(controls.end_point_torque * end_point_angular)
        + controls.base_force @ moving.base_linear_velocity
        + controls.base_torque @ moving.base_angular_velocity
        + controls.tau @ moving.qd
    )
    generalized = sdjax.model.free_coordinates(model, loads) @ velocity
    assert abs(float(generalized - power)) < 1e-12 * float(
        jnp.sum(jnp.abs(loads)) * np.abs(velocity).sum()
    )  # round-off


def _rover_on_slope(friction, slip_velocity=1e-4, gap=1e-3):
    rov = rover()
    feet = sc.ContactSpheres.at_end_points(rov, 0.03)
    angle = 0.3
    slope = sc.inclined_plane(angle)
    rotation = np.asarray(sdjax.rpy_to_matrix(jnp.array([0.0, angle, 0.0])))
    state = sdjax.make_state(
        rov, base_position=(0.1 + 0.35 + 0.03 + gap) * np.asarray(slope.normal), base_rotation=rotation
    )
    params = sc.ContactParameters(2.0e4, 300.0, friction=friction, slip_velocity=slip_velocity, smoothing=1e-5)
    return rov, state, sc.contact_environment(rov, feet, slope, params), angle


def test_environment_derivatives_match_finite_differences():
    """dQ/dx and dQ/dv of contact loads (rover feet on a slope, in contact and sliding) equal
    central differences of Q along each generalized coordinate."""
    rov, state, env, _ = _rover_on_slope(0.3, slip_velocity=0.05, gap=-2e-3)  # feet 2 mm into the slope
    state = eqx.tree_at(
        lambda s: (s.base_linear_velocity, s.base_angular_velocity, s.qd),
        state,
        (jnp.asarray([0.02, 0.01, -0.01]), jnp.asarray([0.01, -0.02, 0.01]), jnp.asarray([0.1, -0.2, 0.05, 0.0])),
    )
    value, by_position, by_velocity = sdjax.environment_load_derivatives(rov, state, env, 0.0)
    assert float(jnp.abs(value).max()) > 10.0  # the feet carry the rover
    velocity = sdjax.generalized_velocity(rov, state)
    nv = rov.num_velocities

    def force(increment, v):
        moved = _displaced(rov, state, increment, v)
        return sdjax.model.free_coordinates(rov, sdjax.generalized_loads(rov, moved, env(0.0, moved)))

    h = 1e-6
    numeric_x = jnp.stack([(force(h * e, velocity) - force(-h * e, velocity)) / (2 * h) for e in jnp.eye(nv)], axis=1)
    numeric_v = jnp.stack(
        [
            (force(jnp.zeros(nv), velocity + h * e) - force(jnp.zeros(nv), velocity - h * e)) / (2 * h)
            for e in jnp.eye(nv)
        ],
        axis=1,
    )
    # Central differences: truncation ~h^2 |Q'''| and round-off ~1e-16 |Q| / h, here < 1e-6 of the largest entry.
    assert_close(by_position, numeric_x, 1e-6, "dQ/dx")
    assert_close(by_velocity, numeric_v, 1e-6, "dQ/dv")


def test_environment_spring_equals_implicit_passive_joint():
    """A joint spring-damper given as environment loads and linearised by the implicit step
    gives the step of the same spring-damper as the model's passive joint terms (which that
    step treats implicitly in closed form); explicit loads at a step beyond the explicit limit
    do not."""
    base = random_model(17, 4, gravity=True)
    stiffness, damping = jnp.asarray([4e6, 2e6, 8e6, 1e6]), jnp.asarray([5e3, 8e3, 2e3, 6e3])
    passive = sdjax.edit_model(base, joint_stiffness=stiffness, joint_damping=damping)
    state = random_state(base, 6, scale=0.3)

    def spring(t, s):
        return sdjax.make_controls(base, tau=-stiffness * s.q - damping * s.qd)

    dt, steps = 0.01, 30
    ours = sdjax.rollout(base, state, dt, steps, environment=spring, integrator="implicit")
    expected = sdjax.rollout(passive, state, dt, steps, integrator="implicit")
    assert_close(
        _state_vector(ours.states), _state_vector(expected.states), 1e-10, "implicit environment spring"
    )  # round-off of LU vs Cholesky
    explicit = sdjax.rollout(
        base, state, dt, steps, environment=spring, integrator=sdjax.ImplicitEuler(linearize_environment=False)
    )
    # Explicit: omega dt >> 2 for these stiffnesses (max_stable_step far below dt): it diverges.
    assert sdjax.max_stable_step(passive, state) < 0.2 * dt
    assert not bool(jnp.all(jnp.abs(_state_vector(explicit.states)) < 1e3))


def test_implicit_contact_rests_on_stiff_ground_at_large_steps():
    """A 2 kg body on stiff, heavily damped ground (k = 1e6 N/m, c = 2e4 N s/m: decay rate
    c/m = 1e4 /s, explicit limits ~0.2-0.3 ms) simulated at dt = 5 ms: the implicit step comes
    to rest at the static penetration m g / k; RK4 and the step with explicit loads do not."""
    mass, g, k, c = 2.0, 9.81, 1.0e6, 2.0e4
    body = point_mass_probe(mass=mass, inertia=0.01, gravity=g)
    env = sc.contact_environment(
        body, sc.ContactSpheres([0], [[0.0, 0.0, 0.0]]), sc.Plane(), sc.ContactParameters(k, c, smoothing=1e-7)
    )
    state = sdjax.make_state(body, base_position=[0.0, 0.0, 1e-3], base_linear_velocity=[0.0, 0.0, -0.2])
    dt, steps = 5e-3, 200

    def final(integrator):
        end = sdjax.rollout(body, state, dt, steps, environment=env, integrator=integrator).states
        return float(end.base_position[-1, 2]), float(end.base_linear_velocity[-1, 2])

    height, speed = final("implicit")
    # At rest: the spring carries the weight (the smoothing length 1e-7 m shifts it by < 1 %).
    assert abs(height + mass * g / k) < 0.01 * mass * g / k and abs(speed) < 1e-9, (height, speed)
    for explicit in ("rk4", sdjax.ImplicitEuler(linearize_environment=False)):
        h, v = final(explicit)
        assert not (abs(h + mass * g / k) < 0.1 * mass * g / k and abs(v) < 1e-6), (explicit, h, v)


def test_implicit_contact_at_large_steps_slides_at_the_closed_form_rate():
    """Rover on a 0.3 rad slope with mu = 0.2 slides with acceleration g (sin - mu cos): the
    implicit integrator reproduces it at dt = 2 ms (20x the step the rover notebook takes with
    RK4)."""
    friction, g = 0.2, 3.711
    rov, state, env, angle = _rover_on_slope(friction)
    downhill = jnp.array([np.cos(angle), 0.0, -np.sin(angle)])
    dt, duration = 2e-3, 1.5

    def com_speed(integrator):
        states = sdjax.rollout(rov, state, dt, int(round(duration / dt)), environment=env, integrator=integrator).states
        return np.asarray(jax.vmap(lambda s: sdjax.center_of_mass_velocity(rov, s))(states) @ downhill)

    t = dt * np.arange(int(round(duration / dt)) + 1)
    late = t > 0.5 * duration
    expected = g * (np.sin(angle) - friction * np.cos(angle))
    speed = com_speed("implicit")
    acceleration = np.polyfit(t[late], speed[late], 1)[0]
    # Sliding is steady by then; the regularised friction (slip 0.1 mm/s) and the legs' compliance
    # keep the fitted acceleration within 1 % of the rigid-body closed form (0.3876 m/s^2).
    assert abs(acceleration - expected) < 0.01 * expected, (acceleration, expected)


def test_integrator_options_refuse_values_of_the_wrong_type(sample_model):
    """semi_implicit="no" was taken as True; beta="x" failed in a raw comparison. NumPy scalars
    (arguments of the jitted step: traced there) still pass."""
    state = sdjax.make_state(sample_model, q=np.full(6, 0.2), qd=np.full(6, 0.1))
    plain = sdjax.newmark_step(sample_model, state, 0.01, beta=0.25, gamma=0.5)
    numpy = sdjax.newmark_step(sample_model, state, 0.01, beta=np.float64(0.25), gamma=np.float64(0.5))
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(numpy)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-15)  # (the same arithmetic)
    with pytest.raises(TypeError, match=r"^Euler: semi_implicit: expected a bool, got str$"):
        sdjax.Euler(semi_implicit="no")
    with pytest.raises(TypeError, match=r"^ImplicitEuler: linearize_environment: expected a bool, got int$"):
        sdjax.ImplicitEuler(linearize_environment=1)
    with pytest.raises(TypeError, match=r"^Newmark: beta: expected a number, got str 'x'$"):
        sdjax.Newmark(beta="x")
    with pytest.raises(TypeError, match=r"^Newmark: gamma: expected a number, got NoneType"):
        sdjax.Newmark(gamma=None)
    with pytest.raises(ValueError, match=r"^Newmark: need 0 <= beta <= 1/2 and 0 <= gamma <= 1, got beta=0.7"):
        sdjax.Newmark(beta=0.7)
    with pytest.raises(TypeError, match=r"^Adaptive: rtol: expected a number, got str"):
        sdjax.Adaptive(rtol="1e-6")
    assert sdjax.Euler(semi_implicit=True).semi_implicit
    state = sdjax.make_state(sample_model, qd=np.full(6, 0.1))
    with pytest.raises(TypeError, match=r"^euler_step: semi_implicit: expected a bool, got str"):
        sdjax.euler_step(sample_model, state, 0.01, semi_implicit="no")
    with pytest.raises(TypeError, match=r"^implicit_euler_step: linearize_environment: expected a bool, got str"):
        sdjax.implicit_euler_step(sample_model, state, 0.01, linearize_environment="yes")
    with pytest.raises(TypeError, match=r"^newmark_step: beta: expected a number, got str"):
        sdjax.newmark_step(sample_model, state, 0.01, beta="x")
    with pytest.raises(ValueError, match=r"^newmark_step: need 0 <= beta <= 1/2"):
        sdjax.newmark_step(sample_model, state, 0.01, beta=-1.0)
