"""Control and planning building blocks for moving-base manipulators (seed 003 eqs 103-115).

Control laws are pytrees (``equinox.Module``) called as ``law(t, state) -> tau`` (``(n,)``
joint torques/forces), so they plug straight into :func:`sdjax.rollout`; their gains,
references and estimated models are array leaves that ``jit``, ``vmap`` and ``grad`` see.

- :class:`JointPD`: independent joint PD, ``tau = Kp (q_d - q) + Kd (qd_d - qd)``;
  :func:`torque_limited_gains` sizes the gains from motor torque limits (eqs 113-114).
- :class:`ComputedTorque`: computed-torque control with an *estimated* model (eqs 112-115),
  ``tau = H~ u + C~``, ``u = qdd_d + Kd (qd_d - qd) + Kp (q_d - q)``; :func:`computed_torque_terms`
  gives ``H~`` and ``C~`` of a floating base (generalized, momentum-reduced dynamics) or of
  a base held at rest.
- :func:`damped_least_squares` and :func:`resolved_motion_rates`: resolved motion rate
  control with the generalized Jacobian (eqs 110-111), damped near singularities;
  :class:`ResolvedRateLaw` closes the loop on an end-point path through a joint-rate
  servo (:class:`RateServo`).
- :func:`inverse_kinematics`: fixed- or floating-base inverse kinematics with a
  convergence report (:class:`InverseKinematicsResult`) instead of an exception.
- :func:`reaction_null_space_projector`, :func:`reaction_null_space_rates`: joint motions
  that leave the base angular velocity unchanged (reaction null space, Nenchev/Yoshida).

Task points. A task point is an end point (``end_point=k``, index into
``model.end_point_link``; its frame is the end-point frame) or any point fixed on a link
(``link=i``, ``point`` = position relative to the link centroid in the link frame; its
frame is the link frame). Task velocities are ``[linear (m/s); angular (rad/s)]`` of that
point and frame, inertial frame; ``task`` selects ``"pose"`` (6 rows), ``"position"``
(rows 0:3) or ``"orientation"`` (rows 3:6).

Base assumption (:data:`CONTROL_BASES`). ``base="floating"`` (``mode=`` for the torque laws;
the default) lets the base react to the joints under conserved momentum (eq 109) as far as
the model's base mode (:data:`sdjax.BASE_MODES`) lets it move: the task Jacobian is the
generalized Jacobian ``J*`` (eq 110) plus the momentum offset, written with the free base
coordinates (a planar base reacts in x, y and yaw and conserves ``P_x, P_y, L_z``; a fixed
base does not react, so ``J* = J_m``). ``base="fixed"`` assumes the base held at rest (a
ground robot or a servicer whose base is controlled stiffly): the Jacobian is the joint
block ``J_m``.

Frames are inertial unless stated; units SI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array, lax

from sdjax.dynamics import bias_forces, inertia_matrix, inverse_dynamics, passive_joint_torques
from sdjax.gjm import (
    Manipulability,
    base_twist_from_free,
    generalized_columns,
    manipulability,
    momentum_offset,
    reduced_equation,
    solve_base_block,
    with_momentum,
)
from sdjax.jacobians import point_jacobian
from sdjax.kinematics import body_masses, center_of_mass, relative_frames
from sdjax.model import Model
from sdjax.rotation import matrix_to_rotation_vector, quat_normalize, quat_rate, quat_to_matrix, rpy_to_matrix
from sdjax._checks import check_choice, check_vector, float_array, is_traced
from sdjax.state import State, check_state

#: What the model-based functions assume of the base (see the module docstring): it reacts
#: as the model's base mode lets it, or it is held at rest.
CONTROL_BASES = ("floating", "fixed")

#: Task selections: rows of the ``[linear; angular]`` task velocity.
TASKS = {"pose": slice(0, 6), "position": slice(0, 3), "orientation": slice(3, 6)}

#: Default damped-least-squares schedule: damping switches on when the smallest singular
#: value of the (weighted) task Jacobian drops below ``DEFAULT_SINGULAR_THRESHOLD`` and
#: reaches ``DEFAULT_MAX_DAMPING`` at a singularity (units of the Jacobian: m/rad for
#: linear rows, dimensionless for angular rows). A 1-3 m arm has singular values of order 1,
#: so 0.05 damps only close to a singularity and bounds joint rates by 1/(2 * 0.05) = 10
#: rad/s per unit task speed there.
DEFAULT_SINGULAR_THRESHOLD = 0.05
DEFAULT_MAX_DAMPING = 0.05

Reference = Callable[[Array], Any]


# ------------------------------------------------------------------------------------------
# Joint references.


class JointReference(eqx.Module):
    """A constant joint reference: a set point ``q_d`` with optional constant desired rates
    ``qd_d`` and accelerations ``qdd_d`` (feed-forward terms); called with the time, it
    returns the tuple ``(q_d, qd_d, qdd_d)``.

    Attributes:
        q: ``(n,)`` desired joint positions, rad or m.
        qd: ``(n,)`` desired joint rates (default zero).
        qdd: ``(n,)`` desired joint accelerations (default zero).
    """

    q: Array
    qd: Array
    qdd: Array

    def __init__(self, q: Any, qd: Any = None, qdd: Any = None):
        self.q = jnp.asarray(q)
        if self.q.ndim != 1:
            raise ValueError(f"JointReference: q expected shape (n,), got {self.q.shape}")
        n = self.q.shape[0]
        dtype = self.q.dtype if jnp.issubdtype(self.q.dtype, jnp.floating) else jnp.result_type(float)
        self.q = self.q.astype(dtype)
        self.qd = check_vector("JointReference: qd", qd, (n,), dtype)
        self.qdd = check_vector("JointReference: qdd", qdd, (n,), dtype)

    def __call__(self, t: Array) -> tuple[Array, Array, Array]:
        return self.q, self.qd, self.qdd


def _quintic(t: Array, start_time: Array, duration: Array) -> tuple[Array, Array, Array]:
    """Rest-to-rest quintic time scaling ``s = 10 x^3 - 15 x^4 + 6 x^5``, ``x = (t - t0)/T``
    clipped to [0, 1]; returns ``(s, ds/dt, d2s/dt2)``."""
    x = jnp.clip((t - start_time) / duration, 0.0, 1.0)
    s = x**3 * (10.0 + x * (-15.0 + 6.0 * x))
    ds = 30.0 * x**2 * (1.0 - x) ** 2 / duration
    dds = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) / duration**2
    return s, ds, dds


class QuinticJointReference(eqx.Module):
    """Rest-to-rest joint motion from ``start`` to ``goal`` with a quintic time law
    (zero rate and acceleration at both ends); constant before ``start_time`` and after
    ``start_time + duration``.

    Attributes:
        start, goal: ``(n,)`` joint positions, rad or m.
        duration: ``()`` s, positive.
        start_time: ``()`` s.
    """

    start: Array
    goal: Array
    duration: Array
    start_time: Array

    def __init__(self, start: Any, goal: Any, duration: Any, start_time: Any = 0.0):
        self.start, self.goal = jnp.asarray(start), jnp.asarray(goal)
        if self.start.ndim != 1 or self.start.shape != self.goal.shape:
            raise ValueError(
                f"QuinticJointReference: start and goal expected two (n,) vectors, got {self.start.shape} and {self.goal.shape}"
            )
        if not is_traced(duration) and not float(np.asarray(duration)) > 0:
            raise ValueError(f"QuinticJointReference: duration must be positive, got {duration!r}")
        self.duration = jnp.asarray(duration)
        self.start_time = jnp.asarray(start_time)

    def __call__(self, t: Array) -> tuple[Array, Array, Array]:
        dtype = jnp.asarray(t).dtype
        s, ds, dds = _quintic(t, self.start_time.astype(dtype), self.duration.astype(dtype))
        delta = (self.goal - self.start).astype(dtype)
        return self.start.astype(dtype) + s * delta, ds * delta, dds * delta


def _as_reference(reference: Any, name: str) -> Reference:
    if callable(reference):
        return reference
    if isinstance(reference, tuple):
        if not 1 <= len(reference) <= 3:
            raise ValueError(f"{name}: a reference tuple is (q_d, qd_d[, qdd_d]), got {len(reference)} entries")
        return JointReference(*reference)
    return JointReference(reference)


def _evaluate_reference(reference: Reference, t: Array, n: int, dtype: Any, name: str) -> tuple[Array, Array, Array]:
    """``(q_d, qd_d, qdd_d)`` at ``t``, each ``(n,)`` of ``dtype`` (missing entries zero)."""
    value = reference(t)
    if not isinstance(value, (tuple, list)):
        value = (value,)
    if not 1 <= len(value) <= 3:
        raise ValueError(f"{name}: the reference must return (q_d, qd_d[, qdd_d]), got {len(value)} entries")
    value = tuple(value) + (None,) * (3 - len(value))
    q_d, qd_d, qdd_d = (
        check_vector(f"{name}: reference {label}", v, (n,), dtype) for label, v in zip(("q_d", "qd_d", "qdd_d"), value)
    )
    return q_d, qd_d, qdd_d


# ------------------------------------------------------------------------------------------
# Gains (eqs 113-114) and joint PD.


def torque_limited_gains(
    tau_max: Any, max_error: Any, *, inertia: Any = None, damping_ratio: Any = 1.0
) -> tuple[Array, Array]:
    """PD gains sized from motor torque limits (seed 003 eqs 113-114).

    Eq 113 sets the stiffness so that the largest expected position error saturates the
    motor, ``Kp = tau_max / (q_D - q)_max``. Eq 114 is printed (in the extracted text of the
    seed) as ``K_D = 2 K_P``; the harmonic-oscillator argument it invokes gives critical
    damping of ``I e'' + Kd e' + Kp e = 0`` at ``Kd = 2 sqrt(Kp I)``, which is what is
    implemented here, generalised to a damping ratio ``zeta``:

        Kp = tau_max / max_error,    Kd = 2 zeta sqrt(Kp I)

    (with ``I = 1`` when ``inertia`` is omitted, i.e. ``Kd = 2 zeta sqrt(Kp)``).

    Use the result directly as the torque-level gains of :class:`JointPD` (``inertia`` = the
    joint's effective inertia, e.g. ``diag(generalized_inertia_matrix(...))``). For
    :class:`ComputedTorque`, whose ``u`` is an acceleration, divide both gains by the
    inertia (``Kp / I``, ``Kd / I``), giving the natural frequency ``sqrt(Kp / I)``.

    Arguments:
        tau_max: scalar or ``(n,)`` maximum motor torque/force, N m or N (positive).
        max_error: scalar or ``(n,)`` largest expected position error, rad or m (positive).
        inertia: scalar or ``(n,)`` effective joint inertia, kg m^2 or kg (default 1).
        damping_ratio: ``zeta`` (default 1, critical damping).

    Returns:
        ``(kp, kd)``, broadcast shape of the inputs.
    """
    for name, value in (
        ("tau_max", tau_max),
        ("max_error", max_error),
        ("inertia", inertia),
        ("damping_ratio", damping_ratio),
    ):
        if value is not None and not is_traced(value) and not np.all(np.asarray(value, np.float64) > 0):
            raise ValueError(f"torque_limited_gains: {name} must be positive, got {np.asarray(value).tolist()}")
    kp = jnp.asarray(tau_max) / jnp.asarray(max_error)
    stiffness = kp if inertia is None else kp * jnp.asarray(inertia)
    return kp, 2.0 * jnp.asarray(damping_ratio) * jnp.sqrt(stiffness)


class JointPD(eqx.Module):
    """Independent-joint PD law ``tau = Kp (q_d - q) + Kd (qd_d - qd)``; ``(t, state) -> (n,)``.

    The base is not measured or compensated; on a free-floating system the joint loop still
    converges (the reduced inertia ``H*`` is positive definite) while the base reacts.

    Attributes:
        kp: scalar or ``(n,)`` stiffness, N m/rad (N/m for prismatic joints).
        kd: scalar or ``(n,)`` damping, N m s/rad (N s/m).
        reference: a callable ``t -> (q_d, qd_d[, qdd_d])`` (or ``-> q_d``), e.g.
            :class:`QuinticJointReference`; pass constant arrays as ``q_d`` or as a tuple
            ``(q_d, qd_d)`` (wrapped in :class:`JointReference`).
    """

    kp: Array
    kd: Array
    reference: Reference

    def __init__(self, kp: Any, kd: Any, reference: Any):
        self.kp = float_array(
            "JointPD: kp", kp, shape=(None,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.kd = float_array(
            "JointPD: kd", kd, shape=(None,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.reference = _as_reference(reference, "JointPD")

    def __call__(self, t: Array, state: State) -> Array:
        dtype = state.q.dtype
        n = state.q.shape[0]
        _check_gain_size("JointPD", self.kp, self.kd, n)
        q_d, qd_d, _ = _evaluate_reference(self.reference, jnp.asarray(t, dtype), n, dtype, "JointPD")
        return self.kp.astype(dtype) * (q_d - state.q) + self.kd.astype(dtype) * (qd_d - state.qd)


def _check_gain_size(name: str, kp: Array, kd: Array, n: int) -> None:
    for label, gain in (("kp", kp), ("kd", kd)):
        if gain.ndim == 1 and gain.shape != (n,):
            raise ValueError(f"{name}: {label} has shape {gain.shape}; expected a scalar or ({n},) for n={n} joints")


# ------------------------------------------------------------------------------------------
# Computed torque with an estimated model (eqs 112-115).


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


def _at_rest(state: State) -> State:
    zero = jnp.zeros_like(state.base_linear_velocity)
    return eqx.tree_at(lambda s: (s.base_linear_velocity, s.base_angular_velocity), state, (zero, zero))


@eqx.filter_jit
def computed_torque_terms(
    model: Model, state: State, *, mode: str = "floating", momentum: Any = None
) -> tuple[Array, Array]:
    """``(H~, C~)`` of the joint-space equation ``H~ qdd + C~ = tau`` used by computed torque.

    With the estimated model as ``model`` these are the ``H~``, ``C~`` of seed 003 eq 115.

    - ``mode="floating"``: the generalized (momentum-reduced) dynamics, ``H~ = H*``
      (:func:`sdjax.generalized_inertia_matrix`, eq 45) and ``C~ = C* - tau_passive`` with
      ``C*`` as :func:`sdjax.generalized_bias` (eqs 44-50). The base twist is eq 109's for
      the estimated ``momentum`` (default zero) or, with ``momentum="measured"``, the
      state's measured base twist (then ``C* = c_m - H_bm^T H_b^-1 c_b`` at that twist).
    - ``mode="fixed"``: the base held at rest, ``H~ = H_m`` and ``C~ = c_m - tau_passive``
      from inverse dynamics with zero base twist and acceleration (gravity included).

    ``tau_passive = -K q - D qd`` are the model's visco-elastic joint torques, so that
    ``tau = H~ u + C~`` gives ``qdd = u`` exactly when the model is exact.

    Arguments:
        model: the (estimated) system.
        state: the measured state.
        mode: ``"floating"`` or ``"fixed"``.
        momentum: ``None`` (zero), a ``(6,)`` conserved ``[P; L_O]`` (see :mod:`sdjax.gjm`),
            or ``"measured"``; floating mode only.

    Returns:
        ``H~ (n, n)`` symmetric positive definite and ``C~ (n,)``, N m or N.
    """
    check_state(model, state)
    check_choice("computed_torque_terms: mode", mode, CONTROL_BASES)
    measured, momentum = _momentum_spec(momentum)
    passive = passive_joint_torques(model, state)
    if mode == "floating":
        h_star, c_star = _floating_terms(model, state, momentum, measured)
        return h_star, c_star - passive
    nb = model.num_base_velocities
    return inertia_matrix(model, state)[nb:, nb:], bias_forces(model, _at_rest(state))[nb:] - passive


@eqx.filter_jit
def computed_torque(
    model: Model, state: State, qdd_command: Any, *, mode: str = "floating", momentum: Any = None
) -> Array:
    """Joint torques ``tau = H~ u + C~`` that produce the joint acceleration ``u`` under
    ``model`` (seed 003 eq 115); see :func:`computed_torque_terms` for ``mode`` and
    ``momentum``. In fixed mode this is one Newton-Euler pass (SpaceDyn ``r_ne`` with the
    base at rest).

    Arguments:
        model: the (estimated) system.
        state: the measured state.
        qdd_command: ``(n,)`` commanded joint accelerations ``u``, rad/s^2 or m/s^2.

    Returns:
        ``(n,)`` joint torques/forces, N m or N.
    """
    check_state(model, state)
    check_choice("computed_torque: mode", mode, CONTROL_BASES)
    u = check_vector("computed_torque: qdd_command", qdd_command, (model.num_joints,), state.q.dtype)
    if mode == "fixed":
        return inverse_dynamics(model, _at_rest(state), None, u)[1]
    h, c = computed_torque_terms(model, state, mode=mode, momentum=momentum)
    return h @ u + c


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
        mode: static ``"floating"`` (generalized dynamics, base reacting) or ``"fixed"``.
        momentum: estimated conserved momentum ``(6,)`` or ``None`` (zero); floating mode.
        measured_twist: static; if True, ``C~`` uses the measured base twist instead of
            eq 109's (construct with ``momentum="measured"``).
    """

    estimated_model: Model
    kp: Array
    kd: Array
    reference: Reference
    momentum: Array | None
    mode: str = eqx.field(static=True)
    measured_twist: bool = eqx.field(static=True)

    def __init__(
        self, estimated_model: Model, kp: Any, kd: Any, reference: Any, *, mode: str = "floating", momentum: Any = None
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
        self.mode = check_choice("ComputedTorque: mode", mode, CONTROL_BASES)
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
            self.estimated_model, state, self.acceleration_command(t, state), mode=self.mode, momentum=momentum
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
        mode, momentum, measured_twist: as :class:`ComputedTorque`.
        feedforward: static, include ``d/dt qd_c`` (default True).
    """

    estimated_model: Model
    rate_command: Callable[[Array, State], Array]
    gain: Array
    momentum: Array | None
    mode: str = eqx.field(static=True)
    measured_twist: bool = eqx.field(static=True)
    feedforward: bool = eqx.field(static=True)

    def __init__(
        self,
        estimated_model: Model,
        rate_command: Callable[[Array, State], Array],
        gain: Any,
        *,
        mode: str = "floating",
        momentum: Any = None,
        feedforward: bool = True,
    ):
        if not callable(rate_command):
            raise ValueError("RateServo: rate_command must be a callable (t, state) -> (n,) joint rates")
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
        self.mode = check_choice("RateServo: mode", mode, CONTROL_BASES)
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
        return computed_torque(self.estimated_model, state, u, mode=self.mode, momentum=momentum)


# ------------------------------------------------------------------------------------------
# Damped least squares.


class DampedLeastSquares(eqx.Module):
    """Result of :func:`damped_least_squares`.

    Attributes:
        solution: ``(n,)`` ``x`` minimising ``|W^1/2 (J x - b)|^2 + lambda^2 |x|^2``.
        damping: ``()`` ``lambda`` used (0 away from singularities).
        min_singular_value: ``()`` smallest singular value of ``W^1/2 J``.
    """

    solution: Array
    damping: Array
    min_singular_value: Array


def damped_least_squares(
    jacobian: Any,
    rhs: Any,
    *,
    singular_threshold: Any = DEFAULT_SINGULAR_THRESHOLD,
    max_damping: Any = DEFAULT_MAX_DAMPING,
    weights: Any = None,
) -> DampedLeastSquares:
    """Damped least-squares (Levenberg-Marquardt) solution of ``J x = b`` with a damping
    that switches on near singularities (Nakamura and Hanafusa 1986; Maciejewski and Klein
    1988; Chiaverini's schedule):

        x = J^T (J J^T + lambda^2 E)^-1 b,
        lambda^2 = lambda_max^2 (1 - (sigma_min / eps)^2)  if sigma_min < eps, else 0,

    ``sigma_min`` the smallest singular value of ``J`` (from the eigenvalues of ``J J^T``).
    Away from singularities (``sigma_min >= eps``) this is the exact minimum-norm solution
    ``J^+ b``; near one, each singular direction is scaled by ``sigma / (sigma^2 + lambda^2)
    <= 1 / (2 lambda)``, so ``|x| <= |b| / (2 lambda)`` stays bounded where ``J^+`` blows up.
    For ``m > n`` rows the normal equations ``(J^T J + lambda^2 E) x = J^T b`` are solved.

    Arguments:
        jacobian: ``(m, n)`` matrix ``J``.
        rhs: ``(m,)`` right-hand side ``b``.
        singular_threshold: ``eps >= 0`` (units of ``J``).
        max_damping: ``lambda_max >= 0``. With ``eps = 0`` or ``lambda_max = 0`` this is the
            undamped pseudo-inverse (which fails at a singularity).
        weights: optional ``(m,)`` positive task-row weights ``W`` (e.g. to trade position
            against orientation accuracy); the schedule uses ``W^1/2 J``.

    Returns:
        :class:`DampedLeastSquares`.
    """
    jac = jnp.asarray(jacobian)
    if jac.ndim != 2:
        raise ValueError(f"damped_least_squares: jacobian expected shape (m, n), got {jac.shape}")
    m = jac.shape[0]
    b = check_vector("damped_least_squares: rhs", rhs, (m,), jac.dtype)
    _check_damping("damped_least_squares", singular_threshold, max_damping)
    if weights is not None:
        weights = check_vector("damped_least_squares: weights", weights, (m,), jac.dtype)
        if not is_traced(weights) and not np.all(np.asarray(weights, np.float64) > 0):
            raise ValueError(f"damped_least_squares: weights must be positive, got {np.asarray(weights).tolist()}")
    return solve_damped_least_squares(jac, b, singular_threshold, max_damping, weights)


def _check_damping(name: str, singular_threshold: Any, max_damping: Any) -> None:
    for label, value in (("singular_threshold", singular_threshold), ("max_damping", max_damping)):
        if not is_traced(value):
            arr = np.asarray(value, np.float64)
            if arr.shape != () or not arr >= 0 or not np.isfinite(arr):
                raise ValueError(f"{name}: {label} must be a finite non-negative scalar, got {value!r}")


@eqx.filter_jit
def solve_damped_least_squares(
    jac: Array, b: Array, singular_threshold: Any, max_damping: Any, weights: Array | None
) -> DampedLeastSquares:
    m, n = jac.shape
    if weights is not None:
        root = jnp.sqrt(weights)
        jac, b = root[:, None] * jac, root * b
    wide = m <= n
    gram = jac @ jac.T if wide else jac.T @ jac
    gram = 0.5 * (gram + gram.T)
    sigma_sq = jnp.maximum(jnp.linalg.eigvalsh(gram)[0], 0.0)
    eps = jnp.asarray(singular_threshold).astype(jac.dtype)
    lam_max = jnp.asarray(max_damping).astype(jac.dtype)
    near = sigma_sq < eps**2
    ratio = sigma_sq / jnp.where(near, eps**2, 1.0)
    lam_sq = jnp.where(near, lam_max**2 * (1.0 - ratio), 0.0)
    eye = jnp.eye(gram.shape[0], dtype=jac.dtype)
    factor = jsl.cho_factor(gram + lam_sq * eye, lower=True)
    x = jac.T @ jsl.cho_solve(factor, b) if wide else jsl.cho_solve(factor, jac.T @ b)
    return DampedLeastSquares(solution=x, damping=_safe_sqrt(lam_sq), min_singular_value=_safe_sqrt(sigma_sq))


def _safe_sqrt(value: Array) -> Array:
    """``sqrt(value)`` for ``value >= 0`` with a zero (not infinite) gradient at 0."""
    positive = value > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, value, 1.0)), 0.0)


# ------------------------------------------------------------------------------------------
# Task points, Jacobians and errors.


def _task_point(model: Model, end_point: Any, link: Any, point: Any, dtype: Any) -> tuple[int, Array, Array]:
    """``(link, point in the link frame from its centroid (3,), frame offset rotation (3, 3))``."""
    if link is not None:
        if isinstance(link, bool) or not isinstance(link, (int, np.integer)) or not 1 <= int(link) <= model.num_joints:
            raise ValueError(f"link: expected a static link index 1..{model.num_joints}, got {link!r}")
        return int(link), check_vector("point", point, (3,), dtype), jnp.eye(3, dtype=dtype)
    if point is not None:
        raise ValueError("point: give a point together with link=...; end points carry their own offset")
    ne = model.num_end_points
    if isinstance(end_point, bool) or not isinstance(end_point, (int, np.integer)) or not 0 <= int(end_point) < ne:
        raise ValueError(
            f"end_point: unknown end point {end_point!r}; model {model.name!r} has {ne} end point(s) "
            f"(indices 0..{ne - 1}, on links {model.end_point_link}); or pass link=... and point=..."
        )
    k = int(end_point)
    return (
        model.end_point_link[k],
        model.centroid_to_end_point[k].astype(dtype),
        rpy_to_matrix(model.end_point_rpy[k]).astype(dtype),
    )


class _Task(eqx.Module):
    """Kinematics of a task point at one state (internal)."""

    position: Array  # (3,) inertial, absolute
    rotation: Array  # (3, 3) task frame to inertial
    jacobian: Array  # (6, n) joint-rate Jacobian (J* or J_m)
    offset: Array  # (6,) velocity not due to the joints (momentum offset), inertial


def _task_kinematics(model: Model, state: State, spec: tuple[Any, Any, Any], base: str, momentum: Any) -> _Task:
    dtype = state.q.dtype
    link, point, offset_rotation = _task_point(model, *spec, dtype)
    frames = relative_frames(model, state.base_rotation, state.q)
    rotation = frames.rotation[link]
    x = frames.centroid[link] + rotation @ point
    columns = point_jacobian(model, state, link, point)  # (6, nv), free coordinates
    if base == "floating":
        h = inertia_matrix(model, state)
        jacobian = generalized_columns(model, h, columns)  # eq 110
        offset = momentum_offset(model, state, h, columns, momentum)
    else:
        jacobian, offset = columns[:, model.num_base_velocities :], jnp.zeros((6,), dtype)
    return _Task(state.base_position + x, rotation @ offset_rotation, jacobian, offset)


def task_error(
    task: str, position: Array, rotation: Array, target_position: Array | None, target_rotation: Array | None
) -> Array:
    """Task error ``[x_d - x; phi]`` (rows of ``task``), ``phi`` the inertial rotation vector
    of ``R_d R^T`` (the rotation that takes the current frame onto the target)."""
    parts = []
    if task in ("pose", "position"):
        if target_position is None:
            raise ValueError(f"task_error: task {task!r} needs target_position")
        parts.append(target_position - position)
    if task in ("pose", "orientation"):
        if target_rotation is None:
            raise ValueError(f"task_error: task {task!r} needs target_rotation")
        parts.append(matrix_to_rotation_vector(target_rotation @ rotation.T))
    return jnp.concatenate(parts)


@eqx.filter_jit
def task_jacobian(
    model: Model,
    state: State,
    *,
    end_point: int = 0,
    link: int | None = None,
    point: Any = None,
    task: str = "pose",
    base: str = "floating",
    momentum: Any = None,
) -> tuple[Array, Array]:
    """Joint-rate Jacobian and velocity offset of a task point (seed 003 eqs 103-110).

    The task point's velocity is ``jacobian @ qd + offset``. Floating base: ``jacobian`` is
    the generalized Jacobian ``J* = J_m - J_b H_b^-1 H_bm`` (eq 110) and ``offset`` the
    momentum term ``J_b H_b^-1 M_r0`` (zero for zero momentum). Fixed base: ``J_m`` and zero.

    Arguments:
        model, state: the system and its state (positions).
        end_point, link, point: the task point (see the module docstring).
        task: ``"pose"``, ``"position"`` or ``"orientation"``.
        base: ``"floating"`` or ``"fixed"``.
        momentum: ``(6,)`` conserved ``[P; L_O]`` (default zero); floating base only.

    Returns:
        ``jacobian (m, n)`` and ``offset (m,)``, rows ``[linear (m/s); angular (rad/s)]``
        selected by ``task``, inertial frame.
    """
    check_state(model, state)
    rows = TASKS[check_choice("task_jacobian: task", task, TASKS)]
    _check_base_momentum("task_jacobian", base, momentum)
    kin = _task_kinematics(model, state, (end_point, link, point), base, momentum)
    return kin.jacobian[rows], kin.offset[rows]


@eqx.filter_jit
def task_pose(
    model: Model, state: State, *, end_point: int = 0, link: int | None = None, point: Any = None
) -> tuple[Array, Array]:
    """Position ``(3,)`` (inertial, m) and frame rotation ``(3, 3)`` (task frame to inertial)
    of a task point (see the module docstring)."""
    check_state(model, state)
    dtype = state.q.dtype
    link_index, offset, offset_rotation = _task_point(model, end_point, link, point, dtype)
    frames = relative_frames(model, state.base_rotation, state.q)
    rotation = frames.rotation[link_index]
    return state.base_position + frames.centroid[link_index] + rotation @ offset, rotation @ offset_rotation


# ------------------------------------------------------------------------------------------
# Resolved motion rate control (eq 111).


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


def _check_base_momentum(name: str, base: str, momentum: Any) -> None:
    check_choice(f"{name}: base", base, CONTROL_BASES)
    if base == "fixed" and momentum is not None:
        raise ValueError(f"{name}: momentum applies to base='floating' only")


def resolved_motion_rates(
    model: Model,
    state: State,
    task_velocity: Any,
    *,
    end_point: int = 0,
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
    check_state(model, state)
    rows = TASKS[check_choice("resolved_motion_rates: task", task, TASKS)]
    _check_base_momentum("resolved_motion_rates", base, momentum)
    _task_point(model, end_point, link, point, state.q.dtype)
    m = rows.stop - rows.start
    velocity = check_vector("resolved_motion_rates: task_velocity", task_velocity, (m,), state.q.dtype)
    _check_damping("resolved_motion_rates", singular_threshold, max_damping)
    if weights is not None:
        weights = check_vector("resolved_motion_rates: weights", weights, (m,), state.q.dtype)
        if not is_traced(weights) and not np.all(np.asarray(weights, np.float64) > 0):
            raise ValueError(f"resolved_motion_rates: weights must be positive, got {np.asarray(weights).tolist()}")
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
        task_velocity=jac @ dls.solution + offset,
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
        if not is_traced(duration) and not float(np.asarray(duration)) > 0:
            raise ValueError(f"LinePath: duration must be positive, got {duration!r}")
        self.duration, self.start_time = jnp.asarray(duration), jnp.asarray(start_time)
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
        if not isinstance(target, (tuple, list)) or len(target) != 2:
            raise ValueError(f"{name}: for task='pose' the target must be a (position (3,), rotation (3, 3)) pair")
        position, rotation = target
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
    end_point: int = eqx.field(static=True)
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
        end_point: int = 0,
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
        if not callable(path):
            raise ValueError("ResolvedRateLaw: path must be a callable t -> (target, velocity)")
        self.task = check_choice("ResolvedRateLaw: task", task, TASKS)
        _check_base_momentum("ResolvedRateLaw", base, momentum)
        self.base = base
        dtype = estimated_model.dtype
        m = TASKS[task].stop - TASKS[task].start
        _task_point(estimated_model, end_point, link, point, dtype)  # validates the task point
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
        _check_damping("ResolvedRateLaw", singular_threshold, max_damping)
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
            mode=self.base,
            momentum=self.momentum,
            feedforward=self.feedforward,
        )
        return servo(t, state)


# ------------------------------------------------------------------------------------------
# Inverse kinematics.


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
    if not is_traced(value) and not float(np.asarray(value)) > 0:
        raise ValueError(f"inverse_kinematics: {name} must be positive, got {value!r}")


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
        twist = base_twist_from_free(model, -solve_base_block(model, h, h[:nb, nb:] @ dq))
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
    end_point: int = 0,
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
        end_point, link, point: the task point (see the module docstring).
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
    check_state(model, state)
    dtype = state.q.dtype
    n = model.num_joints
    check_choice("inverse_kinematics: base", base, CONTROL_BASES)
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
        target_rotation = check_vector("inverse_kinematics: target_rotation", target_rotation, (3, 3), dtype)
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, (int, np.integer)) or max_iterations < 1:
        raise ValueError(f"inverse_kinematics: max_iterations must be an int >= 1, got {max_iterations!r}")
    if isinstance(substeps, bool) or not isinstance(substeps, (int, np.integer)) or substeps < 1:
        raise ValueError(f"inverse_kinematics: substeps must be an int >= 1, got {substeps!r}")
    default_tol = float(np.sqrt(np.finfo(np.dtype(dtype)).eps))
    position_tolerance = default_tol if position_tolerance is None else position_tolerance
    orientation_tolerance = default_tol if orientation_tolerance is None else orientation_tolerance
    _check_tolerance("position_tolerance", position_tolerance)
    _check_tolerance("orientation_tolerance", orientation_tolerance)
    _check_tolerance("max_step", max_step)
    _task_point(model, end_point, link, point, dtype)  # validate before tracing the loop
    spec = (end_point, link, None if point is None else check_vector("inverse_kinematics: point", point, (3,), dtype))
    lower: Array | None
    upper: Array | None
    if joint_limits is not None:
        if not isinstance(joint_limits, (tuple, list)) or len(joint_limits) != 2:
            raise ValueError("inverse_kinematics: joint_limits must be a (lower, upper) pair of (n,) arrays")
        lower = check_vector("inverse_kinematics: joint_limits lower", joint_limits[0], (n,), dtype)
        upper = check_vector("inverse_kinematics: joint_limits upper", joint_limits[1], (n,), dtype)
        if not is_traced(joint_limits) and np.any(np.asarray(lower) > np.asarray(upper)):
            raise ValueError("inverse_kinematics: joint_limits lower must be <= upper for every joint")
    else:
        lower = upper = None
    _check_damping("inverse_kinematics", singular_threshold, max_damping)
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
        biggest = jnp.max(jnp.abs(dq))
        dq = dq * jnp.minimum(1.0, step_limit / jnp.where(biggest > 0, biggest, 1.0))
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


# ------------------------------------------------------------------------------------------
# Reaction null space.


def _base_angular_coupling(model: Model, state: State) -> Array:
    """``(3, n)`` map ``qd -> w0`` under zero momentum: the angular rows of ``-H_b^-1 H_bm``
    (eq 109), zero in the components the base mode fixes (all of them for a fixed base)."""
    h = inertia_matrix(model, state)
    nb = model.num_base_velocities
    coupling = -solve_base_block(model, h, h[:nb, nb:])  # (nb, n)
    return jax.vmap(lambda column: base_twist_from_free(model, column)[3:], in_axes=1, out_axes=1)(coupling)


@eqx.filter_jit
def reaction_null_space_projector(model: Model, state: State) -> Array:
    """Projector onto the reaction null space (Nenchev, Yoshida and Umetani): joint rates that
    leave the base angular velocity unchanged.

    Under conserved momentum the base angular velocity is ``w0 = G qd + w_M`` with
    ``G = (-H_b^-1 H_bm)[3:6]`` (rows 3:6 of eq 109's map) and ``w_M`` the part due to the
    momentum (zero for zero momentum). Joint rates in ``null(G)`` add no base rotation;
    ``P = E - G^+ G`` is the orthogonal projector onto it (rank ``n - rank G``, generically
    ``n - 3``; ``G`` is equivalent to the angular-momentum coupling about the system centre
    of mass, so the base may still translate). A planar base has one angular row (yaw; rank
    ``n - 1``), a fixed base none (``P = E``).

    Arguments:
        model, state: the system and its configuration (base attitude and ``q``).

    Returns:
        ``(n, n)`` symmetric idempotent projector.
    """
    check_state(model, state)
    coupling = _base_angular_coupling(model, state)
    projector = jnp.eye(model.num_joints, dtype=coupling.dtype) - jnp.linalg.pinv(coupling) @ coupling
    return 0.5 * (projector + projector.T)


@eqx.filter_jit
def reaction_null_space_rates(model: Model, state: State, qd_desired: Any) -> Array:
    """Joint rates closest to ``qd_desired`` (Euclidean norm) that leave the base angular
    velocity undisturbed: ``P qd_desired`` (see :func:`reaction_null_space_projector`).

    Arguments:
        model, state: the system and its configuration.
        qd_desired: ``(n,)`` desired joint rates, rad/s or m/s.

    Returns:
        ``(n,)`` joint rates in the reaction null space.
    """
    check_state(model, state)
    qd = check_vector("reaction_null_space_rates: qd_desired", qd_desired, (model.num_joints,), state.q.dtype)
    return reaction_null_space_projector(model, state) @ qd


__all__ = [
    "CONTROL_BASES",
    "TASKS",
    "ComputedTorque",
    "DampedLeastSquares",
    "InverseKinematicsResult",
    "JointPD",
    "JointReference",
    "LinePath",
    "QuinticJointReference",
    "RateServo",
    "ResolvedRateLaw",
    "ResolvedRates",
    "computed_torque",
    "computed_torque_terms",
    "damped_least_squares",
    "inverse_kinematics",
    "reaction_null_space_projector",
    "reaction_null_space_rates",
    "resolved_motion_rates",
    "task_jacobian",
    "task_pose",
    "torque_limited_gains",
]
