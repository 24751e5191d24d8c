"""Penalty contact (sdjax.contact): closed forms, conservation, gradients, terrain, errors.

Expected values come from closed forms written out here (restitution of the clipped linear
spring-damper, sliding on an incline, RK4's stability region, planes sampled on a grid) or
from physics identities (energy, impulse-momentum), never from the code under test.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import contact as sc
from sdjax.models.lander import lander, point_mass_probe
from sdjax.models.rover import rover

MASS = 2.0
STIFFNESS = 1.0e4
OMEGA = np.sqrt(STIFFNESS / MASS)  # rad/s, natural frequency of one point contact
SPEED = 0.5  # m/s, impact speed


@pytest.fixture(scope="module")
def probe():
    return point_mass_probe(mass=MASS, inertia=0.01, gravity=0.0)


@pytest.fixture(scope="module")
def point():
    return sc.ContactSpheres([0], [[0.0, 0.0, 0.0]])


def _drop(model, spheres, terrain, parameters, state, dt, num_steps):
    env = sc.contact_environment(model, spheres, terrain, parameters)
    return sdjax.rollout(model, state, jnp.asarray(dt), num_steps, environment=env)


def _energy(model, states):
    return jax.vmap(lambda s: sdjax.kinetic_energy(model, s) + sdjax.potential_energy(model, s))(states)


# ------------------------------------------------------------------------------------------
# Single point contact: restitution, energy.


def _no_adhesion_restitution(zeta: float) -> float:
    """Closed form written independently: integrate the linear oscillator analytically and
    find where k x + c x' = 0 (time in units of 1 / w_n)."""
    wd = np.sqrt(1 - zeta**2)
    # (1 - 2 zeta^2) sin(wd t) / wd + 2 zeta cos(wd t) = 0 on (0, pi / wd)
    t = (np.pi - np.arctan2(2 * zeta * wd, 1 - 2 * zeta**2)) / wd
    velocity = np.exp(-zeta * t) * (np.cos(wd * t) - zeta / wd * np.sin(wd * t))
    return -velocity


def test_restitution_matches_clipped_spring_damper(probe, point):
    zetas = np.array([0.05, 0.2, 0.4, 0.6])
    state = sdjax.make_state(probe, base_position=[0.0, 0.0, 1e-3], base_linear_velocity=[0.0, 0.0, -SPEED])
    dt = 0.0025 / OMEGA  # 35 us: resolves the 2e-5 s onset zone (smoothing / SPEED)

    def outgoing(damping):
        params = sc.ContactParameters(STIFFNESS, damping, smoothing=1e-5)
        traj = _drop(probe, point, sc.Plane(), params, state, dt, 1600)
        return traj.states.base_linear_velocity[-1, 2]

    dampings = 2 * zetas * np.sqrt(STIFFNESS * MASS)
    e = np.asarray(jax.vmap(outgoing)(jnp.asarray(dampings))) / SPEED
    expected = np.array([_no_adhesion_restitution(z) for z in zetas])
    # 1e-4: the smooth onset (1e-5 m against a 7 mm peak penetration) and the partly resolved
    # jump of the damping force at onset (see sdjax.contact) cost ~1.5e-5 (measured).
    np.testing.assert_allclose(e, expected, rtol=1e-4)
    # The clipped model and exp(-zeta pi / sqrt(1 - zeta^2)) agree to first order in zeta only.
    linear = np.exp(-zetas * np.pi / np.sqrt(1 - zetas**2))
    assert abs(e[0] - linear[0]) < 0.02  # zeta = 0.05: difference O(zeta^2)
    assert np.all(e[1:] > linear[1:])  # no adhesion: contact ends earlier, less energy lost


def test_energy_elastic_bounce_conserved_and_damping_dissipates(probe, point):
    state = sdjax.make_state(probe, base_position=[0.0, 0.0, 1e-3], base_linear_velocity=[0.3, 0.0, -SPEED])

    def energies(damping):
        params = sc.ContactParameters(STIFFNESS, damping, smoothing=1e-5)
        states = _drop(
            probe, point, sc.Plane(), params, state, 0.0025 / OMEGA, 1600
        ).states  # as above: shares its compiled rollout
        penetration = jnp.maximum(-states.base_position[:, 2], 0.0)
        return _energy(probe, states) + 0.5 * STIFFNESS * penetration**2  # + spring energy

    e = np.asarray(jax.vmap(energies)(jnp.asarray([0.0, 20.0, 60.0, 100.0])))
    # Elastic (c = 0): the normal force depends on the penetration only (conservative). The
    # smoothed law's potential differs from k delta^2 / 2 by ~k w^2 = 1e-10 J; RK4 at w dt = 0.01
    # keeps the energy to ~1e-12 relative; the onset zone (~w deep) is crossed within one step,
    # which costs 2e-6 (measured): 1e-5.
    np.testing.assert_allclose(e[0], e[0, 0], rtol=1e-5)
    # Damped: never increases (beyond 1e-6 of the energy: the same smoothing and step effects),
    # and more damping loses more.
    assert np.all(np.diff(e[1:], axis=1) <= 1e-6 * e[0, 0])
    assert e[0, -1] > e[1, -1] > e[2, -1] > e[3, -1]


def test_impulse_equals_change_of_momentum():
    """Oblique, spinning impact on a tilted plane with friction, under gravity: the time
    integral of the contact forces plus M g T equals the change of linear momentum."""
    model = point_mass_probe(mass=3.0, inertia=0.05, gravity=9.81)
    spheres = sc.ContactSpheres([0, 0], [[0.1, 0.0, 0.0], [-0.1, 0.05, 0.0]], 0.05)
    plane = sc.Plane([0.2, -0.1, 1.0], -0.05)
    params = sc.ContactParameters(2.0e4, 40.0, friction=0.4, slip_velocity=0.01, smoothing=1e-6)
    state = sdjax.make_state(
        model,
        base_position=[0.0, 0.0, 0.02],
        base_linear_velocity=[0.4, 0.1, -0.6],
        base_angular_velocity=[1.0, -2.0, 3.0],
    )
    dt, num_steps = 2e-5, 4000
    traj = _drop(model, spheres, plane, params, state, dt, num_steps)
    forces = jax.vmap(lambda s: sc.contact_diagnostics(model, s, spheres, plane, params).force.sum(0))(traj.states)
    forces = np.asarray(forces)
    assert forces[:, 2].max() > 100.0, "the sphere must hit the plane"
    impulse = dt * (forces[1:-1].sum(0) + 0.5 * (forces[0] + forces[-1]))  # trapezoid rule
    momentum = np.asarray(jax.vmap(lambda s: sdjax.linear_momentum(model, s))(traj.states))
    gravity_impulse = 3.0 * np.array([0.0, 0.0, -9.81]) * dt * num_steps
    # Trapezoid error ~ T dt^2 max|F''| / 12 on contact pulses ~1 ms long: ~1e-5 of the impulse.
    np.testing.assert_allclose(momentum[-1] - momentum[0], impulse + gravity_impulse, atol=2e-4 * np.abs(impulse).max())


# ------------------------------------------------------------------------------------------
# Gradients across contact onset.


def _touchdown_loss():
    model = point_mass_probe(mass=MASS, inertia=0.01, gravity=1.0)
    point = sc.ContactSpheres([0], [[0.0, 0.0, 0.0]])

    def loss(height, speed, stiffness):
        """Height + 0.1 s * vertical velocity after 0.3 s of a drop (contact or not)."""
        params = sc.ContactParameters(stiffness, 20.0, smoothing=1e-4)
        state = sdjax.make_state(
            model, base_position=jnp.stack([0.0, 0.0, height]), base_linear_velocity=jnp.stack([0.0, 0.0, -speed])
        )
        traj = _drop(model, point, sc.Plane(), params, state, 2e-3, 150)
        return traj.states.base_position[-1, 2] + 0.1 * traj.states.base_linear_velocity[-1, 2]

    return loss


#: Initial heights (m) around onset: a 0.3 s drop at 0.1 m/s under 1 m/s^2 covers 0.075 m.
ONSET_HEIGHTS = [0.0700, 0.0748, 0.0749, 0.0750, 0.0752, 0.0760, 0.0800]


def test_gradients_finite_and_match_finite_differences_across_onset():
    loss = _touchdown_loss()
    value = jax.jit(loss)
    # Forward mode here (it compiles 3x faster than reverse mode); the slow test below checks
    # that jax.grad agrees with it.
    derivative = jax.jit(jax.jacfwd(loss, argnums=(1, 2)))
    speed, stiffness = 0.1, 1.0e3
    for height in ONSET_HEIGHTS:
        g_speed, g_stiffness = (float(g) for g in derivative(height, speed, stiffness))
        assert np.isfinite(g_speed) and np.isfinite(g_stiffness), f"non-finite derivative at height {height}"
        fd_speed = (value(height, speed + 1e-6, stiffness) - value(height, speed - 1e-6, stiffness)) / 2e-6
        fd_stiffness = (value(height, speed, stiffness + 1e-2) - value(height, speed, stiffness - 1e-2)) / 2e-2
        # Central differences: truncation ~h^2 |f'''| and round-off ~1e-16 / h: ~1e-8 relative here;
        # 1e-5 (relative to the larger of the derivative and a floor) covers the steep onset.
        assert abs(float(fd_speed) - g_speed) <= 1e-5 * max(abs(g_speed), 1e-2), (height, g_speed, fd_speed)
        assert abs(float(fd_stiffness) - g_stiffness) <= 1e-5 * max(abs(g_stiffness), 1e-6), (
            height,
            g_stiffness,
            fd_stiffness,
        )


@pytest.mark.slow
def test_reverse_mode_gradients_across_onset():
    loss = _touchdown_loss()
    grad = jax.jit(jax.grad(loss, argnums=(1, 2)))  # ~35 s to compile on 2 cores
    forward = jax.jit(jax.jacfwd(loss, argnums=(1, 2)))
    for height in ONSET_HEIGHTS:
        reverse = np.array([float(g) for g in grad(height, 0.1, 1.0e3)])
        assert np.all(np.isfinite(reverse))
        # Same derivative by two modes of autodiff: equal up to round-off.
        np.testing.assert_allclose(
            reverse, np.array([float(g) for g in forward(height, 0.1, 1.0e3)]), rtol=1e-9, atol=1e-15
        )


# ------------------------------------------------------------------------------------------
# Friction on an incline.


def test_slide_acceleration_and_stick_creep_on_incline():
    """A rigid box on four corner spheres on a 0.3 rad incline (Mars gravity): with mu below
    tan(0.3) it slides at g (sin - mu cos); above, it creeps at the regularised-friction speed."""
    g, angle, eps = 3.711, 0.3, 1e-3
    model = point_mass_probe(mass=40.0, inertia=1.0, gravity=g)
    corners = [[0.3, 0.2, -0.1], [-0.3, 0.2, -0.1], [-0.3, -0.2, -0.1], [0.3, -0.2, -0.1]]
    spheres = sc.ContactSpheres([0, 0, 0, 0], corners, 0.02)
    plane = sc.inclined_plane(angle)
    downhill = np.array([np.cos(angle), 0.0, -np.sin(angle)])
    rotation = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    state = sdjax.make_state(model, base_position=(0.12 + 1e-4) * np.asarray(plane.normal), base_rotation=rotation)
    dt, num_steps = 2e-4, 10000

    def run(mu):
        params = sc.ContactParameters(4.0e4, 400.0, friction=mu, slip_velocity=eps, smoothing=1e-6)
        return _drop(model, spheres, plane, params, state, dt, num_steps).states.base_linear_velocity @ jnp.asarray(
            downhill
        )

    mus = jnp.asarray([0.1, 0.2, 0.5, 0.8])
    speed = np.asarray(jax.vmap(run)(mus))
    t = dt * np.arange(num_steps + 1)
    late = t > 1.0  # after the settling transient (contact damping time constant ~0.05 s)
    for k, mu in enumerate(np.asarray(mus)):
        if mu < np.tan(angle):
            acceleration = np.polyfit(t[late], speed[k, late], 1)[0]
            expected = g * (np.sin(angle) - mu * np.cos(angle))
            # Regularised friction differs from Coulomb by mu f_n eps^2 / (2 v^2) < 1e-5 relative at v > 0.1 m/s.
            np.testing.assert_allclose(acceleration, expected, rtol=1e-4)
        else:
            creep = eps * np.tan(angle) / np.sqrt(mu**2 - np.tan(angle) ** 2)
            # Steady creep of f_t = mu f_n v / sqrt(v^2 + eps^2) = M g sin: 1e-3 covers the residual transient.
            np.testing.assert_allclose(speed[k, -1], creep, rtol=1e-3)


# ------------------------------------------------------------------------------------------
# Stable steps.


def test_rk4_stability_limits_match_the_stability_function():
    # Undamped: |R(iy)|^2 = 1 - y^6/72 + y^8/576 = 1 at y = 2 sqrt(2).
    assert abs(sc.rk4_stability_limit(0.0) - 2 * np.sqrt(2)) < 1e-9  # bisection to 1e-12
    # Critically damped: double real eigenvalue -w; RK4's real-axis limit solves R(-x) = -1 ... = 1.
    roots = np.roots([1 / 24, -1 / 6, 1 / 2, -1, 0])  # R(-x) - 1 = 0 for x > 0
    real_limit = max(r.real for r in roots if abs(r.imag) < 1e-12 and r.real > 1e-9)
    assert abs(sc.rk4_stability_limit(1.0) - real_limit) < 1e-9
    with pytest.raises(ValueError, match="rk4_stability_limit: damping_ratio: must be non-negative"):
        sc.rk4_stability_limit(-0.1)


def test_step_beyond_limit_blows_up_and_within_is_stable(point):
    model = point_mass_probe(mass=MASS, inertia=0.01, gravity=9.81)
    params = sc.ContactParameters(STIFFNESS, 0.0, smoothing=1e-7)
    rest = MASS * 9.81 / STIFFNESS  # static penetration
    state = sdjax.make_state(model, base_position=[0.0, 0.0, -rest + 2e-4])  # in contact, off equilibrium
    limit = sc.stable_time_step(model, state, point, sc.Plane(), params, safety=1.0)
    # One undamped contact on a free mass: dt_max = 2 sqrt(2) / w (bisection to 1e-12).
    np.testing.assert_allclose(limit, 2 * np.sqrt(2) / OMEGA, rtol=1e-9)
    for factor, stable in ((0.9, True), (1.2, False)):
        traj = _drop(model, point, sc.Plane(), params, state, factor * limit, 200)
        z = np.asarray(traj.states.base_position[:, 2])
        swing = np.nanmax(np.abs(z + rest)) if np.all(np.isfinite(z)) else np.inf
        if stable:
            assert swing < 3e-4  # RK4 damps a little: the oscillation stays at its 2e-4 m amplitude
        else:
            assert swing > 1e-2  # |R| ~ 1.9 per step: thrown off the ground within 200 steps


# ------------------------------------------------------------------------------------------
# Terrain.


def test_height_field_reproduces_a_plane_exactly():
    a, b, c = 0.3, -0.2, 0.5
    x = np.linspace(-1.0, 2.0, 7)
    y = np.linspace(0.0, 1.5, 5)
    heights = a * x[:, None] + b * y[None, :] + c
    rng = np.random.default_rng(0)
    points = np.column_stack([rng.uniform(-1.0, 2.0, 50), rng.uniform(0.0, 1.5, 50), rng.uniform(-1, 2, 50)])
    normal = np.array([-a, -b, 1.0]) / np.sqrt(1 + a**2 + b**2)
    expected_distance = (points[:, 2] - (a * points[:, 0] + b * points[:, 1] + c)) * normal[2]
    for interpolation in sc.INTERPOLATIONS:
        field = sc.HeightField(heights, origin=(-1.0, 0.0), spacing=(0.5, 0.375), interpolation=interpolation)
        distance, normals = eqx.filter_jit(field.query)(jnp.asarray(points))
        # Both schemes reproduce linear functions; 1e-12 is round-off of O(1) sums.
        np.testing.assert_allclose(distance, expected_distance, atol=1e-12)
        np.testing.assert_allclose(normals, np.broadcast_to(normal, (50, 3)), atol=1e-12)
        # The same plane as a Plane: same signed distance (Plane measures along its normal).
        plane = sc.Plane(normal, c * normal[2])
        np.testing.assert_allclose(plane.query(jnp.asarray(points))[0], expected_distance, atol=1e-12)


def test_height_field_bicubic_converges_on_a_smooth_surface():
    def surface(x, y):
        return 0.1 * np.sin(2 * x) * np.cos(3 * y)

    def slope(x, y):
        return np.stack([0.2 * np.cos(2 * x) * np.cos(3 * y), -0.3 * np.sin(2 * x) * np.sin(3 * y)], axis=-1)

    rng = np.random.default_rng(1)
    xy = rng.uniform(0.2, 0.8, size=(200, 2))
    errors = []
    for cells in (16, 32):
        grid = np.linspace(0.0, 1.0, cells + 1)
        field = sc.HeightField(surface(grid[:, None], grid[None, :]), spacing=1.0 / cells)
        value, gradient = field.height(jnp.asarray(xy))
        errors.append(
            (np.abs(value - surface(xy[:, 0], xy[:, 1])).max(), np.abs(gradient - slope(xy[:, 0], xy[:, 1])).max())
        )
    (h1, g1), (h2, g2) = errors
    # Catmull-Rom: O(h^3) heights and O(h^2) slopes in the interior; halving h gains >= 6x and >= 3x.
    assert h1 / h2 > 6 and g1 / g2 > 3
    assert h2 < 1e-4 and g2 < 5e-3  # absolute size at h = 1/32 on a 0.1-amplitude surface


def test_height_field_contact_equals_plane_contact():
    model = lander()
    feet = sc.ContactSpheres.at_end_points(model, 0.1)
    a = 0.1
    x = np.linspace(-3, 3, 13)
    field = sc.HeightField(a * x[:, None] + 0.0 * x[None, :] - 1.5, origin=(-3.0, -3.0), spacing=0.5)
    plane = sc.Plane([-a, 0.0, 1.0], -1.5 / np.sqrt(1 + a**2))
    params = sc.ContactParameters(5.0e4, 300.0, friction=0.3, slip_velocity=0.01)
    state = sdjax.make_state(
        model,
        base_linear_velocity=[0.05, 0.02, -0.1],
        base_angular_velocity=[0.01, 0.02, 0.0],
        q=[0.01, -0.02, 0.0, 0.03],
    )
    for_field = eqx.filter_jit(sc.contact_environment(model, feet, field, params))(0.0, state)
    for_plane = eqx.filter_jit(sc.contact_environment(model, feet, plane, params))(0.0, state)
    assert float(jnp.abs(for_plane.base_force).max()) > 100  # the feet are in contact
    # Same geometry both ways: equal loads up to round-off of the interpolation (~1e-15 relative).
    for name in ("tau", "base_force", "base_torque"):
        np.testing.assert_allclose(getattr(for_field, name), getattr(for_plane, name), rtol=1e-9, atol=1e-9)


def test_rover_and_lander_builders():
    for model in (lander(), rover()):
        assert model.num_joints == 4 and model.num_end_points == 4
        feet = sc.ContactSpheres.at_end_points(model, 0.05)
        kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
        # Feet symmetric about the centroid, below it (reference pose, base frame = inertial).
        np.testing.assert_allclose(kin.end_point_position[:, :2].sum(0), 0.0, atol=1e-12)
        assert np.all(np.asarray(kin.end_point_position[:, 2]) < -0.2)
        assert feet.num_contacts == 4


# ------------------------------------------------------------------------------------------
# Errors.


def test_bad_parameters_raise(probe, point):
    with pytest.raises(ValueError, match="stiffness: must be positive"):
        sc.ContactParameters(-1.0)
    with pytest.raises(ValueError, match="damping: must be non-negative"):
        sc.ContactParameters(1.0, -2.0)
    with pytest.raises(ValueError, match="friction coefficient"):
        sc.ContactParameters(1.0, friction=-0.1)
    with pytest.raises(ValueError, match="slip_velocity: must be positive"):
        sc.ContactParameters(1.0, slip_velocity=0.0)
    with pytest.raises(ValueError, match="finite"):
        sc.ContactParameters(np.nan)
    with pytest.raises(ValueError, match=r"ContactSpheres.radii: must be positive and finite"):
        sc.ContactSpheres([0], [[0.0, 0.0, 0.0]], 0.0)
    with pytest.raises(ValueError, match="offsets: expected shape"):
        sc.ContactSpheres([0, 0], [[0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="body index out of range"):
        sc.contact_environment(probe, sc.ContactSpheres([1], [[0.0, 0.0, 0.0]]), sc.Plane(), sc.ContactParameters(1.0))
    with pytest.raises(ValueError, match="body index out of range"):
        sc.ContactSpheres([-1], [[0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="expected a scalar or shape"):
        sc.contact_environment(probe, point, sc.Plane(), sc.ContactParameters([1.0, 2.0]))
    with pytest.raises(ValueError, match="non-zero vector"):
        sc.Plane([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="nx, ny >= 2"):
        sc.HeightField(np.zeros((1, 5)))
    with pytest.raises(ValueError, match="nx, ny >= 2"):
        sc.HeightField(np.zeros(5))
    with pytest.raises(ValueError, match="spacing: must be positive"):
        sc.HeightField(np.zeros((3, 3)), spacing=(0.1, -0.1))
    with pytest.raises(ValueError, match=r"HeightField.interpolation: unknown value 'spline'; choose one of"):
        sc.HeightField(np.zeros((3, 3)), interpolation="spline")
    with pytest.raises(TypeError, match="terrain: expected a sdjax.contact.Plane or HeightField, got str"):
        sc.contact_environment(probe, point, "ground", sc.ContactParameters(1.0))
    with pytest.raises(ValueError, match="safety"):
        sc.stable_time_step(probe, sdjax.make_state(probe), point, sc.Plane(), sc.ContactParameters(1.0), safety=2.0)
    with pytest.raises(ValueError, match="has no end points"):
        sc.ContactSpheres.at_end_points(probe)
