"""Task points: their pose, their joint-rate Jacobian and the task error (seed 003 eqs
103-110).

Task points. A task point is an end point (``end_point=k``, index into
``model.end_point_link``; its frame is the end-point frame) or any point fixed on a link
(``link=i``, ``point`` = position relative to the link centroid in the link frame; its
frame is the link frame); give one of ``end_point`` and ``link`` (neither: end point 0). Both
are static indices: Python or NumPy integers. Task velocities are ``[linear (m/s); angular (rad/s)]`` of that
point and frame, inertial frame; ``task`` selects ``"pose"`` (6 rows), ``"position"``
(rows 0:3) or ``"orientation"`` (rows 3:6) (:data:`TASKS`).

Base assumption (:data:`CONTROL_BASES`). ``base="floating"`` lets the base react to the
joints under conserved momentum (eq 109) as far as the model's base mode lets it move: the
task Jacobian is the generalized Jacobian ``J*`` (eq 110) plus the momentum offset;
``base="fixed"`` holds the base at rest: the Jacobian is the joint block ``J_m``.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.algebra import matmul
from sdjax.dynamics import inertia_matrix
from sdjax.gjm import generalized_columns, momentum_offset
from sdjax.jacobians import point_jacobian
from sdjax.kinematics import relative_frames
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import matrix_to_rotation_vector, rpy_to_matrix
from sdjax._checks import check_choice, check_index, check_vector, is_integer
from sdjax.state import State, check_state

#: What the model-based functions assume of the base (see the module docstring): it reacts
#: as the model's base mode lets it, or it is held at rest.
CONTROL_BASES = ("floating", "fixed")

#: Task selections: rows of the ``[linear; angular]`` task velocity.
TASKS = {"pose": slice(0, 6), "position": slice(0, 3), "orientation": slice(3, 6)}


def _static_task_point(model: Model, end_point: Any, link: Any, owner: str) -> tuple[int | None, int | None]:
    """``(end_point, link)`` of a task point, checked and made Python ints (before any jit: a
    NumPy integer would be traced there), one of them ``None``: ``(k, None)`` for end point
    ``k`` (neither given: end point 0), ``(None, i)`` for a point on link ``i``; giving both is
    refused. Messages start with ``owner`` (the public function)."""
    if link is not None and end_point is not None:
        raise ValueError(f"{owner}: give end_point or link, not both (got end_point={end_point!r}, link={link!r})")
    if link is not None:
        return None, check_index(f"{owner}: link", link, 1, model.num_joints, f"the links of model {model.name!r}")
    end_point = 0 if end_point is None else end_point
    ne = model.num_end_points
    if not is_integer(end_point):
        raise TypeError(f"{owner}: end_point: expected a static integer index, got {type(end_point).__name__}")
    if not 0 <= int(end_point) < ne:
        raise ValueError(
            f"{owner}: end_point: unknown end point {int(end_point)}; model {model.name!r} has {ne} end point(s) "
            f"(indices 0..{ne - 1}, on links {model.end_point_link}); or pass link=... and point=..."
        )
    return int(end_point), None


def _task_point(
    model: Model, end_point: Any, link: Any, point: Any, dtype: Any, owner: str = "task point"
) -> tuple[int, Array, Array]:
    """``(link, point in the link frame from its centroid (3,), frame offset rotation (3, 3))``;
    messages start with ``owner`` (the public function)."""
    k, link = _static_task_point(model, end_point, link, owner)
    if link is not None:
        return link, check_vector(f"{owner}: point", point, (3,), dtype), jnp.eye(3, dtype=dtype)
    if point is not None:
        raise ValueError(f"{owner}: point: give a point together with link=...; end points carry their own offset")
    k = int(k or 0)  # (an end point: k is its index)
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


def _task_kinematics(
    model: Model, state: State, spec: tuple[Any, Any, Any], base: str, momentum: Any, owner: str = "task point"
) -> _Task:
    dtype = state.q.dtype
    link, point, offset_rotation = _task_point(model, *spec, dtype, owner)
    frames = relative_frames(model, state.base_rotation, state.q)
    rotation = frames.rotation[link]
    x = frames.centroid[link] + matmul(rotation, point)
    columns = point_jacobian(model, state, link, point)  # (6, nv), free coordinates
    if base == "floating":
        h = inertia_matrix(model, state)
        jacobian = generalized_columns(model, h, columns)  # eq 110
        offset = momentum_offset(model, state, h, columns, momentum)
    else:
        jacobian, offset = columns[:, model.num_base_velocities :], jnp.zeros((6,), dtype)
    return _Task(state.base_position + x, matmul(rotation, offset_rotation), jacobian, offset)


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
        parts.append(matrix_to_rotation_vector(matmul(target_rotation, rotation.T)))
    return jnp.concatenate(parts)


def task_jacobian(
    model: Model,
    state: State,
    *,
    end_point: int | None = None,
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
        end_point, link, point: the task point (see the module docstring; default end point 0).
        task: ``"pose"``, ``"position"`` or ``"orientation"``.
        base: ``"floating"`` or ``"fixed"``.
        momentum: ``(6,)`` conserved ``[P; L_O]`` (default zero); floating base only.

    Returns:
        ``jacobian (m, n)`` and ``offset (m,)``, rows ``[linear (m/s); angular (rad/s)]``
        selected by ``task``, inertial frame.
    """
    end_point, link = _static_task_point(model, end_point, link, "task_jacobian")
    return _task_jacobian(model, state, end_point, link, point, task, base, momentum)


@eqx.filter_jit
def _task_jacobian(
    model: Model, state: State, end_point: int | None, link: int | None, point: Any, task: str, base: str, momentum: Any
) -> tuple[Array, Array]:
    check_no_mimic(model, "task_jacobian")
    check_state(model, state)
    rows = TASKS[check_choice("task_jacobian: task", task, TASKS)]
    _check_base_momentum("task_jacobian", base, momentum)
    kin = _task_kinematics(model, state, (end_point, link, point), base, momentum, "task_jacobian")
    return kin.jacobian[rows], kin.offset[rows]


def task_pose(
    model: Model, state: State, *, end_point: int | None = None, link: int | None = None, point: Any = None
) -> tuple[Array, Array]:
    """Position ``(3,)`` (inertial, m) and frame rotation ``(3, 3)`` (task frame to inertial)
    of a task point (see the module docstring; default end point 0)."""
    end_point, link = _static_task_point(model, end_point, link, "task_pose")
    return _task_pose(model, state, end_point, link, point)


@eqx.filter_jit
def _task_pose(model: Model, state: State, end_point: int | None, link: int | None, point: Any) -> tuple[Array, Array]:
    check_state(model, state)
    dtype = state.q.dtype
    link_index, offset, offset_rotation = _task_point(model, end_point, link, point, dtype, "task_pose")
    frames = relative_frames(model, state.base_rotation, state.q)
    rotation = frames.rotation[link_index]
    return state.base_position + frames.centroid[link_index] + matmul(rotation, offset), matmul(
        rotation, offset_rotation
    )


def _check_base_momentum(name: str, base: str, momentum: Any) -> None:
    check_choice(f"{name}: base", base, CONTROL_BASES, "base mode")
    if base == "fixed" and momentum is not None:
        raise ValueError(f"{name}: momentum applies to base='floating' only")


__all__ = ["CONTROL_BASES", "TASKS", "task_jacobian", "task_pose"]
