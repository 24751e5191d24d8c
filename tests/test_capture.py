"""Capture of a free-floating target and virtual cuts (sdjax.capture).

Checks physics identities (momentum conservation of the pair, energy dissipation, the cut's
compliance ~1/K) and errors; no expected value is taken from the code under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import capture as cp
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.models.target import TARGET_HANDLE_OFFSET, tumbling_target

Q0 = np.array([0.4, -0.9, 0.7])


def _three_link_arm():
    """A 100 kg servicer with a spatial 3-joint arm (z, y, y axes), 1.2 m reach, end point at the tip."""
    joints = np.array([[0.5, 0.0, 0.3], [0.5, 0.0, 0.5], [1.0, 0.0, 0.5]])
    tip = np.array([1.5, 0.0, 0.5])
    centroids = np.array([[0.5, 0.0, 0.4], [0.75, 0.0, 0.5], [1.25, 0.0, 0.5]])
    return model_from_reference_pose(
        parent=(0, 1, 2),
        joint_type="RRR",
        joint_axis=[[0, 0, 1], [0, 1, 0], [0, 1, 0]],
        joint_position=joints,
        link_centroid=centroids,
        link_mass=[4.0, 6.0, 5.0],
        link_inertia=[np.diag([0.05, 0.05, 0.03]), np.diag([0.02, 0.15, 0.15]), np.diag([0.02, 0.12, 0.12])],
        base_mass=100.0,
        base_inertia=np.diag([12.0, 15.0, 10.0]),
        end_point_link=(3,),
        end_point_position=tip[None],
        name="servicer3",
    )


@pytest.fixture(scope="module")
def system():
    robot, target = _three_link_arm(), tumbling_target(mass=60.0, inertia=np.diag([6.0, 8.0, 9.0]))
    return robot, target


def _cut(robot, stiffness=2.0e4, damping=200.0, rotational_stiffness=500.0, rotational_damping=5.0):
    return cp.VirtualCut(
        cp.BodyFrame.end_point(robot),
        cp.BodyFrame(0, TARGET_HANDLE_OFFSET),
        stiffness,
        damping,
        rotational_stiffness,
        rotational_damping,
    )


def _initial(robot, target, cut, spin=(0.2, -0.1, 0.3)):
    robot_state = sdjax.make_state(robot, q=Q0, base_linear_velocity=[0.01, 0.0, -0.02])
    target_state = cp.place_target(
        robot, robot_state, target, cut, angular_velocity=spin, handle_velocity=[0.02, -0.01, 0.0]
    )
    return cp.PairState(robot_state, target_state)


def test_momentum_conserved_and_target_detumbled(system):
    robot, target = system
    cut = _cut(robot)
    pair = _initial(robot, target, cut)
    law = cp.DetumbleLaw(robot, kp=30.0, kd=2.0, q_hold=Q0, linear_damping=20.0, angular_damping=5.0)
    traj = cp.pair_rollout(robot, target, cut, pair, 2e-3, 3000, law)
    p, h = jax.vmap(lambda s: cp.pair_momentum(robot, target, s))(traj.states)
    p, h = np.asarray(p), np.asarray(h)
    assert np.abs(p[0]).max() > 0.5 and np.abs(h[0]).max() > 0.5  # a real, tumbling case
    # The cut's loads cancel exactly and the arm torques are internal: the only drift is RK4's
    # (momentum is not a linear invariant of the state): ~1e-12 measured, 1e-9 relative allowed.
    np.testing.assert_allclose(p, np.broadcast_to(p[0], p.shape), atol=1e-9 * np.abs(p[0]).max())
    np.testing.assert_allclose(h, np.broadcast_to(h[0], h.shape), atol=1e-9 * np.abs(h[0]).max())
    relative = np.linalg.norm(
        np.asarray(traj.states.target.base_angular_velocity - traj.states.robot.base_angular_velocity), axis=1
    )
    # Detumbling: the target's rotation relative to the servicer decays (6 s, time constant ~1 s).
    assert relative[-200:].max() < 0.05 * relative[0]
    error, angle = jax.vmap(lambda s: cp.cut_error(robot, target, cut, s))(traj.states)
    assert float(jnp.max(error)) < 5e-3 and float(jnp.max(angle)) < 5e-2  # the grasp holds (measured 4e-4 m, 0.02 rad)


@pytest.mark.slow  # ~45 s (compile of the vmapped pair rollout)
def test_energy_conserved_without_damping_and_dissipated_with_it(system):
    robot, target = system

    def energies(damping, rotational_damping):
        cut = _cut(robot, damping=damping, rotational_damping=rotational_damping)
        traj = cp.pair_rollout(robot, target, cut, _initial(robot, target, cut), 1e-3, 1500)
        return jax.vmap(lambda s: cp.pair_energy(robot, target, cut, s))(traj.states)

    e = np.asarray(jax.vmap(energies)(jnp.asarray([0.0, 200.0]), jnp.asarray([0.0, 5.0])))
    # No damping: the cut is a conservative spring; RK4 at w dt <= 0.15 drifts ~1e-8 relative.
    np.testing.assert_allclose(e[0], e[0, 0], rtol=1e-6)
    # Damping: energy never increases (RK4 truncation allowance 1e-9 of the energy) and is lost.
    assert np.all(np.diff(e[1]) <= 1e-9 * e[1, 0])
    assert e[1, -1] < 0.99 * e[1, 0]  # 5.5 % lost in 1.5 s (measured)


@pytest.mark.slow  # ~30 s
def test_cut_violation_falls_with_stiffness(system):
    """The arm swings the grasped target with a joint PD law: the cut carries the load and
    opens by ~F / K, so its violation falls about tenfold per tenfold stiffness."""
    robot, target = system
    law = sdjax.JointPD(kp=200.0, kd=40.0, reference=Q0 + np.array([0.3, 0.2, -0.3]))
    stiffness = jnp.asarray([1.0e3, 1.0e4, 1.0e5])

    def violation(k):
        cut = _cut(
            robot,
            stiffness=k,
            damping=2 * 0.7 * jnp.sqrt(k * 20.0),
            rotational_stiffness=k / 40.0,
            rotational_damping=2 * 0.7 * jnp.sqrt(k / 40.0 * 0.2),
        )
        pair = _initial(robot, target, cut, spin=(0.0, 0.0, 0.0))
        traj = cp.pair_rollout(robot, target, cut, pair, 5e-4, 2000, lambda t, s: law(t, s.robot))
        error, angle = jax.vmap(lambda s: cp.cut_error(robot, target, cut, s))(traj.states)
        return jnp.max(error), jnp.max(angle)

    error, angle = (np.asarray(x) for x in jax.vmap(violation)(stiffness))
    assert np.all(np.isfinite(error)) and error[0] < 0.2  # bounded even at the softest cut
    # ~1/K for a static load; the transient (damping scaled with sqrt(K)) gives less per decade
    # (measured 3x from 1e3 to 1e4 N/m): require a monotonic fall and 5x over two decades.
    assert error[0] > error[1] > error[2] and error[2] < 0.2 * error[0]
    assert angle[0] > angle[1] > angle[2] and angle[2] < 0.2 * angle[0]


@pytest.mark.slow  # ~28 s (compile)
def test_closed_chain_in_one_system_conserves_momentum():
    """A cut inside one system (the arm's tip tied to a point of the base) closes a chain; the
    joint torques fight it, the cut holds and the momentum of the free-floating system stays."""
    robot = _three_link_arm()
    state = sdjax.make_state(robot, q=Q0, base_angular_velocity=[0.02, -0.01, 0.03])
    kin = sdjax.forward_kinematics(robot, state)
    tip_in_base = np.asarray(kin.rotation[0].T @ (kin.end_point_position[0] - kin.centroid[0]))
    tip_rotation = np.asarray(kin.rotation[0].T @ kin.end_point_rotation[0])
    cut = cp.VirtualCut(
        cp.BodyFrame.end_point(robot), cp.BodyFrame(0, tip_in_base, tip_rotation), 1.0e5, 500.0, 2.0e3, 10.0
    )
    env = cp.closed_chain_environment(robot, cut)
    law = sdjax.JointPD(kp=50.0, kd=5.0, reference=Q0 + 0.3)
    traj = sdjax.rollout(robot, state, 5e-4, 2000, law, environment=env)
    p = np.asarray(jax.vmap(lambda s: sdjax.linear_momentum(robot, s))(traj.states))
    h = np.asarray(jax.vmap(lambda s: sdjax.angular_momentum(robot, s))(traj.states))
    # Internal loads only: RK4 drift ~1e-13; 1e-10 absolute on momenta of order 1.
    np.testing.assert_allclose(p, np.broadcast_to(p[0], p.shape), atol=1e-10)
    np.testing.assert_allclose(h, np.broadcast_to(h[0], h.shape), atol=1e-10)
    on_a, on_b, loads = jax.vmap(lambda s: cp.cut_loads(robot, s, robot, s, cut))(traj.states)
    # PD torque ~15 N m over ~1 m of arm: ~15 N through the cut, opening it by ~1.5e-4 m.
    assert float(jnp.max(jnp.linalg.norm(loads.position_error, axis=-1))) < 1e-3


def test_bad_inputs_raise(system):
    robot, target = system
    handle = cp.BodyFrame(0, TARGET_HANDLE_OFFSET)
    with pytest.raises(ValueError, match="stiffness: must be positive"):
        cp.VirtualCut(cp.BodyFrame.end_point(robot), handle, -1.0)
    with pytest.raises(ValueError, match="damping: must be non-negative"):
        cp.VirtualCut(cp.BodyFrame.end_point(robot), handle, 1.0, -1.0)
    with pytest.raises(ValueError, match="body index out of range"):
        cp.BodyFrame(-1)
    with pytest.raises(ValueError, match="end point 2 out of range"):
        cp.BodyFrame.end_point(robot, 2)
    bad = cp.VirtualCut(cp.BodyFrame(7), handle, 1.0)
    state = sdjax.make_state(robot, q=Q0)
    with pytest.raises(ValueError, match="body index 7 out of range"):
        cp.cut_loads(robot, state, target, sdjax.make_state(target), bad)
    with pytest.raises(ValueError, match="body index 7 out of range"):
        cp.closed_chain_environment(robot, bad)
    with pytest.raises(ValueError, match="must be on the target's base"):
        cp.place_target(robot, state, robot, cp.VirtualCut(cp.BodyFrame.end_point(robot), cp.BodyFrame(1), 1.0))
    with pytest.raises(ValueError, match="num_steps"):
        cp.pair_rollout(robot, target, _cut(robot), _initial(robot, target, _cut(robot)), 1e-3, -1)
    with pytest.raises(ValueError, match="q_hold"):
        cp.DetumbleLaw(robot, 1.0, 1.0, np.zeros(2))
