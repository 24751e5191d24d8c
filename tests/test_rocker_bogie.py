"""The rocker-bogie rover (sdjax.models.rocker_bogie_rover) and steering (sdjax.wheels.turn_commands):
the load split the pivots' moment balances give, a differential that lets all six wheels follow
uneven ground, and a steered turn at the yaw rate of the Ackermann geometry.

Expected values are closed forms written out here from the builder's documented geometry and
masses (moment balances of the bogie and the rocker, atan of the turn geometry), never from the
code under test.

Steps (explicit RK4): as in test_wheels.py, the traction law is viscous below the speed scale V
at rate ``mu f_n B C / V`` on a rim point of effective mass ``I_w / r^2 = 1 kg`` (here f_n ~ 46 N
per wheel): at rest with eps = 0.1 m/s that is 4.5e3 /s (RK4-stable below ~6e-4 s: dt = 1e-4
s); moving at V >= 0.15 m/s it is 3.0e3 /s (stable below 9e-4 s: dt = 5e-4 s).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import contact as sc
from sdjax import wheels as sw
from sdjax.models import rocker_bogie_rover

G = 3.711  # Mars, the builder's default
MU = 0.6
STIFFNESS = 2.0e4
R = 0.125  # wheel radius (builder default)
DROP = 0.3 + R  # chassis centroid above the ground when the wheels just touch (hub at -0.3)


def _parameters(slip_velocity):
    mass_per_wheel = 74.0 / 6
    damping = sc.damping_for_ratio(1.0, STIFFNESS, mass_per_wheel)  # critically damped heave
    return sc.ContactParameters(STIFFNESS, damping, friction=MU, slip_velocity=slip_velocity, smoothing=1e-5)


def _settle(model, wheels, terrain, num_steps=5000):
    """Rest on ``terrain`` from the wheels just touching flat ground, 0.5 s at dt = 1e-4 s."""
    params = _parameters(0.1)  # eps = 0.1 m/s: see the module docstring
    state = sdjax.make_state(model, base_position=[0.0, 0.0, DROP - 74.0 * G / 6 / STIFFNESS])
    traj = sdjax.rollout(
        model, state, 1e-4, num_steps, environment=sw.wheel_environment(model, wheels, terrain, params)
    )
    final = jax.tree.map(lambda x: x[-1], traj.states)
    return final, sw.wheel_diagnostics(model, final, wheels, terrain, params)


def test_builder_structure_and_the_differential():
    model, wheels, steering = rocker_bogie_rover()
    assert model.num_joints == 14 and model.num_velocities == 6 + 13  # the right rocker mimics the left
    assert model.mimic_leader[7] == 1 and float(model.mimic_multiplier[7]) == -1.0
    np.testing.assert_allclose(float(model.base_mass + jnp.sum(model.link_mass)), 74.0, rtol=1e-15)
    assert wheels.joints == (3, 10, 5, 12, 7, 14) and steering == (2, 9, 0, 0, 6, 13)
    assert [model.link_names[j - 1] for j in wheels.joints] == [
        f"wheel_{a}_{s}" for a in ("front", "middle", "rear") for s in ("left", "right")
    ]
    # Turning the left rocker by 0.1 rad turns the right one by -0.1 rad (joint 8 follows).
    state = sdjax.make_state(model, q=jnp.zeros(13).at[0].set(0.1))
    np.testing.assert_allclose(float(state.q[7]), -0.1, rtol=1e-15)
    with pytest.raises(ValueError, match="front > rocker_pivot"):
        rocker_bogie_rover(rocker_pivot=0.6)
    with pytest.raises(ValueError, match="wheel_radius=0.0 must be positive"):
        rocker_bogie_rover(wheel_radius=0.0)
    with pytest.raises(ValueError, match="bogie_mass=-1.0 must be positive"):
        rocker_bogie_rover(bogie_mass=-1.0)
    with pytest.raises(ValueError, match="chassis_mass must be positive"):
        rocker_bogie_rover(chassis_size=(1.0, 0.0, 0.2))
    with pytest.raises(ValueError, match="rocker_height > bogie_height > hub_height"):
        rocker_bogie_rover(hub_height=0.5, steering_height=0.6)
    # The differential is a mimic relation: locking one rocker alone is refused, as lock_joints does.
    with pytest.raises(ValueError, match=r"locked_state: joint 1 belongs to a mimic relation \(joints \[1, 8\]\)"):
        sdjax.locked_state(model, state, (1,))
    reduced = sdjax.locked_state(model, state, (1, 8))  # both rockers: their positions from the state
    with pytest.raises(ValueError, match="unlocked_state: positions: joint 8 mimics joint 1, so it locks at -0.1"):
        sdjax.unlocked_state(model, reduced, (1, 8), [0.1, 0.3])
    back = sdjax.unlocked_state(model, reduced, (1, 8), [0.1, -0.1])
    np.testing.assert_allclose(np.asarray(back.q), np.asarray(state.q), rtol=0, atol=0)


def test_rest_loads_follow_the_bogie_and_rocker_moment_balances():
    """On flat ground each side carries half the weight, split among its wheels by (1) the
    bogie's and (2) the rocker's moment balances about their free pivots (no joint torques;
    the chassis centroid lies on the rocker pivot line, so the differential carries no moment)."""
    model, wheels, _ = rocker_bogie_rover()
    final, diag = _settle(model, wheels, sc.Plane())
    loads = np.asarray(diag.normal_force)
    # Builder geometry (x of each body's centroid, m) and masses (kg), per side.
    x_f, x_m, x_r, x_p = 0.5, 0.0, -0.5, 0.0  # wheels, rocker pivot
    x_b = (x_m + x_r) / 2  # bogie pivot
    bogie_subtree = [(2.0, (x_b + x_m + x_r) / 3), (2.0, x_m), (0.5, x_r), (2.0, x_r)]  # bogie, wheel, fork, wheel
    rocker_subtree = [(3.0, (x_p + x_f + x_b) / 3), (0.5, x_f), (2.0, x_f)] + bogie_subtree
    side_weight = 74.0 * G / 2
    a = np.array([[1.0, 1.0, 1.0], [0.0, x_m - x_b, x_r - x_b], [x_f - x_p, x_m - x_p, x_r - x_p]])
    b = np.array(
        [
            side_weight,
            G * sum(m * (x - x_b) for m, x in bogie_subtree),
            G * sum(m * (x - x_p) for m, x in rocker_subtree),
        ]
    )
    front, middle, rear = np.linalg.solve(a, b)
    # Settled to 1e-7 g of residual acceleration (as in test_wheels.py), so sums to 1e-6. The
    # split: the wheels sink by 2.3 mm +- 0.1 mm under unequal loads, tilting rockers and bogies
    # by ~1e-4 rad; lever arms move by that times the 0.15-0.3 m heights (measured 3.6e-5,
    # 7.2e-5 and 1.04e-4 relative on the front, middle and rear wheels): 2e-4.
    np.testing.assert_allclose(loads.sum(), 74.0 * G, rtol=1e-6)
    np.testing.assert_allclose(loads[0::2], loads[1::2], rtol=1e-9)  # left = right by symmetry
    np.testing.assert_allclose(loads[:2], front, rtol=2e-4)
    np.testing.assert_allclose(loads[2:4], middle, rtol=2e-4)
    np.testing.assert_allclose(loads[4:], rear, rtol=2e-4)
    assert float(jnp.abs(final.base_linear_velocity).max()) < 1e-6


def test_all_six_wheels_follow_a_raised_wheel_and_the_chassis_pitches_by_half():
    """The left front wheel on a 5 cm plateau: the left rocker pitches nose-up by
    atan(0.05 / (x_f - x_b)) (its bogie stays on flat ground), the differential turns the right
    rocker the other way relative to the chassis, so the chassis pitches by half of that and
    every wheel keeps its load (a rigid six-wheeler would rock on three or four)."""
    model, wheels, _ = rocker_bogie_rover()
    spacing, height = 0.1, 0.05
    x = np.arange(-1.5, 1.5 + 1e-9, spacing)
    y = np.arange(-1.5, 1.5 + 1e-9, spacing)
    # Plateau where x >= 0.3 and y >= 0.2: flat (bicubic: 4x4 samples) under the left front
    # wheel (x = 0.5, y = 0.5) and at 0 under the others (x <= 0, or y = -0.5).
    z = height * ((x[:, None] >= 0.3 - 1e-9) & (y[None, :] >= 0.2 - 1e-9))
    field = sc.HeightField(z, origin=(x[0], y[0]), spacing=spacing)
    final, diag = _settle(model, wheels, field, num_steps=6000)
    loads = np.asarray(diag.normal_force)
    np.testing.assert_allclose(loads.sum(), 74.0 * G, rtol=1e-5)  # settled (residual ~1e-6 g)
    assert loads.min() > 0.5 * loads.mean()  # every wheel carries load
    rocker_pitch = np.arctan(height / (0.5 - (-0.25)))  # nose up: a rotation about -y
    rotation = np.asarray(final.base_rotation)
    chassis_pitch = np.arctan2(rotation[2, 0], rotation[0, 0])  # nose-up angle of the chassis x axis
    # Unequal sinks (~0.1 mm over 0.5-0.75 m) shift the angles by ~1e-5 rad of 3.3e-2 (measured
    # 1e-4 relative): 2e-3.
    np.testing.assert_allclose(chassis_pitch, rocker_pitch / 2, rtol=2e-3)
    np.testing.assert_allclose(float(final.q[0]), -rocker_pitch / 2, rtol=2e-3)  # about +y: nose down
    np.testing.assert_allclose(float(final.q[7]), rocker_pitch / 2, rtol=2e-3)
    # The same terrain under a rigid six-wheeler of the same wheel layout: it rocks onto the
    # raised wheel and the rear corners (measured loads 94, 0, 0, 0, 1.5, 97 N), three wheels
    # off the ground.
    rigid, rigid_wheels = sdjax.models.wheeled_rover(axles=(0.5, 0.0, -0.5), track=1.0, hub_height=-0.3, wheel_radius=R)
    _, rigid_diag = _settle(rigid, rigid_wheels, field, num_steps=6000)
    assert int(np.sum(np.asarray(rigid_diag.normal_force) < 1e-6 * 74.0 * G)) >= 3


def test_steered_turn_yaws_at_speed_times_curvature():
    """Steering angles and wheel rates from turn_commands (radius 2 m, 0.2 m/s at the middle
    axle), steering held by PD loops, wheels by speed loops: the rover turns at v kappa about the
    point the geometry gives, every wheel rolling with little slip."""
    model, wheels, steering = rocker_bogie_rover()
    kappa, speed = 0.5, 0.2
    angles, rates = sw.turn_commands(model, wheels, steering, kappa, speed)
    # Closed forms of the front-left and middle-left wheels (hubs (0.5, 0.5) and (0, 0.5)).
    np.testing.assert_allclose(float(angles[0]), np.arctan(0.5 * 0.5 / (1 - 0.5 * 0.5)), rtol=1e-14)
    np.testing.assert_allclose(float(rates[2]), speed * (1 - 0.5 * 0.5) / R, rtol=1e-14)
    np.testing.assert_allclose(float(rates[0]), speed * np.hypot(0.5, 2.0 - 0.5) / 2.0 / R, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(angles[4:]), -np.asarray(angles[:2]), rtol=1e-14)  # rear mirrors front
    steer = np.array(steering)
    q0 = jnp.zeros(model.num_joints).at[steer[steer > 0] - 1].set(angles[steer > 0])
    kp = jnp.zeros(model.num_joints).at[steer[steer > 0] - 1].set(100.0)  # N m/rad
    pd = sdjax.JointPD(kp, 0.02 * kp, (q0, jnp.zeros(model.num_joints)))  # ~100 rad/s, critically damped
    wheel_rate = jnp.zeros(model.num_joints).at[np.asarray(wheels.joints) - 1].set(rates)
    state = sdjax.make_state(
        model,
        base_position=[0.0, 0.0, DROP - 74.0 * G / 6 / STIFFNESS],
        base_linear_velocity=[speed, 0.0, 0.0],
        base_angular_velocity=[0.0, 0.0, speed * kappa],
        q=q0[np.asarray(model.independent_joints) - 1],
        qd=wheel_rate[np.asarray(model.independent_joints) - 1],
    )
    params = _parameters(0.02)
    env = sw.wheel_environment(model, wheels, sc.Plane(), params, drive=sw.WheelDrive(rates, 20.0))
    traj = sdjax.rollout(model, state, 5e-4, 4000, pd, environment=env)
    late = jax.tree.map(lambda x: x[-400:], traj.states)  # the last 0.2 s
    yaw_rate = np.asarray(late.base_angular_velocity[:, 2])
    body_velocity = np.einsum("tji,tj->ti", np.asarray(late.base_rotation), np.asarray(late.base_linear_velocity))
    # Centripetal acceleration v^2 kappa = 0.02 m/s^2 needs lateral slip ~ a / (g mu B C) = 3e-4
    # (and the speed loops droop by the longitudinal slip): 3e-3 relative on the yaw rate and
    # the speed.
    np.testing.assert_allclose(yaw_rate, speed * kappa, rtol=3e-3)
    np.testing.assert_allclose(body_velocity[:, 0], speed, rtol=3e-3)
    np.testing.assert_allclose(body_velocity[:, 1], 0.0, atol=3e-3 * speed)  # no drift sideways
    final = jax.tree.map(lambda x: x[-1], traj.states)
    diag = sw.wheel_diagnostics(model, final, wheels, sc.Plane(), params)
    assert float(jnp.abs(diag.slip_angle).max()) < 5e-3  # every wheel rolls where it points
    assert float(jnp.abs(diag.slip_ratio).max()) < 5e-3


def test_turn_commands_straight_mirror_and_refusals():
    model, wheels, steering = rocker_bogie_rover()
    # Under jit (the geometry is read from the concrete model) and in float32 (its round-off on
    # the hub positions is within the geometry tolerance): the float64 values to float32 round-off.
    jitted = jax.jit(lambda k: sw.turn_commands(model, wheels, steering, k, 0.2))(0.5)
    eager = sw.turn_commands(model, wheels, steering, 0.5, 0.2)
    for a, b in zip(jitted, eager):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-14)
    model32, wheels32, _ = rocker_bogie_rover(dtype=jnp.float32)
    single = sw.turn_commands(model32, wheels32, steering, 0.5, 0.2)
    assert single[0].dtype == jnp.float32
    for a, b in zip(single, eager):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)  # float32: eps 1.2e-7
    angles, rates = sw.turn_commands(model, wheels, steering, 0.0, 0.3)
    np.testing.assert_allclose(np.asarray(angles), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.asarray(rates), 0.3 / R, rtol=1e-15)
    left = sw.turn_commands(model, wheels, steering, 0.4, 0.3)
    right = sw.turn_commands(model, wheels, steering, -0.4, 0.3)
    swap = [1, 0, 3, 2, 5, 4]  # a right turn is the left turn seen in a mirror
    np.testing.assert_allclose(np.asarray(right[0]), -np.asarray(left[0])[swap], rtol=1e-14)
    np.testing.assert_allclose(np.asarray(right[1]), np.asarray(left[1])[swap], rtol=1e-14)
    # Differentiable in the curvature: d(delta)/d(kappa) at 0 is the hub's x offset.
    slope = jax.grad(lambda k: sw.turn_commands(model, wheels, steering, k, 0.3)[0][0])(0.0)
    np.testing.assert_allclose(float(slope), 0.5, rtol=1e-14)
    with pytest.raises(ValueError, match="expected 6 joint numbers"):
        sw.turn_commands(model, wheels, steering[:4], 0.1, 0.3)
    with pytest.raises(ValueError, match="inside the track"):
        sw.turn_commands(model, wheels, steering, 2.5, 0.3)
    with pytest.raises(ValueError, match="must turn about the vertical through wheel joint 3"):
        sw.turn_commands(model, wheels, (1, 9, 0, 0, 6, 13), 0.1, 0.3)  # joint 1 is the rocker
    with pytest.raises(ValueError, match="share one axle"):
        sw.turn_commands(model, wheels, (0, 9, 0, 0, 6, 13), 0.1, 0.3)
    rigid, rigid_wheels = sdjax.models.wheeled_rover()
    with pytest.raises(ValueError, match="share one axle"):  # skid steering is not an Ackermann turn
        sw.turn_commands(rigid, rigid_wheels, (0, 0, 0, 0), 0.1, 0.3)
