"""Joint reaction loads (SpaceDyn f_i, n_i) and floating-base inverse dynamics with a given
base wrench (SPART Floating_ID).

Pinocchio's transmitted forces are compared in test_pinocchio.py. Here: the free-body balance
of every subtree (Newton and Euler for the bodies it holds, with accelerations from forward-mode
autodiff of the velocity kinematics, an independent route), the base wrench as the sum of the
loads of the joints on the base (eqs 3.38-3.39), loads of a simulated motion, and
floating_inverse_dynamics against forward dynamics in every base mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import random_model
from sdjax.rotation import quat_rate
from helpers import assert_close, random_state


def _model(base: str, seed: int = 3, n: int = 7) -> sdjax.Model:
    return sdjax.edit_model(random_model(seed, n, gravity=True, passive=True, end_point_probability=0.6), base=base)


def _body_accelerations(model, state, base_acceleration, qdd):
    """Centroid and angular accelerations as the time derivative of the link velocities along
    the motion (forward-mode autodiff)."""
    tangent = sdjax.State(
        state.base_linear_velocity,
        quat_rate(state.base_quaternion, state.base_angular_velocity),
        base_acceleration[:3],
        base_acceleration[3:],
        state.qd,
        qdd,
    )
    _, (linear, angular) = jax.jvp(lambda s: sdjax.link_velocities(model, s), (state,), (tangent,))
    return np.asarray(linear), np.asarray(angular)


def _subtree(model: sdjax.Model, link: int) -> list[int]:
    bodies = [link]
    for child in range(link + 1, model.num_bodies):
        if model.parent[child - 1] in bodies:
            bodies.append(child)
    return bodies


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_every_subtree_balances(base):
    model = _model(base)
    state = random_state(model, 1)
    rng = np.random.default_rng(2)
    acc = np.asarray(sdjax.model.floating_coordinates(model, jnp.asarray(rng.normal(size=model.num_velocities))))
    ne = model.num_end_points
    force_e, torque_e = rng.normal(size=(ne, 3)), rng.normal(size=(ne, 3))
    loads = sdjax.joint_reaction_loads(
        model, state, acc[:6], acc[6:], end_point_force=force_e, end_point_torque=torque_e
    )
    kin = sdjax.forward_kinematics(model, state)
    linear, angular = _body_accelerations(model, state, jnp.asarray(acc[:6]), jnp.asarray(acc[6:]))
    _, omega = (np.asarray(x) for x in sdjax.link_velocities(model, state))
    masses = np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass)])
    inertia_body = np.concatenate([np.asarray(model.base_inertia)[None], np.asarray(model.link_inertia)])
    rotation, centroid = np.asarray(kin.rotation), np.asarray(kin.centroid)
    gravity = np.asarray(model.gravity)
    for i in range(1, model.num_bodies):
        p = np.asarray(kin.joint_position[i - 1])
        force_needed, moment_needed = np.zeros(3), np.zeros(3)
        for b in _subtree(model, i):
            inertia = rotation[b] @ inertia_body[b] @ rotation[b].T
            newton = masses[b] * (linear[b] - gravity)
            force_needed += newton
            moment_needed += (
                np.cross(centroid[b] - p, newton) + inertia @ angular[b] + np.cross(omega[b], inertia @ omega[b])
            )
        for e, link in enumerate(model.end_point_link):
            if link in _subtree(model, i):  # loads applied to the robot help
                force_needed -= force_e[e]
                moment_needed -= torque_e[e] + np.cross(np.asarray(kin.end_point_position[e]) - p, force_e[e])
        # Sums over <= 8 bodies of O(1-100) terms: ~1e-13 absolute round-off.
        assert_close(loads.force[i - 1], force_needed, 1e-12, f"force balance of subtree {i}")
        assert_close(loads.moment[i - 1], moment_needed, 1e-12, f"moment balance of subtree {i}")
    # Eqs 3.38-3.39: the base wrench (about the centroid) gathers the loads of the joints on the
    # base, plus the base's own Newton-Euler terms.
    wrench, _ = sdjax.inverse_dynamics(
        model, state, acc[:6], acc[6:], end_point_force=force_e, end_point_torque=torque_e
    )
    on_base = [i for i in range(1, model.num_bodies) if model.parent[i - 1] == 0]
    r0 = np.asarray(state.base_position)
    inertia0 = rotation[0] @ inertia_body[0] @ rotation[0].T
    f0 = masses[0] * (linear[0] - gravity) + sum(loads.force[i - 1] for i in on_base)
    n0 = (
        inertia0 @ angular[0]
        + np.cross(omega[0], inertia0 @ omega[0])
        + sum(
            loads.moment[i - 1] + np.cross(np.asarray(kin.joint_position[i - 1]) - r0, loads.force[i - 1])
            for i in on_base
        )
    )
    for e, link in enumerate(model.end_point_link):
        if link == 0:
            f0 = f0 - force_e[e]
            n0 = n0 - torque_e[e] - np.cross(np.asarray(kin.end_point_position[e]) - r0, force_e[e])
    assert_close(wrench, np.concatenate([f0, n0]), 1e-12, "base wrench")


def test_loads_of_a_simulated_motion():
    """Forward dynamics then joint loads: the axial components are the applied torques plus the
    passive ones; a static arm under gravity carries the weight of what it holds."""
    model = _model("fixed", seed=5, n=5)
    state = random_state(model, 4)
    tau = np.random.default_rng(3).normal(size=model.num_joints)
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau)
    loads = sdjax.joint_reaction_loads(model, state, base_acc, qdd)
    axial = np.where(np.array(model.joint_type) == "R", loads.moment_joint_frame[:, 2], loads.force_joint_frame[:, 2])
    assert_close(axial, tau + np.asarray(sdjax.passive_joint_torques(model, state)), 1e-12, "axial loads")
    at_rest = sdjax.make_state(model, q=state.q)
    static = sdjax.joint_reaction_loads(model, at_rest)
    for i in range(1, model.num_bodies):
        carried = sum(float(model.link_mass[b - 1]) for b in _subtree(model, i))
        assert_close(static.force[i - 1], -carried * np.asarray(model.gravity), 1e-13, f"weight carried by joint {i}")


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_floating_inverse_dynamics_inverts_forward_dynamics(base):
    model = _model(base, seed=8, n=6)
    state = random_state(model, 6)
    rng = np.random.default_rng(7)
    qdd = rng.normal(size=model.num_joints)
    force, torque = rng.normal(scale=10.0, size=3), rng.normal(scale=10.0, size=3)
    ne = model.num_end_points
    fe, te = rng.normal(size=(ne, 3)), rng.normal(size=(ne, 3))
    if base == "planar":  # the bearing takes the other components; give only the free ones
        force[2] = torque[0] = torque[1] = 0.0
    base_acc, tau = sdjax.floating_inverse_dynamics(
        model, state, qdd, base_force=force, base_torque=torque, end_point_force=fe, end_point_torque=te
    )
    back_acc, back_qdd = sdjax.forward_dynamics(
        model, state, tau, base_force=force, base_torque=torque, end_point_force=fe, end_point_torque=te
    )
    # One Cholesky solve each way, cond(H) ~ 1e3: ~1e-12 relative.
    assert_close(back_qdd, qdd, 1e-10, "joint accelerations")
    assert_close(back_acc, base_acc, 1e-10, "base acceleration")
    if base == "fixed":
        np.testing.assert_array_equal(np.asarray(base_acc), np.zeros(6))
    # Free floating with no base wrench: the base reacts so that the momentum rate is the
    # applied load (zero without gravity or end-point loads).
    if base == "floating":
        free = sdjax.edit_model(model, gravity=np.zeros(3))
        a, _ = sdjax.floating_inverse_dynamics(free, state, qdd)
        _, again = sdjax.forward_dynamics(free, state, sdjax.floating_inverse_dynamics(free, state, qdd)[1])
        assert_close(again, qdd, 1e-10, "free floating")
        assert np.all(np.isfinite(np.asarray(a)))
