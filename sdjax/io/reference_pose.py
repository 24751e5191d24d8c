"""Models described in a reference pose: every joint, centroid and end point given in the base
frame at ``q = 0`` (the way CAD data and URDF files describe robots).

The builder chooses each joint frame (z along the joint axis, x towards the next joint
where possible), then converts positions, inertias and end-point orientations into
SpaceDyn's link-relative quantities.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from sdjax._checks import ROTATION_TOL, check_index, is_traced, rotation_defect
from sdjax.io.inputs import real_numbers
from sdjax.model import MAX_MAGNITUDE, Model
from sdjax.rotation import matrix_to_rpy_numpy

__all__ = ["model_from_reference_pose"]

_OWNER = "model_from_reference_pose"


def _numbers(name: str, value: Any, shape: tuple[int, ...], hint: str = "") -> np.ndarray:
    """``value`` as a float64 NumPy array of exactly ``shape`` (never reshaped: a transposed or
    flattened array is refused), every entry finite and at most :data:`~sdjax.model.MAX_MAGNITUDE`
    in size. ``TypeError`` naming ``name`` for anything but concrete real numbers, ``ValueError``
    for a wrong shape (``hint`` says what the rows are) or a wrong entry (naming its row)."""
    where = f"{_OWNER}: {name}"
    if is_traced(value):
        raise TypeError(f"{where}: expected concrete numbers (the builder computes on the host), got a traced value")
    try:
        arr = real_numbers(value)
    except ValueError as err:  # (text, complex numbers, objects, ragged nesting: the argument's type)
        raise TypeError(f"{where}: {err}") from None
    if arr.shape != shape:
        note = f" ({hint})" if hint else ""
        raise ValueError(f"{where}: expected shape {shape}{note}, got shape {arr.shape}")
    ok = np.abs(arr) <= MAX_MAGNITUDE  # (False for NaN)
    if not np.all(ok):
        row = int(np.argwhere(~ok)[0][0]) if arr.ndim else None
        entry, shown = (where, arr) if row is None else (f"{where}[{row}]", arr[row])
        raise ValueError(f"{entry}: must be finite and at most {MAX_MAGNITUDE:g} in size, got {shown.tolist()}")
    return arr


def _rotations(name: str, value: Any, count: int) -> np.ndarray:
    """``value`` as ``count`` float64 proper rotation matrices ``(count, 3, 3)`` (orthonormal within
    :data:`~sdjax._checks.ROTATION_TOL`, or ``64 eps`` of a coarser given precision; det +1);
    ``ValueError`` naming ``name`` and the index of the first that is not one."""
    matrices = _numbers(name, value, (count, 3, 3), "one rotation per end point")
    given = np.asarray(value).dtype
    tolerance = max(ROTATION_TOL, 64 * float(np.finfo(given).eps)) if given.kind == "f" else ROTATION_TOL
    for e, matrix in enumerate(matrices):
        defect = rotation_defect(matrix, tolerance)
        if defect:
            raise ValueError(
                f"{_OWNER}: {name}[{e}]: expected a proper rotation matrix, got {matrix.tolist()}: {defect}"
            )
    return matrices


def _indices(name: str, values: Any, highest: Callable[[int], int], meaning: str) -> tuple[int, ...]:
    """``values`` as a tuple of Python ints, entry ``k`` in ``0..highest(k)``: integers or
    integer-valued numbers (as :class:`~sdjax.Model` takes its indices: a NumPy or JAX array
    of them, whole floats read from a file), ``TypeError`` for a fraction, a bool or text,
    ``ValueError`` out of range; ``TypeError`` naming ``name`` when ``values`` is not a sequence."""
    if is_traced(values) or isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{_OWNER}: {name}: expected a sequence of integers, got {type(values).__name__} {values!r}")
    out = []
    for k, value in enumerate(values):
        if np.shape(value) == () and not is_traced(value) and hasattr(value, "item"):
            value = value.item()  # (an entry of a NumPy or JAX array, as a Python number)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # (a whole number from a file or float array)
        out.append(check_index(f"{_OWNER}: {name}[{k}]", value, 0, highest(k), meaning))
    return tuple(out)


def _unit(name: str, v: np.ndarray) -> np.ndarray:
    """``v`` normalised; scaled by its largest entry first, so that neither a huge nor a tiny
    vector overflows or underflows the norm."""
    largest = float(np.max(np.abs(v)))
    if not largest > 0:
        raise ValueError(f"{_OWNER}: {name}: must be a non-zero vector, got {v.tolist()}")
    v = v / largest
    return v / np.linalg.norm(v)


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
        parent: ``(n,)`` parent body of each link (0 = base), integers, ``parent[i-1] < i``.
        joint_type: ``'R'``/``'P'`` per joint.
        joint_axis: ``(n, 3)`` joint axes (normalised here), base frame.
        joint_position: ``(n, 3)`` joint positions (prismatic: slider origin), base frame, m.
        link_centroid: ``(n, 3)`` link centroids, base frame, m.
        link_mass: ``(n,)`` kg.
        link_inertia: ``(n, 3, 3)`` inertia about each centroid, **base frame**, kg m^2.
        base_mass: kg. base_inertia: ``(3, 3)`` about the base centroid, base frame.
        end_point_link: ``(ne,)`` body carrying each end point (0 = base, 1..n = links), any
            number per body, in any order.
        end_point_position: ``(ne, 3)`` end points, base frame, m.
        end_point_rotation: ``(ne, 3, 3)`` end-point frames (columns = axes), base frame, proper
            rotations; default: parallel to the frame of the body carrying the end point.
        joint_stiffness, joint_damping, gravity, link_names, name, dtype: as in
            :class:`~sdjax.Model`.

    Returns:
        The model; its link frames have z on the joint axis and x towards the next joint
        (or the end point) when that direction is not along the axis.

    Raises:
        TypeError: a parent or end-point body that is not an integer; an array argument that is
            not real numbers.
        ValueError: a parent or end-point body out of range; an array argument of another shape
            (none is reshaped), with a non-finite entry or one beyond
            :data:`~sdjax.model.MAX_MAGNITUDE`; a zero joint axis; an end-point rotation that is
            not a proper rotation; any refusal of :class:`~sdjax.Model`.
    """
    parent = _indices("parent", parent, lambda k: k, "0 = base; a link's parent is numbered below it")
    n = len(parent)
    end_links = _indices("end_point_link", end_point_link, lambda e: n, f"0 = base, 1..{n} = links")
    ne = len(end_links)
    per_link, per_end = f"one per link, n = {n}", f"one per end point, ne = {ne}"
    axes = _numbers("joint_axis", joint_axis, (n, 3), per_link)
    joints = _numbers("joint_position", joint_position, (n, 3), per_link)
    centroids = _numbers("link_centroid", link_centroid, (n, 3), per_link)
    masses = _numbers("link_mass", link_mass, (n,), per_link)
    inertias = _numbers("link_inertia", link_inertia, (n, 3, 3), per_link)
    base_m = _numbers("base_mass", base_mass, ())
    base_i = _numbers("base_inertia", base_inertia, (3, 3))
    end_positions = (
        np.zeros((ne, 3))
        if end_point_position is None
        else _numbers("end_point_position", end_point_position, (ne, 3), per_end)
    )
    end_rotations = None if end_point_rotation is None else _rotations("end_point_rotation", end_point_rotation, ne)
    stiffness = None if joint_stiffness is None else _numbers("joint_stiffness", joint_stiffness, (n,), per_link)
    damping = None if joint_damping is None else _numbers("joint_damping", joint_damping, (n,), per_link)
    gravity_vector = None if gravity is None else _numbers("gravity", gravity, (3,))

    # Where each link "points": its first child joint, else its end point, else its centroid.
    targets = [None] * n
    for e, link in enumerate(end_links):
        if link > 0:
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
    for e, link in enumerate(end_links):  # (body 0, the base: its centroid at the origin, its frame the base frame)
        rot = rotations[link]
        centroid_to_end[e] = rot.T @ (end_positions[e] - body_centroids[link])
        if end_rotations is not None:
            end_rpy[e] = matrix_to_rpy_numpy(rot.T @ end_rotations[e])
    return Model(
        parent=parent,
        joint_type=tuple(joint_type),
        base_mass=base_m,
        base_inertia=base_i,
        link_mass=masses,
        link_inertia=local_inertia,
        parent_centroid_to_joint=parent_centroid_to_joint,
        centroid_to_joint=centroid_to_joint,
        joint_rpy=joint_rpy,
        end_point_link=end_links,
        centroid_to_end_point=centroid_to_end,
        end_point_rpy=end_rpy,
        joint_stiffness=stiffness,
        joint_damping=damping,
        gravity=gravity_vector,
        link_names=link_names,
        name=name,
        dtype=dtype,
    )
