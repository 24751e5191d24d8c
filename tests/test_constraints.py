"""Exact holonomic constraints (sdjax.constraints): loop closures, welds, locked joints.

References: a four-bar linkage's closed-form position solution (Freudenstein) and its
one-coordinate Lagrangian written from that solution (no sdjax dynamics); deleting the locked
rows and columns of H; the constraint forces applied as external loads; conservation of
momentum through impacts; the rigid-body closed form after a rigid capture; central finite
differences.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import constraints as C
from sdjax.models import random_model
from helpers import assert_close, central_difference, random_state

# Four-bar: crank a (joint 1 at the origin), coupler b (joint 2 at the crank's tip), rocker c
# (joint 3 on the ground at (d, 0)); the coupler's tip is pinned to the rocker's tip.
A, B, CR, D = 0.3, 0.8, 0.6, 0.7
MASS = np.array([1.0, 2.0, 1.5])
LENGTH = np.array([A, B, CR])
GRAVITY = 9.81


def _rod(mass: float, length: float) -> np.ndarray:
    return np.diag([1e-3 * mass * length**2, mass * length**2 / 12, mass * length**2 / 12])


def four_bar(base: str = "fixed") -> sdjax.Model:
    return sdjax.Model(
        parent=(0, 1, 0),
        joint_type="RRR",
        base_mass=10.0,
        base_inertia=np.eye(3),
        link_mass=MASS,
        link_inertia=np.stack([_rod(m, length) for m, length in zip(MASS, LENGTH)]),
        parent_centroid_to_joint=np.array([[0.0, 0, 0], [A / 2, 0, 0], [D, 0, 0]]),
        centroid_to_joint=np.outer(-LENGTH / 2, [1.0, 0.0, 0.0]),
        end_point_link=(2, 3),
        centroid_to_end_point=np.array([[B / 2, 0, 0], [CR / 2, 0, 0]]),
        end_point_names=("coupler_tip", "rocker_tip"),
        gravity=np.array([0.0, -GRAVITY, 0.0]),
        base=base,
        name="four_bar",
    )


LOOP = (C.point_constraint("coupler_tip", "rocker_tip", axes=("x", "y")),)  # planar: z is not a constraint


def rocker_angle(theta):
    """Freudenstein's closed form: absolute rocker angle for crank angle ``theta`` (one branch)."""
    k1, k2, k3 = D / A, D / CR, (A**2 - B**2 + CR**2 + D**2) / (2 * A * CR)
    a = jnp.cos(theta) - k1 - k2 * jnp.cos(theta) + k3
    b = -2 * jnp.sin(theta)
    c = k1 - (k2 + 1) * jnp.cos(theta) + k3
    return 2 * jnp.arctan2(-b + jnp.sqrt(b**2 - 4 * a * c), 2 * a)


def coupler_angle(theta):
    phi = rocker_angle(theta)
    tip = jnp.array([D + CR * jnp.cos(phi), CR * jnp.sin(phi)])
    return jnp.arctan2(tip[1] - A * jnp.sin(theta), tip[0] - A * jnp.cos(theta))


def joint_positions(theta):
    """The model's q for crank angle ``theta`` (joint 2 is relative to the crank)."""
    return jnp.stack([theta, coupler_angle(theta) - theta, rocker_angle(theta)])


def closed_form_acceleration(theta, theta_dot, tau):
    """theta'' from the one-coordinate Lagrangian ``M(t) t''+ M'(t) t'^2 / 2 + V'(t) = Q``."""
    inertia_z = MASS * LENGTH**2 / 12

    def bodies(t):  # centroids (3, 2) and absolute angles (3,)
        psi, phi = coupler_angle(t), rocker_angle(t)
        crank_tip = A * jnp.array([jnp.cos(t), jnp.sin(t)])
        centroids = jnp.stack(
            [
                crank_tip / 2,
                crank_tip + B / 2 * jnp.array([jnp.cos(psi), jnp.sin(psi)]),
                jnp.array([D, 0.0]) + CR / 2 * jnp.array([jnp.cos(phi), jnp.sin(phi)]),
            ]
        )
        return centroids, jnp.stack([t, psi, phi])

    def mass_matrix(t):
        dc, da = jax.jacfwd(bodies)(t)
        return jnp.sum(MASS * jnp.sum(dc**2, axis=1)) + jnp.sum(inertia_z * da**2)

    def potential(t):
        return GRAVITY * jnp.sum(MASS * bodies(t)[0][:, 1])

    generalized_force = jnp.dot(tau, jax.jacfwd(joint_positions)(theta))  # virtual work of the joint torques
    m, dm = mass_matrix(theta), jax.grad(mass_matrix)(theta)
    return (generalized_force - 0.5 * dm * theta_dot**2 - jax.grad(potential)(theta)) / m


def four_bar_state(model, theta, theta_dot):
    q = joint_positions(jnp.asarray(theta))
    qd = jax.jvp(joint_positions, (jnp.asarray(theta),), (jnp.asarray(theta_dot),))[1]
    return sdjax.make_state(model, q=q, qd=qd)


@pytest.mark.parametrize("theta,theta_dot", [(0.7, 1.3), (2.5, -2.0), (-1.0, 0.4)])
def test_four_bar_against_closed_form(theta, theta_dot):
    model = four_bar()
    state = four_bar_state(model, theta, theta_dot)
    # The closed-form configuration satisfies the constraint (round-off of the sqrt and atan2).
    assert_close(C.position_errors(model, state, LOOP), np.zeros(2), 1e-14, "closed form on the manifold")
    tau = jnp.array([0.8, -0.3, 0.5])
    result = C.constrained_forward_dynamics(model, state, tau, LOOP)
    expected = closed_form_acceleration(jnp.asarray(theta), jnp.asarray(theta_dot), tau)
    # Both are exact; differences are round-off of O(10-100) terms.
    assert_close(result.qdd[0], expected, 1e-11, "crank acceleration")
    # The other joints follow the closed form's second derivative along the motion.
    velocity = lambda t: jax.jvp(joint_positions, (t,), (jnp.asarray(theta_dot),))[1]  # noqa: E731
    second = (
        jax.jvp(velocity, (jnp.asarray(theta),), (jnp.asarray(theta_dot),))[1]
        + jax.jacfwd(joint_positions)(jnp.asarray(theta)) * expected
    )
    assert_close(result.qdd, second, 1e-11, "joint accelerations")
    # Inverse dynamics of the closed chain, crank actuated only: the crank torque that makes this
    # motion with no torque at the other joints equals Q of the closed form.
    tau_crank, _ = C.constrained_inverse_dynamics(model, state, None, result.qdd, LOOP, actuated=[True, False, False])
    assert_close(tau_crank[1:], np.zeros(2), 1e-12, "unactuated joints")
    q_generalized = float(jnp.dot(tau, jax.jacfwd(joint_positions)(jnp.asarray(theta))))
    assert_close(tau_crank[0], q_generalized, 1e-11, "crank torque")
    # All joints actuated: the least-norm torques, which again produce the motion.
    tau_all, _ = C.constrained_inverse_dynamics(model, state, None, result.qdd, LOOP)
    again = C.constrained_forward_dynamics(model, state, tau_all, LOOP)
    assert_close(again.qdd, result.qdd, 1e-11, "inverse of forward dynamics")
    assert float(jnp.linalg.norm(tau_all)) <= float(jnp.linalg.norm(tau_crank)) + 1e-12


def test_four_bar_rollout_stays_closed_and_conserves_energy():
    model = four_bar()
    state = four_bar_state(model, 0.7, 2.0)
    energy = lambda s: float(sdjax.kinetic_energy(model, s) + sdjax.momentum.potential_energy(model, s))  # noqa: E731
    # Measured (2 s, dt = 1 ms): projection 7e-16 m and 1.2e-8 J; Baumgarte at 0.1/dt alone
    # 7e-9 m and 6e-7 J (of 6 J); bounds ~10x those.
    for project, drift_bound, energy_bound in ((True, 1e-14, 1e-7), (False, 1e-7, 1e-5)):
        traj = C.constrained_rollout(model, state, 1e-3, 2000, None, LOOP, project=project)
        drift = float(jnp.max(jnp.abs(traj.position_error)))
        assert drift < drift_bound, f"project={project}: constraint drift {drift:.2e} m"
        q = traj.states.q
        wrapped = jnp.mod(q[:, 2] - jax.vmap(rocker_angle)(q[:, 0]) + np.pi, 2 * np.pi) - np.pi
        assert float(jnp.max(jnp.abs(wrapped))) < 10 * drift_bound + 1e-12, "rocker off the closed form"
        final = jax.tree.map(lambda x: x[-1], traj.states)
        assert abs(energy(final) - energy(state)) < energy_bound, f"project={project}: energy"
    assert float(jnp.max(jnp.abs(traj.states.q[:, 0] - traj.states.q[0, 0]))) > 1.0, "the crank moved"


def test_gradient_through_constrained_rollout():
    def final_rocker(mass_coupler):
        model = sdjax.edit_model(four_bar(), link_mass=jnp.array([MASS[0], mass_coupler, MASS[2]]))
        traj = C.constrained_rollout(model, four_bar_state(model, 0.7, 1.0), 2e-3, 150, jnp.full((150, 3), 0.2), LOOP)
        return traj.states.q[-1, 2]

    # One compiled program for the value and the gradient; the finite differences reuse it
    # (compiling the rollout once more for the values alone would double the test's time).
    value_and_grad = jax.jit(jax.value_and_grad(final_rocker))
    grad = value_and_grad(jnp.asarray(MASS[1]))[1]
    # Step 1e-5 kg: truncation ~h^2 f''' ~ 1e-10, round-off ~1e-16 / 1e-5.
    fd = central_difference(lambda x: float(value_and_grad(jnp.asarray(x[0]))[0]), np.array([MASS[1]]), 0, 1e-5)
    assert_close(grad, fd, 1e-7, "d(final rocker angle)/d(coupler mass)")
    assert abs(float(grad)) > 1e-3


@pytest.mark.parametrize("base", ["floating", "planar", "fixed"])
def test_weld_forces_are_the_loads_that_hold_the_frame(base):
    model = sdjax.edit_model(random_model(4, 6, gravity=True, end_point_probability=0.7), base=base)
    state = random_state(model, 5)
    e = 3  # on link 6, five joints from the base
    kin = sdjax.forward_kinematics(model, state)
    # A fixed base leaves the frame 5 degrees of freedom: hold 5 of the 6 components.
    axes = ("x", "y", "z", "rx", "ry") if base == "fixed" else tuple(range(6))
    held = np.array([C.FRAME_AXES.index(a) if isinstance(a, str) else a for a in axes])
    weld = C.weld_constraint(
        model.end_point_names[e],
        None,
        position=kin.end_point_position[e],
        rotation=kin.end_point_rotation[e],
        axes=axes,
    )
    # Move the frame at its current velocity first: a weld holds velocity zero, so make it so.
    state, impulse = C.constraint_impulse(model, state, (weld,))
    result = C.constrained_forward_dynamics(model, state, jnp.ones(model.num_joints), (weld,))
    # The frame does not accelerate: J a + dJ/dt v = 0 (sdjax's own end-point Jacobians).
    a = sdjax.model.free_coordinates(model, jnp.concatenate([result.base_acceleration, result.qdd]))
    j, jdot = (
        sdjax.end_point_jacobians(model, state)[e][held],
        sdjax.end_point_jacobian_derivatives(model, state)[e][held],
    )
    v = sdjax.model.free_coordinates(model, state.generalized_velocity)
    assert_close(j @ v, np.zeros(len(held)), 1e-12, "frame at rest after the impulse")
    assert_close(j @ a + jdot @ v, np.zeros(len(held)), 1e-10, "frame acceleration")
    # The multipliers are the force and torque on the frame (the world's frame: inertial); as
    # applied end-point loads they reproduce the motion.
    wrench = jnp.zeros(6).at[held].set(result.multipliers)
    force = jnp.zeros((model.num_end_points, 3)).at[e].set(wrench[:3])
    torque = jnp.zeros((model.num_end_points, 3)).at[e].set(wrench[3:])
    base_acc, qdd = sdjax.forward_dynamics(
        model, state, jnp.ones(model.num_joints), end_point_force=force, end_point_torque=torque
    )
    assert_close(qdd, result.qdd, 1e-10, "joint accelerations under the constraint loads")
    assert_close(base_acc, result.base_acceleration, 1e-10, "base acceleration under the constraint loads")


def test_locked_joints_are_deleted_coordinates():
    model = random_model(7, 6, gravity=True, passive=True)
    state = random_state(model, 8)
    locks = (C.JointLock(2), C.JointLock(5))
    state, _ = C.constraint_impulse(model, state, locks)
    assert_close(state.qd[jnp.array([1, 4])], np.zeros(2), 1e-14, "locked rates")
    tau = jnp.linspace(-1.0, 1.0, model.num_joints)
    result = C.constrained_forward_dynamics(model, state, tau, locks)
    # Reference: the equations of the free coordinates alone (rows/columns of H deleted).
    h = sdjax.inertia_matrix(model, state)
    bias = sdjax.bias_forces(model, state)
    applied = jnp.concatenate([jnp.zeros(6), tau + sdjax.passive_joint_torques(model, state)])
    keep = np.array([k for k in range(model.num_velocities) if k not in (7, 10)])
    reduced = jnp.linalg.solve(h[np.ix_(keep, keep)], (applied - bias)[keep])
    a = jnp.concatenate([result.base_acceleration, result.qdd])
    assert_close(a[keep], reduced, 1e-10, "free accelerations")
    assert_close(a[np.array([7, 10])], np.zeros(2), 1e-12, "locked accelerations")
    # The brake torques are what inverse dynamics asks of those joints beyond the applied ones.
    _, tau_needed = sdjax.inverse_dynamics(model, state, a[:6], a[6:])
    assert_close(result.multipliers, (tau_needed - tau)[jnp.array([1, 4])], 1e-10, "brake torques")


def test_lock_in_a_rollout_conserves_momentum():
    model = random_model(11, 5, gravity=False)
    state = random_state(model, 12)
    locks = (C.JointLock(1), C.JointLock(4))
    schedule = jnp.zeros((300, 2), bool).at[100:, 0].set(True).at[200:, 1].set(True)
    traj = C.constrained_rollout(model, state, 2e-3, 300, None, locks, active=schedule)
    qd = traj.states.qd  # state k + 1 follows step k; the lock acts from the start of step 100
    assert float(jnp.max(jnp.abs(qd[101:, 0]))) < 1e-12 and float(jnp.max(jnp.abs(qd[:101, 0]))) > 1e-3
    assert float(jnp.max(jnp.abs(qd[201:, 3]))) < 1e-12
    # The impulses are internal: free-floating momentum is conserved through both locks
    # (linear exactly by RK4; angular to the O(dt^4) integration error).
    p = jax.vmap(lambda s: sdjax.linear_momentum(model, s))(traj.states)
    L = jax.vmap(lambda s: sdjax.angular_momentum(model, s))(traj.states)
    # Momentum is a nonlinear function of the state: RK4 keeps it to its O(dt^4) error
    # (measured 2e-12 relative over 0.6 s at 2 ms), the impulses exactly.
    assert_close(p, jnp.broadcast_to(p[0], p.shape), 2e-11, "linear momentum")
    assert_close(L, jnp.broadcast_to(L[0], L.shape), 1e-8, "angular momentum")
    energy = jax.vmap(lambda s: sdjax.kinetic_energy(model, s))(traj.states)
    assert float(energy[101]) < float(energy[100]) - 1e-6, "a plastic impact loses energy"
    assert abs(float(traj.impulses[100, 0])) > 1e-6 and float(jnp.max(jnp.abs(traj.impulses[101:200, 0]))) < 1e-10


def _servicer_and_target() -> tuple[sdjax.Model, sdjax.Model]:
    """A free-flying servicer (random 5-link tree; its last end point is the gripper) and a
    tumbling target with a handle frame on its body: two systems integrated together."""
    from sdjax.models import tumbling_target
    from sdjax.models.target import TARGET_HANDLE_OFFSET

    servicer = random_model(21, 5, gravity=False)
    target = sdjax.edit_model(
        tumbling_target(),
        end_point_link=(0,),
        centroid_to_end_point=[TARGET_HANDLE_OFFSET],
        end_point_rpy=[[0.3, -0.2, 0.5]],
        end_point_names=("handle",),
    )
    return servicer, target


def _momentum(models, states):
    p = sum(sdjax.linear_momentum(m, s) for m, s in zip(models, states))
    L = sum(sdjax.angular_momentum(m, s) for m, s in zip(models, states))
    return p, L


def test_rigid_capture_matches_the_rigid_body_closed_form():
    servicer, target = _servicer_and_target()
    models = (servicer, target)
    states = (random_state(servicer, 22), random_state(target, 23))
    grasp = (C.weld_constraint((1, "handle"), (0, servicer.end_point_names[-1])),)
    p0, L0 = _momentum(models, states)
    after, _ = C.constraint_impulse(models, states, grasp)
    # Momentum exchange is internal; the grasp holds the relative motion; energy is lost.
    p1, L1 = _momentum(models, after)
    assert_close(p1, p0, 1e-12, "linear momentum")
    assert_close(L1, L0, 1e-12, "angular momentum")
    gripper = sdjax.end_point_jacobians(servicer, after[0])[-1] @ after[0].generalized_velocity
    handle = sdjax.end_point_jacobians(target, after[1])[0] @ after[1].generalized_velocity
    lever = (
        sdjax.forward_kinematics(target, after[1]).end_point_position[0]
        - sdjax.forward_kinematics(servicer, after[0]).end_point_position[-1]
    )
    assert_close(handle[3:], gripper[3:], 1e-12, "handle turns with the gripper")
    assert_close(
        handle[:3], gripper[:3] + jnp.cross(gripper[3:], lever), 1e-12, "handle moves rigidly with the gripper"
    )
    energy = lambda ss: sum(float(sdjax.kinetic_energy(m, s)) for m, s in zip(models, ss))  # noqa: E731
    assert energy(after) < energy(states)
    # Capture with the arm's brakes on: servicer and target become one rigid body, whose motion
    # momentum alone fixes: v_com = P / M, w = I_com^-1 L_com.
    rigid = grasp + tuple(C.JointLock(i) for i in range(1, servicer.num_joints + 1))
    after, _ = C.constraint_impulse(models, states, rigid)
    centroids, velocities, omegas, inertias, masses = [], [], [], [], []
    for m, s in zip(models, after):
        kin = sdjax.forward_kinematics(m, s)
        linear, angular = sdjax.link_velocities(m, s)
        body = np.concatenate([np.asarray(m.base_inertia)[None], np.asarray(m.link_inertia)])
        centroids += list(np.asarray(kin.centroid))
        velocities += list(np.asarray(linear))
        omegas += list(np.asarray(angular))
        inertias += [np.asarray(r) @ i @ np.asarray(r).T for r, i in zip(kin.rotation, body)]
        masses += [float(m.base_mass)] + list(np.asarray(m.link_mass))
    masses, centroids = np.array(masses), np.array(centroids)
    com = masses @ centroids / masses.sum()
    inertia = sum(
        i + mass * ((r - com) @ (r - com) * np.eye(3) - np.outer(r - com, r - com))
        for i, mass, r in zip(inertias, masses, centroids)
    )
    L_com = np.asarray(L0) - np.cross(com, np.asarray(p0))
    omega = np.linalg.solve(inertia, L_com)
    for b in range(len(masses)):
        # Condition of the impact solve (S ~ 1e3) times round-off.
        assert_close(
            velocities[b],
            np.asarray(p0) / masses.sum() + np.cross(omega, centroids[b] - com),
            1e-10,
            f"velocity of body {b}",
        )
        assert_close(omegas[b], omega, 1e-10, f"angular velocity of body {b}")


def test_capture_in_a_rollout_of_two_systems():
    servicer, target = _servicer_and_target()
    models = (servicer, target)
    states = (random_state(servicer, 24, scale=0.2), random_state(target, 25, scale=0.2))
    law = lambda t, ss: (-2.0 * ss[0].qd, None)  # noqa: E731  (servicer damps its joints; the target is passive)
    # Hold the handle where it is relative to the gripper at the moment of capture (step 40).
    free_flight = C.constrained_rollout(models, states, 5e-3, 40, law)
    at_capture = jax.tree.map(lambda x: x[-1], free_flight.states)
    kin_s, kin_t = sdjax.forward_kinematics(servicer, at_capture[0]), sdjax.forward_kinematics(target, at_capture[1])
    r_g = kin_s.end_point_rotation[-1]
    weld = C.weld_constraint(
        (1, "handle"), (0, servicer.end_point_names[-1]),
        position=r_g.T @ (kin_t.end_point_position[0] - kin_s.end_point_position[-1]), rotation=r_g.T @ kin_t.end_point_rotation[0],
    )  # fmt: skip
    schedule = jnp.zeros((120, 1), bool).at[40:].set(True)
    traj = C.constrained_rollout(models, states, 5e-3, 120, law, (weld,), active=schedule)
    assert_close(traj.states[0].q[40], at_capture[0].q, 1e-13, "the same free flight")
    p, L = jax.vmap(lambda a, b: _momentum(models, (a, b)))(*traj.states)
    assert_close(p, jnp.broadcast_to(p[0], p.shape), 1e-11, "pair linear momentum")
    # Angular momentum: internal joint damping and the impact keep it; RK4 error O(dt^4).
    assert_close(L, jnp.broadcast_to(L[0], L.shape), 1e-8, "pair angular momentum")
    assert float(jnp.max(jnp.abs(traj.position_error[42:]))) < 1e-12, "held after capture"
    assert float(jnp.max(jnp.abs(traj.impulses[40]))) > 1e-3 and float(jnp.max(jnp.abs(traj.impulses[41:]))) == 0.0
    # latch=True: the gripper closes wherever the handle is at step 40 (no pose given).
    grasp = (C.weld_constraint((1, "handle"), (0, servicer.end_point_names[-1])),)
    latched = C.constrained_rollout(models, states, 5e-3, 120, law, grasp, active=schedule, latch=True)
    assert_close(latched.constraints[0].position, weld.position, 1e-12, "latched position")
    assert_close(latched.constraints[0].rotation, weld.rotation, 1e-12, "latched rotation")
    assert_close(latched.states[1].base_position, traj.states[1].base_position, 1e-10, "same run as the explicit pose")


def test_constraint_errors_name_the_problem():
    model = four_bar()
    state = four_bar_state(model, 0.7, 0.0)
    with pytest.raises(ValueError, match="frame 'tip'"):
        C.constrained_forward_dynamics(model, state, None, (C.point_constraint("tip"),))
    with pytest.raises(ValueError, match="axes"):
        C.point_constraint("coupler_tip", axes=("rx",))
    with pytest.raises(ValueError, match=r"names joint\(s\) \[4\]; joints are 1..3"):
        C.constrained_forward_dynamics(model, state, None, (C.JointLock(4),))
    with pytest.raises(ValueError, match="active"):
        C.constrained_forward_dynamics(model, state, None, LOOP, active=[True, False])
    with pytest.raises(ValueError, match="itself"):
        C.constrained_forward_dynamics(model, state, None, (C.point_constraint("coupler_tip", "coupler_tip"),))
    # Accepted before and used as given: a weld to a matrix that is no rotation reported no
    # rotation error against twice the frame's rotation; NaN targets; a negative compliance
    # made S indefinite (NaN accelerations), a negative Baumgarte frequency the correction
    # unstable; a float joint number was truncated (2.5 -> 2), True locked joint 1.
    with pytest.raises(ValueError, match=r"weld_constraint: rotation: expected a proper rotation matrix"):
        C.weld_constraint("coupler_tip", rotation=2 * np.eye(3))
    with pytest.raises(ValueError, match=r"point_constraint: position: must be finite"):
        C.point_constraint("coupler_tip", position=[np.nan, 0.0, 0.0])
    for name in ("stabilization", "regularization"):
        with pytest.raises(ValueError, match=rf"constrained_forward_dynamics: {name}: must be non-negative"):
            C.constrained_forward_dynamics(model, state, None, LOOP, **{name: -1.0})
        with pytest.raises(ValueError, match=rf"constrained_rollout: {name}: must be non-negative"):
            C.constrained_rollout(model, state, 0.01, 2, None, LOOP, **{name: -1.0})
    with pytest.raises(TypeError, match=r"JointCoupling: follower: expected an integer, got float 2\.5"):
        C.JointCoupling(2.5, 1)
    for joint in (True, 2.0, "2"):
        with pytest.raises(TypeError, match=r"JointLock: joint: expected an integer, got"):
            C.JointLock(joint)
    with pytest.raises(TypeError, match=r"constraints: expected a sequence of constraints, got one JointLock"):
        C.constrained_forward_dynamics(model, state, None, C.JointLock(2))


def test_penalty_springs_converge_to_the_constrained_motion():
    """The virtual-cut spring (sdjax.capture, seed 000's penalty method) closing the same loop:
    its motion approaches the exact one as 1/K (measured 2.8e-3, 3.0e-4, 3.0e-5 rad at
    K = 1e4, 1e5, 1e6 N/m over 0.2 s)."""
    from sdjax import capture

    model = four_bar()
    state = four_bar_state(model, 0.7, 2.0)
    dt, steps = 2e-4, 1000  # below the RK4 limit of the stiffest spring
    exact = C.constrained_rollout(model, state, dt, steps, None, LOOP).states.q
    errors = []
    for stiffness in (1e4, 1e5, 1e6):
        cut = capture.VirtualCut(
            capture.BodyFrame.end_point(model, 0),
            capture.BodyFrame.end_point(model, 1),
            stiffness,
            2 * np.sqrt(stiffness),
        )
        q = sdjax.rollout(model, state, dt, steps, environment=capture.closed_chain_environment(model, cut)).states.q
        errors.append(float(jnp.max(jnp.abs(q - exact))))
    assert errors[1] < errors[0] / 5 and errors[2] < errors[1] / 5, f"no 1/K convergence: {errors}"
    assert errors[2] < 1e-4, errors


def test_penalty_gradients_converge_to_the_exact_gradients():
    """In the stiff limit the penalty method's derivatives approach those of the exact
    constraints too: the sensitivity of the four-bar's final joint angles to its initial crank
    rate (forward mode through 0.05 s of rollout) differs from the exact one by O(1/K)."""
    from sdjax import capture

    model = four_bar()
    state = four_bar_state(model, 0.7, 2.0)
    direction = four_bar_state(model, 0.7, 1.0)  # a consistent velocity direction (1 rad/s at the crank)
    dt, steps = 2e-4, 250  # below the RK4 limit of the stiffest spring

    def exact(qd):
        return C.constrained_rollout(model, eqx.tree_at(lambda s: s.qd, state, qd), dt, steps, None, LOOP).states.q[-1]

    _, reference = jax.jvp(exact, (state.qd,), (direction.qd,))

    @jax.jit  # one compilation: the stiffness travels inside the environment pytree
    def penalty_tangent(environment):
        def penalty(qd):
            return sdjax.rollout(
                model, eqx.tree_at(lambda s: s.qd, state, qd), dt, steps, environment=environment
            ).states.q[-1]

        return jax.jvp(penalty, (state.qd,), (direction.qd,))[1]

    errors = []
    for stiffness in (1e4, 1e5, 1e6):
        cut = capture.VirtualCut(
            capture.BodyFrame.end_point(model, 0),
            capture.BodyFrame.end_point(model, 1),
            stiffness,
            2 * np.sqrt(stiffness),
        )
        tangent = penalty_tangent(capture.closed_chain_environment(model, cut))
        errors.append(float(jnp.max(jnp.abs(tangent - reference)) / jnp.max(jnp.abs(reference))))
    # 1/K convergence: each tenfold stiffer spring cuts the error at least fivefold (measured
    # 12x and 10x: 1.9e-3, 1.5e-4, 1.6e-5).
    assert errors[1] < errors[0] / 5 and errors[2] < errors[1] / 5, f"no 1/K convergence of the derivatives: {errors}"
    assert errors[2] < 1e-3, errors


def test_joint_coupling_in_a_rollout():
    """A gear between two joints of a free-floating tree: held to round-off by the projection,
    momentum conserved (the coupling torque is internal), and the coupling torque is what the
    follower needs beyond its own (inverse dynamics)."""
    model = random_model(31, 5, gravity=False)
    gear = (C.JointCoupling(4, 2, -1.5, 0.2),)
    state = random_state(model, 32)
    state = C.project_to_constraints(model, state, gear)
    assert abs(float(state.q[3] + 1.5 * state.q[1] - 0.2)) < 1e-14
    with pytest.raises(ValueError, match="iterations: must be an integer >= 0, got -1"):
        C.project_to_constraints(model, state, gear, iterations=-1)
    tau = jnp.linspace(-0.5, 0.5, model.num_joints)
    result = C.constrained_forward_dynamics(model, state, tau, gear)
    assert_close(result.qdd[3], -1.5 * result.qdd[1], 1e-12, "geared accelerations")
    _, needed = sdjax.inverse_dynamics(model, state, result.base_acceleration, result.qdd)
    # lam acts on the follower (+1) and on the leader (-multiplier = +1.5).
    assert_close(needed[3] - tau[3], result.multipliers[0], 1e-10, "coupling torque on the follower")
    assert_close(needed[1] - tau[1], 1.5 * result.multipliers[0], 1e-10, "coupling torque on the leader")
    traj = C.constrained_rollout(model, state, 5e-3, 200, None, gear)
    assert float(jnp.max(jnp.abs(traj.position_error))) < 1e-13
    p = jax.vmap(lambda s: sdjax.linear_momentum(model, s))(traj.states)
    # Momentum is a nonlinear function of the state: RK4 keeps it to its O(dt^4) error
    # (measured 1.3e-10 relative over 1 s at 5 ms).
    assert_close(p, jnp.broadcast_to(p[0], p.shape), 1e-9, "linear momentum")


def test_batched_with_vmap():
    """A batch of four-bar states and a batch of capture times run under ``jax.vmap`` give the
    per-sample results."""
    model = four_bar()
    thetas = jnp.array([0.3, 0.7, 1.9, -2.2])
    states = jax.vmap(lambda t: four_bar_state(model, t, 1.5))(thetas)
    tau = jnp.array([0.5, 0.0, -0.2])
    batched = jax.vmap(lambda s: C.constrained_forward_dynamics(model, s, tau, LOOP).qdd)(states)
    for k, theta in enumerate(thetas):
        single = C.constrained_forward_dynamics(model, four_bar_state(model, theta, 1.5), tau, LOOP).qdd
        assert_close(batched[k], single, 1e-12, f"sample {k}")
        expected = closed_form_acceleration(theta, jnp.asarray(1.5), tau)
        assert_close(batched[k, 0], expected, 1e-11, f"closed form, sample {k}")
    # Locking a joint at a different step in each sample: the schedules are data.
    arm = random_model(41, 3, gravity=False)
    start = random_state(arm, 42)
    locks = (C.JointLock(2),)
    schedules = jnp.stack([jnp.arange(60)[:, None] >= step for step in (10, 30, 50)])

    def run(schedule):
        return C.constrained_rollout(arm, start, 5e-3, 60, None, locks, active=schedule).states.qd[-1]

    final = jax.vmap(run)(schedules)
    for k in range(3):
        assert_close(final[k], run(schedules[k]), 1e-12, f"schedule {k}")
    assert float(jnp.max(jnp.abs(final[:, 1]))) < 1e-12  # locked in every sample


def test_constraint_loads_reproduce_the_motion_and_give_joint_loads():
    """The multipliers as end-point loads (frame and other, one system or two): with them as
    applied loads plain forward dynamics moves as the constrained system, and
    joint_reaction_loads then gives the loads in a closed chain's joints."""
    model = four_bar()
    state = four_bar_state(model, 0.9, 1.2)
    tau = jnp.array([0.7, -0.1, 0.3])
    result = C.constrained_forward_dynamics(model, state, tau, LOOP)
    force, torque = C.constraint_loads(model, state, LOOP, result.multipliers)
    _, qdd = sdjax.forward_dynamics(model, state, tau, end_point_force=force, end_point_torque=torque)
    assert_close(qdd, result.qdd, 1e-11, "four-bar under its pin loads")
    loads = sdjax.joint_reaction_loads(model, state, None, result.qdd, end_point_force=force, end_point_torque=torque)
    # The rocker's joint carries the rocker's weight and inertia plus the pin force: its
    # axial moment is the applied torque (no passive terms), as for any joint.
    assert_close(loads.moment_joint_frame[:, 2], tau, 1e-11, "axial joint loads = joint torques")
    # Two systems: a weld between a servicer's gripper and a target's handle.
    servicer, target = _servicer_and_target()
    models = (servicer, target)
    states = (random_state(servicer, 43), random_state(target, 44))
    kin_s, kin_t = sdjax.forward_kinematics(servicer, states[0]), sdjax.forward_kinematics(target, states[1])
    r_g = kin_s.end_point_rotation[-1]  # the weld holds the handle where it is now
    grasp = (
        C.weld_constraint(
            (1, "handle"), (0, servicer.end_point_names[-1]),
            position=r_g.T @ (kin_t.end_point_position[0] - kin_s.end_point_position[-1]), rotation=r_g.T @ kin_t.end_point_rotation[0],
        ),
    )  # fmt: skip
    tau = (jnp.linspace(-1.0, 1.0, servicer.num_joints), None)
    result = C.constrained_forward_dynamics(models, states, tau, grasp)
    (f_s, t_s), (f_t, t_t) = C.constraint_loads(models, states, grasp, result.multipliers)
    # Two solves of O(10) accelerations: round-off (measured 3e-13 of 15 rad/s^2).
    _, qdd = sdjax.forward_dynamics(servicer, states[0], tau[0], end_point_force=f_s, end_point_torque=t_s)
    assert_close(qdd, result.qdd[0], 1e-11, "servicer under the grasp loads")
    base_acc, _ = sdjax.forward_dynamics(target, states[1], end_point_force=f_t, end_point_torque=t_t)
    assert_close(base_acc, result.base_acceleration[1], 1e-11, "target under the grasp loads")
