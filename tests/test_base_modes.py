"""Base modes (``Model(base="floating" | "planar" | "fixed")``): physics and identities.

The numbers themselves are checked against Pinocchio (test_pinocchio.py: PX-PY-RZ and universe
bases), MuJoCo (test_mujoco.py: slides and hinge, jointless base), Pinocchio's fixed-base URDF
parse (test_urdf.py) and the NumPy SpaceDyn oracle (test_spacedyn_compat.py). Here: what the
constraints imply (conserved momentum components, energy, the base staying in its plane), the
reduced coordinates against the floating-base equations, derivatives, and the doors.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import sdjax
from sdjax.models import random_model
from sdjax.model import floating_coordinates, free_coordinates
from helpers import assert_close, random_state


def _model(base: str, seed: int = 5, n: int = 6, **kwargs) -> sdjax.Model:
    return sdjax.edit_model(random_model(seed, n, gravity=True, **kwargs), base=base)


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_reduced_equations_are_the_floating_ones_restricted(base):
    """``H_r = H[idx][:, idx]``, ``c_r = c[idx]``, and the reduced forward dynamics solves the
    floating equations with a constraint force that only acts on the fixed components: the
    floating residual ``H a + c - f`` at the reduced solution vanishes on the free rows."""
    model = _model(base)
    floating = sdjax.edit_model(model, base="floating")
    state = random_state(model, 1)
    idx = model.velocity_indices
    h_full = np.asarray(sdjax.inertia_matrix(floating, state))
    np.testing.assert_array_equal(np.asarray(sdjax.inertia_matrix(model, state)), h_full[np.ix_(idx, idx)])
    c_full = np.asarray(sdjax.bias_forces(floating, state))
    np.testing.assert_array_equal(np.asarray(sdjax.bias_forces(model, state)), c_full[idx])
    rng = np.random.default_rng(0)
    tau, force, torque = rng.normal(size=model.num_joints), rng.normal(size=3), rng.normal(size=3)
    base_acc, qdd = sdjax.forward_dynamics(model, state, tau, base_force=force, base_torque=torque)
    acc = np.concatenate([np.asarray(base_acc), np.asarray(qdd)])
    residual = (
        h_full @ acc
        + c_full
        - np.concatenate([force, torque, tau + np.asarray(sdjax.passive_joint_torques(model, state))])
    )
    # The constraint (bearing or mount) force lives on the fixed rows only: the free rows of the
    # residual are round-off of the solve, ~cond(H) * eps of the largest term (cond ~ 1e3).
    assert_close(residual[idx], np.zeros(len(idx)), 1e-10, "free rows of the floating residual")
    assert np.all(np.delete(acc, idx) == 0)
    # The same through the public generalized coordinates.
    nu_dot = np.asarray(sdjax.generalized_acceleration(model, state, sdjax.make_controls(model, tau, force, torque)))
    np.testing.assert_allclose(nu_dot, acc[idx], rtol=0, atol=1e-12 * np.max(np.abs(acc)))
    # Inverse dynamics inverts it, joint torques and the free base wrench components alike.
    wrench, tau_back = sdjax.inverse_dynamics(model, state, base_acc, qdd)
    free = np.concatenate([np.asarray(wrench), np.asarray(tau_back)])[idx]
    expected = np.concatenate([force, torque, tau])[idx]
    assert_close(free, expected, 1e-10, "inverse dynamics of the forward solution")  # cond(H) * eps


def test_planar_base_keeps_its_plane_and_conserved_momenta():
    """Under gravity along z (carried by the bearing) and no applied loads, a planar base stays
    in its plane with its tilt unchanged, and ``P_x``, ``P_y``, ``L_z`` are conserved; the
    other components are not (the bearing acts on them)."""
    model = sdjax.edit_model(random_model(7, 5, gravity=False), base="planar", gravity=[0.0, 0.0, -9.81])
    start = random_state(model, 3)
    trajectory = sdjax.rollout(model, start, 0.002, 500)
    states = trajectory.states
    np.testing.assert_array_equal(np.asarray(states.base_position[:, 2]), float(start.base_position[2]))
    np.testing.assert_array_equal(np.asarray(states.base_linear_velocity[:, 2]), 0.0)
    np.testing.assert_array_equal(np.asarray(states.base_angular_velocity[:, :2]), 0.0)
    # The attitude turns about z only: A0(t) A0(0)^T is a rotation about z, so its z column and
    # row are e_z (to the quaternion normalisation's round-off per step, ~1e-16 x 500).
    turn = np.einsum(
        "tij,kj->tik",
        np.asarray(jax.vmap(lambda q: sdjax.rotation.quat_to_matrix(q))(states.base_quaternion)),
        np.asarray(start.base_rotation),
    )
    np.testing.assert_allclose(turn[:, :, 2], np.broadcast_to([0.0, 0.0, 1.0], (turn.shape[0], 3)), atol=1e-12)
    momentum = jax.vmap(lambda s: jnp.concatenate([sdjax.linear_momentum(model, s), sdjax.angular_momentum(model, s)]))(
        states
    )
    momentum = np.asarray(momentum)
    scale = np.max(np.abs(momentum))
    # RK4 at 2 ms on a ~1 s motion conserves invariants to ~dt^4 relative; 1e-8 of the scale.
    for k in (0, 1, 5):
        assert np.max(np.abs(momentum[:, k] - momentum[0, k])) < 1e-8 * scale, f"momentum component {k}"
    assert np.max(np.abs(momentum[:, 2] - momentum[0, 2])) > 1e-3 * scale  # P_z is not conserved (gravity, bearing)
    # Energy (kinetic + potential) is conserved: the bearing does no work.
    energy = np.asarray(jax.vmap(lambda s: sdjax.kinetic_energy(model, s) + sdjax.potential_energy(model, s))(states))
    assert np.max(np.abs(energy - energy[0])) < 1e-8 * np.max(np.abs(energy))


def test_fixed_base_energy_and_mount_reaction():
    """A fixed-base arm under gravity conserves kinetic + potential energy (the mount does no
    work), and the mount reaction equals the rate of change of the system momentum minus the
    weight: ``F0 = dP/dt - M g`` (Newton's law for the whole system)."""
    model = _model("fixed", seed=8, n=5)
    start = random_state(model, 4)
    states = sdjax.rollout(model, start, 0.001, 400).states
    assert np.all(np.asarray(states.base_position) == np.asarray(start.base_position))
    energy = np.asarray(jax.vmap(lambda s: sdjax.kinetic_energy(model, s) + sdjax.potential_energy(model, s))(states))
    # RK4 at 1 ms: energy drift ~dt^4 relative; 1e-9 of the energy's size.
    assert np.max(np.abs(energy - energy[0])) < 1e-9 * np.max(np.abs(energy))
    # dP/dt by central differences of the momentum along the trajectory (h = 1 ms: error ~h^2
    # |d^3 P/dt^3| ~ 1e-6 of the force scale) against the mount force from inverse dynamics.
    k = 200
    momentum = [np.asarray(sdjax.linear_momentum(model, jax.tree.map(lambda x: x[j], states))) for j in (k - 1, k + 1)]
    dpdt = (momentum[1] - momentum[0]) / 0.002
    state = jax.tree.map(lambda x: x[k], states)
    _, qdd = sdjax.forward_dynamics(model, state)
    wrench, _ = sdjax.inverse_dynamics(model, state, None, qdd)
    weight = float(model.total_mass) * np.asarray(model.gravity)
    assert_close(np.asarray(wrench[:3]), dpdt - weight, 1e-5, "mount force")


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_generalized_jacobian_per_mode(base):
    """Planar: with zero planar momentum the base moves as ``base_twist_from_joint_rates``
    says, and ``J* qd`` is the end-point velocity ``J nu``; fixed: ``J* = J_m``, ``H* = H_m``."""
    model = _model(base, seed=9, n=6, end_point_probability=1.0)
    state = random_state(model, 2)
    jac = np.asarray(sdjax.end_point_jacobians(model, state))
    gj = np.asarray(sdjax.end_point_generalized_jacobians(model, state))
    if base == "fixed":
        np.testing.assert_array_equal(gj, jac)
        np.testing.assert_array_equal(
            np.asarray(sdjax.generalized_inertia_matrix(model, state)), np.asarray(sdjax.inertia_matrix(model, state))
        )
        assert np.all(np.asarray(sdjax.base_twist_from_joint_rates(model, state)) == 0)
        return
    moving = sdjax.with_momentum(model, state)  # zero P_x, P_y, L_z
    momentum = np.asarray(sdjax.system_momentum(model, moving))
    assert np.max(np.abs(momentum[[0, 1, 5]])) < 1e-12 * max(1.0, np.max(np.abs(momentum)))
    nu = np.asarray(sdjax.generalized_velocity(model, moving))
    assert_close(gj @ np.asarray(moving.qd), jac @ nu, 1e-12, "J* qd")  # products of O(1) terms
    # The planar H* is the Schur complement of the 3 x 3 planar base block.
    h = np.asarray(sdjax.inertia_matrix(model, state))
    expected = h[3:, 3:] - h[3:, :3] @ np.linalg.solve(h[:3, :3], h[:3, 3:])
    assert_close(sdjax.generalized_inertia_matrix(model, state), expected, 1e-12, "H*")
    # Reduced forward dynamics (eq 44 restricted to the plane) agrees with the full solve.
    tau = np.random.default_rng(1).normal(size=model.num_joints)
    base_acc, qdd = sdjax.reduced_forward_dynamics(model, moving, tau)
    base_ref, qdd_ref = sdjax.forward_dynamics(model, moving, tau)
    assert_close(
        np.concatenate([base_acc, qdd]), np.concatenate([base_ref, qdd_ref]), 1e-10, "reduced forward dynamics"
    )


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_gradients_through_the_reduced_dynamics(base):
    """Forward- and reverse-mode derivatives of the reduced forward dynamics (implicit-function
    rule through the reduced factor) against finite differences, in the state and the masses."""
    model = _model(base, seed=11, n=4)
    state = random_state(model, 6)
    tau = jnp.asarray(np.random.default_rng(2).normal(size=model.num_joints))

    def acceleration(q, qd, link_mass, tau):
        masses = eqx.tree_at(lambda m: m.link_mass, model, link_mass)
        s = sdjax.State(
            state.base_position, state.base_quaternion, state.base_linear_velocity, state.base_angular_velocity, q, qd
        )
        base_acc, qdd = sdjax.forward_dynamics(masses, s, tau)
        return free_coordinates(model, jnp.concatenate([base_acc, qdd]))

    # Finite-difference check in float64 (step ~1e-6 by check_grads' eps): second-order error.
    check_grads(
        acceleration, (state.q, state.qd, model.link_mass, tau), order=1, modes=("fwd", "rev"), eps=1e-6, rtol=1e-5
    )


def test_doors():
    model = _model("fixed", n=3)
    with pytest.raises(ValueError, match=r"make_state: the fixed base of model .* cannot move along v0_x, w0_z"):
        sdjax.make_state(model, base_linear_velocity=[1.0, 0, 0], base_angular_velocity=[0, 0, 2.0])
    planar = sdjax.edit_model(model, base="planar")
    with pytest.raises(ValueError, match="cannot move along v0_z"):
        sdjax.make_state(planar, base_linear_velocity=[1.0, 2.0, 0.5])
    sdjax.make_state(planar, base_linear_velocity=[1.0, 2.0, 0.0], base_angular_velocity=[0, 0, 1.0])  # fine
    with pytest.raises(
        Exception, match=r"inverse_dynamics: the planar base cannot accelerate along dv0_z/dt, dw0_x/dt, dw0_y/dt"
    ):
        sdjax.inverse_dynamics(planar, sdjax.make_state(planar), [0, 0, 1.0, 0, 0, 0])
    moving = sdjax.State(
        *(jnp.ones(3), jnp.array([0.0, 0, 0, 1]), jnp.ones(3), jnp.zeros(3), jnp.zeros(3), jnp.zeros(3))
    )
    with pytest.raises(
        Exception, match="rollout: initial_state: the fixed base .* cannot move along v0_x, v0_y, v0_z, w0_x"
    ):
        sdjax.rollout(model, moving, 0.01, 2)
    with pytest.raises(
        ValueError, match=r"Model.base: unknown base mode 'hovering'; choose one of \['floating', 'planar', 'fixed'\]"
    ):
        sdjax.edit_model(model, base="hovering")
    with pytest.raises(ValueError, match=r"Model.base_mass: mass must be positive for a planar base.*base='fixed'"):
        sdjax.edit_model(model, base="planar", base_mass=0.0)
    massless = sdjax.edit_model(model, base_mass=0.0, base_inertia=np.zeros((3, 3)))  # a world root
    assert massless.base == "fixed" and float(massless.base_mass) == 0.0
    with pytest.raises(TypeError, match=r"edit_model: unknown field\(s\) \['mass'\]"):
        sdjax.edit_model(model, mass=1.0)
    with pytest.raises(ValueError, match="static data.*inertia_check, base or mimic_leader"):
        sdjax.stack_models([model, planar])


def test_json_round_trip_keeps_the_mode(tmp_path):
    for base in ("planar", "fixed"):
        model = _model(base, n=3)
        path = tmp_path / f"{base}.json"
        sdjax.save_json_model(model, path)
        back = sdjax.load_model(path)
        assert back.base == base
        np.testing.assert_array_equal(np.asarray(back.link_inertia), np.asarray(model.link_inertia))
        # load_model's reader options override the file (and refuse what a format cannot take).
        assert sdjax.load_model(path, base="floating").base == "floating"
        with pytest.raises(ValueError, match="end_points selects URDF links"):
            sdjax.load_model(path, end_points=["x"])


def test_floating_coordinates_inverts_free_coordinates():
    for base in ("floating", "planar", "fixed"):
        model = _model(base, n=3)
        x = jnp.arange(model.num_velocities, dtype=jnp.float64) + 1.0
        full = floating_coordinates(model, x)
        assert full.shape == (9,)
        np.testing.assert_array_equal(np.asarray(free_coordinates(model, full)), np.asarray(x))
        assert np.count_nonzero(np.asarray(full)) == model.num_velocities


# ------------------------------------------------------------------------------------------
# The feature layer per base mode: control, Lagrangian oracle, identification, exporters.


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_computed_torque_gives_the_commanded_acceleration(base):
    """With the exact model, ``tau = H~ u + C~`` makes the plant's joints accelerate at ``u``:
    with the measured base twist for any state, and with eq 109's for a state that carries the
    given momentum (zero ``P_x, P_y, L_z`` for a planar base)."""
    model = _model(base, seed=3, n=5)
    state = random_state(model, 4)
    u = jnp.asarray(np.random.default_rng(5).normal(size=model.num_joints))
    scale = float(np.max(np.abs(u)))
    for momentum, s in (("measured", state), (None, sdjax.with_momentum(model, state))):
        tau = sdjax.computed_torque(model, s, u, momentum=momentum)
        _, qdd = sdjax.forward_dynamics(model, s, tau)
        assert_close(qdd, u, 1e-10 * scale, f"qdd for momentum={momentum}")  # two solves, cond(H) ~ 1e3
    h, c = sdjax.computed_torque_terms(model, state, base="fixed")
    nb = model.num_base_velocities
    assert_close(h, np.asarray(sdjax.inertia_matrix(model, state))[nb:, nb:], 1e-14, "H_m")  # same numbers


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_task_jacobian_and_reaction_null_space(base):
    """The task Jacobian and offset give the end-point velocity ``J nu`` of a state that
    carries the momentum; joint rates from the reaction-null-space projector leave the base
    angular velocity at zero (planar: rank ``n - 1``, the yaw row; fixed: ``P = E``)."""
    model = _model(base, seed=7, n=6, end_point_probability=1.0)
    state = random_state(model, 8)
    momentum = np.array([0.3, -0.2, 0.0, 0.0, 0.0, 0.4])  # only the conserved components count
    moving = sdjax.with_momentum(model, state, momentum)
    jac, offset = sdjax.task_jacobian(model, moving, momentum=momentum)
    velocity = np.asarray(sdjax.end_point_jacobians(model, moving))[0] @ np.asarray(
        sdjax.generalized_velocity(model, moving)
    )
    assert_close(np.asarray(jac) @ np.asarray(moving.qd) + np.asarray(offset), velocity, 1e-12, "task velocity")
    projector = np.asarray(sdjax.reaction_null_space_projector(model, state))
    n = model.num_joints
    assert round(float(np.trace(projector))) == (n - 1 if base == "planar" else n)
    qd = projector @ np.random.default_rng(9).normal(size=n)
    twist = np.asarray(sdjax.base_twist_from_joint_rates(model, state, qd))
    assert np.max(np.abs(twist[3:])) < 1e-12, twist  # G P = 0 to round-off


def test_floating_inverse_kinematics_on_a_planar_base():
    """Zero-momentum IK of a planar system: the base turns about z only, keeps its height,
    and the centre of mass keeps its x, y; the target is reached."""
    model = _model("planar", seed=2, n=6, end_point_probability=1.0)
    state = sdjax.make_state(model, q=np.full(model.num_joints, 0.3))
    start, _ = sdjax.task_pose(model, state)
    target = np.asarray(start) + np.array([0.05, -0.04, 0.03])
    result = sdjax.inverse_kinematics(model, state, target, base="floating", max_iterations=200)
    assert bool(result.converged)
    reached = result.state
    assert abs(float(reached.base_position[2] - state.base_position[2])) == 0.0
    np.testing.assert_allclose(np.asarray(reached.base_quaternion)[:2], 0.0, atol=1e-14)  # no roll or pitch
    com0, com1 = np.asarray(sdjax.center_of_mass(model, state)), np.asarray(sdjax.center_of_mass(model, reached))
    assert_close(com1[:2], com0[:2], 1e-12, "centre of mass x, y")  # solved exactly each step
    assert float(np.asarray(reached.base_quaternion)[2]) != 0.0  # the base did turn


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_lagrangian_oracle_per_mode(base):
    """The autodiff Lagrangian in the free coordinates equals the recursive inertia matrix and
    bias (an independent route: position kinematics and energies only)."""
    model = _model(base, seed=13, n=5)
    state = random_state(model, 14)
    terms = sdjax.lagrangian_terms(model, state)
    h = np.asarray(sdjax.inertia_matrix(model, state))
    assert terms.inertia.shape == (model.num_velocities,) * 2
    assert_close(terms.inertia, h, 1e-12, "H")  # sums of O(1) products
    assert_close(terms.bias, sdjax.bias_forces(model, state), 1e-11, "C")  # second derivatives by autodiff
    # dH/dt - 2 C~ is skew-symmetric along the motion (the planar base turns about one axis).
    c_tilde = np.asarray(sdjax.coriolis_matrix(model, state))
    h_dot = np.asarray(
        jax.jvp(lambda s: sdjax.inertia_matrix(model, s), (state,), (_velocity_tangent(model, state),))[1]
    )
    assert_close(h_dot - 2 * c_tilde + (h_dot - 2 * c_tilde).T, np.zeros_like(h), 1e-11, "skew")
    table = sdjax.mass_dependence_table(model, sdjax.mass_parameter_dependence(model, state, kind="floating_base"))
    assert table.splitlines()[2].startswith("| | " + ("v0_x | v0_y | w0_z | q1" if base == "planar" else "q1"))


def _velocity_tangent(model, state):
    """The state tangent of the motion: d(position)/dt from the velocities, zero accelerations."""
    w = state.base_angular_velocity
    quat_dot = sdjax.rotation.quat_rate(state.base_quaternion, w)
    zero = jnp.zeros(3)
    return sdjax.State(state.base_linear_velocity, quat_dot, zero, zero, state.qd, jnp.zeros_like(state.qd))


def test_identification_residuals_on_a_planar_base():
    """A planar test bed under gravity normal to its plane still conserves ``P_x, P_y, L_z``:
    the momentum residual keeps those three rows and vanishes for the true model; the dynamics
    residual keeps the three free base rows; a fixed base has no momentum residual."""
    from sdjax import identification as ident

    model = sdjax.edit_model(_model("planar", seed=4, n=4), gravity=[0.0, 0.0, -9.81])
    state = sdjax.with_momentum(model, random_state(model, 3, scale=0.3))
    times = np.arange(200) * 0.002
    tau = jnp.asarray(0.5 * np.sin(np.outer(times[:-1], np.arange(1, model.num_joints + 1))))
    data = ident.Dataset.from_trajectory(sdjax.rollout(model, state, 0.002, 199, tau))
    unknowns = ident.Unknowns(links=(2,))
    truth = ident.link_parameters(model, (2,))
    momentum = np.asarray(ident.residuals(model, data, unknowns, truth, residual="momentum"))
    assert momentum.shape == (200 * 3,)
    assert np.max(np.abs(momentum)) < 1e-9  # RK4 conserves momentum to round-off per step
    wrong = ident.InertialParameters(truth.mass * 1.3, truth.first_moment * 1.3, truth.inertia * 1.3)
    assert np.max(np.abs(np.asarray(ident.residuals(model, data, unknowns, wrong, residual="momentum")))) > 1e-5
    dynamics = np.asarray(ident.residuals(model, data, unknowns, truth, residual="dynamics"))
    assert dynamics.shape == (199 * model.num_velocities,)
    fixed = sdjax.edit_model(model, base="fixed")
    with pytest.raises(ValueError, match="momentum residual needs a moving base"):
        ident.residuals(fixed, data, unknowns, truth, residual="momentum")


@pytest.mark.parametrize("base", ["planar", "fixed"])
def test_urdf_export_round_trip_keeps_the_mode(base, tmp_path):
    model = _model(base, seed=6, n=4)
    back = sdjax.io.urdf.model_from_urdf(sdjax.model_to_urdf(model))
    assert back.base == base
    state = random_state(model, 1)
    assert_close(sdjax.inertia_matrix(back, state), sdjax.inertia_matrix(model, state), 1e-12, "H after round trip")
    with pytest.raises(
        ValueError, match=f"has a {base} base; SpaceDyn's link parameters describe a free-floating base"
    ):
        sdjax.model_to_def(model)


def test_massless_fixed_base_box_is_a_point():
    from sdjax.plotting import base_box

    model = sdjax.edit_model(_model("fixed", n=3), base_mass=0.0, base_inertia=np.zeros((3, 3)))
    np.testing.assert_array_equal(base_box(model), np.zeros((8, 3)))
