"""Models described in a reference pose: every joint, centroid and end point given in the base
frame at ``q = 0`` (the way CAD data and URDF files describe robots).

The builder chooses each joint frame (z along the joint axis, x towards the next joint
where possible), then converts positions, inertias and end-point orientations into
SpaceDyn's link-relative quantities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.model import Model
from sdjax.rotation import matrix_to_rpy_numpy

__all__ = ["model_from_reference_pose"]


def _unit(name: str, v: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(v)
    if not norm > 0:
        raise ValueError(f"{name}: must be a non-zero vector, got {v.tolist()}")
    return v / norm


def _frame_with_z(z: np.ndarray, x_hint: Sequence[np.ndarray]) -> np.ndarray:
    """Rotation (columns x, y, z) with the given z; x is the first hint not parallel to z."""
    for hint in x_hint:
        x = hint - np.dot(hint, z) * z
        if np.linalg.norm(x) > 1e-9 * max(1.0, float(np.linalg.norm(hint))):
            x = x / np.linalg.norm(x)
            return np.column_stack([x, np.cross(z, x), z])
    raise AssertionError("unreachable: the base axes always provide a hint")


def model_from_reference_pose(
    parent: Sequence[int],
    joint_type: Sequence[str] | str,
    joint_axis: Any,
    joint_position: Any,
    link_centroid: Any,
    link_mass: Any,
    link_inertia: Any,
    base_mass: Any,
    base_inertia: Any,
    *,
    end_point_link: Sequence[int] = (),
    end_point_position: Any = None,
    end_point_rotation: Any = None,
    joint_stiffness: Any = None,
    joint_damping: Any = None,
    gravity: Any = None,
    link_names: Sequence[str] | None = None,
    name: str = "model",
    dtype: Any = None,
) -> Model:
    """Build a model from its reference pose (``q = 0``, base frame = inertial frame, base
    centroid at the origin).

    Arguments:
        parent: ``(n,)`` parent body of each link (0 = base), ``parent[i-1] < i``.
        joint_type: ``'R'``/``'P'`` per joint.
        joint_axis: ``(n, 3)`` joint axes (normalised here), base frame.
        joint_position: ``(n, 3)`` joint positions (prismatic: slider origin), base frame, m.
        link_centroid: ``(n, 3)`` link centroids, base frame, m.
        link_mass: ``(n,)`` kg.
        link_inertia: ``(n, 3, 3)`` inertia about each centroid, **base frame**, kg m^2.
        base_mass: kg. base_inertia: ``(3, 3)`` about the base centroid, base frame.
        end_point_link: links carrying end points (increasing).
        end_point_position: ``(ne, 3)`` end points, base frame, m.
        end_point_rotation: ``(ne, 3, 3)`` end-point frames (columns = axes), base frame;
            default: parallel to the link frame.
        joint_stiffness, joint_damping, gravity, link_names, name, dtype: as in
            :class:`~sdjax.Model`.

    Returns:
        The model; its link frames have z on the joint axis and x towards the next joint
        (or the end point) when that direction is not along the axis.
    """
    parent = tuple(int(p) for p in parent)
    n = len(parent)
    axes = np.asarray(joint_axis, dtype=np.float64).reshape(n, 3)
    joints = np.asarray(joint_position, dtype=np.float64).reshape(n, 3)
    centroids = np.asarray(link_centroid, dtype=np.float64).reshape(n, 3)
    inertias = np.asarray(link_inertia, dtype=np.float64).reshape(n, 3, 3)
    ne = len(end_point_link)
    end_positions = (
        np.zeros((ne, 3)) if end_point_position is None else np.asarray(end_point_position, np.float64).reshape(ne, 3)
    )
    for k, p in enumerate(parent):
        if not 0 <= p <= k:
            raise ValueError(f"parent[{k}]: link {k + 1} has parent {p}; parents must be lower-numbered (0 = base)")

    # Where each link "points": its first child joint, else its end point, else its centroid.
    targets = [None] * n
    for e, link in enumerate(end_point_link):
        targets[link - 1] = end_positions[e]
    for k in range(n - 1, -1, -1):
        if parent[k] > 0:
            targets[parent[k] - 1] = joints[k]
    base_axes = [np.eye(3)[0], np.eye(3)[1], np.eye(3)[2]]
    rotations = [np.eye(3)]  # body 0: the base frame
    for k in range(n):
        z = _unit(f"joint_axis[{k}]", axes[k])
        hints = []
        for target in (targets[k], centroids[k]):
            if target is not None:
                hints.append(np.asarray(target) - joints[k])
        hints.append(rotations[parent[k]][:, 0])
        rotations.append(_frame_with_z(z, hints + base_axes))
    body_centroids = np.vstack([np.zeros(3), centroids])

    parent_centroid_to_joint = (
        np.stack([rotations[parent[k]].T @ (joints[k] - body_centroids[parent[k]]) for k in range(n)])
        if n
        else np.zeros((0, 3))
    )
    centroid_to_joint = (
        np.stack([rotations[k + 1].T @ (joints[k] - centroids[k]) for k in range(n)]) if n else np.zeros((0, 3))
    )
    joint_rpy = (
        np.stack([matrix_to_rpy_numpy(rotations[parent[k]].T @ rotations[k + 1]) for k in range(n)])
        if n
        else np.zeros((0, 3))
    )
    local_inertia = (
        np.stack([rotations[k + 1].T @ inertias[k] @ rotations[k + 1] for k in range(n)]) if n else np.zeros((0, 3, 3))
    )
    centroid_to_end = np.zeros((ne, 3))
    end_rpy = np.zeros((ne, 3))
    for e, link in enumerate(end_point_link):
        rot = rotations[link]
        centroid_to_end[e] = rot.T @ (end_positions[e] - centroids[link - 1])
        if end_point_rotation is not None:
            end_rpy[e] = matrix_to_rpy_numpy(rot.T @ np.asarray(end_point_rotation, np.float64).reshape(ne, 3, 3)[e])
    return Model(
        parent=parent,
        joint_type=tuple(joint_type),
        base_mass=base_mass,
        base_inertia=base_inertia,
        link_mass=link_mass,
        link_inertia=local_inertia,
        parent_centroid_to_joint=parent_centroid_to_joint,
        centroid_to_joint=centroid_to_joint,
        joint_rpy=joint_rpy,
        end_point_link=tuple(end_point_link),
        centroid_to_end_point=centroid_to_end,
        end_point_rpy=end_rpy,
        joint_stiffness=joint_stiffness,
        joint_damping=joint_damping,
        gravity=gravity,
        link_names=link_names,
        name=name,
        dtype=dtype,
    )
