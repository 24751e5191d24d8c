"""Gradient-based motion planning for free-floating manipulators (optax through RK4 rollouts).

A joint trajectory is a clamped uniform B-spline (:class:`SplineTrajectory`, degree 3 or 5)
that starts at the current joint positions at rest and ends at rest; its free control
points are the decision variables. The trajectory is executed on the free-floating system
(zero momentum, no base actuation) by computed torque with the exact model
(:class:`sdjax.ComputedTorque`, floating mode: ``tau = H* u + C*``, seed 003 eqs 44-50 and
112-115) inside an RK4 :func:`sdjax.rollout` (``checkpoint=True`` by default, so reverse-mode
memory grows with the number of steps, not with the RK4 stage intermediates). The loss of a
plan (:func:`plan_loss`) is

    L = w_p |x_d - x(T)|^2 + w_o |phi(R_d R(T)^T)|^2 + w_a |phi_base(T)|^2
        + w_e int |tau|^2 dt + w_l int (hinge(q)^2 + hinge(tau)^2) dt

with ``x``, ``R`` the end-point position and rotation at the final time ``T``,
``phi_base`` the rotation vector of the base attitude change (final relative to initial;
the zero-momentum base turns in reaction to the arm, and the joint path decides how much)
and ``hinge`` the amount by which a joint position leaves ``joint_limits``, a torque
exceeds ``torque_limit`` or a link capsule enters a keep-out sphere (``obstacles``,
:func:`obstacle_penetration`). Joint limits can also be enforced by projection: a B-spline lies
in the convex hull of its control points, so clipping the control points into the box keeps
the whole reference inside it.

- :class:`PlanningProblem`: model, start state, target, horizon, limits, weights, gains
  (validated: every bad argument raises ``ValueError`` naming it).
- :func:`plan_loss`, :func:`simulate_plan`: loss and full evaluation (:class:`PlanEvaluation`)
  of spline coefficients or any joint reference.
- :func:`initial_coefficients`: multi-start guesses around a straight joint-space path.
- :func:`optimize_plan`: batched multi-start Adam (``jax.vmap`` over starts, ``lax.scan``
  over iterations) returning a :class:`PlanResult` with the best feasible start.
- :func:`refine_plan`: the accuracy pass (Gauss-Newton on the end-point error) that puts a
  plan on its target.
- :func:`reactionless_plan`: reach the target with zero base attitude change (Gauss-Newton on
  the end-point and attitude residuals, :class:`ReactionlessPlan`).
- :func:`straight_line_plan`: the naive baseline, a rest-to-rest straight line in joint space
  to a goal that reaches the target (inverse kinematics, fixed-base by default, refined by
  Gauss-Newton through the same free-floating rollout, so the baseline ends on the target;
  compare plans at equal end-point accuracy, see :func:`improvement_factor`).

Every plan is executed with the tracking law evaluated at every RK4 stage (continuous-time
tracking, :func:`simulate_plan`). The three Gauss-Newton planners (straight line, accuracy pass,
reactionless) run one compiled program, their settings as data.

Frames inertial, units SI, angles rad.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from sdjax.algebra import matmul
from sdjax.control import ComputedTorque, inverse_kinematics
from sdjax.dynamics import floating_inverse_dynamics, make_controls
from sdjax.integrate import Trajectory, rollout, runge_kutta4
from sdjax.kinematics import forward_kinematics
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import (
    matrix_to_rotation_vector,
    quat_conjugate,
    quat_multiply,
    quat_normalize,
    quat_rate,
    quat_to_rotation_vector,
)
from sdjax._checks import (
    check_choice,
    check_count,
    check_index,
    check_pair,
    check_type,
    float_array,
    is_traced,
    renamed_keyword,
    rotation_matrix,
)
from sdjax._compile import solver_jit
from sdjax._derivatives import jvp_along_nonzero
from sdjax.solvers import levenberg_marquardt
from sdjax.state import State, check_state

__all__ = [
    "DEGREES",
    "IK_ITERATIONS",
    "MINIMUM_TIME_TRIALS",
    "MinimumTimePlan",
    "PlanEvaluation",
    "PlanResult",
    "PlanningProblem",
    "RETIMING_ROUNDS",
    "SOLVER_STEPS",
    "ReactionlessPlan",
    "SplineTrajectory",
    "StraightLinePlan",
    "bspline_basis",
    "improvement_factor",
    "initial_coefficients",
    "link_segments",
    "minimum_time_plan",
    "obstacle_penetration",
    "optimize_plan",
    "plan_loss",
    "reactionless_plan",
    "refine_plan",
    "simulate_plan",
    "straight_line_plan",
]

#: Supported spline degrees: cubic (zero rate at both ends) and quintic (zero rate and
#: acceleration at both ends).
DEGREES = (3, 5)

#: Iterations of the inverse kinematics that finds a straight line's goal.
IK_ITERATIONS = 200


# ------------------------------------------------------------------------------------------
# Clamped uniform B-splines.


def _knots(num_points: int, degree: int) -> np.ndarray:
    """Clamped uniform knot vector on [0, 1], length ``num_points + degree + 1``."""
    inner = np.linspace(0.0, 1.0, num_points - degree + 1)
    return np.concatenate([np.zeros(degree), inner, np.ones(degree)])


def bspline_basis(s: Any, num_points: int, degree: int) -> tuple[Array, Array, Array]:
    """Clamped uniform B-spline basis and its first two derivatives at ``s`` (Cox-de Boor).

    Arguments:
        s: ``()`` curve parameter, clipped to [0, 1].
        num_points: number of control points ``K >= degree + 1`` (static).
        degree: spline degree ``p >= 1`` (static).

    Returns:
        ``(N, dN/ds, d2N/ds2)``, each ``(K,)``; ``sum(N) == 1``.

    Raises:
        TypeError: ``num_points`` or ``degree`` not an integer.
        ValueError: ``degree < 1`` or ``num_points < degree + 1`` (the basis would not sum to 1).
    """
    degree = check_count("bspline_basis: degree", degree, 1)
    num_points = check_count("bspline_basis: num_points", num_points, 1)
    if num_points < degree + 1:
        raise ValueError(
            f"bspline_basis: num_points: a degree-{degree} basis needs at least degree + 1 = {degree + 1} control "
            f"points, got {num_points}"
        )
    s = jnp.clip(jnp.asarray(s), 0.0, 1.0)
    dtype = s.dtype
    knots = _knots(num_points, degree)
    segments = num_points - degree
    span = degree + jnp.clip(jnp.floor(s * segments).astype(jnp.int32), 0, segments - 1)
    levels = [(jnp.arange(num_points + degree, dtype=jnp.int32) == span).astype(dtype)]
    # 1 / knot spans of level k (k = 1..degree).
    inverse_left: dict[int, Array] = {}
    inverse_right: dict[int, Array] = {}
    for k in range(1, degree + 1):
        i = np.arange(num_points + degree - k)
        left, right = knots[i + k] - knots[i], knots[i + k + 1] - knots[i + 1]
        inv_l = np.where(left > 0, 1.0 / np.where(left > 0, left, 1.0), 0.0)
        inv_r = np.where(right > 0, 1.0 / np.where(right > 0, right, 1.0), 0.0)
        inverse_left[k] = jnp.asarray(inv_l, dtype)
        inverse_right[k] = jnp.asarray(inv_r, dtype)
        prev = levels[-1]
        levels.append(
            (s - jnp.asarray(knots[i], dtype)) * inverse_left[k] * prev[:-1]
            + (jnp.asarray(knots[i + k + 1], dtype) - s) * inverse_right[k] * prev[1:]
        )

    def derivative(order: int, k: int) -> Array:
        if order == 0:
            return levels[k]
        lower = derivative(order - 1, k - 1)
        return k * (inverse_left[k] * lower[:-1] - inverse_right[k] * lower[1:])

    second = derivative(2, degree) if degree >= 2 else jnp.zeros((num_points,), dtype)
    return levels[degree], derivative(1, degree), second


def _rest_points(degree: int) -> int:
    """Control points repeated at each end: 2 for a cubic (zero end rates), 3 for a quintic
    (zero end rates and accelerations)."""
    return 1 + (degree - 1) // 2


class SplineTrajectory(eqx.Module):
    """Rest-to-rest joint trajectory: a clamped uniform B-spline on ``[0, duration]``.

    The control points are ``r`` copies of ``start``, the free ``coefficients`` and ``r - 1``
    further copies of the last coefficient row (``r = 2`` for a cubic, 3 for a quintic), so
    the motion starts at ``start`` and ends at ``coefficients[-1]`` with zero rate (and, for a
    quintic, zero acceleration) at both ends. Called with a time it returns
    ``(q_d, qd_d, qdd_d)`` (a reference for :class:`sdjax.ComputedTorque`); before 0 it holds
    ``start`` and after ``duration`` the goal, at rest (at ``duration`` itself the acceleration
    is its left limit, the motion's last instant).

    Attributes:
        start: ``(n,)`` initial joint positions, rad or m.
        coefficients: ``(m, n)`` free control points (``m >= 1``), rad or m.
        duration: ``()`` s, positive.
        degree: static, 3 or 5.
    """

    start: Array
    coefficients: Array
    duration: Array
    degree: int = eqx.field(static=True)

    def __init__(self, start: Any, coefficients: Any, duration: Any, degree: int = 3):
        self.start = jnp.asarray(start)
        self.coefficients = jnp.asarray(coefficients)
        if self.start.ndim != 1:
            raise ValueError(f"SplineTrajectory: start expected shape (n,), got {self.start.shape}")
        n = self.start.shape[0]
        if self.coefficients.ndim != 2 or self.coefficients.shape[1] != n or self.coefficients.shape[0] < 1:
            raise ValueError(
                f"SplineTrajectory: coefficients expected shape (m >= 1, {n}), got {self.coefficients.shape}"
            )
        check_choice("SplineTrajectory: degree", degree, DEGREES, "degree")
        self.duration = float_array("SplineTrajectory: duration", duration, shape=(), sign="positive")
        self.degree = int(degree)

    @property
    def control_points(self) -> Array:
        """``(K, n)`` all control points, ``K = m + 2 r - 1``."""
        r = _rest_points(self.degree)
        dtype = self.coefficients.dtype
        head = jnp.broadcast_to(self.start.astype(dtype), (r, self.start.shape[0]))
        tail = jnp.broadcast_to(self.coefficients[-1], (r - 1, self.start.shape[0]))
        return jnp.concatenate([head, self.coefficients, tail])

    @property
    def goal(self) -> Array:
        """``(n,)`` final joint positions."""
        return self.coefficients[-1]

    def __call__(self, t: Any) -> tuple[Array, Array, Array]:
        points = self.control_points
        dtype = points.dtype
        t = jnp.asarray(t, dtype)
        duration = self.duration.astype(dtype)
        n0, n1, n2 = bspline_basis(t / duration, points.shape[0], self.degree)
        # On [0, T], the end included (to round-off: a rollout's last stage time N dt may round
        # just above T): a cubic's acceleration jumps to zero at the end, and the motion's last
        # instant takes its left limit, so RK4's last stage integrates the motion, not the rest
        # after it (taken as zero there, the final joint rates were off by dt/6 times the jump).
        moving = (t >= 0) & (t <= duration * (1 + 8 * jnp.finfo(dtype).eps))
        q = matmul(n0, points)
        qd = jnp.where(moving, matmul(n1, points) / duration, 0.0)
        qdd = jnp.where(moving, matmul(n2, points) / duration**2, 0.0)
        return q, qd, qdd

    @property
    def knot_times(self) -> Array:
        """``(K - p - 1,)`` interior knot times, s: where the spline's pieces meet and the rate
        of its acceleration jumps (an executed plan's torques have kinks there)."""
        interior = _knots(self.control_points.shape[0], self.degree)[self.degree + 1 : -self.degree - 1]
        return self.duration * jnp.asarray(interior, self.coefficients.dtype)

    def sample(self, times: Any) -> tuple[Array, Array, Array]:
        """``(q, qd, qdd)`` at ``(T,)`` times, each ``(T, n)``."""
        return jax.vmap(self)(jnp.asarray(times, self.coefficients.dtype))


# ------------------------------------------------------------------------------------------
# The planning problem.


def _default_gains(num_steps: int, duration: Any) -> tuple[float, float]:
    """Default tracking gains ``(kp, kd)`` of a plan's computed-torque executor: natural
    frequency ``min(5 rad/s, 0.25 / dt)``, critically damped, so that the sampled (zero-order
    hold) PD loop stays well damped (``kd dt <= 0.5``)."""
    omega = min(5.0, 0.25 * num_steps / float(np.asarray(duration)))
    return omega**2, 2.0 * omega


class PlanningProblem(eqx.Module):
    """A point-to-point planning problem for a free-floating system (zero momentum).

    Attributes:
        model: the system (its base is not actuated).
        initial_state: start configuration; its velocities are replaced by rest.
        target_position: ``(3,)`` end-point target, inertial, m.
        target_rotation: ``(3, 3)`` end-point target rotation or ``None`` (position only).
        duration: ``()`` s, the motion time (the rollout horizon).
        num_steps: static number of RK4 steps over ``duration``.
        num_coefficients: static number ``m`` of free spline control points.
        degree: static spline degree (3 or 5).
        end_point: static index of the task end point.
        joint_lower, joint_upper: ``(n,)`` joint limits or ``None``.
        torque_limit: ``(n,)`` symmetric torque limits ``|tau_i| <= tau_max_i`` or ``None``.
        obstacles: ``(k, 4)`` keep-out spheres ``[x, y, z, radius]`` (inertial frame, m) or
            ``None``. The arm is a set of capsules (:func:`link_segments`): each link the segment
            from its joint to each child's joint and each of its end points (to its centroid
            when it has neither), of radius ``link_radius``; the base is not checked.
        link_radius: ``(n,)`` capsule radius of each link, m.
        project_limits: static; clip the control points into the joint limits after every
            optimiser step (default True) besides the penalty.
        position_weight, orientation_weight, attitude_weight, effort_weight, limit_weight:
            ``()`` loss weights (1/m^2, 1/rad^2, 1/rad^2, 1/(N^2 m^2 s), see the module
            docstring).
        kp, kd: ``()`` or ``(n,)`` tracking gains of the computed-torque executor, 1/s^2, 1/s
            (default: critically damped at ``min(5, 0.25 / dt)`` rad/s).
        checkpoint: static, rematerialise rollout steps in reverse mode (bounded memory).
        default_gains: static ``(kp, kd)`` flags, each ``True`` where that gain is the default
            (:meth:`with_duration`, the re-timing planners, derive it again for a new duration).
    """

    model: Model
    initial_state: State
    target_position: Array
    target_rotation: Array | None
    duration: Array
    joint_lower: Array | None
    joint_upper: Array | None
    torque_limit: Array | None
    obstacles: Array | None
    link_radius: Array
    position_weight: Array
    orientation_weight: Array
    attitude_weight: Array
    effort_weight: Array
    limit_weight: Array
    kp: Array
    kd: Array
    num_steps: int = eqx.field(static=True)
    num_coefficients: int = eqx.field(static=True)
    degree: int = eqx.field(static=True)
    end_point: int = eqx.field(static=True)
    project_limits: bool = eqx.field(static=True)
    checkpoint: bool = eqx.field(static=True)
    default_gains: tuple[bool, bool] = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        initial_state: State,
        target_position: Any,
        target_rotation: Any = None,
        *,
        duration: Any,
        num_steps: int,
        num_coefficients: int = 4,
        degree: int = 3,
        end_point: int = 0,
        joint_limits: tuple[Any, Any] | None = None,
        torque_limit: Any = None,
        obstacles: Any = None,
        link_radius: Any = 0.0,
        project_limits: bool = True,
        position_weight: Any = 1e4,
        orientation_weight: Any = 1e2,
        attitude_weight: Any = 1e3,
        effort_weight: Any = 1e-4,
        limit_weight: Any = 1e3,
        kp: Any = None,
        kd: Any = None,
        checkpoint: bool = True,
    ):
        check_no_mimic(model, "PlanningProblem")
        check_state(model, initial_state)
        dtype = initial_state.q.dtype
        n = model.num_joints
        if n < 1:
            raise ValueError("PlanningProblem: model has no joints to plan")
        zero = jnp.zeros((3,), dtype)
        self.model = model
        self.initial_state = State(
            initial_state.base_position,
            initial_state.base_quaternion,
            zero,
            zero,
            initial_state.q,
            jnp.zeros_like(initial_state.q),
        )
        self.target_position = float_array("PlanningProblem: target_position", target_position, shape=(3,), dtype=dtype)
        self.target_rotation = (
            None
            if target_rotation is None
            else rotation_matrix("PlanningProblem: target_rotation", target_rotation, dtype)
        )
        self.duration = float_array("PlanningProblem: duration", duration, shape=(), dtype=dtype, sign="positive")
        num_steps = check_count("PlanningProblem: num_steps", num_steps, 1)
        num_coefficients = check_count("PlanningProblem: num_coefficients", num_coefficients, 1)
        check_choice("PlanningProblem: degree", degree, DEGREES, "degree")
        check_index("PlanningProblem: end_point", end_point, 0, model.num_end_points - 1)
        self.num_steps, self.num_coefficients, self.degree, self.end_point = (
            int(num_steps),
            int(num_coefficients),
            int(degree),
            int(end_point),
        )
        if joint_limits is None:
            self.joint_lower = self.joint_upper = None
        else:
            lower, upper = check_pair(
                "PlanningProblem: joint_limits", joint_limits, "(lower, upper) pair of (n,) arrays"
            )
            self.joint_lower = float_array(
                "PlanningProblem: joint_limits lower", lower, shape=(n,), dtype=dtype, scalar="broadcast"
            )
            self.joint_upper = float_array(
                "PlanningProblem: joint_limits upper", joint_limits[1], shape=(n,), dtype=dtype, scalar="broadcast"
            )
            if not is_traced(joint_limits):
                lower, upper, q0 = (np.asarray(x) for x in (self.joint_lower, self.joint_upper, initial_state.q))
                bad = np.nonzero(lower > upper)[0]
                if bad.size:
                    raise ValueError(
                        f"PlanningProblem: joint_limits lower > upper for joint(s) {bad.tolist()} (impossible limits)"
                    )
                outside = np.nonzero((q0 < lower) | (q0 > upper))[0]
                if outside.size:
                    raise ValueError(
                        f"PlanningProblem: initial_state.q outside joint_limits for joint(s) {outside.tolist()}"
                    )
        if torque_limit is None:
            self.torque_limit = None
        else:
            self.torque_limit = float_array(
                "PlanningProblem: torque_limit", torque_limit, shape=(n,), dtype=dtype, scalar="broadcast"
            )
            if not is_traced(torque_limit) and np.any(np.asarray(self.torque_limit) <= 0):
                bad = np.nonzero(np.asarray(self.torque_limit) <= 0)[0].tolist()
                raise ValueError(
                    f"PlanningProblem: torque_limit must be positive for every joint, joint(s) {bad} are not"
                )
        if obstacles is None:
            self.obstacles = None
        else:
            self.obstacles = float_array("PlanningProblem: obstacles", obstacles, shape=(None, 4), dtype=dtype)
            if self.obstacles.shape[0] == 0:
                raise ValueError("PlanningProblem: obstacles is empty; pass None for no obstacles")
            if not is_traced(obstacles) and np.any(np.asarray(self.obstacles[:, 3]) <= 0):
                bad = np.nonzero(np.asarray(self.obstacles[:, 3]) <= 0)[0].tolist()
                raise ValueError(f"PlanningProblem: obstacles radius (column 3) must be positive, rows {bad} are not")
        self.link_radius = float_array(
            "PlanningProblem: link_radius",
            link_radius,
            shape=(n,),
            dtype=dtype,
            scalar="broadcast",
            sign="non-negative",
        )
        self.project_limits = bool(
            check_type("PlanningProblem: project_limits", project_limits, (bool, np.bool_), "a bool")
        )
        self.position_weight = float_array(
            "PlanningProblem: position_weight", position_weight, shape=(), dtype=dtype, sign="non-negative"
        )
        self.orientation_weight = float_array(
            "PlanningProblem: orientation_weight", orientation_weight, shape=(), dtype=dtype, sign="non-negative"
        )
        self.attitude_weight = float_array(
            "PlanningProblem: attitude_weight", attitude_weight, shape=(), dtype=dtype, sign="non-negative"
        )
        self.effort_weight = float_array(
            "PlanningProblem: effort_weight", effort_weight, shape=(), dtype=dtype, sign="non-negative"
        )
        self.limit_weight = float_array(
            "PlanningProblem: limit_weight", limit_weight, shape=(), dtype=dtype, sign="non-negative"
        )
        self.default_gains = (kp is None, kd is None)
        if kp is None or kd is None:
            if is_traced(duration):
                raise ValueError("PlanningProblem: give kp and kd when duration is traced")
            default_kp, default_kd = _default_gains(num_steps, duration)
            kp = default_kp if kp is None else kp
            kd = default_kd if kd is None else kd
        self.kp = float_array("PlanningProblem: kp", kp, shape=(n,), dtype=dtype, scalar="broadcast")
        self.kd = float_array("PlanningProblem: kd", kd, shape=(n,), dtype=dtype, scalar="broadcast")
        if not is_traced(kp, kd) and (np.any(np.asarray(self.kp) <= 0) or np.any(np.asarray(self.kd) <= 0)):
            raise ValueError("PlanningProblem: kp and kd must be positive")
        self.checkpoint = bool(check_type("PlanningProblem: checkpoint", checkpoint, (bool, np.bool_), "a bool"))

    def with_duration(self, duration: Any) -> PlanningProblem:
        """The same problem over another ``duration`` (s; on the host, not traced): the gains
        that were defaults are those of the new duration, so the result is the problem
        ``PlanningProblem(..., duration=duration)`` with the same arguments."""
        if is_traced(duration) and any(self.default_gains):
            raise ValueError("PlanningProblem.with_duration: a traced duration needs a problem with kp and kd given")
        duration = float_array("PlanningProblem.with_duration: duration", duration, shape=(), sign="positive")
        problem = eqx.tree_at(lambda p: p.duration, self, duration.astype(self.duration.dtype))
        if not any(self.default_gains):
            return problem
        kp, kd = _default_gains(self.num_steps, duration)
        if self.default_gains[0]:
            problem = eqx.tree_at(lambda p: p.kp, problem, jnp.full_like(self.kp, kp))
        if self.default_gains[1]:
            problem = eqx.tree_at(lambda p: p.kd, problem, jnp.full_like(self.kd, kd))
        return problem

    @property
    def dt(self) -> Array:
        """``()`` RK4 step, s."""
        return self.duration / self.num_steps

    @property
    def coefficient_shape(self) -> tuple[int, int]:
        """``(m, n)`` shape of one set of spline coefficients."""
        return (self.num_coefficients, self.model.num_joints)

    def trajectory(self, coefficients: Any) -> SplineTrajectory:
        """The :class:`SplineTrajectory` of one ``(m, n)`` coefficient set."""
        coefficients = _check_coefficients(self, coefficients, batched=False)
        return SplineTrajectory(self.initial_state.q, coefficients, self.duration, self.degree)


def _numbers(name: str, value: Any) -> Any:
    """``value`` unless it is a string: ``jnp.asarray`` reads some strings as dtype names
    (``"a"``, ``"d"``) instead of refusing them, so :func:`float_array` is not given one."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name}: expected numbers, got {type(value).__name__} {value!r}")
    return value


def _check_coefficients(problem: PlanningProblem, coefficients: Any, *, batched: bool, name: str = "") -> Array:
    """Spline coefficients ``(m, n)`` (``batched``: ``(num_starts, m, n)``) in the problem's
    dtype: numbers (``TypeError``), of that shape, finite when concrete (``ValueError``);
    messages start with ``name``."""
    name = name or ("initial_coefficients" if batched else "coefficients")
    arr = float_array(name, _numbers(name, coefficients), dtype=problem.initial_state.q.dtype)
    expected = problem.coefficient_shape
    if batched:
        if arr.ndim != 3 or arr.shape[1:] != expected:
            raise ValueError(f"{name}: expected shape (num_starts, {expected[0]}, {expected[1]}), got {arr.shape}")
        if arr.shape[0] == 0:
            raise ValueError(f"{name}: empty batch (num_starts = 0); give at least one start")
    elif arr.shape != expected:
        raise ValueError(f"{name}: expected shape {expected}, got {arr.shape}")
    return arr


def _check_goal(owner: str, problem: PlanningProblem, goal: Any) -> Array:
    """``(n,)`` joint-space goal: numbers (``TypeError``), finite when concrete (``ValueError``)."""
    n = problem.model.num_joints
    goal = float_array(f"{owner}: goal", _numbers(f"{owner}: goal", goal))
    if goal.shape != (n,):
        raise ValueError(f"{owner}: goal expected shape ({n},), got {goal.shape}")
    return goal


# ------------------------------------------------------------------------------------------
# Evaluation and loss.


class PlanEvaluation(eqx.Module):
    """A joint reference executed on the free-floating system, and its loss terms.

    Attributes:
        trajectory: the :class:`sdjax.Trajectory` (``N + 1`` states, ``N`` controls).
        tau: ``(N, n)`` joint torques applied over each step, N m.
        reference_q: ``(N + 1, n)`` reference joint positions at the step times.
        loss: ``()`` total loss.
        end_point_position: ``(3,)`` final end-point position, m.
        position_error: ``()`` ``|x_d - x(T)|``, m.
        orientation_error: ``()`` rotation angle to the target rotation, rad (0 without one).
        base_attitude_change: ``()`` rotation angle of the final base attitude relative to
            the initial one, rad.
        effort: ``()`` ``int |tau|^2 dt``, N^2 m^2 s.
        joint_violation: ``()`` largest joint-limit excess over the rollout, rad (0 without limits).
        peak_torque: ``(n,)`` largest ``|tau_i|`` over the plan, N m: executed continuously, at
            :data:`LIMIT_SAMPLES` points per step (the step times and states between them); with
            torques held over each step, the held torques.
        torque_violation: ``()`` largest excess ``peak_torque_i - tau_max_i``, N m (0 without
            limits).
        obstacle_violation: ``()`` deepest penetration of a link capsule into a keep-out sphere
            over the plan (at the points ``peak_torque`` is taken at), m (0 without obstacles).
        obstacle_depths: ``(k,)`` that deepest penetration per sphere, m (``(0,)`` without
            obstacles; the residual rows of :func:`reactionless_plan`).

    Executed continuously, the peaks and violations taken between the step times are reports:
    derivatives of an evaluation flow through its step-time values (the loss's), and those of
    ``peak_torque``, ``torque_violation`` and the obstacle terms through their step-time
    samples only.
    """

    trajectory: Trajectory
    tau: Array
    reference_q: Array
    loss: Array
    end_point_position: Array
    position_error: Array
    orientation_error: Array
    base_attitude_change: Array
    effort: Array
    joint_violation: Array
    peak_torque: Array
    torque_violation: Array
    obstacle_violation: Array
    obstacle_depths: Array


def _safe_norm(x: Array) -> Array:
    sq = jnp.sum(x * x)
    return jnp.where(sq > 0, jnp.sqrt(jnp.where(sq > 0, sq, 1.0)), 0.0)


def _base_rotation(problem: PlanningProblem, base_quaternion: Array) -> Array:
    """``(3,)`` rotation vector of a base attitude relative to the initial one, rad (smooth at
    the identity)."""
    return quat_to_rotation_vector(
        quat_multiply(base_quaternion, quat_conjugate(problem.initial_state.base_quaternion))
    )


def _executor(problem: PlanningProblem, reference: Any) -> ComputedTorque:
    return ComputedTorque(problem.model, problem.kp, problem.kd, reference, base="floating")


def _tracking_rates(executor: ComputedTorque, t: Array, state: State) -> tuple[State, Array]:
    """Rates of the closed loop under the exact computed-torque law, and its torques.

    With the law's model the plant's, ``tau = H* u + C*`` (seed 003 eqs 112-115) makes the
    joint accelerations the commanded ``u`` and leaves the base wrench zero, so the base
    acceleration and the torques are :func:`sdjax.floating_inverse_dynamics` of ``u``
    (SPART's ``Floating_ID``): one inverse-dynamics pass and the ``6 x 6`` base block, instead of
    the law's ``H*``, ``C*`` followed by forward dynamics of the whole system. The same closed
    loop up to round-off (the law's base twist is the one zero momentum implies, which the
    rollout keeps to its truncation error); ``tests/test_planning.py`` compares the two.
    """
    u = executor.acceleration_command(t, state)
    base_acceleration, tau = floating_inverse_dynamics(executor.estimated_model, state, u)
    rates = State(
        base_position=state.base_linear_velocity,
        base_quaternion=quat_rate(state.base_quaternion, state.base_angular_velocity),
        base_linear_velocity=base_acceleration[:3],
        base_angular_velocity=base_acceleration[3:],
        q=state.qd,
        qd=u,
    )
    return rates, tau


def _law_at(executor: ComputedTorque, times: Array, states: State) -> tuple[State, Array]:
    """:func:`_tracking_rates` at ``(T,)`` times and a batch of ``T`` states: ``(T,)`` rates
    and ``(T, n)`` torques, N m."""
    return jax.vmap(lambda t, state: _tracking_rates(executor, t, state))(times, states)


def _execute(problem: PlanningProblem, reference: Any, continuous: bool, checkpoint: bool) -> Trajectory:
    """The rollout of ``reference`` under the computed-torque executor with the exact model.

    ``continuous``: the law evaluated at every RK4 stage (a fourth-order discretisation of
    continuous-time tracking, :func:`_tracking_rates`; ``trajectory.controls.tau`` is left zero
    and filled by :func:`_score`); else its torque held over each step (:func:`sdjax.rollout`
    with the law as controller). ``checkpoint``: rematerialise the steps in reverse mode.
    """
    dtype = problem.initial_state.q.dtype
    executor = _executor(problem, reference)
    if not continuous:
        return rollout(
            problem.model, problem.initial_state, problem.dt, problem.num_steps, executor, checkpoint=checkpoint
        )
    dt = problem.dt.astype(dtype)

    def step(state: State, t: Array) -> tuple[State, State]:
        new = runge_kutta4(lambda stage, offset: _tracking_rates(executor, t + offset, stage)[0], state, dt)
        new = eqx.tree_at(lambda s: s.base_quaternion, new, quat_normalize(new.base_quaternion))
        return new, new

    if checkpoint:
        step = jax.checkpoint(step)
    time = jnp.arange(problem.num_steps + 1, dtype=dtype) * dt
    _, states = lax.scan(step, problem.initial_state, time[:-1])
    history = jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), problem.initial_state, states)
    no_loads = make_controls(problem.model, dtype=dtype)
    controls = jax.tree.map(lambda x: jnp.broadcast_to(x, (problem.num_steps, *x.shape)), no_loads)
    return Trajectory(time=time, states=history, controls=controls)


#: Points per step at which an executed plan's torque limits and keep-out spheres are checked
#: (:func:`_between_steps`): the step time and ``LIMIT_SAMPLES - 1`` evenly spaced states
#: between it and the next, plus the motion's last instant and a spline's knots. With the step
#: times alone, a 20-step minimum-time plan's torques, held to their limits there, rose 18 %
#: between them (at the last instant, where a cubic's acceleration jumps to zero); the largest
#: value of a smooth function sampled at spacing ``dt / k`` falls short of its peak by
#: O((dt / k)^2).
LIMIT_SAMPLES = 4


def _hermite(x0: Array, f0: Array, x1: Array, f1: Array, s: Array, h: Array) -> Array:
    """Cubic Hermite interpolant at ``s`` in [0, 1] between values ``x0``, ``x1`` with rates
    ``f0``, ``f1`` over an interval of length ``h`` (error O(h^4), the order of RK4's steps)."""
    s2, s3 = s * s, s * s * s
    return (2 * s3 - 3 * s2 + 1) * x0 + (s3 - 2 * s2 + s) * h * f0 + (3 * s2 - 2 * s3) * x1 + (s3 - s2) * h * f1


def _between_steps(problem: PlanningProblem, reference: Any, trajectory: Trajectory) -> tuple[State, Array]:
    """States and torques of a plan executed continuously (:func:`_execute`) at
    :data:`LIMIT_SAMPLES` points per step and at the end.

    Between step times the states are cubic Hermite interpolants of the step states and their
    closed-loop rates (fourth order, as the rollout; base quaternions renormalised); the joints'
    are the reference plus the interpolated tracking error, which is smooth where the reference
    may be only piecewise so (a spline's acceleration has kinks at its knots). The torques are
    the computed-torque law's at those states (at the final state, the law's torque as the
    motion ends: :class:`SplineTrajectory` takes its acceleration's left limit there). A
    :class:`SplineTrajectory`'s knot times are sampled as well.

    Returns:
        ``(states, tau)``: the ``N + 1`` step states, the in-between ones (``k - 1`` blocks
        of ``N``), then the knots', and the torques at them, N m (the first ``N`` are the
        torques at the step times, :class:`PlanEvaluation`'s ``tau``).
    """
    dtype = problem.initial_state.q.dtype
    executor = _executor(problem, reference)
    time, states = trajectory.time, trajectory.states
    reference_q, reference_qd, reference_qdd = jax.vmap(reference)(time)
    h = problem.dt.astype(dtype)
    steps = time.shape[0] - 1

    # The samples between step times: step ``start[j]`` at ``fraction[j]`` of it (each step at
    # LIMIT_SAMPLES - 1 evenly spaced fractions, stacked by fraction; then a spline's knots).
    fractions = jnp.arange(1, LIMIT_SAMPLES, dtype=dtype) / LIMIT_SAMPLES
    start = jnp.tile(jnp.arange(steps), LIMIT_SAMPLES - 1)
    fraction = jnp.repeat(fractions, steps)
    if isinstance(reference, SplineTrajectory):
        # A spline's torques have kinks at its knots, where a peak between samples would be
        # missed by O(dt / k) rather than O((dt / k)^2): the knots are sampled too.
        knots = reference.knot_times.astype(dtype)
        knot_step = jnp.clip(jnp.floor(knots / h).astype(start.dtype), 0, steps - 1)
        start = jnp.concatenate([start, knot_step])
        fraction = jnp.concatenate([fraction, knots / h - knot_step.astype(dtype)])
    between_time = time[start] + fraction * h
    reference_between = jax.vmap(reference)(between_time)

    def interpolate(rates: State) -> State:
        """The states at ``between_time`` from the step states and their rates."""

        def hermite(x: Array, f: Array) -> Array:
            s = fraction.reshape(-1, *([1] * (x.ndim - 1)))
            return _hermite(x[start], f[start], x[start + 1], f[start + 1], s, h)

        between = jax.tree.map(hermite, states, rates)  # (a batch of states: built leaf by leaf)
        joints = (
            quat_normalize(between.base_quaternion),
            reference_between[0] + hermite(states.q - reference_q, states.qd - reference_qd),
            reference_between[1] + hermite(states.qd - reference_qd, rates.qd - reference_qdd),
        )
        return eqx.tree_at(lambda s: (s.base_quaternion, s.q, s.qd), between, joints)

    # The law at the step states (their rates make the interpolants), then at the states between
    # them: one vmapped law evaluated twice in a two-pass loop, so the program holds one copy of
    # it (two copies cost the planners' compiled programs ~2 s more); both sets of states are
    # padded to one size (the samples between steps are the more: (k - 1) N + knots).
    count = start.shape[0]
    size = max(count, steps + 1)

    def pad(x: Array) -> Array:
        return jnp.concatenate([x, jnp.broadcast_to(x[-1:], (size - x.shape[0], *x.shape[1:]))])

    def evaluate(step_rates: State, first: Array) -> tuple[State, Array]:
        at = jax.tree.map(lambda a, b: jnp.where(first, pad(a), pad(b)), states, interpolate(step_rates))
        rates, tau = _law_at(executor, jnp.where(first, pad(time), pad(between_time)), at)
        return jax.tree.map(lambda new, old: jnp.where(first, new[: steps + 1], old), rates, step_rates), tau

    unknown = jax.tree.map(jnp.zeros_like, states)  # (the first pass computes them)
    rates, (tau, between_tau) = lax.scan(evaluate, unknown, jnp.array([True, False]))
    tau, between_tau, between = tau[: steps + 1], between_tau[:count], interpolate(rates)
    all_states = jax.tree.map(lambda *xs: jnp.concatenate(xs), states, between)
    return all_states, jnp.concatenate([tau, between_tau])


def _law_at_steps(problem: PlanningProblem, reference: Any, trajectory: Trajectory) -> Array:
    """``(N + 1, n)`` torques of the computed-torque law at the step states, N m."""
    return _law_at(_executor(problem, reference), trajectory.time, trajectory.states)[1]


@jax.custom_jvp
def _reported_samples(problem: PlanningProblem, reference: Any, trajectory: Trajectory) -> tuple[State, Array]:
    """:func:`_between_steps` for an evaluation, whose loss takes the torques at the step times
    only: derivatives flow through those (the first ``N + 1`` rows) and not through the
    samples between them (reported peaks and violations; the Gauss-Newton rows differentiate
    :func:`_between_steps` itself). Reverse mode through the two-pass loop compiled 35-40 % larger
    gradient programs (``plan_loss``, ``optimize_plan``) than the law at the step times alone."""
    return _between_steps(problem, reference, trajectory)


def _reported_samples_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
    states, tau = _between_steps(*primals)
    steps = primals[2].time.shape[0]  # (N + 1 step states)
    step_tau_dot = jvp_along_nonzero(_law_at_steps, primals, tangents)[1]
    tau_dot = jnp.concatenate([step_tau_dot, jnp.zeros_like(tau[steps:])])
    # the step states are the trajectory's own (their tangents pass through), the rest held
    step_states_dot = jax.tree.map(
        lambda t, x: jnp.zeros_like(x) if isinstance(t, SymbolicZero) else t,
        tangents[2].states,
        primals[2].states,
        is_leaf=lambda t: isinstance(t, SymbolicZero),
    )
    states_dot = jax.tree.map(lambda d, x: jnp.concatenate([d, jnp.zeros_like(x[steps:])]), step_states_dot, states)
    return (states, tau), (states_dot, tau_dot)


_reported_samples.defjvp(_reported_samples_jvp, symbolic_zeros=True)


@solver_jit
def _evaluate(problem: PlanningProblem, reference: Any, continuous: bool = True) -> PlanEvaluation:
    """The :class:`PlanEvaluation` of ``reference`` (:func:`simulate_plan`)."""
    trajectory = _execute(problem, reference, continuous, problem.checkpoint)
    return _score(problem, reference, trajectory, continuous)


def _score(problem: PlanningProblem, reference: Any, trajectory: Trajectory, continuous: bool) -> PlanEvaluation:
    """The :class:`PlanEvaluation` of an executed plan (:func:`_execute`; ``continuous``: its
    torques are evaluated here, at the step times and between them, :func:`_between_steps`)."""
    dtype = problem.initial_state.q.dtype
    dt = problem.dt
    if continuous:
        sampled_states, sampled_tau = _reported_samples(problem, reference, trajectory)
        steps = trajectory.time.shape[0] - 1
        trajectory = eqx.tree_at(lambda tr: tr.controls.tau, trajectory, sampled_tau[:steps])
    else:  # torques held over each step: the step states and torques are all there is to check
        sampled_states, sampled_tau = trajectory.states, trajectory.controls.tau
    final = jax.tree.map(lambda x: x[-1], trajectory.states)
    kin = forward_kinematics(problem.model, final)
    position = kin.end_point_position[problem.end_point]
    position_error = problem.target_position - position
    loss = problem.position_weight * jnp.sum(position_error**2)
    if problem.target_rotation is not None:
        rotation_error = matrix_to_rotation_vector(
            matmul(problem.target_rotation, kin.end_point_rotation[problem.end_point].T)
        )
        loss = loss + problem.orientation_weight * jnp.sum(rotation_error**2)
        orientation_error = _safe_norm(rotation_error)
    else:
        orientation_error = jnp.zeros((), dtype)
    attitude_sq = jnp.sum(_base_rotation(problem, final.base_quaternion) ** 2)
    tau = trajectory.controls.tau
    effort = jnp.sum(tau**2) * dt
    loss = loss + problem.attitude_weight * attitude_sq + problem.effort_weight * effort
    q = trajectory.states.q
    if problem.joint_lower is not None:
        assert problem.joint_upper is not None  # (PlanningProblem sets both limits or neither)
        excess = jnp.maximum(q - problem.joint_upper, 0.0) + jnp.maximum(problem.joint_lower - q, 0.0)
        loss = loss + problem.limit_weight * jnp.sum(excess**2) * dt
        joint_violation = jnp.max(excess)
    else:
        joint_violation = jnp.zeros((), dtype)
    # The loss's penalties sum over the step times; the reported peaks and violations are taken
    # over the states between them too (LIMIT_SAMPLES per step).
    peak_torque = jnp.max(jnp.abs(sampled_tau), axis=0)
    if problem.torque_limit is not None:
        excess = jnp.maximum(jnp.abs(tau) - problem.torque_limit, 0.0)
        loss = loss + problem.limit_weight * jnp.sum(excess**2) * dt
        torque_violation = jnp.max(jnp.maximum(peak_torque - problem.torque_limit, 0.0))
    else:
        torque_violation = jnp.zeros((), dtype)
    if problem.obstacles is not None:
        depth = obstacle_penetration(problem, trajectory.states)
        loss = loss + problem.limit_weight * jnp.sum(depth**2) * dt
        obstacle_depths = jnp.max(obstacle_penetration(problem, sampled_states), axis=(0, 2))
    else:
        obstacle_depths = jnp.zeros((0,), dtype)
    reference_q = jax.vmap(lambda t: reference(t)[0])(trajectory.time)
    return PlanEvaluation(
        trajectory=trajectory,
        tau=tau,
        reference_q=reference_q,
        loss=loss,
        end_point_position=position,
        position_error=_safe_norm(position_error),
        orientation_error=orientation_error,
        base_attitude_change=jnp.sqrt(attitude_sq),
        effort=effort,
        joint_violation=joint_violation,
        peak_torque=peak_torque,
        torque_violation=torque_violation,
        obstacle_violation=jnp.max(obstacle_depths, initial=0.0),
        obstacle_depths=obstacle_depths,
    )


def link_segments(model: Model) -> tuple[tuple[int, int, int], ...]:
    """The capsule axes of the arm's links, ``(link, kind, index)`` per segment: from the joint
    of ``link`` (1..n) to the joint of child ``index`` (``kind`` 0), to end point ``index``
    (``kind`` 1), or to the link's own centroid (``kind`` 2, a link with neither)."""
    segments = []
    for link in range(1, model.num_joints + 1):
        ends = [(link, 0, child) for child in range(1, model.num_joints + 1) if model.parent[child - 1] == link]
        ends += [(link, 1, e) for e, body in enumerate(model.end_point_link) if body == link]
        segments += ends or [(link, 2, link)]
    return tuple(segments)


def _segment_distance(point: Array, start: Array, end: Array) -> Array:
    """Distance from ``point`` to the segment ``[start, end]`` (all ``(3,)``), m; smooth in the
    segment's interior, a point distance for a zero-length segment."""
    axis = end - start
    length_sq = jnp.sum(axis * axis)
    t = jnp.clip(jnp.sum((point - start) * axis) / jnp.where(length_sq > 0, length_sq, 1.0), 0.0, 1.0)
    return _safe_norm(point - start - t * axis)


def obstacle_penetration(problem: PlanningProblem, states: State) -> Array:
    """``(N, k, S)`` penetration ``max(0, R_k + r_link - distance)`` of each link capsule
    (:func:`link_segments`) into each keep-out sphere of ``problem.obstacles``, at each of the
    ``N`` states (a leading axis of ``states``), m."""
    obstacles = problem.obstacles
    if obstacles is None:
        raise ValueError("obstacle_penetration: the problem has no obstacles")
    segments = link_segments(problem.model)
    links = np.array([s[0] for s in segments])
    radius = obstacles[:, 3][:, None] + problem.link_radius[links - 1][None, :]  # (k, S)

    def one(state: State) -> Array:
        kin = forward_kinematics(problem.model, state)
        starts = kin.joint_position[links - 1]
        ends = jnp.stack(
            [
                kin.joint_position[index - 1] if kind == 0 else kin.end_point_position[index] if kind == 1
                else kin.centroid[index]
                for _, kind, index in segments
            ]
        )  # fmt: skip
        distance = jax.vmap(lambda c: jax.vmap(lambda a, b: _segment_distance(c, a, b))(starts, ends))(obstacles[:, :3])
        return jnp.maximum(radius - distance, 0.0)

    return jax.vmap(one)(states)


def simulate_plan(problem: PlanningProblem, plan: Any, *, continuous: bool = True) -> PlanEvaluation:
    """Execute a plan on the free-floating system and evaluate its loss terms.

    Arguments:
        problem: the :class:`PlanningProblem`.
        plan: ``(m, n)`` spline coefficients (finite), a :class:`SplineTrajectory`, or any joint
            reference ``t -> (q_d, qd_d, qdd_d)`` (e.g. :class:`sdjax.QuinticJointReference`).
        continuous: evaluate the computed-torque law at every RK4 stage (default:
            continuous-time tracking, fourth order in the step, as every planner of this module
            executes its plans; ``trajectory.controls.tau`` holds the torques at the step
            times), or hold its torque over each step (``False``: a controller sampled at
            ``problem.dt``, first order in the step).

    Returns:
        :class:`PlanEvaluation`.
    """
    check_type("simulate_plan: problem", problem, PlanningProblem, "a PlanningProblem")
    if callable(plan):
        reference = plan
    else:
        coefficients = _check_coefficients(problem, plan, batched=False, name="simulate_plan: plan")
        reference = SplineTrajectory(problem.initial_state.q, coefficients, problem.duration, problem.degree)
    return _evaluate(problem, reference, bool(continuous))


def plan_loss(problem: PlanningProblem, coefficients: Any) -> Array:
    """``()`` loss of ``(m, n)`` spline coefficients (see the module docstring);
    differentiable with ``jax.grad`` (reverse mode through the RK4 rollout)."""
    coefficients = _check_coefficients(problem, coefficients, batched=False, name="plan_loss: coefficients")
    return simulate_plan(problem, coefficients).loss


# ------------------------------------------------------------------------------------------
# Initial guesses and the baseline.


def initial_coefficients(
    problem: PlanningProblem, goal: Any, num_starts: int = 1, *, spread: Any = 0.1, seed: int = 0
) -> Array:
    """Multi-start guesses: the straight joint-space path from ``q0`` to ``goal`` (control
    points evenly spaced on the segment) plus, for starts ``1..num_starts-1``, Gaussian
    perturbations of the interior points (standard deviation ``spread`` rad: a finite
    non-negative scalar; ``seed`` an integer, the key of :func:`jax.random.PRNGKey`), clipped
    into the joint limits. ``goal``: ``(n,)`` finite joint positions.

    Returns:
        ``(num_starts, m, n)`` coefficients.
    """
    dtype = problem.initial_state.q.dtype
    n, m = problem.model.num_joints, problem.num_coefficients
    goal = _check_goal("initial_coefficients", problem, goal)
    num_starts = check_count("initial_coefficients: num_starts", num_starts, 1)
    spread = float_array(
        "initial_coefficients: spread", _numbers("initial_coefficients: spread", spread), shape=(), sign="non-negative"
    )
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"initial_coefficients: seed: expected an integer, got {type(seed).__name__} {seed!r}")
    seed = int(seed)
    q0 = problem.initial_state.q
    fractions = jnp.asarray(np.arange(1, m + 1) / m, dtype)
    line = q0 + fractions[:, None] * (goal.astype(dtype) - q0)
    noise = jax.random.normal(jax.random.PRNGKey(seed), (num_starts, m, n), dtype) * jnp.asarray(spread, dtype)
    noise = noise.at[0].set(0.0).at[:, -1].set(0.0)  # start 0 is the straight line; the goal is kept
    guesses = line + noise
    if problem.joint_lower is not None:
        guesses = jnp.clip(guesses, problem.joint_lower, problem.joint_upper)
    return guesses


class StraightLinePlan(eqx.Module):
    """The naive baseline of :func:`straight_line_plan`.

    Attributes:
        goal: ``(n,)`` final joint positions.
        reference: its :class:`SplineTrajectory` from ``q0`` to ``goal`` (control points
            evenly spaced on the joint-space segment).
        evaluation: its :class:`PlanEvaluation`.
        residual_history: ``(I + 1,)`` largest end-point residual entry (m or rad) before each
            Gauss-Newton step on the goal and after the last; NaN past the stop.
    """

    goal: Array
    reference: SplineTrajectory
    evaluation: PlanEvaluation
    residual_history: Array

    @property
    def coefficients(self) -> Array:
        """``(m, n)`` spline coefficients of the line (a start for the other planners)."""
        return self.reference.coefficients


def _task_residual(problem: PlanningProblem, final: State) -> Array:
    """End-point error of the final state: position (m), then rotation vector (rad) when the
    problem has a target rotation."""
    kin = forward_kinematics(problem.model, final)
    parts = [problem.target_position - kin.end_point_position[problem.end_point]]
    if problem.target_rotation is not None:
        parts.append(
            matrix_to_rotation_vector(matmul(problem.target_rotation, kin.end_point_rotation[problem.end_point].T))
        )
    return jnp.concatenate(parts)


def _line_coefficients(problem: PlanningProblem, goal: Array) -> Array:
    """``(m, n)`` control points evenly spaced on the joint-space segment from ``q0`` to
    ``goal``: the spline's straight line (the path stays on the segment, rest to rest)."""
    m = problem.num_coefficients
    q0 = problem.initial_state.q
    fractions = jnp.asarray(np.arange(1, m + 1) / m, goal.dtype)
    return q0 + fractions[:, None] * (goal - q0)


#: Static step capacity of the planners' Gauss-Newton program (:func:`_solve_plan`): the step
#: counts of :func:`straight_line_plan`, :func:`refine_plan` and :func:`reactionless_plan` up to
#: this many are data, so the three share one compiled program (a larger request compiles a
#: program of its own capacity).
SOLVER_STEPS = 30


@solver_jit
def _solve_plan(
    problem: PlanningProblem,
    x: Array,
    line: Array,
    zero_attitude: Array,
    capacity: int,
    steps: Array,
    tolerance: Array,
    damping: Array,
    max_step: Array,
    torque_rows: bool = False,
) -> tuple[Array, PlanEvaluation, Array, Array]:
    """The planners' one Gauss-Newton program: at most ``steps`` damped minimum-norm steps on
    the residual of a spline plan executed through the rollout (the tracking law at every RK4
    stage), until every residual entry is within ``tolerance``.

    The unknowns ``x`` are ``(m, n)`` control points, and two data flags choose the problem,
    so the straight line, the accuracy pass and the reactionless plan run one compiled program
    (each phase its own program costs the rollout's forward-mode Jacobian to compile three
    times over: 9-10 s each on the planning notebook's problem):

    - ``line``: the plan is the straight line to ``x[-1]`` (:func:`_line_coefficients`); the
      other rows of ``x`` do not enter, their Jacobian columns are zero, and the minimum-norm
      step leaves them: the steps are those of Gauss-Newton on the goal alone.
    - ``zero_attitude``: the residual also holds the base attitude change and one row per
      keep-out sphere (:func:`reactionless_plan`); otherwise those rows are zero and the
      residual is the end-point task alone.
    - ``torque_rows`` (static: the torques then enter the Jacobian, a program of its own): one
      more row per joint, its torque's excess over the limit integrated over the plan,
      ``sum_t max(|tau_i(t)| - tau_max_i, 0) dt / k`` at :data:`LIMIT_SAMPLES` ``= k`` points
      per step (N m s; zero, with a zero Jacobian row, while the joint keeps within its limit).
      The keep-out rows are taken over the same points.

    Each step is ``dx = -J^T (J J^T + d^2 I)^-1 r`` (``J = dr/dx``, the smallest change of the
    plan that removes the linearised residual), scaled so no entry moves more than
    ``max_step`` rad, and projected into the joint limits (:func:`sdjax.solvers.levenberg_marquardt`
    with a fixed damping; its one evaluation site also yields the final plan's evaluation).

    Returns:
        ``(coefficients, evaluation, history, iterations)``: the final ``(m, n)`` control points
        and their :class:`PlanEvaluation`, ``(capacity + 1,)`` ``max |r|`` before each step and
        after the last (NaN past the stop), and the steps taken.
    """

    def coefficients_of(value: Array) -> Array:
        return jnp.where(line, _line_coefficients(problem, value[-1]), value)

    def residual(value: Array) -> Any:  # (r, trajectory): levenberg_marquardt(has_aux=True)
        # Forward mode only: no rematerialisation of the rollout's steps. The scores of the plan
        # (torques at the step times, effort, violations) are not differentiated: they are
        # evaluated once, at the solution, below.
        reference = problem.trajectory(coefficients_of(value))
        trajectory = _execute(problem, reference, True, False)
        final = jax.tree.map(lambda x: x[-1], trajectory.states)
        extra = [_base_rotation(problem, final.base_quaternion)]
        if problem.obstacles is not None or torque_rows:
            # The states and torques at LIMIT_SAMPLES points per step, so the limits hold
            # between the step times too.
            sampled_states, sampled_tau = _between_steps(problem, reference, trajectory)
        if problem.obstacles is not None:
            # One row per sphere: its deepest penetration over the plan (zero, with a zero
            # Jacobian row, while every capsule keeps clear).
            extra.append(jnp.max(obstacle_penetration(problem, sampled_states), axis=(0, 2)))
        rows = jnp.where(zero_attitude, jnp.concatenate(extra), 0.0)
        parts = [_task_residual(problem, final), rows]
        if torque_rows:
            assert problem.torque_limit is not None  # (reactionless_plan checks it)
            excess = jnp.maximum(jnp.abs(sampled_tau) - problem.torque_limit, 0.0)
            parts.append(jnp.sum(excess, axis=0) * (problem.dt / LIMIT_SAMPLES))
        return jnp.concatenate(parts), trajectory

    def project(value: Array) -> Array:
        return jnp.clip(value, problem.joint_lower, problem.joint_upper)

    result = levenberg_marquardt(
        residual,
        x,
        max_iterations=capacity,
        iteration_limit=steps,
        damping=damping**2,
        adaptive=False,
        # The small m x m system: a plan has a few residuals (3 to 9, plus one per keep-out sphere)
        # and tens of unknowns.
        form="min_norm",
        max_step=max_step,
        project=None if problem.joint_lower is None else project,
        tolerance=tolerance,
        has_aux=True,
    )
    coefficients = coefficients_of(result.x)
    evaluation = _score(problem, problem.trajectory(coefficients), result.aux, True)
    return coefficients, evaluation, result.residual_history, result.iterations


def _residual_tolerance(tolerance: Any, dtype: Any) -> Any:
    """``tolerance``, or by default ``eps^0.6`` of the dtype (4e-10 in float64, 7e-5 in float32):
    the Gauss-Newton planners' largest residual entry accepted, m and rad."""
    return float(jnp.finfo(dtype).eps) ** 0.6 if tolerance is None else tolerance


def _gauss_newton(
    problem: PlanningProblem,
    x: Array,
    *,
    line: bool,
    zero_attitude: bool,
    steps: int,
    tolerance: Any,
    damping: Any,
    max_step: Any,
    torque_rows: bool = False,
) -> tuple[Array, PlanEvaluation, Array, Array]:
    """:func:`_solve_plan` with its settings as data (the default capacity serves every
    request up to :data:`SOLVER_STEPS` steps); the history is cut to ``(steps + 1,)``."""
    dtype = x.dtype
    tolerance = _residual_tolerance(tolerance, dtype)
    coefficients, evaluation, history, iterations = _solve_plan(
        problem,
        x,
        jnp.asarray(line),
        jnp.asarray(zero_attitude),
        max(int(steps), SOLVER_STEPS),
        jnp.asarray(steps, jnp.int32),
        jnp.asarray(tolerance, dtype),
        jnp.asarray(damping, dtype),
        jnp.asarray(max_step, dtype),
        bool(torque_rows),
    )
    return coefficients, evaluation, history[: int(steps) + 1], iterations


def _inverse_kinematics_goal(problem: PlanningProblem, base: str, iterations: int) -> Array:
    """``(n,)`` joint positions that put the end point on the target by
    :func:`sdjax.inverse_kinematics` (``base`` mode, within the joint limits)."""
    limits = None if problem.joint_lower is None else (problem.joint_lower, problem.joint_upper)
    return inverse_kinematics(
        problem.model,
        problem.initial_state,
        problem.target_position,
        problem.target_rotation,
        end_point=problem.end_point,
        base=base,
        joint_limits=limits,
        max_iterations=iterations,
    ).q


def straight_line_plan(
    problem: PlanningProblem,
    goal: Any = None,
    *,
    refine_iterations: int = 6,
    damping: Any = 1e-3,
    max_step: Any = 0.2,
    tolerance: Any = None,
    ik_base: str = "fixed",
    ik_iterations: int = IK_ITERATIONS,
) -> StraightLinePlan:
    """Naive baseline: a rest-to-rest straight line in joint space from ``q0`` to a goal
    (the spline with its control points evenly spaced on the segment, the first of
    :func:`initial_coefficients`), executed like the other plans (same executor, horizon and
    loss).

    The goal is ``goal`` if given, else an inverse kinematics solution
    (:func:`sdjax.inverse_kinematics` with ``base=ik_base``, within the joint limits). Neither
    a fixed-base nor a floating-base IK solution is exact for the straight line (the
    zero-momentum base attitude depends on the joint path), so the goal is refined by at most
    ``refine_iterations`` damped Gauss-Newton steps (each at most ``max_step`` rad per joint)
    on the end-point error of the executed straight line (forward-mode Jacobian through the
    rollout), until every residual entry is within ``tolerance`` (m, rad; default ``eps^0.6`` of
    the dtype): the baseline then reaches the target as accurately as the optimised plan, and
    the comparison is fair. Check ``evaluation.position_error``. The steps run in the compiled
    program of :func:`refine_plan` and :func:`reactionless_plan`.

    Returns:
        :class:`StraightLinePlan`.
    """
    refine_iterations = check_count("straight_line_plan: refine_iterations", refine_iterations, 0)
    _check_positive_settings("straight_line_plan", tolerance=tolerance, damping=damping, max_step=max_step)
    if goal is None:
        goal = _inverse_kinematics_goal(problem, ik_base, ik_iterations)
    goal = _check_goal("straight_line_plan", problem, goal)
    line = _line_coefficients(problem, goal.astype(problem.initial_state.q.dtype))
    coefficients, evaluation, history, _ = _gauss_newton(
        problem,
        line,
        line=True,
        zero_attitude=False,
        steps=int(refine_iterations),
        tolerance=tolerance,
        damping=damping,
        max_step=max_step,
    )
    return StraightLinePlan(coefficients[-1], problem.trajectory(coefficients), evaluation, history)


def _check_positive_settings(where: str, **settings: Any) -> None:
    """:func:`sdjax._checks.float_array` of each setting given: a positive finite scalar
    (``ValueError`` naming it; traced values pass unchecked)."""
    for name, value in settings.items():
        if value is not None:
            float_array(f"{where}: {name}", value, shape=(), sign="positive")


# ------------------------------------------------------------------------------------------
# Batched multi-start optimisation.


class PlanResult(eqx.Module):
    """Result of :func:`optimize_plan` (``B`` starts, ``I`` iterations).

    Attributes:
        best: ``()`` int32 index of the chosen start: the lowest final loss among the
            feasible starts (the lowest overall when none is feasible; see ``feasible``).
        trajectory: the chosen :class:`SplineTrajectory`.
        evaluation: its :class:`PlanEvaluation` (rollout, torques, errors).
        coefficients: ``(B, m, n)`` final coefficients of every start.
        loss_history: ``(B, I)`` loss before each update.
        final_loss: ``(B,)`` loss of the final coefficients.
        position_error, orientation_error, base_attitude_change: ``(B,)`` final values (m, rad, rad).
        joint_violation, torque_violation, obstacle_violation: ``(B,)`` largest limit excess
            and deepest obstacle penetration over the rollout.
        feasible: ``(B,)`` bool, all three within ``feasibility_tolerance``.
    """

    best: Array
    trajectory: SplineTrajectory
    evaluation: PlanEvaluation
    coefficients: Array
    loss_history: Array
    final_loss: Array
    position_error: Array
    orientation_error: Array
    base_attitude_change: Array
    joint_violation: Array
    torque_violation: Array
    obstacle_violation: Array
    feasible: Array


def _project(problem: PlanningProblem, coefficients: Array) -> Array:
    if problem.project_limits and problem.joint_lower is not None:
        return jnp.clip(coefficients, problem.joint_lower, problem.joint_upper)
    return coefficients


@solver_jit
def _optimize(
    problem: PlanningProblem, starts: Array, iterations: int, learning_rate: Array, optimizer: Any, tolerance: Array
):
    optimizer = optax.adam(learning_rate) if optimizer is None else optimizer

    def loss(c):
        evaluation = simulate_plan(problem, c)
        return evaluation.loss, evaluation

    grad_fn = jax.value_and_grad(loss, has_aux=True)

    def run(c0):
        c0 = _project(problem, c0)

        def step(carry, index):
            # Step ``iterations`` only evaluates: the final plan's evaluation comes from the
            # gradient's own forward pass (one rollout in the program, not a second for the
            # final evaluation; one extra gradient per start).
            c, opt_state, _ = carry
            (value, evaluation), grad = grad_fn(c)
            with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts
                updates, new_state = optimizer.update(grad, opt_state, c)
            last = index == iterations
            c = jnp.where(last, c, _project(problem, optax.apply_updates(c, updates)))
            opt_state = jax.tree.map(lambda old, new: jnp.where(last, old, new), opt_state, new_state)
            return (c, opt_state, evaluation), value

        with jax.numpy_dtype_promotion("standard"):
            opt_state = optimizer.init(c0)
        no_evaluation = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), jax.eval_shape(loss, c0)[1])
        (c, _, evaluation), history = lax.scan(step, (c0, opt_state, no_evaluation), jnp.arange(iterations + 1))
        return c, history[:-1], evaluation

    coefficients, history, evaluations = jax.vmap(run)(starts)
    feasible = (
        (evaluations.joint_violation <= tolerance)
        & (evaluations.torque_violation <= tolerance)
        & (evaluations.obstacle_violation <= tolerance)
    )
    score = jnp.where(feasible, evaluations.loss, jnp.inf)
    best = jnp.where(jnp.any(feasible), jnp.argmin(score), jnp.argmin(evaluations.loss)).astype(jnp.int32)
    chosen = coefficients[best]
    return PlanResult(
        best=best,
        trajectory=SplineTrajectory(problem.initial_state.q, chosen, problem.duration, problem.degree),
        evaluation=jax.tree.map(lambda x: x[best], evaluations),
        coefficients=coefficients,
        loss_history=history,
        final_loss=evaluations.loss,
        position_error=evaluations.position_error,
        orientation_error=evaluations.orientation_error,
        base_attitude_change=evaluations.base_attitude_change,
        joint_violation=evaluations.joint_violation,
        torque_violation=evaluations.torque_violation,
        obstacle_violation=evaluations.obstacle_violation,
        feasible=feasible,
    )


def optimize_plan(
    problem: PlanningProblem,
    initial_coefficients: Any,
    *,
    iterations: int = 100,
    learning_rate: Any = 0.003,
    optimizer: optax.GradientTransformation | None = None,
    feasibility_tolerance: Any = 1e-3,
) -> PlanResult:
    """Optimise spline coefficients from several starts at once (multi-start Adam).

    Every start runs ``iterations`` optimiser steps (``lax.scan``) on :func:`plan_loss`, with
    reverse-mode gradients through the full RK4 rollout; the starts run in one batched
    computation (``jax.vmap``). After each step the control points are projected into the
    joint limits if ``problem.project_limits``. The chosen start is the best feasible one.

    A penalty on the end-point error leaves a small error whose size trades against the other
    loss terms; :func:`refine_plan` then puts the chosen plan on the target.

    Arguments:
        problem: the :class:`PlanningProblem`.
        initial_coefficients: ``(B, m, n)`` starts, ``B >= 1`` (see :func:`initial_coefficients`).
        iterations: static int >= 1.
        learning_rate: Adam step size, rad (ignored when ``optimizer`` is given).
        optimizer: any ``optax.GradientTransformation`` (default ``optax.adam(learning_rate)``).
        feasibility_tolerance: largest joint (rad) and torque (N m) limit excess counted as feasible.

    Returns:
        :class:`PlanResult`.
    """
    starts = _check_coefficients(problem, initial_coefficients, batched=True)
    iterations = check_count("optimize_plan: iterations", iterations, 1)
    if optimizer is None and not is_traced(learning_rate) and not float(np.asarray(learning_rate)) > 0:
        raise ValueError(f"optimize_plan: learning_rate must be positive, got {learning_rate!r}")
    if not is_traced(feasibility_tolerance) and not float(np.asarray(feasibility_tolerance)) >= 0:
        raise ValueError(f"optimize_plan: feasibility_tolerance must be non-negative, got {feasibility_tolerance!r}")
    dtype = starts.dtype
    return _optimize(
        problem,
        starts,
        int(iterations),
        jnp.asarray(learning_rate, dtype),
        optimizer,
        jnp.asarray(feasibility_tolerance, dtype),
    )


def refine_plan(
    problem: PlanningProblem,
    coefficients: Any,
    *,
    max_iterations: int = 5,
    damping: Any = 1e-4,
    max_step: Any = 0.05,
    tolerance: Any = None,
    iterations: int | None = None,
) -> tuple[Array, PlanEvaluation]:
    """Put a plan on its target: the accuracy pass after :func:`optimize_plan`.

    A penalty on the end-point error leaves a small error whose size trades against the other
    loss terms. At most ``max_iterations`` damped Gauss-Newton steps on the end-point task residual
    alone (forward-mode Jacobian through the rollout, stopping once every entry is within
    ``tolerance``), each the minimum-norm change of the coefficients, remove it while changing
    the plan as little as possible (so it keeps its low base disturbance); the same refinement
    puts :func:`straight_line_plan` on the target, so both plans then reach it equally well,
    as :func:`improvement_factor` requires.

    Arguments:
        problem: the :class:`PlanningProblem`.
        coefficients: ``(m, n)`` spline coefficients (e.g. ``result.trajectory.coefficients``).
        max_iterations: static int >= 1.
        damping: damping ``d`` of the steps, m; > 0 keeps them bounded near singular arm
            configurations.
        max_step: largest change of one control point per step, rad.
        tolerance: largest residual entry accepted, m and rad (default ``eps^0.6`` of the
            dtype).
        iterations: the earlier name of ``max_iterations`` (``DeprecationWarning``).

    Returns:
        ``(coefficients, evaluation)``: the refined ``(m, n)`` coefficients and their
        :class:`PlanEvaluation`.
    """
    coefficients = _check_coefficients(problem, coefficients, batched=False)
    max_iterations = renamed_keyword("refine_plan", "iterations", iterations, "max_iterations", max_iterations, 5)
    iterations = check_count("refine_plan: max_iterations", max_iterations, 1)
    _check_positive_settings("refine_plan", tolerance=tolerance, damping=damping, max_step=max_step)
    refined, evaluation, _, _ = _gauss_newton(
        problem,
        coefficients,
        line=False,
        zero_attitude=False,
        steps=int(iterations),
        tolerance=tolerance,
        damping=damping,
        max_step=max_step,
    )
    return refined, evaluation


# ------------------------------------------------------------------------------------------
# Reactionless (zero base disturbance) plans.


class ReactionlessPlan(eqx.Module):
    """Result of :func:`reactionless_plan`.

    Attributes:
        trajectory: the plan's :class:`SplineTrajectory` (``coefficients``: its ``(m, n)``
            control points).
        evaluation: its :class:`PlanEvaluation` (the executed rollout).
        residual_history: ``(I + 1,)`` largest residual entry (m or rad) before each
            Gauss-Newton step and after the last; NaN past the stop.
        iterations: ``()`` int32 steps taken.
        converged: ``()`` bool, the residual reached the tolerance.
        torque_ratio: ``()`` largest ``|tau_i| / tau_max_i`` of the executed plan (its
            ``evaluation.peak_torque``: :data:`LIMIT_SAMPLES` points per step; NaN without
            torque limits); above 1 the plan exceeds its limits, and the same path over
            ``duration * sqrt(torque_ratio)`` meets them at the same normalised times (see
            :func:`reactionless_plan`).
    """

    trajectory: SplineTrajectory
    evaluation: PlanEvaluation
    residual_history: Array
    iterations: Array
    converged: Array
    torque_ratio: Array

    @property
    def coefficients(self) -> Array:
        """``(m, n)`` spline coefficients of the plan."""
        return self.trajectory.coefficients


def reactionless_plan(
    problem: PlanningProblem,
    coefficients: Any = None,
    *,
    max_iterations: int = 30,
    tolerance: Any = None,
    damping: Any = 1e-6,
    max_step: Any = 0.2,
    meet_torque_limits: bool = False,
    enforce_torque_limits: bool = False,
) -> ReactionlessPlan:
    """A joint path that reaches the target and leaves the base attitude unchanged.

    A redundant arm on a zero-momentum base has joint paths whose net base rotation is zero
    (the zero-momentum constraint is not integrable, so the path, not only its end, decides the
    final attitude; see Nenchev, Umetani and Yoshida, "Analysis of a redundant free-flying
    spacecraft/manipulator system", IEEE Trans. Robotics and Automation 8(1), 1992, and the
    reaction null space of :func:`sdjax.reaction_null_space_rates`). Here the spline's control
    points solve the system ``[x_d - x(T); phi(R_d R(T)^T); phi_base(T)] = 0``
    (end-point position, rotation when ``problem.target_rotation`` is given, and base attitude
    change) by damped minimum-norm Gauss-Newton steps with forward-mode Jacobians through the
    executed rollout, the same steps as :func:`refine_plan`: each step moves the plan as little
    as possible, and the solver stops when every residual is within ``tolerance`` (m, rad).
    The rollout evaluates the tracking law at every RK4 stage (``simulate_plan(...,
    continuous=True)``): with a torque held over each step, the solver would drive to zero
    an O(dt) effect of the sampling that a finer simulation does not reproduce (measured: a
    plan solved at dt = 0.1 s with held torques turned the base by 10 % of the straight line's
    rotation once simulated at dt = 12.5 ms).
    With ``3 + 3`` residuals (``6 + 3`` with a target rotation) the arm needs at least as many
    spline unknowns ``m n``, and redundancy for the attitude.

    Keep-out spheres (``problem.obstacles``) add one residual per sphere, its deepest
    penetration by a link capsule over the rollout, solved to zero with the others (the plan
    ends touching at most, checked at :data:`LIMIT_SAMPLES` points per step: the step times and
    states interpolated between them).
    Joint limits are kept by projecting the control points (the spline stays in their hull).
    With ``enforce_torque_limits`` the torque limits are solved for like the keep-out spheres:
    one more residual per joint, its torque's excess over the limit integrated over the plan
    (at the same points, N m s), solved to zero with the others, so the path itself changes to
    meet them at the given duration (a program compiled apart: the torques then enter the
    Jacobian); :func:`minimum_time_plan` searches the shortest duration that allows it.
    Otherwise torque limits are not enforced but reported (``torque_ratio``): under zero gravity a
    rest-to-rest path executed over ``k`` times the duration needs ``1 / k^2`` of the torques
    (``tau = H qdd + C qd``, both scale as ``1/T^2``), and the base attitude change, a function
    of the path alone at zero momentum, stays. The loss weights and effort of ``problem`` do not
    enter, nor its torque limits without ``enforce_torque_limits``; compare with :func:`straight_line_plan` by
    :func:`improvement_factor`. With ``meet_torque_limits`` the plan is re-timed until it meets
    the torque limits: while ``torque_ratio > 1`` the duration is multiplied by
    ``sqrt(torque_ratio)`` and the plan solved again from the previous control points (the same
    compiled program: the duration is data), at most :data:`RETIMING_ROUNDS` times; the result
    is the shortest duration at which *this path* meets the limits (under zero gravity, up to
    the rollout's discretisation), not a minimum-time plan over all paths. Its duration is
    ``result.trajectory.duration``.

    Arguments:
        problem: the :class:`PlanningProblem`.
        coefficients: ``(m, n)`` start (default: the straight joint-space line to the
            fixed-base inverse kinematics goal, evenly spaced control points).
        max_iterations: static int >= 1.
        tolerance: largest residual entry accepted, m and rad (default ``eps^0.6`` of the
            dtype: 4e-10 in float64, 7e-5 in float32).
        damping: damping ``d`` of the steps, > 0.
        max_step: largest change of one control point per step, rad, > 0.
        meet_torque_limits: re-time the plan until ``torque_ratio <= 1`` (needs
            ``problem.torque_limit``; runs on the host between solves, so not under ``jit``).
        enforce_torque_limits: solve for a path within the torque limits at this duration
            (needs ``problem.torque_limit``).

    Returns:
        :class:`ReactionlessPlan`; check ``converged`` (a target out of reach, or an arm without
        the redundancy, stops at ``max_iterations`` with the residual it reached) and, with
        ``meet_torque_limits``, ``torque_ratio <= 1``.
    """
    for name, flag in (("meet_torque_limits", meet_torque_limits), ("enforce_torque_limits", enforce_torque_limits)):
        if flag and problem.torque_limit is None:
            raise ValueError(f"reactionless_plan: {name} needs a problem with torque_limit")
    if meet_torque_limits and is_traced(problem.duration):
        raise ValueError("reactionless_plan: meet_torque_limits re-times on the host; call it outside jit")
    if coefficients is None:
        coefficients = initial_coefficients(problem, _inverse_kinematics_goal(problem, "fixed", IK_ITERATIONS), 1)[0]
    coefficients = _check_coefficients(problem, coefficients, batched=False)
    max_iterations = check_count("reactionless_plan: max_iterations", max_iterations, 1)
    _check_positive_settings("reactionless_plan", tolerance=tolerance, damping=damping, max_step=max_step)
    residuals = 6 + (3 if problem.target_rotation is not None else 0)
    residuals += 0 if problem.obstacles is None else problem.obstacles.shape[0]  # one row per sphere
    residuals += problem.model.num_joints if enforce_torque_limits else 0  # one row per joint
    if problem.num_coefficients * problem.model.num_joints < residuals:
        raise ValueError(
            f"reactionless_plan: {residuals} residuals need at least as many unknowns; the problem has "
            f"{problem.num_coefficients} x {problem.model.num_joints} spline coefficients (raise num_coefficients)"
        )
    settings = dict(
        max_iterations=int(max_iterations),
        tolerance=tolerance,
        damping=damping,
        max_step=max_step,
        torque_rows=bool(enforce_torque_limits),
    )
    plan = _reactionless(problem, coefficients, **settings)
    for _ in range(RETIMING_ROUNDS if meet_torque_limits else 0):
        ratio = float(plan.torque_ratio)
        if not ratio > 1.0 or not bool(plan.converged):
            break
        # Zero gravity: the same path over k times the duration needs 1/k^2 of the torques; the
        # margin keeps the discretisation's change of the peak (measured ~1e-4) from asking for
        # another round.
        duration = problem.duration * np.sqrt(ratio) * (1.0 + _RETIMING_MARGIN)
        problem = problem.with_duration(duration)
        plan = _reactionless(problem, plan.coefficients, **settings)
    return plan


def _reactionless(
    problem: PlanningProblem,
    coefficients: Array,
    *,
    max_iterations: int,
    tolerance: Any,
    damping: Any,
    max_step: Any,
    torque_rows: bool,
) -> ReactionlessPlan:
    solved, evaluation, history, iterations = _gauss_newton(
        problem,
        coefficients,
        line=False,
        zero_attitude=True,
        steps=max_iterations,
        tolerance=tolerance,
        damping=damping,
        max_step=max_step,
        torque_rows=torque_rows,
    )
    if problem.torque_limit is None:
        torque_ratio = jnp.full((), jnp.nan, solved.dtype)
    else:
        torque_ratio = jnp.max(evaluation.peak_torque / problem.torque_limit)
    converged = history[iterations] <= _residual_tolerance(tolerance, solved.dtype)
    return ReactionlessPlan(problem.trajectory(solved), evaluation, history, iterations, converged, torque_ratio)


#: Most re-timing rounds of ``reactionless_plan(..., meet_torque_limits=True)``.
RETIMING_ROUNDS = 5
# Relative margin on each re-timed duration.
_RETIMING_MARGIN = 1e-3


class MinimumTimePlan(eqx.Module):
    """Result of :func:`minimum_time_plan`.

    Attributes:
        plan: the :class:`ReactionlessPlan` at the shortest duration found
            (``plan.trajectory.duration``), within the torque limits; its ``converged`` is False
            when no duration tried was feasible.
        durations: ``(k,)`` the durations tried, s, in order.
        feasible: ``(k,)`` bool, the solve converged at each.
    """

    plan: ReactionlessPlan
    durations: Array
    feasible: Array

    @property
    def duration(self) -> Array:
        """``()`` the shortest feasible duration found, s."""
        return self.plan.trajectory.duration


#: Most durations :func:`minimum_time_plan` tries.
MINIMUM_TIME_TRIALS = 12
# Factors of minimum_time_plan's duration while its solves succeed, and while they fail.
_SHRINK, _GROW = 0.8, 1.5


def minimum_time_plan(
    problem: PlanningProblem,
    coefficients: Any = None,
    *,
    relative_tolerance: Any = 0.02,
    max_iterations: int = SOLVER_STEPS,
    tolerance: Any = None,
    damping: Any = 1e-6,
    max_step: Any = 0.2,
) -> MinimumTimePlan:
    """The shortest duration at which a zero-disturbance path meets the torque limits.

    :func:`reactionless_plan` with ``enforce_torque_limits`` solves, at a given duration, for a
    path that reaches the target, leaves the base attitude unchanged and keeps every torque
    within its limit; here the duration is searched as well. The first solve is at
    ``problem.duration``; while it succeeds the duration shrinks, by the square root of the
    plan's largest torque ratio where that shrinks it by more than 20 % (the same path re-timed
    then still meets the limits, in zero gravity) and by 20 % otherwise; while it fails the
    duration grows by 50 %. Once a failing duration
    lies below a feasible one, bisection narrows the gap to ``relative_tolerance`` of the
    feasible duration. Each solve starts from the last feasible plan's control points (a spline's
    control points do not depend on its duration), and all share one compiled program (the
    duration is data). At most :data:`MINIMUM_TIME_TRIALS` durations are tried.

    This is a local search: a duration counts as feasible when the Gauss-Newton solve
    converges (every residual within ``tolerance``) in ``max_iterations`` steps from that start,
    so the result is the shortest duration found along this path of solutions, an upper bound
    on the minimum over all paths, not a certificate of it. Torques are checked at
    :data:`LIMIT_SAMPLES` points per step (the step times and states between them).

    Arguments:
        problem: the :class:`PlanningProblem`, with ``torque_limit``; its ``duration`` is the
            first one tried.
        coefficients: ``(m, n)`` start (default as :func:`reactionless_plan`).
        relative_tolerance: ``()`` bisection stops when the gap between the shortest feasible
            and the longest infeasible duration is below this fraction of the former.
        max_iterations, tolerance, damping, max_step: as :func:`reactionless_plan`.

    Returns:
        :class:`MinimumTimePlan`.
    """
    if problem.torque_limit is None:
        raise ValueError("minimum_time_plan: needs a problem with torque_limit")
    if is_traced(problem.duration):
        raise ValueError("minimum_time_plan: searches the duration on the host; call it outside jit")
    if not 0 < float(np.asarray(relative_tolerance)) < 1:
        raise ValueError(f"minimum_time_plan: relative_tolerance must be in (0, 1), got {relative_tolerance!r}")
    settings = dict(max_iterations=max_iterations, tolerance=tolerance, damping=damping, max_step=max_step)

    def solve(duration: float, start: Any) -> ReactionlessPlan:
        timed = problem.with_duration(duration)
        return reactionless_plan(timed, start, enforce_torque_limits=True, **settings)

    duration = float(problem.duration)
    plan = best_effort = solve(duration, coefficients)
    best: ReactionlessPlan | None = plan if bool(plan.converged) else None
    durations, feasible = [duration], [bool(plan.converged)]
    shortest, longest_failed = (duration, None) if feasible[0] else (None, duration)
    while len(durations) < MINIMUM_TIME_TRIALS:
        if shortest is not None and longest_failed is not None:
            if shortest - longest_failed <= float(relative_tolerance) * shortest:
                break
            duration = 0.5 * (shortest + longest_failed)
        elif shortest is not None:
            assert best is not None
            ratio = float(best.torque_ratio)
            duration = shortest * (np.sqrt(ratio) if 0.0 < ratio < _SHRINK**2 else _SHRINK)
        else:
            assert longest_failed is not None
            duration = _GROW * longest_failed
        plan = solve(duration, coefficients if best is None else best.coefficients)
        durations.append(duration)
        feasible.append(bool(plan.converged))
        if feasible[-1]:
            best, shortest = plan, duration
        else:
            longest_failed = duration if longest_failed is None else max(longest_failed, duration)
            if shortest is None:
                best_effort = plan
    return MinimumTimePlan(best_effort if best is None else best, jnp.asarray(durations), jnp.asarray(feasible))


def improvement_factor(baseline: PlanEvaluation, optimized: PlanEvaluation) -> Array:
    """``()`` base attitude change of the baseline divided by that of the optimised plan
    (> 1 when the optimised plan disturbs the base less).

    Meaningful only when both plans reach the target about equally well: compare their
    ``position_error`` too (a plan that stops short of the target can turn the base less)."""
    return baseline.base_attitude_change / optimized.base_attitude_change
