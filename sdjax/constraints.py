"""Exact holonomic constraints: loop closures and welds between frames (of one system or of
several systems integrated together: a servicer and its target), frames held in the inertial
frame, and locked joints (SpaceDyn C++ ``calc_CLC``, ``f_dyn_CL``, ``i_dyn_CL``, ``ch_conf``).

A frame constraint is a position-level error ``phi(x)`` that the motion keeps at zero: the
pose of one frame (an end point) relative to another frame, or to the inertial frame. Its
velocity Jacobian ``J`` ``(m, nv)`` and the acceleration term ``dJ/dt v`` come from
forward-mode differentiation of ``phi`` along the motion, so they are exact for any
configuration, base mode and constraint. A locked joint is the velocity constraint
``qd_i = 0``. Forward dynamics with Lagrange multipliers ``lam`` ``(m,)``:

    H a = f - c + J^T lam
    J a = -dJ/dt v - 2 w J v - w^2 phi        (Baumgarte stabilisation, critically damped at w)

solved with the Cholesky factor of each tree's ``H`` (the unconstrained forward dynamics';
block diagonal over several systems) and the ``m x m`` Schur complement
``S = J H^-1 J^T``: ``lam = S^-1 (rhs - J a_free)``, ``a = a_free + H^-1 J^T lam``.
Constraints switch on and off at run time (``active``): an inactive constraint has
``lam = 0``; one that switches on takes the velocity jump ``v+ = v- - H^-1 J^T S^-1 J v-``
(a perfectly plastic impact: generalized momentum ``H v`` changes only along ``J^T``, so the
total momentum of free-floating systems is conserved when both constrained frames belong to
them).

Several systems: pass a tuple of models and a tuple of states (and tuples of torques or
controls); frames are named ``(system, end_point_name)``, a bare name meaning system 0.

Constraints are independent rows: a planar loop closed by a point constraint has a zero
out-of-plane row, so give ``axes`` to keep the in-plane rows (or ``regularization > 0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array, lax

from sdjax.algebra import matmul
from sdjax.dynamics import Controls, forward_dynamics_and_factor, inertia_matrix, inverse_dynamics, make_controls
from sdjax.integrate import as_controls, control_schedule, runge_kutta4
from sdjax.kinematics import forward_kinematics
from sdjax.model import Model, check_no_mimic, floating_coordinates, floating_loads, free_coordinates, free_motion
from sdjax.rotation import quat_multiply, quat_normalize, quat_rate, rotation_difference, rotation_vector_to_quat
from sdjax._checks import check_count, check_scalar, check_vector, float_array, is_traced, rotation_matrix
from sdjax.state import State, check_state, with_base_motion_checked

#: Row names of a frame constraint's error, in the frame of ``other``: position, then rotation.
FRAME_AXES = ("x", "y", "z", "rx", "ry", "rz")

#: A frame: an end-point name (system 0) or ``(system index, end-point name)``.
FrameRef = str | tuple[int, str]


class FrameConstraint(eqx.Module):
    """Hold frame ``frame`` at a pose relative to frame ``other`` (or to the inertial frame).

    Build with :func:`point_constraint` or :func:`weld_constraint`.

    Attributes:
        frame: ``(system, end-point name)`` of the constrained frame.
        other: ``(system, end-point name)`` of the frame it is held to, or ``None`` for the
            inertial frame.
        axes: rows of the 6-D error ``[position (3); rotation (3)]`` that are held, in
            ``other``'s frame (:data:`FRAME_AXES`).
        position: ``(3,)`` held position of ``frame``'s origin in ``other``'s frame, m.
        rotation: ``(3, 3)`` held rotation of ``frame`` relative to ``other``.
    """

    frame: tuple[int, str] = eqx.field(static=True)
    other: tuple[int, str] | None = eqx.field(static=True)
    axes: tuple[int, ...] = eqx.field(static=True)
    position: Array
    rotation: Array

    @property
    def num_rows(self) -> int:
        return len(self.axes)


class JointLock(eqx.Module):
    """Hold joint ``joint`` (1..n, SpaceDyn's numbering: joint ``i`` is ``q[i - 1]``, as in
    :func:`sdjax.lock_joints` and ``Model.mimic_leader``) of system ``system`` at rest:
    ``qd_i = 0`` (SpaceDyn C++ ``ch_conf``: a brake, a clamped joint)."""

    joint: int = eqx.field(static=True)
    system: int = eqx.field(static=True, default=0)

    def __check_init__(self) -> None:
        _joint_number("JointLock: joint", self.joint)
        _system_index("JointLock: system", self.system)

    @property
    def num_rows(self) -> int:
        return 1


def _joint_number(name: str, value: Any) -> int:
    """A joint number as a Python int, at least 1 (the model's ``n`` bounds it where the systems
    are known): ``TypeError`` for a float, a bool or text (``int()`` truncated 2.5 to 2)."""
    return check_count(name, value, 1)


def _system_index(name: str, value: Any) -> int:
    return check_count(name, value, 0)


class JointCoupling(eqx.Module):
    """Keep ``q[follower] = multiplier * q[leader] + offset`` in system ``system`` (URDF
    ``<mimic>``, gear and cable couplings). The coupling force carries the follower's torque to
    the leader: the leader's generalized force is ``tau_leader + multiplier * tau_follower``,
    as in Pinocchio's mimic joints.

    Attributes:
        follower, leader: joint numbers 1..n (static; joint ``i`` is ``q[i - 1]``, as in
            ``Model.mimic_leader``).
        multiplier: ``()`` ratio (dimensionless, or m/rad between a prismatic follower and a
            revolute leader).
        offset: ``()`` rad or m.
        system: index of the system (static, default 0).
    """

    follower: int = eqx.field(static=True)
    leader: int = eqx.field(static=True)
    multiplier: Array
    offset: Array
    system: int = eqx.field(static=True)

    def __init__(self, follower: int, leader: int, multiplier: Any = 1.0, offset: Any = 0.0, system: int = 0):
        self.follower = _joint_number("JointCoupling: follower", follower)
        self.leader = _joint_number("JointCoupling: leader", leader)
        self.system = _system_index("JointCoupling: system", system)
        self.multiplier = jnp.asarray(multiplier, jnp.result_type(float))
        self.offset = jnp.asarray(offset, jnp.result_type(float))
        if self.multiplier.shape != () or self.offset.shape != ():
            raise ValueError(
                f"JointCoupling: multiplier and offset must be scalars, got shapes {self.multiplier.shape} and {self.offset.shape}"
            )

    @property
    def num_rows(self) -> int:
        return 1


Constraint = FrameConstraint | JointLock | JointCoupling


def _frame_ref(frame: Any, what: str) -> tuple[int, str]:
    if isinstance(frame, str):
        return (0, frame)
    if (
        isinstance(frame, tuple)
        and len(frame) == 2
        and isinstance(frame[0], (int, np.integer))
        and not isinstance(frame[0], bool)
        and frame[0] >= 0
        and isinstance(frame[1], str)
    ):
        return (int(frame[0]), frame[1])
    raise ValueError(f"{what}: a frame is an end-point name or (system index, end-point name), got {frame!r}")


def _axes(axes: Any, allowed: int, what: str) -> tuple[int, ...]:
    names = FRAME_AXES[:allowed]
    out = []
    for a in axes:
        index = names.index(a) if isinstance(a, str) and a in names else a
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= int(index) < allowed:
            raise ValueError(f"{what}: axes must be indices 0..{allowed - 1} or names {list(names)}, got {a!r}")
        out.append(int(index))
    if not out or len(set(out)) != len(out):
        raise ValueError(f"{what}: axes must be a non-empty list without repeats, got {list(axes)}")
    return tuple(sorted(out))


def _position(what: str, position: Any) -> Array:
    """A constraint's ``(3,)`` target position (default zero), finite where concrete."""
    if position is None:
        return jnp.zeros(3, jnp.result_type(float))
    return float_array(f"{what}: position", position, shape=(3,), dtype=jnp.result_type(float))


def _non_negative(what: str, name: str, value: Any) -> Any:
    """``value`` (a gain or compliance), refused when concrete and negative or not finite: a
    negative Baumgarte frequency makes the drift correction unstable, a negative compliance the
    Schur complement indefinite (NaN accelerations)."""
    if value is not None and not is_traced(value):
        check_scalar(f"{what}: {name}", value, sign="non-negative")
    return value


def point_constraint(
    frame: FrameRef, other: FrameRef | None = None, *, position: Any = None, axes: Sequence[int | str] = (0, 1, 2)
) -> FrameConstraint:
    """Keep the origin of ``frame`` at ``position`` in ``other``'s frame (a spherical joint
    closing a loop, a foot on the ground).

    Arguments:
        frame: end-point name, or ``(system, name)`` when several systems are integrated.
        other: the same, or ``None`` (the inertial frame).
        position: ``(3,)`` m, default zero (the two origins coincide).
        axes: held components (``"x"``, ``"y"``, ``"z"`` or 0, 1, 2) in ``other``'s frame; a
            planar loop keeps its in-plane ones.
    """
    position = _position("point_constraint", position)
    frame, other = (
        _frame_ref(frame, "point_constraint"),
        None if other is None else _frame_ref(other, "point_constraint"),
    )
    return FrameConstraint(frame, other, _axes(axes, 3, "point_constraint"), position, jnp.eye(3, dtype=position.dtype))


def weld_constraint(
    frame: FrameRef,
    other: FrameRef | None = None,
    *,
    position: Any = None,
    rotation: Any = None,
    axes: Sequence[int | str] = tuple(range(6)),
) -> FrameConstraint:
    """Keep ``frame`` at the pose ``(position, rotation)`` relative to ``other`` (a rigid
    grasp, a weld); a subset of ``axes`` makes a prismatic, revolute or planar contact.

    Arguments:
        frame: end-point name, or ``(system, name)`` when several systems are integrated.
        other: the same, or ``None`` (the inertial frame).
        position: ``(3,)`` m, default zero; rotation: ``(3, 3)``, default identity.
        axes: held rows of ``[x, y, z, rx, ry, rz]`` (names or 0..5), in ``other``'s frame.
    """
    position = _position("weld_constraint", position)
    rotation = (
        jnp.eye(3, dtype=position.dtype)
        if rotation is None
        else rotation_matrix("weld_constraint: rotation", rotation, position.dtype)
    )
    frame, other = _frame_ref(frame, "weld_constraint"), None if other is None else _frame_ref(other, "weld_constraint")
    return FrameConstraint(frame, other, _axes(axes, 6, "weld_constraint"), position, rotation)


# ------------------------------------------------------------------------------------------
# One system or several: inputs as tuples.


class _Systems(eqx.Module):
    """The models (static topology) integrated together and whether the caller gave tuples."""

    models: tuple[Model, ...]
    multi: bool = eqx.field(static=True)

    @property
    def offsets(self) -> list[int]:
        """Start of each system's free velocities in the stacked vector; last entry the total."""
        out = [0]
        for m in self.models:
            out.append(out[-1] + m.num_velocities)
        return out

    def split(self, x: Array) -> list[Array]:
        """Per-system pieces of a stacked free-coordinate vector ``(..., NV)``."""
        o = self.offsets
        return [x[..., o[s] : o[s + 1]] for s in range(len(self.models))]

    def per_system(self, value: Any, what: str) -> tuple[Any, ...]:
        if not self.multi:
            return (value,)
        if value is None:
            return (None,) * len(self.models)
        if not isinstance(value, (tuple, list)) or len(value) != len(self.models):
            raise ValueError(f"{what}: with {len(self.models)} systems give a tuple of {len(self.models)} (or None)")
        return tuple(value)

    def pack(self, values: Sequence[Any]) -> Any:
        return tuple(values) if self.multi else values[0]


def _systems(
    model: Any, state: Any, constraints: Sequence[Constraint], what: str
) -> tuple[_Systems, tuple[State, ...], tuple[Constraint, ...]]:
    """Checked systems, states and constraints."""
    if isinstance(model, Model):
        if not isinstance(state, State):
            raise TypeError(f"{what}: one model takes one State, got {type(state).__name__}")
        systems, states = _Systems((model,), False), (state,)
    else:
        models, states = tuple(model), tuple(state) if isinstance(state, (tuple, list)) else (state,)
        if not models or not all(isinstance(m, Model) for m in models):
            raise TypeError(f"{what}: model must be a Model or a tuple of Models")
        if len(states) != len(models) or not all(isinstance(s, State) for s in states):
            raise ValueError(f"{what}: {len(models)} models need a tuple of {len(models)} States")
        systems = _Systems(models, True)
    for m, s in zip(systems.models, states):
        check_no_mimic(m, what)
        check_state(m, s)
    if isinstance(constraints, (FrameConstraint, JointLock, JointCoupling)):
        raise TypeError(
            f"{what}: constraints: expected a sequence of constraints, got one {type(constraints).__name__} (put it in a list)"
        )
    constraints = tuple(constraints)
    k = len(systems.models)
    for index, c in enumerate(constraints):
        if isinstance(c, FrameConstraint):
            for ref in (c.frame, c.other):
                if ref is None:
                    continue
                if ref[0] >= k:
                    raise ValueError(f"{what}: constraint {index} names system {ref[0]}; there are {k}")
                names = systems.models[ref[0]].end_point_names
                if ref[1] not in names:
                    raise ValueError(
                        f"{what}: constraint {index} names frame {ref[1]!r} of system {ref[0]}; its frames are {list(names)}"
                    )
            if c.frame == c.other:
                raise ValueError(f"{what}: constraint {index} holds frame {c.frame[1]!r} to itself")
        elif isinstance(c, (JointLock, JointCoupling)):
            if not 0 <= c.system < k:
                raise ValueError(f"{what}: constraint {index} acts on system {c.system}; there are {k}")
            joints = systems.models[c.system].num_joints
            named = (c.joint,) if isinstance(c, JointLock) else (c.follower, c.leader)
            if not all(1 <= j <= joints for j in named):
                raise ValueError(f"{what}: constraint {index} names joint(s) {list(named)}; joints are 1..{joints}")
            if isinstance(c, JointCoupling) and c.follower == c.leader:
                raise ValueError(f"{what}: constraint {index} couples joint {c.leader} to itself")
        else:
            raise TypeError(
                f"{what}: constraint {index} is a {type(c).__name__}; use point_constraint, weld_constraint, JointLock or JointCoupling"
            )
    return systems, states, constraints


def num_rows(constraints: Sequence[Constraint]) -> int:
    """Number of scalar constraint rows ``m``."""
    return sum(c.num_rows for c in constraints)


def _row_mask(constraints: Sequence[Constraint], active: Any, dtype: Any, what: str) -> Array:
    """``(m,)`` 1.0 for the rows of active constraints, from ``active`` ``(k,)`` (default all)."""
    if active is None:
        return jnp.ones(num_rows(constraints), dtype)
    active = jnp.asarray(active)
    if active.shape != (len(constraints),):
        raise ValueError(
            f"{what}: active must have one flag per constraint, shape ({len(constraints)},), got {active.shape}"
        )
    counts = np.array([c.num_rows for c in constraints], dtype=np.int64)
    return jnp.repeat(active.astype(dtype), counts, total_repeat_length=int(counts.sum()))


# ------------------------------------------------------------------------------------------
# Errors, Jacobian and acceleration terms.


def _kinematics(systems: _Systems, states: Sequence[State]) -> list[Any]:
    return [forward_kinematics(m, s) for m, s in zip(systems.models, states)]


def _pose(systems: _Systems, kins: Sequence[Any], ref: tuple[int, str] | None, dtype: Any) -> tuple[Array, Array]:
    """Position and rotation (inertial) of frame ``ref`` (the inertial frame for ``None``)."""
    if ref is None:
        return jnp.zeros(3, dtype), jnp.eye(3, dtype=dtype)
    i = systems.models[ref[0]].end_point_index(ref[1])
    return kins[ref[0]].end_point_position[i], kins[ref[0]].end_point_rotation[i]


def _errors(systems: _Systems, states: Sequence[State], constraints: Sequence[Constraint]) -> Array:
    kins = _kinematics(systems, states)
    dtype = states[0].q.dtype
    rows = []
    for c in constraints:
        if isinstance(c, JointLock):
            rows.append(jnp.zeros(1, dtype))
            continue
        if isinstance(c, JointCoupling):
            q = states[c.system].q
            follower, leader = q[c.follower - 1], q[c.leader - 1]  # joint i is q[i - 1]
            rows.append((follower - c.multiplier.astype(dtype) * leader - c.offset.astype(dtype))[None])
            continue
        position, rotation = _pose(systems, kins, c.frame, dtype)
        other_position, other_rotation = _pose(systems, kins, c.other, dtype)
        error_position = matmul(other_rotation.T, position - other_position) - c.position.astype(dtype)
        error_rotation = rotation_difference(c.rotation.astype(dtype), matmul(other_rotation.T, rotation))
        rows.append(jnp.concatenate([error_position, error_rotation])[jnp.asarray(c.axes)])
    return jnp.concatenate(rows) if rows else jnp.zeros(0, dtype)


@eqx.filter_jit
def position_errors(
    model: Model | Sequence[Model], state: State | Sequence[State], constraints: Sequence[Constraint]
) -> Array:
    """``(m,)`` constraint errors ``phi``: frame position errors (m) and small-rotation errors
    (:func:`sdjax.rotation.rotation_difference`, ``sin`` of the angle) in ``other``'s frame;
    coupling errors ``q_f - multiplier q_l - offset``; zero for joint locks (which hold
    velocities only)."""
    systems, states, constraints = _systems(model, state, constraints, "position_errors")
    return _errors(systems, states, constraints)


def _configuration_rate(state: State, velocity: Array) -> State:
    """Tangent of the configuration for the floating-order velocity ``[v0, w0, qd]`` ``(6 + n,)``
    (velocity fields zero)."""
    zero = jnp.zeros(3, velocity.dtype)
    return State(
        velocity[:3],
        quat_rate(state.base_quaternion, velocity[3:6]),
        zero,
        zero,
        velocity[6:],
        jnp.zeros_like(state.qd),
    )


class ConstraintTerms(eqx.Module):
    """Constraint quantities at one state (free coordinates of the base modes, systems stacked).

    Attributes:
        jacobian: ``(m, nv)`` ``J`` with ``d phi/dt = J v``.
        acceleration_bias: ``(m,)`` ``dJ/dt v``: ``d^2 phi/dt^2 = J a + dJ/dt v``.
        velocity_error: ``(m,)`` ``J v``.
        position_error: ``(m,)`` ``phi`` (zero for joint locks).
    """

    jacobian: Array
    acceleration_bias: Array
    velocity_error: Array
    position_error: Array


def _first_order_terms(
    systems: _Systems, states: tuple[State, ...], constraints: tuple[Constraint, ...]
) -> tuple[Array, Array, Array]:
    """``(J (m, nv), J v (m,), phi (m,))``: :func:`_terms` without ``dJ/dt v``, which impacts
    and projections do not need (its second-order pass through the kinematics is the larger
    part of the program: a constrained rollout's step held 22,100 operations with it in its
    projections and 13,300 without)."""
    dtype = states[0].q.dtype
    offsets = systems.offsets
    # The free directions of every system, stacked: (NV, 6 + n_s) per system.
    basis = tuple(
        jnp.zeros((offsets[-1], 6 + m.num_joints), dtype)
        .at[offsets[k] : offsets[k + 1]]
        .set(floating_coordinates(m, jnp.eye(m.num_velocities, dtype=dtype)))
        for k, m in enumerate(systems.models)
    )
    tangent = lambda vs: tuple(_configuration_rate(s, v) for s, v in zip(states, vs))  # noqa: E731
    phi, along = jax.linearize(lambda s: _errors(systems, s, constraints), states)
    jacobian = jax.vmap(lambda vs: along(tangent(vs)))(basis).T
    row = 0
    for c in constraints:  # joint locks: the row e_i of the joint's free coordinate
        if isinstance(c, JointLock):
            column = offsets[c.system] + systems.models[c.system].num_base_velocities + c.joint - 1
            jacobian = jacobian.at[row].set(jnp.zeros(offsets[-1], dtype).at[column].set(1.0))
        row += c.num_rows
    velocity = jnp.concatenate([free_motion(m, s.generalized_velocity) for m, s in zip(systems.models, states)])
    return jacobian, matmul(jacobian, velocity), phi


def _terms(systems: _Systems, states: tuple[State, ...], constraints: tuple[Constraint, ...]) -> ConstraintTerms:
    """:func:`_first_order_terms` and ``dJ/dt v``: forward mode of ``J v`` along the motion."""
    jacobian, velocity_error, phi = _first_order_terms(systems, states, constraints)
    dtype = states[0].q.dtype

    def rate(s: tuple[State, ...]) -> Array:
        velocities = tuple(_configuration_rate(x, x.generalized_velocity) for x in s)
        return jax.jvp(lambda s: _errors(systems, s, constraints), (s,), (velocities,))[1]

    motion = tuple(
        State(
            s.base_linear_velocity,
            quat_rate(s.base_quaternion, s.base_angular_velocity),
            jnp.zeros(3, dtype),
            jnp.zeros(3, dtype),
            s.qd,
            jnp.zeros_like(s.qd),
        )
        for s in states
    )
    bias = jax.jvp(rate, (states,), (motion,))[1]
    return ConstraintTerms(jacobian, bias, velocity_error, phi)


@eqx.filter_jit
def constraint_terms(
    model: Model | Sequence[Model], state: State | Sequence[State], constraints: Sequence[Constraint]
) -> ConstraintTerms:
    """Jacobian, ``dJ/dt v``, velocity and position errors of the constraints (forward-mode
    derivatives of :func:`position_errors` along the motion; exact)."""
    systems, states, constraints = _systems(model, state, constraints, "constraint_terms")
    return _terms(systems, states, constraints)


def _schur_solve(
    systems: _Systems, factors: Sequence[Array], jacobian: Array, mask: Array, regularization: Any, rhs: Array
) -> tuple[Array, Array]:
    """``(H^-1 J^T (nv, m), S^-1 rhs (m,))`` with ``S = J H^-1 J^T`` (``H`` block diagonal)
    restricted to the active rows (``mask``; inactive rows get zero)."""
    y = jnp.concatenate([jsl.cho_solve((f, True), j.T) for f, j in zip(factors, systems.split(jacobian))])
    m = jacobian.shape[0]
    s = (matmul(jacobian, y) + regularization * jnp.eye(m, dtype=y.dtype)) * (mask[:, None] * mask[None, :]) + jnp.diag(
        1.0 - mask
    )
    return y, jsl.cho_solve(jsl.cho_factor(s, lower=True), mask * rhs)


def _factors(systems: _Systems, states: Sequence[State]) -> list[Array]:
    return [jsl.cho_factor(inertia_matrix(m, s), lower=True)[0] for m, s in zip(systems.models, states)]


# ------------------------------------------------------------------------------------------
# Forward dynamics, impacts, projection.


class ConstrainedDynamics(eqx.Module):
    """Result of :func:`constrained_forward_dynamics` (tuples over systems when several).

    Attributes:
        base_acceleration: ``(6,)`` ``[dv0/dt, dw0/dt]``, inertial frame.
        qdd: ``(n,)`` joint accelerations.
        multipliers: ``(m,)`` ``lam``: for a frame constraint, the force (N) and torque (N m)
            ``other`` exerts on ``frame`` along the held axes, in ``other``'s frame; for a joint
            lock, the brake torque or force; for a coupling, the torque or force on the follower
            (``-multiplier`` times it on the leader). Zero for inactive constraints.
        generalized_force: ``(nv,)`` ``J^T lam`` (free coordinates, systems stacked).
    """

    base_acceleration: Any
    qdd: Any
    multipliers: Array
    generalized_force: Array


def _constrained_acceleration(
    systems: _Systems,
    states: tuple[State, ...],
    controls: Sequence[Controls],
    constraints: tuple[Constraint, ...],
    mask: Array,
    stabilization: Any,
    regularization: Any,
) -> tuple[list[Array], Array, Array]:
    """``([acceleration (6 + n_s,)], lam (m,), J^T lam (nv,))``."""
    solved = [forward_dynamics_and_factor(m, s, c) for m, s, c in zip(systems.models, states, controls)]
    dtype = states[0].q.dtype
    if not constraints:
        return [a for a, _ in solved], jnp.zeros(0, dtype), jnp.zeros(systems.offsets[-1], dtype)
    terms = _terms(systems, states, constraints)
    w = jnp.asarray(stabilization, dtype)
    target = -terms.acceleration_bias - 2.0 * w * terms.velocity_error - w * w * terms.position_error
    free = jnp.concatenate([free_motion(m, a) for m, (a, _) in zip(systems.models, solved)])
    y, lam = _schur_solve(
        systems, [f for _, f in solved], terms.jacobian, mask, regularization, target - matmul(terms.jacobian, free)
    )
    accelerations = [floating_coordinates(m, a) for m, a in zip(systems.models, systems.split(free + matmul(y, lam)))]
    return accelerations, lam, matmul(terms.jacobian.T, lam)


def _controls(systems: _Systems, dtype: Any, what: str, **loads: Any) -> list[Controls]:
    per = {name: systems.per_system(value, f"{what}: {name}") for name, value in loads.items()}
    return [
        make_controls(m, dtype=dtype, **{name: per[name][k] for name in loads}) for k, m in enumerate(systems.models)
    ]


@eqx.filter_jit
def constrained_forward_dynamics(
    model: Model | Sequence[Model],
    state: State | Sequence[State],
    tau: Any = None,
    constraints: Sequence[Constraint] = (),
    *,
    active: Any = None,
    base_force: Any = None,
    base_torque: Any = None,
    end_point_force: Any = None,
    end_point_torque: Any = None,
    stabilization: Any = 0.0,
    regularization: Any = 0.0,
    check: bool = False,
) -> ConstrainedDynamics:
    """Accelerations and constraint forces of a constrained system (SpaceDyn C++ ``f_dyn_CL``).

    Arguments:
        model, state, tau, base_force, base_torque, end_point_force, end_point_torque: as
            :func:`sdjax.forward_dynamics`; tuples of them for several systems.
        constraints: :func:`point_constraint`, :func:`weld_constraint`, :class:`JointLock`,
            :class:`JointCoupling`.
        active: ``(k,)`` bool, one per constraint (default all active); may be traced.
        stabilization: Baumgarte frequency ``w`` (rad/s), critically damped; 0 (default) keeps
            ``d^2 phi/dt^2 = 0`` exactly (drift then grows with the integration error).
        regularization: added to the diagonal of ``S`` (compliance, in the rows' units per
            N s^2); leave 0 for exact constraints with independent rows.
        check: fail (``equinox.error_if``, also under ``jit``) on a non-finite result: dependent
            constraint rows (a redundant constraint, or a singular configuration of the closed
            chain) make ``S`` singular.

    Returns:
        :class:`ConstrainedDynamics`.
    """
    systems, states, constraints = _systems(model, state, constraints, "constrained_forward_dynamics")
    _non_negative("constrained_forward_dynamics", "stabilization", stabilization)
    _non_negative("constrained_forward_dynamics", "regularization", regularization)
    dtype = states[0].q.dtype
    controls = _controls(
        systems, dtype, "constrained_forward_dynamics",
        tau=tau, base_force=base_force, base_torque=base_torque, end_point_force=end_point_force, end_point_torque=end_point_torque,
    )  # fmt: skip
    mask = _row_mask(constraints, active, dtype, "constrained_forward_dynamics")
    accelerations, lam, force = _constrained_acceleration(
        systems, states, controls, constraints, mask, stabilization, regularization
    )
    if check:
        lam = _checked_finite(lam, accelerations, "constrained_forward_dynamics")
    return ConstrainedDynamics(
        systems.pack([a[:6] for a in accelerations]), systems.pack([a[6:] for a in accelerations]), lam, force
    )


def _checked_finite(lam: Array, accelerations: Sequence[Array], what: str) -> Array:
    finite = jnp.all(jnp.isfinite(lam)) & jnp.all(jnp.asarray([jnp.all(jnp.isfinite(a)) for a in accelerations]))
    return eqx.error_if(
        lam,
        ~finite,
        f"{what}: non-finite constrained dynamics: the constraint rows are dependent (a redundant constraint, or a singular "
        "configuration of the closed chain; hold fewer axes or give regularization > 0), or the state is not finite",
    )


def _latched(
    systems: _Systems, states: Sequence[State], constraints: tuple[Constraint, ...], switched_on: Array
) -> tuple[Constraint, ...]:
    """Frame constraints that switch on now (``switched_on`` ``(k,)``) hold the relative pose
    they find (position in ``other``'s frame, rotation relative to it)."""
    kins, dtype = _kinematics(systems, states), states[0].q.dtype
    out = []
    for k, c in enumerate(constraints):
        if isinstance(c, FrameConstraint):
            (p, r), (po, ro) = _pose(systems, kins, c.frame, dtype), _pose(systems, kins, c.other, dtype)
            position, rotation = matmul(ro.T, p - po), matmul(ro.T, r)
            c = FrameConstraint(
                c.frame, c.other, c.axes, jnp.where(switched_on[k], position, c.position.astype(position.dtype)),
                jnp.where(switched_on[k], rotation, c.rotation.astype(rotation.dtype)),
            )  # fmt: skip
        out.append(c)
    return tuple(out)


@eqx.filter_jit
def constraint_loads(
    model: Model | Sequence[Model], state: State | Sequence[State], constraints: Sequence[Constraint], multipliers: Any
) -> Any:
    """The frame constraints' multipliers as end-point loads ``(end_point_force (ne, 3),
    end_point_torque (ne, 3))`` on the robot (inertial frame; a tuple of them per system), for
    :func:`sdjax.joint_reaction_loads` and :func:`sdjax.forward_dynamics`: ``frame`` receives
    the force ``F`` and torque ``T`` that ``other`` exerts (``R_other [lam]``), ``other`` the
    opposite force and ``-T - (p_frame - p_other) x F`` (the same loads moved to its origin).
    Joint locks and couplings act inside the joints and give no end-point loads (their torques
    appear in the joints' axial loads). On the constraint manifold (zero errors, as after
    :func:`project_to_constraints`) applying these loads with the same joint torques reproduces
    the constrained motion exactly."""
    systems, states, constraints = _systems(model, state, constraints, "constraint_loads")
    dtype = states[0].q.dtype
    lam = check_vector("multipliers", multipliers, (num_rows(constraints),), dtype)
    kins = _kinematics(systems, states)
    force = [jnp.zeros((m.num_end_points, 3), dtype) for m in systems.models]
    torque = [jnp.zeros((m.num_end_points, 3), dtype) for m in systems.models]
    row = 0
    for c in constraints:
        if isinstance(c, FrameConstraint):
            wrench = jnp.zeros(6, dtype).at[jnp.asarray(c.axes)].set(lam[row : row + c.num_rows])
            (position, _), (other_position, rotation) = (
                _pose(systems, kins, c.frame, dtype),
                _pose(systems, kins, c.other, dtype),
            )
            f, t = matmul(rotation, wrench[:3]), matmul(rotation, wrench[3:])
            s, i = c.frame[0], systems.models[c.frame[0]].end_point_index(c.frame[1])
            force[s] = force[s].at[i].add(f)
            torque[s] = torque[s].at[i].add(t)
            if c.other is not None:
                so, io = c.other[0], systems.models[c.other[0]].end_point_index(c.other[1])
                lever = position - other_position
                force[so] = force[so].at[io].add(-f)
                torque[so] = torque[so].at[io].add(-t - jnp.cross(lever, f))
        row += c.num_rows
    return systems.pack(list(zip(force, torque)))


def _with_velocities(systems: _Systems, states: Sequence[State], velocity: Array) -> tuple[State, ...]:
    """``states`` with the stacked free-coordinate velocity ``velocity`` ``(nv,)``."""
    out = []
    for m, s, v in zip(systems.models, states, systems.split(velocity)):
        v = floating_coordinates(m, v)
        out.append(State(s.base_position, s.base_quaternion, v[:3], v[3:6], s.q, v[6:]))
    return tuple(out)


def _velocity_projection(
    systems: _Systems,
    states: tuple[State, ...],
    constraints: tuple[Constraint, ...],
    mask: Array,
    regularization: Any = 0.0,
) -> tuple[tuple[State, ...], Array]:
    """Plastic impact onto ``J v = 0`` (active rows): ``(states after, impulse p (m,))`` with
    ``v+ = v- + H^-1 J^T p``."""
    jacobian, velocity_error, _ = _first_order_terms(systems, states, constraints)
    y, impulse = _schur_solve(systems, _factors(systems, states), jacobian, mask, regularization, -velocity_error)
    velocity = jnp.concatenate([free_motion(m, s.generalized_velocity) for m, s in zip(systems.models, states)])
    return _with_velocities(systems, states, velocity + matmul(y, impulse)), impulse


@eqx.filter_jit
def constraint_impulse(
    model: Model | Sequence[Model],
    state: State | Sequence[State],
    constraints: Sequence[Constraint],
    *,
    active: Any = None,
) -> tuple[Any, Array]:
    """Velocity jump when constraints switch on (capture, a brake engaging; SpaceDyn C++
    ``ch_conf``): the perfectly plastic impact ``v+ = v- - H^-1 J^T S^-1 J v-``.

    Returns:
        ``(state, impulse)``: the state (tuple of states for several systems) with ``J v+ = 0``
        on the active rows, positions unchanged, and ``(m,)`` impulses ``p`` (N s, N m s; as
        the multipliers of :class:`ConstrainedDynamics`, zero on inactive rows). Generalized
        momentum changes by ``J^T p`` only.
    """
    systems, states, constraints = _systems(model, state, constraints, "constraint_impulse")
    mask = _row_mask(constraints, active, states[0].q.dtype, "constraint_impulse")
    after, impulse = _velocity_projection(systems, states, constraints, mask)
    return systems.pack(after), impulse


def _move(systems: _Systems, states: Sequence[State], step: Array) -> tuple[State, ...]:
    """Configurations moved by the stacked free-coordinate displacement ``step`` ``(nv,)`` (each
    base rotated by the inertial rotation vector ``step[3:6]`` of its system)."""
    out = []
    for m, s, d in zip(systems.models, states, systems.split(step)):
        d = floating_coordinates(m, d)
        quat = quat_normalize(quat_multiply(rotation_vector_to_quat(d[3:6]), s.base_quaternion))
        out.append(
            State(s.base_position + d[:3], quat, s.base_linear_velocity, s.base_angular_velocity, s.q + d[6:], s.qd)
        )
    return tuple(out)


def _projected(
    systems: _Systems,
    states: tuple[State, ...],
    constraints: tuple[Constraint, ...],
    mask: Array,
    iterations: int = 2,
    regularization: Any = 0.0,
) -> tuple[State, ...]:
    """:func:`project_to_constraints` on checked inputs."""

    def newton_step(states: tuple[State, ...], _: None) -> tuple[tuple[State, ...], None]:
        jacobian, _velocity_error, position_error = _first_order_terms(systems, states, constraints)
        y, correction = _schur_solve(
            systems, _factors(systems, states), jacobian, mask, regularization, -position_error
        )
        return _move(systems, states, matmul(y, correction)), None

    # (a loop, not unrolled: one copy of the Newton step in the program, not one per iteration)
    states, _ = lax.scan(newton_step, states, None, length=iterations)
    return _velocity_projection(systems, states, constraints, mask, regularization)[0]


@eqx.filter_jit
def project_to_constraints(
    model: Model | Sequence[Model],
    state: State | Sequence[State],
    constraints: Sequence[Constraint],
    *,
    active: Any = None,
    iterations: int = 2,
) -> Any:
    """The nearest consistent state: Newton steps on ``phi(x) = 0`` in the kinetic-energy
    metric (``dx = -H^-1 J^T S^-1 phi``), then the velocity projection of
    :func:`constraint_impulse`. Each iteration squares the error (quadratic convergence), so
    two remove the drift of one integration step to round-off.
    """
    iterations = check_count("project_to_constraints: iterations", iterations, 0)
    systems, states, constraints = _systems(model, state, constraints, "project_to_constraints")
    mask = _row_mask(constraints, active, states[0].q.dtype, "project_to_constraints")
    return systems.pack(_projected(systems, states, constraints, mask, int(iterations)))


# ------------------------------------------------------------------------------------------
# Rollout.


class ConstrainedTrajectory(eqx.Module):
    """Result of :func:`constrained_rollout`.

    Attributes:
        time: ``(N + 1,)`` times, s.
        states: :class:`State` (a tuple of them for several systems) with leading axis ``N + 1``.
        controls: :class:`Controls` (or a tuple) applied over each step, leading axis ``N``.
        multipliers: ``(N, m)`` constraint forces at the start of each step (after its impulse).
        impulses: ``(N, m)`` impulses applied at the start of each step (non-zero where a
            constraint switched on).
        position_error: ``(N + 1, m)`` ``phi`` of each state (zero on inactive rows).
        constraints: the constraints at the end of the run (with ``latch=True``, the poses
            latched when they switched on).
    """

    time: Array
    states: Any
    controls: Any
    multipliers: Array
    impulses: Array
    position_error: Array
    constraints: tuple[Any, ...]


@eqx.filter_jit
def constrained_rollout(
    model: Model | Sequence[Model],
    initial_state: State | Sequence[State],
    dt: Any,
    num_steps: int,
    control: Any = None,
    constraints: Sequence[Constraint] = (),
    *,
    active: Any = None,
    t0: Any = 0.0,
    stabilization: Any = None,
    project: bool = True,
    latch: bool = False,
    regularization: Any = 0.0,
    checkpoint: bool = False,
    check: bool = False,
) -> ConstrainedTrajectory:
    """Fixed-step RK4 simulation of a constrained system, constraints switching on and off.

    Each step: the plastic impulse of :func:`constraint_impulse` for the constraints that switch
    on at this step (all active ones at the first step, which makes the initial velocities
    consistent), one RK4 step of :func:`constrained_forward_dynamics` with the controls held,
    then (``project=True``) :func:`project_to_constraints`. A constraint that switches off
    simply stops acting.

    Measured on a four-bar linkage under gravity (2 s, ``tests/test_constraints.py``): with
    projection the constraint error stays at round-off (7e-16 m) and the energy error is 1e-8 J
    of 6 J at ``dt = 1`` ms (4e-5 J at 5 ms); Baumgarte alone at ``0.1 / dt`` keeps the error
    at 7e-9 m (3e-7 m at 5 ms), energy error 6e-7 J, and runs about 25 % faster. Baumgarte
    on top of projection only adds dissipation (1e-5 J), hence the defaults.

    Arguments:
        model, initial_state, dt, num_steps, t0, checkpoint: as :func:`sdjax.rollout`; tuples
            of models and states for several systems.
        control: ``None``; a law ``(t, state) -> tau | Controls`` held over each step (for
            several systems it takes the tuple of states and returns a tuple); an ``(N, n)``
            torque sequence or a :class:`Controls` sequence (a tuple of them for several).
        constraints: as :func:`constrained_forward_dynamics`.
        active: ``None`` (all active throughout), ``(k,)`` flags, or an ``(N, k)`` schedule
            (a brake that engages at step 200, a capture at step 50).
        stabilization: Baumgarte frequency (rad/s); default 0 with projection, ``0.1 / dt``
            without.
        project: project positions and velocities onto the constraints after every step.
        latch: a frame constraint that switches on after the first step holds the relative
            pose it finds then (a gripper closing on a handle wherever it is) instead of its
            ``position``/``rotation``; the constraints returned in
            :attr:`ConstrainedTrajectory.constraints` carry the latched poses. (Without it a
            constraint switching on away from its pose is pulled there by the projection,
            which does not conserve momentum.)
        regularization: as :func:`constrained_forward_dynamics` (also used by the impacts and
            projections).
        check: fail when the state becomes non-finite (dependent constraint rows, see
            :func:`constrained_forward_dynamics`).

    Returns:
        :class:`ConstrainedTrajectory`.
    """
    systems, initial_states, constraints = _systems(model, initial_state, constraints, "constrained_rollout")
    _non_negative("constrained_rollout", "stabilization", stabilization)
    _non_negative("constrained_rollout", "regularization", regularization)
    initial_states = tuple(
        with_base_motion_checked(m, s, "constrained_rollout: initial_state")
        for m, s in zip(systems.models, initial_states)
    )
    dtype = initial_states[0].q.dtype
    law, _, dt_array = control_schedule(
        systems.models[0], control if callable(control) else None, num_steps, dt, dtype, "constrained_rollout"
    )
    if law is None:
        sequences = tuple(
            control_schedule(m, c, num_steps, dt, dtype, "constrained_rollout")[1]
            for m, c in zip(systems.models, systems.per_system(control, "constrained_rollout: control"))
        )
    else:
        sequences = (None,) * len(systems.models)
    k = len(constraints)
    flags = jnp.ones((num_steps, k), bool) if active is None else jnp.asarray(active).astype(bool)
    if flags.shape == (k,):
        flags = jnp.broadcast_to(flags, (num_steps, k))
    if flags.shape != (num_steps, k):
        raise ValueError(f"constrained_rollout: active must have shape ({k},) or ({num_steps}, {k}), got {flags.shape}")
    if stabilization is None:
        stabilization = jnp.zeros((), dtype) if project else 0.1 / dt_array
    t0 = jnp.asarray(t0, dtype)

    def step(carry, inputs):
        states, index, previous, constraints = carry
        applied, on = inputs
        mask = _row_mask(constraints, on, dtype, "constrained_rollout")
        t = t0 + index.astype(dtype) * dt_array
        if law is not None:
            applied = systems.per_system(law(t, systems.pack(states)), "constrained_rollout: control law output")
        controls = tuple(as_controls(m, a, dtype) for m, a in zip(systems.models, applied))
        if latch:
            constraints = _latched(systems, states, constraints, on & ~previous & (index > 0))
        # The impact of the constraints that switch on; the others keep their (stabilised or
        # projected) velocities.
        switched = _row_mask(constraints, on & ~previous, dtype, "constrained_rollout")
        states, impulse = _velocity_projection(systems, states, constraints, switched, regularization)

        def rate(stages: tuple[State, ...], offset: Array) -> tuple[tuple[State, ...], tuple[Any, Array]]:
            accelerations, lam, _ = _constrained_acceleration(
                systems, stages, controls, constraints, mask, stabilization, regularization
            )
            rates = tuple(
                State(
                    s.base_linear_velocity,
                    quat_rate(s.base_quaternion, s.base_angular_velocity),
                    a[:3],
                    a[3:6],
                    s.qd,
                    a[6:],
                )
                for s, a in zip(stages, accelerations)
            )
            return rates, (accelerations, lam)

        # (the multipliers at the step's start are its first stage's: no evaluation of their own)
        new, (accelerations, lam) = runge_kutta4(rate, states, dt_array, has_aux=True)
        if check:
            lam = _checked_finite(lam, accelerations, "constrained_rollout")
        new = tuple(eqx.tree_at(lambda s: s.base_quaternion, s, quat_normalize(s.base_quaternion)) for s in new)
        if project:
            new = _projected(systems, new, constraints, mask, regularization=regularization)
        error = mask * _errors(systems, new, constraints)
        return (new, index + 1, on, constraints), (new, controls, lam, impulse, error)

    if checkpoint:
        step = jax.checkpoint(step)
    constraints = jax.tree.map(lambda x: jnp.asarray(x, dtype), constraints)  # one dtype through the scan
    start = (initial_states, jnp.asarray(0, jnp.int32), jnp.zeros(k, bool), constraints)
    (_, _, _, final_constraints), (states, controls, lam, impulses, errors) = lax.scan(
        step, start, (sequences, flags), length=num_steps
    )
    history = jax.tree.map(lambda x0, x: jnp.concatenate([x0[None], x]), initial_states, states)
    first_error = _row_mask(constraints, flags[0] if num_steps else None, dtype, "constrained_rollout") * _errors(
        systems, initial_states, constraints
    )
    time = t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt_array
    return ConstrainedTrajectory(
        time,
        systems.pack(history),
        systems.pack(controls),
        lam,
        impulses,
        jnp.concatenate([first_error[None], errors]),
        tuple(final_constraints),
    )


# ------------------------------------------------------------------------------------------
# Inverse dynamics of closed chains.


@eqx.filter_jit
def constrained_inverse_dynamics(
    model: Model | Sequence[Model],
    state: State | Sequence[State],
    base_acceleration: Any = None,
    qdd: Any = None,
    constraints: Sequence[Constraint] = (),
    *,
    active: Any = None,
    actuated: Any = None,
    base_force: Any = None,
    base_torque: Any = None,
    end_point_force: Any = None,
    end_point_torque: Any = None,
) -> tuple[Any, Array]:
    """Actuator torques and constraint forces that produce a given motion of a closed chain
    (SpaceDyn C++ ``i_dyn_CL``).

    The trees need the generalized force ``g`` (:func:`sdjax.inverse_dynamics`, free
    coordinates); actuators supply ``B tau`` (the ``actuated`` joints; a base only its given
    wrench) and the constraints ``J^T lam``: ``B tau + J^T lam = g - [F0; N0; 0]``. Where
    actuators and constraints share the load (an over-actuated loop: two arms holding one
    object) the torques of least norm are returned and the constraint forces take the rest.
    The motion must satisfy the constraints (``J a + dJ/dt v = 0``); it is not checked.

    Arguments:
        model, state, base_acceleration, qdd, end_point_force, end_point_torque: as
            :func:`sdjax.inverse_dynamics`; tuples of them for several systems.
        constraints, active: as :func:`constrained_forward_dynamics`.
        actuated: ``(n,)`` bool, the joints with actuators (default all; a tuple for several
            systems).
        base_force, base_torque: ``(3,)`` applied base wrench (default zero: free floating).

    Returns:
        ``(tau, lam (m,))``: ``(n,)`` actuator torques (zero at unactuated joints; a tuple for
        several systems) and the constraint multipliers (as :class:`ConstrainedDynamics`).
    """
    systems, states, constraints = _systems(model, state, constraints, "constrained_inverse_dynamics")
    dtype = states[0].q.dtype
    mask = _row_mask(constraints, active, dtype, "constrained_inverse_dynamics")
    per = {
        name: systems.per_system(value, f"constrained_inverse_dynamics: {name}")
        for name, value in dict(
            base_acceleration=base_acceleration, qdd=qdd, actuated=actuated, base_force=base_force,
            base_torque=base_torque, end_point_force=end_point_force, end_point_torque=end_point_torque,
        ).items()
    }  # fmt: skip
    needed_rows, drive_rows = [], []
    for k, (m, s) in enumerate(zip(systems.models, states)):
        wrench, tau_tree = inverse_dynamics(
            m,
            s,
            per["base_acceleration"][k],
            per["qdd"][k],
            end_point_force=per["end_point_force"][k],
            end_point_torque=per["end_point_torque"][k],
        )
        applied = jnp.concatenate(
            [
                check_vector("base_force", per["base_force"][k], (3,), dtype),
                check_vector("base_torque", per["base_torque"][k], (3,), dtype),
            ]
        )
        needed_rows.append(free_coordinates(m, jnp.concatenate([wrench - applied, tau_tree])))
        on = (
            jnp.ones(m.num_joints, dtype)
            if per["actuated"][k] is None
            else check_vector("actuated", per["actuated"][k], (m.num_joints,), jnp.bool_).astype(dtype)
        )
        drive_rows.append(free_coordinates(m, jnp.concatenate([jnp.zeros(6, dtype), on])))  # 1 on actuated rows
    needed, drive = jnp.concatenate(needed_rows), jnp.concatenate(drive_rows)
    jt = _first_order_terms(systems, states, constraints)[0].T * mask[None, :]  # (nv, m)
    # min 1/2 |D (g - J^T lam)|^2 subject to U (g - J^T lam) = 0 (D: actuated rows, U: the
    # others, which only the constraints can hold). KKT, solved in the least-squares sense so
    # that redundant constraint rows (and inactive ones, zero columns) get the least-norm lam:
    #   [A^T A  C^T] [lam]   [A^T D g]
    #   [C      0  ] [mu ] = [U g    ],   A = D J^T, C = U J^T.
    a, c = drive[:, None] * jt, (1.0 - drive)[:, None] * jt
    num_rows = jt.shape[1]
    kkt = jnp.block([[matmul(a.T, a), c.T], [c, jnp.zeros((c.shape[0], c.shape[0]), dtype)]])
    rhs = jnp.concatenate([matmul(a.T, drive * needed), (1.0 - drive) * needed])
    lam = jnp.linalg.lstsq(kkt, rhs)[0][:num_rows]
    force = drive * (needed - matmul(jt, lam))
    tau = [floating_loads(mo, f)[6:] for mo, f in zip(systems.models, systems.split(force))]
    return systems.pack(tau), lam * mask


__all__ = [
    "FRAME_AXES",
    "ConstrainedDynamics",
    "ConstrainedTrajectory",
    "ConstraintTerms",
    "FrameConstraint",
    "JointCoupling",
    "JointLock",
    "constrained_forward_dynamics",
    "constrained_inverse_dynamics",
    "constrained_rollout",
    "constraint_impulse",
    "constraint_loads",
    "constraint_terms",
    "num_rows",
    "point_constraint",
    "position_errors",
    "project_to_constraints",
    "weld_constraint",
]
