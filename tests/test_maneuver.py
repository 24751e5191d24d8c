"""Maneuvering modes of seed 003 (Table 1): reaction wheels, thrusters, one law per mode.

Each mode test runs the 7-joint free-flying arm with three reaction wheels through the same
arm manoeuvre (a minimum-jerk joint move tracked by PD) and checks which momenta are
conserved and which change by exactly the applied external loads.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax import maneuver as mv
from sdjax.models import free_flying_arm_7dof
from sdjax.models.builtin import free_flying_arm_initial_q
from sdjax.rotation import quat_multiply, rotation_vector_to_quat, rpy_to_matrix
from helpers import assert_close

#: RK4 step and horizon of the mode tests. At this step the free-flight momentum drift is
#: ~1e-12 relative (measured), comfortably inside the 1e-9 the issue asks for; at 0.01 s it
#: is ~1e-10 to 1e-9 (RK4, error ~ dt^4).
DT = 0.005
STEPS = 900  # 4.5 s: a 4 s arm move and 0.5 s of settling
ARM = 7
#: Wheel triad: orthonormal but not aligned with the base axes, at distinct points.
WHEEL_AXES = np.asarray(rpy_to_matrix(np.array([0.3, -0.2, 0.5]))).T
WHEEL_POSITIONS = np.array([[0.3, 0.1, -0.2], [-0.1, 0.35, 0.0], [0.0, -0.2, 0.4]])
SPIN, TRANSVERSE, WHEEL_MASS = 0.5, 0.3, 10.0
IDENTITY = jnp.array([0.0, 0.0, 0.0, 1.0])


class JointTrack(eqx.Module):
    """PD tracking of a minimum-jerk joint move (arm joints only; wheels excluded)."""

    start: jax.Array
    delta: jax.Array
    kp: jax.Array
    kd: jax.Array
    duration: float = eqx.field(static=True)

    def __call__(self, t, state):
        s = jnp.clip(t / self.duration, 0.0, 1.0)
        shape = s**3 * (10.0 - 15.0 * s + 6.0 * s**2)
        rate = 30.0 * s**2 * (1.0 - s) ** 2 / self.duration
        q, qd = state.q[:ARM], state.qd[:ARM]
        return self.kp @ (self.start + shape * self.delta - q) + self.kd @ (rate * self.delta - qd)


@pytest.fixture(scope="module")
def setup():
    model = mv.add_reaction_wheels(
        free_flying_arm_7dof(),
        WHEEL_AXES,
        spin_inertia=SPIN,
        transverse_inertia=TRANSVERSE,
        mass=WHEEL_MASS,
        positions=WHEEL_POSITIONS,
    )
    q0 = np.concatenate([free_flying_arm_initial_q(), np.zeros(3)])
    state = sdjax.make_state(
        model,
        q=q0,
        base_position=[0.5, -0.3, 0.2],
        base_rpy=[0.1, -0.2, 0.3],
        base_linear_velocity=[0.05, -0.02, 0.01],
        base_angular_velocity=[0.01, 0.02, -0.01],
    )
    # Gains K = w^2 H*, D = 2 w H* with the arm's momentum-reduced inertia H* at q0 (base and
    # wheels free), so every linearised arm mode has frequency w = 6 rad/s and is critically
    # damped (diagonal gains would make the stiff-but-light wrist modes unstable).
    h = np.asarray(sdjax.inertia_matrix(model, state))[: 6 + ARM, : 6 + ARM]
    h_star = h[6:, 6:] - h[:6, 6:].T @ np.linalg.solve(h[:6, :6], h[:6, 6:])
    w = 6.0
    joint_law = JointTrack(
        jnp.asarray(q0[:ARM]),
        jnp.asarray([0.6, -0.5, 0.0, -0.6, 0.0, 0.0, 0.0]),
        jnp.asarray(w * w * h_star),
        jnp.asarray(2.0 * w * h_star),
        4.0,
    )
    return model, state, joint_law


@eqx.filter_jit
def _momenta(model, states):
    p = jax.vmap(lambda s: sdjax.linear_momentum(model, s))(states)
    l = jax.vmap(lambda s: sdjax.angular_momentum(model, s))(states)
    return p, l


def momenta(model, states):
    """Linear and angular momentum (about the inertial origin) along a trajectory, (N + 1, 3)."""
    return tuple(np.asarray(x) for x in _momenta(model, states))


@eqx.filter_jit
def _attitude_error(quats, target):
    return jax.vmap(lambda q: jnp.linalg.norm(mv.quat_error_vector(target, q)))(quats)


def attitude_error(states, target):
    """Angle (rad) between each base attitude and the target."""
    return np.asarray(_attitude_error(states.base_quaternion, jnp.asarray(target)))


def relative(a, b):
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


def base_position_integrals(traj):
    """Integral of r0 over each step (Hermite cubic quadrature from r0 and v0 at both ends;
    error O(dt^5) per step), shape (N, 3)."""
    r, v = np.asarray(traj.states.base_position), np.asarray(traj.states.base_linear_velocity)
    return 0.5 * DT * (r[:-1] + r[1:]) + DT**2 / 12.0 * (v[:-1] - v[1:])


@jax.jit
def _rotations(quats):
    return jax.vmap(sdjax.quat_to_matrix)(quats)


def base_frame(traj, vectors):
    """Inertial vectors applied over each step, expressed in the base frame at its start."""
    return np.einsum("kji,kj->ki", np.asarray(_rotations(traj.states.base_quaternion[:-1])), np.asarray(vectors))


@eqx.filter_jit
def evaluate_law(law, traj):
    """A law ``(t, state) -> array`` at the start of every step (one compiled program)."""
    return jax.vmap(law)(traj.time[:-1], jax.tree.map(lambda x: x[:-1], traj.states))


def wheel_reaction(model, traj, first_wheel):
    """Torque the wheel motors apply to the base at each step, -A0 U tau_w (inertial)."""
    rot = np.asarray(_rotations(traj.states.base_quaternion[:-1]))
    axes = np.asarray(mv.reaction_wheel_axes(model))
    return -np.einsum("kij,jw,kw->ki", rot, axes, np.asarray(traj.controls.tau[:, first_wheel:]))


@pytest.fixture(scope="module")
def floating_runs(setup):
    """Floating and rotation-floating runs of the same arm manoeuvre from the same state."""
    model, state, joint_law = setup
    floating = sdjax.rollout(model, state, DT, STEPS, mv.maneuver_law(model, "floating", joint_law))
    attitude = mv.AttitudePD(state.base_quaternion, 2.0e4, 5.0e3)
    law = mv.maneuver_law(model, "rotation-floating", joint_law, attitude_law=attitude)
    return floating, sdjax.rollout(model, state, DT, STEPS, law), attitude


# ------------------------------------------------------------------------------------------
# One test per mode.


def test_floating_conserves_both_momenta(setup, floating_runs):
    model, state, joint_law = setup
    traj, _, _ = floating_runs
    assert not np.any(np.asarray(traj.controls.base_force)) and not np.any(np.asarray(traj.controls.base_torque))
    assert not np.any(np.asarray(traj.controls.tau[:, ARM:]))  # wheels unpowered
    tau_arm = evaluate_law(joint_law, traj)
    assert_close(traj.controls.tau[:, :ARM], tau_arm, 1e-12, "arm torques")  # jit vs vmap round-off
    p, l = momenta(model, traj.states)
    # Only internal (joint) torques act: P and L about the inertial origin are conserved up to
    # RK4 error (issue requirement: < 1e-9 relative; measured 9e-13 for P, 5e-12 for L).
    assert relative(p[-1], p[0]) < 1e-9 and relative(l[-1], l[0]) < 1e-9
    assert np.max(np.linalg.norm(p - p[0], axis=1)) < 1e-9 * np.linalg.norm(p[0])
    assert np.max(np.linalg.norm(l - l[0], axis=1)) < 1e-9 * np.linalg.norm(l[0])
    # The arm manoeuvre really moves the arm and turns the uncontrolled base.
    assert float(np.max(np.abs(np.asarray(traj.states.q[-1, :ARM]) - np.asarray(state.q[:ARM])))) > 0.5
    assert attitude_error(traj.states, state.base_quaternion).max() > 0.2


def test_rotation_floating_holds_attitude_with_wheels_and_conserves_momenta(setup, floating_runs):
    model, state, joint_law = setup
    floating, traj, attitude = floating_runs
    assert not np.any(np.asarray(traj.controls.base_force)) and not np.any(np.asarray(traj.controls.base_torque))
    p, l = momenta(model, traj.states)
    # Wheels are internal: momenta conserved as in floating (measured 6e-12 for P, 4e-11 for
    # L, relative; the wheels spin up to ~120 rad/s, so the RK4 error exceeds floating's).
    assert np.max(np.linalg.norm(p - p[0], axis=1)) < 1e-9 * np.linalg.norm(p[0])
    assert np.max(np.linalg.norm(l - l[0], axis=1)) < 1e-9 * np.linalg.norm(l[0])
    # The desired base torque is realised exactly by the wheel motors: the base receives
    # -A0 U tau_w (three independent axes, so no least-squares residual).
    assert_close(wheel_reaction(model, traj, ARM), evaluate_law(attitude, traj), 1e-12, "wheel reaction torque")
    # Same arm law; attitude held. Floating drifts ~0.4 rad (arm reaction plus the initial
    # base spin); rotation-floating stays within ~3e-3 rad: a reduction of > 50x.
    drift_floating = attitude_error(floating.states, state.base_quaternion).max()
    drift_wheels = attitude_error(traj.states, state.base_quaternion).max()
    assert drift_wheels < 0.01 and drift_floating / drift_wheels > 50, (drift_floating, drift_wheels)
    # The wheels took up the arm's reaction and the initial base spin.
    assert float(jnp.max(jnp.abs(traj.states.qd[:, ARM:]))) > 10.0


def test_rotation_flying_changes_angular_momentum_by_the_applied_torque(setup):
    model, state, joint_law = setup
    target = quat_multiply(rotation_vector_to_quat(jnp.array([0.2, -0.2, 0.1])), state.base_quaternion)
    limit = np.array([60.0, 80.0, 100.0])
    law = mv.maneuver_law(
        model,
        "rotation-flying",
        joint_law,
        attitude_law=mv.AttitudePD(target, 2.0e3, 1.5e3),
        thrusters=mv.Thrusters(torque_limit=limit, saturation="clip"),
    )
    traj = sdjax.rollout(model, state, DT, STEPS, law)
    torque = np.asarray(traj.controls.base_torque)
    # Thruster couples: zero net force, torque within the per-base-axis limits (clipped: the
    # limit is reached on some steps).
    assert not np.any(np.asarray(traj.controls.base_force))
    in_base = base_frame(traj, torque)
    assert np.all(np.abs(in_base) <= limit * (1 + 1e-12))
    assert np.any(np.isclose(np.abs(in_base), limit, rtol=1e-12, atol=0))
    assert not np.any(np.asarray(traj.controls.tau[:, ARM:]))  # wheels unpowered
    p, l = momenta(model, traj.states)
    assert np.max(np.linalg.norm(p - p[0], axis=1)) < 1e-9 * np.linalg.norm(p[0])
    # Held over each step, a pure couple changes L by exactly N_k dt: L(T) - L(0) = sum N_k dt
    # up to RK4 error (measured 4e-12, scale-aware; the change is ~13 N m s).
    expected = np.cumsum(torque * DT, axis=0)
    assert_close(l[1:] - l[0], expected, 1e-9, "angular momentum change")
    assert np.linalg.norm(expected[-1]) > 10.0
    assert attitude_error(traj.states, target)[-1] < 0.02  # the slew reaches its target


def test_translation_flying_changes_linear_momentum_by_the_thrust(setup):
    """dP/dt = F; about the inertial origin dL/dt = r0 x F (thrust at the base centroid).

    Seed 003 calls the total angular momentum constant in this mode: true about points on the
    thrust line (and about the system centre of mass for thrust through it), not in general.
    Here the attitude is held by the wheels (the mode's momentum-exchange option).
    """
    model, state, joint_law = setup
    limit = 40.0
    law = mv.maneuver_law(
        model,
        "translation-flying",
        joint_law,
        attitude_law=mv.AttitudePD(state.base_quaternion, 2.0e4, 5.0e3),
        translation_law=mv.TranslationPD(state.base_position + jnp.array([0.4, -0.3, 0.2]), 600.0, 1200.0),
        thrusters=mv.Thrusters(force_limit=limit, saturation="clip"),
    )
    traj = sdjax.rollout(model, state, DT, STEPS, law)
    force = np.asarray(traj.controls.base_force)
    assert not np.any(np.asarray(traj.controls.base_torque))
    assert np.all(np.abs(base_frame(traj, force)) <= limit * (1 + 1e-12))
    p, l = momenta(model, traj.states)
    # RK4 with F held over each step: P(T) - P(0) = sum F_k dt to integration error (measured
    # 3e-12, scale-aware; the change is ~17 kg m/s).
    assert_close(p[1:] - p[0], np.cumsum(force * DT, axis=0), 1e-9, "linear momentum change")
    assert np.linalg.norm(p[-1] - p[0]) > 10.0  # ~17 kg m/s against |P(0)| ~ 35
    # int r0 x F_k dt over a step = (int r0 dt) x F_k; the quadrature error is O(dt^5)
    # (measured 2e-11; the change is ~5 N m s).
    moment = np.cross(base_position_integrals(traj), force)
    assert_close(l[1:] - l[0], np.cumsum(moment, axis=0), 1e-9, "angular momentum change")
    assert np.linalg.norm(np.sum(moment, axis=0)) > 1.0  # L about the origin really changes
    # Attitude held by the wheels while the thrusters push.
    assert attitude_error(traj.states, state.base_quaternion).max() < 0.01


def test_flying_controls_both_momenta_with_smooth_saturation(setup):
    model, state, joint_law = setup
    target_q = quat_multiply(rotation_vector_to_quat(jnp.array([-0.1, 0.15, 0.2])), state.base_quaternion)
    thrusters = mv.Thrusters(force_limit=[30.0, 40.0, 50.0], torque_limit=80.0, saturation="tanh")
    law = mv.maneuver_law(
        model,
        "flying",
        joint_law,
        attitude_law=mv.AttitudePD(target_q, 2.0e3, 1.5e3),
        translation_law=mv.TranslationPD(state.base_position + jnp.array([-0.3, 0.2, 0.1]), 600.0, 1200.0),
        thrusters=thrusters,
    )
    traj = sdjax.rollout(model, state, DT, STEPS, law)
    force, torque = np.asarray(traj.controls.base_force), np.asarray(traj.controls.base_torque)
    # tanh saturation stays strictly inside the limits.
    assert np.all(np.abs(base_frame(traj, force)) < np.array([30.0, 40.0, 50.0]))
    assert np.all(np.abs(base_frame(traj, torque)) < 80.0)
    p, l = momenta(model, traj.states)
    assert_close(p[1:] - p[0], np.cumsum(force * DT, axis=0), 1e-9, "linear momentum change")
    moment = np.cross(base_position_integrals(traj), force) + torque * DT
    assert_close(l[1:] - l[0], np.cumsum(moment, axis=0), 1e-9, "angular momentum change")
    assert np.linalg.norm(p[-1] - p[0]) > 10.0 and np.linalg.norm(l[-1] - l[0]) > 10.0
    error = attitude_error(traj.states, target_q)
    assert error[-1] < 0.2 * error[0]  # the slew, slowed by the torque limits, is converging
    assert float(jnp.linalg.norm(traj.states.base_position[-1] - law.translation_law.target_position)) < 0.1


# ------------------------------------------------------------------------------------------
# Reaction wheels as model elements.


def test_wheels_add_up_mass_inertia_and_geometry(arm7_model):
    axes = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0], np.ones(3) / np.sqrt(3.0)])
    positions = np.array([[0.4, 0.1, -0.3], [0.0, 0.5, 0.1], [-0.2, 0.0, 0.3], [0.1, -0.1, 0.0]])
    spin, transverse, mass = (
        np.array([0.5, 0.4, 0.3, 0.2]),
        np.array([0.3, 0.25, 0.2, 0.15]),
        np.array([8.0, 7.0, 6.0, 5.0]),
    )
    model = mv.add_reaction_wheels(
        arm7_model, axes, spin_inertia=spin, transverse_inertia=transverse, mass=mass, positions=positions
    )
    n = arm7_model.num_joints
    assert model.num_joints == n + 4 and mv.reaction_wheel_joints(model) == (8, 9, 10, 11)
    assert model.link_names[n:] == ("reaction_wheel_1", "reaction_wheel_2", "reaction_wheel_3", "reaction_wheel_4")
    assert model.end_point_link == arm7_model.end_point_link and model.name == arm7_model.name
    assert_close(model.total_mass, arm7_model.total_mass + mass.sum(), 1e-15, "total mass")
    # Base frame axes recovered from the joint RPY angles.
    assert_close(mv.reaction_wheel_axes(model), axes.T, 1e-15, "wheel axes")
    # Whole-system inertia about the base centroid = arm system + sum over wheels of
    # t E + (s - t) u u^T + m (|p|^2 E - p p^T) (parallel axes), at any wheel angle.
    rng = np.random.default_rng(0)
    q_arm = rng.uniform(-1, 1, n)
    rot = np.asarray(rpy_to_matrix(np.array([0.4, -0.7, 1.1])))
    before = sdjax.make_state(arm7_model, q=q_arm, base_rotation=rot, base_position=[1.0, 2.0, 3.0])
    after = sdjax.make_state(
        model, q=np.concatenate([q_arm, rng.uniform(-3, 3, 4)]), base_rotation=rot, base_position=[1.0, 2.0, 3.0]
    )
    h0, h1 = np.asarray(sdjax.inertia_matrix(arm7_model, before)), np.asarray(sdjax.inertia_matrix(model, after))
    wheel_inertia = sum(
        t * np.eye(3) + (s - t) * np.outer(u, u) + m * (p @ p * np.eye(3) - np.outer(p, p))
        for u, p, s, t, m in zip(axes, positions, spin, transverse, mass)
    )
    first_moment = rot @ (mass @ positions)
    assert_close(h1[3:6, 3:6], h0[3:6, 3:6] + rot @ wheel_inertia @ rot.T, 1e-12, "system inertia about r0")
    assert_close(h1[:3, :3], h0[:3, :3] + mass.sum() * np.eye(3), 1e-13, "system mass block")
    assert_close(h1[3:6, :3] - h0[3:6, :3], sdjax.rotation.skew(first_moment), 1e-13, "first-moment block")
    # Geometry: wheel centroids and axes in the inertial frame; the arm's end point unchanged.
    kin0, kin1 = sdjax.forward_kinematics(arm7_model, before), sdjax.forward_kinematics(model, after)
    assert_close(kin1.centroid[n + 1 :], np.array([1.0, 2.0, 3.0]) + positions @ rot.T, 1e-13, "wheel centroids")
    assert_close(kin1.joint_axis[n:], axes @ rot.T, 1e-13, "wheel axes (inertial)")
    assert_close(kin1.end_point_position, kin0.end_point_position, 1e-13, "end point")
    # Adding more wheels continues the numbering; custom names need explicit wheel_joints.
    more = mv.add_reaction_wheels(model, [[0.0, 0.0, 1.0]], spin_inertia=0.1, transverse_inertia=0.06, mass=2.0)
    assert more.link_names[-1] == "reaction_wheel_5" and mv.reaction_wheel_joints(more) == (8, 9, 10, 11, 12)
    named = mv.add_reaction_wheels(
        arm7_model, np.eye(3), spin_inertia=0.1, transverse_inertia=0.06, mass=2.0, names=("rw_x", "rw_y", "rw_z")
    )
    assert mv.reaction_wheel_joints(named) == () and mv.reaction_wheel_joints(named, prefix="rw_") == (8, 9, 10)


def test_wheel_spin_up_reacts_on_the_base():
    """A base alone (isotropic inertia) with one wheel on a tilted axis, wheel centroid on that
    axis: the system is axisymmetric about u, so the base turns about u only, and
    L = (I_b + I_s) w + I_s qd = 0 gives w = -I_s qd / (I_b + I_s) exactly at all times."""
    base = sdjax.Model(
        (),
        "",
        base_mass=100.0,
        base_inertia=10.0 * np.eye(3),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        parent_centroid_to_joint=np.zeros((0, 3)),
        centroid_to_joint=np.zeros((0, 3)),
    )
    u = np.array([2.0, -1.0, 2.0]) / 3.0
    spin = 0.4
    model = mv.add_reaction_wheels(base, [u], spin_inertia=spin, transverse_inertia=0.25, mass=5.0, positions=[0.3 * u])
    state = sdjax.make_state(model, base_rpy=[0.3, 0.2, -0.1])
    traj = sdjax.rollout(model, state, 0.01, 200, jnp.full((200, 1), 0.5))  # 0.5 N m motor for 2 s, floating
    axis = np.asarray(_rotations(traj.states.base_quaternion)) @ u  # u in the inertial frame
    qd = np.asarray(traj.states.qd[:, 0])
    expected = -spin * qd / (10.0 + spin)
    assert_close(traj.states.base_angular_velocity, expected[:, None] * axis, 1e-13, "base reaction")
    assert qd[-1] > 2.0  # the wheel really spun up (0.5 N m * 2 s / effective inertia)
    p, l = momenta(model, traj.states)
    # Zero momentum stays zero: round-off against the wheel momentum I_s qd ~ 1 N m s.
    assert np.max(np.abs(l)) < 1e-13 and np.max(np.abs(p)) < 1e-13
    assert_close(traj.states.base_position, np.zeros((201, 3)), 1e-13, "base centroid at rest")


def test_axis_to_rpy_maps_z_to_the_axis():
    rng = np.random.default_rng(3)
    axes = np.concatenate([np.eye(3), -np.eye(3), rng.normal(size=(20, 3))])
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    z_axis = jax.jit(lambda a: rpy_to_matrix(mv.axis_to_rpy(a))[..., :, 2])
    assert_close(z_axis(jnp.asarray(axes)), axes, 1e-15, "joint z axis")
    # Finite derivatives everywhere, including the +-x axes where roll is arbitrary.
    grads = jax.jit(jax.vmap(jax.jacobian(z_axis)))(jnp.asarray(axes))
    assert bool(jnp.all(jnp.isfinite(grads)))


# ------------------------------------------------------------------------------------------
# Thrusters and saturation.


def test_clip_saturation_is_exact_and_within_limits():
    thrusters = mv.Thrusters(force_limit=[10.0, 20.0, 30.0], torque_limit=5.0, saturation="clip")
    rng = np.random.default_rng(1)
    rot = rpy_to_matrix(jnp.asarray(rng.uniform(-np.pi, np.pi, size=(50, 3))))
    force, torque = jnp.asarray(rng.normal(scale=25.0, size=(50, 3))), jnp.asarray(rng.normal(scale=6.0, size=(50, 3)))
    real_f, real_n = jax.vmap(thrusters.realised_wrench)(rot, force, torque)
    base_cmd_f, base_real_f = jnp.einsum("kji,kj->ki", rot, force), jnp.einsum("kji,kj->ki", rot, real_f)
    base_cmd_n, base_real_n = jnp.einsum("kji,kj->ki", rot, torque), jnp.einsum("kji,kj->ki", rot, real_n)
    limit = np.array([10.0, 20.0, 30.0])
    # Per base axis: exactly the command inside the limits, exactly +-limit outside
    # (up to the two rotations' round-off).
    assert_close(base_real_f, np.clip(base_cmd_f, -limit, limit), 1e-13, "clipped force")
    assert_close(base_real_n, np.clip(base_cmd_n, -5.0, 5.0), 1e-13, "clipped torque")
    assert np.any(np.abs(base_cmd_f) > limit) and np.any(np.abs(base_cmd_f) < limit)
    small = 0.5 * rot[0] @ jnp.array([1.0, 1.0, 1.0])
    assert_close(thrusters.realised_wrench(rot[0], small, small)[0], small, 1e-15, "inside limits")
    assert_close(
        mv.saturate(jnp.array([-50.0, 3.0, 50.0]), jnp.array([10.0, 10.0, jnp.inf]), "clip"),
        jnp.array([-10.0, 3.0, 50.0]),
        0.0,
        "inf limit",
    )


def test_tanh_saturation_is_smooth_and_differentiable():
    limit = jnp.array([10.0, 20.0, jnp.inf])
    value = jnp.array([1e3, -35.0, 7.0])
    out = mv.saturate(value, limit, "tanh")
    assert float(jnp.abs(out[0])) <= 10.0 and float(jnp.abs(out[1])) < 20.0 and float(out[2]) == 7.0
    # Slope 1 at zero (small commands pass almost unchanged), finite everywhere.
    jac = jax.jacobian(lambda v: mv.saturate(v, limit, "tanh"))(jnp.zeros(3))
    assert_close(jac, jnp.eye(3), 1e-15, "slope at zero")
    thrusters = mv.Thrusters(force_limit=[10.0, 20.0, 30.0], torque_limit=[1.0, 2.0, 3.0], saturation="tanh")
    rot = rpy_to_matrix(jnp.array([0.3, -1.2, 2.0]))

    def total(f):
        real_f, real_n = thrusters.realised_wrench(rot, f, 2.0 * f)
        return jnp.sum(real_f**2) + jnp.sum(real_n)

    for f in (jnp.zeros(3), jnp.array([5.0, -40.0, 1e4])):
        g = jax.grad(total)(f)
        assert bool(jnp.all(jnp.isfinite(g)))
    # Gradients reach the limits too (e.g. to size thrusters).
    g_limit = jax.grad(lambda th: jnp.sum(th.realised_wrench(rot, jnp.array([50.0, 0.0, 0.0]), jnp.zeros(3))[0] ** 2))(
        thrusters
    )
    assert bool(jnp.all(jnp.isfinite(g_limit.force_limit))) and float(jnp.max(jnp.abs(g_limit.force_limit))) > 0
    none = mv.Thrusters(saturation="none")
    f = jnp.array([1e6, -2e6, 3.0])
    assert_close(none.realised_wrench(rot, f, f)[0], f, 1e-15, "no saturation")


# ------------------------------------------------------------------------------------------
# Base laws, transformations, float32.


def test_attitude_error_is_shortest_rotation_and_smooth():
    rng = np.random.default_rng(2)
    quat = sdjax.quat_normalize(jnp.asarray(rng.normal(size=4)))
    phis = jnp.array([[0.3, -0.2, 0.5], [0.0, 0.0, 3.0], [1e-9, 0.0, 0.0], [0.0, 0.0, 0.0]])

    @jax.jit
    def recovered(phis):
        targets = quat_multiply(rotation_vector_to_quat(phis), quat)
        return mv.quat_error_vector(targets, quat), mv.quat_error_vector(-targets, quat)

    direct, flipped = recovered(phis)
    assert_close(direct, phis, 1e-12, "rotation vector")
    assert_close(flipped, phis, 1e-12, "sign of the target")
    # A 3.5 rad rotation is reached the short way: -(2 pi - 3.5) about the same axis.
    assert_close(
        recovered(jnp.array([[0.0, 3.5, 0.0]]))[0], jnp.array([[0.0, 3.5 - 2 * np.pi, 0.0]]), 1e-12, "shortest path"
    )
    jac = jax.jit(jax.jacobian(mv.quat_error_vector, argnums=1))(quat, quat)  # at zero error
    assert bool(jnp.all(jnp.isfinite(jac)))
    # The PD laws, evaluated as compiled programs.
    state = sdjax.make_state(
        sdjax.models.spacedyn_sample(), base_quaternion=quat, base_angular_velocity=[0.1, 0.0, -0.2]
    )
    target = quat_multiply(rotation_vector_to_quat(jnp.array([0.0, 0.1, 0.0])), quat)
    at_zero = eqx.filter_jit(lambda law, s: law(0.0, s))
    assert_close(at_zero(mv.AttitudePD(target, 3.0, 2.0), state), jnp.array([-0.2, 0.3, 0.4]), 1e-12, "PD torque")
    assert_close(
        at_zero(mv.TranslationPD(jnp.array([1.0, 0.0, 0.0]), 2.0, 1.0), state),
        jnp.array([2.0, 0.0, 0.0]),
        1e-15,
        "PD force",
    )


def _wheeled_base(dtype=None):
    base = sdjax.Model(
        (),
        "",
        base_mass=50.0,
        base_inertia=np.diag([4.0, 5.0, 6.0]),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        parent_centroid_to_joint=np.zeros((0, 3)),
        centroid_to_joint=np.zeros((0, 3)),
        dtype=dtype,
    )
    # Four wheels in a pyramid: least-squares allocation with k > 3.
    c, s = np.cos(0.6), np.sin(0.6)
    axes = np.array([[c, 0.0, s], [-c, 0.0, s], [0.0, c, s], [0.0, -c, s]])
    return mv.add_reaction_wheels(base, axes, spin_inertia=0.05, transverse_inertia=0.03, mass=1.0)


def test_rotation_floating_pyramid_jit_vmap_grad_and_float32():
    model = _wheeled_base()
    state = sdjax.make_state(model, base_angular_velocity=[0.05, -0.03, 0.02])
    target = rotation_vector_to_quat(jnp.array([0.1, 0.05, -0.1]))

    def final_error(kp):
        law = mv.maneuver_law(model, "rotation-floating", attitude_law=mv.AttitudePD(target, kp, 15.0))
        traj = sdjax.rollout(model, state, 0.02, 100, law)
        return jnp.sum(mv.quat_error_vector(target, traj.states.base_quaternion[-1]) ** 2), traj

    # vmap over gains and the derivative with respect to the gain, in one compiled program
    # (forward mode; reverse mode through rollout is covered by test_integrate and compiles
    # ~3x slower). The batch holds kp - h, kp, kp + h for a central difference.
    h = 1e-4

    def with_aux(kp):
        error, traj = final_error(kp)
        return error, (error, traj)

    batched = jax.jit(jax.vmap(jax.jacfwd(with_aux, has_aux=True)))
    slope, (errors, trajs) = batched(20.0 + jnp.array([-h, 0.0, h]))
    traj = jax.tree.map(lambda x: x[1], trajs)
    fd = (errors[2] - errors[0]) / (2 * h)
    # Central difference: truncation ~h^2 times the third derivative, round-off ~1e-16 / h.
    assert_close(slope[1], fd, 1e-7, "derivative vs central difference")
    assert bool(jnp.all(jnp.isfinite(slope))) and float(jnp.abs(slope[1])) > 0
    assert float(errors[1]) < 1e-3  # the attitude reached its target
    p, l = momenta(model, traj.states)
    # Internal torques only: measured drift ~3e-11 relative (RK4 at 0.02 s, stiff gains).
    assert np.max(np.abs(l - l[0])) < 1e-9 * np.linalg.norm(l[0]) and np.max(np.abs(p)) < 1e-14
    # Pyramid (k = 4): the minimum-norm allocation realises the desired torque exactly, at
    # every step (the base receives -A0 U tau_w).
    law = mv.maneuver_law(model, "rotation-floating", attitude_law=mv.AttitudePD(target, 20.0, 15.0))
    assert_close(wheel_reaction(model, traj, 0), evaluate_law(law.attitude_law, traj), 1e-12, "pyramid allocation")
    # Reverse mode through the law itself (gains and state).
    grads = eqx.filter_jit(jax.grad(lambda lw, s: jnp.sum(lw(0.0, s).tau ** 2), argnums=(0, 1)))(law, state)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(grads))
    assert float(jnp.abs(grads[0].attitude_law.kd)) > 0
    # float32: the law follows the state's dtype (limits and gains stored in float64 are cast,
    # as strict promotion requires); values agree with float64 to float32 round-off, and a
    # whole rollout traces to float32 (eval_shape: no second compilation).
    model32 = _wheeled_base(jnp.float32)
    state32 = sdjax.make_state(model32, base_angular_velocity=[0.05, -0.03, 0.02])
    law32 = mv.maneuver_law(model32, "rotation-floating", attitude_law=mv.AttitudePD(target, 20.0, 15.0))
    evaluate = eqx.filter_jit(lambda lw, s: lw(0.0, s).tau)
    tau32 = evaluate(law32, state32)
    assert tau32.dtype == jnp.float32
    assert_close(tau32, evaluate(law, state), 1e-6, "float32 wheel torques")
    shapes = jax.eval_shape(lambda: sdjax.rollout(model32, state32, 0.02, 100, law32))
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(shapes))


# ------------------------------------------------------------------------------------------
# Errors.


def test_add_reaction_wheels_rejects_bad_input(arm7_model):
    ok = dict(spin_inertia=0.1, transverse_inertia=0.06, mass=2.0)
    eye = np.eye(3)
    cases = [
        (dict(axes=[1.0, 0.0, 0.0]), r"axes expected shape \(k, 3\)"),
        (dict(axes=np.zeros((0, 3))), r"axes expected shape \(k, 3\)"),
        (dict(axes=[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), r"axes\[1\] is zero"),
        (dict(axes=[[1.0, 0.0, 0.0], [0.0, 0.0, 1.1]]), r"axes\[1\] .* is not a unit vector"),
        (dict(axes=[[np.nan, 0.0, 0.0]]), r"axes\[0\] .* is not finite"),
        (dict(spin_inertia=[0.1, -0.1, 0.1]), r"spin_inertia\[1\] must be positive"),
        (dict(transverse_inertia=[0.1, 0.1, 0.0]), r"transverse_inertia\[2\] must be positive"),
        (dict(mass=[-1.0, 1.0, 1.0]), r"mass\[0\] must be positive"),
        (dict(mass=[1.0, 1.0]), r"mass expected a scalar or shape \(3,\)"),
        (
            dict(spin_inertia=0.2, transverse_inertia=0.05),
            r"spin_inertia\[0\] = 0.2 exceeds 2 \* transverse_inertia\[0\]",
        ),
        (dict(positions=np.zeros((2, 3))), r"positions expected shape \(3, 3\)"),
        (dict(positions=[[0, 0, 0], [0, 0, np.inf], [0, 0, 0]]), r"positions\[1\] is not finite"),
        (dict(names=("a", "b")), "names expected 3 names"),
        (dict(names=("a", "shoulder_yaw", "c")), r"names\[1\] = 'shoulder_yaw' repeats a link name"),
        (dict(names=("a", "b", "a")), r"names\[2\] = 'a' repeats"),
    ]
    for change, message in cases:
        kwargs = {"axes": eye, **ok, **change}
        axes = kwargs.pop("axes")
        with pytest.raises(ValueError, match=message):
            mv.add_reaction_wheels(arm7_model, axes, **kwargs)


def test_thrusters_and_saturate_reject_bad_input():
    with pytest.raises(ValueError, match="unknown saturation 'soft'; choose one of"):
        mv.Thrusters(force_limit=1.0, saturation="soft")
    with pytest.raises(ValueError, match="saturation='none' applies no limits"):
        mv.Thrusters(force_limit=1.0, saturation="none")
    with pytest.raises(ValueError, match="saturation='clip' needs force_limit and/or torque_limit"):
        mv.Thrusters()
    with pytest.raises(ValueError, match=r"Thrusters.torque_limit\[2\]: limit must be positive"):
        mv.Thrusters(torque_limit=[1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"Thrusters.force_limit\[1\]: limit must be positive"):
        mv.Thrusters(force_limit=[1.0, np.nan, 1.0])
    with pytest.raises(ValueError, match=r"Thrusters.force_limit: expected a scalar or shape \(3,\)"):
        mv.Thrusters(force_limit=[1.0, 1.0])
    with pytest.raises(ValueError, match="saturate: unknown saturation 'hard'"):
        mv.saturate(jnp.ones(3), jnp.ones(3), "hard")
    with pytest.raises(ValueError, match=r"AttitudePD: target_quaternion expected shape \(4,\)"):
        mv.AttitudePD(jnp.zeros(3), 1.0, 1.0)
    with pytest.raises(ValueError, match="AttitudePD: target_quaternion must be non-zero"):
        mv.AttitudePD(jnp.zeros(4), 1.0, 1.0)
    with pytest.raises(ValueError, match=r"TranslationPD: target_position expected shape \(3,\)"):
        mv.TranslationPD(jnp.zeros(4), 1.0, 1.0)


def test_maneuver_law_rejects_bad_modes_and_laws(arm7_model, sample_model):
    wheeled = mv.add_reaction_wheels(arm7_model, np.eye(3), spin_inertia=0.1, transverse_inertia=0.06, mass=2.0)
    att = mv.AttitudePD(IDENTITY, 1.0, 1.0)
    trans = mv.TranslationPD(jnp.zeros(3), 1.0, 1.0)
    thr = mv.Thrusters(force_limit=1.0, torque_limit=1.0)
    cases = [
        (
            wheeled,
            "free-floating",
            {},
            r"maneuver_law: unknown maneuvering mode 'free-floating'; choose one of \['floating', 'rotation-floating', 'rotation-flying', 'translation-flying', 'flying'\]",
        ),
        (
            wheeled,
            "rotation-floating",
            {},
            "mode 'rotation-floating' controls the base attitude and needs attitude_law",
        ),
        (
            wheeled,
            "floating",
            dict(attitude_law=att),
            "mode 'floating' does not control the base attitude; attitude_law is not allowed",
        ),
        (wheeled, "rotation-floating", dict(attitude_law=att, translation_law=trans), "translation_law is not allowed"),
        (
            wheeled,
            "rotation-floating",
            dict(attitude_law=att, thrusters=thr),
            "mode 'rotation-floating' applies no external load; thrusters are not allowed",
        ),
        (wheeled, "floating", dict(thrusters=thr), "thrusters are not allowed"),
        (
            wheeled,
            "rotation-flying",
            dict(attitude_law=att),
            "mode 'rotation-flying' applies external loads and needs thrusters",
        ),
        (
            wheeled,
            "rotation-flying",
            dict(attitude_law=att, translation_law=trans, thrusters=thr),
            "translation_law is not allowed",
        ),
        (
            wheeled,
            "translation-flying",
            dict(thrusters=thr),
            "mode 'translation-flying' controls the base translation and needs translation_law",
        ),
        (
            wheeled,
            "flying",
            dict(translation_law=trans, thrusters=thr),
            "mode 'flying' controls the base attitude and needs attitude_law",
        ),
        (
            wheeled,
            "flying",
            dict(attitude_law=att, translation_law=trans, thrusters="thrusters"),
            "thrusters: expected a Thrusters, got str",
        ),
        (wheeled, "rotation-floating", dict(attitude_law=np.ones(3)), "attitude_law: expected a function"),
        (
            arm7_model,
            "rotation-floating",
            dict(attitude_law=att),
            "holds the attitude by reaction wheels, but the model has none",
        ),
        (
            sample_model,
            "translation-flying",
            dict(attitude_law=att, translation_law=trans, thrusters=thr),
            "but the model has none",
        ),
        (
            wheeled,
            "rotation-floating",
            dict(attitude_law=att, wheel_joints=(8, 9)),
            "span fewer than 3 independent directions",
        ),
        (
            wheeled,
            "rotation-floating",
            dict(attitude_law=att, wheel_joints=(8, 9, 11)),
            r"wheel_joints\[2\]: index 11 out of range; expected 1\.\.10 \(the joints of",
        ),
        (
            wheeled,
            "rotation-floating",
            dict(attitude_law=att, wheel_joints=(8, 8, 9)),
            r"wheel_joints\[1\]: joint 8 is listed twice",
        ),
        (
            wheeled,
            "rotation-floating",
            dict(attitude_law=att, wheel_joints=(2, 8, 9)),
            r"wheel_joints\[0\]: joint 2 \('shoulder_pitch'\) is not a reaction wheel",
        ),
        (
            sample_model,
            "floating",
            dict(wheel_joints=(3,)),
            r"wheel_joints\[0\]: joint 3 \('arm1_slider'\) is not a reaction wheel",
        ),
    ]
    for model, mode, kwargs, message in cases:
        # (a wrong type raises TypeError, a wrong value ValueError)
        with pytest.raises(TypeError if ": expected a" in message else ValueError, match=message):
            mv.maneuver_law(model, mode, **kwargs)
    # Coplanar wheels cannot control three axes.
    coplanar = mv.add_reaction_wheels(
        arm7_model,
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [np.sqrt(0.5), np.sqrt(0.5), 0.0]],
        spin_inertia=0.1,
        transverse_inertia=0.06,
        mass=2.0,
    )
    with pytest.raises(ValueError, match="span fewer than 3 independent directions"):
        mv.maneuver_law(coplanar, "rotation-floating", attitude_law=att)
    # Law outputs of the wrong shape are reported when the law is evaluated.
    state = sdjax.make_state(wheeled)
    with pytest.raises(ValueError, match=r"joint_law returned shape \(5,\); expected \(10,\) .* or \(7,\)"):
        mv.maneuver_law(wheeled, "floating", lambda t, s: jnp.zeros(5))(0.0, state)
    with pytest.raises(ValueError, match=r"attitude_law returned shape \(4,\); expected \(3,\)"):
        mv.maneuver_law(wheeled, "rotation-floating", attitude_law=lambda t, s: jnp.zeros(4))(0.0, state)


def test_joint_law_shapes_and_passive_wheels(arm7_model):
    """A joint law may return all n torques (wheel entries are replaced by the mode logic) or
    only the n - k non-wheel ones; modes that do not use the wheels leave them unpowered."""
    wheeled = mv.add_reaction_wheels(arm7_model, np.eye(3), spin_inertia=0.1, transverse_inertia=0.06, mass=2.0)
    state = sdjax.make_state(wheeled, base_angular_velocity=[0.1, 0.0, 0.0])
    full = mv.maneuver_law(wheeled, "floating", lambda t, s: jnp.arange(10.0))(0.0, state)
    short = mv.maneuver_law(wheeled, "floating", lambda t, s: jnp.arange(7.0))(0.0, state)
    np.testing.assert_array_equal(full.tau, np.concatenate([np.arange(7.0), np.zeros(3)]))
    np.testing.assert_array_equal(short.tau, full.tau)
    thr = mv.Thrusters(force_limit=100.0)
    trans = mv.TranslationPD(jnp.array([1.0, 0.0, 0.0]), 2.0, 1.0)
    free_attitude = mv.maneuver_law(wheeled, "translation-flying", translation_law=trans, thrusters=thr)(0.0, state)
    np.testing.assert_array_equal(free_attitude.tau, np.zeros(10))
    assert_close(free_attitude.base_force, jnp.array([2.0, 0.0, 0.0]), 1e-15, "thrust")
    np.testing.assert_array_equal(free_attitude.base_torque, np.zeros(3))
    # Wheels named otherwise are found through wheel_joints.
    named = mv.add_reaction_wheels(
        arm7_model, np.eye(3), spin_inertia=0.1, transverse_inertia=0.06, mass=2.0, names=("a", "b", "c")
    )
    law = mv.maneuver_law(
        named, "rotation-floating", attitude_law=mv.AttitudePD(IDENTITY, 1.0, 1.0), wheel_joints=(8, 9, 10)
    )
    tau = law(0.0, sdjax.make_state(named, base_angular_velocity=[0.1, 0.0, 0.0])).tau
    assert_close(tau, jnp.array([0.0] * 7 + [0.1, 0.0, 0.0]), 1e-15, "wheel torques")  # -U^T (-kd w0)


def test_maneuver_modes_earlier_name_warns():
    """``MODES`` was renamed ``MANEUVER_MODES`` (it is not the base modes of ``BASE_MODES``);
    the earlier name still returns the same tuple, with a warning, at both places it lived."""
    with pytest.warns(DeprecationWarning, match="MANEUVER_MODES"):
        assert mv.MODES is mv.MANEUVER_MODES
    with pytest.warns(DeprecationWarning, match="MANEUVER_MODES"):
        assert sdjax.MODES is sdjax.MANEUVER_MODES
    assert "MODES" not in sdjax.__all__ and "MODES" not in mv.__all__
    with pytest.raises(AttributeError, match="no attribute 'NOT_A_NAME'"):
        mv.NOT_A_NAME  # noqa: B018
