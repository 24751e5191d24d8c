"""Time integration: classical RK4, the Rodrigues-update Euler step (eq 3.4), rollouts.

Applied forces are held constant over each step (zero-order hold, as a digital controller
and SpaceDyn's integrators do). The base attitude is integrated as a quaternion and
normalised after every step, so it stays on the unit sphere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array, lax

from sdjax.dynamics import Controls, generalized_acceleration, make_controls
from sdjax.model import Model
from sdjax.rotation import quat_multiply, quat_normalize, quat_rate, rotation_vector_to_quat
from sdjax.state import State, check_state

ControlLaw = Callable[[Array, State], Any]


def state_derivative(model: Model, state: State, controls: Controls) -> State:
    """Time derivative of the state (a :class:`State` of rates).

    ``d r0/dt = v0``, ``d quat/dt = 1/2 [w0, 0] * quat``, base and joint accelerations from
    :func:`sdjax.forward_dynamics`.
    """
    acceleration = generalized_acceleration(model, state, controls)
    return State(
        base_position=state.base_linear_velocity,
        base_quaternion=quat_rate(state.base_quaternion, state.base_angular_velocity),
        base_linear_velocity=acceleration[:3],
        base_angular_velocity=acceleration[3:6],
        q=state.qd,
        qd=acceleration[6:],
    )


def _axpy(scale: Array, rate: State, state: State) -> State:
    return jax.tree.map(lambda x, dx: x + scale * dx, state, rate)


#: Classical RK4 tableau: stage offsets c_k (times dt, applied to the previous stage's rate)
#: and weights b_k.
_RK4_OFFSETS = (0.0, 0.5, 0.5, 1.0)
_RK4_WEIGHTS = (1.0 / 6.0, 2.0 / 6.0, 2.0 / 6.0, 1.0 / 6.0)


def runge_kutta4(
    rate: Callable[[State], State],
    state: State,
    dt: Any,
    prepare_stage: Callable[[State, Array], State] | None = None,
) -> State:
    """One classical RK4 step ``y + dt sum_k b_k k_k`` with ``k_k = rate(y + c_k dt k_{k-1})``.

    The four stages run as one ``lax.scan``, so the rate function (forward dynamics) is
    compiled once, not four times.

    Arguments:
        rate: state -> time derivative (a :class:`State` of rates).
        state: state at ``t``.
        dt: step, s.
        prepare_stage: optional ``(stage_state, is_first) -> stage_state`` applied to each
            stage state before its rate is evaluated (e.g. quaternion normalisation).

    Returns:
        ``y + dt sum_k b_k k_k`` (not normalised).
    """
    dtype = state.q.dtype
    zero = jax.tree.map(jnp.zeros_like, state)

    def stage(carry, tableau):
        total, previous = carry
        offset, weight = tableau
        stage_state = _axpy(offset * dt, previous, state)
        if prepare_stage is not None:
            stage_state = prepare_stage(stage_state, offset == 0.0)
        k = rate(stage_state)
        return (_axpy(weight, k, total), k), None

    tableau = (jnp.asarray(_RK4_OFFSETS, dtype), jnp.asarray(_RK4_WEIGHTS, dtype))
    (total, _), _ = lax.scan(stage, (zero, zero), tableau)
    return _axpy(dt, total, state)


@eqx.filter_jit
def rk4_step(model: Model, state: State, dt: Any, controls: Controls | None = None) -> State:
    """One classical fourth-order Runge-Kutta step on ``(r0, quat, v0, w0, q, qd)``.

    Intermediate stages use the un-normalised quaternion (its rotation matrix is exact for
    any non-zero quaternion); the result is normalised.

    Arguments:
        model: the system.
        state: state at ``t``.
        dt: step, s.
        controls: applied forces, held over the step (default none).

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state)
    controls = make_controls(model, dtype=state.q.dtype) if controls is None else controls
    new = runge_kutta4(lambda s: state_derivative(model, s, controls), state, jnp.asarray(dt, state.q.dtype))
    return eqx.tree_at(lambda s: s.base_quaternion, new, quat_normalize(new.base_quaternion))


@eqx.filter_jit
def euler_step(
    model: Model, state: State, dt: Any, controls: Controls | None = None, *, semi_implicit: bool = False
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

    Returns:
        State at ``t + dt``.
    """
    check_state(model, state)
    controls = make_controls(model, dtype=state.q.dtype) if controls is None else controls
    acceleration = generalized_acceleration(model, state, controls)
    v0 = state.base_linear_velocity + dt * acceleration[:3]
    w0 = state.base_angular_velocity + dt * acceleration[3:6]
    qd = state.qd + dt * acceleration[6:]
    move_v0, move_w0, move_qd = (v0, w0, qd) if semi_implicit else (
        state.base_linear_velocity,
        state.base_angular_velocity,
        state.qd,
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


INTEGRATORS = {"rk4": rk4_step, "euler": euler_step}


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


def _as_controls(model: Model, value: Any, dtype: Any) -> Controls:
    if isinstance(value, Controls):
        return make_controls(
            model, value.tau, value.base_force, value.base_torque, value.end_point_force, value.end_point_torque, dtype
        )
    return make_controls(model, tau=value, dtype=dtype)


@eqx.filter_jit
def rollout(
    model: Model,
    initial_state: State,
    dt: Any,
    num_steps: int,
    control: ControlLaw | Array | Controls | None = None,
    *,
    integrator: str = "rk4",
    t0: Any = 0.0,
    checkpoint: bool = False,
    check: bool = False,
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
        integrator: ``"rk4"`` (:func:`rk4_step`) or ``"euler"`` (:func:`euler_step`).
        t0: initial time, s.
        checkpoint: rematerialise each step in reverse-mode differentiation
            (``jax.checkpoint``): memory O(N) states instead of O(N) stage intermediates.
        check: fail (``equinox.error_if``) if a state becomes non-finite.

    Returns:
        :class:`Trajectory` with ``N + 1`` states.
    """
    check_state(model, initial_state)
    if integrator not in INTEGRATORS:
        raise ValueError(f"rollout: unknown integrator {integrator!r}; choose one of {sorted(INTEGRATORS)}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 0:
        raise ValueError(f"rollout: num_steps must be a non-negative int, got {num_steps!r}")
    step_fn = INTEGRATORS[integrator]
    dtype = initial_state.q.dtype
    n = model.num_joints
    if control is None or callable(control):
        law = control
        sequence = None
    else:
        law = None
        sequence = control if isinstance(control, Controls) else jnp.asarray(control)
        leading = jax.tree.leaves(sequence)[0].shape[:1] if jax.tree.leaves(sequence) else ()
        if leading != (num_steps,):
            raise ValueError(
                f"rollout: control sequence must have a leading axis of num_steps={num_steps}, "
                f"got shape {jax.tree.leaves(sequence)[0].shape if jax.tree.leaves(sequence) else None}"
            )
        if not isinstance(sequence, Controls) and sequence.shape != (num_steps, n):
            raise ValueError(f"rollout: torque sequence expected shape ({num_steps}, {n}), got {sequence.shape}")

    t0 = jnp.asarray(t0, dtype)
    dt_array = jnp.asarray(dt, dtype)

    def step(carry, applied):
        state, k = carry
        t = t0 + k.astype(dtype) * dt_array
        if law is not None:
            applied = law(t, state)
        controls = _as_controls(model, applied, dtype)
        new = step_fn(model, state, dt, controls)
        if check:
            new = eqx.error_if(
                new,
                ~jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(new)])),
                "rollout: the state became non-finite",
            )
        return (new, k + 1), (new, controls)

    if checkpoint:
        step = jax.checkpoint(step)
    (_, _), (states, controls) = lax.scan(step, (initial_state, jnp.asarray(0, jnp.int32)), sequence, length=num_steps)
    history = jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), initial_state, states)
    time = t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt_array
    return Trajectory(time=time, states=history, controls=controls)
