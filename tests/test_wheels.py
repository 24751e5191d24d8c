"""Wheels on terrain (sdjax.wheels) and the wheeled rover: closed forms of statics, steady slip
on a slope, the climbable slope, free rolling, Newton's law on the vehicle, height fields,
transformations and errors.

Expected values come from closed forms written out here (moment balance of the chassis, the
Magic Formula inverted by hand for E = 0, atan(mu), momentum balance) and from a slip ratio and
force law recomputed here from the state, never from the code under test.

Steps (explicit RK4, the reference integrator; the stiff part is the traction law's viscous
rate below the speed scale V, ``mu f_n B C / V`` on a rim point of effective mass
``I_w / r^2 = 1 kg``): a moving rover (V >= 0.25 m/s) has rate <= 1.6e3 /s, RK4-stable below
1.8e-3 s, so dt = 5e-4 s; at standstill (V = eps) the rate grows to 2.7e4 /s for eps = 0.02 m/s
(RK4 limit ~1e-4 s), so the rest test takes eps = 0.1 m/s and dt = 1e-4 s.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import contact as sc
from sdjax import wheels as sw
from sdjax.models import wheeled_rover

G = 3.711  # Mars, the builder's default
MU = 0.6
EPS = 0.02  # m/s, slip-speed floor
B, C = 10.0, 1.65  # Magic Formula defaults
R = 0.15  # wheel radius
STIFFNESS = 2.0e4
DT = 5e-4  # s, moving rover (module docstring)
FORMULA = sw.MagicFormula(B, C, 0.0)


def _parameters(mass_per_wheel):
    damping = sc.damping_for_ratio(1.0, STIFFNESS, mass_per_wheel)  # critically damped heave
    return sc.ContactParameters(STIFFNESS, damping, friction=MU, slip_velocity=EPS, smoothing=1e-5)


def _mass(model):
    return float(model.base_mass + jnp.sum(model.link_mass))


def _mf(x):
    """The Magic Formula written out independently (E = 0)."""
    return np.sin(C * np.arctan(B * np.asarray(x)))


def _slip(rolling, forward):
    """Slip ratio by its definition (module docstring), from rim and centre speeds."""
    return (rolling - forward) / np.sqrt(np.maximum(rolling**2, forward**2) + EPS**2)


def _on_slope(model, angle, height, speed, wheel_rate):
    """State of the rover sitting on ``inclined_plane(angle, downhill=-x)`` (rising along +x),
    chassis centroid ``height`` above the plane, moving uphill at ``speed``."""
    c, s = jnp.cos(angle), jnp.sin(angle)
    rotation = jnp.array([[c, 0.0, -s], [0.0, 1.0, 0.0], [s, 0.0, c]])
    normal, uphill = rotation[:, 2], rotation[:, 0]
    return sdjax.make_state(
        model,
        base_position=height * normal,
        base_rotation=rotation,
        base_linear_velocity=speed * uphill,
        qd=jnp.full(model.num_joints, wheel_rate),
    )


# ------------------------------------------------------------------------------------------
# Statics.


def test_rest_loads_match_moment_balance_of_the_chassis():
    """Asymmetric axles (front 0.45 m, rear -0.25 m): the settled normal loads sum to the weight
    and split between the axles as the moment balance about the centre of mass gives."""
    model, wheels = wheeled_rover(axles=(0.45, -0.25))
    mass, wheel_mass = _mass(model), 2.0
    weight = mass * G
    # eps = 0.1 m/s (no effect on the loads): at standstill the traction law is viscous with rate
    # mu f_n B C / eps ~ 5.4e3 /s on the rear wheels' rim points (effective mass <= 1 kg), so RK4
    # is stable below ~5e-4 s; dt = 1e-4 s. (With eps = 0.02 m/s dt = 1e-4 s sits on RK4's limit
    # and the wheels chatter at the step frequency.)
    params = eqx.tree_at(lambda p: p.slip_velocity, _parameters(mass / 4), jnp.asarray(0.1))
    sink = weight / 4 / STIFFNESS
    state = sdjax.make_state(model, base_position=[0.0, 0.0, 0.25 - sink])
    env = sw.wheel_environment(model, wheels, sc.Plane(), params)
    dt = 1e-4
    traj = sdjax.rollout(model, state, dt, 5000, environment=env)
    final = jax.tree.map(lambda x: x[-1], traj.states)
    loads = np.asarray(sw.wheel_diagnostics(model, final, wheels, sc.Plane(), params).normal_force)
    # Heave and pitch are damped (w_n ~ 40 rad/s); after 0.5 s the residual vertical
    # acceleration of the settling is 1.2e-7 g (measured), hence 1e-6.
    np.testing.assert_allclose(loads.sum(), weight, rtol=1e-6)
    np.testing.assert_allclose(loads[0], loads[1], rtol=1e-9)  # left = right by symmetry
    np.testing.assert_allclose(loads[2], loads[3], rtol=1e-9)
    # Closed form: centre of mass x_G = sum m x / M (chassis at 0, two wheels per axle), then
    # N_f + N_r = W and N_f (x_f - x_G) + N_r (x_r - x_G) = 0.
    x_f, x_r = 0.45, -0.25
    x_g = 2 * wheel_mass * (x_f + x_r) / mass
    front = weight * (x_g - x_r) / (x_f - x_r)
    # 1e-3: the chassis pitches by (sink_r - sink_f) / 0.7 ~ 1.5e-3 rad under the unequal loads,
    # moving the centre of mass 0.25 m above the contacts forward by ~4e-4 m against 0.7 m
    # (measured 5e-4 relative).
    np.testing.assert_allclose(loads[0] + loads[1], front, rtol=1e-3)
    np.testing.assert_allclose(loads[2] + loads[3], weight - front, rtol=1e-3)
    # At rest: no creep on flat ground (no traction is needed).
    assert float(jnp.abs(final.base_linear_velocity).max()) < 1e-6


# ------------------------------------------------------------------------------------------
# Slopes: steady slip and the climbable slope.


def _balanced_rover():
    """A test rig with its centre of mass in the contact plane (hubs 0.18 m above the chassis
    centroid: 40 kg x (0.15 - 0.18) + 8 kg x 0.15 = 0), so that climbing transfers no load
    between axles: every wheel carries M g cos(alpha) / 4 and turns at one rate."""
    return wheeled_rover(hub_height=R + 4 * 2.0 * R / 40.0)


def test_steady_slip_on_slope_and_sliding_back_beyond_the_climbable_slope():
    model, wheels = _balanced_rover()
    mass = _mass(model)
    params = _parameters(mass / 4)
    rate, gain = 2.0, 20.0  # rad/s commanded, N m s/rad speed loop
    ratios = jnp.asarray([0.5, 0.9, 1.1])  # tan(alpha) / mu: two climbable, one not
    angles = jnp.arctan(ratios * MU)
    num_steps = 6000  # 3 s: the slowest transient (speed loop through traction) decays in < 0.5 s

    def climb(angle):
        plane = sc.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))
        sink = mass * G * jnp.cos(angle) / 4 / STIFFNESS
        state = _on_slope(model, angle, -0.03 - sink, 0.95 * R * rate, rate)
        env = sw.wheel_environment(model, wheels, plane, params, drive=sw.WheelDrive(rate, gain))
        traj = sdjax.rollout(model, state, DT, num_steps, environment=env)
        uphill = traj.states.base_rotation[:, :, 0]
        speed = jnp.sum(traj.states.base_linear_velocity * uphill, axis=-1)
        final = jax.tree.map(lambda x: x[-1], traj.states)
        diag = sw.wheel_diagnostics(model, final, wheels, plane, params)
        return speed, final.qd, diag.traction

    speed, wheel_rate, traction = (np.asarray(x) for x in jax.vmap(climb)(angles))
    angles = np.asarray(angles)
    for k in range(2):
        slip = _slip(R * wheel_rate[k], speed[k, -1])
        expected = np.tan(np.arcsin(np.tan(angles[k]) / MU) / C) / B  # MF(s) = tan(alpha) / mu, E = 0
        np.testing.assert_allclose(wheel_rate[k], wheel_rate[k, 0], rtol=1e-12)  # one rate: no load transfer
        # Steady state reached to ~1e-13 (measured); 1e-8 leaves room for the residual transient.
        np.testing.assert_allclose(slip, expected, rtol=1e-8)
        np.testing.assert_allclose(float(sw.steady_slope_slip(angles[k], MU, FORMULA)), expected, rtol=1e-12)
        np.testing.assert_allclose(traction[k].sum(), mass * G * np.sin(angles[k]), rtol=1e-8)
        assert speed[k, -1] > 0.2  # still climbing
    # Beyond atan(mu) (traction saturates at mu f_n): no steady climb, the rover slides back with
    # at least the deceleration g (sin - mu cos) that the peak traction would leave.
    np.testing.assert_allclose(float(sw.climbable_slope(MU, FORMULA)), np.arctan(MU), rtol=1e-15)
    assert angles[2] > np.arctan(MU)
    t = DT * np.arange(num_steps + 1)
    late = t > 1.5
    acceleration = np.polyfit(t[late], speed[2, late], 1)[0]
    assert speed[2, -1] < -1.0
    assert acceleration < -G * (np.sin(angles[2]) - MU * np.cos(angles[2]))


def test_rover_on_slope_load_transfer_and_traction_balance():
    """The default rover (centre of mass 0.23 m above the contacts) climbing tan(alpha) = 0.8 mu:
    traction balances M g sin(alpha), the loads shift to the rear axle as the moment balance
    gives, and the closed-form slip lies between the front and rear wheels' slips."""
    model, wheels = wheeled_rover()
    mass = _mass(model)
    params = _parameters(mass / 4)
    angle = float(np.arctan(0.8 * MU))
    plane = sc.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))
    rate = 2.0
    state = _on_slope(model, angle, 0.25 - mass * G / 4 / STIFFNESS, 0.95 * R * rate, rate)
    env = sw.wheel_environment(model, wheels, plane, params, drive=sw.WheelDrive(rate, 20.0))
    traj = sdjax.rollout(model, state, DT, 4000, environment=env)
    final = jax.tree.map(lambda x: x[-1], traj.states)
    diag = sw.wheel_diagnostics(model, final, wheels, plane, params)
    normal = np.asarray(plane.normal)
    weight_along = mass * G * np.sin(angle)
    # Steady state after 2 s (transients decay in < 0.5 s): 1e-7 relative.
    np.testing.assert_allclose(float(diag.traction.sum()), weight_along, rtol=1e-7)
    np.testing.assert_allclose(float(diag.normal_force.sum()), mass * G * np.cos(angle), rtol=1e-7)
    # Moment about the centre of mass (pitch axis y): sum_i (x_i N_i + h_i T_i) = 0 with x_i the
    # contact's offset uphill and h_i the centre of mass's height above it (along n), at this
    # state; steady state to 1e-7 as above.
    com = np.asarray(sdjax.center_of_mass(model, final))
    points = np.asarray(diag.point)
    uphill = np.cross([0.0, 1.0, 0.0], normal)
    h = (com - points) @ normal
    x = (points - com) @ uphill
    loads, traction = np.asarray(diag.normal_force), np.asarray(diag.traction)
    np.testing.assert_allclose(x @ loads, -(h @ traction), rtol=1e-7)
    # Nominal closed form (axles at +-0.35 m, h = 0.2333 m): N_r - N_f = 2 h M g sin / 0.7 per
    # pair; 1e-2: the sink (~2.5 mm) and the chassis pitch shift h and x by ~1 %.
    front, rear = loads[:2].sum(), loads[2:].sum()
    h_nominal = (40.0 * 0.25 + 8.0 * R) / mass
    np.testing.assert_allclose(rear - front, h_nominal * weight_along / 0.35, rtol=1e-2)
    slip = np.asarray(diag.slip_ratio)
    expected = np.tan(np.arcsin(0.8) / C) / B
    assert slip[:2].max() > expected > slip[2:].min()  # unloaded front wheels slip more


# ------------------------------------------------------------------------------------------
# Flat ground: free rolling, driving and braking.


def _rolling_start(model, speed):
    sink = _mass(model) * G / 4 / STIFFNESS
    return sdjax.make_state(
        model, base_position=[0.0, 0.0, 0.25 - sink], base_linear_velocity=[speed, 0.0, 0.0], qd=jnp.full(4, speed / R)
    )


def test_free_rolling_keeps_its_speed_without_slip():
    model, wheels = wheeled_rover()
    params = _parameters(_mass(model) / 4)
    env = sw.wheel_environment(model, wheels, sc.Plane(), params)
    traj = sdjax.rollout(model, _rolling_start(model, 0.3), DT, 2000, environment=env)
    final = jax.tree.map(lambda x: x[-1], traj.states)
    diag = sw.wheel_diagnostics(model, final, wheels, sc.Plane(), params)
    # No rolling resistance is modelled: speed and momentum are conserved up to the slip of the
    # settling transient (the start sits on the mean sink, not on each wheel's).
    np.testing.assert_allclose(np.asarray(traj.states.base_linear_velocity[:, 0]), 0.3, rtol=1e-6)
    assert float(jnp.abs(diag.slip_ratio).max()) < 1e-8
    np.testing.assert_allclose(np.asarray(diag.rolling_speed), 0.3, rtol=1e-6)


def test_driving_and_braking_force_obeys_newton_on_the_vehicle():
    """Constant wheel torques (3 N m each driving, 0.5 N m braking, over 0.5 s from 0.3 m/s;
    braking ends at ~0.15 m/s, where dt = 5e-4 s is still within RK4's limit): the vehicle's
    momentum changes at the rate of the summed traction that the slip law gives at the
    measured slips."""
    model, wheels = wheeled_rover()
    params = _parameters(_mass(model) / 4)
    env = sw.wheel_environment(model, wheels, sc.Plane(), params)
    num_steps = 1000

    def drive(torque):
        traj = sdjax.rollout(
            model, _rolling_start(model, 0.3), DT, num_steps, jnp.full((num_steps, 4), torque), environment=env
        )
        momentum = jax.vmap(lambda s: sdjax.linear_momentum(model, s))(traj.states)
        diag = jax.vmap(lambda s: sw.wheel_diagnostics(model, s, wheels, sc.Plane(), params))(traj.states)
        linear, angular = jax.vmap(lambda s: sdjax.link_velocities(model, s))(traj.states)
        return momentum[:, 0], diag, linear[:, 1:, 0], angular[:, 1:, 1], traj.states.base_linear_velocity[:, 0]

    for torque in (3.0, -0.5):
        momentum, diag, hub_speed, wheel_rate, v = drive(torque)
        rate = (np.asarray(momentum[2:]) - np.asarray(momentum[:-2])) / (2 * DT)  # central difference
        # Traction recomputed here: mu f_n MF(s) with s from the rim and hub speeds (the wheels
        # stay upright on flat ground: rim speed r w_y of the wheel link, hub speed its centroid's
        # forward velocity, both from sdjax.link_velocities).
        slip = _slip(R * np.asarray(wheel_rate), np.asarray(hub_speed))
        traction = (MU * np.asarray(diag.normal_force) * _mf(slip)).sum(axis=1)[1:-1]
        # Central differences err by dt^2/6 |P'''| ~ 1e-6 relative here; 1e-4 bounds it.
        np.testing.assert_allclose(rate[100:], traction[100:], rtol=1e-4, atol=1e-3)
        assert np.sign(torque) * (v[-1] - v[0]) > 0.05  # accelerates when driving, slows when braking
        assert np.sign(torque) * np.asarray(diag.slip_ratio)[-1].min() > 0  # slip sign follows the torque


def _smooth_sign(rolling_speed):
    """The rolling-resistance couple's sign of the rolling speed, smoothed below EPS (its
    definition in the module docstring, written out here)."""
    return rolling_speed / np.sqrt(rolling_speed**2 + EPS**2)


def test_rolling_resistance_decelerates_a_coasting_rover_as_the_energy_balance_gives():
    """Unpowered rover rolling at 0.3 m/s with c_rr = 0.05: each wheel loses c_rr r f_n omega of
    power, so (M + sum I_w / r^2) dv/dt = -c_rr sign(v) sum f_n = -c_rr M g sign(v) (rolling
    without slip: omega = v / r; sum f_n = M g on flat ground)."""
    model, wheels = wheeled_rover()
    mass = _mass(model)
    params = _parameters(mass / 4)
    c_rr = 0.05
    env = sw.wheel_environment(model, wheels, sc.Plane(), params, rolling_resistance=c_rr)
    num_steps = 1200
    traj = sdjax.rollout(model, _rolling_start(model, 0.3), DT, num_steps, environment=env)
    momentum = np.asarray(jax.vmap(lambda s: sdjax.linear_momentum(model, s))(traj.states))[:, 0]
    speed = momentum / mass
    rate = (speed[2:] - speed[:-2]) / (2 * DT)
    wheel_inertia = 0.5 * 2.0 * R**2  # uniform disk of the builder, about its axle
    expected = -c_rr * G * mass * _smooth_sign(speed[1:-1]) / (mass + 4 * wheel_inertia / R**2)
    # After the settling transient (0.1 s): the wheels' angular acceleration differs from
    # (dv/dt) / r by the rate of change of the slip needed to pass the couple to the ground
    # (sigma ~ 1e-3), and the chassis' pitch still settles under the couples; measured 5.1e-4
    # relative at worst, so 1e-3.
    np.testing.assert_allclose(rate[200:], expected[200:], rtol=1e-3)
    assert 0.15 < speed[-1] < 0.25  # slowed by ~0.17 m/s^2 x 0.6 s
    # The diagnostics report the couple's moment: c_rr r f_n sign(V_r) on each upright wheel.
    final = jax.tree.map(lambda x: x[-1], traj.states)
    diag = sw.wheel_diagnostics(model, final, wheels, sc.Plane(), params, rolling_resistance=c_rr)
    moment = c_rr * R * np.asarray(diag.normal_force) * _smooth_sign(np.asarray(diag.rolling_speed))
    np.testing.assert_allclose(np.asarray(diag.rolling_resistance_moment), moment, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(diag.couple)[:, 1], -moment, rtol=1e-12)  # about -y: against qd > 0


def test_rolling_resistance_adds_motor_torque_but_not_traction_on_a_steady_climb():
    """Balanced rig driven up tan(alpha) = 0.5 mu by speed loops (gain k, commanded rate w_c)
    with c_rr = 0.05: the ground must still carry M g sin(alpha) along the slope, and the motors
    also carry the couples, so at the steady wheel rates w_i
    k sum (w_c - w_i) = r M g sin(alpha) + c_rr r sign(V_r) sum f_n, sum f_n = M g cos(alpha).
    The couples pitch the vehicle (an external moment), moving load to the rear axle."""
    model, wheels = _balanced_rover()
    mass = _mass(model)
    params = _parameters(mass / 4)
    rate, gain, c_rr = 2.0, 20.0, 0.05
    angle = float(np.arctan(0.5 * MU))
    plane = sc.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))
    state = _on_slope(model, angle, -0.03 - mass * G * np.cos(angle) / 4 / STIFFNESS, 0.9 * R * rate, rate)
    env = sw.wheel_environment(model, wheels, plane, params, drive=sw.WheelDrive(rate, gain), rolling_resistance=c_rr)
    traj = sdjax.rollout(model, state, DT, 6000, environment=env)
    final = jax.tree.map(lambda x: x[-1], traj.states)
    diag = sw.wheel_diagnostics(model, final, wheels, plane, params, rolling_resistance=c_rr)
    wheel_rate = np.asarray(final.qd)
    sign = _smooth_sign(np.asarray(diag.rolling_speed))  # one value per wheel, ~0.997
    # Steady state after 3 s as in the test above: 1e-8.
    np.testing.assert_allclose(float(diag.normal_force.sum()), mass * G * np.cos(angle), rtol=1e-8)
    np.testing.assert_allclose(float(diag.traction.sum()), mass * G * np.sin(angle), rtol=1e-8)
    motor = gain * (rate - wheel_rate).sum()
    expected = R * mass * G * np.sin(angle) + c_rr * R * float(np.asarray(diag.normal_force) @ sign)
    np.testing.assert_allclose(motor, expected, rtol=1e-8)
    assert motor > 1.1 * R * mass * G * np.sin(angle)  # the couples are not negligible
    # Pitch balance about the centre of mass (y axis), the couples included: with x_i the
    # contacts' offsets uphill and h_i the centre of mass's height above them (along n),
    # -h . T - x . N - sum m_i = 0 (m_i the couples' moments about -y); steady state, 1e-7.
    com = np.asarray(sdjax.center_of_mass(model, final))
    points, normal = np.asarray(diag.point), np.asarray(plane.normal)
    x = (points - com) @ np.cross([0.0, 1.0, 0.0], normal)
    h = (com - points) @ normal
    loads, traction = np.asarray(diag.normal_force), np.asarray(diag.traction)
    moments = np.asarray(diag.rolling_resistance_moment)
    np.testing.assert_allclose(x @ loads, -(h @ traction) - moments.sum(), rtol=1e-7)
    assert loads[2] > loads[0]  # the couples tip the nose up: rear wheels (2, 3) carry more
    uphill = np.asarray(final.base_rotation)[:, 0]
    slip = _slip(R * wheel_rate, float(np.asarray(final.base_linear_velocity) @ uphill))
    target = np.tan(np.arcsin(np.tan(angle) / MU) / C) / B  # MF(s) = tan(alpha) / mu, E = 0
    assert slip[0] > target > slip[2]  # the less loaded front wheels slip more


# ------------------------------------------------------------------------------------------
# Height fields.


def test_ramp_height_field_equals_inclined_plane():
    model, wheels = wheeled_rover()
    params = _parameters(12.0)
    angle = 0.2
    plane = sc.inclined_plane(angle, downhill=(-1.0, 0.0, 0.0))  # z = tan(angle) x
    x = np.linspace(-2.0, 4.0, 25)
    field = sc.HeightField(np.tan(angle) * x[:, None] + 0.0 * x[None, :], origin=(-2.0, -2.0), spacing=0.25)
    state = _on_slope(model, angle, 0.25 - 0.002, 0.3, 1.9)
    state = eqx.tree_at(lambda s: s.qd, state, jnp.asarray([1.9, 2.1, 2.0, 1.8]))
    loads = [
        eqx.filter_jit(sw.wheel_environment(model, wheels, terrain, params))(0.0, state) for terrain in (plane, field)
    ]
    assert float(jnp.abs(loads[0].base_force).max()) > 50  # in contact
    # The bicubic field reproduces a sampled plane exactly: equal loads up to round-off.
    for name in ("tau", "base_force", "base_torque"):
        np.testing.assert_allclose(getattr(loads[1], name), getattr(loads[0], name), rtol=1e-9, atol=1e-9)
    runs = [
        sdjax.rollout(model, state, DT, 400, environment=sw.wheel_environment(model, wheels, terrain, params))
        for terrain in (plane, field)
    ]
    # 0.2 s of climbing: the two terrains' round-off differences grow only mildly (1e-12 measured).
    np.testing.assert_allclose(runs[1].states.base_position, runs[0].states.base_position, atol=1e-9)


# ------------------------------------------------------------------------------------------
# Formula, transformations, gradients.


def test_magic_formula_inverse_and_smoothness():
    for e in (0.0, 0.5, -1.0):
        formula = sw.MagicFormula(8.0, 1.4, e)
        values = jnp.linspace(0.0, 0.999, 7)
        np.testing.assert_allclose(formula(formula.slip(values)), values, atol=1e-12)  # Newton to round-off
    assert bool(jnp.isnan(FORMULA.slip(1.01)))  # beyond the peak
    # MF(x)/x -> B C at zero, smooth across it (even in x).
    np.testing.assert_allclose(FORMULA.over_slip(jnp.asarray(0.0)), B * C, rtol=1e-15)
    np.testing.assert_allclose(
        FORMULA.over_slip(jnp.asarray(1e-20)), B * C, rtol=1e-15
    )  # MF(x)/x = B C (1 - O(B^2 x^2))
    np.testing.assert_allclose(float(sw.MagicFormula(shape_factor=0.8).peak()), np.sin(0.4 * np.pi), rtol=1e-15)
    # Gradients of the loads at standstill and zero slip are finite.
    model, wheels = wheeled_rover()
    params = _parameters(12.0)
    state = sdjax.make_state(model, base_position=[0.0, 0.0, 0.248])
    env = sw.wheel_environment(model, wheels, sc.Plane(), params)
    grads = jax.grad(lambda s: jnp.sum(env(0.0, s).base_force ** 2) + jnp.sum(env(0.0, s).tau ** 2))(state)
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(grads))


def test_jit_vmap_and_gradient_of_distance_against_finite_differences():
    model, wheels = wheeled_rover()
    num_steps = 200  # 0.1 s: enough for the torque to change the distance measurably

    def distance(torque, friction, rolling=None, speed=0.3):
        params = sc.ContactParameters(STIFFNESS, 300.0, friction=friction, slip_velocity=EPS, smoothing=1e-5)
        env = sw.wheel_environment(model, wheels, sc.Plane(), params, rolling_resistance=rolling)
        traj = sdjax.rollout(
            model, _rolling_start(model, speed), DT, num_steps, jnp.full((num_steps, 4), torque), environment=env
        )
        return traj.states.base_position[-1, 0]

    # jit == eager on the loads.
    params = _parameters(12.0)
    env = sw.wheel_environment(model, wheels, sc.Plane(), params)
    state = eqx.tree_at(lambda s: s.qd, _rolling_start(model, 0.3), jnp.asarray([1.0, 2.0, 3.0, 2.5]))
    eager, jitted = env(0.0, state), eqx.filter_jit(env)(0.0, state)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)  # same operations, compiled
    # vmap over initial speeds == one by one.
    speeds = jnp.asarray([0.2, 0.4])
    batched = jax.vmap(lambda v: distance(2.0, MU, speed=v))(speeds)
    single = jnp.stack([distance(2.0, MU, speed=v) for v in speeds])
    np.testing.assert_allclose(batched, single, rtol=1e-12)
    # Gradients of the distance in the torque, the friction coefficient (high torque, so traction
    # depends on mu) and the rolling-resistance coefficient against central differences.
    torque, friction, rolling = 8.0, 0.3, 0.05
    grad = jax.grad(distance, argnums=(0, 1, 2))(torque, friction, rolling)
    h = 1e-4
    fd_torque = (distance(torque + h, friction, rolling) - distance(torque - h, friction, rolling)) / (2 * h)
    fd_friction = (distance(torque, friction + h, rolling) - distance(torque, friction - h, rolling)) / (2 * h)
    fd_rolling = (distance(torque, friction, rolling + h) - distance(torque, friction, rolling - h)) / (2 * h)
    # Central differences err by h^2 |f'''| / 6 (~1e-9 relative here) plus round-off 1e-16 / h.
    np.testing.assert_allclose(grad[0], fd_torque, rtol=1e-6)
    np.testing.assert_allclose(grad[1], fd_friction, rtol=1e-6)
    np.testing.assert_allclose(grad[2], fd_rolling, rtol=1e-6)
    # Not trivially zero (the saturated traction makes the torque's effect small: the wheels spin;
    # the couple slows the spinning wheels towards the traction peak, so here it helps: > 0).
    assert abs(float(grad[0])) > 1e-5 and abs(float(grad[1])) > 1e-3 and float(grad[2]) > 1e-4


# ------------------------------------------------------------------------------------------
# Builder and errors.


def test_wheeled_rover_builder():
    model, wheels = wheeled_rover()
    assert model.num_joints == 4 and wheels.joints == (1, 2, 3, 4)
    np.testing.assert_allclose(_mass(model), 48.0)
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    np.testing.assert_allclose(kin.joint_position[:, 2], -0.1)
    np.testing.assert_allclose(kin.joint_axis, np.tile([0.0, 1.0, 0.0], (4, 1)), atol=1e-15)
    six, six_wheels = wheeled_rover(axles=(0.4, 0.0, -0.4))
    assert six.num_joints == 6 and six_wheels.num_wheels == 6 and six.link_names[2] == "wheel_middle_left"
    with pytest.raises(ValueError, match="at least one axle"):
        wheeled_rover(axles=())
    with pytest.raises(ValueError, match="must be positive"):
        wheeled_rover(wheel_radius=0.0)


def test_bad_input_raises():
    model, wheels = wheeled_rover()
    params = _parameters(12.0)
    with pytest.raises(ValueError, match="non-empty flat sequence"):
        sw.Wheels([], 0.1)
    with pytest.raises(ValueError, match="distinct and >= 1"):
        sw.Wheels([0, 1], 0.1)
    with pytest.raises(ValueError, match="distinct and >= 1"):
        sw.Wheels([1, 1], 0.1)
    with pytest.raises(ValueError, match=r"radii: expected a scalar or shape \(2,\)"):
        sw.Wheels([1, 2], [0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="radii: must be positive"):
        sw.Wheels([1], -0.1)
    with pytest.raises(ValueError, match="out of range"):
        sw.wheel_environment(model, sw.Wheels([5], 0.1), sc.Plane(), params)
    lander = sdjax.models.lander()
    with pytest.raises(ValueError, match="must be revolute"):
        sw.wheel_environment(lander, sw.Wheels([1], 0.1), sc.Plane(), params)
    with pytest.raises(TypeError, match="terrain: expected"):
        sw.wheel_environment(model, wheels, "ground", params)
    with pytest.raises(TypeError, match="formula: expected a sdjax.wheels.MagicFormula, got str"):
        sw.wheel_environment(model, wheels, sc.Plane(), params, formula="pacejka")
    with pytest.raises(ValueError, match="WheelDrive"):
        sw.wheel_environment(model, wheels, sc.Plane(), params, drive=2.0)
    with pytest.raises(ValueError, match=r"WheelDrive.speed: expected a scalar or shape \(4,\)"):
        sw.wheel_environment(model, wheels, sc.Plane(), params, drive=sw.WheelDrive([1.0, 2.0], 1.0))
    with pytest.raises(ValueError, match="rolling_resistance: must be non-negative"):
        sw.wheel_environment(model, wheels, sc.Plane(), params, rolling_resistance=-0.01)
    with pytest.raises(ValueError, match=r"rolling_resistance: expected a scalar or shape \(4,\)"):
        sw.wheel_diagnostics(model, sdjax.make_state(model), wheels, sc.Plane(), params, rolling_resistance=[0.1, 0.1])
    with pytest.raises(ValueError, match="WheelDrive.gain: must be positive"):
        sw.WheelDrive(1.0, 0.0)
    with pytest.raises(ValueError, match="stiffness_factor: must be positive"):
        sw.MagicFormula(0.0)
    with pytest.raises(ValueError, match="shape_factor: must be positive"):
        sw.MagicFormula(10.0, -1.0)
    with pytest.raises(ValueError, match="curvature_factor: must be below 1"):
        sw.MagicFormula(10.0, 1.5, 1.0)
