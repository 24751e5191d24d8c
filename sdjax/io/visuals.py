"""Visual geometry of URDF and MJCF models, per sdjax body, as plain NumPy data.

The :class:`~sdjax.Model` holds only what the dynamics read; what a robot looks like is kept
beside it, in ``UrdfImport.visuals`` (:func:`sdjax.io.import_urdf`) and
``MjcfImport.visuals`` (:func:`sdjax.io.mjcf_import.import_mjcf`): one :class:`VisualShape`
per drawn shape, attached to an sdjax body. :mod:`sdjax.viewer` draws them; nothing here
imports a mesh or viewer library (mesh files are only located, not read).

Frames
------
A shape's pose (``rotation``, ``position``) is given in its **sdjax body frame**: the frame
whose pose :func:`sdjax.forward_kinematics` returns (``Kinematics.rotation[b]``,
``Kinematics.centroid[b]``): origin on the body's centroid, axes those of the sdjax link
frame (for a URDF link: its URDF frame turned so that the joint axis is z; for the base: the
root-link axes). So in the inertial frame a shape sits at
``R = A_b R_shape``, ``p = r_b + A_b p_shape`` (:func:`world_poses`). The shape's own frame
is that of the file's ``<visual><origin>`` (URDF) or of the compiled geom (MJCF).

URDF
----
Every ``<visual>`` of every link (``<collision>`` is not read): ``<box size>``,
``<sphere radius>``, ``<cylinder radius length>`` (along z, centred), ``<capsule radius
length>`` (a non-standard extension some tools write: ``length`` between the sphere centres)
and ``<mesh filename scale>``. A link welded to a body by ``fixed`` joints carries its visuals
into that body with the fixed transform. The colour is the ``<material>``'s ``<color rgba>``,
given in the visual or by name at robot level; textures are not read.

Mesh file names: ``package://pkg/rest`` is looked for as ``DIR/pkg/rest`` for each ``DIR`` of
the ``package_dirs`` argument, then of the ``ROS_PACKAGE_PATH`` environment variable (``:``
separated), then as ``rest`` below the nearest folder named ``pkg`` among the URDF file's
folder and its ancestors (how packages are laid out in ``example-robot-data`` and in ROS
workspaces). ``file://path`` and plain paths are relative to the URDF file's folder (to the
working directory for URDF text). A file not found is not an error: ``mesh_file`` is ``None``
and the viewer draws that body from its inertia instead, with a warning naming the file.

A malformed ``<visual>`` (a missing size, a bad number, an unknown geometry) does not stop
the model from loading: that shape is left out with a warning naming the file, link and
element.

MJCF
----
Geoms of the kept bodies, taken from MuJoCo's compiled model (``mesh_vert``/``mesh_face``:
the vertices already scaled and moved to the frame of the compiled geom pose), in the groups
MuJoCo's own viewer shows by default (``group`` 0, 1 and 2; the menagerie models put their
collision geoms in group 3). On a body that has *visual-only* geoms (``contype`` =
``conaffinity`` = 0, the menagerie's ``visual`` class), its colliding geoms are left out (they
are the collision proxies of the visual meshes). Planes, height fields and SDF geoms are not
drawn, nor geoms with zero alpha. The colour is ``geom_rgba``, or the material's ``rgba``
when the geom has a material and its own rgba is MuJoCo's default.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.io.dh import euler123_to_matrix

#: Kinds of :class:`VisualShape`, and what ``size`` holds for each (m).
VISUAL_KINDS = {
    "box": "(3,) side lengths along the shape's x, y, z",
    "sphere": "(1,) radius",
    "cylinder": "(2,) radius, length along the shape's z (centred)",
    "capsule": "(2,) radius, length of the cylindrical part along z (between the sphere centres; centred)",
    "ellipsoid": "(3,) semi-axes along x, y, z",
    "mesh": "(3,) scale factors applied to the vertices (URDF scale; 1 for MJCF, already scaled)",
}


@dataclasses.dataclass(frozen=True, eq=False)
class VisualShape:
    """One drawn shape attached to an sdjax body (module docstring: frames and sources).

    Attributes:
        body: sdjax body index (0 = base, ``i`` = link ``i``).
        rotation: ``(3, 3)`` shape frame to body frame.
        position: ``(3,)`` shape-frame origin in the body frame (from the body's centroid), m.
        kind: one of :data:`VISUAL_KINDS`.
        size: the kind's dimensions (see :data:`VISUAL_KINDS`), m.
        rgba: ``(4,)`` colour and opacity in ``[0, 1]``, or ``None`` (not given: the viewer
            picks one).
        mesh_file: ``kind == "mesh"`` from a file: its resolved absolute path, or ``None``
            when it was not found.
        mesh_uri: the mesh file name as written in the model file (for messages).
        vertices: ``(V, 3)`` mesh vertices in the shape frame, m (MJCF meshes, compiled by
            MuJoCo); ``None`` for a mesh to read from ``mesh_file``.
        faces: ``(F, 3)`` vertex indices of the triangles (with ``vertices``).
        link: the URDF link or MJCF body it was written on.
        name: the URDF ``<visual name>`` or MJCF geom name (may be empty).
        source: where it was read, for messages (``"robot.urdf: link 'hand' <visual> 2"``).
    """

    body: int
    rotation: np.ndarray
    position: np.ndarray
    kind: str
    size: np.ndarray
    rgba: np.ndarray | None = None
    mesh_file: str | None = None
    mesh_uri: str | None = None
    vertices: np.ndarray | None = None
    faces: np.ndarray | None = None
    link: str = ""
    name: str = ""
    source: str = ""

    @property
    def resolved(self) -> bool:
        """Whether the shape can be drawn without looking for a file (``False`` only for a mesh
        file that was not found)."""
        return self.kind != "mesh" or self.vertices is not None or self.mesh_file is not None

    def moved(self, body: int, rotation: np.ndarray, position: np.ndarray) -> VisualShape:
        """This shape on ``body`` at the pose ``(rotation, position)`` there."""
        return dataclasses.replace(
            self, body=int(body), rotation=np.asarray(rotation, np.float64), position=np.asarray(position, np.float64)
        )


def world_poses(
    visuals: Sequence[VisualShape], body_rotation: Any, body_position: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Poses of shapes in the inertial frame.

    Arguments:
        visuals: ``V`` shapes.
        body_rotation: ``(..., n + 1, 3, 3)`` body frame to inertial (``Kinematics.rotation``).
        body_position: ``(..., n + 1, 3)`` body frame origins, m (``Kinematics.centroid``).

    Returns:
        ``(rotation (..., V, 3, 3), position (..., V, 3))``: ``A_b R_shape`` and
        ``r_b + A_b p_shape``.
    """
    rot, pos = np.asarray(body_rotation, np.float64), np.asarray(body_position, np.float64)
    if not visuals:
        return np.zeros((*rot.shape[:-3], 0, 3, 3)), np.zeros((*pos.shape[:-2], 0, 3))
    bodies = np.array([v.body for v in visuals])
    local_rot = np.stack([v.rotation for v in visuals])
    local_pos = np.stack([v.position for v in visuals])
    a = rot[..., bodies, :, :]
    return a @ local_rot, pos[..., bodies, :] + np.einsum("...vij,vj->...vi", a, local_pos)


# ------------------------------------------------------------------------------------------
# Mesh files.


def package_dirs_from_env() -> list[str]:
    """The folders of the ``ROS_PACKAGE_PATH`` environment variable (``os.pathsep`` separated)."""
    return [d for d in os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep) if d]


def resolve_mesh_path(
    uri: str, base_dir: str | os.PathLike | None, package_dirs: Sequence[str | os.PathLike] = ()
) -> str | None:
    """Absolute path of a URDF mesh file name, or ``None`` when no such file exists.

    Arguments:
        uri: ``package://pkg/rest``, ``file://path`` or a path.
        base_dir: folder of the URDF file (relative paths and the walk up for ``pkg``); ``None``
            for URDF text (relative to the working directory, no walk).
        package_dirs: folders holding packages (``DIR/pkg``), searched first, then
            ``ROS_PACKAGE_PATH`` (module docstring).
    """
    if uri.startswith("package://"):
        package, _, rest = uri[len("package://") :].partition("/")
        candidates = [os.path.join(os.fspath(d), package, rest) for d in [*package_dirs, *package_dirs_from_env()]]
        if base_dir is not None:
            folder = os.path.abspath(os.fspath(base_dir))
            while True:
                if os.path.basename(folder) == package:
                    candidates.append(os.path.join(folder, rest))
                candidates.append(os.path.join(folder, package, rest))  # a sibling package folder
                up = os.path.dirname(folder)
                if up == folder:
                    break
                folder = up
    else:
        path = uri[len("file://") :] if uri.startswith("file://") else uri
        candidates = [path if os.path.isabs(path) or base_dir is None else os.path.join(os.fspath(base_dir), path)]
    for candidate in candidates:
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


# ------------------------------------------------------------------------------------------
# URDF.


class _Skip(Exception):
    """A malformed ``<visual>``: left out with a warning."""


def _floats(where: str, text: str | None, size: int, default: Sequence[float] | None = None) -> np.ndarray:
    if text is None:
        if default is None:
            raise _Skip(f"{where}: missing")
        return np.asarray(default, np.float64)
    try:
        values = np.array([float(v) for v in text.split()], np.float64)
    except ValueError:
        raise _Skip(f"{where}: expected {size} number(s), got {text!r}") from None
    if values.shape != (size,) or not np.all(np.isfinite(values)):
        raise _Skip(f"{where}: expected {size} finite number(s), got {text!r}")
    return values


def _color(where: str, material: ET.Element) -> np.ndarray | None:
    color = material.find("color")
    if color is None:
        return None
    rgba = _floats(f"{where} <color rgba>", color.get("rgba"), 4)
    if np.any((rgba < 0) | (rgba > 1)):
        raise _Skip(f"{where} <color rgba>: expected values in [0, 1], got {color.get('rgba')!r}")
    return rgba


def urdf_materials(label: str, robot: ET.Element) -> dict[str, np.ndarray]:
    """Colours ``(4,)`` of the robot-level ``<material name>`` elements that have a
    ``<color rgba>`` (a malformed one is left out with a warning)."""
    out = {}
    for material in robot.findall("material"):
        name = material.get("name")
        try:
            rgba = _color(f"{label}: <material name={name!r}>", material)
        except _Skip as err:
            warnings.warn(str(err), stacklevel=3)
            continue
        if name and rgba is not None:
            out[name] = rgba
    return out


def urdf_link_visuals(
    label: str,
    link: ET.Element,
    materials: dict[str, np.ndarray],
    base_dir: str | None,
    package_dirs: Sequence[str | os.PathLike] = (),
) -> list[VisualShape]:
    """The ``<visual>`` shapes of one URDF ``<link>``, posed in the **URDF link frame** (``body``
    is -1 until :func:`sdjax.io.urdf.tree_import` places them on their sdjax body)."""
    out = []
    name = link.get("name", "")
    for k, visual in enumerate(link.findall("visual"), start=1):
        where = f"{label}: link {name!r} <visual> {k}" + (f" ({visual.get('name')!r})" if visual.get("name") else "")
        try:
            out.append(_urdf_visual(where, visual, materials, base_dir, package_dirs, name))
        except _Skip as err:
            warnings.warn(f"{err}; this shape is not drawn", stacklevel=3)
    return out


def _urdf_visual(
    where: str,
    visual: ET.Element,
    materials: dict[str, np.ndarray],
    base_dir: str | None,
    package_dirs: Sequence[Any],
    link: str,
) -> VisualShape:
    origin = visual.find("origin")
    rotation, position = np.eye(3), np.zeros(3)
    if origin is not None:
        rotation = euler123_to_matrix(_floats(f"{where} <origin rpy>", origin.get("rpy"), 3, (0.0, 0.0, 0.0)))
        position = _floats(f"{where} <origin xyz>", origin.get("xyz"), 3, (0.0, 0.0, 0.0))
    geometry = visual.find("geometry")
    shapes = [] if geometry is None else list(geometry)
    if len(shapes) != 1:
        raise _Skip(f"{where} <geometry>: expected one shape element, got {len(shapes)}")
    shape = shapes[0]
    tag, at = shape.tag, f"{where} <{shape.tag}"
    mesh_file = uri = None
    if tag == "box":
        size = _floats(f"{at} size>", shape.get("size"), 3)
    elif tag == "sphere":
        size = _floats(f"{at} radius>", shape.get("radius"), 1)
    elif tag in ("cylinder", "capsule"):
        size = np.concatenate(
            [_floats(f"{at} radius>", shape.get("radius"), 1), _floats(f"{at} length>", shape.get("length"), 1)]
        )
    elif tag == "mesh":
        uri = shape.get("filename")
        if not uri:
            raise _Skip(f"{at} filename>: missing")
        text = shape.get("scale")
        size = (
            np.full(3, float(_floats(f"{at} scale>", text, 1)[0]))
            if text is not None and len(text.split()) == 1
            else _floats(f"{at} scale>", text, 3, (1.0, 1.0, 1.0))
        )
        mesh_file = resolve_mesh_path(uri, base_dir, package_dirs)
    else:
        raise _Skip(f"{where} <geometry>: unknown shape <{tag}>; expected box, sphere, cylinder, capsule or mesh")
    if tag != "mesh" and np.any(size < 0):
        raise _Skip(f"{at}>: sizes must be non-negative, got {size.tolist()}")
    rgba = None
    material = visual.find("material")
    if material is not None:
        rgba = _color(f"{where} <material>", material)
        if rgba is None:
            rgba = materials.get(material.get("name", ""))
    return VisualShape(
        -1, rotation, position, tag, size, rgba, mesh_file, uri, link=link, name=visual.get("name", ""), source=where
    )


# ------------------------------------------------------------------------------------------
# MJCF.

_MJ_SPHERE, _MJ_CAPSULE, _MJ_ELLIPSOID, _MJ_CYLINDER, _MJ_BOX, _MJ_MESH = 2, 3, 4, 5, 6, 7
#: Geom groups MuJoCo's viewer shows by default (``mjVisual``'s ``geomgroup``: 1 1 1 0 0 0).
MJCF_VISUAL_GROUPS = (0, 1, 2)
_MJ_DEFAULT_RGBA = np.array([0.5, 0.5, 0.5, 1.0], np.float32)


def mjcf_body_visuals(m: Any, body: int, label: str, body_name: str, geom_name: Any) -> list[VisualShape]:
    """The drawn geoms of MuJoCo body ``body`` of the compiled ``mjModel`` ``m``, posed in that
    **MuJoCo body frame** (``body`` is -1 until placed; module docstring: which geoms)."""
    from sdjax.io.mjcf_import import _rotation_wxyz

    geoms = [
        g
        for g in range(int(m.body_geomadr[body]), int(m.body_geomadr[body]) + int(m.body_geomnum[body]))
        if int(m.geom_group[g]) in MJCF_VISUAL_GROUPS
    ]
    visual_only = [g for g in geoms if m.geom_contype[g] == 0 and m.geom_conaffinity[g] == 0]
    out = []
    for g in visual_only or geoms:
        kind = int(m.geom_type[g])
        half = np.asarray(m.geom_size[g], np.float64)
        rgba = np.asarray(m.geom_rgba[g], np.float64)
        if int(m.geom_matid[g]) >= 0 and np.allclose(m.geom_rgba[g], _MJ_DEFAULT_RGBA):
            rgba = np.asarray(m.mat_rgba[int(m.geom_matid[g])], np.float64)
        if rgba[3] <= 0:
            continue
        vertices = faces = uri = None
        if kind == _MJ_SPHERE:
            name, size = "sphere", half[:1]
        elif kind == _MJ_CAPSULE:
            name, size = "capsule", np.array([half[0], 2.0 * half[1]])
        elif kind == _MJ_CYLINDER:
            name, size = "cylinder", np.array([half[0], 2.0 * half[1]])
        elif kind == _MJ_BOX:
            name, size = "box", 2.0 * half
        elif kind == _MJ_ELLIPSOID:
            name, size = "ellipsoid", half.copy()
        elif kind == _MJ_MESH:
            mesh = int(m.geom_dataid[g])
            v0, nv = int(m.mesh_vertadr[mesh]), int(m.mesh_vertnum[mesh])
            f0, nf = int(m.mesh_faceadr[mesh]), int(m.mesh_facenum[mesh])
            name, size = "mesh", np.ones(3)
            vertices = np.array(m.mesh_vert[v0 : v0 + nv], np.float64)
            faces = np.array(m.mesh_face[f0 : f0 + nf], np.int64)
            uri = _mesh_name(m, mesh)
        else:
            continue  # plane, height field, SDF
        where = f"{label}: body {body_name!r} geom {geom_name(g) or g!r}"
        out.append(
            VisualShape(
                -1, _rotation_wxyz(m.geom_quat[g]), np.asarray(m.geom_pos[g], np.float64), name, size, rgba,
                mesh_uri=uri, vertices=vertices, faces=faces, link=body_name, name=geom_name(g), source=where,
            )
        )  # fmt: skip
    return out


def _mesh_name(m: Any, mesh: int) -> str:
    """The mesh's file name (or its name) from the compiled model's name tables."""
    names = bytes(m.paths) if getattr(m, "npaths", 0) else b""
    adr = int(m.mesh_pathadr[mesh]) if hasattr(m, "mesh_pathadr") else -1
    if names and adr >= 0:
        return names[adr:].split(b"\0", 1)[0].decode()
    return bytes(m.names)[int(m.name_meshadr[mesh]) :].split(b"\0", 1)[0].decode()


# ------------------------------------------------------------------------------------------
# Files.


def load_visuals(
    path: str | os.PathLike, *, package_dirs: Sequence[str | os.PathLike] = (), **options: Any
) -> tuple[VisualShape, ...]:
    """The visual shapes of a model file, by suffix: ``.urdf`` (:func:`sdjax.io.import_urdf`
    with ``options``), ``.xml``/``.mjcf`` (:func:`sdjax.io.mjcf_import.import_mjcf`); ``()``
    for the other model files (they hold no visual geometry).

    Arguments:
        path: the model file.
        package_dirs: folders to look for ``package://`` meshes in (URDF).
        options: the reader's options (``base``, ``inertia_check``, ``end_points``,
            ``gravity``): the same as for the model the shapes are drawn on, so that the bodies
            agree.
    """
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    options = {key: value for key, value in options.items() if value is not None}
    if suffix == ".urdf":
        from sdjax.io.urdf import import_urdf

        return import_urdf(path, package_dirs=package_dirs, **options).visuals
    if suffix in (".xml", ".mjcf"):
        from sdjax.io.mjcf_import import import_mjcf

        keep = {key: options[key] for key in ("end_points", "inertia_check") if key in options}
        return import_mjcf(path, **keep).visuals
    return ()


__all__ = [
    "MJCF_VISUAL_GROUPS",
    "VISUAL_KINDS",
    "VisualShape",
    "load_visuals",
    "package_dirs_from_env",
    "resolve_mesh_path",
    "world_poses",
]
