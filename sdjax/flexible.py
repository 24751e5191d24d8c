"""Flexible appendages: uniform beams as chains of rigid segments on visco-elastic joints.

Seed 000 (sections 2 and 3.8) treats a flexible link "as a discrete successive chain of rigid
links connected by elastic joints" (solar paddles, flexible-base robots). This module builds
such chains from the data of a uniform Euler-Bernoulli beam and attaches them to any body of
any :class:`~sdjax.Model`; the joints are ordinary revolute joints whose passive stiffness and
damping (``Model.joint_stiffness``, ``Model.joint_damping``) carry the elasticity, so every
sdjax algorithm (dynamics, momenta, Jacobians, integrators, gradients) treats them exactly.

## Beam frame

A beam is described in its *beam frame* ``B``: origin at the root (clamped) section, ``x``
along the undeformed beam axis, ``y`` and ``z`` the principal axes of the cross-section.
:func:`attach_beam` places ``B`` on a parent body by a position and a rotation (parent
frame). Bending *about* ``z`` deflects the beam along ``y`` (stiffness ``EI_z``, with
``I_z = int y^2 dA``); bending about ``y`` deflects it along ``z`` (``EI_y``); torsion is
rotation about ``x`` (``GJ``).

## Lumping scheme (rigid finite elements, cell-centred)

The beam of length ``L`` is cut into ``N`` equal rigid segments of length ``l = L / N``.
Segment ``j`` (``j = 1..N``) is a uniform rigid slab: mass ``mu l``, centroid at its
mid-length, centroidal inertia in the beam axes

    I_xx = rho I_p l,    I_yy = mu l^3 / 12 + rho I_y l,    I_zz = mu l^3 / 12 + rho I_z l,

(``rho I_y = int rho z^2 dA``, ``rho I_z = int rho y^2 dA`` the cross-section mass moments per
unit length, ``rho I_p`` their sum), so every segment is a physical rigid body. Segment ``j``
hangs on the node at ``x = (j - 1) l``, where one revolute joint per modelled deformation
(bending about ``z``, bending about ``y``, torsion about ``x``) connects it to segment ``j - 1``
(segment 0 = the parent body). Each segment's rotation stands for the beam's slope (or twist)
at its *mid-point* ``x_j = (j - 1/2) l``; a node joint therefore carries the flexibility of the
beam between the neighbouring mid-points:

    k_node = EI / l            for the interior nodes (mid-points l apart),
    k_root = 2 EI / l          for the root node (clamp to the first mid-point, l / 2),

and likewise ``GJ / l`` and ``2 GJ / l`` for torsion. This is the midpoint rule for the
curvature integral (the rigid finite element method's "secondary division" of Kruszewski and
Wittbrodt): the chain's static tip deflection under a tip load is
``P L^3 / (3 EI) (1 + 1 / (2 N^2))`` and the natural frequencies converge with **second
order**, ``|omega_N - omega| = O(N^-2)``. The alternative ``k = EI / l`` at every node including
the root (``lumping="uniform"``) places the first slope at ``x = l`` instead of ``l / 2`` and
converges only with first order (tip deflection ``P L^3 / (3 EI) (1 + 3 / (2 N) + ...)``); it is
kept for comparison. The segments' rotary inertia ``mu l^3 / 12`` is the rigid-slab value; with
``rho I_y = rho I_z -> 0`` the limit is the Euler-Bernoulli beam (no rotary inertia of the
section), with them it is a Rayleigh beam.

## Several joints per node

A 3-D node needs two or three 1-DOF joints in series (the model has no spherical joint). The
bodies between them have zero length but the model refuses zero mass and singular inertia, so
each carries a tiny fraction :data:`NODE_MASS_FRACTION` of its segment's mass (taken from the
segment, so the beam's total mass is exact), centred on the node, isotropic inertia
``m_node l^2 / 12``. This perturbs the beam's mass distribution by ``O(1e-6)`` relatively and does
not add fast modes: every node joint moves its whole outboard segment, so the inertia matrix
seen by the three node joints is that of the segment (well conditioned), not that of the tiny
bodies. At small angles the three joint angles are the components of the relative rotation
vector, so the elastic energy ``1/2 (k_z q_z^2 + k_y q_y^2 + k_t q_t^2)`` is that of the beam.

## Damping

Structural damping is Kelvin-Voigt (stiffness proportional): each joint's damping is
``D = beta K``, so mode ``k`` gets the damping ratio ``zeta_k = beta omega_k / 2``. Give either
``damping_time`` (``beta``, s) or ``damping_ratio`` (``zeta`` of the first bending mode,
converted with the Euler-Bernoulli frequency: ``beta = 2 zeta / omega_1``).

Units SI, angles in rad.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax.dynamics import inertia_matrix_blocks
from sdjax.editing import append_links
from sdjax.gjm import generalized_inertia_matrix
from sdjax.kinematics import forward_kinematics
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import matrix_to_rpy, rot_x, rot_y, rpy_to_matrix
from sdjax._checks import check_choice, check_count, check_index, check_name, float_array, is_traced, rotation_matrix
from sdjax.state import State, make_state

__all__ = [
    "Beam",
    "BeamLayout",
    "CANTILEVER_BETA1",
    "NODE_JOINTS",
    "NODE_MASS_FRACTION",
    "attach_beam",
    "beam_layout",
    "beam_root_frame",
    "beam_tip_deflection",
    "beam_tip_position",
    "cantilever_frequencies",
    "cantilever_model",
    "elastic_energy",
    "linear_modes",
]

#: ``beta_1 L`` of the first clamped-free Euler-Bernoulli mode (root of ``cos x cosh x = -1``).
CANTILEVER_BETA1 = 1.8751040687119611

#: Mass of each zero-length body between two joints of one node, as a fraction of the
#: segment's mass (the model refuses zero masses; see the module docstring).
NODE_MASS_FRACTION = 1e-6

#: Joint kinds of one node, in their order along the chain: bending about the beam z axis
#: (deflection along y), bending about y (deflection along z), torsion about x.
NODE_JOINTS = ("bend_z", "bend_y", "twist")

LUMPINGS = ("midpoint", "uniform")

#: Separator of beam link names: ``"{beam}/seg{j}/{kind}"``.
_NAME_RE = r"^{}/seg(\d+)/(bend_z|bend_y|twist)$"


class Beam(eqx.Module):
    """A uniform beam and its discretisation into ``num_segments`` rigid segments.

    Attributes:
        length: ``()`` beam length ``L``, m.
        mass_per_length: ``()`` ``mu``, kg/m.
        bending_stiffness: ``(2,)`` ``(EI_y, EI_z)``, N m^2: ``EI_z`` resists bending about the
            beam z axis (deflection along y), ``EI_y`` bending about y (deflection along z).
        torsional_stiffness: ``()`` ``GJ``, N m^2 (zero when torsion is not modelled).
        section_inertia_per_length: ``(2,)`` ``(rho I_y, rho I_z)``, cross-section mass moments
            of inertia per unit length about the beam y and z axes, kg m (``rho I_p`` is their sum).
        damping_time: ``()`` Kelvin-Voigt time ``beta``, s (joint damping ``beta K``).
        num_segments: static ``N >= 1``.
        planar: static; True models only bending about the beam z axis.
        torsion: static; True adds a torsion joint per node.
        lumping: static ``"midpoint"`` (root stiffness ``2 EI / l``, second order) or
            ``"uniform"`` (``EI / l`` everywhere, first order).
    """

    length: Array
    mass_per_length: Array
    bending_stiffness: Array
    torsional_stiffness: Array
    section_inertia_per_length: Array
    damping_time: Array
    num_segments: int = eqx.field(static=True)
    planar: bool = eqx.field(static=True)
    torsion: bool = eqx.field(static=True)
    lumping: str = eqx.field(static=True)

    def __init__(
        self,
        length: Any,
        mass_per_length: Any,
        bending_stiffness: Any,
        num_segments: int,
        *,
        torsional_stiffness: Any = None,
        section_inertia_per_length: Any = None,
        damping_ratio: Any = None,
        damping_time: Any = None,
        planar: bool = False,
        lumping: str = "midpoint",
        dtype: Any = None,
    ):
        """Describe a uniform beam (see the module docstring for the lumping scheme).

        Arguments:
            length: ``L > 0``, m.
            mass_per_length: ``mu > 0``, kg/m.
            bending_stiffness: ``EI > 0`` (both planes) or ``(EI_y, EI_z)``, N m^2. A planar
                beam uses ``EI_z`` only.
            num_segments: ``N >= 1`` rigid segments.
            torsional_stiffness: ``GJ > 0``, N m^2, to model torsion (default: no torsion).
            section_inertia_per_length: ``rho I > 0`` (both axes) or ``(rho I_y, rho I_z)``,
                kg m. Required with torsion (it sets the torsional inertia); otherwise it
                defaults to a solid round rod of radius ``L / 1000``
                (``rho I_y = rho I_z = mu r^2 / 4``), whose rotary inertia changes the
                bending frequencies by ``O(1e-6)`` relatively.
            damping_ratio: ``zeta >= 0`` of the first bending mode (Kelvin-Voigt damping).
            damping_time: ``beta >= 0``, s (alternative to ``damping_ratio``; default 0).
            planar: bending about the beam z axis only (one joint per node, plus torsion if
                ``torsional_stiffness`` is given).
            lumping: ``"midpoint"`` (default) or ``"uniform"``.
            dtype: floating dtype (default: JAX's default float).

        Raises:
            ValueError: naming the argument, for a non-positive or non-finite length, mass per
                length, stiffness or section inertia, ``num_segments < 1``, a negative damping,
                both damping arguments, a missing section inertia with torsion, or an unknown
                lumping.
        """
        num_segments = check_count("Beam: num_segments", num_segments, 1)
        check_choice("Beam", lumping, LUMPINGS, "lumping")
        if damping_ratio is not None and damping_time is not None:
            raise ValueError("Beam: give damping_ratio or damping_time, not both")
        torsion = torsional_stiffness is not None
        if torsion and section_inertia_per_length is None:
            raise ValueError(
                "Beam: section_inertia_per_length is required when torsional_stiffness is given "
                "(it is the torsional inertia rho I_p per unit length)"
            )
        dtype = jnp.result_type(float) if dtype is None else dtype
        self.num_segments = int(num_segments)
        self.planar = bool(planar)
        self.torsion = torsion
        self.lumping = lumping
        concrete = not is_traced(
            length,
            mass_per_length,
            bending_stiffness,
            torsional_stiffness,
            section_inertia_per_length,
            damping_ratio,
            damping_time,
        )
        if concrete:
            float_array("Beam: length", length, shape=(), sign="positive")
            float_array("Beam: mass_per_length", mass_per_length, shape=(), sign="positive")
            float_array("Beam: bending_stiffness", bending_stiffness, shape=(2,), scalar="keep", sign="positive")
            if torsion:
                float_array("Beam: torsional_stiffness", torsional_stiffness, shape=(), sign="positive")
            if section_inertia_per_length is not None:
                float_array(
                    "Beam: section_inertia_per_length",
                    section_inertia_per_length,
                    shape=(2,),
                    scalar="keep",
                    sign="positive",
                )
            for name, value in (("damping_ratio", damping_ratio), ("damping_time", damping_time)):
                if value is not None:
                    arr = np.asarray(value, np.float64)
                    if arr.shape != () or not np.isfinite(arr) or arr < 0:
                        raise ValueError(f"Beam: {name} must be a non-negative finite scalar, got {value!r}")
        self.length = jnp.asarray(length, dtype)
        self.mass_per_length = jnp.asarray(mass_per_length, dtype)
        self.bending_stiffness = jnp.broadcast_to(jnp.asarray(bending_stiffness, dtype), (2,))
        self.torsional_stiffness = jnp.asarray(0.0 if torsional_stiffness is None else torsional_stiffness, dtype)
        if section_inertia_per_length is None:
            radius = 1e-3 * self.length
            section = jnp.broadcast_to(0.25 * self.mass_per_length * radius**2, (2,))
        else:
            section = jnp.broadcast_to(jnp.asarray(section_inertia_per_length, dtype), (2,))
        self.section_inertia_per_length = section
        if damping_ratio is not None:
            weakest = self.bending_stiffness[1] if self.planar else jnp.min(self.bending_stiffness)
            omega1 = CANTILEVER_BETA1**2 * jnp.sqrt(weakest / (self.mass_per_length * self.length**4))
            self.damping_time = 2.0 * jnp.asarray(damping_ratio, dtype) / omega1
        else:
            self.damping_time = jnp.asarray(0.0 if damping_time is None else damping_time, dtype)

    @property
    def node_joints(self) -> tuple[str, ...]:
        """Joint kinds of one node, in chain order (a subset of :data:`NODE_JOINTS`)."""
        kinds = ("bend_z",) if self.planar else ("bend_z", "bend_y")
        return kinds + (("twist",) if self.torsion else ())

    @property
    def segment_length(self) -> Array:
        """``l = L / N``, m."""
        return self.length / self.num_segments

    @property
    def mass(self) -> Array:
        """Total mass ``mu L``, kg."""
        return self.mass_per_length * self.length


# ------------------------------------------------------------------------------------------
# Closed forms.


def cantilever_frequencies(beam: Beam) -> dict[str, Array]:
    """First natural frequencies of the continuous clamped-free beam, rad/s.

    Euler-Bernoulli bending ``omega_1 = (1.8751)^2 sqrt(EI / (mu L^4))`` for each plane and
    St-Venant torsion ``omega_t = (pi / 2) sqrt(GJ / (rho I_p L^2))``.

    Returns:
        ``{"bend_z": ..., "bend_y": ..., "twist": ...}`` (scalars; ``"twist"`` only with torsion).
    """
    ei_y, ei_z = beam.bending_stiffness[0], beam.bending_stiffness[1]
    scale = CANTILEVER_BETA1**2 / jnp.sqrt(beam.mass_per_length * beam.length**4)
    out = {"bend_z": scale * jnp.sqrt(ei_z), "bend_y": scale * jnp.sqrt(ei_y)}
    if beam.torsion:
        polar = jnp.sum(beam.section_inertia_per_length)
        out["twist"] = 0.5 * jnp.pi * jnp.sqrt(beam.torsional_stiffness / (polar * beam.length**2))
    return out


# ------------------------------------------------------------------------------------------
# Building and attaching chains.


def _joint_axis_rotation(kind: str, dtype: Any) -> Array:
    """Rotation ``C`` from the beam (node) frame to a joint frame whose z axis is the joint axis."""
    if kind == "bend_z":
        return jnp.eye(3, dtype=dtype)
    if kind == "bend_y":  # Rx(-pi/2) e_z = e_y
        return rot_x(jnp.asarray(-0.5 * math.pi, dtype))
    return rot_y(jnp.asarray(0.5 * math.pi, dtype))  # Ry(pi/2) e_z = e_x


def _stiffness(beam: Beam, kind: str) -> Array:
    if kind == "bend_z":
        return beam.bending_stiffness[1]
    if kind == "bend_y":
        return beam.bending_stiffness[0]
    return beam.torsional_stiffness


class BeamLayout(NamedTuple):
    """Where a beam attached by :func:`attach_beam` lives in its model (static data).

    Attributes:
        name: the beam's name (link-name prefix).
        body: the parent body (0 = base) the root is clamped to.
        kinds: joint kinds of one node (e.g. ``("bend_z", "bend_y", "twist")``).
        joints: ``(N, len(kinds))`` 1-based joint (= link) indices, node by node.
        segments: ``(N,)`` body indices of the segments (the last link of each node).
    """

    name: str
    body: int
    kinds: tuple[str, ...]
    joints: tuple[tuple[int, ...], ...]
    segments: tuple[int, ...]

    @property
    def all_joints(self) -> tuple[int, ...]:
        """Every joint of the beam, 1-based, in chain order."""
        return tuple(j for node in self.joints for j in node)

    def joints_of(self, kind: str) -> tuple[int, ...]:
        """The 1-based joints of one kind (``"bend_z"``, ``"bend_y"`` or ``"twist"``), root first."""
        if kind not in self.kinds:
            raise ValueError(f"BeamLayout: beam {self.name!r} has no {kind!r} joints (it has {self.kinds})")
        k = self.kinds.index(kind)
        return tuple(node[k] for node in self.joints)


def attach_beam(
    model: Model,
    beam: Beam,
    *,
    body: int = 0,
    position: Any = (0.0, 0.0, 0.0),
    rpy: Any = None,
    rotation: Any = None,
    name: str = "beam",
) -> Model:
    """Append a beam chain to ``model``, clamped to ``body``.

    The beam frame (root at ``position``, axis along its x) is placed on the parent body by
    ``position`` and ``rotation = Rx Ry Rz(rpy)`` (parent body frame; give ``rpy`` or a
    ``(3, 3)`` ``rotation``, default identity). The chain's links ``n + 1 ..`` are appended
    node by node (joint kinds :attr:`Beam.node_joints` per node), named
    ``"{name}/seg{j}/{kind}"``; the last link of each node is the rigid segment ``j``. Joint
    stiffness and damping follow the module's lumping scheme. Everything of ``model`` is
    kept (end points, gravity, other joints' stiffness and damping, dtype). At ``q = 0`` the
    beam is straight.

    Arguments:
        model: any system.
        beam: the beam (:class:`Beam`).
        body: static parent body index (0 = base, 1..n = links).
        position: ``(3,)`` root of the beam from the parent body's centroid, parent frame, m.
        rpy: ``(3,)`` SpaceDyn RPY angles of the beam frame in the parent frame, rad.
        rotation: ``(3, 3)`` beam-to-parent rotation (instead of ``rpy``).
        name: unique name of the beam (prefix of its link names, used by :func:`beam_layout`).

    Returns:
        A new :class:`~sdjax.Model` with ``N * len(beam.node_joints)`` more links.

    Raises:
        ValueError: for an unknown body, a wrong shape, both ``rpy`` and ``rotation``, a
            non-rotation matrix, or a name already used by a link of ``model``.
    """
    dtype = model.dtype
    n = model.num_joints
    body = check_index("attach_beam: body", body, 0, n, "0 = base")
    check_name("attach_beam: name", name)
    if any(s.startswith(name + "/") for s in model.link_names):
        raise ValueError(f"attach_beam: model {model.name!r} already has a beam named {name!r}")
    position = jnp.asarray(position)
    if position.shape != (3,):
        raise ValueError(f"attach_beam: position expected shape (3,), got {position.shape}")
    position = position.astype(dtype)
    if rpy is not None and rotation is not None:
        raise ValueError("attach_beam: give rpy or rotation, not both")
    if rotation is not None:
        mount = rotation_matrix("attach_beam: rotation", rotation, dtype)
    else:
        angles = jnp.zeros(3, dtype) if rpy is None else jnp.asarray(rpy)
        if angles.shape != (3,):
            raise ValueError(f"attach_beam: rpy expected shape (3,), got {angles.shape}")
        mount = rpy_to_matrix(angles.astype(dtype))

    kinds = beam.node_joints
    num_nodes, per_node = beam.num_segments, len(kinds)
    seg = beam.segment_length.astype(dtype)
    mu = beam.mass_per_length.astype(dtype)
    section = beam.section_inertia_per_length.astype(dtype)
    axis_rot = [_joint_axis_rotation(kind, dtype) for kind in kinds]
    last = axis_rot[-1]
    zero3 = jnp.zeros(3, dtype)
    half = jnp.stack([0.5 * seg, jnp.zeros((), dtype), jnp.zeros((), dtype)])  # (l/2, 0, 0) in the beam frame

    segment_mass = mu * seg
    node_mass = NODE_MASS_FRACTION * segment_mass
    rigid_mass = segment_mass - (per_node - 1) * node_mass
    transverse = segment_mass * seg**2 / 12.0
    segment_inertia_beam = jnp.diag(
        jnp.stack([(section[0] + section[1]) * seg, transverse + section[0] * seg, transverse + section[1] * seg])
    )
    segment_inertia = matmul(matmul(last.T, segment_inertia_beam), last)  # in the segment's (last joint's) frame
    node_inertia = node_mass * seg**2 / 12.0 * jnp.eye(3, dtype=dtype)

    # One node's links (identical for every node; the root node differs in its first joint's
    # placement and in the stiffness factor), then tiled along the chain.
    node_masses = jnp.stack([node_mass] * (per_node - 1) + [rigid_mass])
    node_inertias = jnp.stack([node_inertia] * (per_node - 1) + [segment_inertia])
    node_to_joint = jnp.stack([zero3] * (per_node - 1) + [-matmul(last.T, half)])  # centroid l/2 beyond the node
    node_from_centroid = jnp.stack([matmul(last.T, half)] + [zero3] * (per_node - 1))  # previous centroid to the node
    node_rotations = [matmul(last.T, axis_rot[0])] + [
        matmul(axis_rot[k - 1].T, axis_rot[k]) for k in range(1, per_node)
    ]
    node_rpy = matrix_to_rpy(jnp.stack(node_rotations))
    root_rpy = matrix_to_rpy(matmul(mount, axis_rot[0]))
    node_stiffness = jnp.stack([_stiffness(beam, kind).astype(dtype) for kind in kinds]) / seg
    factor = np.ones((num_nodes, per_node))
    if beam.lumping == "midpoint":
        factor[0] = 2.0
    stiffness = (jnp.asarray(factor, dtype) * node_stiffness).reshape(-1)
    from_centroid = jnp.tile(node_from_centroid, (num_nodes, 1)).at[0].set(position)
    rpys = jnp.tile(node_rpy, (num_nodes, 1)).at[0].set(root_rpy)
    masses = jnp.tile(node_masses, num_nodes)
    inertias = jnp.tile(node_inertias, (num_nodes, 1, 1))
    to_joint = jnp.tile(node_to_joint, (num_nodes, 1))
    count = num_nodes * per_node
    parents = (body,) + tuple(range(n + 1, n + count))  # a chain hanging on body
    names = tuple(f"{name}/seg{j + 1}/{kind}" for j in range(num_nodes) for kind in kinds)
    return append_links(
        model,
        parents,
        ("R",) * count,
        link_mass=masses,
        link_inertia=inertias,
        parent_centroid_to_joint=from_centroid,
        centroid_to_joint=to_joint,
        joint_rpy=rpys,
        joint_stiffness=stiffness,
        joint_damping=beam.damping_time.astype(dtype) * stiffness,
        link_names=names,
    )


def cantilever_model(beam: Beam, *, base_mass: Any = 1e6, name: str = "beam") -> Model:
    """A beam clamped to a heavy rigid base (a cantilever for simulations and tests).

    The base is a cube-like body of mass ``base_mass`` (inertia ``base_mass * L^2 / 6 E``,
    a cube of side ``L``); the beam root is at the base centroid, along the base x axis.
    With ``base_mass >> mu L`` the free-floating system approaches the clamped beam (the base
    moves by ``O(mu L / base_mass)``).
    """
    mass = jnp.asarray(base_mass, beam.length.dtype)
    base = Model(
        parent=(),
        joint_type=(),
        base_mass=mass,
        base_inertia=mass * beam.length**2 / 6.0 * jnp.eye(3, dtype=beam.length.dtype),
        link_mass=jnp.zeros((0,), beam.length.dtype),
        link_inertia=jnp.zeros((0, 3, 3), beam.length.dtype),
        parent_centroid_to_joint=jnp.zeros((0, 3), beam.length.dtype),
        centroid_to_joint=jnp.zeros((0, 3), beam.length.dtype),
        name=f"{name}_cantilever",
    )
    return attach_beam(base, beam, name=name)


def beam_layout(model: Model, name: str = "beam") -> BeamLayout:
    """Find the beam ``name`` attached by :func:`attach_beam` (from the link names).

    Raises:
        ValueError: if the model has no such beam.
    """
    pattern = re.compile(_NAME_RE.format(re.escape(name)))
    matches = [(i + 1, pattern.match(s)) for i, s in enumerate(model.link_names)]
    found = [(i, int(m.group(1)), m.group(2)) for i, m in matches if m]
    if not found:
        beams = sorted({s.split("/")[0] for s in model.link_names if re.match(r"^[^/]+/seg\d+/", s)})
        raise ValueError(f"beam_layout: model {model.name!r} has no beam named {name!r} (beams: {beams})")
    kinds = tuple(k for k in NODE_JOINTS if any(f[2] == k for f in found))
    num_nodes = max(f[1] for f in found)
    joints = tuple(tuple(i for i, j, _ in found if j == node) for node in range(1, num_nodes + 1))
    first = joints[0][0]
    return BeamLayout(
        name=name,
        body=model.parent[first - 1],
        kinds=kinds,
        joints=joints,
        segments=tuple(node[-1] for node in joints),
    )


def beam_root_frame(model: Model, state: State, layout: BeamLayout) -> tuple[Array, Array]:
    """Root position ``(3,)`` and beam-frame-to-inertial rotation ``(3, 3)`` of the undeformed
    beam (it moves with the parent body), inertial frame."""
    kin = forward_kinematics(model, state)
    first = layout.joints[0][0]
    parent_rotation = kin.rotation[layout.body]
    root = kin.centroid[layout.body] + matmul(parent_rotation, model.parent_centroid_to_joint[first - 1])
    axis_rot = _joint_axis_rotation(layout.kinds[0], model.dtype)
    frame = matmul(matmul(parent_rotation, rpy_to_matrix(model.joint_rpy[first - 1])), axis_rot.T)
    return root, frame


def beam_tip_position(model: Model, state: State, layout: BeamLayout) -> Array:
    """Position of the beam tip (end of the last segment's axis), inertial frame, m; ``(3,)``."""
    kin = forward_kinematics(model, state)
    tip_body = layout.segments[-1]
    # The segment is symmetric about its centroid: tip = centroid - (joint - centroid).
    return kin.centroid[tip_body] - matmul(kin.rotation[tip_body], model.centroid_to_joint[tip_body - 1])


def beam_tip_deflection(model: Model, state: State, layout: BeamLayout) -> Array:
    """Tip displacement from the undeformed (straight) beam, in the beam frame, m; ``(3,)``.

    ``B^T (p_tip - root - B (L, 0, 0))`` with ``B`` the beam frame carried by the parent body;
    components ``(axial, along y, along z)``.
    """
    root, frame = beam_root_frame(model, state, layout)
    tip = beam_tip_position(model, state, layout)
    length = _beam_length(model, layout)
    return matmul(frame.T, tip - root) - jnp.stack([length, jnp.zeros_like(length), jnp.zeros_like(length)])


def _beam_length(model: Model, layout: BeamLayout) -> Array:
    # Every segment's centroid is l/2 from its node: L = 2 N |centroid_to_joint|.
    c = model.centroid_to_joint[layout.segments[-1] - 1]
    return 2.0 * len(layout.segments) * jnp.sqrt(jnp.sum(c * c))


# ------------------------------------------------------------------------------------------
# Energy and linear modes.


def elastic_energy(model: Model, state: State) -> Array:
    """Energy stored in the passive joint springs, ``1/2 sum K_i q_i^2``, J (scalar)."""
    return 0.5 * jnp.sum(model.joint_stiffness * state.q**2)


def linear_modes(model: Model, joints: Any, *, state: State | None = None, base: str = "fixed") -> tuple[Array, Array]:
    """Natural frequencies and mode shapes of the linearised passive joints at rest.

    About an equilibrium ``q*`` (default ``q = 0``, the straight beams) with zero velocity, the
    selected joints obey ``M dq'' + K dq = 0``; the frequencies are ``sqrt(eig(M^-1 K))``,
    computed as the symmetric problem ``L^-1 K L^-T`` with ``M = L L^T`` (Cholesky).

    - ``base="fixed"``: base fixed and every other joint locked; ``M`` is the block of the
      fixed-base joint inertia ``H_m`` (seed 000 eq 3.18) on the selected joints: a beam
      clamped to its (immobile) parent.
    - ``base="floating"``: the base floats with zero momentum and the other joints are locked;
      ``M`` is the block of the generalized inertia ``H* = H_m - H_bm^T H_b^-1 H_bm`` (seed 003
      eq 45), the free-free system modes (base and appendages vibrating together). The base
      moves as the model's base mode lets it: in the plane for a planar base, not at all for
      a fixed one (then the same as ``"fixed"``).

    Arguments:
        model: the system.
        joints: ``k`` static 1-based joint indices (e.g. ``beam_layout(model).all_joints``).
        state: configuration to linearise about (default: ``make_state(model)``); only its
            base attitude and ``q`` matter. Spring forces must be in equilibrium there.
        base: ``"fixed"`` (the beam clamped to an immobile base) or ``"floating"``, the
            spelling of :data:`sdjax.BASE_MODES`. ``"clamped"``, the earlier name of
            ``"fixed"``, still works with a ``DeprecationWarning``.

    Returns:
        ``(frequencies (k,), modes (k, k))``: ascending angular frequencies, rad/s, and the
        mass-normalised mode shapes as columns (``modes^T M modes = E``).
    """
    if base == "clamped":
        warnings.warn(
            'linear_modes: base="clamped" is now spelled base="fixed" (the base-mode name used everywhere)',
            DeprecationWarning,
            stacklevel=2,
        )
        base = "fixed"
    check_choice("linear_modes: base", base, ("fixed", "floating"), "base mode")
    check_no_mimic(model, "linear_modes")
    index = np.asarray(joints, dtype=np.int64).reshape(-1)
    if index.size == 0 or not np.all((index >= 1) & (index <= model.num_joints)):
        raise ValueError(f"linear_modes: joints must be 1-based indices 1..{model.num_joints}, got {index.tolist()}")
    state = make_state(model) if state is None else state
    if base == "fixed":
        mass = inertia_matrix_blocks(model, state)[2]
    else:
        mass = generalized_inertia_matrix(model, state)
    sel = index - 1
    mass = mass[np.ix_(sel, sel)]
    stiffness = jnp.diag(model.joint_stiffness[sel])
    chol = jnp.linalg.cholesky(0.5 * (mass + mass.T))
    left = jax.scipy.linalg.solve_triangular(chol, stiffness, lower=True)
    sym = jax.scipy.linalg.solve_triangular(chol, left.T, lower=True)
    values, vectors = jnp.linalg.eigh(0.5 * (sym + sym.T))
    modes = jax.scipy.linalg.solve_triangular(chol.T, vectors, lower=False)
    return jnp.sqrt(jnp.clip(values, 0.0)), modes
