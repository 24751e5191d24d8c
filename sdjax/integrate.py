"""Time integration: classical RK4, the Rodrigues-update Euler step (eq 3.4), a semi-implicit
Euler step with implicit passive joint terms, rollouts.

Two kinds of applied loads enter a step:

- *controls* (joint torques, base and end-point loads) are held constant over each step
  (zero-order hold, as a digital controller and SpaceDyn's integrators do);
- *environment loads* (contact, gravity gradient, virtual springs: any function
  ``(t, state) -> Controls`` of the state) are evaluated afresh at every integrator stage,
  as the physics requires; holding a stiff contact force over a step would be unstable.

The base attitude is integrated as a quaternion and normalised after every step, so it stays
on the unit sphere.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from sdjax.algebra import matmul
from sdjax import batch_kernel
from sdjax.dynamics import (
    Controls,
    check_controls,
    floating_acceleration,
    forward_dynamics_and_factor,
    forward_dynamics_tangent,
    generalized_loads,
    inertia_matrix,
    kernel_serves,
    make_controls,
    rule_factor,
)
from sdjax.model import Model, floating_coordinates, free_coordinates, free_motion, joint_coordinate_map
from sdjax.rotation import quat_multiply, quat_normalize, quat_rate, rotation_vector_to_quat
from sdjax._checks import check_choice, check_count, check_scalar, check_type, is_traced
from sdjax._derivatives import batched_evaluation, batched_route, linearized_tangent
from sdjax.state import State, check_state, make_state, with_base_motion_checked

__all__ = [
    "ADAPTIVE_SOLVERS",
    "Adaptive",
    "EnvironmentLoads",
    "Euler",
    "INTEGRATORS",
    "ImplicitEuler",
    "Integrator",
    "MAX_ROLLOUT_STEPS",
    "NEWMARK_ITERATIONS",
    "Newmark",
    "RK4",
    "Simpson",
    "Trajectory",
    "adaptive_step",
    "as_integrator",
    "control_schedule",
    "environment_load_derivatives",
    "euler_step",
    "implicit_euler_step",
    "max_stable_step",
    "newmark_step",
    "rk4_step",
    "rollout",
    "runge_kutta4",
    "simpson_step",
    "state_derivative",
]

ControlLaw = Callable[[Array, State], Any]

#: State-dependent applied loads ``(t, state) -> Controls``, evaluated at every integrator
#: stage (time ``t`` in s, the stage state) and added to the held controls.
EnvironmentLoads = Callable[[Array, State], Controls]


def state_derivative(model: Model, state: State, controls: Controls) -> State:
    """Time derivative of the state (a :class:`State` of rates).

    ``d r0/dt = v0``, ``d quat/dt = 1/2 [w0, 0] * quat``, base and joint accelerations from
    :func:`sdjax.forward_dynamics` (zero along base components the base mode fixes).

    Arguments:
        model, state: the system and its state.
        controls: the applied loads (:class:`sdjax.Controls`, :func:`sdjax.make_controls`).
    """
    check_state(model, state, "state_derivative")
    controls = check_controls(model, controls, state.q.dtype, "state_derivative")
    return _rate(state, floating_acceleration(model, state, controls))


def _rate(state: State, acceleration: Array) -> State:
    """The state's time derivative given its accelerations ``(6 + n,)`` (floating order)."""
    return State(
        base_position=state.base_linear_velocity,
        base_quaternion=quat_rate(state.base_quaternion, state.base_angular_velocity),
        base_linear_velocity=acceleration[:3],
        base_angular_velocity=acceleration[3:6],
        q=state.qd,
        qd=acceleration[6:],
    )


#: Any pytree of float arrays integrated by :func:`runge_kutta4`: a :class:`State`, a tuple of
#: them (constrained systems), or another state type (a capture pair, a massless arm).
_PyTreeT = TypeVar("_PyTreeT")


def _axpy(scale: Array, rate: _PyTreeT, state: _PyTreeT) -> _PyTreeT:
    return jax.tree.map(lambda x, dx: x + scale * dx, state, rate)


def check_step(what: str, dt: Any, dtype: Any, *, at_run_time: bool = False) -> Array:
    """``dt``, the time step of a state of ``dtype`` (s), as a ``()`` array of that dtype, checked
    positive and finite (also in that precision: ``1e39`` is inf in float32, ``1e-50`` is 0): a
    concrete number at once; a traced one for its shape, and with ``at_run_time`` for its value
    when the program runs (``equinox.error_if``, also under ``jit``): a rollout checks its step
    so, once; the step functions, which a rollout's loop calls in every step, check a traced
    step's shape only (a check in the loop would run in every step: a host callback per step
    under ``vmap`` or on a GPU). The one check of every integrator step and rollout.

    Raises:
        TypeError: ``dt`` is no number (a string, ``None``, a ``bool``).
        ValueError: not a scalar, not finite, not positive (naming ``what``).
    """
    if is_traced(dt):
        if jnp.shape(dt) != ():
            raise ValueError(f"{what}: dt must be a scalar, got shape {jnp.shape(dt)}")
        dt_array = jnp.asarray(dt, dtype)
        if not at_run_time:
            return dt_array
        return eqx.error_if(
            dt_array, ~(jnp.isfinite(dt_array) & (dt_array > 0)), f"{what}: dt: must be positive and finite"
        )
    given = check_scalar(f"{what}: dt", dt, sign="positive")
    with np.errstate(over="ignore", under="ignore"):
        cast = float(np.asarray(given, np.dtype(dtype)))
    if not (math.isfinite(cast) and cast > 0):
        raise ValueError(
            f"{what}: dt: must be positive and finite in the state's precision, got {dt!r}, "
            f"which is {cast!r} in {np.dtype(dtype).name}"
        )
    return jnp.asarray(given, dtype)


def _check_flag(name: str, value: Any) -> bool:
    """``value`` if it is a Python ``bool`` (a static option: a NumPy ``bool_`` would be traced
    as an array): ``TypeError`` naming ``name`` for anything else (``"no"`` is no flag, and
    would be true)."""
    return check_type(name, value, bool, "a bool")


#: Classical RK4 tableau: stage offsets c_k (times dt, applied to the previous stage's rate)
#: and weights b_k.
_RK4_OFFSETS = (0.0, 0.5, 0.5, 1.0)
_RK4_WEIGHTS = (1.0 / 6.0, 2.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0)


def runge_kutta4(
    rate: Callable[[_PyTreeT, Array], Any],
    state: _PyTreeT,
    dt: Any,
    prepare_stage: Callable[[_PyTreeT, Array], _PyTreeT] | None = None,
    *,
    has_aux: bool = False,
    every_stage_aux: bool = False,
) -> Any:
    """One classical RK4 step ``y + dt sum_k b_k k_k`` with ``k_k = rate(y + c_k dt k_{k-1}, c_k dt)``.

    The four stages run as one ``lax.scan``, so the rate function (forward dynamics) is
    compiled once, not four times.

    Arguments:
        rate: ``(stage state, stage time offset c_k dt) -> time derivative`` (a :class:`State`
            of rates); with ``has_aux``, ``-> (time derivative, aux)``.
        state: state at ``t``.
        dt: step, s.
        prepare_stage: optional ``(stage_state, is_first) -> stage_state`` applied to each
            stage state before its rate is evaluated (e.g. quaternion normalisation).
        has_aux: ``rate`` also returns a pytree of other results; the first stage's (those at
            ``(t, y)`` itself: e.g. constraint forces there) are returned with the step, so a
            caller recording them needs no evaluation of its own.
        every_stage_aux: with ``has_aux``, return the four stages' aux stacked (leading axis 4)
            instead of the first's.

    Returns:
        ``y + dt sum_k b_k k_k`` (not normalised); with ``has_aux``, ``(that, first stage's aux)``
        (every stage's with ``every_stage_aux``).
    """
    dtype = jax.tree.leaves(state)[0].dtype  # any pytree of float arrays (e.g. two systems' states)
    zero = jax.tree.map(jnp.zeros_like, state)

    def stage(carry, tableau):
        total, previous = carry
        offset, weight = tableau
        stage_state = _axpy(offset * dt, previous, state)
        if prepare_stage is not None:
            stage_state = prepare_stage(stage_state, offset == 0.0)
        k, aux = rate(stage_state, offset * dt) if has_aux else (rate(stage_state, offset * dt), None)
        return (_axpy(weight, k, total), k), aux

    tableau = (jnp.asarray(_RK4_OFFSETS, dtype), jnp.asarray(_RK4_WEIGHTS, dtype))
    (total, _), auxes = lax.scan(stage, (zero, zero), tableau)
    new = _axpy(dt, total, state)
    if not has_aux:
        return new
    return new, (auxes if every_stage_aux else jax.tree.map(lambda x: x[0], auxes))


def _with_environment(
    model: Model, controls: Controls, environment: EnvironmentLoads | None, t: Array, state: State
) -> Controls:
    """``controls`` plus the environment loads at ``(t, state)`` (shapes checked)."""
    if environment is None:
        return controls
    loads = environment(t, state)
    if not isinstance(loads, Controls):
        raise TypeError(f"environment: expected a function (t, state) -> sdjax.Controls, got {type(loads).__name__}")
    loads = as_controls(model, loads, state.q.dtype)
    return jax.tree.map(jnp.add, controls, loads)


@eqx.filter_jit
def rk4_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
) -> State:
    """One classical fourth-order Runge-Kutta step on ``(r0, quat, v0, w0, q, qd)``.

    Intermediate stages use the un-normalised quaternion (its rotation matrix is exact for
    any non-zero quaternion); the result is normalised.

    Arguments:
        model: the system.
        state: state at ``t``.
        dt: step, s.
        controls: applied forces, held over the step (default none).
        environment: optional state-dependent loads ``(t, state) -> Controls``, evaluated at
            each of the four stages (times ``t``, ``t + dt/2``, ``t + dt/2``, ``t + dt``) and
            added to ``controls``.
        t: time at the start of the step, s (only seen by ``environment``).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state, "rk4_step")
    dtype = state.q.dtype
    controls = check_controls(model, controls, dtype, "rk4_step", optional=True)
    dt = check_step("rk4_step", dt, dtype)
    t = jnp.asarray(t, dtype)
    if environment is None and not model.has_mimic:
        # Batches on the CPU step in the compiled kernel, reverse mode too (_held_rk4_step).
        return _held_rk4_step(model, state, dt, controls)

    def rate(stage: State, offset: Array) -> State:
        return state_derivative(model, stage, _with_environment(model, controls, environment, t + offset, stage))

    return _normalised(runge_kutta4(rate, state, dt))


def _normalised(state: State) -> State:
    return eqx.tree_at(lambda s: s.base_quaternion, state, quat_normalize(state.base_quaternion))


# ------------------------------------------------------------------------------------------
# The RK4 step with held loads (no environment), batched and differentiated as one piece.


def _rk4_step_and_stages(model: Model, state: State, dt: Array, controls: Controls) -> tuple[State, Array, Array]:
    """One RK4 step with held ``controls`` (:func:`rk4_step` without environment loads), its
    four stages packed ``(4, 16 + 3 n)`` as the compiled kernel stores them (each stage's
    ``[quat, v0, w0, q, qd]`` and accelerations ``[dv0/dt, dw0/dt, qdd]``) and the lower
    Cholesky factors of their inertia matrices ``(4, nv, nv)``."""

    def rate(stage: State, offset: Array) -> tuple[State, tuple[Array, Array]]:
        acceleration, factor = forward_dynamics_and_factor(model, stage, controls)
        return _rate(stage, acceleration), (_packed_stage(stage, acceleration), factor)

    new, (stages, factors) = runge_kutta4(rate, state, dt, has_aux=True, every_stage_aux=True)
    return _normalised(new), stages, factors


def _plain_rk4_step(model: Model, state: State, dt: Array, controls: Controls) -> State:
    return _rk4_step_and_stages(model, state, dt, controls)[0]


def _packed_stage(stage: State, acceleration: Array) -> Array:
    """A stage state and its accelerations as one vector ``(16 + 3 n,)``."""
    fields = (stage.base_quaternion, stage.base_linear_velocity, stage.base_angular_velocity, stage.q, stage.qd)
    return jnp.concatenate([*fields, acceleration])


def _unpacked_stage(state: State, packed: Array) -> tuple[State, Array]:
    """``(stage state, accelerations (6 + n,))`` of a packed stage; its position (which no rate
    reads) is ``state``'s."""
    n = state.q.shape[-1]
    quaternion, v0, w0, q, qd, acceleration = jnp.split(packed, [4, 7, 10, 10 + n, 10 + 2 * n])
    return State(state.base_position, quaternion, v0, w0, q, qd), acceleration


def _batched_rk4_step(
    axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Any, with_stages: bool
) -> Any:
    """A batch of RK4 steps (with their stages where ``with_stages``): the compiled kernel where
    it serves (:func:`sdjax.dynamics.kernel_serves`), the stages' factors then zeros (the
    reverse kernel refactorises, forward mode reads them through the inertia kernel:
    :func:`sdjax.dynamics.forward_dynamics_tangent`); otherwise the plain step, vectorised."""
    model, state, dt, controls = args
    if kernel_serves(model, mapped, axis_size):
        packed, stages = batch_kernel.rk4_step(
            axis_size, model, state, dt, controls, in_batched, with_stages=with_stages
        )
        new = batch_kernel.unpacked_states(packed, state)
        if not with_stages:
            return new
        nv = model.num_velocities
        return new, stages, jnp.zeros((axis_size, 4, nv, nv), packed.dtype)
    one = _rk4_step_and_stages if with_stages else _plain_rk4_step
    return jax.vmap(lambda m: one(*rebuild(m)), axis_size=axis_size)(mapped)


#: The step alone (the primal of :func:`_held_rk4_step`, whose rule gives every derivative).
_rk4_step_primal = batched_evaluation(_plain_rk4_step, functools.partial(_batched_rk4_step, with_stages=False))
#: The step and its stages, for the derivative rule.
_rk4_rule_step = batched_route(_rk4_step_and_stages, functools.partial(_batched_rk4_step, with_stages=True))


@jax.custom_jvp
def _held_rk4_step(model: Model, state: State, dt: Array, controls: Controls) -> State:
    """One RK4 step with held ``controls`` (no environment loads, no mimic joints). Under
    ``vmap`` on the CPU a batch steps in the compiled kernel (:func:`sdjax.batch_kernel.rk4_step`:
    one crossing from XLA per step instead of four), and its reverse mode too
    (:func:`sdjax.batch_kernel.rk4_step_vjp`: the four stages transposed in one call). The
    derivative rule is the step's tangent at its stored stages (:func:`_rk4_step_tangent`, one
    linear primitive, :func:`sdjax._derivatives.linearized_tangent`): reverse mode keeps the
    step's arguments and stages only."""
    return _rk4_step_primal(model, state, dt, controls)


def _held_rk4_step_jvp(primals: tuple, tangents: tuple) -> tuple[State, State]:
    new, stages, factors = _rk4_rule_step(*primals)
    # The stages and their factors are the rule's constants (no tangent of their own).
    tangent = linearized_tangent(
        _rk4_step_tangent, _batched_rk4_step_vjp, primals, tangents, new, constants=(stages, factors)
    )
    return new, tangent


_held_rk4_step.defjvp(_held_rk4_step_jvp, symbolic_zeros=True)


def _rk4_step_tangent(primals: tuple, tangents: tuple) -> State:
    """The tangent of an RK4 step at its stages: ``primals = (model, state, dt, controls,
    stages, factors)`` (:func:`_rk4_step_and_stages`), the stages and factors without tangents.
    Stage ``k``'s state ``y + c_k dt k_(k-1)`` moves with ``dy + c_k (dt dk_(k-1) + d(dt)
    k_(k-1))``, its rate by the forward dynamics' implicit-function rule at the stage's
    accelerations (:func:`sdjax.dynamics.forward_dynamics_tangent`); the step's result
    ``y + dt sum_k b_k k_k`` and its normalised quaternion follow."""
    model, state, dt, controls, stages, factors = primals
    d_model, d_state, d_dt, d_controls = tangents[:4]
    d_state = _instantiated(d_state, state)
    d_dt = _instantiated(d_dt, dt)
    unpacked = jax.vmap(lambda packed: _unpacked_stage(state, packed))(stages)
    rates = jax.vmap(_rate)(*unpacked)
    previous_rates = jax.tree.map(lambda r: jnp.concatenate([jnp.zeros_like(r[:1]), r[:-1]]), rates)
    dtype = stages.dtype
    tableau = (jnp.asarray(_RK4_OFFSETS, dtype), jnp.asarray(_RK4_WEIGHTS, dtype))
    no_tangent = [SymbolicZero(jax.typeof(x).to_tangent_aval()) for x in (unpacked[1][0], factors[0])]
    # The factors read outside the scan: inside, its partial evaluation (in reverse mode of this
    # map: second derivatives) would drop rule_factor's derivative rule.
    factors = jnp.stack(
        [rule_factor(model, jax.tree.map(lambda x, k=k: x[k], unpacked[0]), factors[k]) for k in range(4)]
    )

    def stage(carry: tuple[State, State], xs: Any) -> tuple[tuple[State, State], None]:
        total, d_previous = carry
        (offset, weight), (stage_state, acceleration), previous, factor = xs
        d_stage = jax.tree.map(lambda y, dk, k: y + offset * (dt * dk + d_dt * k), d_state, d_previous, previous)
        d_acceleration = forward_dynamics_tangent(
            (model, stage_state, controls, acceleration, factor),
            (d_model, d_stage, d_controls, *no_tangent),
            factor_read=True,
        )
        _, d_quaternion_rate = jax.jvp(
            quat_rate,
            (stage_state.base_quaternion, stage_state.base_angular_velocity),
            (d_stage.base_quaternion, d_stage.base_angular_velocity),
        )
        d_rate = _rate(d_stage, d_acceleration)
        d_rate = eqx.tree_at(lambda s: s.base_quaternion, d_rate, d_quaternion_rate)
        return (jax.tree.map(lambda t, dk: t + weight * dk, total, d_rate), d_rate), None

    zero = jax.tree.map(jnp.zeros_like, d_state)
    (d_total, _), _ = lax.scan(stage, (zero, zero), (tableau, unpacked, previous_rates, factors))
    total = jax.tree.map(lambda r: sum(weight * r[k] for k, weight in enumerate(_RK4_WEIGHTS)), rates)
    d_new = jax.tree.map(lambda dy, t, dt_total: dy + d_dt * t + dt * dt_total, d_state, total, d_total)
    new_quaternion = state.base_quaternion + dt * total.base_quaternion
    _, d_quaternion = jax.jvp(quat_normalize, (new_quaternion,), (d_new.base_quaternion,))
    return eqx.tree_at(lambda s: s.base_quaternion, d_new, d_quaternion)


def _instantiated(tangent: Any, like: Any) -> Any:
    """``tangent`` with zeros in place of its symbolic zeros (a pytree like ``like``)."""
    return jax.tree.map(
        lambda t, x: jnp.zeros_like(x) if isinstance(t, SymbolicZero) else t,
        tangent,
        like,
        is_leaf=lambda t: isinstance(t, SymbolicZero),
    )


def _batched_rk4_step_vjp(axis_size: int, args: tuple[Any, ...], in_batched: Any, cotangent: State) -> Any:
    """Reverse mode of a batch of :func:`_rk4_step_tangent`: the compiled kernel where it
    serves (:func:`sdjax.dynamics.kernel_serves`), otherwise None (the map's transpose,
    vectorised)."""
    mapped = [x for x, b in zip(jax.tree.leaves(args), jax.tree.leaves(in_batched)) if b]
    if not kernel_serves(args[0], mapped, axis_size):
        return None
    model, state, dt, controls, stages, _ = args  # (the factors, zeros here, unread)
    return batch_kernel.rk4_step_vjp(axis_size, model, state, dt, controls, stages, cotangent, in_batched[:5])


@eqx.filter_jit
def euler_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    semi_implicit: bool = False,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
) -> State:
    """One Euler step with the base attitude updated by Rodrigues' formula (eq 3.4).

    ``A0(t + dt) = exp(skew(w0 dt)) A0(t)`` (applied to the quaternion), positions and
    velocities by Euler's rule. With ``semi_implicit=False`` (default, SpaceDyn's
    ``int_eu2``) every update uses the values at ``t``; with ``semi_implicit=True`` velocities
    are updated first and positions and attitude use the new velocities (symplectic Euler,
    better energy behaviour).

    Arguments:
        model: the system.
        state: state at ``t``.
        dt: step, s.
        controls: applied forces, held over the step.
        semi_implicit: see above.
        environment: optional state-dependent loads ``(t, state) -> Controls``, evaluated at
            ``(t, state)`` and added to ``controls``.
        t: time at the start of the step, s (only seen by ``environment``).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state, "euler_step")
    semi_implicit = _check_flag("euler_step: semi_implicit", semi_implicit)
    controls = check_controls(model, controls, state.q.dtype, "euler_step", optional=True)
    dt = check_step("euler_step", dt, state.q.dtype)
    controls = _with_environment(model, controls, environment, jnp.asarray(t, state.q.dtype), state)
    acceleration = floating_acceleration(model, state, controls)
    v0 = state.base_linear_velocity + dt * acceleration[:3]
    w0 = state.base_angular_velocity + dt * acceleration[3:6]
    qd = state.qd + dt * acceleration[6:]
    move_v0, move_w0, move_qd = (
        (v0, w0, qd)
        if semi_implicit
        else (
            state.base_linear_velocity,
            state.base_angular_velocity,
            state.qd,
        )
    )
    quat = quat_multiply(rotation_vector_to_quat(move_w0 * dt), state.base_quaternion)
    return State(
        base_position=state.base_position + dt * move_v0,
        base_quaternion=quat_normalize(quat),
        base_linear_velocity=v0,
        base_angular_velocity=w0,
        q=state.q + dt * move_qd,
        qd=qd,
    )


def _displaced(model: Model, state: State, position_increment: Array, velocity: Array) -> State:
    """``state`` moved by a generalized position increment and given a generalized velocity,
    both ``(num_velocities,)`` in the base mode's free coordinates: ``r0 + dr0``, the base
    turned by the inertial rotation vector ``dphi`` (eq 3.4), ``q + dq``; ``[v0, w0, qd]``."""
    increment, velocity = floating_coordinates(model, position_increment), floating_coordinates(model, velocity)
    quat = quat_multiply(rotation_vector_to_quat(increment[3:6]), state.base_quaternion)
    return State(
        state.base_position + increment[:3], quat, velocity[:3], velocity[3:6], state.q + increment[6:], velocity[6:]
    )


def environment_load_derivatives(
    model: Model, state: State, environment: EnvironmentLoads, t: Any
) -> tuple[Array, Array, Array]:
    """Generalized force of the environment loads and its derivatives at ``(t, state)``.

    ``Q(x, v)`` is :func:`sdjax.dynamics.generalized_loads` of ``environment(t, state)``, in
    the base mode's free coordinates; derivatives by forward-mode differentiation along each
    generalized position increment (base translation, inertial rotation vector, joints) and
    velocity.

    Returns:
        ``(Q, dQ/dx, dQ/dv)``: ``(nv,)``, ``(nv, nv)``, ``(nv, nv)`` (``nv = num_velocities``);
        e.g. a contact's stiffness and damping as seen by the generalized coordinates, with
        the sign of a force (a restoring spring has a negative ``dQ/dx``).
    """
    dtype = state.q.dtype
    t = jnp.asarray(t, dtype)
    velocity = free_motion(model, state.generalized_velocity)

    def force(increment: Array, v: Array) -> Array:
        moved = _displaced(model, state, increment, v)
        return free_coordinates(
            model, generalized_loads(model, moved, as_controls(model, environment(t, moved), dtype))
        )

    zero = jnp.zeros_like(velocity)
    value = force(zero, velocity)
    by_position = jax.jacfwd(force, argnums=0)(zero, velocity)
    by_velocity = jax.jacfwd(force, argnums=1)(zero, velocity)
    return value, by_position, by_velocity


@eqx.filter_jit
def implicit_euler_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
    linearize_environment: bool = True,
) -> State:
    """One semi-implicit Euler step with the passive joint terms and the environment loads
    implicit (MuJoCo's implicit joint damping, extended to contact): stable for any joint
    stiffness and damping at any step, and for stiff contact and friction at steps far above
    what explicit schemes need.

    The passive torque ``-K q - D qd`` is taken at the end of the step, where the rest of the
    dynamics is taken at its start: with ``qd+ = qd + dt a`` and ``q+ = q + dt qd+``,
    ``H a = f - c - K (q + dt qd + dt^2 a) - D (qd + dt a)``, i.e.

        (H + dt D + dt^2 K) a = H a_explicit - dt K qd

    (``a_explicit`` from :func:`sdjax.forward_dynamics`; ``K``, ``D`` on the joint rows).
    Environment loads (contact, friction, virtual springs) are linearised the same way: with
    their generalized force ``Q(x, v)`` and its derivatives ``Q_x``, ``Q_v``
    (:func:`environment_load_derivatives`),

        (H + dt D + dt^2 K - dt Q_v - dt^2 Q_x) a = H a_explicit - dt K qd + dt Q_x v

    (a linearly implicit, Rosenbrock-type Euler step; ``Q_x`` is not symmetric in general, so
    this system is solved by LU). For linear passive or environment terms this is backward
    Euler on them (L-stable: a stiff mode is damped out, never amplified); the rest is
    symplectic Euler. First order: use it where explicit RK4 would need steps far below the
    motion's own time scale (light links with URDF damping, stiff visco-elastic joints, stiff
    contact); :func:`max_stable_step` and :func:`sdjax.contact.stable_time_step` tell.
    Positions and attitude move with the new velocities (the attitude by Rodrigues' formula,
    eq 3.4).

    Arguments:
        model, state, dt, controls, environment, t: as :func:`euler_step` (``environment``
            evaluated at ``(t, state)``).
        linearize_environment: treat the environment loads implicitly as above (default;
            costs ``2 nv`` forward-mode evaluations of the loads per step); ``False`` holds
            them at their start-of-step value (explicit).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state, "implicit_euler_step")
    linearize_environment = _check_flag("implicit_euler_step: linearize_environment", linearize_environment)
    dtype = state.q.dtype
    controls = check_controls(model, controls, dtype, "implicit_euler_step", optional=True)
    dt = check_step("implicit_euler_step", dt, dtype)
    controls = _with_environment(model, controls, environment, jnp.asarray(t, dtype), state)
    # One composite-body pass: H = L L^T from the factor the forward dynamics already made.
    acceleration, factor = forward_dynamics_and_factor(model, state, controls)
    explicit = free_motion(model, acceleration)
    h = matmul(factor, factor.T)
    nb = model.num_base_velocities
    if model.has_mimic:  # S^T K S and S^T D S on the joint coordinates (S: joint_coordinate_map)
        s = joint_coordinate_map(model).astype(dtype)
        stiffness = matmul(s.T, model.joint_stiffness.astype(dtype)[:, None] * s)
        damping = matmul(s.T, model.joint_damping.astype(dtype)[:, None] * s)
        lhs = h.at[nb:, nb:].add(dt * damping + dt * dt * stiffness)
        joint_rates = free_motion(model, state.generalized_velocity)[nb:]
        rhs = matmul(h, explicit).at[nb:].add(matmul(-dt * stiffness, joint_rates))
    else:
        joints = jnp.arange(nb, model.num_velocities)
        lhs = h.at[joints, joints].add(
            dt * model.joint_damping.astype(dtype) + dt * dt * model.joint_stiffness.astype(dtype)
        )
        rhs = matmul(h, explicit).at[nb:].add(-dt * model.joint_stiffness.astype(dtype) * state.qd)
    if environment is not None and linearize_environment:
        _, by_position, by_velocity = environment_load_derivatives(model, state, environment, t)
        lhs = lhs - dt * by_velocity - dt * dt * by_position
        rhs = rhs + matmul(dt * by_position, free_motion(model, state.generalized_velocity))
        solved = jnp.linalg.solve(lhs, rhs)
    else:
        solved = jsl.cho_solve(jsl.cho_factor(lhs, lower=True), rhs)
    acceleration = floating_coordinates(model, solved)
    v0 = state.base_linear_velocity + dt * acceleration[:3]
    w0 = state.base_angular_velocity + dt * acceleration[3:6]
    qd = state.qd + dt * acceleration[6:]
    quat = quat_multiply(rotation_vector_to_quat(w0 * dt), state.base_quaternion)
    return State(state.base_position + dt * v0, quat_normalize(quat), v0, w0, state.q + dt * qd, qd)


#: Newton iterations of :func:`newmark_step` (each squares the error of the accelerations).
NEWMARK_ITERATIONS = 3


def _newmark_state(state: State, dt: Array, a0: Array, a1: Array, beta: float, gamma: float) -> State:
    """The state at ``t + dt`` for start accelerations ``a0`` and end accelerations ``a1``
    (floating order ``(6 + n,)``): ``x+ = x + dt v + dt^2 ((1/2 - beta) a0 + beta a1)``,
    ``v+ = v + dt ((1 - gamma) a0 + gamma a1)``; the base attitude turns by that increment taken
    as an inertial rotation vector (Rodrigues, eq 3.4)."""
    v = state.generalized_velocity
    increment = dt * v + dt * dt * ((0.5 - beta) * a0 + beta * a1)
    velocity = v + dt * ((1.0 - gamma) * a0 + gamma * a1)
    quat = quat_normalize(quat_multiply(rotation_vector_to_quat(increment[3:6]), state.base_quaternion))
    return State(
        state.base_position + increment[:3], quat, velocity[:3], velocity[3:6], state.q + increment[6:], velocity[6:]
    )


def _newmark_parameters(what: str, beta: Any, gamma: Any) -> tuple[Any, Any]:
    """Newmark's ``(beta, gamma)`` as floats, checked: numbers (``TypeError``), ``0 <= beta <=
    1/2`` and ``0 <= gamma <= 1`` (``ValueError``); traced values (a NumPy scalar given to the
    jitted step, a derivative with respect to them) pass as they are."""
    if is_traced(beta, gamma):  # (arguments of the jitted step: NumPy scalars too; the constructor checked them)
        return beta, gamma
    beta, gamma = check_scalar(f"{what}: beta", beta), check_scalar(f"{what}: gamma", gamma)
    if not (0.0 <= beta <= 0.5 and 0.0 <= gamma <= 1.0):
        raise ValueError(f"{what}: need 0 <= beta <= 1/2 and 0 <= gamma <= 1, got beta={beta}, gamma={gamma}")
    return beta, gamma


@eqx.filter_jit
def newmark_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
    beta: float = 0.25,
    gamma: float = 0.5,
) -> State:
    """One implicit Newmark-beta step (SpaceDyn C++ ``f_dyn_nb``'s scheme; default the
    average-acceleration rule ``beta = 1/4``, ``gamma = 1/2``: second order, unconditionally
    stable on linear systems and conserving their energy).

    The end accelerations ``a1`` solve ``a1 = forward_dynamics(x+(a1), v+(a1))`` (positions
    and velocities from :func:`_newmark_state`) by :data:`NEWMARK_ITERATIONS` Newton steps with
    the Jacobian from forward-mode differentiation, started from the accelerations at ``t``.
    Costlier per step than RK4 (the Jacobian takes ``nv`` tangent evaluations of the dynamics);
    use it for stiff passive joints at steps where RK4 is unstable, or to match SpaceDyn's
    results.

    Arguments:
        model, state, dt, controls, t: as :func:`rk4_step`; the controls are held over the
            step.
        environment: optional loads ``(t, state) -> Controls``, evaluated at ``(t + dt, x+)``
            inside the implicit equations.
        beta, gamma: Newmark's parameters (static).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state, "newmark_step")
    beta, gamma = _newmark_parameters("newmark_step", beta, gamma)
    dtype = state.q.dtype
    controls = check_controls(model, controls, dtype, "newmark_step", optional=True)
    dt = check_step("newmark_step", dt, dtype)
    t = jnp.asarray(t, dtype)
    a0 = floating_acceleration(model, state, _with_environment(model, controls, environment, t, state))

    def residual(a1_free: Array) -> Array:
        a1 = floating_coordinates(model, a1_free)
        end = _newmark_state(state, dt, a0, a1, beta, gamma)
        return a1_free - free_motion(
            model, floating_acceleration(model, end, _with_environment(model, controls, environment, t + dt, end))
        )

    def newton(a1_free: Array, _: Any) -> tuple[Array, None]:
        value, jacobian = residual(a1_free), jax.jacfwd(residual)(a1_free)
        return a1_free - jnp.linalg.solve(jacobian, value), None

    a1_free, _ = lax.scan(newton, free_motion(model, a0), None, length=NEWMARK_ITERATIONS)
    return _newmark_state(state, dt, a0, floating_coordinates(model, a1_free), beta, gamma)


@eqx.filter_jit
def simpson_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
) -> State:
    """One step of Kutta's third-order Runge-Kutta method, whose weights are Simpson's rule
    (``1/6, 4/6, 1/6`` at ``t``, ``t + dt/2``, ``t + dt``):

        k1 = f(t, y),  k2 = f(t + dt/2, y + dt/2 k1),  k3 = f(t + dt, y - dt k1 + 2 dt k2),
        y+ = y + dt/6 (k1 + 4 k2 + k3)

    (Hairer, Norsett and Wanner, *Solving Ordinary Differential Equations I*, 2nd ed., 1993,
    section II.1, Kutta's 1901 method). Three forward dynamics per step, third order; offered
    for parity with SpaceDyn's Simpson-rule integration. Stages use the un-normalised
    quaternion, the result is normalised (as :func:`rk4_step`).

    Arguments:
        model, state, dt, controls, environment, t: as :func:`rk4_step` (``environment``
            evaluated at each of the three stages).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state, "simpson_step")
    dtype = state.q.dtype
    controls = check_controls(model, controls, dtype, "simpson_step", optional=True)
    dt, t = check_step("simpson_step", dt, dtype), jnp.asarray(t, dtype)

    def rate(stage: State, time: Array) -> State:
        return state_derivative(model, stage, _with_environment(model, controls, environment, time, stage))

    k1 = rate(state, t)
    k2 = rate(_axpy(0.5 * dt, k1, state), t + 0.5 * dt)
    k3 = rate(_axpy(2.0 * dt, k2, _axpy(-dt, k1, state)), t + dt)
    new = jax.tree.map(lambda y, a, b, c: y + dt / 6.0 * (a + 4.0 * b + c), state, k1, k2, k3)
    return eqx.tree_at(lambda s: s.base_quaternion, new, quat_normalize(new.base_quaternion))


#: Most steps of one rollout: ``lax.scan`` counts its iterations in a 32-bit integer
#: (10**12 steps ended in an OverflowError inside JAX).
MAX_ROLLOUT_STEPS = 2**31 - 1

#: Solvers of :func:`adaptive_step` (embedded explicit Runge-Kutta pairs of diffrax).
ADAPTIVE_SOLVERS = ("tsit5", "dopri5", "dopri8")


def _diffrax() -> Any:
    try:
        import diffrax
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("the adaptive integrator needs diffrax: pip install 'sdjax[ode]'") from error
    return diffrax


@eqx.filter_jit
def adaptive_step(
    model: Model,
    state: State,
    dt: Any,
    controls: Controls | None = None,
    *,
    environment: EnvironmentLoads | None = None,
    t: Any = 0.0,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    solver: str = "tsit5",
    max_steps: int = 4096,
) -> State:
    """Integrate from ``t`` to ``t + dt`` with an adaptive, error-controlled embedded
    Runge-Kutta pair (diffrax, ``pip install 'sdjax[ode]'``): for long quiet coasts the
    output interval ``dt`` can be far longer than the internal steps, which grow where
    nothing happens and shrink at impacts.

    The whole state ``(r0, quat, v0, w0, q, qd)`` is one ODE (quaternion un-normalised inside
    the interval, normalised at its end), the controls are held over ``[t, t + dt]``, the
    environment loads are evaluated at every stage. Step sizes follow diffrax's PID
    controller on the mixed error ``atol + rtol |y|`` of every component (so ``atol`` is in
    the units of each: m, rad, m/s, rad/s). Differentiable (diffrax's checkpointed adjoint).
    More than ``max_steps`` internal steps in one interval raise an error at run time.

    Arguments:
        model, state, dt, controls, environment, t: as :func:`rk4_step`.
        rtol, atol: relative and absolute tolerances per step.
        solver: one of :data:`ADAPTIVE_SOLVERS` (``"tsit5"``: Tsitouras' 5(4) pair, the
            default; ``"dopri5"``, ``"dopri8"``: Dormand-Prince 5(4) and 8(5,3)).
        max_steps: cap on internal steps per interval (static).

    Returns:
        State at ``t + dt``.
    """
    check_choice("adaptive_step: solver", solver, ADAPTIVE_SOLVERS, "solver")
    diffrax = _diffrax()
    check_state(model, state, "adaptive_step")
    dtype = state.q.dtype
    controls = check_controls(model, controls, dtype, "adaptive_step", optional=True)
    dt, t = check_step("adaptive_step", dt, dtype), jnp.asarray(t, dtype)

    def vector_field(time: Array, y: State, _: Any) -> State:
        return state_derivative(model, y, _with_environment(model, controls, environment, time, y))

    method = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "dopri8": diffrax.Dopri8}[solver]()
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(vector_field),
        method,
        t0=t,
        t1=t + dt,
        dt0=None,
        y0=state,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        saveat=diffrax.SaveAt(t1=True),
    )
    new = jax.tree.map(lambda x: x[-1], solution.ys)
    return eqx.tree_at(lambda s: s.base_quaternion, new, quat_normalize(new.base_quaternion))


# ------------------------------------------------------------------------------------------
# Integrators as objects.


class Integrator(eqx.Module):
    """A one-step integration scheme: what :func:`rollout`, :func:`sdjax.simulate` and the
    CLI step with. Subclasses hold the scheme's options and implement :meth:`step`; give an
    instance (``rollout(..., integrator=sdjax.Newmark(beta=0.3))``) or its name
    (:data:`INTEGRATORS`). Write a new scheme by subclassing and implementing ``step``."""

    #: Order of accuracy of the scheme (global error ``O(dt^order)``), for error estimates.
    order: ClassVar[int] = 0

    @abc.abstractmethod
    def step(
        self,
        model: Model,
        state: State,
        dt: Any,
        controls: Controls | None = None,
        *,
        environment: EnvironmentLoads | None = None,
        t: Any = 0.0,
    ) -> State:
        """The state at ``t + dt`` from ``state`` at ``t``, ``controls`` held over the step,
        ``environment`` loads ``(t, state) -> Controls`` evaluated where the scheme needs them."""


class RK4(Integrator):
    """Classical fourth-order Runge-Kutta (:func:`rk4_step`); open-loop batches of it run in
    the compiled kernel on the CPU (:func:`rollout`)."""

    order: ClassVar[int] = 4

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return rk4_step(model, state, dt, controls, environment=environment, t=t)


class Euler(Integrator):
    """Euler with the attitude by Rodrigues' formula (:func:`euler_step`; SpaceDyn
    ``int_eu2``); ``semi_implicit=True``: symplectic Euler."""

    semi_implicit: bool = eqx.field(default=False, static=True)
    order: ClassVar[int] = 1

    def __check_init__(self):
        _check_flag("Euler: semi_implicit", self.semi_implicit)

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return euler_step(model, state, dt, controls, semi_implicit=self.semi_implicit, environment=environment, t=t)


class ImplicitEuler(Integrator):
    """Semi-implicit Euler with passive joint terms and (by default) environment loads
    implicit (:func:`implicit_euler_step`): stiff joints, contact and friction at large steps."""

    linearize_environment: bool = eqx.field(default=True, static=True)
    order: ClassVar[int] = 1

    def __check_init__(self):
        _check_flag("ImplicitEuler: linearize_environment", self.linearize_environment)

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return implicit_euler_step(
            model, state, dt, controls, environment=environment, t=t, linearize_environment=self.linearize_environment
        )


class Newmark(Integrator):
    """Implicit Newmark-beta (:func:`newmark_step`; SpaceDyn C++ ``f_dyn_nb``); default the
    average-acceleration rule.

    Attributes:
        beta, gamma: the Newmark parameters, ``0 <= beta <= 1/2`` and ``0 <= gamma <= 1``
            (``1/4, 1/2``: unconditionally stable, second order, no numerical damping).
    """

    beta: float = eqx.field(default=0.25, static=True)
    gamma: float = eqx.field(default=0.5, static=True)
    order: ClassVar[int] = 2

    def __check_init__(self):
        _newmark_parameters("Newmark", self.beta, self.gamma)

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return newmark_step(model, state, dt, controls, environment=environment, t=t, beta=self.beta, gamma=self.gamma)


class Simpson(Integrator):
    """Kutta's third-order method with Simpson's-rule weights (:func:`simpson_step`)."""

    order: ClassVar[int] = 3

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return simpson_step(model, state, dt, controls, environment=environment, t=t)


class Adaptive(Integrator):
    """Adaptive error-controlled integration over each output step (:func:`adaptive_step`,
    diffrax: ``pip install 'sdjax[ode]'``).

    Attributes:
        rtol, atol: relative and absolute error tolerances of each internal step (positive).
        solver: the embedded Runge-Kutta pair, one of :data:`ADAPTIVE_SOLVERS`.
        max_steps: most internal steps per output step.
    """

    rtol: float = eqx.field(default=1e-8, static=True)
    atol: float = eqx.field(default=1e-10, static=True)
    solver: str = eqx.field(default="tsit5", static=True)
    max_steps: int = eqx.field(default=4096, static=True)
    order: ClassVar[int] = 5

    def __check_init__(self):
        check_choice("Adaptive: solver", self.solver, ADAPTIVE_SOLVERS, "solver")
        check_scalar("Adaptive: rtol", self.rtol, finite=False)
        check_scalar("Adaptive: atol", self.atol, finite=False)
        if not (self.rtol > 0 and self.atol > 0 and math.isfinite(self.rtol) and math.isfinite(self.atol)):
            raise ValueError(
                f"Adaptive: rtol and atol must be positive and finite, got rtol={self.rtol}, atol={self.atol}"
            )
        check_count("Adaptive: max_steps", self.max_steps, 1)

    def step(self, model, state, dt, controls=None, *, environment=None, t=0.0):
        return adaptive_step(
            model,
            state,
            dt,
            controls,
            environment=environment,
            t=t,
            rtol=self.rtol,
            atol=self.atol,
            solver=self.solver,
            max_steps=self.max_steps,
        )


#: The integrators by name (``rollout(..., integrator="implicit")``).
INTEGRATORS: dict[str, Integrator] = {
    "rk4": RK4(),
    "euler": Euler(),
    "implicit": ImplicitEuler(),
    "newmark": Newmark(),
    "simpson": Simpson(),
    "adaptive": Adaptive(),
}


def as_integrator(integrator: str | Integrator, what: str = "integrator") -> Integrator:
    """An :class:`Integrator` from an instance or a name of :data:`INTEGRATORS`."""
    if isinstance(integrator, Integrator):
        return integrator
    if not isinstance(integrator, str):
        raise TypeError(
            f"{what}: expected an sdjax.Integrator or one of {sorted(INTEGRATORS)}, got {type(integrator).__name__} "
            f"{integrator!r}"
        )
    if integrator in INTEGRATORS:
        return INTEGRATORS[integrator]
    raise ValueError(
        f"{what}: unknown integrator {integrator!r}; give an sdjax.Integrator or one of {sorted(INTEGRATORS)}"
    )


def _rk4_step_limit(mu: complex) -> float:
    """Largest ``h`` with ``|R(h mu)| <= 1``, ``R(z) = 1 + z + z^2/2 + z^3/6 + z^4/24`` (RK4's
    stability function), by bisection: ``|R(z)| > 1`` for every ``|z| >= 4`` off the origin."""
    low, high = 0.0, 4.0 / abs(mu)
    for _ in range(60):  # to ~1e-18 relative
        mid = 0.5 * (low + high)
        z = mid * mu
        low, high = (mid, high) if abs(1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24) <= 1.0 + 1e-12 else (low, mid)
    return low


#: Largest stable step of each integrator on ``y' = mu y`` (``Re mu <= 0``); explicit Euler's
#: ``|1 + h mu| <= 1`` gives ``h <= -2 Re(mu) / |mu|^2`` (none on the imaginary axis).
_STEP_LIMITS = {
    "rk4": _rk4_step_limit,
    "euler": lambda mu: max(0.0, -2.0 * mu.real / abs(mu) ** 2),
    "implicit": lambda mu: math.inf,  # backward Euler on the passive terms: |R| <= 1 for Re mu <= 0
    "newmark": lambda mu: math.inf,  # average acceleration (trapezoidal rule): A-stable
}


def max_stable_step(model: Model, state: State | None = None, integrator: str = "rk4") -> float:
    """Largest fixed step (s) at which ``integrator`` keeps the passive joint terms stable.

    Linearises the passive dynamics about ``state`` (default: rest at ``q = 0``) with the
    inertia matrix frozen: ``d/dt [q; nu] = [qd; -H^-1 (K q + D nu)]`` (``K``, ``D`` the joint
    stiffness and damping on the joint coordinates), and returns the largest ``h`` for which
    every eigenvalue ``mu`` of that system has ``|R(h mu)| <= 1`` (``R`` the integrator's
    stability function; RK4 reaches ``h |mu| = 2.79`` on the real axis, 2.83 on the imaginary
    one). ``inf`` without passive terms; ``0`` where no step is stable (explicit Euler on an
    undamped spring). Steps above it make a rollout grow without bound (light links with URDF
    damping need well below 1 ms). Concrete (not traced) model and state only.
    """
    check_choice("max_stable_step", integrator, sorted(_STEP_LIMITS), "integrator")
    stiffness = np.asarray(model.joint_stiffness, np.float64)
    damping = np.asarray(model.joint_damping, np.float64)
    if not (np.any(stiffness) or np.any(damping)):
        return math.inf
    state = make_state(model) if state is None else state
    h = np.asarray(inertia_matrix(model, state), np.float64)
    nv, nb = model.num_velocities, model.num_base_velocities
    s = np.asarray(joint_coordinate_map(model), np.float64)  # joint rates from the coordinates'
    k_full, d_full = np.zeros((nv, nv)), np.zeros((nv, nv))
    k_full[nb:, nb:], d_full[nb:, nb:] = s.T @ np.diag(stiffness) @ s, s.T @ np.diag(damping) @ s
    system = np.block([[np.zeros_like(h), np.eye(nv)], [-np.linalg.solve(h, k_full), -np.linalg.solve(h, d_full)]])
    rates = np.linalg.eigvals(system)
    rates = rates[np.abs(rates) > 1e-12 * np.max(np.abs(rates))]  # the rigid (zero) modes
    limit = math.inf
    for mu in rates:
        if abs(mu.real) <= 1e-9 * abs(mu):  # an undamped oscillation, up to eigenvalue round-off
            mu = complex(0.0, mu.imag)
        if mu.real > 0:
            continue  # a growing mode of the ODE itself (none for K, D >= 0): no step makes it decay
        limit = min(limit, _STEP_LIMITS[integrator](complex(mu)))
    return float(limit)


class Trajectory(eqx.Module):
    """Result of :func:`rollout`.

    Attributes:
        time: ``(N + 1,)`` times, s.
        states: :class:`State` whose leaves have a leading axis ``N + 1`` (initial state first).
        controls: :class:`Controls` applied over each step, leading axis ``N``.
    """

    time: Array
    states: State
    controls: Controls


def as_controls(model: Model, value: Any, dtype: Any) -> Controls:
    if isinstance(value, Controls):
        return make_controls(
            model, value.tau, value.base_force, value.base_torque, value.end_point_force, value.end_point_torque, dtype
        )
    return make_controls(model, tau=value, dtype=dtype)


def _torque_sequence(what: str, control: Any) -> Array:
    """``control`` as an array of numbers (a torque sequence): ``TypeError`` naming ``what``
    for anything else (a string, an object)."""
    try:
        sequence = jnp.asarray(control)
    except (TypeError, ValueError):
        sequence = None
    if sequence is None or not (
        jnp.issubdtype(sequence.dtype, jnp.number) or jnp.issubdtype(sequence.dtype, jnp.bool_)
    ):
        raise TypeError(
            f"{what}: control: expected None, a function (t, state) -> tau | Controls, an (N, n) torque sequence "
            f"or a sdjax.Controls sequence, got {type(control).__name__} {control!r}"
        )
    return sequence


def control_schedule(
    model: Model, control: Any, num_steps: Any, dt: Any, dtype: Any, what: str
) -> tuple[Any, Any, Array]:
    """Checked ``num_steps``, ``dt`` and control of a rollout: ``(law, sequence, dt)``, one of
    ``law`` (a function ``(t, state) -> tau | Controls``) and ``sequence`` (leading axis
    ``num_steps``) is ``None``. Shared by :func:`rollout` and the constrained rollout."""
    num_steps = check_count(f"{what}: num_steps", num_steps, 0)
    if num_steps > MAX_ROLLOUT_STEPS:
        raise ValueError(
            f"{what}: num_steps: {num_steps} exceeds the longest loop XLA runs ({MAX_ROLLOUT_STEPS} steps)"
        )
    n = model.num_joints
    if control is None or callable(control):
        law = control
        sequence = None
    else:
        law = None
        sequence = control if isinstance(control, Controls) else _torque_sequence(what, control)
        leading = jax.tree.leaves(sequence)[0].shape[:1] if jax.tree.leaves(sequence) else ()
        if leading != (num_steps,):
            raise ValueError(
                f"{what}: control sequence must have a leading axis of num_steps={num_steps}, "
                f"got shape {jax.tree.leaves(sequence)[0].shape if jax.tree.leaves(sequence) else None}"
            )
        if not isinstance(sequence, Controls) and sequence.shape != (num_steps, n):
            raise ValueError(f"{what}: torque sequence expected shape ({num_steps}, {n}), got {sequence.shape}")
    return law, sequence, check_step(what, dt, dtype, at_run_time=True)


def _checked_time(name: str, t: Any, dtype: Any) -> Array:
    """A time ``t`` (s) as a ``()`` array of ``dtype``: a concrete one a finite number
    (``TypeError`` for what is no number, ``ValueError`` for NaN or inf), a traced one a
    scalar (``ValueError``; its value cannot be checked)."""
    if is_traced(t):
        if jnp.shape(t) != ():
            raise ValueError(f"{name}: expected a scalar, got shape {jnp.shape(t)}")
        return jnp.asarray(t, dtype)
    return jnp.asarray(check_scalar(name, t), dtype)


def _checked_finite(states: State) -> State:
    return eqx.error_if(
        states,
        ~jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(states)])),
        "rollout: the state became non-finite",
    )


def _scan_steps(
    model: Model,
    initial_state: State,
    dt: Array,
    num_steps: int,
    law: Any,
    sequence: Any,
    step_fn: Callable[..., State],
    environment: EnvironmentLoads | None,
    t0: Array,
    checkpoint: bool,
    check: bool,
    what: str = "rollout",
) -> tuple[State, Controls]:
    """``num_steps`` steps of ``step_fn`` as one ``lax.scan``: the states after each step and
    the controls held over it (leading axis ``num_steps``). Controls from ``law(t, state)`` at
    the start of each step, or the rows of ``sequence``, or none (both ``None``)."""
    dtype = initial_state.q.dtype

    def step(carry, applied):
        state, k = carry
        t = t0 + k.astype(dtype) * dt
        if law is not None:
            applied = law(t, state)
            if applied is None:  # (a law that forgot its return: no silent zero torque)
                raise TypeError(
                    f"{what}: control: the control law returned None; expected an (n,) torque array or a sdjax.Controls"
                )
        controls = as_controls(model, applied, dtype)
        new = step_fn(model, state, dt, controls, environment=environment, t=t)
        if check:
            new = _checked_finite(new)
        return (new, k + 1), (new, controls)

    if checkpoint:
        step = jax.checkpoint(step)
    (_, _), (states, controls) = lax.scan(step, (initial_state, jnp.asarray(0, jnp.int32)), sequence, length=num_steps)
    return states, controls


@functools.cache
def _open_loop_rk4(checkpoint: bool) -> Callable[[Model, State, Array, Controls], State]:
    """``(model, initial_state, dt, controls) -> states``: open-loop RK4 steps (``controls``
    with a leading axis ``N`` held over each step; the ``N`` states after each step).

    One ``lax.scan`` of :func:`rk4_step`, except under ``vmap`` on the CPU with Numba
    installed, where batches of :data:`sdjax.batch_kernel.MIN_ROLLOUT_BATCH` samples and more
    run every step in the compiled kernel (:func:`sdjax.batch_kernel.rk4_rollout`: one crossing
    from XLA per rollout instead of four per step). The kernel sees primal values only:
    derivatives are those of the scan (:func:`sdjax._derivatives.batched_route`), so gradients,
    ``checkpoint`` and higher derivatives are unchanged."""

    def scan(model: Model, state: State, dt: Array, controls: Controls) -> State:
        return _scan_steps(
            model,
            state,
            dt,
            controls.tau.shape[0],
            None,
            controls,
            rk4_step,
            None,
            jnp.zeros((), dt.dtype),
            checkpoint,
            False,
        )[0]

    def batched(
        axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Callable[[list[Any]], Any]
    ) -> State:
        model, state, dt, controls = args
        if mapped and axis_size >= batch_kernel.MIN_ROLLOUT_BATCH and batch_kernel.available() and not model.has_mimic:
            return batch_kernel.unpacked_states(
                batch_kernel.rk4_rollout(axis_size, model, state, dt, controls, in_batched), state
            )
        return jax.vmap(lambda m: scan(*rebuild(m)), axis_size=axis_size)(mapped)

    return batched_route(scan, batched)


def rollout(
    model: Model,
    initial_state: State,
    dt: Any,
    num_steps: int,
    control: ControlLaw | Array | Controls | None = None,
    *,
    integrator: str | Integrator = "rk4",
    t0: Any = 0.0,
    checkpoint: bool = False,
    check: bool = False,
    environment: EnvironmentLoads | None = None,
) -> Trajectory:
    """Simulate ``num_steps`` fixed steps with ``lax.scan``.

    Arguments:
        model: the system.
        initial_state: state at ``t0``.
        dt: step, s.
        num_steps: number of steps ``N`` (static).
        control: one of
            - ``None``: no applied forces;
            - a function ``(t, state) -> tau`` (``(n,)`` array) or ``-> Controls``, evaluated at
              the start of every step and held over it;
            - an ``(N, n)`` torque sequence, or a :class:`Controls` whose leaves have a leading
              axis ``N``.
        integrator: an :class:`Integrator` (:class:`RK4`, :class:`Euler`,
            :class:`ImplicitEuler`: passive joint terms and environment loads implicit,
            :class:`Newmark`, :class:`Simpson`, :class:`Adaptive`) or its name in
            :data:`INTEGRATORS` (``"rk4"``, ``"euler"``, ``"implicit"``, ``"newmark"``,
            ``"simpson"``, ``"adaptive"``).
        t0: initial time, s.
        checkpoint: rematerialise each step in reverse-mode differentiation
            (``jax.checkpoint``): memory O(N) states instead of O(N) stage intermediates.
        check: fail (``equinox.error_if``) if a state becomes non-finite.
        environment: optional state-dependent loads ``(t, state) -> Controls`` (contact,
            gravity gradient, virtual springs), evaluated at every integrator stage and added
            to the held controls. They are not recorded in ``Trajectory.controls``.

    Returns:
        :class:`Trajectory` with ``N + 1`` states.
    """
    # The name resolved before the compiled program: "rk4" and RK4() are one program, compiled once.
    scheme = as_integrator(integrator, "rollout")
    checkpoint = _check_flag("rollout: checkpoint", checkpoint)
    check = _check_flag("rollout: check", check)
    # (a Python int before the jit: a NumPy integer would be traced there like an array)
    num_steps = check_count("rollout: num_steps", num_steps, 0)
    return _rollout(
        model,
        initial_state,
        dt,
        num_steps,
        control,
        scheme=scheme,
        t0=t0,
        checkpoint=checkpoint,
        check=check,
        environment=environment,
    )


@eqx.filter_jit
def _rollout(
    model: Model,
    initial_state: State,
    dt: Any,
    num_steps: int,
    control: ControlLaw | Array | Controls | None,
    *,
    scheme: Integrator,
    t0: Any,
    checkpoint: bool,
    check: bool,
    environment: EnvironmentLoads | None,
) -> Trajectory:
    """:func:`rollout` with its integrator resolved (one compiled program per scheme)."""
    check_state(model, initial_state, "rollout")
    initial_state = with_base_motion_checked(model, initial_state, "rollout: initial_state")
    dtype = initial_state.q.dtype
    law, sequence, dt_array = control_schedule(model, control, num_steps, dt, dtype, "rollout")
    t0 = _checked_time("rollout: t0", t0, dtype)
    if law is None and environment is None and isinstance(scheme, RK4) and num_steps > 0:
        # Open loop: batches of it run in the compiled kernel on the CPU (_open_loop_rk4).
        if sequence is None:
            controls = jax.tree.map(
                lambda x: jnp.broadcast_to(x, (num_steps,) + x.shape), make_controls(model, dtype=dtype)
            )
        else:
            controls = jax.vmap(lambda applied: as_controls(model, applied, dtype))(sequence)
        states = _open_loop_rk4(checkpoint)(model, initial_state, dt_array, controls)
        if check:
            states = _checked_finite(states)
    else:
        states, controls = _scan_steps(
            model, initial_state, dt_array, num_steps, law, sequence, scheme.step, environment, t0, checkpoint, check
        )
    history = jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), initial_state, states)
    time = t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt_array
    return Trajectory(time=time, states=history, controls=controls)
