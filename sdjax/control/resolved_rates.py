"""Resolved motion rate control with the generalized Jacobian (seed 003 eqs 110-111).

``qd = J^# (v_d - offset)`` with ``J^#`` the damped least-squares inverse of
:func:`sdjax.solvers.damped_least_squares` (:func:`resolved_motion_rates`);
:class:`ResolvedRateLaw` closes the loop on an end-point path (:class:`LinePath`) through a
computed-torque joint-rate servo (:class:`~sdjax.control.RateServo`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.algebra import matmul
from sdjax.control.computed_torque_laws import RateServo
from sdjax.control.references import _quintic
from sdjax.control.task_space import (
    TASKS,
    _check_base_momentum,
    _static_task_point,
    _task_kinematics,
    _task_point,
    task_error,
)
from sdjax.gjm import Manipulability, manipulability
from sdjax.model import Model, check_no_mimic
from sdjax.solvers import DEFAULT_MAX_DAMPING, DEFAULT_SINGULAR_THRESHOLD, check_damping, solve_damped_least_squares
from sdjax._checks import check_callable, check_choice, check_pair, check_vector, float_array
from sdjax.state import State, check_state


class ResolvedRates(eqx.Module):
    """Result of :func:`resolved_motion_rates`.

    Attributes:
        joint_rates: ``(n,)`` commanded joint rates, rad/s or m/s.
        damping: ``()`` damped-least-squares ``lambda`` used (0 away from singularities).
        manipulability: :class:`sdjax.Manipulability` of the (weighted) task Jacobian.
        task_velocity: ``(m,)`` task velocity the rates produce, ``J qd + offset``; differs
            from the request near singularities (damping) or for unreachable directions.
    """

    joint_rates: Array
    damping: Array
    manipulability: Manipulability
    task_velocity: Array


def resolved_motion_rates(
    model: Model,
    state: State,
    task_velocity: Any,
    *,
    end_point: int | None = None,
    link: int | None = None,
    point: Any = None,
    task: str = "pose",
    base: str = "floating",
    momentum: Any = None,
    weights: Any = None,
    singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
    max_damping: Any = DEFAULT_MAX_DAMPING,
) -> ResolvedRates:
    """Joint rates that move a task point at a desired velocity (seed 003 eq 111).

    ``qd = J^# (v_d - offset)`` with the generalized Jacobian ``J*`` (floating base, eq 110,
    with the momentum offset) or ``J_m`` (fixed base), and ``J^#`` the damped least-squares
    inverse of :func:`damped_least_squares` (the exact inverse/pseudo-inverse of eq 111
    away from singularities, bounded near them). For a redundant arm (``n > m``) this is
    the minimum-norm solution.

    Arguments:
        model, state: the system and its state (positions; base velocities are not used).
        task_velocity: ``(m,)`` desired ``[linear (m/s); angular (rad/s)]`` velocity of the
            task point, inertial frame, rows selected by ``task``.
        end_point, link, point, task, base, momentum: see :func:`task_jacobian`.
        weights, singular_threshold, max_damping: see :func:`damped_least_squares`.

    Returns:
        :class:`ResolvedRates`.
    """
    check_no_mimic(model, "resolved_motion_rates")
    check_state(model, state)
    rows = TASKS[check_choice("resolved_motion_rates: task", task, TASKS)]
    _check_base_momentum("resolved_motion_rates", base, momentum)
    end_point, link = _static_task_point(model, end_point, link, "resolved_motion_rates")
    _task_point(model, end_point, link, point, state.q.dtype, "resolved_motion_rates")
    m = rows.stop - rows.start
    velocity = check_vector("resolved_motion_rates: task_velocity", task_velocity, (m,), state.q.dtype)
    check_damping("resolved_motion_rates", singular_threshold, max_damping)
    if weights is not None:
        weights = check_vector("resolved_motion_rates: weights", weights, (m,), state.q.dtype)
        float_array("resolved_motion_rates: weights", weights, sign="positive")
    spec = (end_point, link, point)
    return _resolved_motion_rates(
        model, state, velocity, spec, task, base, momentum, weights, singular_threshold, max_damping
    )


@eqx.filter_jit
def _resolved_motion_rates(
    model, state, velocity, spec, task, base, momentum, weights, singular_threshold, max_damping
) -> ResolvedRates:
    rows = TASKS[task]
    kin = _task_kinematics(model, state, spec, base, momentum)
    jac, offset = kin.jacobian[rows], kin.offset[rows]
    dls = solve_damped_least_squares(jac, velocity - offset, singular_threshold, max_damping, weights)
    weighted = jac if weights is None else jnp.sqrt(weights)[:, None] * jac
    return ResolvedRates(
        joint_rates=dls.solution,
        damping=dls.damping,
        manipulability=manipulability(weighted),
        task_velocity=matmul(jac, dls.solution) + offset,
    )


class LinePath(eqx.Module):
    """Straight-line task path from ``start`` to ``goal`` with a rest-to-rest quintic time law,
    for :class:`ResolvedRateLaw`. Called with ``t`` it returns ``(target, velocity)``:
    ``(x_d (3,), v_d (3,))``, or with a constant ``rotation`` ``((x_d, R_d), [v_d; 0] (6,))``.

    Attributes:
        start, goal: ``(3,)`` positions, inertial frame, m.
        duration: ``()`` s, positive.
        start_time: ``()`` s.
        rotation: optional ``(3, 3)`` constant target orientation (task frame to inertial).
    """

    start: Array
    goal: Array
    duration: Array
    start_time: Array
    rotation: Array | None

    def __init__(self, start: Any, goal: Any, duration: Any, start_time: Any = 0.0, rotation: Any = None):
        self.start, self.goal = jnp.asarray(start), jnp.asarray(goal)
        if self.start.shape != (3,) or self.goal.shape != (3,):
            raise ValueError(
                f"LinePath: start and goal expected shape (3,), got {self.start.shape} and {self.goal.shape}"
            )
        self.duration = float_array("LinePath: duration", duration, shape=(), sign="positive")
        self.start_time = jnp.asarray(start_time)
        self.rotation = None if rotation is None else jnp.asarray(rotation)
        if self.rotation is not None and self.rotation.shape != (3, 3):
            raise ValueError(f"LinePath: rotation expected shape (3, 3), got {self.rotation.shape}")

    def __call__(self, t: Array) -> tuple[Any, Array]:
        dtype = jnp.asarray(t).dtype
        s, ds, _ = _quintic(t, self.start_time.astype(dtype), self.duration.astype(dtype))
        delta = (self.goal - self.start).astype(dtype)
        x, v = self.start.astype(dtype) + s * delta, ds * delta
        if self.rotation is None:
            return x, v
        return (x, self.rotation.astype(dtype)), jnp.concatenate([v, jnp.zeros((3,), dtype)])


def split_task_target(task: str, target: Any, dtype: Any, name: str) -> tuple[Array | None, Array | None]:
    if task == "pose":
        position, rotation = check_pair(f"{name} (task='pose')", target, "(position (3,), rotation (3, 3)) pair")
    elif task == "position":
        position, rotation = target, None
    else:
        position, rotation = None, target
    if position is not None:
        position = check_vector(f"{name}: target position", position, (3,), dtype)
    if rotation is not None:
        rotation = check_vector(f"{name}: target rotation", rotation, (3, 3), dtype)
    return position, rotation


class ResolvedRateLaw(eqx.Module):
    """Closed-loop resolved motion rate control of a task point along a path (eq 111).

    At each controller sample, with the task pose measured from the state:

        v_c  = v_d(t) + K_x e,    e = [x_d - x; phi(R_d R^T)]   (task rows),
        qd_c = J^# (v_c - offset)                 (:func:`resolved_motion_rates`),
        tau  = H~ (d/dt qd_c + K_v (qd_c - qd)) + C~       (:class:`RateServo`).

    The task-space feedback ``K_x`` removes drift (the closed-loop inverse kinematics of
    Sciavicco-Siciliano); the joint-rate servo uses computed torque with the estimated model.
    On a floating base ``J^#`` uses the generalized Jacobian, so the base moves freely as the
    arm moves (momentum is not controlled). Everything is computed with
    ``estimated_model`` (its kinematics and masses); pass the plant itself for perfect
    knowledge.

    Attributes:
        estimated_model: the controller's model.
        path: ``t -> (target, velocity)`` (e.g. :class:`LinePath`): target ``(3,)`` position
            for ``task="position"``, ``(3, 3)`` rotation for ``"orientation"``, a
            ``(position, rotation)`` pair for ``"pose"``; velocity ``(m,)``.
        position_gain: scalar or ``(m,)`` ``K_x``, 1/s.
        rate_gain: scalar or ``(n,)`` ``K_v``, 1/s.
        point: ``(3,)`` task point on ``link`` (link frame, from its centroid) or None.
        momentum: ``(6,)`` estimated conserved momentum or None (zero); floating base.
        weights, singular_threshold, max_damping: see :func:`damped_least_squares`.
        end_point, link, task, base: static (see :func:`task_jacobian`).
        feedforward: static, the servo's ``d/dt qd_c`` term (see :class:`RateServo`).
    """

    estimated_model: Model
    path: Callable[[Array], Any]
    position_gain: Array
    rate_gain: Array
    point: Array | None
    momentum: Array | None
    weights: Array | None
    singular_threshold: Array
    max_damping: Array
    end_point: int | None = eqx.field(static=True)
    link: int | None = eqx.field(static=True)
    task: str = eqx.field(static=True)
    base: str = eqx.field(static=True)
    feedforward: bool = eqx.field(static=True)

    def __init__(
        self,
        estimated_model: Model,
        path: Callable[[Array], Any],
        *,
        position_gain: Any,
        rate_gain: Any,
        end_point: int | None = None,
        link: int | None = None,
        point: Any = None,
        task: str = "position",
        base: str = "floating",
        momentum: Any = None,
        weights: Any = None,
        singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
        max_damping: Any = DEFAULT_MAX_DAMPING,
        feedforward: bool = True,
    ):
        check_callable("ResolvedRateLaw: path", path, "t -> (target, velocity)")
        self.task = check_choice("ResolvedRateLaw: task", task, TASKS)
        _check_base_momentum("ResolvedRateLaw", base, momentum)
        self.base = base
        dtype = estimated_model.dtype
        m = TASKS[task].stop - TASKS[task].start
        end_point, link = _static_task_point(estimated_model, end_point, link, "ResolvedRateLaw")
        _task_point(estimated_model, end_point, link, point, dtype, "ResolvedRateLaw")  # validates the task point
        self.estimated_model = estimated_model
        self.path = path
        self.position_gain = float_array(
            "ResolvedRateLaw: position_gain",
            position_gain,
            shape=(m,),
            scalar="keep",
            sign="non-negative",
            hint="one per task row",
        )
        self.rate_gain = float_array(
            "ResolvedRateLaw: rate_gain",
            rate_gain,
            shape=(estimated_model.num_joints,),
            scalar="keep",
            sign="non-negative",
            hint="one per joint",
        )
        self.end_point, self.link = end_point, link
        self.point = None if point is None else check_vector("ResolvedRateLaw: point", point, (3,), dtype)
        self.momentum = None if momentum is None else check_vector("ResolvedRateLaw: momentum", momentum, (6,), dtype)
        self.weights = None if weights is None else check_vector("ResolvedRateLaw: weights", weights, (m,), dtype)
        check_damping("ResolvedRateLaw", singular_threshold, max_damping)
        self.singular_threshold = jnp.asarray(singular_threshold)
        self.max_damping = jnp.asarray(max_damping)
        self.feedforward = bool(feedforward)

    def rate_command(self, t: Array, state: State) -> Array:
        """Commanded joint rates ``qd_c`` ``(n,)`` at time ``t``."""
        dtype = state.q.dtype
        model = self.estimated_model
        rows = TASKS[self.task]
        kin = _task_kinematics(model, state, (self.end_point, self.link, self.point), self.base, self.momentum)
        target, velocity = self.path(jnp.asarray(t, dtype))
        target_position, target_rotation = split_task_target(self.task, target, dtype, "ResolvedRateLaw: path")
        m = rows.stop - rows.start
        velocity = check_vector("ResolvedRateLaw: path velocity", velocity, (m,), dtype)
        error = task_error(self.task, kin.position, kin.rotation, target_position, target_rotation)
        command = velocity + self.position_gain.astype(dtype) * error
        weights = None if self.weights is None else self.weights.astype(dtype)
        dls = solve_damped_least_squares(
            kin.jacobian[rows], command - kin.offset[rows], self.singular_threshold, self.max_damping, weights
        )
        return dls.solution

    def __call__(self, t: Array, state: State) -> Array:
        servo = RateServo(
            self.estimated_model,
            self.rate_command,
            self.rate_gain,
            base=self.base,
            momentum=self.momentum,
            feedforward=self.feedforward,
        )
        return servo(t, state)


__all__ = ["LinePath", "ResolvedRateLaw", "ResolvedRates", "resolved_motion_rates"]
