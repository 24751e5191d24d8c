"""Computed torque with an estimated model (seed 003 eqs 112-115) and the joint-rate servo
built on it.

``tau = H~ u + C~`` with ``H~``, ``C~`` the joint-space equation of the controller's model
(:func:`computed_torque_terms`): the generalized, momentum-reduced dynamics of a floating base
(``base="floating"``) or the joint block with the base held at rest (``base="fixed"``; see
:data:`~sdjax.control.CONTROL_BASES`). :class:`ComputedTorque` tracks a joint reference,
:class:`RateServo` a commanded joint-rate law (resolved motion rates, reaction-null-space
rates).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from sdjax.algebra import matmul
from sdjax.control.references import Reference, _as_reference, _evaluate_reference
from sdjax.control.task_space import CONTROL_BASES
from sdjax.dynamics import bias_forces, inertia_matrix, inverse_dynamics, passive_joint_torques
from sdjax.gjm import reduced_equation, with_momentum
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import quat_rate
from sdjax._checks import check_callable, check_choice, check_vector, float_array
from sdjax.state import State, check_state


def _momentum_spec(momentum: Any) -> tuple[bool, Any]:
    """``(measured, momentum)`` from ``None`` / an array / ``"measured"``."""
    if isinstance(momentum, str):
        if momentum != "measured":
            raise ValueError(f"momentum: expected None, a (6,) vector or 'measured', got {momentum!r}")
        return True, None
    return False, momentum


def _floating_terms(model: Model, state: State, momentum: Any, measured: bool) -> tuple[Array, Array]:
    """``(H*, C*)`` of the generalized equation ``H* qdd + C* = tau`` (passive torques not
    included), with the base twist from eq 109 for ``momentum`` or the measured one."""
    if not measured:
        state = with_momentum(model, state, momentum)
    return reduced_equation(model, inertia_matrix(model, state), bias_forces(model, state))


def _base_keyword(what: str, base: str, mode: str | None) -> str:
    """The checked ``base`` argument; ``mode``, its earlier name, with a ``DeprecationWarning``."""
    if mode is not None:
        warnings.warn(
            f"{what}: mode= is now spelled base= (the base-mode keyword used everywhere)",
            DeprecationWarning,
            stacklevel=3,
        )
        base = mode
    return check_choice(f"{what}: base", base, CONTROL_BASES, "base mode")


def _at_rest(state: State) -> State:
    zero = jnp.zeros_like(state.base_linear_velocity)
    return eqx.tree_at(lambda s: (s.base_linear_velocity, s.base_angular_velocity), state, (zero, zero))


@eqx.filter_jit
def computed_torque_terms(
    model: Model, state: State, *, base: str = "floating", momentum: Any = None, mode: str | None = None
) -> tuple[Array, Array]:
    """``(H~, C~)`` of the joint-space equation ``H~ qdd + C~ = tau`` used by computed torque.

    With the estimated model as ``model`` these are the ``H~``, ``C~`` of seed 003 eq 115.

    - ``base="floating"``: the generalized (momentum-reduced) dynamics, ``H~ = H*``
      (:func:`sdjax.generalized_inertia_matrix`, eq 45) and ``C~ = C* - tau_passive`` with
      ``C*`` as :func:`sdjax.generalized_bias` (eqs 44-50). The base twist is eq 109's for
      the estimated ``momentum`` (default zero) or, with ``momentum="measured"``, the
      state's measured base twist (then ``C* = c_m - H_bm^T H_b^-1 c_b`` at that twist).
    - ``base="fixed"``: the base held at rest, ``H~ = H_m`` and ``C~ = c_m - tau_passive``
      from inverse dynamics with zero base twist and acceleration (gravity included).

    ``tau_passive = -K q - D qd`` are the model's visco-elastic joint torques, so that
    ``tau = H~ u + C~`` gives ``qdd = u`` exactly when the model is exact.

    Arguments:
        model: the (estimated) system.
        state: the measured state.
        base: ``"floating"`` or ``"fixed"`` (:data:`~sdjax.control.CONTROL_BASES`): the base
            the controller assumes (whatever the model's own base mode).
        momentum: ``None`` (zero), a ``(6,)`` conserved ``[P; L_O]`` (see :mod:`sdjax.gjm`),
            or ``"measured"``; floating base only.
        mode: deprecated spelling of ``base`` (``DeprecationWarning``).

    Returns:
        ``H~ (n, n)`` symmetric positive definite and ``C~ (n,)``, N m or N.
    """
    check_no_mimic(model, "computed_torque_terms")
    check_state(model, state)
    base = _base_keyword("computed_torque_terms", base, mode)
    measured, momentum = _momentum_spec(momentum)
    passive = passive_joint_torques(model, state)
    if base == "floating":
        h_star, c_star = _floating_terms(model, state, momentum, measured)
        return h_star, c_star - passive
    nb = model.num_base_velocities
    return inertia_matrix(model, state)[nb:, nb:], bias_forces(model, _at_rest(state))[nb:] - passive


@eqx.filter_jit
def computed_torque(
    model: Model,
    state: State,
    qdd_command: Any,
    *,
    base: str = "floating",
    momentum: Any = None,
    mode: str | None = None,
) -> Array:
    """Joint torques ``tau = H~ u + C~`` that produce the joint acceleration ``u`` under
    ``model`` (seed 003 eq 115); see :func:`computed_torque_terms` for ``base`` and
    ``momentum``. With a fixed base this is one Newton-Euler pass (SpaceDyn ``r_ne`` with the
    base at rest).

    Arguments:
        model: the (estimated) system.
        state: the measured state.
        qdd_command: ``(n,)`` commanded joint accelerations ``u``, rad/s^2 or m/s^2.

    Returns:
        ``(n,)`` joint torques/forces, N m or N.
    """
    check_no_mimic(model, "computed_torque")
    check_state(model, state)
    base = _base_keyword("computed_torque", base, mode)
    u = check_vector("computed_torque: qdd_command", qdd_command, (model.num_joints,), state.q.dtype)
    if base == "fixed":
        return inverse_dynamics(model, _at_rest(state), None, u)[1]
    h, c = computed_torque_terms(model, state, base=base, momentum=momentum)
    return matmul(h, u) + c


class ComputedTorque(eqx.Module):
    """Computed-torque tracking law with an estimated model (seed 003 eqs 112-115).

    ``u = qdd_d + Kd (qd_d - qd) + Kp (q_d - q)`` (eq 112 plus the reference acceleration)
    and ``tau = H~ u + C~`` (eq 115) with ``H~``, ``C~`` of ``estimated_model``
    (:func:`computed_torque_terms`). With an exact model the joint error ``e = q_d - q``
    obeys ``e'' + Kd e' + Kp e = 0`` (between controller samples); with a wrong model the
    residual ``H~^-1 [(H~ - H) qdd + C~ - C]`` drives it.

    Attributes:
        estimated_model: the controller's model: the same topology as the plant, e.g. with
            different masses and inertias (a fuel-depleted tank, an unknown payload).
        kp: scalar or ``(n,)`` 1/s^2.
        kd: scalar or ``(n,)`` 1/s.
        reference: as :class:`JointPD` (a callable ``t -> (q_d, qd_d, qdd_d)`` or constants).
        base: static ``"floating"`` (generalized dynamics, base reacting) or ``"fixed"``
            (``mode=``, the earlier name of this argument, still works with a
            ``DeprecationWarning``).
        momentum: estimated conserved momentum ``(6,)`` or ``None`` (zero); floating base.
        measured_twist: static; if True, ``C~`` uses the measured base twist instead of
            eq 109's (construct with ``momentum="measured"``).
    """

    estimated_model: Model
    kp: Array
    kd: Array
    reference: Reference
    momentum: Array | None
    base: str = eqx.field(static=True)
    measured_twist: bool = eqx.field(static=True)

    def __init__(
        self,
        estimated_model: Model,
        kp: Any,
        kd: Any,
        reference: Any,
        *,
        base: str = "floating",
        momentum: Any = None,
        mode: str | None = None,
    ):
        n = estimated_model.num_joints
        self.estimated_model = estimated_model
        self.kp = float_array(
            "ComputedTorque: kp", kp, shape=(n,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.kd = float_array(
            "ComputedTorque: kd", kd, shape=(n,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.reference = _as_reference(reference, "ComputedTorque")
        self.base = _base_keyword("ComputedTorque", base, mode)
        self.measured_twist, momentum = _momentum_spec(momentum)
        self.momentum = (
            None
            if momentum is None
            else check_vector("ComputedTorque: momentum", momentum, (6,), estimated_model.dtype)
        )

    def acceleration_command(self, t: Array, state: State) -> Array:
        """``u`` of eq 112 (plus the reference acceleration), ``(n,)``."""
        dtype = state.q.dtype
        n = self.estimated_model.num_joints
        q_d, qd_d, qdd_d = _evaluate_reference(self.reference, jnp.asarray(t, dtype), n, dtype, "ComputedTorque")
        return qdd_d + self.kd.astype(dtype) * (qd_d - state.qd) + self.kp.astype(dtype) * (q_d - state.q)

    def __call__(self, t: Array, state: State) -> Array:
        momentum = "measured" if self.measured_twist else self.momentum
        return computed_torque(
            self.estimated_model, state, self.acceleration_command(t, state), base=self.base, momentum=momentum
        )


class RateServo(eqx.Module):
    """Joint-rate servo by computed torque: ``tau = H~ (d/dt qd_c + Kv (qd_c - qd)) + C~``.

    Turns a commanded joint-rate law ``rate_command(t, state) -> (n,)`` (resolved motion
    rates, reaction-null-space rates, ...) into torques for :func:`sdjax.rollout`.

    The feed-forward ``d/dt qd_c`` is the derivative of the command along the current
    motion, by forward-mode autodiff in the direction ``(dt = 1, d(positions)/dt, 0)``: the
    time, the base pose (``v0``, ``w0``) and ``q`` (``qd``) move, velocities are held. It is
    exact for commands that depend on time and positions only (every command built here);
    velocity dependence of a command is ignored. With an exact model the rate error then
    decays as ``e' = -Kv e`` (between controller samples); ``feedforward=False`` leaves a
    first-order lag of time constant ``1/Kv`` instead.

    Attributes:
        estimated_model: the controller's model (see :class:`ComputedTorque`).
        rate_command: ``(t, state) -> (n,)`` commanded joint rates, rad/s or m/s.
        gain: scalar or ``(n,)`` ``Kv``, 1/s.
        base, momentum, measured_twist: as :class:`ComputedTorque` (also ``mode=``, deprecated).
        feedforward: static, include ``d/dt qd_c`` (default True).
    """

    estimated_model: Model
    rate_command: Callable[[Array, State], Array]
    gain: Array
    momentum: Array | None
    base: str = eqx.field(static=True)
    measured_twist: bool = eqx.field(static=True)
    feedforward: bool = eqx.field(static=True)

    def __init__(
        self,
        estimated_model: Model,
        rate_command: Callable[[Array, State], Array],
        gain: Any,
        *,
        base: str = "floating",
        momentum: Any = None,
        feedforward: bool = True,
        mode: str | None = None,
    ):
        check_callable("RateServo: rate_command", rate_command, "(t, state) -> (n,) joint rates")
        self.estimated_model = estimated_model
        self.rate_command = rate_command
        self.gain = float_array(
            "RateServo: gain",
            gain,
            shape=(estimated_model.num_joints,),
            scalar="keep",
            sign="non-negative",
            hint="one per joint",
        )
        self.base = _base_keyword("RateServo", base, mode)
        self.measured_twist, momentum = _momentum_spec(momentum)
        self.momentum = (
            None if momentum is None else check_vector("RateServo: momentum", momentum, (6,), estimated_model.dtype)
        )
        self.feedforward = bool(feedforward)

    def command(self, t: Array, state: State) -> tuple[Array, Array]:
        """``(qd_c, d/dt qd_c)``, each ``(n,)`` (the rate is zero without feed-forward)."""
        dtype = state.q.dtype
        n = self.estimated_model.num_joints
        t = jnp.asarray(t, dtype)

        def evaluate(t, state):
            return check_vector("RateServo: rate_command", self.rate_command(t, state), (n,), dtype)

        if not self.feedforward:
            value = evaluate(t, state)
            return value, jnp.zeros_like(value)
        zero3 = jnp.zeros((3,), dtype)
        motion = State(
            base_position=state.base_linear_velocity,
            base_quaternion=quat_rate(state.base_quaternion, state.base_angular_velocity),
            base_linear_velocity=zero3,
            base_angular_velocity=zero3,
            q=state.qd,
            qd=jnp.zeros_like(state.qd),
        )
        return jax.jvp(evaluate, (t, state), (jnp.ones((), dtype), motion))

    def __call__(self, t: Array, state: State) -> Array:
        command, command_rate = self.command(t, state)
        u = command_rate + self.gain.astype(state.q.dtype) * (command - state.qd)
        momentum = "measured" if self.measured_twist else self.momentum
        return computed_torque(self.estimated_model, state, u, base=self.base, momentum=momentum)


__all__ = ["ComputedTorque", "RateServo", "computed_torque", "computed_torque_terms"]
