"""The Model: static tree topology plus array parameters of a moving-base multibody system.

A system has ``n + 1`` bodies: the base (body 0) and links ``1..n``. Joint ``i`` sits on link
``i`` and connects it to its parent body ``parent[i-1] < i`` (SpaceDyn's connection index
``B_i``, seed 000 section 3.1). Joints are revolute (``'R'``) or prismatic (``'P'``).

End points are named frames fixed on bodies (hands, feet, tool tips, sensors, cameras, grasp
points; Pinocchio's frames, MuJoCo's sites): any number of them, on any body, the base
included. SpaceDyn's end points (at most one per link, in link order, flagged by ``SE``) are the
special case its layouts need; the compat module checks for it.

Frames follow SpaceDyn (seed 000 sections 3.2-3.4): the frame of link ``i`` has its origin
on joint ``i`` and its z axis along the joint axis; it is rotated from the parent's frame by
``Rx(alpha) Ry(beta) Rz(gamma)`` (the RPY angles ``joint_rpy``) and, for a revolute joint, by
``Rz(q_i)``. A prismatic joint translates link ``i`` by ``q_i`` along that z axis; its frame
stays with the parent. The base frame is centred on the base centroid; link inertias are
about the link centroid, in the link frame. Units are SI.

Mimic joints (URDF's ``<mimic>``, Pinocchio's mimic joints) are joints moved by another:
``q_i = multiplier_i q_leader + offset_i``. They keep their bodies and frames, but no coordinate:
the generalized velocity holds the free base components and the independent joints
(``num_velocities``), and the maps between it and the floating-base layout ``[v0, w0, qd]`` are
:func:`free_coordinates` (loads, and the velocity axes of Jacobians and inertia matrices),
:func:`free_motion` and :func:`floating_coordinates` (velocities and accelerations) and
:func:`floating_loads`.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax._checks import check_choice, check_float_dtype, check_index, is_traced
from sdjax.algebra import matmul
from sdjax.tree import TreeIndex, tree_index

__all__ = [
    "BASE_MODES",
    "INERTIA_CHECKS",
    "INERTIA_RTOL",
    "MAX_MAGNITUDE",
    "MIMIC_RTOL",
    "END_POINT_FIELDS",
    "LINK_FIELDS",
    "MODEL_FIELDS",
    "Model",
    "SINGULAR_RTOL",
    "check_inertia",
    "check_no_mimic",
    "check_spacedyn_base",
    "check_spacedyn_end_points",
    "check_well_posed",
    "edit_model",
    "floating_coordinates",
    "floating_loads",
    "free_coordinates",
    "free_motion",
    "joint_coordinate_map",
    "joint_coordinates",
    "joint_positions",
    "leader_torques",
    "mimic_tolerance",
    "on_independent_joints",
    "singular_rtol",
    "stack_models",
    "validate",
    "violates_triangle_inequality",
    "warn_unphysical_inertia",
]

JOINT_TYPES = ("R", "P")

#: The array fields of :class:`Model` with one row per link (joint), in constructor order.
LINK_FIELDS = (
    "link_mass",
    "link_inertia",
    "parent_centroid_to_joint",
    "centroid_to_joint",
    "joint_rpy",
    "joint_stiffness",
    "joint_damping",
    "mimic_multiplier",
    "mimic_offset",
)

#: The array fields of :class:`Model` with one row per end point.
END_POINT_FIELDS = ("centroid_to_end_point", "end_point_rpy")

#: Relative tolerance of the symmetry and triangle-inequality checks of inertia tensors
#: (float64 data typed in by hand or converted from other tools is exact to ~1e-12).
INERTIA_RTOL = 1e-9

#: Checks of every inertia tensor (``Model(inertia_check=...)``): ``"physical"`` (default):
#: symmetric, positive definite and obeying the triangle inequality of principal moments (a mass
#: distribution can have it); ``"positive_definite"``: symmetric and positive definite only (what
#: SpaceDyn accepts; its own sample models carry tensors no body can have).
INERTIA_CHECKS = ("physical", "positive_definite")

#: Base modes (``Model(base=...)``) and, for each, the components of the base twist
#: ``[v0, w0]`` (inertial frame) that are free:
#: ``"floating"`` (default): all six (a free-floating or free-flying spacecraft);
#: ``"planar"``: ``v0_x``, ``v0_y`` and ``w0_z``, the base centroid moving in the inertial x-y
#: plane and the base turning about the inertial z axis (an air-bearing test bed; gravity along
#: z is carried by the bearing);
#: ``"fixed"``: none, the base welded to the inertial frame at its state pose (a ground test bed,
#: an arm on a large station). The generalized velocity is ``[free base components, qd]``.
BASE_MODES: dict[str, tuple[int, ...]] = {"floating": (0, 1, 2, 3, 4, 5), "planar": (0, 1, 5), "fixed": ()}


class Model(eqx.Module):
    """A moving-base tree of rigid bodies (SpaceDyn's LP, as a pytree).

    Topology fields are static, hashable tuples; every number is an array leaf, so
    ``jax.grad`` reaches masses and geometry and ``jax.vmap`` runs over batches of models
    that share one topology.

    Attributes:
        parent: ``(n,)`` static tuple, parent body of link ``i`` (0 = base), ``parent[i-1] < i``
            (SpaceDyn ``BB``).
        joint_type: ``(n,)`` static tuple of ``'R'`` (revolute) / ``'P'`` (prismatic).
        end_point_link: ``(ne,)`` static tuple, the body (0 = base, 1..n = links) carrying
            each end point; any number per body, in any order (SpaceDyn's ``SE`` is the case
            of at most one per link, in increasing link order).
        end_point_names: ``(ne,)`` static tuple of unique end-point names (default
            ``end_point1``, ``end_point2``, ...).
        link_names: ``(n,)`` static tuple of names (default ``link1``, ``link2``, ...).
        name: static model name.
        inertia_check: static, which inertia tensors validation accepts (:data:`INERTIA_CHECKS`):
            ``"physical"`` (default) or ``"positive_definite"`` (the SpaceDyn readers' choice).
        base: static base mode (:data:`BASE_MODES`): ``"floating"`` (default), ``"planar"``
            or ``"fixed"``. A fixed base may be massless (a ``world`` root).
        base_mass: ``()`` base mass, kg.
        base_inertia: ``(3, 3)`` base inertia about its centroid, base frame, kg m^2.
        link_mass: ``(n,)`` link masses, kg.
        link_inertia: ``(n, 3, 3)`` inertia of each link about its centroid, link frame.
        parent_centroid_to_joint: ``(n, 3)`` vector from the parent's centroid to joint ``i``,
            parent frame, m (SpaceDyn ``c0(:, i)`` if the parent is the base, else
            ``cc(:, B_i, i)``).
        centroid_to_joint: ``(n, 3)`` vector from the centroid of link ``i`` to joint ``i``,
            link frame, m (SpaceDyn ``cc(:, i, i)``).
        joint_rpy: ``(n, 3)`` RPY angles of the joint frame relative to the parent frame, rad
            (SpaceDyn ``Qi``).
        centroid_to_end_point: ``(ne, 3)`` vector from the link centroid to each end point,
            link frame, m (SpaceDyn ``ce``).
        end_point_rpy: ``(ne, 3)`` RPY angles of each end-point frame relative to its link
            frame, rad (SpaceDyn ``Qe``).
        joint_stiffness: ``(n,)`` passive joint stiffness ``K`` (N m/rad or N/m).
        joint_damping: ``(n,)`` passive joint damping ``D`` (N m s/rad or N s/m); the passive
            joint force is ``-K q - D qd``.
        gravity: ``(3,)`` gravitational acceleration, inertial frame, m/s^2.
        mimic_leader: ``(n,)`` static tuple, for each joint the joint (1..n) it mimics, 0 for an
            independent joint (URDF's ``<mimic joint=>``; default all 0). A mimic joint is no
            coordinate of its own: ``q_i = mimic_multiplier[i] q_leader + mimic_offset[i]``, its
            rate and acceleration scale the same way, and a torque on it acts on its leader
            (multiplied). Leaders are independent joints.
        mimic_multiplier: ``(n,)`` multiplier of each mimic joint (1 where independent).
        mimic_offset: ``(n,)`` offset of each mimic joint, rad or m (0 where independent).
    """

    parent: tuple[int, ...] = eqx.field(static=True)
    joint_type: tuple[str, ...] = eqx.field(static=True)
    end_point_link: tuple[int, ...] = eqx.field(static=True)
    end_point_names: tuple[str, ...] = eqx.field(static=True)
    link_names: tuple[str, ...] = eqx.field(static=True)
    name: str = eqx.field(static=True)
    inertia_check: str = eqx.field(static=True)
    base: str = eqx.field(static=True)
    mimic_leader: tuple[int, ...] = eqx.field(static=True)
    base_mass: Array
    base_inertia: Array
    link_mass: Array
    link_inertia: Array
    parent_centroid_to_joint: Array
    centroid_to_joint: Array
    joint_rpy: Array
    centroid_to_end_point: Array
    end_point_rpy: Array
    joint_stiffness: Array
    joint_damping: Array
    gravity: Array
    mimic_multiplier: Array
    mimic_offset: Array

    def __init__(
        self,
        parent: Sequence[int],
        joint_type: Sequence[str] | str,
        *,
        base_mass: Any,
        base_inertia: Any,
        link_mass: Any,
        link_inertia: Any,
        parent_centroid_to_joint: Any,
        centroid_to_joint: Any,
        joint_rpy: Any = None,
        end_point_link: Sequence[int] = (),
        centroid_to_end_point: Any = None,
        end_point_rpy: Any = None,
        joint_stiffness: Any = None,
        joint_damping: Any = None,
        gravity: Any = None,
        link_names: Sequence[str] | None = None,
        end_point_names: Sequence[str] | None = None,
        name: str = "model",
        dtype: Any = None,
        inertia_check: str = "physical",
        base: str = "floating",
        mimic_leader: Sequence[int] | None = None,
        mimic_multiplier: Any = None,
        mimic_offset: Any = None,
    ):
        """Build and validate a model; see the class docstring for every field.

        Optional arrays default to zeros (``joint_rpy``, end-point data, stiffness, damping,
        gravity, mimic offsets; mimic multipliers to ones). ``dtype`` sets the floating dtype
        of every array (default: the common dtype of the floating arrays given, else JAX's
        default float).
        """
        self.parent = _int_tuple("parent", parent)
        self.joint_type = tuple(joint_type)
        self.end_point_link = _int_tuple("end_point_link", end_point_link)
        n, ne = len(self.parent), len(self.end_point_link)
        self.link_names = tuple(link_names) if link_names is not None else tuple(f"link{i}" for i in range(1, n + 1))
        self.end_point_names = (
            tuple(end_point_names) if end_point_names is not None else tuple(f"end_point{e}" for e in range(1, ne + 1))
        )
        self.name = str(name)
        self.inertia_check = inertia_check
        self.base = base
        self.mimic_leader = _int_tuple("mimic_leader", mimic_leader) if mimic_leader is not None else (0,) * n
        given = dict(
            base_mass=base_mass,
            base_inertia=base_inertia,
            link_mass=link_mass,
            link_inertia=link_inertia,
            parent_centroid_to_joint=parent_centroid_to_joint,
            centroid_to_joint=centroid_to_joint,
            joint_rpy=joint_rpy,
            centroid_to_end_point=centroid_to_end_point,
            end_point_rpy=end_point_rpy,
            joint_stiffness=joint_stiffness,
            joint_damping=joint_damping,
            gravity=gravity,
            mimic_multiplier=mimic_multiplier,
            mimic_offset=mimic_offset,
        )
        if dtype is None:
            floats = [_dtype_of(v) for v in given.values() if v is not None and _is_float_array(v)]
            dtype = jnp.result_type(*floats) if floats else jnp.result_type(float)
        else:
            dtype = check_float_dtype("Model: dtype", dtype)
        defaults = dict(
            joint_rpy=(n, 3),
            centroid_to_end_point=(ne, 3),
            end_point_rpy=(ne, 3),
            joint_stiffness=(n,),
            joint_damping=(n,),
            gravity=(3,),
            mimic_offset=(n,),
        )
        for field, value in given.items():
            if value is None and field == "mimic_multiplier":
                value = np.ones((n,))
            elif value is None:
                if field not in defaults:
                    raise ValueError(f"Model.{field}: a value is required")
                value = np.zeros(defaults[field])
            setattr(self, field, _as_float_array(field, value, dtype))

    def __check_init__(self):
        validate(self)

    # ----------------------------------------------------------------------------------
    # Sizes and derived connection data (static, computed from the topology tuples).
    @property
    def num_joints(self) -> int:
        """Number of joints ``n`` (= number of links)."""
        return len(self.parent)

    @property
    def num_bodies(self) -> int:
        """Number of bodies ``n + 1`` (base included)."""
        return len(self.parent) + 1

    @property
    def num_end_points(self) -> int:
        return len(self.end_point_link)

    @property
    def base_coordinates(self) -> tuple[int, ...]:
        """Components of the base twist ``[v0, w0]`` that the base mode leaves free (indices
        0..5; :data:`BASE_MODES`)."""
        return BASE_MODES[self.base]

    @property
    def num_base_velocities(self) -> int:
        """Number of free base coordinates: 6 (floating), 3 (planar) or 0 (fixed)."""
        return len(BASE_MODES[self.base])

    @property
    def has_mimic(self) -> bool:
        """Whether some joint mimics another (``mimic_leader``)."""
        return any(self.mimic_leader)

    @property
    def independent_joints(self) -> np.ndarray:
        """``(n_c,)`` 0-based indices of the joints that are coordinates (all but the mimic
        joints), in joint order."""
        return np.asarray([k for k, leader in enumerate(self.mimic_leader) if leader == 0], np.int64)

    @property
    def num_joint_coordinates(self) -> int:
        """Number ``n_c`` of joint coordinates: ``n`` less the mimic joints."""
        return sum(1 for leader in self.mimic_leader if leader == 0)

    @property
    def num_velocities(self) -> int:
        """Size of the generalized velocity ``[free base components, qd_c]``: ``6 + n_c`` for a
        floating base, ``3 + n_c`` planar, ``n_c`` fixed (``n_c = n`` without mimic joints)."""
        return len(BASE_MODES[self.base]) + self.num_joint_coordinates

    @property
    def velocity_indices(self) -> np.ndarray:
        """``(num_velocities,)`` positions of the generalized velocity's entries in the
        floating-base vector ``[v0, w0, qd]`` (6 + n): the free base components, then the
        independent joints. Without mimic joints ``H = H_floating[idx][:, idx]`` and
        ``J = J_floating[:, idx]``; see :func:`free_coordinates` for the general map."""
        return np.concatenate([np.asarray(BASE_MODES[self.base], np.int64), 6 + self.independent_joints])

    @property
    def tree(self) -> TreeIndex:
        """Static index arrays used by the tree passes (cached per topology)."""
        return tree_index(self.parent)

    @property
    def is_revolute(self) -> np.ndarray:
        """``(n,)`` bool, True for revolute joints."""
        return np.array([t == "R" for t in self.joint_type], dtype=bool)

    @property
    def incidence_matrix(self) -> np.ndarray:
        """SpaceDyn's ``S`` (n, n): ``S[i, j] = 1`` if ``i = B_j``, ``-1`` if ``i = j`` (1-based
        links stored 0-based)."""
        n = self.num_joints
        s = -np.eye(n, dtype=np.int64)
        for j, p in enumerate(self.parent):
            if p > 0:
                s[p - 1, j] = 1
        return s

    @property
    def base_incidence(self) -> np.ndarray:
        """SpaceDyn's ``S0`` (n,): 1 where the link is attached to the base."""
        return np.array([1 if p == 0 else 0 for p in self.parent], dtype=np.int64)

    @property
    def end_link_flags(self) -> np.ndarray:
        """SpaceDyn's ``SE`` (n,): 1 where the link carries an end point (``ValueError`` if the
        end points do not fit SpaceDyn's layout, see :attr:`spacedyn_end_points`)."""
        check_spacedyn_end_points(self, "SE")
        se = np.zeros(self.num_joints, dtype=np.int64)
        se[np.asarray(self.end_point_link, dtype=np.int64) - 1] = 1
        return se

    def path_to_link(self, link: int) -> tuple[int, ...]:
        """Joints (1-based, base to tip) on the path from the base to body ``link`` (inclusive;
        empty for the base, body 0)."""
        _check_link_index(self, link, "Model.path_to_link", allow_base=True)
        if link == 0:
            return ()
        return tuple(int(j) + 1 for j in np.flatnonzero(self.tree.support[link - 1]))

    def end_point_index(self, name: str) -> int:
        """0-based index of the end point called ``name``; ``KeyError`` listing the names if none is."""
        try:
            return self.end_point_names.index(name)
        except ValueError:
            raise KeyError(
                f"model {self.name!r} has no end point {name!r}; its end points are {list(self.end_point_names)}"
            ) from None

    @property
    def spacedyn_end_points(self) -> bool:
        """Whether the end points fit SpaceDyn's layouts (``SE``, ``Fe``/``Te`` columns): at most
        one per link, none on the base, in increasing link order."""
        links = self.end_point_link
        return all(link >= 1 for link in links) and all(a < b for a, b in zip(links, links[1:]))

    @property
    def end_point_paths(self) -> tuple[tuple[int, ...], ...]:
        """For each end point, the joints (1-based, base to tip) from the base to it."""
        return tuple(self.path_to_link(link) for link in self.end_point_link)

    @property
    def dtype(self) -> Any:
        return self.link_mass.dtype

    @property
    def total_mass(self) -> Array:
        """Mass of the whole system, kg."""
        return self.base_mass + jnp.sum(self.link_mass)

    def astype(self, dtype: Any) -> Model:
        """The same model with every array cast to ``dtype`` (e.g. ``jnp.float32``); a concrete
        value that ``dtype`` cannot hold (a non-zero one that becomes 0, a finite one that
        becomes inf) is refused by field."""
        dtype = check_float_dtype("Model.astype: dtype", dtype)
        cast = _cast_leaves(self, jnp.dtype(dtype))
        if jnp.dtype(dtype) != jnp.dtype(self.dtype) and not is_traced(self):
            for field in dataclasses.fields(self):
                given = getattr(self, field.name)
                if isinstance(given, jax.Array) and jnp.issubdtype(given.dtype, jnp.floating):
                    _check_representable(field.name, np.asarray(given), np.asarray(getattr(cast, field.name)))
        return cast


# --------------------------------------------------------------------------------------
# Base modes: between the free coordinates and the floating-base layout.


def joint_coordinate_map(model: Model) -> Array:
    """``(n, n_c)`` matrix ``S`` of the joint rates in terms of the joint coordinates' rates,
    ``qd = S qd_c``: one 1 per independent joint, each mimic joint's multiplier in its leader's
    column (the identity without mimic joints)."""
    n, independent = model.num_joints, model.independent_joints
    column = np.zeros(n, np.int64)
    column[independent] = np.arange(independent.size)
    leaders = np.asarray([k if leader == 0 else leader - 1 for k, leader in enumerate(model.mimic_leader)], np.int64)
    rows = np.zeros((n, independent.size))
    rows[np.arange(n), column[leaders]] = 1.0
    # (the independent joints' entries are 1 whatever the field holds: no gradient reaches them)
    multiplier = jnp.where(np.asarray(model.mimic_leader) > 0, model.mimic_multiplier, 1.0)
    return jnp.asarray(rows, model.dtype) * multiplier[:, None]


def free_coordinates(model: Model, x: Array, axis: int = 0) -> Array:
    """Generalized forces, and the velocity axes of Jacobians and inertia matrices, in the
    model's coordinates: ``G^T x`` along ``axis`` (of size ``6 + n``, floating-base order
    ``[F0, N0, tau]`` or ``[v0, w0, qd]``), where ``G`` ``(6 + n, num_velocities)`` maps the
    generalized velocity to the floating-base one (``[v0, w0, qd] = G nu``).

    ``G`` keeps the free base components of the base mode (:data:`BASE_MODES`) and maps the
    joint coordinates' rates by :func:`joint_coordinate_map` (a mimic joint's torque acts on its
    leader, multiplied). Without mimic joints ``G`` selects entries (``model.velocity_indices``);
    the identity for a floating base. For velocities and accelerations (the other direction)
    use :func:`free_motion`."""
    if model.has_mimic:
        x = jnp.moveaxis(x, axis, -1)
        base = jnp.take(x[..., :6], jnp.asarray(model.base_coordinates, np.int64), axis=-1)
        out = jnp.concatenate([base, matmul(x[..., 6:], joint_coordinate_map(model).astype(x.dtype))], axis=-1)
        return jnp.moveaxis(out, -1, axis)
    if model.base == "floating":
        return x
    return jnp.take(x, jnp.asarray(model.velocity_indices), axis=axis)


def free_motion(model: Model, x: Array) -> Array:
    """``(..., num_velocities)`` generalized velocity (or acceleration) from a floating-base
    ``(..., 6 + n)`` one that satisfies the model's base mode and mimic relations: the free
    base components and the independent joints (``model.velocity_indices``)."""
    if model.base == "floating" and not model.has_mimic:
        return x
    return jnp.take(x, jnp.asarray(model.velocity_indices), axis=-1)


def floating_coordinates(model: Model, x: Array) -> Array:
    """``(..., 6 + n)`` floating-base velocity or acceleration from ``(..., num_velocities)``:
    ``G x`` (the inverse of :func:`free_motion`), zero in the base components the base mode
    fixes, each mimic joint moving with its leader (multiplied)."""
    if model.base == "floating" and not model.has_mimic:
        return x
    if not model.has_mimic:
        return floating_loads(model, x)  # (a selection: the same scatter)
    nb = model.num_base_velocities
    out = jnp.zeros(x.shape[:-1] + (6,), x.dtype)
    if nb:
        out = out.at[..., jnp.asarray(model.base_coordinates, np.int64)].set(x[..., :nb], unique_indices=True)
    return jnp.concatenate([out, matmul(x[..., nb:], joint_coordinate_map(model).astype(x.dtype).T)], axis=-1)


def floating_loads(model: Model, x: Array) -> Array:
    """``(..., 6 + n)`` floating-base generalized force ``[F0, N0, tau]`` from one in the model's
    coordinates ``(..., num_velocities)``: each entry on its base component or independent joint,
    zero on the fixed base components and on mimic joints (so that ``free_coordinates`` gives
    ``x`` back: a mimic joint's load is carried by its leader)."""
    if model.base == "floating" and not model.has_mimic:
        return x
    out = jnp.zeros(x.shape[:-1] + (6 + model.num_joints,), x.dtype)
    return out.at[..., jnp.asarray(model.velocity_indices)].set(x, indices_are_sorted=True, unique_indices=True)


def leader_torques(model: Model, tau: Array) -> Array:
    """``(..., n)`` joint torques with each mimic joint's torque moved onto its leader
    (multiplied), zero on the mimic joints: the same generalized force, as the independent
    joints' actuators apply it. ``tau`` itself without mimic joints."""
    if not model.has_mimic:
        return tau
    return on_independent_joints(model, matmul(tau, joint_coordinate_map(model).astype(tau.dtype)))


#: Tolerance of the mimic relations at float64, relative to ``1 + |q|`` (round-off of
#: ``multiplier * q + offset`` and of a long integration; an inconsistent state is off by far
#: more); other dtypes: :func:`mimic_tolerance`.
MIMIC_RTOL = 1e-9


def mimic_tolerance(dtype: Any) -> float:
    """Relative tolerance of the mimic relations for ``dtype``: :data:`MIMIC_RTOL`, or 1e4
    round-offs of the dtype where that is larger (float32: 1.2e-3)."""
    return max(MIMIC_RTOL, 1e4 * float(np.finfo(np.dtype(dtype)).eps))


def check_no_mimic(model: Model, what: str) -> None:
    """Refuse (``ValueError`` naming ``what``) a model with mimic joints, for the algorithms
    that take every joint as a coordinate."""
    if model.has_mimic:
        mimics = [
            f"{model.link_names[k]!r} mimics {model.link_names[leader - 1]!r}"
            for k, leader in enumerate(model.mimic_leader)
            if leader
        ]
        raise ValueError(
            f"{what}: model {model.name!r} has mimic joints ({', '.join(mimics)}), not supported here (every joint "
            "is taken as a coordinate); load the URDF with sdjax.io.import_urdf(path, mimic='constraints') (every "
            "joint a coordinate, each <mimic> a sdjax.constraints.JointCoupling) to use it"
        )


def on_independent_joints(model: Model, x: Array) -> Array:
    """``(..., n)`` per-joint values from ``(..., n_c)`` per-coordinate ones: on the independent
    joints, zero on the mimic joints (e.g. a joint-space controller's gains or a coordinate's
    generalized force, which the leader's actuator applies). ``x`` itself without mimic joints."""
    if not model.has_mimic:
        return x
    out = jnp.zeros(x.shape[:-1] + (model.num_joints,), x.dtype)
    return out.at[..., jnp.asarray(model.independent_joints)].set(x)


def joint_coordinates(model: Model, x: Array) -> Array:
    """``(..., n_c)`` joint coordinates' rates (or accelerations) from every joint's ``(..., n)``
    (the independent joints' entries; ``x`` itself without mimic joints)."""
    if not model.has_mimic:
        return x
    return jnp.take(x, jnp.asarray(model.independent_joints), axis=-1)


def joint_positions(model: Model, q: Array) -> Array:
    """``(..., n)`` positions of every joint from the joint coordinates ``(..., n_c)``: mimic
    joints at ``multiplier * q_leader + offset`` (``q`` itself without mimic joints)."""
    if not model.has_mimic:
        return q
    offset = jnp.where(np.asarray(model.mimic_leader) > 0, model.mimic_offset, 0.0).astype(q.dtype)
    return matmul(q, joint_coordinate_map(model).astype(q.dtype).T) + offset


# --------------------------------------------------------------------------------------
# Input conversion.


def _int_tuple(field: str, values: Sequence[int]) -> tuple[int, ...]:
    arr = np.asarray(values)
    if arr.ndim != 1 and arr.size:
        raise ValueError(f"Model.{field}: expected a flat sequence of integers, got shape {arr.shape}")
    out = []
    for k, v in enumerate(np.ravel(arr)):
        if isinstance(v, (bool, np.bool_)) or not float(v).is_integer():
            raise ValueError(f"Model.{field}[{k}]: expected an integer, got {v!r}")
        out.append(int(v))
    return tuple(out)


def _dtype_of(value: Any) -> Any:
    """The dtype ``value`` has as a JAX array (NumPy's, as JAX canonicalises it: ``jnp.asarray``
    of host data compiles a program per shape outside a trace)."""
    if not hasattr(value, "dtype"):
        try:
            value = np.asarray(value)  # (lists, numbers)
        except Exception:  # (e.g. a list holding traced values)
            return jnp.asarray(value).dtype
    return jax.dtypes.canonicalize_dtype(value.dtype)


def _is_float_array(value: Any) -> bool:
    try:
        return jnp.issubdtype(_dtype_of(value), jnp.floating)
    except TypeError:
        return False


def _check_representable(field: str, given: np.ndarray, cast: np.ndarray) -> None:
    """Refuse, by field and value, a number the model's precision cannot hold: float32 turns a
    mass of 1e39 into inf (refused later without the value) and one of 1e-50 into 0 (a massless
    link, silently)."""
    lost = (np.isfinite(given) & ~np.isfinite(cast)) | ((given != 0) & (cast == 0))
    if np.any(lost):
        index = tuple(int(i) for i in np.argwhere(lost)[0])
        raise ValueError(
            f"Model.{field}{list(index) if index else ''}: {float(given[index])!r} is beyond the range of "
            f"{cast.dtype.name} (it becomes {float(cast[index])!r})"
        )


def _as_float_array(field: str, value: Any, dtype: Any) -> Array:
    if not isinstance(value, jax.Array):
        # Host data (NumPy arrays, lists, numbers) converted by NumPy: JAX's conversion compiles
        # a program per shape and dtype outside a trace. Anything else (a list holding traced
        # values, a dtype NumPy cannot cast) takes JAX's path below.
        try:
            host = np.asarray(value)
        except Exception:
            host = None
        if host is not None and (np.issubdtype(host.dtype, np.floating) or np.issubdtype(host.dtype, np.integer)):
            dtype = jax.dtypes.canonicalize_dtype(jnp.dtype(dtype))
            with np.errstate(over="ignore", under="ignore"):
                cast = host.astype(dtype)
            _check_representable(field, host, cast)
            return jnp.asarray(cast, dtype)
    try:
        arr = jnp.asarray(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"Model.{field}: cannot convert to a numeric array ({err})") from None
    if not (jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)):
        raise ValueError(f"Model.{field}: expected real numbers, got dtype {arr.dtype}")
    result = arr.astype(dtype)
    if not isinstance(arr, jax.core.Tracer) and result.dtype != arr.dtype:  # (a concrete array changing precision)
        _check_representable(field, np.asarray(arr), np.asarray(result))
    return result


def _check_link_index(model: Model, link: int, owner: str, *, allow_base: bool = False) -> None:
    check_index(f"{owner}: link", link, 0 if allow_base else 1, model.num_joints)


def check_spacedyn_end_points(model: Model, what: str) -> None:
    """Refuse (``ValueError`` naming ``what``) a model whose end points do not fit SpaceDyn's
    layouts: at most one per link, none on the base, in increasing link order."""
    if not model.spacedyn_end_points:
        raise ValueError(
            f"{what}: SpaceDyn's layout holds at most one end point per link, none on the base, in link order; "
            f"model {model.name!r} has end points on bodies {list(model.end_point_link)} "
            f"({list(model.end_point_names)}); use the sdjax functions, which take any frames"
        )


def check_spacedyn_base(model: Model, what: str) -> None:
    """Refuse (``ValueError`` naming ``what``) a model whose base is not free-floating, or that
    has mimic joints: SpaceDyn's link parameters have neither."""
    check_no_mimic(model, what)
    if model.base != "floating":
        raise ValueError(
            f"{what}: model {model.name!r} has a {model.base} base; SpaceDyn's link parameters describe a "
            "free-floating base (export a floating copy with sdjax.edit_model(model, base='floating') if the "
            "base has a mass)"
        )


# --------------------------------------------------------------------------------------
# Validation: the one door every model passes through.


def _link_label(model: Model, k: int) -> str:
    return f"link {k + 1} ({model.link_names[k]!r})"


#: Largest magnitude of any model value (mass, inertia, length, angle, stiffness, damping,
#: gravity), in SI units: far beyond any body (a 1e100 kg mass at 1e100 m still has a finite
#: moment of inertia in float64), and small enough that products of two or three model values
#: cannot overflow. Larger values are input errors (a corrupted file) and are refused.
MAX_MAGNITUDE = 1e100


def validate(model: Model) -> None:
    """Check a model; raise ``ValueError`` naming the field, the link and the rule broken.

    Structure and shapes are always checked; values (finite, positive masses, physical
    inertia tensors, non-negative stiffness and damping) are checked when the arrays are
    concrete (not traced inside ``jit``/``vmap``).
    """
    n, ne = len(model.parent), len(model.end_point_link)
    check_choice("Model.base", model.base, BASE_MODES, "base mode")
    # Topology.
    for k, p in enumerate(model.parent):
        if not 0 <= p <= k:
            raise ValueError(
                f"Model.parent[{k}]: {_link_label(model, k)} has parent {p}; links must be numbered so "
                f"that parent < link index (0 = base), i.e. parent in 0..{k}"
            )
    if len(model.joint_type) != n:
        raise ValueError(f"Model.joint_type: expected {n} joint types (one per link), got {len(model.joint_type)}")
    for k, t in enumerate(model.joint_type):
        if t not in JOINT_TYPES:
            raise ValueError(
                f"Model.joint_type[{k}]: unknown joint type {t!r} for {_link_label(model, k)}; expected 'R' or 'P'"
            )
    if len(model.link_names) != n:
        raise ValueError(f"Model.link_names: expected {n} names, got {len(model.link_names)}")
    if len(set(model.link_names)) != n:
        dup = sorted({s for s in model.link_names if model.link_names.count(s) > 1})
        raise ValueError(f"Model.link_names: names must be unique, repeated: {dup}")
    for k, link in enumerate(model.end_point_link):
        if not 0 <= link <= n:
            raise ValueError(
                f"Model.end_point_link[{k}]: body {link} does not exist (bodies are 0 = base, 1..{n} = links)"
            )
    if len(model.end_point_names) != ne:
        raise ValueError(
            f"Model.end_point_names: expected {ne} names (one per end point), got {len(model.end_point_names)}"
        )
    if not all(isinstance(s, str) and s for s in model.end_point_names):
        raise ValueError(f"Model.end_point_names: names must be non-empty strings, got {list(model.end_point_names)}")
    if len(set(model.end_point_names)) != ne:
        dup = sorted({s for s in model.end_point_names if model.end_point_names.count(s) > 1})
        raise ValueError(f"Model.end_point_names: names must be unique, repeated: {dup}")
    if len(model.mimic_leader) != n:
        raise ValueError(
            f"Model.mimic_leader: expected {n} entries (one per joint, 0 = independent), got {len(model.mimic_leader)}"
        )
    for k, leader in enumerate(model.mimic_leader):
        if leader == 0:
            continue
        if not 1 <= leader <= n or leader == k + 1:
            raise ValueError(
                f"Model.mimic_leader[{k}]: {_link_label(model, k)} mimics joint {leader}; expected another joint "
                f"1..{n} (or 0: independent)"
            )
        if model.mimic_leader[leader - 1] != 0:
            raise ValueError(
                f"Model.mimic_leader[{k}]: {_link_label(model, k)} mimics joint {leader}, which mimics joint "
                f"{model.mimic_leader[leader - 1]} itself; mimic the independent joint (multipliers and offsets compose)"
            )
    # Shapes.
    shapes = dict(
        base_mass=(),
        base_inertia=(3, 3),
        link_mass=(n,),
        link_inertia=(n, 3, 3),
        parent_centroid_to_joint=(n, 3),
        centroid_to_joint=(n, 3),
        joint_rpy=(n, 3),
        centroid_to_end_point=(ne, 3),
        end_point_rpy=(ne, 3),
        joint_stiffness=(n,),
        joint_damping=(n,),
        gravity=(3,),
        mimic_multiplier=(n,),
        mimic_offset=(n,),
    )
    for field, shape in shapes.items():
        got = tuple(getattr(model, field).shape)
        if got != shape:
            raise ValueError(f"Model.{field}: expected shape {shape} for n={n} links and ne={ne} end points, got {got}")
    leaves = [getattr(model, f) for f in shapes]
    if any(isinstance(x, jax.core.Tracer) for x in leaves):
        return
    # Values.
    for field in shapes:
        value = np.asarray(getattr(model, field), dtype=np.float64)
        bad = np.argwhere(~(np.abs(value) <= MAX_MAGNITUDE))  # also catches nan
        if bad.size:
            where = tuple(int(i) for i in bad[0])
            if field in LINK_FIELDS:
                label = f" ({_link_label(model, where[0])})"
            elif field in END_POINT_FIELDS:
                label = f" (end point {model.end_point_names[where[0]]!r} on body {model.end_point_link[where[0]]})"
            else:
                label = ""
            problem = "not finite" if not np.isfinite(value[where]) else f"beyond {MAX_MAGNITUDE:g} in size"
            raise ValueError(f"Model.{field}{list(where)}{label}: value is {problem} ({value[where]})")
    check_choice("Model.inertia_check", model.inertia_check, INERTIA_CHECKS)
    physical = model.inertia_check == "physical"
    model_scale = _inertia_scale(model)
    if model.base == "fixed":  # the base never moves: its mass and inertia may be zero (a world root)
        if not float(model.base_mass) >= 0:
            raise ValueError(f"Model.base_mass: mass must be non-negative, got {float(model.base_mass)}")
        check_inertia(
            "base_inertia",
            "the base",
            np.asarray(model.base_inertia, np.float64),
            physical=physical,
            semidefinite=True,
            model_scale=model_scale,
        )
    else:
        if not float(model.base_mass) > 0:
            raise ValueError(
                f"Model.base_mass: mass must be positive for a {model.base} base, got {float(model.base_mass)} "
                "(a base welded to the world may be massless: base='fixed')"
            )
        check_inertia("base_inertia", "the base", np.asarray(model.base_inertia, np.float64), physical=physical)
    masses = np.asarray(model.link_mass, np.float64)
    inertias = np.asarray(model.link_inertia, np.float64)
    for k in range(n):
        if not masses[k] >= 0:
            raise ValueError(
                f"Model.link_mass[{k}]: {_link_label(model, k)} mass must be non-negative, got {masses[k]}"
            )
        check_inertia(
            f"link_inertia[{k}]",
            _link_label(model, k),
            inertias[k],
            physical=physical,
            semidefinite=True,
            model_scale=model_scale,
        )
    degenerate = [k for k in range(n) if masses[k] == 0 or np.linalg.eigvalsh(inertias[k])[0] <= 0]
    if degenerate:
        check_well_posed(model)
    for field in ("joint_stiffness", "joint_damping"):
        values = np.asarray(getattr(model, field), np.float64)
        for negative in np.flatnonzero(values < 0):
            raise ValueError(
                f"Model.{field}[{negative}]: {_link_label(model, int(negative))} must be non-negative, got {values[negative]}"
            )
    multiplier, offset = np.asarray(model.mimic_multiplier, np.float64), np.asarray(model.mimic_offset, np.float64)
    for k, leader in enumerate(model.mimic_leader):
        if leader == 0 and (multiplier[k] != 1 or offset[k] != 0):
            raise ValueError(
                f"Model.mimic_multiplier[{k}], mimic_offset[{k}]: {_link_label(model, k)} is independent "
                f"(mimic_leader 0): expected 1 and 0, got {multiplier[k]} and {offset[k]}"
            )


def check_inertia(
    field: str,
    body: str,
    inertia: np.ndarray,
    *,
    physical: bool = True,
    semidefinite: bool = False,
    model_scale: float = 0.0,
) -> None:
    """Symmetric, positive definite (``semidefinite``: positive semidefinite, zero allowed: a
    massless frame link, a thin rod) and (``physical``) satisfying the triangle inequality.
    ``model_scale`` (largest inertia entry of the model, kg m^2) sets the size below which a
    negative principal moment is round-off (files write zero as -5e-20)."""
    scale = float(np.max(np.abs(inertia)))
    asym = float(np.max(np.abs(inertia - inertia.T)))
    if asym > INERTIA_RTOL * scale:
        raise ValueError(
            f"Model.{field}: inertia tensor of {body} is not symmetric (largest |I - I^T| entry is "
            f"{asym:.3g}, tensor {inertia.tolist()})"
        )
    moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
    if semidefinite:
        if not moments[0] >= -INERTIA_RTOL * max(scale, model_scale):
            raise ValueError(
                f"Model.{field}: inertia tensor of {body} is not positive semidefinite (principal moments {moments.tolist()})"
            )
    elif not moments[0] > 1e-12 * max(scale, np.finfo(np.float64).tiny):
        raise ValueError(
            f"Model.{field}: inertia tensor of {body} is not positive definite (principal moments {moments.tolist()})"
        )
    if physical and violates_triangle_inequality(inertia, model_scale):
        raise ValueError(
            f"Model.{field}: inertia tensor of {body} violates the triangle inequality: principal "
            f"moments {moments.tolist()} have {moments[0]:.6g} + {moments[1]:.6g} < {moments[2]:.6g}, "
            "which no mass distribution can produce (to accept it as SpaceDyn does, build the model "
            "with inertia_check='positive_definite')"
        )


#: Relative size (to the largest eigenvalue) below which the inertia matrix of a model with
#: massless or inertia-less links counts as singular, at float64; in a lower precision the
#: larger of this and ``2 N eps`` of that precision (``N`` the size of ``H``: the round-off of
#: ``H``'s entries, sums of about ``N`` terms, moves its eigenvalues by up to about ``N eps`` of
#: the largest, so a smaller eigenvalue cannot be told from an exactly singular ``H``).
SINGULAR_RTOL = 1e-10


def singular_rtol(size: int, dtype: Any) -> float:
    """:data:`SINGULAR_RTOL` for an ``(size, size)`` inertia matrix computed in ``dtype``."""
    return max(SINGULAR_RTOL, 2 * size * float(np.finfo(np.dtype(dtype)).eps))


def check_well_posed(model: Model) -> None:
    """Refuse a model whose generalized inertia matrix ``H`` is singular, naming the joint.

    Run by validation when a link has zero mass or a singular inertia tensor (otherwise ``H``
    is positive definite by construction). First, structurally: a joint whose whole subtree
    carries no mass and no inertia moves nothing. Then numerically: ``H`` at ``q = 0`` and at
    a generic configuration (``q_k = 0.37 + 0.61 k``, rad or m) must be positive definite;
    the joint with the largest share of the null direction is named.
    """
    masses = np.asarray(model.link_mass, np.float64)
    inertias = np.asarray(model.link_inertia, np.float64)
    empty = (masses == 0) & np.all(inertias == 0, axis=(1, 2))
    support = np.asarray(model.tree.support)  # [j, k]: joint k moves link j
    for k in model.independent_joints:  # (a mimic joint moving nothing adds nothing to H)
        followers = [j for j, leader in enumerate(model.mimic_leader) if leader == k + 1]
        subtree = np.flatnonzero(np.any(support[:, [k, *followers]], axis=1))
        if np.all(empty[subtree]):
            names = [model.link_names[j] for j in subtree]
            raise ValueError(
                f"Model: joint {k + 1} ({_link_label(model, k)}) moves no mass or inertia (its subtree {names} is "
                "massless), so the inertia matrix is singular; give one of these links mass or inertia, or make "
                "it a frame (an end point) of its parent"
            )
    from sdjax.dynamics import inertia_matrix  # the dynamics build on this module
    from sdjax.state import make_state

    nc = model.num_joint_coordinates
    rtol = singular_rtol(model.num_velocities, model.dtype)
    for q in (np.zeros(nc), 0.37 + 0.61 * np.arange(nc)):
        h = np.asarray(inertia_matrix(model, make_state(model, q=q.astype(np.dtype(model.dtype)))), np.float64)
        values, vectors = np.linalg.eigh(0.5 * (h + h.T))
        if not values[0] > rtol * values[-1]:
            k = int(model.independent_joints[np.argmax(np.abs(vectors[model.num_base_velocities :, 0]))]) if nc else 0
            precision = (
                f" at {np.dtype(model.dtype).name} precision (enable float64: jax.config.update('jax_enable_x64', True))"
                if rtol > SINGULAR_RTOL
                else ""
            )
            raise ValueError(
                f"Model: the inertia matrix is singular{precision} at q = {np.round(q, 3).tolist()} (smallest "
                f"eigenvalue {values[0]:.3g} of {values[-1]:.3g}), mostly along joint {k + 1} ({_link_label(model, k)}): "
                "its massless or inertia-less links leave a motion without kinetic energy"
            )


def _inertia_scale(model: Model) -> float:
    """Largest inertia entry of the model (kg m^2): the size against which round-off of a
    single tensor's principal moments is judged."""
    return float(
        max(np.max(np.abs(np.asarray(model.base_inertia))), np.max(np.abs(np.asarray(model.link_inertia)), initial=0.0))
    )


def violates_triangle_inequality(inertia: np.ndarray, model_scale: float = 0.0) -> bool:
    """Whether the principal moments of a symmetric ``(3, 3)`` tensor break ``I1 + I2 >= I3``
    (for the largest ``I3``), beyond round-off (:data:`INERTIA_RTOL` of the tensor's size or
    of ``model_scale``, the model's largest inertia entry)."""
    moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
    return bool(moments[0] + moments[1] < moments[2] - INERTIA_RTOL * max(float(np.sum(np.abs(moments))), model_scale))


def warn_unphysical_inertia(model: Model, source: str) -> None:
    """One ``UserWarning`` naming every body of ``model`` whose inertia tensor violates the
    triangle inequality (used by the SpaceDyn readers, which accept such tensors as SpaceDyn
    does); nothing if there is none or the arrays are traced."""
    if isinstance(model.base_inertia, jax.core.Tracer):
        return
    scale = _inertia_scale(model)  # the tolerance validation uses
    bodies = ["the base"] if violates_triangle_inequality(np.asarray(model.base_inertia, np.float64), scale) else []
    inertias = np.asarray(model.link_inertia, np.float64)
    bodies += [
        _link_label(model, k) for k in range(model.num_joints) if violates_triangle_inequality(inertias[k], scale)
    ]
    if bodies:
        warnings.warn(
            f"{source}: the inertia tensors of {', '.join(bodies)} violate the triangle inequality of principal "
            "moments (no rigid body has them); accepted as SpaceDyn accepts them",
            UserWarning,
            stacklevel=3,
        )


#: The constructor fields of :class:`Model` (what :func:`edit_model` may replace).
MODEL_FIELDS = (
    "parent",
    "joint_type",
    "base_mass",
    "base_inertia",
    "link_mass",
    "link_inertia",
    "parent_centroid_to_joint",
    "centroid_to_joint",
    "joint_rpy",
    "end_point_link",
    "centroid_to_end_point",
    "end_point_rpy",
    "joint_stiffness",
    "joint_damping",
    "gravity",
    "link_names",
    "end_point_names",
    "name",
    "inertia_check",
    "base",
    "mimic_leader",
    "mimic_multiplier",
    "mimic_offset",
)


def edit_model(model: Model, **changes: Any) -> Model:
    """A copy of ``model`` with some constructor fields replaced, validated again.

    Any field of :data:`MODEL_FIELDS` may be given, static ones included, e.g.
    ``edit_model(model, base="fixed")`` welds the base to the world and
    ``edit_model(model, gravity=[0, 0, -9.81])`` adds gravity. Arrays keep the model's dtype
    unless ``dtype=`` is given. ``TypeError`` names an unknown field.
    """
    unknown = sorted(set(changes) - set(MODEL_FIELDS) - {"dtype"})
    if unknown:
        raise TypeError(f"edit_model: unknown field(s) {unknown}; fields are {list(MODEL_FIELDS)}")
    fields = {field: getattr(model, field) for field in MODEL_FIELDS}
    fields.update(changes)
    fields.setdefault("dtype", model.dtype)
    parent, joint_type = fields.pop("parent"), fields.pop("joint_type")
    return Model(parent, joint_type, **fields)


def stack_models(models: Sequence[Model]) -> Model:
    """Stack models of one topology into a batched model (leading axis on every array) for
    ``jax.vmap``; raises ``ValueError`` if topologies differ."""
    if not models:
        raise ValueError("stack_models: expected at least one model")
    first = models[0]
    static = lambda m: (
        m.parent,
        m.joint_type,
        m.end_point_link,
        m.end_point_names,
        m.link_names,
        m.name,
        m.inertia_check,
        m.base,
        m.mimic_leader,
    )  # noqa: E731
    for k, m in enumerate(models[1:], start=1):
        if static(m) != static(first):
            raise ValueError(
                f"stack_models: model {k} differs from model 0 in its static data "
                "(parent, joint_type, end_point_link, end_point_names, link_names, name, inertia_check, base or "
                "mimic_leader); a batch shares one topology"
            )
    return _stack_leaves(*models)


# One program per model layout (outside a trace, leaf by leaf would compile one per leaf shape).
_cast_leaves = jax.jit(lambda model, dtype: jax.tree.map(lambda x: x.astype(dtype), model), static_argnums=1)
_stack_leaves = jax.jit(lambda *models: jax.tree.map(lambda *xs: jnp.stack(xs), *models))
