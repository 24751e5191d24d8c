"""Triangle meshes of visual shapes (:class:`sdjax.io.visuals.VisualShape`) for the viewer.

Every shape becomes one ``trimesh.Trimesh`` in its own frame (primitives built, mesh files
read, scale applied), loaded once and posed by the viewer on its body's frame at each sample.
Mesh files are read with trimesh (a dependency of viser): STL, OBJ, PLY, GLB/glTF, OFF, and
COLLADA ``.dae`` through pycollada (in the ``viewer`` extra). A COLLADA file's ``<unit>`` is
applied (vertices in metres). A file that cannot be found or read is not drawn: its body keeps
the capsule drawing of its inertia, with one warning naming the file.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from sdjax.io.visuals import VisualShape

#: Triangles of the drawn spheres, cylinders and capsules (around their axis).
SECTIONS = 24

_CACHE: dict[
    tuple[str, float], Any
] = {}  # (path, mtime) -> trimesh.Trimesh in the file's own units converted to metres


@dataclasses.dataclass(frozen=True)
class DrawnShape:
    """A shape ready to draw.

    Attributes:
        shape: the :class:`~sdjax.io.visuals.VisualShape`.
        mesh: its ``trimesh.Trimesh`` in the shape frame, m (scale applied).
        wxyz: ``(4,)`` shape frame to body frame, scalar-first (viser's convention).
    """

    shape: VisualShape
    mesh: Any
    wxyz: np.ndarray


def read_mesh_file(path: str) -> Any:
    """The triangles of a mesh file as one ``trimesh.Trimesh`` (a scene's parts joined, their
    colours kept where the file has them; a COLLADA unit applied), cached by path and
    modification time.

    Raises:
        ValueError: naming the file, when it cannot be read or holds no triangles.
    """
    import trimesh

    key = (path, os.path.getmtime(path))
    if key in _CACHE:
        return _CACHE[key]
    try:
        # (trimesh annotates load() as returning any Geometry; with force="scene" it is a Scene.)
        loaded = cast(trimesh.Scene, trimesh.load(path, force="scene"))
    except Exception as err:  # trimesh raises many kinds (and ImportError for a missing reader)
        raise ValueError(f"{path}: cannot read the mesh ({type(err).__name__}: {err})") from None
    scale = _unit_scale(loaded.metadata.get("units") if hasattr(loaded, "metadata") else None)
    parts = [g for g in loaded.dump() if isinstance(g, trimesh.Trimesh) and len(g.faces)]
    if not parts:
        raise ValueError(f"{path}: no triangles in the mesh file")
    mesh = parts[0] if len(parts) == 1 else trimesh.util.concatenate(parts)
    if scale != 1.0:
        mesh.apply_scale(scale)
    _CACHE[key] = mesh
    return mesh


def _unit_scale(units: Any) -> float:
    """Metres per unit of trimesh's ``units`` metadata (COLLADA ``<unit meter>``): ``"meters"``,
    ``"0.001 * meters"``; 1 when absent or not understood."""
    if not isinstance(units, str):
        return 1.0
    text = units.replace(" ", "")
    if text.endswith("*meters"):
        try:
            return float(text[: -len("*meters")])
        except ValueError:
            return 1.0
    return {"millimeters": 1e-3, "centimeters": 1e-2, "inches": 0.0254}.get(text, 1.0)


def shape_mesh(shape: VisualShape) -> Any:
    """The ``trimesh.Trimesh`` of a shape in its own frame, m (see :data:`sdjax.io.visuals.VISUAL_KINDS`).

    Raises:
        ValueError: naming the shape's source (and file) when a mesh file is missing or unreadable.
    """
    import trimesh

    size = np.asarray(shape.size, np.float64)
    if shape.kind == "box":
        return trimesh.creation.box(extents=size)
    if shape.kind == "sphere":
        return trimesh.creation.icosphere(subdivisions=2, radius=float(size[0]))
    if shape.kind == "ellipsoid":
        sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
        sphere.apply_scale(size)
        return sphere
    if shape.kind == "cylinder":
        return trimesh.creation.cylinder(radius=float(size[0]), height=float(size[1]), sections=SECTIONS)
    if shape.kind == "capsule":
        return trimesh.creation.capsule(height=float(size[1]), radius=float(size[0]), count=[SECTIONS, SECTIONS])
    if shape.kind != "mesh":
        raise ValueError(f"{shape.source}: unknown visual kind {shape.kind!r}")
    if shape.vertices is not None:
        mesh = trimesh.Trimesh(np.asarray(shape.vertices, np.float64), np.asarray(shape.faces, np.int64), process=False)
    elif shape.mesh_file is None:
        raise ValueError(f"{shape.source}: mesh file {shape.mesh_uri!r} not found")
    else:
        mesh = read_mesh_file(shape.mesh_file).copy()
    if np.any(size != 1.0):
        mesh.apply_transform(np.diag([*size, 1.0]))  # a negative factor mirrors; trimesh then flips the faces
    return mesh


def drawn_shapes(visuals: Sequence[VisualShape]) -> tuple[list[DrawnShape], set[int]]:
    """The shapes that can be drawn, and the bodies with a shape that cannot (they keep their
    capsules); one warning per file (or shape) that could not be drawn."""
    from sdjax.viewer.geometry import matrix_to_wxyz

    drawn, failed, warned = [], set(), set()
    wxyz = matrix_to_wxyz(np.stack([s.rotation for s in visuals])) if visuals else np.zeros((0, 4))
    for shape, q in zip(visuals, wxyz):
        try:
            drawn.append(DrawnShape(shape, shape_mesh(shape), q))
        except ValueError as err:
            failed.add(shape.body)
            key = shape.mesh_file or shape.mesh_uri or shape.source
            if key not in warned:
                warned.add(key)
                warnings.warn(
                    f"{err}; body {shape.body} ({shape.link!r}) is drawn from its inertia instead", stacklevel=3
                )
    return drawn, failed


def has_own_colors(mesh: Any) -> bool:
    """Whether a mesh carries colours or a texture of its own (a COLLADA or glTF file)."""
    visual = getattr(mesh, "visual", None)
    kind = getattr(visual, "kind", None)
    return kind in ("face", "vertex", "texture")


__all__ = ["SECTIONS", "DrawnShape", "drawn_shapes", "has_own_colors", "read_mesh_file", "shape_mesh"]
