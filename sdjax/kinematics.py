"""Kinematics: link frames, centroids, joints, end points, velocities and accelerations.

All vectors are expressed in the inertial frame, as in SpaceDyn. Internally positions are
measured from the base centroid ``r0`` (so results do not lose precision far from the
origin) and velocities are carried as *spatial* twists ``(w, v_o)``: ``v_o`` is the velocity
of the body-fixed point that momentarily coincides with ``r0``. In that form the recursions
of seed 000 eqs 3.8-3.15 become plain sums along the tree,

    twist_i = twist_B(i) + s_i qd_i,
    accel_i = accel_B(i) + s_i qdd_i + (twist_i x s_i) qd_i,

with the joint motion axis ``s_i = (k_i, p_i x k_i)`` (revolute) or ``(0, k_i)`` (prismatic),
``k_i`` the joint axis and ``p_i`` the joint position. Centroid velocities and accelerations
are recovered exactly: ``v_i = v_o + w_i x r_i`` and ``dv_i/dt = a_o + dw_i/dt x r_i + w_i x v_i``.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.model import Model
from sdjax.algebra import cross3, dot, matmul3, matvec3, transpose3
from sdjax.rotation import rpy_to_matrix
from sdjax._checks import check_vector
from sdjax.state import State, check_state
from sdjax.tree import accumulate_up, propagate_down

__all__ = [
    "Frames",
    "KinematicPass",
    "Kinematics",
    "base_spatial_acceleration",
    "base_twist",
    "body_inertias",
    "body_masses",
    "body_spatial_accelerations",
    "body_twists",
    "center_of_mass",
    "end_point_frames",
    "forward_kinematics",
    "joint_motion_axes",
    "joint_rotations",
    "kinematic_pass",
    "link_accelerations",
    "link_velocities",
    "motion_cross",
    "point_acceleration",
    "point_velocity",
    "relative_frames",
    "subtree_mass_moments",
    "world_inertias",
]


class Kinematics(eqx.Module):
    """Positions and orientations of every body, joint and end point (inertial frame).

    Attributes:
        rotation: ``(n + 1, 3, 3)`` body-to-inertial rotations; ``[0]`` is the base ``A0``,
            ``[i]`` is SpaceDyn's ``AA(:, 3i-2:3i)``.
        centroid: ``(n + 1, 3)`` centroid positions, m; ``[0]`` is ``r0``.
        joint_position: ``(n, 3)`` joint positions, m: the origin of joint frame ``i`` (for a
            prismatic joint, the slider origin at zero displacement, on the parent).
        joint_axis: ``(n, 3)`` unit joint axes ``k_i``.
        end_point_position: ``(ne, 3)`` end-point positions, m.
        end_point_rotation: ``(ne, 3, 3)`` end-point-frame-to-inertial rotations.
    """

    rotation: Array
    centroid: Array
    joint_position: Array
    joint_axis: Array
    end_point_position: Array
    end_point_rotation: Array


class Frames(eqx.Module):
    """Body frames with positions measured from the base centroid (see :func:`relative_frames`)."""

    rotation: Array  # (n + 1, 3, 3) body to inertial
    centroid: Array  # (n + 1, 3) centroid minus r0; [0] = 0
    joint_position: Array  # (n, 3) joint position minus r0
    joint_axis: Array  # (n, 3)


def joint_rotations(model: Model, q: Array) -> Array:
    """Rotation of each link frame relative to its parent's frame (seed 000 eq 3.1).

    ``Rx(alpha) Ry(beta) Rz(gamma) Rz(q_i)`` for a revolute joint and ``Rx Ry Rz`` for a
    prismatic one.

    Arguments:
        model: the system.
        q: ``(n,)`` joint positions.

    Returns:
        ``(n, 3, 3)`` rotations.
    """
    fixed = rpy_to_matrix(model.joint_rpy)
    revolute = jnp.asarray(model.is_revolute)
    c = jnp.where(revolute, jnp.cos(q), 1.0)[:, None]
    s = jnp.where(revolute, jnp.sin(q), 0.0)[:, None]
    # fixed @ Rz(q): columns x and y turn by q, z stays.
    x_axis, y_axis = fixed[..., :, 0], fixed[..., :, 1]
    return jnp.stack([c * x_axis + s * y_axis, c * y_axis - s * x_axis, fixed[..., :, 2]], axis=-1)


def relative_frames(model: Model, base_rotation: Array, q: Array) -> Frames:
    """Frames of every body with positions measured from the base centroid.

    Orientations ``A_i = A_B(i) J_i(q_i)`` (eq 3.1) by one root-to-leaves pass; then the
    joint position ``p_i = r_B(i) + A_B(i) c_B(i),i`` and the centroid
    ``r_i = p_i + A_i (q_i e_z [prismatic] - c_ii)``, i.e. ``r_i`` is the sum of the vectors
    ``A_B(j) c_B(j),j + A_j (q_j e_z - c_jj)`` along the path from the base.

    Arguments:
        model: the system (``n`` joints).
        base_rotation: ``(3, 3)`` base-to-inertial rotation ``A_0``.
        q: ``(n,)`` joint positions, rad or m.

    Returns:
        :class:`Frames`: rotations ``(n + 1, 3, 3)`` (body to inertial), centroids ``(n + 1, 3)``
        and joint positions ``(n, 3)`` relative to the base centroid (inertial axes, m), joint
        axes ``(n, 3)`` (inertial unit vectors).
    """
    parent = model.tree.parent
    dtype = jnp.result_type(base_rotation, q, model.joint_rpy)
    eye = jnp.eye(3, dtype=dtype)
    rotation = propagate_down(
        model.tree, matmul3, base_rotation.astype(dtype), joint_rotations(model, q).astype(dtype), eye
    )
    prismatic = jnp.asarray(~model.is_revolute)
    # Vector from joint i to centroid i in the link frame (prismatic: with the slide q_i e_z).
    displacement = -model.centroid_to_joint.astype(dtype).at[:, 2].add(jnp.where(prismatic, -q, 0.0))
    to_joint = matvec3(rotation[parent], model.parent_centroid_to_joint)
    to_centroid = matvec3(rotation[1:], displacement)
    zero = jnp.zeros(3, dtype)
    centroid = propagate_down(model.tree, jnp.add, zero, to_joint + to_centroid, zero)
    return Frames(rotation, centroid, centroid[parent] + to_joint, rotation[1:, :, 2])


def end_point_frames(model: Model, frames: Frames) -> tuple[Array, Array]:
    """End-point positions (relative to r0) and rotations from the body frames.

    ``p_e = r_i + A_i c_ie`` and ``A_e = A_i Rx Ry Rz(Qe)`` for the link ``i`` carrying it.
    """
    links = jnp.asarray(model.end_point_link, dtype=jnp.int32)
    rotation = frames.rotation[links]
    position = frames.centroid[links] + matvec3(rotation, model.centroid_to_end_point)
    return position, matmul3(rotation, rpy_to_matrix(model.end_point_rpy))


@eqx.filter_jit
def forward_kinematics(model: Model, state: State) -> Kinematics:
    """Positions and orientations of all bodies, joints and end points.

    SpaceDyn's ``calc_aa``, ``calc_pos``, ``f_kin_j`` and ``f_kin_e`` in one call.

    Arguments:
        model: the system.
        state: its state (velocities are not used).

    Returns:
        :class:`Kinematics`, inertial frame, absolute positions.
    """
    check_state(model, state)
    frames = relative_frames(model, state.base_rotation, state.q)
    r0 = state.base_position
    end_position, end_rotation = end_point_frames(model, frames)
    return Kinematics(
        rotation=frames.rotation,
        centroid=frames.centroid + r0,
        joint_position=frames.joint_position + r0,
        joint_axis=frames.joint_axis,
        end_point_position=end_position + r0,
        end_point_rotation=end_rotation,
    )


# ------------------------------------------------------------------------------------------
# Spatial (twist) algebra about the inertial point that coincides with r0.


def motion_cross(twist: Array, motion: Array) -> Array:
    """Spatial cross product ``twist x motion`` of ``(..., 6)`` vectors ``(w, v_o)``."""
    w, v = twist[..., :3], twist[..., 3:]
    mw, mv = motion[..., :3], motion[..., 3:]
    return jnp.concatenate([cross3(w, mw), cross3(w, mv) + cross3(v, mw)], axis=-1)


def joint_motion_axes(model: Model, frames: Frames) -> Array:
    """``(n, 6)`` spatial axes ``s_i``: ``(k, p x k)`` for revolute, ``(0, k)`` for prismatic."""
    k, p = frames.joint_axis, frames.joint_position
    revolute = jnp.asarray(model.is_revolute)[:, None]
    angular = jnp.where(revolute, k, 0.0)
    linear = jnp.where(revolute, cross3(p, k), k)
    return jnp.concatenate([angular, linear], axis=-1)


def body_twists(model: Model, axes: Array, base_twist: Array, qd: Array) -> Array:
    """``(n + 1, 6)`` spatial twists ``(w_i, v_o,i)`` about r0 (inertial frame; rad/s, m/s) from
    the base twist ``(w0, v0)`` (eqs 3.8-3.9 and 3.12-3.13 as sums along the tree).

    Arguments:
        model: the system (``n`` joints).
        axes: ``(n, 6)`` joint motion axes about r0 (:func:`joint_motion_axes`).
        base_twist: ``(6,)`` base twist ``(w0, v0)`` (:func:`base_twist`).
        qd: ``(n,)`` joint rates, rad/s or m/s.
    """
    return propagate_down(model.tree, jnp.add, base_twist, axes * qd[:, None], jnp.zeros_like(base_twist))


def body_spatial_accelerations(
    model: Model, axes: Array, twists: Array, base_spatial_acceleration: Array, qd: Array, qdd: Array
) -> Array:
    """``(n + 1, 6)`` spatial accelerations about the inertial point at r0 (eqs 3.10-3.11 and
    3.14-3.15 as tree sums): ``a_i = a_B(i) + s_i qdd_i + (twist_i x s_i) qd_i``.

    Arguments:
        model: the system (``n`` joints).
        axes: ``(n, 6)`` joint motion axes about r0 (:func:`joint_motion_axes`).
        twists: ``(n + 1, 6)`` body twists (:func:`body_twists`).
        base_spatial_acceleration: ``(6,)`` the base's (:func:`base_spatial_acceleration`).
        qd, qdd: ``(n,)`` joint rates and accelerations.
    """
    increments = axes * qdd[:, None] + motion_cross(twists[1:], axes) * qd[:, None]
    return propagate_down(
        model.tree, jnp.add, base_spatial_acceleration, increments, jnp.zeros_like(base_spatial_acceleration)
    )


def base_twist(state: State) -> Array:
    """``(6,)`` spatial twist of the base about r0: ``(w0, v0)``."""
    return jnp.concatenate([state.base_angular_velocity, state.base_linear_velocity])


def base_spatial_acceleration(state: State, base_acceleration: Array) -> Array:
    """``(6,)`` spatial acceleration of the base about the inertial point at r0.

    ``(dw0/dt, dv0/dt - w0 x v0)``, from the classical ``base_acceleration = [dv0/dt, dw0/dt]``.
    """
    linear, angular = base_acceleration[:3], base_acceleration[3:]
    return jnp.concatenate([angular, linear - cross3(state.base_angular_velocity, state.base_linear_velocity)])


def point_velocity(twist: Array, point: Array) -> Array:
    """Velocity of the body-fixed point at ``point`` (relative to r0) of a body with ``twist``."""
    return twist[..., 3:] + cross3(twist[..., :3], point)


def point_acceleration(spatial_acceleration: Array, twist: Array, point: Array) -> Array:
    """Classical acceleration of a body-fixed point from spatial quantities about r0."""
    return (
        spatial_acceleration[..., 3:]
        + cross3(spatial_acceleration[..., :3], point)
        + cross3(twist[..., :3], point_velocity(twist, point))
    )


class KinematicPass(eqx.Module):
    """One root-to-leaves pass over the tree at a state: what every algorithm on the tree
    (Newton-Euler, the inertia matrix, Jacobians, momentum, contact and capture loads) starts
    from. Built by :func:`kinematic_pass`; positions are measured from the base centroid r0.

    Attributes:
        frames: body orientations, centroids, joint positions and axes (:class:`Frames`).
        axes: ``(n, 6)`` joint motion axes ``s_i`` about r0 (:func:`joint_motion_axes`).
        twists: ``(n + 1, 6)`` body twists ``(w_i, v_o,i)`` about r0 (:func:`body_twists`);
            ``[0]`` is the base's ``(w0, v0)``.
    """

    frames: Frames
    axes: Array
    twists: Array

    @property
    def centroid_velocities(self) -> Array:
        """``(n + 1, 3)`` centroid velocities ``v_i = v_o,i + w_i x r_i``, inertial frame, m/s."""
        return point_velocity(self.twists, self.frames.centroid)


def kinematic_pass(model: Model, state: State) -> KinematicPass:
    """Frames, joint motion axes and body twists of ``model`` at ``state`` (eqs 3.1, 3.8-3.9,
    3.12-3.13 as tree passes; see the module docstring). Under ``jit`` whatever a caller does
    not use (the twists, for a position-only algorithm) is removed by the compiler.

    Arguments:
        model: the system.
        state: its state (not checked here: the public entry points check it once).

    Returns:
        :class:`KinematicPass`.
    """
    frames = relative_frames(model, state.base_rotation, state.q)
    axes = joint_motion_axes(model, frames)
    return KinematicPass(frames, axes, body_twists(model, axes, base_twist(state), state.qd))


@eqx.filter_jit
def link_velocities(model: Model, state: State) -> tuple[Array, Array]:
    """Centroid linear and angular velocities of every body (SpaceDyn ``calc_vel``).

    Arguments:
        model: the system.
        state: its state.

    Returns:
        ``(linear, angular)``, each ``(n + 1, 3)``, inertial frame (m/s, rad/s); ``[0]`` is
        the base (``v0``, ``w0``).
    """
    check_state(model, state)
    motion = kinematic_pass(model, state)
    return motion.centroid_velocities, motion.twists[:, :3]


@eqx.filter_jit
def link_accelerations(
    model: Model, state: State, base_acceleration: Array | None = None, qdd: Array | None = None
) -> tuple[Array, Array]:
    """Centroid linear and angular accelerations of every body (SpaceDyn ``calc_acc``).

    Gravity is not included (as in SpaceDyn: it enters the dynamics only).

    Arguments:
        model: the system.
        state: its state.
        base_acceleration: ``(6,)`` ``[dv0/dt, dw0/dt]``, inertial frame (default zero).
        qdd: ``(n,)`` joint accelerations (default zero).

    Returns:
        ``(linear, angular)``, each ``(n + 1, 3)``, inertial frame (m/s^2, rad/s^2).
    """
    check_state(model, state)
    dtype = state.q.dtype
    base_acceleration = check_vector("base_acceleration", base_acceleration, (6,), dtype)
    qdd = check_vector("qdd", qdd, (model.num_joints,), dtype)
    motion = kinematic_pass(model, state)
    accelerations = body_spatial_accelerations(
        model, motion.axes, motion.twists, base_spatial_acceleration(state, base_acceleration), state.qd, qdd
    )
    return point_acceleration(accelerations, motion.twists, motion.frames.centroid), accelerations[:, :3]


def body_masses(model: Model) -> Array:
    """``(n + 1,)`` masses of the base and the links, kg."""
    return jnp.concatenate([model.base_mass[None], model.link_mass])


def body_inertias(model: Model) -> Array:
    """``(n + 1, 3, 3)`` inertia tensors of the base and links about their centroids, body frames."""
    return jnp.concatenate([model.base_inertia[None], model.link_inertia])


@eqx.filter_jit
def center_of_mass(model: Model, state: State) -> Array:
    """Centre of mass of the whole system, inertial frame, m; shape ``(3,)``."""
    check_state(model, state)
    frames = relative_frames(model, state.base_rotation, state.q)
    masses = body_masses(model)
    return state.base_position + jnp.sum(masses[:, None] * frames.centroid, axis=0) / jnp.sum(masses)


def world_inertias(model: Model, frames: Frames) -> Array:
    """``(n + 1, 3, 3)`` centroidal inertia of every body in the inertial frame, ``A I A^T``
    (symmetrised so that round-off never breaks the symmetry of the inertia matrix)."""
    rotated = matmul3(matmul3(frames.rotation, body_inertias(model)), transpose3(frames.rotation))
    return 0.5 * (rotated + jnp.swapaxes(rotated, -1, -2))


def subtree_mass_moments(model: Model, frames: Frames) -> tuple[Array, Array, Array]:
    """Mass, first moment and second moment (about r0) of the subtree of every body.

    Returns:
        ``mass (n + 1,)``, ``first_moment (n + 1, 3)`` (sum of m r, r from r0) and
        ``inertia (n + 1, 3, 3)``: inertia tensor about r0 in the inertial frame,
        ``sum A I A^T + m (|r|^2 E - r r^T)``; ``[0]`` covers the whole system.
    """
    masses = body_masses(model)
    r = frames.centroid
    rotated = world_inertias(model, frames)
    eye = jnp.eye(3, dtype=r.dtype)
    parallel_axis = masses[:, None, None] * (dot(r, r)[:, None, None] * eye - r[:, :, None] * r[:, None, :])
    return accumulate_up(model.tree, (masses, masses[:, None] * r, rotated + parallel_axis))
