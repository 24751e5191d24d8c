"""Inverse kinematics of a fixed or free-floating base, with a convergence report.

:func:`inverse_kinematics` iterates damped Newton steps (:func:`sdjax.solvers.damped_least_squares`,
:func:`sdjax.solvers.limit_step`) on the task error and reports the result
(:class:`InverseKinematicsResult`) instead of raising. The iteration keeps its own loop: on a
free-floating base the base attitude reached depends on the joint path (the zero-momentum
constraint is not integrable), so the error is not a function of ``q`` alone and each step
integrates the base attitude along its segment.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from sdjax.algebra import matmul
from sdjax.control.task_space import (
    CONTROL_BASES,
    TASKS,
    _static_task_point,
    _task_kinematics,
    _task_point,
    task_error,
)
from sdjax.dynamics import inertia_matrix
from sdjax.gjm import base_twist_from_free, solve_base_block
from sdjax.kinematics import body_masses, center_of_mass, relative_frames
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import quat_normalize, quat_rate, quat_to_matrix
from sdjax.solvers import (
    DEFAULT_MAX_DAMPING,
    DEFAULT_SINGULAR_THRESHOLD,
    check_damping,
    limit_step,
    solve_damped_least_squares,
)
from sdjax._checks import check_choice, check_count, check_pair, check_vector, float_array, is_traced, rotation_matrix
from sdjax.state import State, check_state


class InverseKinematicsResult(eqx.Module):
    """Convergence report of :func:`inverse_kinematics` (never an exception).

    Attributes:
        q: ``(n,)`` joint positions reached.
        state: the input state with ``q`` (and, for a floating base, the base pose reached)
            replaced and every velocity set to zero.
        converged: ``()`` bool, both errors within tolerance.
        iterations: ``()`` int32, iterations taken (``max_iterations`` if not converged).
        position_error: ``()`` ``|x_d - x|``, m (0 when no target position was given).
        orientation_error: ``()`` rotation angle between target and reached frames, rad
            (0 when no target rotation was given).
        at_joint_limit: ``(n,)`` bool, joints that end on a limit (all False without limits).
        waypoints: ``(max_iterations + 1, n)`` joint positions after each iteration (the
            first row is the initial ``q``; rows after convergence repeat the result). For a
            floating base the reached base pose is valid for the piecewise-linear joint path
            through these waypoints (see :func:`inverse_kinematics`).
    """

    q: Array
    state: State
    converged: Array
    iterations: Array
    position_error: Array
    orientation_error: Array
    at_joint_limit: Array
    waypoints: Array


def _check_tolerance(name: str, value: Any) -> None:
    float_array(f"inverse_kinematics: {name}", value, shape=(), sign="positive", allow_inf=True)


def _base_attitude_along(model: Model, q: Array, dq: Array, quat: Array, substeps: int) -> Array:
    """Base quaternion after the joints move from ``q`` to ``q + dq`` along a straight
    joint-space segment with zero momentum: RK4 on ``dquat/ds = 1/2 [w0, 0] quat`` with
    ``w0`` the angular part of ``-H_b^-1 H_bm dq`` (eq 109, free base coordinates; the
    segment parameter ``s`` in [0, 1] as time)."""
    dtype = q.dtype
    nb = model.num_base_velocities

    def rate(s, quat):
        zero3 = jnp.zeros((3,), dtype)
        h = inertia_matrix(model, State(zero3, quat, zero3, zero3, q + s * dq, jnp.zeros_like(q)))
        twist = base_twist_from_free(model, -solve_base_block(model, h, matmul(h[:nb, nb:], dq)))
        return quat_rate(quat, twist[3:])

    ds = jnp.asarray(1.0 / substeps, dtype)

    def step(quat, k):
        s = k.astype(dtype) * ds
        k1 = rate(s, quat)
        k2 = rate(s + 0.5 * ds, quat + 0.5 * ds * k1)
        k3 = rate(s + 0.5 * ds, quat + 0.5 * ds * k2)
        k4 = rate(s + ds, quat + ds * k3)
        return quat_normalize(quat + ds / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)), None

    quat, _ = lax.scan(step, quat, jnp.arange(substeps, dtype=jnp.int32))
    return quat


def _base_position_for_com(model: Model, quat: Array, q: Array, com: Array, r0: Array) -> Array:
    """Base position that keeps the centre of mass at ``com`` along the directions the base
    translates in (zero linear momentum there); the other components stay those of ``r0``."""
    frames = relative_frames(model, quat_to_matrix(quat), q)
    masses = body_masses(model)
    free = np.isin(np.arange(3), model.base_coordinates)
    return jnp.where(free, com - jnp.sum(masses[:, None] * frames.centroid, axis=0) / jnp.sum(masses), r0)


def inverse_kinematics(
    model: Model,
    state: State,
    target_position: Any = None,
    target_rotation: Any = None,
    *,
    end_point: int | None = None,
    link: int | None = None,
    point: Any = None,
    base: str = "fixed",
    joint_limits: tuple[Any, Any] | None = None,
    position_tolerance: Any = None,
    orientation_tolerance: Any = None,
    max_iterations: int = 100,
    max_step: Any = 0.2,
    singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
    max_damping: Any = DEFAULT_MAX_DAMPING,
    substeps: int = 4,
) -> InverseKinematicsResult:
    """Joint positions that put a task point at a target pose (SpaceDyn ``i_kine``, with a
    report instead of an exception).

    Damped Newton (Levenberg-Marquardt) iterations in a ``lax.while_loop``:
    ``dq = J^# e`` (:func:`damped_least_squares`, so singular configurations slow the
    iteration rather than break it), scaled so that ``max |dq_i| <= max_step``, then
    ``q <- clip(q + dq, lower, upper)`` if ``joint_limits`` are given (the clipped joints
    are reported in ``at_joint_limit``); ``e = [x_d - x; phi(R_d R^T)]``. Stops when
    ``|x_d - x| <= position_tolerance`` and the rotation angle ``<= orientation_tolerance``,
    or after ``max_iterations`` (then ``converged`` is False; nothing is raised).

    - ``base="fixed"``: the base stays where ``state`` puts it; ``J = J_m``.
    - ``base="floating"``: the free-floating system with **zero momentum** (the state's
      velocities are ignored; a planar base turns about z and moves in x, y only, a fixed
      base not at all). Its reachable pose depends on the joint path (the
      zero-momentum constraint is not integrable), so the answer is defined by a path: the
      piecewise-linear joint path through ``waypoints``. Each step uses the generalized
      Jacobian ``J*`` (eq 110); the base attitude is then integrated along the segment by
      eq 109 (``substeps`` RK4 steps per segment) and the base position follows from the
      fixed centre of mass. Executing that joint path (at any speed, from rest) with
      zero momentum brings the end point to the target.

    Arguments:
        model: the system.
        state: the initial configuration (base pose and ``q``).
        target_position: ``(3,)`` target position of the task point, inertial, m.
        target_rotation: ``(3, 3)`` target rotation of the task frame (to inertial). At
            least one target is required; with both the task is the full pose.
        end_point, link, point: the task point (see the module docstring; default end point 0).
        base: ``"fixed"`` or ``"floating"``.
        joint_limits: optional ``(lower (n,), upper (n,))``, rad or m (``lower <= upper``).
        position_tolerance: m (default ``sqrt(eps)`` of the dtype: 1.5e-8 in float64,
            3.5e-4 in float32).
        orientation_tolerance: rad (same default).
        max_iterations: static int >= 1.
        max_step: largest joint step per iteration, rad or m (positive).
        singular_threshold, max_damping: see :func:`damped_least_squares`.
        substeps: static RK4 steps per segment for the floating base attitude.

    Returns:
        :class:`InverseKinematicsResult`.

    Differentiation: forward mode works through the loop; reverse mode does not
    (``lax.while_loop``). Differentiate a converged solution implicitly instead:
    ``dq = J^+ dx`` for a small target change ``dx``.
    """
    check_no_mimic(model, "inverse_kinematics")
    check_state(model, state)
    dtype = state.q.dtype
    n = model.num_joints
    check_choice("inverse_kinematics: base", base, CONTROL_BASES, "base mode")
    if target_position is None and target_rotation is None:
        raise ValueError("inverse_kinematics: give target_position, target_rotation or both")
    if target_rotation is None:
        task = "position"
    else:
        task = "orientation" if target_position is None else "pose"
    target_position = (
        None
        if target_position is None
        else check_vector("inverse_kinematics: target_position", target_position, (3,), dtype)
    )
    if target_rotation is not None:
        target_rotation = rotation_matrix("inverse_kinematics: target_rotation", target_rotation, dtype)
    max_iterations = check_count("inverse_kinematics: max_iterations", max_iterations, 1)
    substeps = check_count("inverse_kinematics: substeps", substeps, 1)
    default_tol = float(np.sqrt(np.finfo(np.dtype(dtype)).eps))
    position_tolerance = default_tol if position_tolerance is None else position_tolerance
    orientation_tolerance = default_tol if orientation_tolerance is None else orientation_tolerance
    _check_tolerance("position_tolerance", position_tolerance)
    _check_tolerance("orientation_tolerance", orientation_tolerance)
    _check_tolerance("max_step", max_step)
    # Validate before tracing the loop; the indices become Python ints (static under jit).
    end_point, link = _static_task_point(model, end_point, link, "inverse_kinematics")
    _task_point(model, end_point, link, point, dtype, "inverse_kinematics")
    spec = (end_point, link, None if point is None else check_vector("inverse_kinematics: point", point, (3,), dtype))
    lower: Array | None
    upper: Array | None
    if joint_limits is not None:
        lower, upper = check_pair(
            "inverse_kinematics: joint_limits", joint_limits, "(lower, upper) pair of (n,) arrays"
        )
        lower = check_vector("inverse_kinematics: joint_limits lower", lower, (n,), dtype)
        upper = check_vector("inverse_kinematics: joint_limits upper", upper, (n,), dtype)
        if not is_traced(joint_limits) and np.any(np.asarray(lower) > np.asarray(upper)):
            raise ValueError("inverse_kinematics: joint_limits lower must be <= upper for every joint")
    else:
        lower = upper = None
    check_damping("inverse_kinematics", singular_threshold, max_damping)
    ptol, otol, step, threshold, damping = (
        jnp.asarray(v).astype(dtype)
        for v in (position_tolerance, orientation_tolerance, max_step, singular_threshold, max_damping)
    )
    return _inverse_kinematics(
        model,
        state,
        target_position,
        target_rotation,
        spec,
        task,
        base,
        lower,
        upper,
        ptol,
        otol,
        step,
        threshold,
        damping,
        int(max_iterations),
        int(substeps),
    )


@eqx.filter_jit
def _inverse_kinematics(
    model,
    state,
    target_position,
    target_rotation,
    spec,
    task,
    base,
    lower,
    upper,
    position_tolerance,
    orientation_tolerance,
    max_step,
    singular_threshold,
    max_damping,
    max_iterations,
    substeps,
) -> InverseKinematicsResult:
    dtype = state.q.dtype
    n = model.num_joints
    rows = TASKS[task]
    ptol = jnp.asarray(position_tolerance, dtype)
    otol = jnp.asarray(orientation_tolerance, dtype)
    step_limit = jnp.asarray(max_step, dtype)
    floating = base == "floating"
    com = center_of_mass(model, state) if floating else None

    def configure(q, quat, r0):
        zero3 = jnp.zeros((3,), dtype)
        return State(r0, quat, zero3, zero3, q, jnp.zeros_like(q))

    def evaluate(q, quat, r0):
        kin = _task_kinematics(model, configure(q, quat, r0), spec, base, None)
        error = task_error(task, kin.position, kin.rotation, target_position, target_rotation)
        return kin.jacobian[rows], error

    def norms(error):
        p = jnp.sqrt(jnp.sum(error[:3] ** 2)) if task != "orientation" else jnp.zeros((), dtype)
        o = jnp.sqrt(jnp.sum(error[-3:] ** 2)) if task != "position" else jnp.zeros((), dtype)
        return p, o

    def done(error):
        p, o = norms(error)
        return (p <= ptol) & (o <= otol)

    def cond(carry):
        i, _, _, _, _, error, _ = carry
        return (i < max_iterations) & ~done(error)

    def body(carry):
        i, q, quat, r0, jac, error, waypoints = carry
        dq = solve_damped_least_squares(jac, error, singular_threshold, max_damping, None).solution
        dq = limit_step(dq, step_limit)
        q_new = q + dq
        if lower is not None:
            q_new = jnp.clip(q_new, lower, upper)
        if floating:
            quat = _base_attitude_along(model, q, q_new - q, quat, substeps)
            r0 = _base_position_for_com(model, quat, q_new, com, r0)
        jac, error = evaluate(q_new, quat, r0)
        return i + 1, q_new, quat, r0, jac, error, waypoints.at[i + 1].set(q_new)

    quat0 = quat_normalize(state.base_quaternion)
    jac0, error0 = evaluate(state.q, quat0, state.base_position)
    waypoints = jnp.broadcast_to(state.q, (max_iterations + 1, n))
    init = (jnp.asarray(0, jnp.int32), state.q, quat0, state.base_position, jac0, error0, waypoints)
    iterations, q, quat, r0, _, error, waypoints = lax.while_loop(cond, body, init)
    # Rows after convergence repeat the result.
    waypoints = jnp.where((jnp.arange(max_iterations + 1, dtype=jnp.int32) > iterations)[:, None], q, waypoints)
    position_error, orientation_error = norms(error)
    if lower is not None:
        at_limit = (q <= lower) | (q >= upper)
    else:
        at_limit = jnp.zeros((n,), bool)
    return InverseKinematicsResult(
        q=q,
        state=configure(q, quat, r0),
        converged=done(error),
        iterations=iterations,
        position_error=position_error,
        orientation_error=orientation_error,
        at_joint_limit=at_limit,
        waypoints=waypoints,
    )


__all__ = ["InverseKinematicsResult", "inverse_kinematics"]
