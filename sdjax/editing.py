"""Editing models: the algebra of rigid bodies, and the edits that change a model's bodies or tree.

This module owns every edit of a :class:`~sdjax.Model` that is more than replacing a field
(:func:`sdjax.edit_model` does that), after Pinocchio's ``algorithm/model.hpp``
(``appendModel``, ``buildReducedModel``):

- **inertial-parameter algebra** of rigid bodies: :func:`parallel_axis` (an inertia moved to
  another point), :func:`rotate_inertia` and :func:`transform_body` (a body expressed in another
  frame), :func:`combine_bodies` (rigid bodies joined into one), and the 10-parameter vector
  (:func:`inertial_vector`, :func:`from_inertial_vector`) that is linear in the dynamics, and
  its pseudo-inertia (:func:`pseudo_inertia`, :func:`from_pseudo_inertia`), positive definite
  exactly for the parameters of a physical body;
- **editing a body**: :func:`set_inertial_parameters` (replace bodies, keeping every frame where
  it is) and :func:`merge_payload` (a rigid payload welded to a body);
- **editing the tree**: :func:`append_links` (links given as arrays), :func:`append_model` (the
  tree of another model welded to a body, Pinocchio's ``appendModel``) and :func:`lock_joints`
  (joints locked at given positions, their links merged into their parents, Pinocchio's
  ``buildReducedModel``).

## Conventions

A *rigid body* is three arrays: its mass ``m`` (kg), its centroid ``c`` (m), a point given in
some frame ``F``, and its inertia about the centroid with the axes of ``F`` (kg m^2). Functions
that take several bodies take them in one frame; a frame change is :func:`transform_body`.

Model fields are SpaceDyn's (seed 000 sections 3.2-3.4, :class:`~sdjax.Model`): the data of a
body is measured from its centroid along its frame's axes: the link frame of link ``i``
(origin on joint ``i``, z along the joint axis) or the base frame (origin on the base
centroid). So a body's centroid moves when mass is merged into it: for a link only the stored
vectors from the centroid change (``centroid_to_joint``, its children's
``parent_centroid_to_joint``, its end points' ``centroid_to_end_point``), the link frame and every
joint and end point stay where they are, and a :class:`~sdjax.State` keeps its meaning. The base
frame is centred on the base centroid: merging mass into the base (body 0) moves the base frame's
origin to the new centroid ``d`` (base frame) from the old one, so the base position of a state
of the new model is ``r0 + A0 d`` and its base velocity ``v0 + w0 x (A0 d)``.

Bodies are numbered as in a model: 0 is the base, ``1..n`` the links; joint ``i`` moves link
``i``. Units are SI.

## Arrays

The body algebra takes NumPy or JAX arrays: NumPy in, NumPy out, computed in float64 whatever
JAX's x64 flag (the file readers use it); a JAX array in (or a tracer under ``jit``/``vmap``/
``grad``), JAX out. The model edits return a validated :class:`~sdjax.Model` (values are
checked when they are concrete) of the model's dtype; their arithmetic is differentiable in
every array (a payload's mass, a lock position) and the topology arguments are static.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax._checks import ROTATION_TOL, check_choice, check_index, check_type, float_array, is_traced, rotation_matrix
from sdjax.model import INERTIA_RTOL, JOINT_TYPES, LINK_FIELDS, MODEL_FIELDS, Model, edit_model, mimic_tolerance
from sdjax.rotation import matrix_to_rpy, rot_z, rpy_to_matrix
from sdjax.state import State, check_state

#: Names of the 10 inertial parameters of one body about a reference point, in the order of
#: :func:`inertial_vector`: the mass, the first moment ``h = m c`` and the inertia about the
#: reference point (Pinocchio's ``Inertia.toDynamicParameters`` holds the same numbers with the
#: inertia entries ordered ``xx, xy, yy, xz, yz, zz``).
PARAMETER_NAMES = ("m", "hx", "hy", "hz", "Ixx", "Iyy", "Izz", "Ixy", "Ixz", "Iyz")

# (row, column) of the inertia entries of a parameter vector, in PARAMETER_NAMES order.
_INERTIA_ENTRIES = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


# ------------------------------------------------------------------------------------------
# Arguments.


def _namespace(*values: Any) -> Any:
    """``jax.numpy`` if any value holds a JAX array (a tracer included), else ``numpy``."""
    return jnp if any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(values)) else np


def _floats(name: str, value: Any, trailing: tuple[int, ...], xp: Any, sign: str | None = None) -> Any:
    """``value`` checked (numbers, finite, ``sign``; shape ``(..., *trailing)``) as an array of
    the namespace ``xp`` (NumPy: float64)."""
    arr = float_array(name, value, sign=sign)
    if arr.ndim < len(trailing) or tuple(arr.shape[arr.ndim - len(trailing) :]) != trailing:
        dims = ", ".join(["..."] + [str(s) for s in trailing])
        raise ValueError(f"{name}: expected shape ({dims}), got shape {tuple(arr.shape)}")
    return arr if xp is jnp else np.asarray(value, np.float64)


def _body_index(name: str, model: Model, body: Any, *, allow_base: bool = True) -> int:
    check_type(f"{name.split(':')[0]}: model", model, Model, "a sdjax.Model")  # (an AttributeError below)
    what = "0 = base, 1..n = links" if allow_base else "joints 1..n"
    return check_index(name, body, 0 if allow_base else 1, model.num_joints, f"{what} of model {model.name!r}")


def _body_indices(name: str, model: Model, bodies: Any, *, allow_base: bool = True) -> tuple[int, ...]:
    if isinstance(bodies, (int, np.integer)) and not isinstance(bodies, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a sequence of indices, got the int {bodies!r} (write ({bodies},))")
    out = tuple(_body_index(f"{name}[{k}]", model, b, allow_base=allow_base) for k, b in enumerate(bodies))
    repeated = sorted({b for b in out if out.count(b) > 1})
    if repeated:
        raise ValueError(f"{name}: {repeated} listed more than once")
    return out


def _rotation_argument(name: str, rpy: Any, rotation: Any, dtype: Any) -> Array | None:
    """The rotation given by ``rpy`` (SpaceDyn ``Rx Ry Rz``) or ``rotation`` (a checked rotation
    matrix), or ``None`` when neither is given (the identity)."""
    if rpy is not None and rotation is not None:
        raise ValueError(f"{name}: give rpy or rotation, not both")
    if rotation is not None:
        return rotation_matrix(f"{name}: rotation", rotation, dtype)
    if rpy is not None:
        return rpy_to_matrix(float_array(f"{name}: rpy", rpy, shape=(3,), dtype=dtype))
    return None


# ------------------------------------------------------------------------------------------
# Inertial-parameter algebra.


def _parallel_axis(xp: Any, mass: Any, offset: Any) -> Any:
    eye = xp.eye(3, dtype=offset.dtype)
    square = xp.sum(offset * offset, axis=-1)[..., None, None] * eye - offset[..., :, None] * offset[..., None, :]
    return mass[..., None, None] * square


def parallel_axis(mass: Any, offset: Any) -> Any:
    """Inertia of a point mass ``m`` at ``d`` about the origin: ``m (|d|^2 E - d d^T)``.

    The parallel-axis (Huygens-Steiner) theorem: a body of mass ``m`` with inertia ``I_c`` about
    its centroid has the inertia ``I_c + parallel_axis(m, c - o)`` about a point ``o``, with the
    same axes (``c - o``: the centroid from ``o``).

    Arguments:
        mass: ``(...)`` masses, kg (non-negative).
        offset: ``(..., 3)`` the point masses' positions from the reference point, m.

    Returns:
        ``(..., 3, 3)`` inertia tensors, kg m^2 (NumPy float64 for NumPy input).

    Raises:
        ValueError: a negative or non-finite mass, an offset whose last axis is not 3.
    """
    xp = _namespace(mass, offset)
    m = _floats("parallel_axis: mass", mass, (), xp, sign="non-negative")
    d = _floats("parallel_axis: offset", offset, (3,), xp)
    return _parallel_axis(xp, m, d)


def _product(xp: Any, a: Any, b: Any) -> Any:
    """``a @ b`` in the arrays' namespace: NumPy's (float64, NumPy out) or at full precision."""
    return np.matmul(a, b) if xp is np else matmul(a, b)


def _rotate(xp: Any, rotation: Any, inertia: Any) -> Any:
    return _product(xp, _product(xp, rotation, inertia), rotation.swapaxes(-1, -2))


def rotate_inertia(inertia: Any, rotation: Any) -> Any:
    """An inertia tensor with the axes of frame ``B`` re-expressed with the axes of frame ``A``:
    ``R I R^T``.

    Arguments:
        inertia: ``(..., 3, 3)`` inertia about a point, axes of ``B``, kg m^2.
        rotation: ``(..., 3, 3)`` rotation ``R`` from ``B`` to ``A`` (its columns are ``B``'s axes
            in ``A``: ``x_A = R x_B``).

    Returns:
        ``(..., 3, 3)`` the same inertia, about the same point, axes of ``A``.
    """
    xp = _namespace(inertia, rotation)
    i = _floats("rotate_inertia: inertia", inertia, (3, 3), xp)
    r = _floats("rotate_inertia: rotation", rotation, (3, 3), xp)
    return _rotate(xp, r, i)


def transform_body(
    mass: Any, centroid: Any, inertia: Any, rotation: Any, translation: Any = None
) -> tuple[Any, Any, Any]:
    """A rigid body given in frame ``B``, expressed in frame ``A`` (Pinocchio's ``M.act(I)``).

    Arguments:
        mass: ``(...)`` masses, kg.
        centroid: ``(..., 3)`` centroids in ``B``, m.
        inertia: ``(..., 3, 3)`` inertias about the centroids, axes of ``B``, kg m^2.
        rotation: ``(..., 3, 3)`` rotation ``R`` from ``B`` to ``A``.
        translation: ``(..., 3)`` origin of ``B`` in ``A``, m (default zero), so that a point
            is ``x_A = R x_B + t``.

    Returns:
        ``(mass, R c + t, R I R^T)``: the body in ``A``.
    """
    xp = _namespace(mass, centroid, inertia, rotation, translation)
    m = _floats("transform_body: mass", mass, (), xp, sign="non-negative")
    c = _floats("transform_body: centroid", centroid, (3,), xp)
    i = _floats("transform_body: inertia", inertia, (3, 3), xp)
    r = _floats("transform_body: rotation", rotation, (3, 3), xp)
    moved = _product(xp, r, c[..., None])[..., 0]
    if translation is not None:
        moved = moved + _floats("transform_body: translation", translation, (3,), xp)
    return m, moved, _rotate(xp, r, i)


def _combine(xp: Any, mass: Any, centroid: Any, inertia: Any) -> tuple[Any, Any, Any]:
    total = xp.sum(mass, axis=-1)
    first_moment = xp.sum(mass[..., None] * centroid, axis=-2)
    positive = total > 0
    safe = xp.where(positive, total, xp.ones_like(total))  # a massless union: its origin, no division
    combined = xp.where(positive[..., None], first_moment / safe[..., None], xp.zeros_like(first_moment))
    offset = centroid - combined[..., None, :]
    return total, combined, xp.sum(inertia + _parallel_axis(xp, mass, offset), axis=-3)


def combine_bodies(mass: Any, centroid: Any, inertia: Any) -> tuple[Any, Any, Any]:
    """The rigid union of ``k`` bodies given in one frame ``F``.

    The mass is ``M = sum m_k``, the centroid ``c = sum m_k c_k / M`` and the inertia about it
    ``I = sum I_k + m_k (|d_k|^2 E - d_k d_k^T)``, ``d_k = c_k - c`` (parallel-axis theorem),
    with the axes of ``F``. A massless union (``M = 0``) has its "centroid" at the origin of ``F``
    and the sum of the inertias.

    Arguments:
        mass: ``(..., k)`` masses, kg (non-negative).
        centroid: ``(..., k, 3)`` centroids in ``F``, m.
        inertia: ``(..., k, 3, 3)`` inertias about the centroids, axes of ``F``, kg m^2.

    Returns:
        ``(mass (...), centroid (..., 3), inertia (..., 3, 3))`` of the union, in ``F``.

    Raises:
        ValueError: shapes that do not agree, a negative or non-finite value.
    """
    xp = _namespace(mass, centroid, inertia)
    m = _floats("combine_bodies: mass", mass, (), xp, sign="non-negative")
    c = _floats("combine_bodies: centroid", centroid, (3,), xp)
    i = _floats("combine_bodies: inertia", inertia, (3, 3), xp)
    if m.ndim < 1 or c.shape != m.shape + (3,) or i.shape != m.shape + (3, 3):
        raise ValueError(
            f"combine_bodies: expected shapes (..., k), (..., k, 3), (..., k, 3, 3), got {tuple(m.shape)}, "
            f"{tuple(c.shape)}, {tuple(i.shape)}"
        )
    return _combine(xp, m, c, i)


def inertial_vector(mass: Any, centroid: Any, inertia: Any) -> Any:
    """The 10 inertial parameters of bodies about their frame origins (order
    :data:`PARAMETER_NAMES`): ``[m, m c, I_o]``, ``I_o = I + m (|c|^2 E - c c^T)`` the inertia
    about the origin. The dynamics are linear in them (the basis of identification).

    Arguments:
        mass: ``(...)`` masses, kg.
        centroid: ``(..., 3)`` centroids from the frame origin, m.
        inertia: ``(..., 3, 3)`` inertias about the centroids, frame axes, kg m^2.

    Returns:
        ``(..., 10)`` parameter vectors.
    """
    xp = _namespace(mass, centroid, inertia)
    m = _floats("inertial_vector: mass", mass, (), xp, sign="non-negative")
    c = _floats("inertial_vector: centroid", centroid, (3,), xp)
    i = _floats("inertial_vector: inertia", inertia, (3, 3), xp)
    about_origin = i + _parallel_axis(xp, m, c)
    entries = xp.stack([about_origin[..., r, s] for r, s in _INERTIA_ENTRIES], axis=-1)
    return xp.concatenate([m[..., None], m[..., None] * c, entries], axis=-1)


def from_inertial_vector(vector: Any) -> tuple[Any, Any, Any]:
    """Inverse of :func:`inertial_vector`: ``(mass, centroid, inertia about the centroid)``.

    Arguments:
        vector: ``(..., 10)`` parameters (order :data:`PARAMETER_NAMES`) about a frame origin.

    Returns:
        ``mass (...)`` kg, ``centroid (..., 3)`` from the origin, m (``h / m``; the origin for a
        massless body) and ``inertia (..., 3, 3)`` about the centroid, kg m^2. Parameters of no
        rigid body (``to_log_cholesky`` of :mod:`sdjax.identification` tells) give what the
        formulas give.
    """
    xp = _namespace(vector)
    v = _floats("from_inertial_vector: vector", vector, (10,), xp)
    mass, first_moment = v[..., 0], v[..., 1:4]
    xx, yy, zz, xy, xz, yz = (v[..., 4 + k] for k in range(6))
    about_origin = xp.stack(
        [xp.stack([xx, xy, xz], axis=-1), xp.stack([xy, yy, yz], axis=-1), xp.stack([xz, yz, zz], axis=-1)], axis=-2
    )
    positive = mass != 0
    safe = xp.where(positive, mass, xp.ones_like(mass))
    centroid = xp.where(positive[..., None], first_moment / safe[..., None], xp.zeros_like(first_moment))
    return mass, centroid, about_origin - _parallel_axis(xp, mass, centroid)


def pseudo_inertia(mass: Any, first_moment: Any, inertia: Any) -> Any:
    """The ``4 x 4`` pseudo-inertia of bodies: ``J = [[Sigma, h], [h^T, m]]``,
    ``Sigma = tr(I_o)/2 E - I_o`` (Wensing, Kim and Slotine 2017).

    ``J`` is the second moment of the mass distribution in homogeneous coordinates,
    ``J = integral [x; 1][x; 1]^T dm`` (a point mass ``m`` at ``c``: ``m [c; 1][c; 1]^T``), so it
    is positive definite exactly when the parameters belong to a rigid body with a positive mass
    and a mass distribution that is not flat; it is linear in the 10 parameters.

    Arguments:
        mass: ``(...)`` masses, kg (any sign: the test of an estimate is what ``J`` is for).
        first_moment: ``(..., 3)`` first moments ``h = m c`` about the frame origin, kg m.
        inertia: ``(..., 3, 3)`` inertias ``I_o`` about the frame origin, frame axes, kg m^2.

    Returns:
        ``(..., 4, 4)`` pseudo-inertias, SI units (NumPy float64 for NumPy input).

    Raises:
        ValueError: leading shapes that differ, a non-finite value.
    """
    xp = _namespace(mass, first_moment, inertia)
    m = _floats("pseudo_inertia: mass", mass, (), xp)
    h = _floats("pseudo_inertia: first_moment", first_moment, (3,), xp)
    i = _floats("pseudo_inertia: inertia", inertia, (3, 3), xp)
    if h.shape != m.shape + (3,) or i.shape != m.shape + (3, 3):
        raise ValueError(
            f"pseudo_inertia: expected shapes (...), (..., 3), (..., 3, 3), got {tuple(m.shape)}, "
            f"{tuple(h.shape)}, {tuple(i.shape)}"
        )
    eye = xp.eye(3, dtype=i.dtype)
    sigma = 0.5 * xp.trace(i, axis1=-2, axis2=-1)[..., None, None] * eye - i
    top = xp.concatenate([sigma, h[..., :, None]], axis=-1)
    bottom = xp.concatenate([h, m[..., None]], axis=-1)[..., None, :]
    return xp.concatenate([top, bottom], axis=-2)


def from_pseudo_inertia(pseudo: Any) -> tuple[Any, Any, Any]:
    """Inverse of :func:`pseudo_inertia`: ``(mass, first_moment, inertia about the origin)``,
    ``I_o = tr(Sigma) E - Sigma`` from the upper-left block (the upper-right column gives ``h``).

    Arguments:
        pseudo: ``(..., 4, 4)`` pseudo-inertias.

    Returns:
        ``mass (...)`` kg, ``first_moment (..., 3)`` kg m, ``inertia (..., 3, 3)`` about the frame
        origin, kg m^2.
    """
    xp = _namespace(pseudo)
    j = _floats("from_pseudo_inertia: pseudo", pseudo, (4, 4), xp)
    sigma = j[..., :3, :3]
    eye = xp.eye(3, dtype=j.dtype)
    inertia = xp.trace(sigma, axis1=-2, axis2=-1)[..., None, None] * eye - sigma
    return j[..., 3, 3], j[..., :3, 3], inertia


# ------------------------------------------------------------------------------------------
# Editing the bodies of a model: on a dict of its constructor fields (MODEL_FIELDS).


def _fields(model: Model) -> dict[str, Any]:
    return {field: getattr(model, field) for field in MODEL_FIELDS}


def _body_mass(fields: dict[str, Any], body: int) -> tuple[Array, Array]:
    if body == 0:
        return fields["base_mass"], fields["base_inertia"]
    return fields["link_mass"][body - 1], fields["link_inertia"][body - 1]


def _set_body(fields: dict[str, Any], body: int, mass: Array, shift: Array, inertia: Array) -> None:
    """Give ``body`` a new mass, centroid (``shift`` from the old one, body axes) and inertia
    about it, moving the vectors from its centroid so every frame stays where it is."""
    if body == 0:
        fields["base_mass"], fields["base_inertia"] = mass, inertia
    else:
        k = body - 1
        fields["link_mass"] = fields["link_mass"].at[k].set(mass)
        fields["link_inertia"] = fields["link_inertia"].at[k].set(inertia)
        fields["centroid_to_joint"] = fields["centroid_to_joint"].at[k].add(-shift)
    children = [j for j, p in enumerate(fields["parent"]) if p == body]
    if children:
        fields["parent_centroid_to_joint"] = fields["parent_centroid_to_joint"].at[jnp.asarray(children)].add(-shift)
    ends = [e for e, b in enumerate(fields["end_point_link"]) if b == body]
    if ends:
        fields["centroid_to_end_point"] = fields["centroid_to_end_point"].at[jnp.asarray(ends)].add(-shift)


def _merge(fields: dict[str, Any], body: int, mass: Array, centroid: Array, inertia: Array) -> Array:
    """Weld a rigid body (centroid from ``body``'s centroid, ``body``'s axes) to ``body``; returns
    ``(3,)`` the shift of ``body``'s centroid (its axes)."""
    own_mass, own_inertia = _body_mass(fields, body)
    masses = jnp.stack([own_mass, mass])
    centroids = jnp.stack([jnp.zeros_like(centroid), centroid])
    total, shift, union = _combine(jnp, masses, centroids, jnp.stack([own_inertia, inertia]))
    _set_body(fields, body, total, shift, 0.5 * (union + union.T))
    return shift


def set_inertial_parameters(model: Model, bodies: Sequence[int], mass: Any, centroid: Any, inertia: Any) -> Model:
    """``model`` with the rigid bodies of ``bodies`` replaced, every frame kept where it is.

    Body ``b`` gets mass ``mass[k]``, its centroid moves to ``centroid[k]`` from its current
    centroid (body axes) and its inertia about the new centroid is ``inertia[k]``; the vectors
    measured from its centroid (``centroid_to_joint``, its children's
    ``parent_centroid_to_joint``, its end points' ``centroid_to_end_point``) move by
    ``-centroid[k]``, so joints and end points stay put (for the base, see the module docstring:
    its frame's origin moves). What identification puts into a model.

    Arguments:
        model: the system.
        bodies: static sequence of ``k`` distinct bodies (0 = base, 1..n = links).
        mass: ``(k,)`` new masses, kg.
        centroid: ``(k, 3)`` new centroids from the current ones, body axes, m.
        inertia: ``(k, 3, 3)`` inertias about the new centroids, body axes, kg m^2.

    Returns:
        The edited :class:`~sdjax.Model` (validated when its values are concrete).

    Raises:
        TypeError, ValueError: a body out of range or repeated, wrong shapes, non-finite or
            negative masses; the model's validation (e.g. a tensor no body can have).
    """
    indices = _body_indices("set_inertial_parameters: bodies", model, bodies)
    k, dtype = len(indices), model.dtype
    m = float_array("set_inertial_parameters: mass", mass, shape=(k,), dtype=dtype, sign="non-negative")
    c = float_array("set_inertial_parameters: centroid", centroid, shape=(k, 3), dtype=dtype)
    i = float_array("set_inertial_parameters: inertia", inertia, shape=(k, 3, 3), dtype=dtype)
    fields = _fields(model)
    for row, body in enumerate(indices):
        _set_body(fields, body, m[row], c[row], i[row])
    return edit_model(model, **fields)


def merge_payload(model: Model, body: int, mass: Any, centroid: Any = (0.0, 0.0, 0.0), inertia: Any = None) -> Model:
    """``model`` with a rigid payload welded to ``body`` (merged into it).

    The body's mass becomes ``m + mp``, its centroid moves by ``d = mp r / (m + mp)`` (``r`` the
    payload centroid, body axes) and its inertia about the new centroid is
    ``I + m (|d|^2 E - d d^T) + Ip + mp (|r - d|^2 E - (r - d)(r - d)^T)``
    (:func:`combine_bodies`); joints and end points stay where they are
    (:func:`set_inertial_parameters`). Welding to the base moves its frame's origin (module
    docstring). Works under ``jit``, ``vmap`` and ``grad`` (the Monte Carlo payloads).

    Arguments:
        model: the system.
        body: static body index (0 = base, 1..n = links).
        mass: ``()`` payload mass ``mp``, kg (non-negative).
        centroid: ``(3,)`` payload centroid ``r`` from the body's centroid, body axes, m.
        inertia: ``(3, 3)`` payload inertia ``Ip`` about its centroid, body axes, kg m^2
            (default zero: a point mass).

    Returns:
        The edited :class:`~sdjax.Model`.
    """
    where = _body_index("merge_payload: body", model, body)
    dtype = model.dtype
    mp = float_array("merge_payload: mass", mass, shape=(), dtype=dtype, sign="non-negative")
    r = float_array("merge_payload: centroid", centroid, shape=(3,), dtype=dtype)
    ip = jnp.zeros((3, 3), dtype) if inertia is None else float_array("merge_payload: inertia", inertia, shape=(3, 3))
    if not is_traced(ip):  # (the merged body's tensor is symmetrised: an asymmetric one would be changed silently)
        asymmetry = float(jnp.max(jnp.abs(ip - ip.T)))
        tolerance = max(INERTIA_RTOL, 64 * float(jnp.finfo(ip.dtype).eps))  # (a float32 rotated tensor: ~1e-8)
        if asymmetry > tolerance * float(jnp.max(jnp.abs(ip))):
            raise ValueError(f"merge_payload: inertia: not symmetric (largest |I - I^T| entry {asymmetry:.3g})")
    fields = _fields(model)
    _merge(fields, where, mp, r, ip.astype(dtype))
    return edit_model(model, **fields)


# ------------------------------------------------------------------------------------------
# Editing the tree.


def _names(name: str, given: Sequence[str] | None, default: tuple[str, ...], taken: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(given, str):
        raise TypeError(f"{name}: expected a sequence of names, got the string {given!r}")
    names = default if given is None else tuple(given)
    if len(names) != len(default):
        raise ValueError(f"{name}: expected {len(default)} names, got {len(names)}")
    for k, s in enumerate(names):
        if not isinstance(s, str):
            raise TypeError(f"{name}[{k}]: expected a string, got {type(s).__name__} {s!r}")
        if not s:
            raise ValueError(f"{name}[{k}]: expected a non-empty string, got {s!r}")
        if s in taken or s in names[:k]:
            raise ValueError(f"{name}[{k}]: {s!r} is already used; names must be unique (existing: {list(taken)})")
    return names


def append_links(
    model: Model,
    parent: Sequence[int],
    joint_type: Sequence[str] | str,
    *,
    link_mass: Any,
    link_inertia: Any,
    parent_centroid_to_joint: Any,
    centroid_to_joint: Any,
    joint_rpy: Any = None,
    joint_stiffness: Any = None,
    joint_damping: Any = None,
    link_names: Sequence[str] | None = None,
    end_point_link: Sequence[int] = (),
    centroid_to_end_point: Any = None,
    end_point_rpy: Any = None,
    end_point_names: Sequence[str] | None = None,
) -> Model:
    """``model`` with ``k`` links (and end points) appended, given as :class:`~sdjax.Model` arrays.

    The new links are ``n + 1 .. n + k``, in order. Their parents are bodies of the *result*:
    a body of ``model`` (0 = base, 1..n) or a link appended before them (``parent[i] < n + 1 +
    i``), so a chain of new links hangs on ``model`` by its first link. Every array is in the
    Model's convention (the parent's data from the parent's centroid, parent axes). Everything
    of ``model`` (end points, gravity, base mode, names, dtype) is kept; new end points come after
    its own.

    Arguments:
        model: the system to extend (``n`` links, ``ne`` end points).
        parent: ``(k,)`` static parent bodies, as described.
        joint_type: ``k`` joint types, ``'R'`` or ``'P'`` (a string ``"RRP"`` or a sequence).
        link_mass: ``(k,)`` masses, kg.
        link_inertia: ``(k, 3, 3)`` inertias about the link centroids, link axes, kg m^2.
        parent_centroid_to_joint: ``(k, 3)`` from the parent's centroid to each joint, parent
            axes, m.
        centroid_to_joint: ``(k, 3)`` from each link's centroid to its joint, link axes, m.
        joint_rpy: ``(k, 3)`` joint frames' RPY angles in their parents' frames, rad (default 0).
        joint_stiffness: ``(k,)`` passive stiffness (default 0).
        joint_damping: ``(k,)`` passive damping (default 0).
        link_names: ``k`` new unique names (default ``link{n + 1}``, ...).
        end_point_link: ``(ke,)`` static bodies of the result carrying new end points.
        centroid_to_end_point: ``(ke, 3)`` from the body centroid to each end point, body axes, m.
        end_point_rpy: ``(ke, 3)`` RPY angles of the end-point frames in their body frames, rad.
        end_point_names: ``ke`` new unique names (default ``end_point{ne + 1}``, ...).

    Returns:
        A new :class:`~sdjax.Model` with ``n + k`` links and ``ne + ke`` end points.

    Raises:
        TypeError, ValueError: naming the argument: a parent or end-point body out of range, an
            unknown joint type, wrong shapes, negative masses, a repeated or existing name; the
            model's validation.
    """
    n, ne, dtype = model.num_joints, model.num_end_points, model.dtype
    parents = tuple(parent)
    k = len(parents)
    for i, p in enumerate(parents):
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, (int, np.integer)):
            raise TypeError(f"append_links: parent[{i}] must be a static int, got {p!r}")
        if not 0 <= p <= n + i:
            raise ValueError(
                f"append_links: parent[{i}] = {p} is neither a body of model {model.name!r} (0..{n}) nor an "
                f"earlier appended link ({n + 1}..{n + i}): expected 0..{n + i}"
            )
    types = tuple(joint_type)
    if len(types) != k:
        raise ValueError(f"append_links: joint_type expected {k} joint types (one per parent), got {len(types)}")
    for i, t in enumerate(types):
        check_choice(f"append_links: joint_type[{i}]", t, JOINT_TYPES, "joint type")
    ends = tuple(end_point_link)
    for e, b in enumerate(ends):
        check_index(f"append_links: end_point_link[{e}]", b, 0, n + k, "the bodies of the result")
    ke = len(ends)

    def array(name: str, value: Any, shape: tuple[int, ...], sign: str | None = None) -> Array:
        if value is None:
            return jnp.zeros(shape, dtype)
        return float_array(f"append_links: {name}", value, shape=shape, dtype=dtype, sign=sign)

    names = _names(
        "append_links: link_names", link_names, tuple(f"link{n + i + 1}" for i in range(k)), model.link_names
    )
    end_names = _names(
        "append_links: end_point_names",
        end_point_names,
        tuple(f"end_point{ne + e + 1}" for e in range(ke)),
        model.end_point_names,
    )
    new = dict(
        link_mass=array("link_mass", link_mass, (k,), "non-negative"),
        link_inertia=array("link_inertia", link_inertia, (k, 3, 3)),
        parent_centroid_to_joint=array("parent_centroid_to_joint", parent_centroid_to_joint, (k, 3)),
        centroid_to_joint=array("centroid_to_joint", centroid_to_joint, (k, 3)),
        joint_rpy=array("joint_rpy", joint_rpy, (k, 3)),
        joint_stiffness=array("joint_stiffness", joint_stiffness, (k,), "non-negative"),
        joint_damping=array("joint_damping", joint_damping, (k,), "non-negative"),
        centroid_to_end_point=array("centroid_to_end_point", centroid_to_end_point, (ke, 3)),
        end_point_rpy=array("end_point_rpy", end_point_rpy, (ke, 3)),
        mimic_multiplier=jnp.ones((k,), model.dtype),
        mimic_offset=jnp.zeros((k,), model.dtype),
    )
    fields = _fields(model)
    for field, value in new.items():
        fields[field] = jnp.concatenate([fields[field], value])
    fields.update(
        parent=model.parent + parents,
        mimic_leader=model.mimic_leader + (0,) * k,
        joint_type=model.joint_type + types,
        link_names=model.link_names + names,
        end_point_link=model.end_point_link + ends,
        end_point_names=model.end_point_names + end_names,
    )
    return edit_model(model, **fields)


def _rotated_rpy(rotation: Array, rpy: Array) -> Array:
    """RPY angles of ``rotation @ Rx Ry Rz(rpy)`` (a frame carried into another frame)."""
    return matrix_to_rpy(matmul(rotation, rpy_to_matrix(rpy)))


def append_model(
    model: Model,
    other: Model,
    body: int = 0,
    *,
    position: Any = (0.0, 0.0, 0.0),
    rpy: Any = None,
    rotation: Any = None,
    prefix: str = "",
) -> Model:
    """``model`` with the tree of ``other`` welded to ``body`` (Pinocchio's ``appendModel``).

    ``other``'s base is placed on ``body`` (its centroid at ``position`` from the body's centroid,
    its frame rotated by ``rotation = Rx Ry Rz(rpy)`` from the body's frame) and merged into it
    (:func:`merge_payload`); ``other``'s links become links ``n + 1 .. n + n_other`` (its links
    on the base hang on ``body``), its end points follow ``model``'s (those on its base are on
    ``body``). Names get ``prefix``. ``model``'s base mode, gravity, name, inertia check and
    dtype are kept; ``other``'s are not used. At the new joints' zero positions the appended
    tree has ``other``'s shape.

    Arguments:
        model: the system to extend (``n`` links).
        other: the tree to append.
        body: static body of ``model`` carrying it (0 = base, 1..n = links).
        position: ``(3,)`` ``other``'s base centroid from ``body``'s centroid, body axes, m.
        rpy: ``(3,)`` SpaceDyn RPY angles of ``other``'s base frame in ``body``'s frame, rad.
        rotation: ``(3, 3)`` the same as a rotation matrix (``other``'s base axes in ``body``'s
            frame), instead of ``rpy``; default identity.
        prefix: prepended to ``other``'s link and end-point names (e.g. ``"arm2/"``).

    Returns:
        A new :class:`~sdjax.Model` with ``n + n_other`` links.

    Raises:
        TypeError, ValueError: a body out of range, a wrong shape, both ``rpy`` and ``rotation``,
            a matrix that is no rotation, names that clash (give a ``prefix``).
    """
    if not isinstance(other, Model):
        raise TypeError(f"append_model: other must be a sdjax.Model, got {type(other).__name__}")
    if not isinstance(prefix, str):
        raise TypeError(f"append_model: prefix must be a string, got {type(prefix).__name__}")
    where = _body_index("append_model: body", model, body)
    n, dtype = model.num_joints, model.dtype
    offset = float_array("append_model: position", position, shape=(3,), dtype=dtype)
    mount = _rotation_argument("append_model", rpy, rotation, dtype)
    on_base = np.asarray([p == 0 for p in other.parent], bool)
    pcj = other.parent_centroid_to_joint.astype(dtype)
    joint_rpy = other.joint_rpy.astype(dtype)
    ends_on_base = np.asarray([b == 0 for b in other.end_point_link], bool)
    cte = other.centroid_to_end_point.astype(dtype)
    end_rpy = other.end_point_rpy.astype(dtype)
    base_inertia = other.base_inertia.astype(dtype)
    if mount is not None:
        pcj = jnp.where(on_base[:, None], matmul(mount, pcj[..., None])[..., 0], pcj)
        joint_rpy = jnp.where(on_base[:, None], _rotated_rpy(mount, joint_rpy), joint_rpy)
        cte = jnp.where(ends_on_base[:, None], matmul(mount, cte[..., None])[..., 0], cte)
        end_rpy = jnp.where(ends_on_base[:, None], _rotated_rpy(mount, end_rpy), end_rpy)
        base_inertia = _rotate(jnp, mount, base_inertia)
    pcj = jnp.where(on_base[:, None], pcj + offset, pcj)
    cte = jnp.where(ends_on_base[:, None], cte + offset, cte)
    clash = sorted(set(model.link_names) & {prefix + s for s in other.link_names})
    clash += sorted(set(model.end_point_names) & {prefix + s for s in other.end_point_names})
    if clash:
        hint = "" if prefix else "; give a prefix"
        raise ValueError(f"append_model: names {clash} of {other.name!r} are already used in {model.name!r}{hint}")
    appended = append_links(
        model,
        tuple(where if p == 0 else n + p for p in other.parent),
        other.joint_type,
        link_mass=other.link_mass.astype(dtype),
        link_inertia=other.link_inertia.astype(dtype),
        parent_centroid_to_joint=pcj,
        centroid_to_joint=other.centroid_to_joint.astype(dtype),
        joint_rpy=joint_rpy,
        joint_stiffness=other.joint_stiffness.astype(dtype),
        joint_damping=other.joint_damping.astype(dtype),
        link_names=tuple(prefix + s for s in other.link_names),
        end_point_link=tuple(where if b == 0 else n + b for b in other.end_point_link),
        centroid_to_end_point=cte,
        end_point_rpy=end_rpy,
        end_point_names=tuple(prefix + s for s in other.end_point_names),
    )
    fields = _fields(appended)
    _merge(fields, where, other.base_mass.astype(dtype), offset, base_inertia)
    if other.has_mimic:  # the appended model's mimic joints, renumbered
        fields["mimic_leader"] = model.mimic_leader + tuple(
            n + leader if leader else 0 for leader in other.mimic_leader
        )
        fields["mimic_multiplier"] = jnp.concatenate([model.mimic_multiplier, other.mimic_multiplier.astype(dtype)])
        fields["mimic_offset"] = jnp.concatenate([model.mimic_offset, other.mimic_offset.astype(dtype)])
    return edit_model(appended, **fields)


def _locked_joints(what: str, model: Model, joints: Sequence[int]) -> tuple[int, ...]:
    """The joints (1..n) to lock, checked: in range, distinct, whole mimic relations."""
    locked = _body_indices(f"{what}: joints", model, joints, allow_base=False)
    for joint in locked:  # a mimic relation is locked whole (a leader and its mimic joints)
        group = {j + 1 for j, leader in enumerate(model.mimic_leader) if joint in (leader, j + 1) and leader}
        group |= {model.mimic_leader[joint - 1]} - {0}
        group |= {j + 1 for j, leader in enumerate(model.mimic_leader) if leader and leader in group} | {joint}
        if not group <= set(locked):
            raise ValueError(
                f"{what}: joint {joint} belongs to a mimic relation (joints {sorted(group)}); lock all of them, "
                "at positions that satisfy it"
            )
    return locked


def _lock_positions(what: str, model: Model, locked: tuple[int, ...], positions: Any) -> Array:
    """``(k,)`` positions of the ``locked`` joints in the model's dtype, checked against the
    mimic relations among them (when concrete)."""
    k, dtype = len(locked), model.dtype
    q = float_array(f"{what}: positions", positions, shape=(k,), dtype=dtype, scalar="broadcast")
    if model.has_mimic and not is_traced(q):  # a locked mimic joint where its locked leader puts it
        row_of = {joint: row for row, joint in enumerate(locked)}
        values = np.asarray(q, np.float64)
        for joint in locked:
            leader = model.mimic_leader[joint - 1]
            if not leader:
                continue
            expected = float(model.mimic_multiplier[joint - 1]) * values[row_of[leader]] + float(
                model.mimic_offset[joint - 1]
            )
            if not abs(values[row_of[joint]] - expected) <= mimic_tolerance(dtype) * (1 + abs(expected)):
                raise ValueError(
                    f"{what}: positions: joint {joint} mimics joint {leader}, so it locks at {expected} "
                    f"(multiplier * the leader's position + offset), got {values[row_of[joint]]}"
                )
    return q


def _locked_fields(model: Model, locked: tuple[int, ...], q: Array) -> tuple[dict[str, Any], Array]:
    """The fields of the model with ``locked`` joints (1..n, checked) at ``q`` (``(k,)``) merged
    into their parents (:func:`lock_joints`), and ``(3,)`` the shift of the base centroid (base
    axes, m): the sum of the shifts of the links merged into the base."""
    k, dtype = len(locked), model.dtype
    base_shift = jnp.zeros(3, dtype)
    fields = _fields(model)
    for row in sorted(range(k), key=lambda r: -locked[r]):  # leaves first: a target is never removed
        joint = locked[row]
        j = joint - 1
        parent = fields["parent"][j]
        turn = rpy_to_matrix(fields["joint_rpy"][j])
        slide = jnp.zeros(3, dtype)
        if fields["joint_type"][j] == "R":
            turn = matmul(turn, rot_z(q[row]))
        else:
            slide = slide.at[2].set(q[row])
        # The locked link's centroid from the parent's centroid, parent axes (kinematics' r_i).
        centroid = fields["parent_centroid_to_joint"][j] + matmul(turn, slide - fields["centroid_to_joint"][j])
        children = np.asarray([c for c, p in enumerate(fields["parent"]) if p == joint], np.int64)
        if children.size:
            pcj, rpys = fields["parent_centroid_to_joint"], fields["joint_rpy"]
            fields["parent_centroid_to_joint"] = pcj.at[children].set(centroid + matmul(pcj[children], turn.T))
            fields["joint_rpy"] = rpys.at[children].set(_rotated_rpy(turn, rpys[children]))
        ends = np.asarray([e for e, b in enumerate(fields["end_point_link"]) if b == joint], np.int64)
        if ends.size:
            cte, erpy = fields["centroid_to_end_point"], fields["end_point_rpy"]
            fields["centroid_to_end_point"] = cte.at[ends].set(centroid + matmul(cte[ends], turn.T))
            fields["end_point_rpy"] = erpy.at[ends].set(_rotated_rpy(turn, erpy[ends]))
        renumber = lambda b: parent if b == joint else (b - 1 if b > joint else b)  # noqa: E731
        fields["parent"] = tuple(renumber(p) for c, p in enumerate(fields["parent"]) if c != j)
        # (the rest of a locked mimic relation is locked too: its entries go in later rounds)
        fields["mimic_leader"] = tuple(
            0 if b == joint else (b - 1 if b > joint else b) for c, b in enumerate(fields["mimic_leader"]) if c != j
        )
        fields["end_point_link"] = tuple(renumber(b) for b in fields["end_point_link"])
        mass, inertia = fields["link_mass"][j], _rotate(jnp, turn, fields["link_inertia"][j])
        for field in LINK_FIELDS:
            fields[field] = jnp.delete(fields[field], j, axis=0)
        fields["joint_type"] = fields["joint_type"][:j] + fields["joint_type"][j + 1 :]
        fields["link_names"] = fields["link_names"][:j] + fields["link_names"][j + 1 :]
        shift = _merge(fields, parent, mass, centroid, inertia)
        if parent == 0:
            base_shift = base_shift + shift
    return fields, base_shift


def lock_joints(model: Model, joints: Sequence[int], positions: Any) -> Model:
    """The reduced model with ``joints`` locked at ``positions`` (Pinocchio's ``buildReducedModel``).

    Each locked link is welded to its parent at the pose its joint gives it at the lock position
    and merged into it (:func:`combine_bodies`); its children and end points move to the parent,
    their frames unchanged in space. The remaining joints keep their order (the reduced ``q``
    is the full ``q`` without the locked entries) and their frames, so the reduced model at
    ``q_reduced`` is the full model at ``q`` with the locked joints at their positions: the same
    inertia matrix with the locked joints' rows and columns removed, the same bias forces and
    end-point poses. A locked joint's passive stiffness and damping go with it (a lock holds
    them). Locking a joint whose parent is the base merges into the base, moving its frame's
    origin (module docstring).

    Arguments:
        model: the system.
        joints: static sequence of ``k`` distinct joints (1..n) to lock.
        positions: ``(k,)`` their positions (rad or m), in the order of ``joints`` (a scalar is
            used for every joint).

    Returns:
        A :class:`~sdjax.Model` with ``n - k`` links.

    Raises:
        TypeError, ValueError: a joint out of range or repeated, a wrong shape.
    """
    locked = _locked_joints("lock_joints", model, joints)
    q = _lock_positions("lock_joints", model, locked, positions)
    fields, _ = _locked_fields(model, locked, q)
    return edit_model(model, **fields)


def _merged_into_base(model: Model, locked: Sequence[int]) -> list[int]:
    """Links (1..n) that :func:`lock_joints` merges into the base: locked, with every joint on
    the way to the base locked too (parents are lower-numbered, so one pass finds them)."""
    merged: list[int] = []
    for joint in range(1, model.num_joints + 1):
        parent = model.parent[joint - 1]
        if joint in locked and (parent == 0 or parent in merged):
            merged.append(joint)
    return merged


def locked_state(model: Model, state: State, joints: Sequence[int]) -> State:
    """``state`` as a state of ``lock_joints(model, joints, state.q[joints - 1])``: the joints lock
    where they are.

    The reduced ``q``/``qd`` are the full ones without the locked entries; when locked links merge
    into the base (a locked joint whose parent is the base, and locked joints below it), the base
    frame's origin moves to the merged centroid, ``A0 d`` from the old one (module docstring), so
    the base position becomes ``r0 + A0 d`` and the base velocity ``v0 + w0 x (A0 d)``; the base
    orientation and angular velocity are unchanged. Every body keeps its pose and velocity: kinematics, momenta and
    kinetic energy of the reduced model at this state are the full model's.

    Arguments:
        model: the full system.
        state: its :class:`~sdjax.State`, the locked joints at rest (``qd = 0`` there: a lock
            that engages on a moving joint is an impact, :func:`sdjax.constraints.constraint_impulse`).
        joints: static sequence of the joints (1..n) to lock, as for :func:`lock_joints`.

    Returns:
        The :class:`~sdjax.State` of the reduced model; :func:`unlocked_state` is its inverse.

    Raises:
        ValueError: a joint out of range or repeated, or part of a mimic relation locked only
            in part; a locked joint moving (checked when ``qd`` is concrete: ``|qd_i|`` above
            ``1e3 eps max(1, max |qd|)``, ``eps`` of the state's dtype).
    """
    check_state(model, state)
    locked = _locked_joints("locked_state", model, joints)
    rows = np.asarray(locked) - 1
    if not is_traced(state.qd):
        rates = np.asarray(state.qd)[rows]
        # At rest to the round-off of the state's dtype over its largest rate.
        tol = 1e3 * float(np.finfo(state.qd.dtype).eps) * max(1.0, float(np.abs(np.asarray(state.qd)).max()))
        moving = [joint for joint, rate in zip(locked, rates) if not abs(float(rate)) <= tol]
        if moving:
            raise ValueError(
                f"locked_state: joint(s) {moving} move (qd = {rates.tolist()}); a lock engages at rest "
                "(sdjax.constraints.constraint_impulse gives the velocities after a lock engages)"
            )
    keep = np.asarray([j for j in range(model.num_joints) if j + 1 not in locked], np.int64)
    position, velocity = state.base_position, state.base_linear_velocity
    if _merged_into_base(model, locked):
        _, shift = _locked_fields(model, locked, state.q[rows].astype(model.dtype))
        offset = matmul(state.base_rotation, shift.astype(position.dtype))
        position, velocity = position + offset, velocity + jnp.cross(state.base_angular_velocity, offset)
    return State(position, state.base_quaternion, velocity, state.base_angular_velocity, state.q[keep], state.qd[keep])


def unlocked_state(model: Model, reduced_state: State, joints: Sequence[int], positions: Any) -> State:
    """The state of the full ``model`` that ``reduced_state`` of ``lock_joints(model, joints,
    positions)`` is: the locked joints at ``positions``, at rest (the inverse of
    :func:`locked_state`).

    Arguments:
        model: the full system.
        reduced_state: a :class:`~sdjax.State` of the reduced model (``q``, ``qd`` of shape
            ``(n - k,)``).
        joints: static sequence of the ``k`` locked joints (1..n).
        positions: ``(k,)`` their positions (a scalar for all), rad or m.

    Returns:
        The :class:`~sdjax.State` of ``model`` (``jax.vmap`` it over a trajectory's states).

    Raises:
        ValueError: the joints or positions as :func:`lock_joints` refuses them; a wrong shape.
    """
    locked = _locked_joints("unlocked_state", model, joints)
    k, n = len(locked), model.num_joints
    dtype = reduced_state.q.dtype
    values = _lock_positions("unlocked_state", model, locked, positions).astype(dtype)
    if reduced_state.q.shape != (n - k,) or reduced_state.qd.shape != (n - k,):
        raise ValueError(
            f"unlocked_state: reduced_state.q and .qd must have shape ({n - k},) (the {n} joints without the {k} "
            f"locked ones), got {reduced_state.q.shape} and {reduced_state.qd.shape}"
        )
    rows = np.asarray(locked) - 1
    keep = np.asarray([j for j in range(n) if j + 1 not in locked], np.int64)
    q = jnp.zeros(n, dtype).at[keep].set(reduced_state.q).at[rows].set(values)
    qd = jnp.zeros(n, dtype).at[keep].set(reduced_state.qd)
    position, velocity = reduced_state.base_position, reduced_state.base_linear_velocity
    if _merged_into_base(model, locked):
        _, shift = _locked_fields(model, locked, values.astype(model.dtype))
        offset = matmul(reduced_state.base_rotation, shift.astype(dtype))
        position, velocity = position - offset, velocity - jnp.cross(reduced_state.base_angular_velocity, offset)
    return State(position, reduced_state.base_quaternion, velocity, reduced_state.base_angular_velocity, q, qd)


__all__ = [
    "PARAMETER_NAMES",
    "ROTATION_TOL",
    "append_links",
    "append_model",
    "combine_bodies",
    "from_inertial_vector",
    "from_pseudo_inertia",
    "inertial_vector",
    "lock_joints",
    "locked_state",
    "merge_payload",
    "parallel_axis",
    "pseudo_inertia",
    "rotate_inertia",
    "set_inertial_parameters",
    "transform_body",
    "unlocked_state",
]
