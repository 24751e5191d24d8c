"""Capture of a free-floating target and closed chains through a virtual cut (seed 000).

Seed 000 handles closed kinematic chains (parallel mechanisms, a robot holding an object
with two hands, a servicer holding a target) by a *virtual cut*: the chain is opened at one
joint and the cut is held together by a stiff spring-damper force model. Here the cut joins
a frame ``a`` on one body with a frame ``b`` on another body (of the same system, or of a
second, separately modelled free-flying system such as a captured target). With
``e = p_b - p_a`` (inertial, m) and ``phi`` the rotation vector of ``R_b R_a^T`` (the quaternion
log, :func:`sdjax.rotation.quat_to_rotation_vector`: the inertial-frame rotation that takes
frame ``a`` onto frame ``b``), body ``a`` receives

- the spring force ``K e`` at ``p_a`` and the spring couple ``K_r phi``;
- the damping force ``D (v_b(x) - v_a(x))`` at the mid-point ``x = (p_a + p_b) / 2`` (both
  bodies' velocity fields taken at ``x``) and the damping couple ``D_r (w_b - w_a)``;

and body ``b`` receives the opposite force (spring force at ``p_b``, damping force at ``x``)
and couples. The spring force lies on the line through ``p_a`` and ``p_b`` and the damping
forces share a point, so the loads on the pair have zero resultant and zero moment: the
total linear and angular momentum of the pair are conserved. The spring is conservative
(``K_r phi`` is the gradient of ``K_r |phi|^2 / 2``, because the SO(3) Jacobian of ``phi``
maps ``phi`` to itself) and the damping dissipates ``D |dv|^2 + D_r |dw|^2 >= 0``, so
:func:`pair_energy` never increases. The cut opens by about ``|F| / K`` under a load ``F``:
the constraint violation falls as the stiffness grows (tests/test_capture.py); the stiffness
limits the RK4 step like a contact (``dt < 2.8 / sqrt(K / m_eff)``, :mod:`sdjax.contact`).

Two systems (a servicer and its target; sdjax models have one base each) are integrated
together by :func:`pair_rollout`: one classical RK4 step on the pair state, the cut loads
evaluated at every stage, the robot's control law held over each step. One system with a
closed chain uses :func:`closed_chain_environment` with :func:`sdjax.rollout`.
Units SI; vectors in the inertial frame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from sdjax.algebra import cross3, matmul
from sdjax.control import task_jacobian
from sdjax.dynamics import Controls, make_controls, point_loads
from sdjax.integrate import as_controls, runge_kutta4, state_derivative
from sdjax.kinematics import kinematic_pass, point_velocity
from sdjax.model import Model
from sdjax.momentum import angular_momentum, kinetic_energy, linear_momentum, potential_energy
from sdjax.rotation import matrix_to_rotation_vector, quat_normalize, rpy_to_matrix
from sdjax._checks import check_count, float_array, is_traced
from sdjax.state import State, check_state, make_state, with_base_motion_checked


class BodyFrame(eqx.Module):
    """A frame fixed on a body (a grasp frame, a handle, a cut joint).

    Attributes:
        body: static body index (0 = base, 1..n = links).
        offset: ``(3,)`` origin relative to the body centroid, body frame, m.
        rotation: ``(3, 3)`` frame axes in the body frame (columns).
    """

    body: int = eqx.field(static=True)
    offset: Array
    rotation: Array

    def __init__(self, body: int, offset: Any = None, rotation: Any = None):
        if isinstance(body, bool) or not isinstance(body, (int, np.integer)) or body < 0:
            raise ValueError(f"BodyFrame.body: body index out of range, got {body!r} (0 = base, 1..n = links)")
        self.body = int(body)
        self.offset = jnp.zeros(3) if offset is None else jnp.asarray(offset, jnp.result_type(float))
        self.rotation = (
            jnp.eye(3, dtype=self.offset.dtype) if rotation is None else jnp.asarray(rotation, self.offset.dtype)
        )
        if self.offset.shape != (3,) or self.rotation.shape != (3, 3):
            raise ValueError(
                f"BodyFrame: offset must be (3,) and rotation (3, 3), got {self.offset.shape} and {self.rotation.shape}"
            )

    @classmethod
    def end_point(cls, model: Model, index: int = 0) -> BodyFrame:
        """The frame of end point ``index`` of ``model`` (its link, offset and RPY rotation)."""
        if not 0 <= index < model.num_end_points:
            raise ValueError(
                f"BodyFrame.end_point: end point {index} out of range for model {model.name!r} ({model.num_end_points} end points)"
            )
        return cls(
            model.end_point_link[index], model.centroid_to_end_point[index], rpy_to_matrix(model.end_point_rpy[index])
        )

    def check(self, model: Model, name: str) -> None:
        if not 0 <= self.body <= model.num_joints:
            raise ValueError(
                f"{name}.body: body index {self.body} out of range for model {model.name!r} (0 = base, 1..{model.num_joints} = links)"
            )


class _FrameMotion(eqx.Module):
    position: Array  # (3,) from the body's r0
    rotation: Array  # (3, 3) frame to inertial
    twist: Array  # (6,) spatial twist of the body about r0 (w, v_o)
    base_position: Array  # (3,) r0


def _frame_motion(model: Model, state: State, frame: BodyFrame) -> _FrameMotion:
    dtype = state.q.dtype
    motion = kinematic_pass(model, state)
    frames, twists = motion.frames, motion.twists
    rotation = frames.rotation[frame.body]
    position = frames.centroid[frame.body] + matmul(rotation, frame.offset.astype(dtype))
    return _FrameMotion(
        position, matmul(rotation, frame.rotation.astype(dtype)), twists[frame.body], state.base_position
    )


class VirtualCut(eqx.Module):
    """A 6-D spring-damper joining frame ``a`` and frame ``b`` (see the module docstring).

    Attributes:
        frame_a: :class:`BodyFrame` on system/body ``a`` (e.g. the robot's grasp frame).
        frame_b: :class:`BodyFrame` on system/body ``b`` (e.g. the target's handle).
        stiffness: ``K > 0``, N/m.
        damping: ``D >= 0``, N s/m.
        rotational_stiffness: ``K_r >= 0``, N m/rad (0: a spherical joint).
        rotational_damping: ``D_r >= 0``, N m s/rad.
    """

    frame_a: BodyFrame
    frame_b: BodyFrame
    stiffness: Array
    damping: Array
    rotational_stiffness: Array
    rotational_damping: Array

    def __init__(
        self,
        frame_a: BodyFrame,
        frame_b: BodyFrame,
        stiffness: Any,
        damping: Any = 0.0,
        rotational_stiffness: Any = 0.0,
        rotational_damping: Any = 0.0,
    ):
        self.frame_a, self.frame_b = frame_a, frame_b
        self.stiffness = float_array("VirtualCut.stiffness", stiffness, shape=(), sign="positive")
        self.damping = float_array("VirtualCut.damping", damping, shape=(), sign="non-negative")
        self.rotational_stiffness = float_array(
            "VirtualCut.rotational_stiffness", rotational_stiffness, shape=(), sign="non-negative"
        )
        self.rotational_damping = float_array(
            "VirtualCut.rotational_damping", rotational_damping, shape=(), sign="non-negative"
        )


class CutLoads(eqx.Module):
    """Loads and errors of a :class:`VirtualCut` at one state (inertial frame).

    Attributes:
        position_error: ``(3,)`` ``e = p_b - p_a``, m.
        rotation_error: ``(3,)`` ``phi``, rotation vector of ``R_b R_a^T``, rad.
        points: ``(2, 3)`` ``[p_a, x]``: points of the spring and damping forces on ``a``
            (``b`` gets ``[p_b, x]``), absolute, m.
        forces: ``(2, 3)`` spring and damping forces on ``a`` (``b`` gets their opposites), N.
        torque: ``(3,)`` couple on ``a`` (``b`` gets its opposite), N m.
        potential: ``()`` spring energy ``(K |e|^2 + K_r |phi|^2) / 2``, J.
    """

    position_error: Array
    rotation_error: Array
    points: Array
    forces: Array
    torque: Array
    potential: Array


def _cut_loads(cut: VirtualCut, a: _FrameMotion, b: _FrameMotion) -> CutLoads:
    dtype = a.position.dtype
    pa, pb = a.base_position + a.position, b.base_position + b.position
    error = pb - pa
    phi = matrix_to_rotation_vector(matmul(b.rotation, a.rotation.T))
    middle = 0.5 * (pa + pb)
    relative_velocity = point_velocity(b.twist, middle - b.base_position) - point_velocity(
        a.twist, middle - a.base_position
    )
    relative_rate = b.twist[:3] - a.twist[:3]
    k, d = cut.stiffness.astype(dtype), cut.damping.astype(dtype)
    kr, dr = cut.rotational_stiffness.astype(dtype), cut.rotational_damping.astype(dtype)
    return CutLoads(
        position_error=error,
        rotation_error=phi,
        points=jnp.stack([pa, middle]),
        forces=jnp.stack([k * error, d * relative_velocity]),
        torque=kr * phi + dr * relative_rate,
        potential=0.5 * (k * jnp.sum(error**2) + kr * jnp.sum(phi**2)),
    )


def _loads_on(
    model: Model, state: State, body: int, own_point: Array, middle: Array, forces: Array, torque: Array
) -> Controls:
    zero = jnp.zeros_like(torque)
    return point_loads(model, state, (body, body), jnp.stack([own_point, middle]), forces, jnp.stack([torque, zero]))


@eqx.filter_jit
def cut_loads(
    model_a: Model, state_a: State, model_b: Model, state_b: State, cut: VirtualCut
) -> tuple[Controls, Controls, CutLoads]:
    """Generalized forces of a virtual cut between two systems.

    Arguments:
        model_a, state_a: the system carrying ``cut.frame_a`` (e.g. the servicer).
        model_b, state_b: the system carrying ``cut.frame_b`` (e.g. the target); may be the
            same model and state for a cut inside one system.
        cut: :class:`VirtualCut`.

    Returns:
        ``(controls_a, controls_b, loads)``: :class:`sdjax.Controls` of each system
        (add them to other controls) and the :class:`CutLoads`.
    """
    check_state(model_a, state_a)
    check_state(model_b, state_b)
    cut.frame_a.check(model_a, "VirtualCut.frame_a")
    cut.frame_b.check(model_b, "VirtualCut.frame_b")
    loads = _cut_loads(cut, _frame_motion(model_a, state_a, cut.frame_a), _frame_motion(model_b, state_b, cut.frame_b))
    pb = loads.points[0] + loads.position_error
    on_a = _loads_on(model_a, state_a, cut.frame_a.body, loads.points[0], loads.points[1], loads.forces, loads.torque)
    on_b = _loads_on(model_b, state_b, cut.frame_b.body, pb, loads.points[1], -loads.forces, -loads.torque)
    return on_a, on_b, loads


class ClosedChainEnvironment(eqx.Module):
    """A virtual cut between two bodies of one system as ``environment=`` for :func:`sdjax.rollout`."""

    model: Model
    cut: VirtualCut

    def __call__(self, t: Array, state: State) -> Controls:
        on_a, on_b, _ = cut_loads(self.model, state, self.model, state, self.cut)
        return jax.tree.map(jnp.add, on_a, on_b)


def closed_chain_environment(model: Model, cut: VirtualCut) -> ClosedChainEnvironment:
    """Close a kinematic chain of ``model`` with ``cut`` (both frames on bodies of ``model``);
    pass the result as ``environment=`` to :func:`sdjax.rollout`."""
    cut.frame_a.check(model, "VirtualCut.frame_a")
    cut.frame_b.check(model, "VirtualCut.frame_b")
    return ClosedChainEnvironment(model, cut)


# ------------------------------------------------------------------------------------------
# Two systems integrated together.


class PairState(eqx.Module):
    """States of a robot and a target integrated together (a pytree).

    Attributes:
        robot: :class:`sdjax.State` of the robot (system ``a`` of the cut).
        target: :class:`sdjax.State` of the target (system ``b``).
    """

    robot: State
    target: State


class PairTrajectory(eqx.Module):
    """Result of :func:`pair_rollout`.

    Attributes:
        time: ``(N + 1,)`` s.
        states: :class:`PairState` with a leading axis ``N + 1``.
        controls: robot :class:`sdjax.Controls` held over each step, leading axis ``N``.
    """

    time: Array
    states: PairState
    controls: Controls


PairControlLaw = Callable[[Array, PairState], Any]


def _pair_rate(robot: Model, target: Model, cut: VirtualCut, controls: Controls, pair: PairState) -> PairState:
    on_robot, on_target, _ = cut_loads(robot, pair.robot, target, pair.target, cut)
    applied = jax.tree.map(jnp.add, controls, on_robot)
    return PairState(state_derivative(robot, pair.robot, applied), state_derivative(target, pair.target, on_target))


def _normalize_pair(pair: PairState) -> PairState:
    return PairState(
        eqx.tree_at(lambda s: s.base_quaternion, pair.robot, quat_normalize(pair.robot.base_quaternion)),
        eqx.tree_at(lambda s: s.base_quaternion, pair.target, quat_normalize(pair.target.base_quaternion)),
    )


@eqx.filter_jit
def pair_rk4_step(
    robot: Model, target: Model, cut: VirtualCut, pair: PairState, dt: Any, controls: Controls | None = None
) -> PairState:
    """One classical RK4 step of robot + target coupled by ``cut`` (loads at every stage;
    ``controls`` on the robot held over the step); quaternions normalised at the end."""
    dtype = pair.robot.q.dtype
    controls = make_controls(robot, dtype=dtype) if controls is None else as_controls(robot, controls, dtype)
    new = runge_kutta4(lambda stage, _: _pair_rate(robot, target, cut, controls, stage), pair, jnp.asarray(dt, dtype))
    return _normalize_pair(new)


@eqx.filter_jit
def pair_rollout(
    robot: Model,
    target: Model,
    cut: VirtualCut,
    initial: PairState,
    dt: Any,
    num_steps: int,
    control: PairControlLaw | None = None,
    *,
    t0: Any = 0.0,
) -> PairTrajectory:
    """Simulate a robot and a free-floating target joined by a virtual cut (``lax.scan``, RK4).

    Arguments:
        robot, target: the two systems (``cut.frame_a`` on ``robot``, ``cut.frame_b`` on ``target``).
        cut: :class:`VirtualCut`.
        initial: :class:`PairState` at ``t0``.
        dt: step, s (see the stiffness limit in the module docstring).
        num_steps: number of steps (static).
        control: ``(t, pair_state) -> tau`` ``(n_robot,)`` or ``-> Controls`` for the robot,
            evaluated at the start of each step and held over it (default none).
        t0: initial time, s.

    Returns:
        :class:`PairTrajectory`.
    """
    check_state(robot, initial.robot)
    check_state(target, initial.target)
    cut.frame_a.check(robot, "VirtualCut.frame_a")
    cut.frame_b.check(target, "VirtualCut.frame_b")
    num_steps = check_count("pair_rollout: num_steps", num_steps, 0)
    initial = eqx.tree_at(
        lambda p: (p.robot, p.target),
        initial,
        (
            with_base_motion_checked(robot, initial.robot, "pair_rollout: initial.robot"),
            with_base_motion_checked(target, initial.target, "pair_rollout: initial.target"),
        ),
    )
    dtype = initial.robot.q.dtype
    t0 = jnp.asarray(t0, dtype)
    dt = jnp.asarray(dt, dtype)

    def step(carry, _):
        pair, k = carry
        t = t0 + k.astype(dtype) * dt
        applied = make_controls(robot, dtype=dtype) if control is None else as_controls(robot, control(t, pair), dtype)
        new = pair_rk4_step(robot, target, cut, pair, dt, applied)
        return (new, k + 1), (new, applied)

    _, (states, controls) = lax.scan(step, (initial, jnp.asarray(0, jnp.int32)), None, length=num_steps)
    history = jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), initial, states)
    return PairTrajectory(time=t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt, states=history, controls=controls)


@eqx.filter_jit
def pair_momentum(robot: Model, target: Model, pair: PairState) -> tuple[Array, Array]:
    """Total linear momentum ``(3,)`` (kg m/s) and angular momentum about the inertial origin
    ``(3,)`` (kg m^2/s) of robot + target (``jax.vmap`` over a trajectory)."""
    p = linear_momentum(robot, pair.robot) + linear_momentum(target, pair.target)
    h = angular_momentum(robot, pair.robot) + angular_momentum(target, pair.target)
    return p, h


@eqx.filter_jit
def pair_energy(robot: Model, target: Model, cut: VirtualCut, pair: PairState) -> Array:
    """Kinetic + gravitational energy of both systems + the cut's spring energy, J."""
    _, _, loads = cut_loads(robot, pair.robot, target, pair.target, cut)
    systems = kinetic_energy(robot, pair.robot) + kinetic_energy(target, pair.target)
    gravity = potential_energy(robot, pair.robot) + potential_energy(target, pair.target)
    return systems + gravity + loads.potential


@eqx.filter_jit
def cut_error(robot: Model, target: Model, cut: VirtualCut, pair: PairState) -> tuple[Array, Array]:
    """Constraint violation of the cut: ``(|e|, |phi|)`` in m and rad."""
    _, _, loads = cut_loads(robot, pair.robot, target, pair.target, cut)
    return jnp.linalg.norm(loads.position_error), jnp.sqrt(jnp.sum(loads.rotation_error**2))


def place_target(
    robot: Model,
    robot_state: State,
    target: Model,
    cut: VirtualCut,
    *,
    angular_velocity: Any = None,
    handle_velocity: Any = None,
) -> State:
    """A target state whose handle frame (``cut.frame_b``, on the target's base) coincides with
    the robot's grasp frame (``cut.frame_a``): the instant of capture.

    Arguments:
        robot, robot_state: the robot and its state.
        target: the target (a base alone or with joints at ``q = 0``).
        cut: the grasp cut; ``cut.frame_b.body`` must be 0 (the target's base).
        angular_velocity: ``(3,)`` target angular velocity, inertial, rad/s (default 0).
        handle_velocity: ``(3,)`` velocity of the handle point, inertial, m/s (default 0).

    Returns:
        The target's :class:`sdjax.State`.
    """
    if cut.frame_b.body != 0:
        raise ValueError("place_target: the handle (cut.frame_b) must be on the target's base (body 0)")
    dtype = robot_state.q.dtype
    grasp = _frame_motion(robot, robot_state, cut.frame_a)
    base_rotation = matmul(grasp.rotation, cut.frame_b.rotation.astype(dtype).T)
    handle = robot_state.base_position + grasp.position
    position = handle - matmul(base_rotation, cut.frame_b.offset.astype(dtype))
    w = jnp.zeros(3, dtype) if angular_velocity is None else jnp.asarray(angular_velocity, dtype)
    v = jnp.zeros(3, dtype) if handle_velocity is None else jnp.asarray(handle_velocity, dtype)
    return make_state(
        target,
        base_position=position,
        base_rotation=base_rotation,
        base_linear_velocity=v + cross3(w, position - handle),
        base_angular_velocity=w,
        dtype=dtype,
    )


class DetumbleLaw(eqx.Module):
    """Post-capture detumbling through the arm: internal torques that damp the motion of the
    hand (and so of the grasped target) relative to the servicer's base.

    ``tau = Kp (q_hold - q) - Kd qd - J_m^T diag(D_v, D_v, D_v, D_w, D_w, D_w) J_m qd``, with
    ``J_m`` the fixed-base Jacobian of the grasp point (:func:`sdjax.task_jacobian` with
    ``base="fixed"``): ``J_m qd`` is the hand's twist relative to the base. The torques are
    internal, so the pair's total momentum is unchanged; the relative motion decays and the
    stack ends rotating as one rigid body (its momentum cannot be removed without external
    loads). ``(t, pair_state) -> (n,)``, for :func:`pair_rollout`.

    Attributes:
        kp, kd: joint stiffness (N m/rad) and damping (N m s/rad), scalars or ``(n,)``.
        q_hold: ``(n,)`` posture held, rad.
        linear_damping: ``D_v``, N s/m. angular_damping: ``D_w``, N m s/rad.
        end_point: static index of the grasping end point.
    """

    model: Model
    kp: Array
    kd: Array
    q_hold: Array
    linear_damping: Array
    angular_damping: Array
    end_point: int = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        kp: Any,
        kd: Any,
        q_hold: Any,
        linear_damping: Any = 0.0,
        angular_damping: Any = 0.0,
        end_point: int = 0,
    ):
        self.model = model
        self.kp = jnp.asarray(kp, model.dtype)
        self.kd = jnp.asarray(kd, model.dtype)
        self.q_hold = jnp.asarray(q_hold, model.dtype)
        if self.q_hold.shape != (model.num_joints,):
            raise ValueError(f"DetumbleLaw.q_hold: expected shape ({model.num_joints},), got {self.q_hold.shape}")
        self.linear_damping = float_array("DetumbleLaw.linear_damping", linear_damping, shape=(), sign="non-negative")
        self.angular_damping = float_array(
            "DetumbleLaw.angular_damping", angular_damping, shape=(), sign="non-negative"
        )
        for name in ("kp", "kd"):
            if not is_traced(getattr(self, name)) and np.any(np.asarray(getattr(self, name)) < 0):
                raise ValueError(f"DetumbleLaw.{name}: gains must be non-negative")
        self.end_point = int(end_point)

    def __call__(self, t: Array, pair: PairState | State) -> Array:
        state = pair.robot if isinstance(pair, PairState) else pair
        dtype = state.q.dtype
        jac, _ = task_jacobian(self.model, state, end_point=self.end_point, base="fixed")
        twist = matmul(jac, state.qd)
        gains = jnp.concatenate(
            [jnp.full(3, self.linear_damping.astype(dtype)), jnp.full(3, self.angular_damping.astype(dtype))]
        )
        return (
            self.kp.astype(dtype) * (self.q_hold.astype(dtype) - state.q)
            - self.kd.astype(dtype) * state.qd
            - matmul(jac.T, gains * twist)
        )


__all__ = [
    "BodyFrame",
    "ClosedChainEnvironment",
    "CutLoads",
    "DetumbleLaw",
    "PairState",
    "PairTrajectory",
    "VirtualCut",
    "closed_chain_environment",
    "cut_error",
    "cut_loads",
    "pair_energy",
    "pair_momentum",
    "pair_rk4_step",
    "pair_rollout",
    "place_target",
]
