"""State of a moving-base system: base pose and twist, joint positions and rates."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax._checks import check_float_dtype, check_type, float_array, is_traced, rotation_matrix
from sdjax.model import Model, joint_coordinate_map, joint_positions, mimic_tolerance
from sdjax.rotation import matrix_to_quat, quat_normalize, quat_to_matrix, rpy_to_matrix

__all__ = [
    "BASE_TWIST_NAMES",
    "State",
    "check_base_motion",
    "check_mimic_relations",
    "check_state",
    "make_state",
    "normalize_state",
    "with_base_motion_checked",
    "with_mimic_relations_checked",
]


class State(eqx.Module):
    """Positions and velocities of a moving-base system (a pytree; batch with ``jax.vmap``).

    Attributes:
        base_position: ``(3,)`` base centroid ``r0``, inertial frame, m.
        base_quaternion: ``(4,)`` scalar-last ``(x, y, z, w)`` quaternion of ``A0``, the
            rotation from the base frame to the inertial frame.
        base_linear_velocity: ``(3,)`` velocity ``v0`` of the base centroid, inertial frame, m/s.
        base_angular_velocity: ``(3,)`` angular velocity ``w0`` of the base, inertial frame, rad/s.
        q: ``(n,)`` joint positions, rad (revolute) or m (prismatic).
        qd: ``(n,)`` joint rates, rad/s or m/s.
    """

    base_position: Array
    base_quaternion: Array
    base_linear_velocity: Array
    base_angular_velocity: Array
    q: Array
    qd: Array

    def __check_init__(self):
        for field, size in (
            ("base_position", 3),
            ("base_quaternion", 4),
            ("base_linear_velocity", 3),
            ("base_angular_velocity", 3),
        ):
            shape = jnp.shape(getattr(self, field))
            if shape != (size,):
                raise ValueError(f"State.{field}: expected shape ({size},), got {shape} (batch states with jax.vmap)")
        if jnp.ndim(self.q) != 1 or jnp.shape(self.q) != jnp.shape(self.qd):
            raise ValueError(
                f"State.q and State.qd: expected two (n,) vectors, got shapes {jnp.shape(self.q)} and {jnp.shape(self.qd)}"
            )

    @property
    def base_rotation(self) -> Array:
        """``(3, 3)`` rotation ``A0`` from the base frame to the inertial frame."""
        return quat_to_matrix(self.base_quaternion)

    @property
    def generalized_velocity(self) -> Array:
        """``(6 + n,)`` vector ``[v0, w0, qd]`` (inertial-frame base twist, joint rates)."""
        return jnp.concatenate([self.base_linear_velocity, self.base_angular_velocity, self.qd])


def make_state(
    model: Model,
    *,
    base_position: Any = None,
    base_quaternion: Any = None,
    base_rotation: Any = None,
    base_direction_cosines: Any = None,
    base_rpy: Any = None,
    base_linear_velocity: Any = None,
    base_angular_velocity: Any = None,
    q: Any = None,
    qd: Any = None,
    dtype: Any = None,
) -> State:
    """Build a state for ``model``; omitted entries are zero (identity attitude).

    Give the base attitude by at most one of ``base_quaternion`` (scalar-last, normalised
    here), ``base_rotation`` (``(3, 3)`` base-to-inertial matrix ``A0``),
    ``base_direction_cosines`` (``(3, 3)`` direction cosines ``C0 = A0^T``, inertial to base,
    seed 000 eq 3.2) or ``base_rpy`` (SpaceDyn RPY angles, ``A0 = Rx Ry Rz``).

    Joint positions and rates ``q``, ``qd`` are given for every joint (``(n,)``) or, for a model
    with mimic joints, for its joint coordinates only (``(n_c,)``, the independent joints; the
    mimic joints then follow their leaders). Every joint's values must satisfy the mimic
    relations (checked).

    Arguments:
        model: the system; sets ``n`` and the default dtype.
        dtype: floating dtype of the state (default: the model's).

    Returns:
        A :class:`State`.
    """
    check_type("make_state: model", model, Model, "a sdjax.Model")
    dtype = model.dtype if dtype is None else check_float_dtype("make_state: dtype", dtype)
    n = model.num_joints
    given = [x is not None for x in (base_quaternion, base_rotation, base_direction_cosines, base_rpy)]
    if sum(given) > 1:
        raise ValueError(
            "make_state: give at most one of base_quaternion, base_rotation, base_direction_cosines, base_rpy"
        )
    # Every given value checked (numbers, shape, and finite when concrete: a NaN or inf state
    # would give a NaN trajectory without a word), in the state's dtype; an attitude matrix
    # must be a proper rotation (a scaled or reflected one has no quaternion).
    if base_direction_cosines is not None:
        base_rotation = rotation_matrix("make_state: base_direction_cosines", base_direction_cosines, dtype).T
    elif base_rotation is not None:
        base_rotation = rotation_matrix("make_state: base_rotation", base_rotation, dtype)

    def vec(name, value, size):
        if value is None:
            return jnp.zeros((size,), dtype)
        return float_array(f"make_state: {name}", value, shape=(size,), dtype=dtype)

    if base_rotation is not None:
        quat = matrix_to_quat(base_rotation)
    elif base_rpy is not None:
        quat = matrix_to_quat(rpy_to_matrix(vec("base_rpy", base_rpy, 3)))
    elif base_quaternion is not None:
        quat = vec("base_quaternion", base_quaternion, 4)
        if not isinstance(quat, jax.core.Tracer) and not float(jnp.sum(quat**2)) > 0:
            raise ValueError("make_state: base_quaternion must be non-zero")
        quat = quat_normalize(quat)
    else:
        quat = jnp.array([0.0, 0.0, 0.0, 1.0], dtype)

    def joints(name, value):
        if value is not None and model.has_mimic and jnp.shape(value) == (model.num_joint_coordinates,):
            coordinates = float_array(f"make_state: {name}", value, shape=(model.num_joint_coordinates,), dtype=dtype)
            if name == "q":
                return joint_positions(model, coordinates)
            return matmul(coordinates, joint_coordinate_map(model).astype(dtype).T)
        if value is None and name == "q":
            return joint_positions(model, jnp.zeros((model.num_joint_coordinates,), dtype))
        return vec(name, value, n)

    state = State(
        base_position=vec("base_position", base_position, 3),
        base_quaternion=quat,
        base_linear_velocity=vec("base_linear_velocity", base_linear_velocity, 3),
        base_angular_velocity=vec("base_angular_velocity", base_angular_velocity, 3),
        q=joints("q", q),
        qd=joints("qd", qd),
    )
    check_base_motion(model, state, "make_state")
    return state


#: Names of the base twist components ``[v0, w0]`` (inertial frame), for messages.
BASE_TWIST_NAMES = ("v0_x", "v0_y", "v0_z", "w0_x", "w0_y", "w0_z")


def check_mimic_relations(model: Model, what: str, name: str, values: Any) -> None:
    """Refuse (``ValueError`` naming ``what``) concrete joint values ``(n,)`` whose mimic joints do
    not follow their leaders (to :func:`mimic_tolerance`): positions (``name == "q"``, with the
    offsets), rates or accelerations (without). Nothing to check without mimic joints or
    under tracing."""
    if not model.has_mimic or is_traced(values):
        return
    x = np.asarray(values)
    tolerance = mimic_tolerance(x.dtype)
    multiplier = np.asarray(model.mimic_multiplier)
    shift = np.asarray(model.mimic_offset) if name == "q" else np.zeros(model.num_joints)
    for k, leader in enumerate(model.mimic_leader):
        expected = multiplier[k] * x[leader - 1] + shift[k]
        if leader and not abs(x[k] - expected) <= tolerance * (1 + abs(x[k])):
            raise ValueError(
                f"{what}: joint {k + 1} ({model.link_names[k]!r}) of model {model.name!r} mimics joint {leader} "
                f"({model.link_names[leader - 1]!r}): {name}[{k}] must be {multiplier[k]} * {name}[{leader - 1}]"
                + (f" + {shift[k]}" if name == "q" else "")
                + f" = {expected}, got {x[k]} (give make_state the joint coordinates alone to have the mimic joints "
                "follow)"
            )


def with_mimic_relations_checked(model: Model, what: str, name: str, values: Array) -> Array:
    """``values`` ``(n,)``, failing when the program runs (``equinox.error_if``, also under
    ``jit``) if its mimic joints do not follow their leaders (``name == "q"``: positions, with
    the offsets; else rates or accelerations), to :func:`mimic_tolerance`."""
    if not model.has_mimic:
        return values
    followers = np.flatnonzero(np.asarray(model.mimic_leader))
    leaders = np.asarray(model.mimic_leader)[followers] - 1
    expected = model.mimic_multiplier[followers].astype(values.dtype) * values[leaders]
    if name == "q":
        expected = expected + model.mimic_offset[followers].astype(values.dtype)
    tolerance = mimic_tolerance(values.dtype)
    return eqx.error_if(
        values,
        jnp.any(jnp.abs(values[followers] - expected) > tolerance * (1 + jnp.abs(values[followers]))),
        f"{what}: {name} of the mimic joints {[model.link_names[k] for k in followers]} of model {model.name!r} "
        f"must follow their leaders ({name}[joint] = multiplier * {name}[leader]"
        + (" + offset)" if name == "q" else ")"),
    )


def check_base_motion(model: Model, state: State, what: str = "state") -> None:
    """Refuse a concrete state whose base twist moves along a component the model's base mode
    fixes (:data:`sdjax.BASE_MODES`), or whose mimic joints do not follow their leaders
    (positions and rates, to :func:`mimic_tolerance`); nothing can be checked under tracing."""
    check_mimic_relations(model, what, "q", state.q)
    check_mimic_relations(model, what, "qd", state.qd)
    linear, angular = state.base_linear_velocity, state.base_angular_velocity
    if model.base == "floating" or is_traced(linear, angular):
        return
    twist = np.concatenate([np.asarray(linear), np.asarray(angular)])
    moving = [BASE_TWIST_NAMES[k] for k in range(6) if k not in model.base_coordinates and twist[k] != 0]
    if moving:
        raise ValueError(
            f"{what}: the {model.base} base of model {model.name!r} cannot move along {', '.join(moving)} (base "
            f"twist {twist.tolist()}); set those components to zero"
        )


def with_base_motion_checked(model: Model, state: State, what: str = "state") -> State:
    """``state``, failing when the program runs (``equinox.error_if``, also under ``jit``) if its
    base twist moves along a component the model's base mode fixes, or its mimic joints do not
    follow their leaders."""
    if model.has_mimic:
        state = eqx.tree_at(
            lambda s: (s.q, s.qd),
            state,
            (
                with_mimic_relations_checked(model, what, "q", state.q),
                with_mimic_relations_checked(model, what, "qd", state.qd),
            ),
        )
    if model.base == "floating":
        return state
    fixed = [k for k in range(6) if k not in model.base_coordinates]
    twist = jnp.concatenate([state.base_linear_velocity, state.base_angular_velocity])
    linear = eqx.error_if(
        state.base_linear_velocity,
        jnp.any(twist[jnp.asarray(fixed)] != 0),
        f"{what}: the {model.base} base of model {model.name!r} cannot move along "
        f"{', '.join(BASE_TWIST_NAMES[k] for k in fixed)}; set those components to zero",
    )
    return eqx.tree_at(lambda s: s.base_linear_velocity, state, linear)


def normalize_state(state: State) -> State:
    """The same state with a unit base quaternion."""
    return eqx.tree_at(lambda s: s.base_quaternion, state, quat_normalize(state.base_quaternion))


def check_state(model: Model, state: State, what: str = "check_state") -> None:
    """Raise ``TypeError`` (naming the function ``what``) if ``model`` is no :class:`Model` or
    ``state`` no :class:`State`, ``ValueError`` if the state's joint vectors do not match the
    model (trace time)."""
    check_type(f"{what}: model", model, Model, "a sdjax.Model")
    check_type(f"{what}: state", state, State, "a sdjax.State")
    n = model.num_joints
    if jnp.shape(state.q) != (n,) or jnp.shape(state.qd) != (n,):
        raise ValueError(
            f"State.q/State.qd: expected shape ({n},) for model {model.name!r} with n={n} joints, "
            f"got {jnp.shape(state.q)} and {jnp.shape(state.qd)} (batch states with jax.vmap)"
        )
