"""Jacobians of link centroids, end points and arbitrary points on links, and their time
derivatives (seed 000 eqs 3.16-3.17 and 3.25-3.26).

A Jacobian here maps the generalized velocity ``[v0, w0, qd]`` (6 + n) to the linear and
angular velocity of a point (inertial frame): rows ``[linear (3); angular (3)]``, columns
``[J_b (6) | J_m (n)]`` as in eq 3.16. Column ``j`` of ``J_m`` is non-zero only for joints on
the path from the base to the point's link: ``[k_j x (x - p_j); k_j]`` for a revolute joint
and ``[k_j; 0]`` for a prismatic one. Base columns are ``[[E, -skew(x - r0)], [0, E]]``.

For a planar or fixed base (:data:`sdjax.BASE_MODES`) the public functions return the
columns of the free coordinates only (``model.velocity_indices``): ``[J_b S | J_m]``, with
``J_b S`` the three planar columns, or ``J_m`` alone.

Time derivatives use ``d s_j/dt = twist_j x s_j`` for the spatial joint axes (see
:mod:`sdjax.kinematics`), so ``dJ/dt qd_gen + J a_gen`` is the point's acceleration (eq 3.17).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.kinematics import Frames, KinematicPass, end_point_frames, kinematic_pass, motion_cross, point_velocity
from sdjax.algebra import cross3, matmul
from sdjax.model import Model, free_coordinates
from sdjax.rotation import skew
from sdjax._checks import check_index, check_vector
from sdjax.state import State, check_state

__all__ = [
    "end_point_jacobian_derivatives",
    "end_point_jacobians",
    "jacobians_at_points",
    "link_jacobian_derivatives",
    "link_jacobians",
    "point_jacobian",
    "point_jacobian_derivative",
]


def _supports(model: Model, bodies: np.ndarray) -> np.ndarray:
    """``(k, n)`` 0/1: joints on the path from the base to each body (body 0: none)."""
    rows = np.zeros((len(bodies), model.num_joints))
    for row, body in enumerate(bodies):
        if body > 0:
            rows[row] = model.tree.support[body - 1]
    return rows


def jacobians_at_points(model: Model, axes: Array, bodies: np.ndarray, points: Array) -> Array:
    """``(k, 6, 6 + n)`` Jacobians of points fixed on the given bodies.

    Internal building block shared by the Jacobian, control and load functions (not
    exported at the top level).

    Arguments:
        model: the system.
        axes: ``(n, 6)`` joint motion axes (:func:`sdjax.kinematics.joint_motion_axes`).
        bodies: ``(k,)`` static body indices (0 = base).
        points: ``(k, 3)`` point positions relative to the base centroid ``r0``, inertial frame, m.
    """
    k = len(bodies)
    mask = jnp.asarray(_supports(model, bodies), points.dtype)[:, :, None]  # (k, n, 1)
    angular = axes[None, :, :3] * mask  # (k, n, 3)
    linear = (axes[None, :, 3:] + cross3(axes[None, :, :3], points[:, None, :])) * mask
    eye = jnp.broadcast_to(jnp.eye(3, dtype=points.dtype), (k, 3, 3))
    zero = jnp.zeros((k, 3, 3), points.dtype)
    base = jnp.concatenate(
        [jnp.concatenate([eye, -skew(points)], axis=-1), jnp.concatenate([zero, eye], axis=-1)], axis=-2
    )
    joints = jnp.concatenate([jnp.swapaxes(linear, -1, -2), jnp.swapaxes(angular, -1, -2)], axis=-2)
    return jnp.concatenate([base, joints], axis=-1)


def _jacobian_derivatives_at(model: Model, axes: Array, twists: Array, bodies: np.ndarray, points: Array) -> Array:
    """``(k, 6, 6 + n)`` time derivatives of :func:`jacobians_at_points`."""
    k = len(bodies)
    body_index = jnp.asarray(bodies, dtype=jnp.int32)
    point_rate = point_velocity(twists[body_index], points)  # (k, 3)
    base_velocity = twists[0, 3:]  # v0 (the base twist's linear part about r0)
    axis_rates = motion_cross(twists[1:], axes)  # (n, 6)
    mask = jnp.asarray(_supports(model, bodies), points.dtype)[:, :, None]
    angular = axis_rates[None, :, :3] * mask
    linear = (
        axis_rates[None, :, 3:]
        + cross3(axis_rates[None, :, :3], points[:, None, :])
        + cross3(axes[None, :, :3], point_rate[:, None, :])
    ) * mask
    zero = jnp.zeros((k, 3, 3), points.dtype)
    base = jnp.concatenate(
        [jnp.concatenate([zero, -skew(point_rate - base_velocity)], axis=-1), jnp.concatenate([zero, zero], axis=-1)],
        axis=-2,
    )
    joints = jnp.concatenate([jnp.swapaxes(linear, -1, -2), jnp.swapaxes(angular, -1, -2)], axis=-2)
    return jnp.concatenate([base, joints], axis=-1)


def _check_body(model: Model, link: Any, owner: str) -> int:
    return check_index(f"{owner}: link", link, 0, model.num_joints, "0 = base, 1..n = links")


def _point_on_body(model: Model, frames: Frames, link: int, point: Array) -> Array:
    """Position (relative to r0) of a point given in the link frame relative to its centroid."""
    return frames.centroid[link] + matmul(frames.rotation[link], point)


def _checked_pass(model: Model, state: State) -> KinematicPass:
    check_state(model, state)
    return kinematic_pass(model, state)


def point_jacobian(model: Model, state: State, link: int, point: Any = None) -> Array:
    """Jacobian of a point fixed on a body.

    Arguments:
        model: the system.
        state: its state.
        link: body index (static), 0 = base, 1..n = links.
        point: ``(3,)`` position of the point relative to the body's centroid, in the body
            frame, m (default: the centroid).

    Returns:
        ``(6, nv)`` Jacobian ``[linear; angular]`` w.r.t. the generalized velocity
        (``[v0, w0, qd]`` for a floating base, ``nv = 6 + n``; see the module docstring).
    """
    # The index is checked and made a Python int before jit (a NumPy integer would be traced).
    return _point_jacobian(model, state, _check_body(model, link, "point_jacobian"), point, "point_jacobian")


@eqx.filter_jit
def _point_jacobian(model: Model, state: State, link: int, point: Any, owner: str) -> Array:
    """:func:`point_jacobian` of a checked static ``link``; messages name ``owner``."""
    motion = _checked_pass(model, state)
    point = check_vector(f"{owner}: point", point, (3,), motion.frames.centroid.dtype)
    x = _point_on_body(model, motion.frames, link, point)
    return free_coordinates(model, jacobians_at_points(model, motion.axes, np.array([link]), x[None])[0], -1)


def point_jacobian_derivative(model: Model, state: State, link: int, point: Any = None) -> Array:
    """Time derivative of :func:`point_jacobian` along the state's velocities.

    Arguments:
        model, state: the system and its state (positions and velocities).
        link: static body index ``0..n`` (0 = base) carrying the point.
        point: ``(3,)`` position of the point in the body frame from its centroid, m (default:
            the centroid).

    Returns:
        ``(6, nv)`` ``dJ/dt`` ``[linear; angular]`` rows over the generalized velocity, as
        :func:`point_jacobian`'s columns.
    """
    return _point_jacobian_derivative(model, state, _check_body(model, link, "point_jacobian_derivative"), point)


@eqx.filter_jit
def _point_jacobian_derivative(model: Model, state: State, link: int, point: Any) -> Array:
    """:func:`point_jacobian_derivative` of a checked static ``link``."""
    motion = _checked_pass(model, state)
    point = check_vector("point_jacobian_derivative: point", point, (3,), motion.frames.centroid.dtype)
    x = _point_on_body(model, motion.frames, link, point)
    derivative = _jacobian_derivatives_at(model, motion.axes, motion.twists, np.array([link]), x[None])[0]
    return free_coordinates(model, derivative, -1)


@eqx.filter_jit
def link_jacobians(model: Model, state: State) -> Array:
    """Jacobians of every body centroid (base included); ``(n + 1, 6, nv)``.

    ``[i, :3, 6:]`` and ``[i, 3:, 6:]`` are SpaceDyn's ``J_Ti`` and ``J_Ri`` (eqs 3.25-3.26).
    """
    motion = _checked_pass(model, state)
    bodies = np.arange(model.num_bodies)
    return free_coordinates(model, jacobians_at_points(model, motion.axes, bodies, motion.frames.centroid), -1)


@eqx.filter_jit
def link_jacobian_derivatives(model: Model, state: State) -> Array:
    """Time derivatives of :func:`link_jacobians`; ``(n + 1, 6, nv)``."""
    motion = _checked_pass(model, state)
    bodies = np.arange(model.num_bodies)
    derivatives = _jacobian_derivatives_at(model, motion.axes, motion.twists, bodies, motion.frames.centroid)
    return free_coordinates(model, derivatives, -1)


@eqx.filter_jit
def end_point_jacobians(model: Model, state: State) -> Array:
    """Jacobians of every end point (eq 3.16: ``[J_b | J_m]``); ``(ne, 6, nv)``."""
    motion = _checked_pass(model, state)
    position, _ = end_point_frames(model, motion.frames)
    links = np.asarray(model.end_point_link, dtype=np.int64)
    return free_coordinates(model, jacobians_at_points(model, motion.axes, links, position), -1)


@eqx.filter_jit
def end_point_jacobian_derivatives(model: Model, state: State) -> Array:
    """Time derivatives of :func:`end_point_jacobians` (eq 3.17); ``(ne, 6, nv)``."""
    motion = _checked_pass(model, state)
    position, _ = end_point_frames(model, motion.frames)
    links = np.asarray(model.end_point_link, dtype=np.int64)
    derivatives = _jacobian_derivatives_at(model, motion.axes, motion.twists, links, position)
    return free_coordinates(model, derivatives, -1)
