"""URDF robot descriptions: import as a free-floating sdjax model, and export.

Import (:func:`model_from_urdf`, :func:`import_urdf`)
-----------------------------------------------------
The URDF tree's single root link becomes the sdjax base (body 0), joined to the inertial frame
by a free flyer (a space robot floats). Every ``revolute``, ``continuous`` or ``prismatic``
joint becomes one sdjax joint; every ``fixed`` joint is merged away.

- **Base mode** (:data:`sdjax.BASE_MODES`). The ROS convention: a root link called ``world``
  welded (``fixed`` joints) to the tree is the inertial frame, so the base is fixed (the world
  link merged with what is welded to it; it may be massless). A massless ``world`` joined to
  one link by a ``floating`` joint makes that link a floating base, by a ``planar`` joint whose
  plane is the world's x-y plane a planar base (the joint's offset is not kept: the state gives
  the base pose). Any other root floats. ``base=`` overrides the file (a fixed-base arm file
  without a world link, ``base="fixed"``).

- **Fixed joints** (chains and leaves included) weld the child link onto the nearest ancestor
  body whose own joint moves (or the root). Masses add; the centroid is the mass-weighted mean;
  inertias are rotated into the body frame (``R I R^T``) and moved to the merged centroid by the
  parallel-axis theorem ``I + m (|d|^2 E - d d^T)``.
- **Inertial origins** may carry ``xyz`` and ``rpy``: the ``<inertia>`` tensor is given in the
  inertial frame, rotated by ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (URDF's fixed-axis rpy,
  :func:`sdjax.io.dh.euler123_to_matrix`) from the link frame. ``ixy``, ``ixz``, ``iyz`` are the
  tensor's off-diagonal entries (URDF convention).
- **Joint frames.** sdjax wants the joint axis on z (:mod:`sdjax.model`). URDF's child link
  frame sits on the joint and turns about (slides along) ``<axis>`` in that frame (default
  ``1 0 0``). The sdjax frame of the link is the URDF child frame times a constant rotation
  ``S`` taking ``e_z`` to the unit axis by the shortest arc (``S = diag(1, -1, -1)`` for an
  axis ``-z``). Since ``Rot(axis, q) S = S Rz(q)``, the joint coordinate is the same number in
  both descriptions: URDF ``q`` = sdjax ``q`` (no offset, no sign change).
- **Base frame.** sdjax's base frame has its origin on the base centroid (the merged root body's
  centre of mass); its axes are those of the URDF root-link frame. The fixed transform from the
  root-link frame to the sdjax base frame is the pure translation
  ``UrdfImport.root_to_base`` (the base centroid in root-link coordinates, m; rotation identity).
  With the root link at position ``p`` and orientation ``R`` (inertial frame),
  ``r0 = p + R c``, ``A0 = R``; with a root-link-local twist ``(v, w)`` (Pinocchio's free-flyer
  velocity), ``v0 = R (v + w x c)`` and ``w0 = R w``. :func:`state_from_pinocchio` and
  :func:`pinocchio_from_state` convert whole configurations.
- **Link names** are the URDF child-link names of the moving joints; ``UrdfImport.joint_names``
  keeps the URDF joint names. Links are numbered depth-first (children in document order), so
  ``parent < child`` holds.
- **End points** (named frames, as Pinocchio keeps the links it merges as frames). With
  ``end_points=None`` every link welded to a body by fixed joints (``tool0``/``ee_link``
  flanges, sensors, cameras, antennas on the base) and every moving leaf link gives an end
  point named after the link: a frame at the link's origin, with its axes. Any number may sit
  on one body, the base included; those on links come first (in link order, then document
  order), those on the base last. ``end_points=[names]`` picks any links (fixed or moving,
  base included), in the order given; ``end_points=()`` gives none.
- **Joint ``<dynamics>``.** ``damping`` is the viscous coefficient of the joint (N m s/rad or
  N s/m), exactly sdjax's ``joint_damping`` (passive force ``-D qd``), so it is kept.
  ``friction`` (dry friction) has no sdjax counterpart and is ignored, as are ``<limit>``
  (position, velocity and effort bounds), ``<safety_controller>`` and ``<calibration>``:
  the Model holds no limits. Stiffness is zero (URDF has none).
- **Visual geometry** (``<visual>`` shapes, meshes, ``<material>`` colours) does not enter the
  model; it is kept beside it in ``UrdfImport.visuals``, each shape on the sdjax body its link
  was merged into, posed in that body's frame (:mod:`sdjax.io.visuals`), for
  :mod:`sdjax.viewer`. A malformed ``<visual>`` is left out with a warning.
- **Ignored:** ``<collision>``, ``<transmission>``, ``<gazebo>`` and any other element outside
  ``link``/``joint`` dynamics and visuals. Gravity is not part of URDF: the
  model's gravity is the ``gravity`` argument (default zero: a space robot).

Refused with a ``ValueError`` naming the link or joint: joint types ``floating`` and
``planar`` inside the tree (and unknown ones), a ``<mimic>`` of a mimic joint or of no moving joint, several roots, a link that is the child of two
joints or a loop, joints naming undefined links, duplicate names, a zero axis, a base without
mass, a model whose inertia matrix is singular (a joint moving only massless links; see
:func:`sdjax.model.check_well_posed`), malformed numbers, DOCTYPE/entity declarations (no entity
expansion), and files over :data:`MAX_FILE_BYTES`, :data:`MAX_ELEMENTS` or :data:`MAX_LINKS`. Massless moving
links (dummy frames between two joints of a wrist, zero-inertia links) are accepted when the
system stays well posed; a massless body's reference point is its link frame origin.

Export (:func:`model_to_urdf`, :func:`save_urdf`)
-------------------------------------------------
URDF link frames are the sdjax link frames (base: the sdjax base frame, centred on its
centroid), so every joint axis is ``0 0 1``. Revolute joints become ``continuous`` (sdjax has
no limits); prismatic joints get the ``<limit>`` URDF requires with bounds of
:data:`EXPORT_PRISMATIC_LIMIT` (nominal, not a model property). Each end point becomes a
massless leaf link named after it (``_`` appended while the name is taken) on a fixed joint,
so a re-import finds it as a frame. A fixed or planar base is written the ROS way: a link
``world`` (see "Base mode" above) joined to the base by a ``fixed`` joint or a ``planar`` joint
with normal ``0 0 1``, at the identity (the base pose is part of the state, not of the model).
Joint damping is written as ``<dynamics damping>``. Joint stiffness has no URDF counterpart:
a model with non-zero stiffness is refused. Gravity is not written. Numbers use Python's
shortest round-trip representation.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax._checks import check_choice
from sdjax.editing import combine_bodies, rotate_inertia, transform_body
from sdjax.io.inputs import names_the_file, read_text_file, text_number
from sdjax.io.dh import euler123_to_matrix
from sdjax.io.visuals import VisualShape, urdf_link_visuals, urdf_materials
from sdjax.model import MAX_MAGNITUDE, Model
from sdjax.rotation import matrix_to_rpy_numpy, quat_to_matrix, rpy_to_matrix
from sdjax.state import State, make_state

__all__ = [
    "UrdfImport",
    "import_urdf",
    "model_from_urdf",
    "model_to_urdf",
    "pinocchio_from_state",
    "save_urdf",
    "state_from_pinocchio",
]

#: Largest accepted URDF text (bytes) and number of XML elements, checked before building.
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_ELEMENTS = 1_000_000
#: Largest number of links (URDF links, MJCF bodies and sites) turned into a model, checked
#: before the tree is built (as the other readers' limits).
MAX_LINKS = 10_000
#: Bounds (m) written into the ``<limit>`` of exported prismatic joints.
EXPORT_PRISMATIC_LIMIT = 1.0e6

_MOVING = {"revolute": "R", "continuous": "R", "prismatic": "P"}
_REFUSED = {
    "floating": "a floating joint inside the tree (only the base moves freely in sdjax: give it with base=)",
    "planar": "a planar joint inside the tree (sdjax joints are revolute or prismatic; a planar base is base='planar')",
}
#: The name of the URDF link that stands for the inertial frame (the ROS convention): a root
#: of this name welded to the tree makes a fixed base; joined by one ``floating`` or ``planar``
#: joint, a floating or planar base.
WORLD_LINK = "world"
_WORLD_JOINT_BASES = {"fixed": "fixed", "floating": "floating", "planar": "planar"}


@dataclasses.dataclass(frozen=True)
class UrdfImport:
    """A URDF import: the model and how it maps to the URDF description.

    Attributes:
        model: the sdjax :class:`~sdjax.Model`.
        root_link: name of the URDF root link (the base).
        root_to_base: ``(3,)`` origin of the sdjax base frame (the base centroid) in the
            root-link frame, m. The rotation between the two frames is the identity.
        joint_names: ``(n,)`` URDF joint name of each sdjax joint.
        continuous: ``(n,)`` True where the URDF joint is ``continuous`` (Pinocchio stores
            such a joint's position as ``(cos q, sin q)``).
        end_point_names: ``(ne,)`` URDF link whose frame is each end point.
        couplings: :class:`sdjax.constraints.JointCoupling` of each ``<mimic>`` joint (with
            ``mimic="constraints"``).
        visuals: the :class:`sdjax.io.visuals.VisualShape` of every ``<visual>``, on its sdjax
            body, posed in that body's frame (document order of the links, then of the
            visuals).
    """

    model: Model
    root_link: str
    root_to_base: np.ndarray
    joint_names: tuple[str, ...]
    continuous: tuple[bool, ...]
    end_point_names: tuple[str, ...]
    couplings: tuple[Any, ...] = ()
    visuals: tuple[VisualShape, ...] = ()


# ------------------------------------------------------------------------------------------
# XML reading.


def parse_xml(text: str, label: str, kind: str) -> ET.Element:
    """The root element of an XML model (``kind``: ``"URDF"``, ``"MJCF"``), refused with a
    ``ValueError`` starting with ``label`` when it is larger than :data:`MAX_FILE_BYTES`, declares
    a DOCTYPE or entities (no entity expansion), holds more than :data:`MAX_ELEMENTS` elements,
    or is not well-formed."""
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"{label}: {len(text)} characters exceeds the {kind} size limit of {MAX_FILE_BYTES}")
    if re.search(r"<!\s*(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise ValueError(f"{label}: DOCTYPE/ENTITY declarations are not accepted (no entity expansion)")
    if text.count("<") > MAX_ELEMENTS:
        raise ValueError(f"{label}: more than {MAX_ELEMENTS} XML elements")
    try:
        return ET.fromstring(text)
    except ET.ParseError as err:
        raise ValueError(f"{label}: not well-formed XML ({err})") from None


def _read_xml(source: str | os.PathLike) -> tuple[ET.Element, str]:
    """Parse URDF text or a file; returns the ``<robot>`` element and a label for messages."""
    if isinstance(source, str) and source.lstrip().startswith("<"):
        text, label = source, "URDF string"
    else:
        label = os.fspath(source)
        text = read_text_file(label, "URDF", MAX_FILE_BYTES)
    root = parse_xml(text, label, "URDF")
    if root.tag != "robot":
        raise ValueError(f"{label}: the root element must be <robot>, got <{root.tag}>")
    return root, label


def _numbers(where: str, text: str | None, size: int, default: Sequence[float] | None = None) -> np.ndarray:
    if text is None:
        if default is None:
            raise ValueError(f"{where}: missing")
        return np.asarray(default, dtype=np.float64)
    try:
        values = np.array([text_number(v) for v in text.split()], dtype=np.float64)
    except ValueError:
        raise ValueError(f"{where}: expected {size} number(s), got {text!r}") from None
    if values.shape != (size,):
        raise ValueError(f"{where}: expected {size} number(s), got {text!r}")
    if not np.all(np.abs(values) <= MAX_MAGNITUDE):
        raise ValueError(f"{where}: values must be finite and at most {MAX_MAGNITUDE:g} in size, got {text!r}")
    return values


def _origin(where: str, element: ET.Element | None) -> tuple[np.ndarray, np.ndarray]:
    """``(R, p)`` of an ``<origin xyz rpy>`` (identity when absent)."""
    if element is None:
        return np.eye(3), np.zeros(3)
    xyz = _numbers(f"{where} <origin xyz>", element.get("xyz"), 3, (0.0, 0.0, 0.0))
    rpy = _numbers(f"{where} <origin rpy>", element.get("rpy"), 3, (0.0, 0.0, 0.0))
    return euler123_to_matrix(rpy), xyz


@dataclasses.dataclass
class TreeLink:
    name: str
    mass: float = 0.0
    centroid: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))  # link frame
    inertia: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((3, 3)))  # about centroid, link axes
    visuals: list[VisualShape] = dataclasses.field(default_factory=list)  # posed in the link frame (body -1)


@dataclasses.dataclass
class TreeJoint:
    name: str
    kind: str
    parent: str
    child: str
    rotation: np.ndarray  # joint frame in parent link frame
    position: np.ndarray
    axis: np.ndarray
    damping: float
    mimic: tuple[str, float, float] | None = None  # (leader joint name, multiplier, offset)


def _single(where: str, element: ET.Element, tag: str) -> ET.Element | None:
    """The one ``<tag>`` child of ``element`` (``None`` when absent), refused when given twice:
    a second ``<mass>`` or ``<origin>`` would otherwise be ignored without a word."""
    found = element.findall(tag)
    if len(found) > 1:
        raise ValueError(f"{where}: <{tag}> given {len(found)} times; expected at most one")
    return found[0] if found else None


def _parse_link(element: ET.Element) -> TreeLink:
    name = element.get("name")
    if not name:
        raise ValueError("URDF <link> without a name attribute")
    link = TreeLink(name)
    inertial = _single(f"link {name!r}", element, "inertial")
    if inertial is None:
        return link
    where = f"link {name!r} <inertial>"
    mass_el = _single(where, inertial, "mass")
    if mass_el is None:
        raise ValueError(f"{where}: missing <mass>")
    mass = float(_numbers(f"{where} <mass value>", mass_el.get("value"), 1)[0])
    if mass < 0:
        raise ValueError(f"{where}: mass must be non-negative, got {mass}")
    inertia_el = _single(where, inertial, "inertia")
    if inertia_el is None:
        raise ValueError(f"{where}: missing <inertia>")
    entries = {}
    for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
        entries[key] = float(_numbers(f"{where} <inertia {key}>", inertia_el.get(key), 1)[0])
    local = np.array(
        [
            [entries["ixx"], entries["ixy"], entries["ixz"]],
            [entries["ixy"], entries["iyy"], entries["iyz"]],
            [entries["ixz"], entries["iyz"], entries["izz"]],
        ]
    )
    rot, pos = _origin(where, _single(where, inertial, "origin"))
    link.mass, link.centroid, link.inertia = mass, pos, rot @ local @ rot.T
    return link


def _parse_joint(element: ET.Element) -> TreeJoint:
    name = element.get("name")
    if not name:
        raise ValueError("URDF <joint> without a name attribute")
    where = f"joint {name!r}"
    kind = element.get("type")
    if kind is None:
        raise ValueError(f"{where}: missing type attribute")
    if kind not in _MOVING and kind not in _REFUSED and kind != "fixed":
        raise ValueError(f"{where}: unknown joint type {kind!r}; expected revolute, continuous, prismatic or fixed")
    mimic = None
    mimic_el = _single(where, element, "mimic")
    if mimic_el is not None:
        leader = mimic_el.get("joint")
        if not leader:
            raise ValueError(f"{where} <mimic>: missing joint attribute (the leader joint)")
        multiplier = float(_numbers(f"{where} <mimic multiplier>", mimic_el.get("multiplier"), 1, (1.0,))[0])
        offset = float(_numbers(f"{where} <mimic offset>", mimic_el.get("offset"), 1, (0.0,))[0])
        mimic = (leader, multiplier, offset)
    ends: dict[str, str] = {}
    for tag in ("parent", "child"):
        sub = _single(where, element, tag)
        end = None if sub is None else sub.get("link")
        if not end:
            raise ValueError(f"{where}: missing <{tag} link=...>")
        ends[tag] = end
    rot, pos = _origin(where, _single(where, element, "origin"))
    axis_el = _single(where, element, "axis")
    axis = _numbers(f"{where} <axis xyz>", None if axis_el is None else axis_el.get("xyz"), 3, (1.0, 0.0, 0.0))
    damping = 0.0
    dyn = _single(where, element, "dynamics")
    if dyn is not None and dyn.get("damping") is not None:
        damping = float(_numbers(f"{where} <dynamics damping>", dyn.get("damping"), 1)[0])
        if damping < 0:
            raise ValueError(f"{where} <dynamics damping>: must be non-negative, got {damping}")
    if kind in _MOVING or kind == "planar":  # (a planar joint's axis is its plane's normal)
        norm = float(np.linalg.norm(axis))
        if not norm > 0:
            raise ValueError(f"{where} <axis xyz>: the joint axis must be non-zero, got {axis.tolist()}")
        axis = axis / norm
    return TreeJoint(name, kind, ends["parent"], ends["child"], rot, pos, axis, damping, mimic)


# ------------------------------------------------------------------------------------------
# Geometry helpers.


def _z_to_axis(axis: np.ndarray) -> np.ndarray:
    """Rotation ``S`` (columns: sdjax link axes in the URDF joint frame) with ``S e_z = axis``,
    the shortest-arc rotation (Rodrigues); ``diag(1, -1, -1)`` (pi about x) for ``axis = -z``."""
    ez = np.array([0.0, 0.0, 1.0])
    v = np.cross(ez, axis)
    s2 = float(v @ v)
    c = float(axis @ ez)
    if s2 < 1e-24:
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    vx = np.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])
    return np.eye(3) + vx + vx @ vx * ((1.0 - c) / s2)


def _world_root(
    label: str,
    root: str,
    links: dict[str, TreeLink],
    children: dict[str, list[TreeJoint]],
    parent_joint: dict[str, TreeJoint],
) -> tuple[str, str]:
    """The base link and the base mode a URDF tree implies (see :func:`import_urdf`).

    A root called :data:`WORLD_LINK` welded to the tree is a fixed base (the world link is the
    base body, merged with what is welded to it). Joined to one child by a ``floating`` or
    ``planar`` joint it only names the base's freedom: it and that joint are dropped here
    (from ``links``, ``children`` and ``parent_joint``) and the child is the base. A planar
    joint's plane must be the inertial x-y plane (its normal, ``<axis>`` in the joint frame,
    along z), the plane of sdjax's planar base.
    """
    if root != WORLD_LINK:
        return root, "floating"
    free = [j for j in children[root] if j.kind in _REFUSED]
    if not free:
        return root, "fixed"
    joint = free[0]
    world = links[root]
    if len(children[root]) != 1 or world.mass > 0 or np.any(world.inertia):
        raise ValueError(
            f"{label}: link {root!r} joins the tree by the {joint.kind} joint {joint.name!r}, so it must be a massless "
            f"link with that joint as its only joint (it has {len(children[root])} child joints"
            f"{', and mass or inertia' if world.mass > 0 or np.any(world.inertia) else ''})"
        )
    if joint.kind == "planar":
        normal = joint.rotation @ (joint.axis / np.linalg.norm(joint.axis))
        if not abs(abs(normal[2]) - 1.0) <= 1e-9:
            raise ValueError(
                f"joint {joint.name!r}: the plane of this planar joint has normal {normal.tolist()} in the world frame; "
                "sdjax's planar base moves in the inertial x-y plane (normal along z): rotate the world frame"
            )
    del links[root], children[root], parent_joint[joint.child]
    return joint.child, joint.kind


# ------------------------------------------------------------------------------------------
# Import.


@names_the_file
def import_urdf(
    source: str | os.PathLike,
    *,
    base_link: str | None = None,
    name: str | None = None,
    end_points: Sequence[str] | None = None,
    gravity: Any = None,
    dtype: Any = None,
    inertia_check: str = "physical",
    base: str | None = None,
    mimic: str = "coordinates",
    package_dirs: Sequence[str | os.PathLike] = (),
) -> UrdfImport:
    """Read a URDF description into an sdjax model (see the module docstring).

    Arguments:
        source: a file path, or the URDF text itself (a string starting with ``<``).
        base_link: if given, the name the root link must have (a check).
        name: model name (default: the ``<robot name>``).
        end_points: links whose frames become end points, in this order (default: every
            fixed child and moving leaf, see the module docstring).
        gravity: ``(3,)`` gravity, inertial frame, m/s^2 (default zero).
        dtype: floating dtype of the model arrays.
        inertia_check: ``"physical"`` (default) refuses inertia tensors that break the triangle
            inequality; ``"positive_definite"`` accepts them (see :class:`~sdjax.Model`).
        base: the base mode (:data:`sdjax.BASE_MODES`). Default: from the file, a root link
            called ``world`` (:data:`WORLD_LINK`) welded to the tree gives ``"fixed"``, joined by a
            ``floating`` or ``planar`` joint ``"floating"`` or ``"planar"``; any other root floats.
        mimic: what ``<mimic>`` joints become (a ``<mimic>`` on a fixed joint couples nothing
            and is ignored). ``"coordinates"`` (default): mimic joints of the model
            (:attr:`sdjax.Model.mimic_leader`): no coordinate of their own, moved by their
            leader, their torque acting on it (Pinocchio's mimic joints; every algorithm of the
            core runs in the joint coordinates). ``"constraints"``: every joint a coordinate and
            each ``<mimic>`` a :class:`sdjax.constraints.JointCoupling` in
            ``UrdfImport.couplings``, for the constrained dynamics of :mod:`sdjax.constraints`
            (MuJoCo's equality constraints; the plain functions would let the followers move
            freely). ``"refuse"``: refuse the file, naming the first ``<mimic>``.
        package_dirs: folders holding the packages of ``package://`` mesh file names (searched
            before ``ROS_PACKAGE_PATH`` and the URDF file's ancestors; see
            :mod:`sdjax.io.visuals`).

    Returns:
        An :class:`UrdfImport` (model, root link, root-to-base offset, joint names, couplings,
        visual shapes).

    Raises:
        ValueError: naming the link or joint and the problem (see the module docstring).
    """
    robot, label = _read_xml(source)
    is_text = isinstance(source, str) and source.lstrip().startswith("<")
    base_dir = None if is_text else os.path.dirname(os.path.abspath(label))
    materials = urdf_materials(label, robot)
    links: dict[str, TreeLink] = {}
    for element in robot.findall("link"):
        link = _parse_link(element)
        if link.name in links:
            raise ValueError(f"{label}: duplicate link name {link.name!r}")
        link.visuals = urdf_link_visuals(label, element, materials, base_dir, package_dirs)
        links[link.name] = link
    joints = [_parse_joint(element) for element in robot.findall("joint")]
    return tree_import(
        label,
        links,
        joints,
        base_link=base_link,
        name=name if name is not None else robot.get("name", "urdf_model"),
        end_points=end_points,
        gravity=gravity,
        dtype=dtype,
        inertia_check=inertia_check,
        base=base,
        mimic=mimic,
    )


#: What :func:`import_urdf` does with ``<mimic>`` joints.
MIMIC_CHOICES = ("coordinates", "constraints", "refuse")


def tree_import(
    label: str,
    links: dict[str, TreeLink],
    joints: list[TreeJoint],
    *,
    base_link: str | None,
    name: str,
    end_points: Sequence[str] | None,
    gravity: Any,
    dtype: Any,
    inertia_check: str,
    base: str | None,
    mimic: str = "coordinates",
) -> UrdfImport:
    """The sdjax model of a tree of links joined by URDF-style joints (the builder shared by the
    URDF and MJCF readers; see :func:`import_urdf` for the arguments and the rules)."""
    check_choice("mimic", mimic, MIMIC_CHOICES)
    if len(links) > MAX_LINKS:
        raise ValueError(f"{label}: {len(links)} links exceeds the limit of {MAX_LINKS}")
    parent_joint: dict[str, TreeJoint] = {}
    joint_names: set[str] = set()
    for joint in joints:
        if joint.name in joint_names:
            raise ValueError(f"{label}: duplicate joint name {joint.name!r}")
        joint_names.add(joint.name)
        for end in (joint.parent, joint.child):
            if end not in links:
                raise ValueError(f"joint {joint.name!r}: link {end!r} is not defined")
        if joint.child in parent_joint:
            raise ValueError(
                f"link {joint.child!r} is the child of joints {parent_joint[joint.child].name!r} and {joint.name!r}: "
                "closed loops and links with two parents are not supported (a URDF is a tree)"
            )
        parent_joint[joint.child] = joint
    if not links:
        raise ValueError(f"{label}: no <link> elements")
    roots = [n for n in links if n not in parent_joint]
    if len(roots) != 1:
        if not roots:
            raise ValueError(f"{label}: no root link (every link has a parent joint): the joints form a loop")
        raise ValueError(f"{label}: several root links {roots}; a URDF model must be one tree with one root (the base)")
    root = roots[0]
    children: dict[str, list[TreeJoint]] = {n: [] for n in links}
    for joint in joints:
        children[joint.parent].append(joint)
    root, file_base = _world_root(label, root, links, children, parent_joint)
    if base is not None:
        check_choice("base", base, sorted(_WORLD_JOINT_BASES), "base mode")
    base = file_base if base is None else base
    for joint in parent_joint.values():
        if joint.kind in _REFUSED:
            raise ValueError(f"joint {joint.name!r}: type {joint.kind!r} is not supported: {_REFUSED[joint.kind]}")
    if base_link is not None and base_link != root:
        raise ValueError(
            f"base_link {base_link!r}: the root link of the URDF tree is {root!r} (sdjax's base is the root)"
        )

    # Depth-first pre-order walk (children in document order): the body of each link (a new
    # body at each moving joint, so parent < child and every subtree is contiguous) and the
    # pose (R, p) of each link frame in its body's URDF frame.
    body_of: dict[str, int] = {}
    pose: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    moving: list[TreeJoint] = []  # sdjax joint k + 1 = moving[k]
    body_parent: list[int] = []
    stack = [root]
    while stack:
        link_name = stack.pop()
        incoming = parent_joint.get(link_name)
        if incoming is None:
            body_of[link_name], pose[link_name] = 0, (np.eye(3), np.zeros(3))
        elif incoming.kind == "fixed":
            rot_p, pos_p = pose[incoming.parent]
            body_of[link_name] = body_of[incoming.parent]
            pose[link_name] = (rot_p @ incoming.rotation, rot_p @ incoming.position + pos_p)
        else:
            moving.append(incoming)
            body_parent.append(body_of[incoming.parent])
            body_of[link_name], pose[link_name] = len(moving), (np.eye(3), np.zeros(3))
        stack.extend(j.child for j in reversed(children[link_name]))
    unreached = sorted(set(links) - set(body_of))
    if unreached:
        raise ValueError(f"links {unreached} are not connected to the root {root!r}: their joints form a loop")
    n = len(moving)
    body_links: list[list[str]] = [[] for _ in range(n + 1)]
    for link_name, b in body_of.items():
        body_links[b].append(link_name)

    # Inertial properties of each body in its URDF frame (the moving child link's frame).
    mass = np.zeros(n + 1)
    centroid = np.zeros((n + 1, 3))
    inertia = np.zeros((n + 1, 3, 3))
    for b in range(n + 1):
        # (m, c, I_c) of each link in the body's URDF frame, then their union (parallel-axis theorem).
        parts = [
            transform_body(links[ln].mass, links[ln].centroid, links[ln].inertia, *pose[ln])
            for ln in body_links[b]
            if links[ln].mass > 0 or np.any(links[ln].inertia)
        ]
        mass[b], centroid[b], inertia[b] = combine_bodies(
            np.array([p[0] for p in parts]).reshape(-1),
            np.array([p[1] for p in parts]).reshape(-1, 3),
            np.array([p[2] for p in parts]).reshape(-1, 3, 3),
        )
        if b == 0 and not mass[b] > 0 and base != "fixed":
            welded = sorted(set(body_links[0]) - {root})
            extra = f" with its fixed children {welded}" if welded else ""
            raise ValueError(
                f"the base (root link {root!r}){extra} has no mass: a {base} base needs a positive mass and a "
                "positive-definite inertia; add an <inertial> (or weld the base to the world: base='fixed')"
            )

    # sdjax link frames: F_b = URDF body frame * S_b (S_0 = identity, base origin moved to its centroid).
    frame = [np.eye(3)] + [_z_to_axis(j.axis) for j in moving]
    link_inertia = (
        np.stack([rotate_inertia(inertia[b], frame[b].T) for b in range(1, n + 1)]) if n else np.zeros((0, 3, 3))
    )
    centroid_to_joint = np.stack([-(frame[b].T @ centroid[b]) for b in range(1, n + 1)]) if n else np.zeros((0, 3))
    pcj, rpy = np.zeros((n, 3)), np.zeros((n, 3))
    for k, joint in enumerate(moving):
        p = body_parent[k]
        rot_p, pos_p = pose[joint.parent]
        joint_rot, joint_pos = rot_p @ joint.rotation, rot_p @ joint.position + pos_p  # in body p's URDF frame
        pcj[k] = frame[p].T @ (joint_pos - centroid[p])
        rpy[k] = matrix_to_rpy_numpy(frame[p].T @ joint_rot @ frame[k + 1])

    # End points: named frames on the bodies.
    if end_points is None:
        owners = {root} | {j.child for j in moving}
        # Fixed children (welded links: tool flanges, sensors, cameras) and moving leaves; those
        # on links first (in link order, then document order), those on the base last.
        candidates = [ln for ln in links if ln != root and (ln not in owners or not children[ln])]
        chosen = sorted(candidates, key=lambda ln: (body_of[ln] == 0, body_of[ln]))
    else:
        if isinstance(end_points, str):
            raise ValueError(f"end_points: expected a sequence of link names, got the string {end_points!r}")
        chosen = list(end_points)
        for ln in chosen:
            if ln not in links:
                raise ValueError(f"end_points: link {ln!r} is not defined")
        repeated = sorted(ln for ln, count in collections.Counter(chosen).items() if count > 1)
        if repeated:
            raise ValueError(f"end_points: links {repeated} are listed more than once")
    end_link = tuple(body_of[ln] for ln in chosen)
    # Visual shapes: link frame -> body's URDF frame (pose of the link) -> sdjax body frame
    # (axes frame[b], origin on the centroid).
    visuals = []
    for link_name in links:
        if link_name not in body_of:
            continue
        b = body_of[link_name]
        rot, pos = pose[link_name]
        for shape in links[link_name].visuals:
            visuals.append(
                shape.moved(
                    b, frame[b].T @ rot @ shape.rotation, frame[b].T @ (rot @ shape.position + pos - centroid[b])
                )
            )
    cte = np.zeros((len(chosen), 3))
    erpy = np.zeros((len(chosen), 3))
    for e, ln in enumerate(chosen):
        b = body_of[ln]
        rot, pos = pose[ln]
        cte[e] = frame[b].T @ (pos - centroid[b])
        erpy[e] = matrix_to_rpy_numpy(frame[b].T @ rot)

    relations = _mimic_relations(moving, list(parent_joint.values()), mimic)
    model = Model(
        parent=tuple(body_parent),
        joint_type=tuple(_MOVING[j.kind] for j in moving),
        base_mass=mass[0],
        base_inertia=inertia[0],
        link_mass=mass[1:],
        link_inertia=link_inertia,
        parent_centroid_to_joint=pcj,
        centroid_to_joint=centroid_to_joint,
        joint_rpy=rpy,
        end_point_link=end_link,
        centroid_to_end_point=cte,
        end_point_rpy=erpy,
        joint_damping=np.array([j.damping for j in moving]),
        gravity=gravity,
        link_names=tuple(j.child for j in moving),
        end_point_names=tuple(chosen),
        name=name,
        dtype=dtype,
        inertia_check=inertia_check,
        base=base,
        **_mimic_fields(relations if mimic == "coordinates" else [], len(moving)),
    )
    return UrdfImport(
        model=model,
        root_link=root,
        root_to_base=centroid[0].copy(),
        joint_names=tuple(j.name for j in moving),
        continuous=tuple(j.kind == "continuous" for j in moving),
        end_point_names=tuple(chosen),
        couplings=_couplings(relations) if mimic == "constraints" else (),
        visuals=tuple(visuals),
    )


def _mimic_relations(
    moving: list[TreeJoint], joints: list[TreeJoint], mimic: str
) -> list[tuple[int, int, float, float]]:
    """The ``<mimic>`` relations ``(follower, leader, multiplier, offset)`` (0-based sdjax
    joint indices), checked; or the refusal (``mimic="refuse"``)."""
    # (A <mimic> on a fixed joint couples nothing: reduced URDFs weld their grippers that way.)
    followers = [(j, j.mimic) for j in joints if j.mimic is not None and j.kind != "fixed"]
    if not followers:
        return []
    if mimic == "refuse":
        j, (leader, _, _) = followers[0]
        raise ValueError(
            f"joint {j.name!r}: <mimic joint={leader!r}> couples it to another joint; load with "
            "mimic='coordinates' (mimic joints of the model) or mimic='constraints' (couplings as "
            "sdjax.constraints.JointCoupling for the constrained dynamics)"
        )
    index = {j.name: k for k, j in enumerate(moving)}
    out = []
    for j, (leader, multiplier, offset) in followers:
        if leader not in index:
            raise ValueError(
                f"joint {j.name!r} <mimic joint={leader!r}>: no revolute, continuous or prismatic joint of that name"
            )
        if moving[index[leader]].mimic is not None:
            raise ValueError(
                f"joint {j.name!r} <mimic joint={leader!r}>: that joint mimics another itself; mimic the first leader"
            )
        out.append((index[j.name], index[leader], multiplier, offset))
    return out


def _mimic_fields(relations: list[tuple[int, int, float, float]], n: int) -> dict[str, Any]:
    """The :class:`~sdjax.Model` mimic fields of the relations (none: the defaults)."""
    if not relations:
        return {}
    leader, multiplier, offset = [0] * n, np.ones(n), np.zeros(n)
    for follower, lead, scale, shift in relations:
        leader[follower], multiplier[follower], offset[follower] = lead + 1, scale, shift
    return {"mimic_leader": tuple(leader), "mimic_multiplier": multiplier, "mimic_offset": offset}


def _couplings(relations: list[tuple[int, int, float, float]]) -> tuple[Any, ...]:
    """The relations (0-based joints) as :class:`sdjax.constraints.JointCoupling` (joints 1..n)."""
    from sdjax.constraints import JointCoupling

    return tuple(JointCoupling(follower + 1, lead + 1, scale, shift) for follower, lead, scale, shift in relations)


def model_from_urdf(
    source: str | os.PathLike,
    *,
    base_link: str | None = None,
    name: str | None = None,
    end_points: Sequence[str] | None = None,
    gravity: Any = None,
    dtype: Any = None,
    inertia_check: str = "physical",
    base: str | None = None,
    mimic: str = "coordinates",
) -> Model:
    """The sdjax model of a URDF file or string (see :func:`import_urdf` and the module
    docstring); ``<mimic>`` joints become mimic joints of the model unless ``mimic="refuse"``
    (``"constraints"``, which returns couplings beside the model, needs :func:`import_urdf`).

    Arguments:
        source: a URDF file path, or the URDF text itself.
        base_link, name, end_points, gravity, dtype, inertia_check, base: as
            :func:`import_urdf` (the name the root link must have, a check; the model's name;
            links whose frames become end points; ``(3,)`` gravity, m/s^2; the arrays' dtype;
            the inertia policy; the base mode).
        mimic: ``"coordinates"`` (default) or ``"refuse"``.

    Returns:
        The :class:`~sdjax.Model` (:func:`import_urdf` also returns the names and frames).
    """
    if mimic == "constraints":
        raise ValueError(
            "model_from_urdf: mimic='constraints' returns couplings beside the model; use "
            "sdjax.io.import_urdf(..., mimic='constraints') (its .model and .couplings)"
        )
    return import_urdf(
        source,
        base_link=base_link,
        name=name,
        end_points=end_points,
        gravity=gravity,
        dtype=dtype,
        inertia_check=inertia_check,
        base=base,
        mimic=mimic,
    ).model


# ------------------------------------------------------------------------------------------
# Free-flyer coordinates (Pinocchio layout) <-> sdjax State.


def _joint_slots(info: UrdfImport, pin_model: Any) -> list[tuple[int, int, int]]:
    """``(idx_q, nq, idx_v)`` of each sdjax joint in a Pinocchio model built from the URDF, in
    free-flyer layout (a fixed-base model's indices shifted by the free flyer's 7 and 6)."""
    shift_q, shift_v = (7, 6) if info.model.base == "fixed" else (0, 0)
    slots = []
    for joint_name in info.joint_names:
        jid = pin_model.getJointId(joint_name)
        if jid >= pin_model.njoints:
            raise ValueError(f"joint {joint_name!r} is not in the Pinocchio model")
        slots.append((pin_model.idx_qs[jid] + shift_q, pin_model.nqs[jid], pin_model.idx_vs[jid] + shift_v))
    return slots


def state_from_pinocchio(info: UrdfImport, pin_model: Any, q: Any, v: Any) -> State:
    """sdjax state of a Pinocchio free-flyer configuration of the same URDF.

    Arguments:
        info: the :func:`import_urdf` result.
        pin_model: ``pin.buildModelFromUrdf(path, pin.JointModelFreeFlyer())`` (duck-typed:
            ``getJointId``, ``idx_qs``, ``nqs``, ``idx_vs``, ``njoints``).
        q: ``(nq,)`` ``[p, quat (x, y, z, w), joints]``: root-link position and orientation
            (inertial frame), joint positions (continuous joints as ``(cos, sin)``).
        v: ``(nv,)`` ``[v, w, qd]``: root-link origin velocity and angular velocity in the
            root-link frame, joint rates.

    A fixed-base model pairs with ``pin.buildModelFromUrdf(path)`` (no root joint; ``q`` and
    ``v`` hold the joints only): the root link's frame is then the inertial frame. A model with
    mimic joints pairs with Pinocchio's mimic model (``mimic=True``, reduced coordinates) or
    with its plain one (the mimic joints' values must then follow their leaders).

    Returns:
        The :class:`~sdjax.State` (base centroid position and velocity, inertial frame).
    """
    q, v = np.asarray(q, np.float64), np.asarray(v, np.float64)
    _check_pinocchio_base(info)
    if info.model.base == "fixed":
        q = np.concatenate([np.zeros(3), [0.0, 0.0, 0.0, 1.0], q])
        v = np.concatenate([np.zeros(6), v])
    quat = q[3:7] / np.linalg.norm(q[3:7])
    rot = np.asarray(quat_to_matrix(quat), np.float64)
    c = info.root_to_base
    joint_q, joint_qd = [], []
    for iq, nq, iv in _joint_slots(info, pin_model):
        if nq == 0:  # a Pinocchio mimic joint (mimic=True): no coordinate, make_state fills it in
            continue
        joint_q.append(np.arctan2(q[iq + 1], q[iq]) if nq == 2 else q[iq])
        joint_qd.append(v[iv])
    return make_state(
        info.model,
        base_position=q[:3] + rot @ c,
        base_quaternion=quat,
        base_linear_velocity=rot @ (v[:3] + np.cross(v[3:6], c)),
        base_angular_velocity=rot @ v[3:6],
        q=np.array(joint_q),
        qd=np.array(joint_qd),
    )


def pinocchio_from_state(info: UrdfImport, pin_model: Any, state: State) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`state_from_pinocchio`: ``(q (nq,), v (nv,))`` of an sdjax state (of a
    fixed base: the joints only; its base pose is taken to be the file's world)."""
    _check_pinocchio_base(info)
    rot = np.asarray(state.base_rotation, np.float64)
    c = info.root_to_base
    w_local = rot.T @ np.asarray(state.base_angular_velocity, np.float64)
    fixed = info.model.base == "fixed"
    q = np.zeros(pin_model.nq + (7 if fixed else 0))
    v = np.zeros(pin_model.nv + (6 if fixed else 0))
    q[:3] = np.asarray(state.base_position, np.float64) - rot @ c
    q[3:7] = np.asarray(state.base_quaternion, np.float64)
    v[:3] = rot.T @ np.asarray(state.base_linear_velocity, np.float64) - np.cross(w_local, c)
    v[3:6] = w_local
    joint_q, joint_qd = np.asarray(state.q, np.float64), np.asarray(state.qd, np.float64)
    for k, (iq, nq, iv) in enumerate(_joint_slots(info, pin_model)):
        if nq == 0:  # a Pinocchio mimic joint: its leader holds the coordinate
            continue
        if nq == 2:
            q[iq : iq + 2] = np.cos(joint_q[k]), np.sin(joint_q[k])
        else:
            q[iq] = joint_q[k]
        v[iv] = joint_qd[k]
    if fixed:
        return q[7:], v[6:]
    return q, v


def _check_pinocchio_base(info: UrdfImport) -> None:
    if info.model.base == "planar":
        raise ValueError(
            "state_from_pinocchio / pinocchio_from_state: planar bases are not converted (Pinocchio's URDF reader has "
            "no root joint that matches them); build the twin with sdjax.io.pinocchio.to_pinocchio"
        )


# ------------------------------------------------------------------------------------------
# Export.


def _fmt(values: Any) -> str:
    return " ".join(repr(float(x)) for x in np.ravel(np.asarray(values, np.float64)))


def _urdf_rpy(rotation: np.ndarray) -> np.ndarray:
    """URDF rpy ``(r, p, y)`` with ``R = Rz(y) Ry(p) Rx(r)``: from ``R^T = Rx(-r) Ry(-p) Rz(-y)``."""
    return -matrix_to_rpy_numpy(np.asarray(rotation).T)


def _inertial(parent: ET.Element, mass: float, centroid: np.ndarray, inertia: np.ndarray) -> None:
    el = ET.SubElement(parent, "inertial")
    ET.SubElement(el, "origin", xyz=_fmt(centroid), rpy="0.0 0.0 0.0")
    ET.SubElement(el, "mass", value=repr(float(mass)))
    i = np.asarray(inertia, np.float64)
    ET.SubElement(
        el,
        "inertia",
        ixx=repr(float(i[0, 0])),
        ixy=repr(float(i[0, 1])),
        ixz=repr(float(i[0, 2])),
        iyy=repr(float(i[1, 1])),
        iyz=repr(float(i[1, 2])),
        izz=repr(float(i[2, 2])),
    )


def model_to_urdf(model: Model, *, base_name: str = "base") -> str:
    """URDF text of a model (see the module docstring, "Export").

    Arguments:
        model: the model; its joint stiffness must be zero (URDF cannot hold it).
        base_name: name of the root link (made unique against the link names).

    Returns:
        The URDF document as a string.
    """
    stiffness = np.asarray(model.joint_stiffness, np.float64)
    for nonzero in np.flatnonzero(stiffness != 0):
        raise ValueError(
            f"model_to_urdf: link {nonzero + 1} ({model.link_names[nonzero]!r}) has joint stiffness {stiffness[nonzero]}; URDF has no joint stiffness"
        )
    names = set(model.link_names)
    while base_name in names or base_name == WORLD_LINK:
        base_name += "_"
    if model.base != "floating" and WORLD_LINK in names:
        raise ValueError(
            f"model_to_urdf: a link is named {WORLD_LINK!r}, the root link that carries the {model.base} base; rename it"
        )
    n = model.num_joints
    pcj = np.asarray(model.parent_centroid_to_joint, np.float64)
    cj = np.asarray(model.centroid_to_joint, np.float64)
    rot = np.asarray(rpy_to_matrix(np.asarray(model.joint_rpy, np.float64)), np.float64).reshape(n, 3, 3)
    damping = np.asarray(model.joint_damping, np.float64)
    robot = ET.Element("robot", name=model.name)
    base = ET.SubElement(robot, "link", name=base_name)
    _inertial(base, float(model.base_mass), np.zeros(3), np.asarray(model.base_inertia, np.float64))
    if model.base != "floating":
        ET.SubElement(robot, "link", name=WORLD_LINK)
        mount = ET.SubElement(
            robot, "joint", name=f"{base_name}_{model.base}_joint", type="fixed" if model.base == "fixed" else "planar"
        )
        ET.SubElement(mount, "origin", xyz="0.0 0.0 0.0", rpy="0.0 0.0 0.0")
        ET.SubElement(mount, "parent", link=WORLD_LINK)
        ET.SubElement(mount, "child", link=base_name)
        if model.base == "planar":
            ET.SubElement(mount, "axis", xyz="0.0 0.0 1.0")
    link_name = [base_name, *model.link_names]
    for k in range(n):
        link = ET.SubElement(robot, "link", name=model.link_names[k])
        _inertial(link, float(model.link_mass[k]), -cj[k], np.asarray(model.link_inertia[k], np.float64))
    joint_names = {f"{base_name}_{model.base}_joint"} if model.base != "floating" else set()

    def unique(candidate: str) -> str:
        while candidate in joint_names:
            candidate += "_"
        joint_names.add(candidate)
        return candidate

    moving_names = [unique(f"{model.link_names[k]}_joint") for k in range(n)]
    multiplier, mimic_offset = (
        np.asarray(model.mimic_multiplier, np.float64),
        np.asarray(model.mimic_offset, np.float64),
    )
    for k in range(n):
        p = model.parent[k]
        kind = "continuous" if model.joint_type[k] == "R" else "prismatic"
        joint = ET.SubElement(robot, "joint", name=moving_names[k], type=kind)
        offset = pcj[k] - (cj[p - 1] if p > 0 else 0.0)
        ET.SubElement(joint, "origin", xyz=_fmt(offset), rpy=_fmt(_urdf_rpy(rot[k])))
        ET.SubElement(joint, "parent", link=link_name[p])
        ET.SubElement(joint, "child", link=model.link_names[k])
        ET.SubElement(joint, "axis", xyz="0.0 0.0 1.0")
        if kind == "prismatic":
            bound = repr(EXPORT_PRISMATIC_LIMIT)
            ET.SubElement(joint, "limit", lower="-" + bound, upper=bound, effort=bound, velocity=bound)
        if damping[k] != 0:
            ET.SubElement(joint, "dynamics", damping=repr(float(damping[k])), friction="0.0")
        if model.mimic_leader[k]:
            leader = moving_names[model.mimic_leader[k] - 1]
            ET.SubElement(
                joint, "mimic", joint=leader, multiplier=repr(float(multiplier[k])), offset=repr(float(mimic_offset[k]))
            )
    end_rot = np.asarray(rpy_to_matrix(np.asarray(model.end_point_rpy, np.float64)), np.float64).reshape(-1, 3, 3)
    cte = np.asarray(model.centroid_to_end_point, np.float64)
    all_links = set(link_name)
    for e, body in enumerate(model.end_point_link):
        end_name = model.end_point_names[e]
        while end_name in all_links:
            end_name += "_"
        all_links.add(end_name)
        ET.SubElement(robot, "link", name=end_name)
        joint = ET.SubElement(robot, "joint", name=unique(f"{end_name}_joint"), type="fixed")
        origin = cj[body - 1] if body > 0 else np.zeros(3)  # body frame origin from its centroid
        ET.SubElement(joint, "origin", xyz=_fmt(cte[e] - origin), rpy=_fmt(_urdf_rpy(end_rot[e])))
        ET.SubElement(joint, "parent", link=link_name[body])
        ET.SubElement(joint, "child", link=end_name)
    ET.indent(robot, space="  ")
    return '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n"


def save_urdf(model: Model, path: str | os.PathLike, **kwargs: Any) -> None:
    """Write :func:`model_to_urdf` of ``model`` to ``path``."""
    text = model_to_urdf(model, **kwargs)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
