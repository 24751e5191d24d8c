"""Joint servos for the massless-arm system: resolved-rate commands and rate servos with
motor torque limits (seed 004 section 1: "the resolved rate law (ref. 1)").

A controller is a pure function of time, joint angles and joint rates,
``controller(t, q, qd) -> tau (6,)``, the quantities a real joint servo measures (encoders
and tachometers). The same controller therefore drives the massless-arm model
(:func:`sdjax.massless_arm.simulate_two_body`, rates from eq 2-12) and the full multibody model
(:func:`sdjax.rollout` through :meth:`ArmController.multibody_law`), which is what the
validation compares.

- :class:`ResolvedRateCommand`: ``qd_c = J^-1 (v_d + K_x e)`` along an end-effector path in
  the orbiter frame (closed-loop resolved rates, damped near singularities).
- :class:`JointHoldCommand`: ``qd_c = K_p (q_hold - q)`` (brakes-like position hold).
- :class:`JointRateServo`: ``tau = sat(K_v (qd_c - qd), tau_max)``, the motor torque limit
  as a hard saturation per joint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.control.resolved_rates import split_task_target
from sdjax.control.task_space import task_error
from sdjax.massless_arm.dynamics import _arm_kinematics
from sdjax.model import Model
from sdjax._checks import check_callable, check_vector, float_array
from sdjax.solvers import DEFAULT_MAX_DAMPING, DEFAULT_SINGULAR_THRESHOLD, solve_damped_least_squares
from sdjax.state import State

__all__ = ["ArmController", "JointHoldCommand", "JointRateServo", "MultibodyLaw", "ResolvedRateCommand"]


class JointRateServo(eqx.Module):
    """Rate servo with a torque limit per motor: ``tau = clip(K_v (qd_c - qd), -tau_max, tau_max)``.

    Attributes:
        gain: ``(6,)`` ``K_v``, N m s/rad.
        torque_limit: ``(6,)`` ``tau_max``, N m (``inf`` for none).
    """

    gain: Array
    torque_limit: Array

    def __init__(self, gain: Any, torque_limit: Any = float("inf"), dtype: Any = None):
        dtype = jnp.result_type(float) if dtype is None else dtype
        self.gain = float_array(
            "JointRateServo: gain", gain, shape=(6,), dtype=dtype, scalar="broadcast", sign="positive"
        )
        self.torque_limit = float_array(
            "JointRateServo: torque_limit",
            torque_limit,
            shape=(6,),
            dtype=dtype,
            scalar="broadcast",
            sign="positive",
            allow_inf=True,
        )

    def __call__(self, command: Array, qd: Array) -> Array:
        """``(6,)`` torques (N m) for commanded and measured joint rates ``(6,)`` (rad/s)."""
        dtype = jnp.result_type(qd)
        limit = self.torque_limit.astype(dtype)
        return jnp.clip(self.gain.astype(dtype) * (command - qd), -limit, limit)


class ResolvedRateCommand(eqx.Module):
    """Closed-loop resolved-rate command of the end effector relative to the orbiter.

    ``qd_c = J(q)^# (v_d(t) + K_x [x_d - x; phi(R_d R^T)])`` with ``x``, ``R`` the tip pose
    in the orbiter frame (from the CM) and ``J^#`` the damped least-squares inverse
    (:func:`sdjax.damped_least_squares`; exact away from singularities).

    Attributes:
        arm: the arm model (orbiter = base; only its kinematics is used).
        path: ``t -> ((x_d (3,), R_d (3, 3)), v_d (6,))`` in the orbiter frame, e.g.
            :class:`sdjax.LinePath` with a ``rotation``.
        position_gain: ``(6,)`` ``K_x``, 1/s.
        singular_threshold, max_damping: DLS schedule (see :func:`sdjax.damped_least_squares`).
    """

    arm: Model
    path: Callable[[Array], Any]
    position_gain: Array
    singular_threshold: Array
    max_damping: Array

    def __init__(
        self,
        arm: Model,
        path: Callable[[Array], Any],
        position_gain: Any,
        *,
        singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
        max_damping: Any = DEFAULT_MAX_DAMPING,
    ):
        check_callable("ResolvedRateCommand: path", path, "t -> ((position, rotation), velocity (6,))")
        self.arm = arm
        self.path = path
        self.position_gain = float_array(
            "ResolvedRateCommand: position_gain",
            position_gain,
            shape=(6,),
            dtype=arm.dtype,
            scalar="broadcast",
            sign="positive",
        )
        self.singular_threshold = jnp.asarray(singular_threshold, arm.dtype)
        self.max_damping = jnp.asarray(max_damping, arm.dtype)

    def __call__(self, t: Array, q: Array) -> Array:
        """Commanded joint rates ``(6,)``, rad/s."""
        dtype = q.dtype
        kin = _arm_kinematics(self.arm, q)
        target, velocity = self.path(jnp.asarray(t, dtype))
        position, rotation = split_task_target("pose", target, dtype, "ResolvedRateCommand: path")
        velocity = check_vector("ResolvedRateCommand: path velocity", velocity, (6,), dtype)
        error = task_error("pose", kin.tip_position, kin.tip_rotation, position, rotation)
        command = velocity + self.position_gain.astype(dtype) * error
        return solve_damped_least_squares(
            kin.jacobian, command, self.singular_threshold, self.max_damping, None
        ).solution


class JointHoldCommand(eqx.Module):
    """Position hold ``qd_c = K_p (q_hold - q)`` (a locked arm, up to the servo stiffness).

    Attributes:
        q_hold: ``(6,)`` rad.
        gain: ``(6,)`` ``K_p``, 1/s.
    """

    q_hold: Array
    gain: Array

    def __init__(self, q_hold: Any, gain: Any):
        self.q_hold = check_vector("JointHoldCommand: q_hold", q_hold, (6,), jnp.result_type(float))
        self.gain = float_array(
            "JointHoldCommand: gain", gain, shape=(6,), dtype=self.q_hold.dtype, scalar="broadcast", sign="positive"
        )

    def __call__(self, t: Array, q: Array) -> Array:
        return self.gain.astype(q.dtype) * (self.q_hold.astype(q.dtype) - q)


class ArmController(eqx.Module):
    """``tau = servo(command(t, q), qd)``: a joint-rate command through a rate servo.

    Attributes:
        command: ``(t, q) -> qd_c (6,)`` (:class:`ResolvedRateCommand`, :class:`JointHoldCommand`).
        servo: :class:`JointRateServo`.
    """

    command: Callable[[Array, Array], Array]
    servo: JointRateServo

    def __call__(self, t: Array, q: Array, qd: Array) -> Array:
        """``(6,)`` joint torques, N m."""
        return self.servo(check_vector("ArmController: command", self.command(t, q), (6,), q.dtype), qd)

    def multibody_law(self) -> MultibodyLaw:
        """The same controller as a control law ``(t, State) -> tau`` for :func:`sdjax.rollout`."""
        return MultibodyLaw(self)


class MultibodyLaw(eqx.Module):
    """:class:`ArmController` applied to an sdjax :class:`~sdjax.State` (joint angles and rates)."""

    controller: ArmController

    def __call__(self, t: Array, state: State) -> Array:
        return self.controller(t, state.q, state.qd)
