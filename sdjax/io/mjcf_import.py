"""MuJoCo models (MJCF) into sdjax: compiled by MuJoCo itself, then mapped onto the tree.

MuJoCo's compiler resolves everything an MJCF file can say about mass and geometry (defaults
classes, frame orientations in any convention, ``<include>``, inertias inferred from geoms and
meshes) into ``mjModel``; this reader takes the compiled bodies, joints and sites from there,
so it needs the ``mujoco`` package (``pip install "sdjax[mjcf]"``; the core never imports it).

Mapping
-------
- A body with one hinge or slide joint is one sdjax link; a body with several joints becomes a
  chain of massless links (MuJoCo applies a body's joints in order, each about its own anchor
  and axis), the last carrying the body. Joint positions are MuJoCo's ``qpos``: a joint's
  ``ref`` is folded into the geometry, so ``q = qpos`` for every hinge and slide.
- A body without joints is welded to its parent: its mass joins the parent's and its frame
  becomes a named frame (end point), as a welded URDF link does.
- The root: one body under the world with a ``free`` joint is the floating base (static bodies
  under the world, without joints anywhere below them, are dropped: they are scenery); bodies
  joined to the world by hinges or slides, or welded to it, make a fixed base (the world,
  with what is welded to it). A slide-slide-hinge root is imported as a fixed base with two
  massless links, which has the same dynamics as a planar base.
- Sites become named frames (end points), as do welded bodies and moving leaf bodies.
- Joint damping and stiffness (with ``springref`` zero) are kept; gravity is ``option/gravity``.
- Visual geometry (the geoms MuJoCo's viewer shows, meshes as compiled vertex arrays) is kept
  beside the model in ``MjcfImport.visuals``, on the sdjax bodies (:mod:`sdjax.io.visuals`).

- A linear joint equality (``<equality><joint joint1= joint2= polycoef="a0 a1 0 0 0">``, MuJoCo's
  form of URDF's ``<mimic>``) makes ``joint1`` a mimic joint of ``joint2``
  (:attr:`sdjax.Model.mimic_leader`): ``q1 = a1 q2 + a0 + q1_0 - a1 q2_0`` with MuJoCo's
  reference positions ``qpos0``. MuJoCo holds the relation by a soft constraint; sdjax exactly.

Refused, with the element named: ball joints and free joints below the root (sdjax joints are
revolute or prismatic with one base), rotor inertia (``armature``), dry friction
(``frictionloss``), springs with a non-zero rest position, equality constraints other than a
linear coupling of two joints (closed loops, welds, polynomial couplings), passive tendons,
gravity compensation. Joint limits, actuators, contacts
and geoms' collision data are not part of sdjax's model and are left aside.

State mapping: :func:`state_from_mujoco` turns ``(qpos, qvel)`` into a :class:`~sdjax.State`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.io.inputs import names_the_file, read_text_file
from sdjax.io.urdf import (
    MAX_FILE_BYTES,
    MAX_LINKS,
    WORLD_LINK,
    TreeJoint,
    TreeLink,
    UrdfImport,
    parse_xml,
    tree_import,
)
from sdjax.io.visuals import mjcf_body_visuals
from sdjax.model import MAX_MAGNITUDE, edit_model
from sdjax.rotation import matrix_to_quat
from sdjax.state import State, make_state

__all__ = ["MjcfImport", "import_mjcf", "model_from_mjcf", "state_from_mujoco"]

_FREE, _BALL, _SLIDE, _HINGE = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class MjcfImport:
    """An MJCF import: the model and how it maps to MuJoCo's coordinates.

    Attributes:
        model: the sdjax :class:`~sdjax.Model`.
        tree: the underlying tree import (joint and frame names, root-to-base offset).
        joint_ids: ``(n,)`` MuJoCo joint id of each sdjax joint.
        root_body: MuJoCo body id of the floating base's body (0 for a fixed base: the world).
    """

    model: Any
    tree: UrdfImport
    joint_ids: tuple[int, ...]
    root_body: int

    @property
    def visuals(self) -> tuple[Any, ...]:
        """The drawn geoms as :class:`sdjax.io.visuals.VisualShape`, on their sdjax bodies,
        posed in the body frames (``tree.visuals``)."""
        return self.tree.visuals


def _require_mujoco():
    try:
        import mujoco
    except ImportError:
        raise ImportError('reading MJCF needs the mujoco package: pip install "sdjax[mjcf]"') from None
    return mujoco


def _rotation_wxyz(quat: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(quat, np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def _axis_rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation by ``angle`` about the unit ``axis`` (Rodrigues)."""
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)


#: Most bodies an MJCF file may ask MuJoCo to build, counted from its XML before MuJoCo
#: compiles it (``<replicate>`` multiplies what it holds: a 284-byte file of two nested
#: replicates asked for 30,000 bodies and more than 12 GB). The model's own link limit,
#: :data:`sdjax.io.urdf.MAX_LINKS`, applies after compilation.
MAX_BODIES = 2 * MAX_LINKS
#: Most height-field samples (``nrow * ncol`` over every ``<hfield>``) and texture pixels
#: (``width * height`` over every ``<texture>``, six faces for a cube or skybox) an MJCF file may
#: ask MuJoCo to allocate: sdjax's model uses neither, and MuJoCo allocates them before anything
#: can be checked (a 291-byte file asking for a 20000 x 20000 height field took 3.2 GB).
MAX_HFIELD_SAMPLES = 2**24
MAX_TEXTURE_PIXELS = 2**26
#: Attributes whose ``nan`` MuJoCo reads as "not given" (a geom's ``mass="nan"`` silently becomes
#: a mass from its density) or passes on: refused, as every reader refuses non-finite numbers.
_NUMERIC_ATTRIBUTES = frozenset(
    "mass density diaginertia fullinertia pos quat euler axisangle xyaxes zaxis size fromto axis ref springref "
    "stiffness damping armature frictionloss gravity polycoef".split()
)
#: Most files followed while counting, ``<include>`` files and the models of ``<attach>``
#: together (each read within :data:`MAX_FILE_BYTES`).
MAX_INCLUDES = 100


@dataclasses.dataclass
class _BodyCount:
    """What counting one MJCF file shares across its ``<include>`` and ``<attach>`` files."""

    directory: str  # (MuJoCo resolves both kinds of file relative to the main file's directory)
    files_left: int = MAX_INCLUDES
    model_bodies: dict[str, int] = dataclasses.field(default_factory=dict)  # attached file -> bodies
    hfield_samples: int = 0
    texture_pixels: int = 0

    def read(self, label: str, file: str) -> tuple[str, str]:
        """The path and text of a file the MJCF ``label`` names, charged to :data:`MAX_INCLUDES`."""
        self.files_left -= 1
        if self.files_left < 0:
            raise ValueError(f"{label}: more than {MAX_INCLUDES} <include> and <attach> files")
        path = os.path.join(self.directory, file)
        return path, read_text_file(path, "MJCF", MAX_FILE_BYTES)


def _count_bodies(label: str, text: str, count: _BodyCount) -> int:
    """The bodies an MJCF model declares: ``<body>`` elements, the grid of a ``<composite>`` or
    ``<flexcomp>`` and every body of the model an ``<attach>`` inserts, times the ``count`` of
    every enclosing ``<replicate>``, ``<include>`` files counted where they stand; refused once
    beyond :data:`MAX_BODIES`. Reads the XML with the URDF reader's safeguards
    (:func:`sdjax.io.urdf.parse_xml`).

    An ``<attach>`` is counted after the walk, when the model's ``<asset><model>`` names (its own
    and its includes') are all known, as the bodies of the whole attached file (a bound on its
    ``body=`` subtree; the attached file has names of its own). One whose model or file cannot be
    found is refused, since MuJoCo would build it before any count could be made."""
    models: dict[str, str] = {}  # <asset><model> name -> file
    attached: list[tuple[str, int]] = []  # (model name, times)
    total = _count_elements(label, text, 1, count, models, attached)
    for name, times in attached:
        file = models.get(name)
        if file is None or not os.path.isfile(os.path.join(count.directory, file)):
            where = "no <asset><model> of that name" if file is None else f"its file {file!r} is not found"
            raise ValueError(f"{label}: <attach model={name!r}>: {where}")
        if file not in count.model_bodies:
            count.model_bodies[file] = _count_bodies(*count.read(label, file), count)
        total += times * count.model_bodies[file]
        _refuse_beyond_the_cap(label, total)
    return total


def _count_elements(
    label: str, text: str, times: int, count: _BodyCount, models: dict[str, str], attached: list[tuple[str, int]]
) -> int:
    """:func:`_count_bodies`' walk over one text (the model's file or one of its includes), each
    body counted ``times`` over; model names and attachments are collected for the model."""
    root = parse_xml(text, label, "MJCF")
    if root.tag == "robot":  # (MuJoCo would convert it by its own rules: a root link's mass dropped)
        raise ValueError(
            f"{label}: a URDF file (root element <robot>), not MJCF; read it with sdjax.io.urdf (load_model: a .urdf name)"
        )
    if root.tag != "mujoco":
        raise ValueError(f"{label}: root element <{root.tag}>; an MJCF file's is <mujoco>")
    total = 0
    stack: list[tuple[ET.Element, int]] = [(root, times)]
    while stack:  # (a loop, not recursion: nesting depth is the file's to choose)
        element, times = stack.pop()
        for child in element:
            tag, inner = child.tag, times
            _check_numeric_attributes(label, child)
            if tag in ("hfield", "texture"):
                _count_samples(label, child, count)
            if tag == "replicate":
                try:
                    replicas = int(child.get("count", "1"))
                except ValueError:
                    raise ValueError(f"{label}: <replicate count={child.get('count')!r}> is not an integer") from None
                inner = times * max(replicas, 0)
            elif tag == "body":
                total += times
            elif tag in ("composite", "flexcomp"):  # (bodies generated from a grid of `count`)
                try:
                    grid = [max(int(c), 1) for c in child.get("count", "1").split()]
                except ValueError:
                    raise ValueError(f"{label}: <{tag} count={child.get('count')!r}> is not integers") from None
                total += times * math.prod(grid)
            elif tag == "model" and element.tag == "asset" and child.get("name") and child.get("file"):
                models.setdefault(child.get("name", ""), child.get("file", ""))
            elif tag == "attach":
                attached.append((child.get("model", ""), times))
            elif tag == "include" and child.get("file"):
                if os.path.isfile(os.path.join(count.directory, child.get("file", ""))):  # (else MuJoCo's error)
                    path, included = count.read(label, child.get("file", ""))
                    total += _count_elements(path, included, times, count, models, attached)
            _refuse_beyond_the_cap(label, total)
            stack.append((child, inner))
    return total


def _check_numeric_attributes(label: str, element: ET.Element) -> None:
    """Refuse a ``nan`` in the attributes of :data:`_NUMERIC_ATTRIBUTES` (MuJoCo's "not given")."""
    for key, value in element.attrib.items():
        if key in _NUMERIC_ATTRIBUTES and any(token.lower().lstrip("+-") == "nan" for token in value.split()):
            raise ValueError(f"{label}: <{element.tag} {key}={value!r}> is not a number")


def _count_samples(label: str, element: ET.Element, count: _BodyCount) -> None:
    """Add an ``<hfield>``'s samples or a ``<texture>``'s pixels (as its attributes declare them)
    to ``count``, refused beyond :data:`MAX_HFIELD_SAMPLES` or :data:`MAX_TEXTURE_PIXELS`."""
    keys = ("nrow", "ncol") if element.tag == "hfield" else ("width", "height")
    try:
        sizes = [max(int(element.get(key, "0")), 0) for key in keys]
    except ValueError:
        raise ValueError(f"{label}: <{element.tag}> {'/'.join(keys)} are not integers") from None
    if element.tag == "hfield":
        count.hfield_samples += math.prod(sizes)
        if count.hfield_samples > MAX_HFIELD_SAMPLES:
            raise ValueError(f"{label}: height fields of more than {MAX_HFIELD_SAMPLES} samples in all")
    else:
        count.texture_pixels += math.prod(sizes) * (6 if element.get("type") in ("cube", "skybox") else 1)
        if count.texture_pixels > MAX_TEXTURE_PIXELS:
            raise ValueError(f"{label}: textures of more than {MAX_TEXTURE_PIXELS} pixels in all")


def _refuse_beyond_the_cap(label: str, bodies: int) -> None:
    if bodies > MAX_BODIES:
        raise ValueError(
            f"{label}: declares more than {MAX_BODIES} bodies (limit {MAX_BODIES}; the model's {MAX_LINKS} links)"
        )


def _compile(source: str | os.PathLike, mujoco: Any) -> tuple[Any, str]:
    text = os.fspath(source)
    from_string = isinstance(source, str) and text.lstrip().startswith("<")
    label = "MJCF string" if from_string else text
    # Counted before MuJoCo builds anything (its compile of an oversized file allocates first).
    if from_string:
        _count_bodies(label, text, _BodyCount(os.getcwd()))
    else:
        contents = read_text_file(text, "MJCF", MAX_FILE_BYTES)  # (a missing file: "no such MJCF file")
        _count_bodies(label, contents, _BodyCount(os.path.dirname(os.path.abspath(text))))
    try:
        return (mujoco.MjModel.from_xml_string(text) if from_string else mujoco.MjModel.from_xml_path(text)), label
    except ValueError as err:
        raise ValueError(f"{label}: MuJoCo cannot compile it: {err}") from None


def _mimic_relations(label: str, m: Any, name: Any) -> dict[int, tuple[int, float, float]]:
    """The linear joint equalities as mimic relations ``{joint1: (joint2, multiplier, offset)}``
    (MuJoCo joint ids); any other equality constraint is refused, named.

    MuJoCo's joint equality ``y - y0 = a0 + a1 (x - x0) + ... + a4 (x - x0)^4`` (``x0``, ``y0``:
    the joints' ``qpos0``) with ``a2 = a3 = a4 = 0`` is the mimic joint ``y = a1 x + (a0 + y0 -
    a1 x0)`` (this reader's ``q`` is ``qpos``)."""
    mujoco = _require_mujoco()
    relations = {}
    for i in range(m.neq):
        equality = repr(name(mujoco.mjtObj.mjOBJ_EQUALITY, i) or f"equality {i}")
        if int(m.eq_type[i]) != int(mujoco.mjtEq.mjEQ_JOINT):
            raise ValueError(f"{label}: equality constraint {equality} (a closed loop or weld) is not supported")
        follower, leader = int(m.eq_obj1id[i]), int(m.eq_obj2id[i])
        coefficients = np.asarray(m.eq_data[i, :5], np.float64)
        if leader < 0 or np.any(coefficients[2:] != 0) or not m.eq_active0[i] or follower in relations:
            raise ValueError(
                f"{label}: joint equality {equality} is not a linear coupling of two joints active from the start "
                "(sdjax takes y = a0 + a1 x as a mimic joint; a joint held alone, a polynomial of higher degree, "
                "one switched off, or a second equality on the same joint are not supported)"
            )
        x0, y0 = float(m.qpos0[m.jnt_qposadr[leader]]), float(m.qpos0[m.jnt_qposadr[follower]])
        relations[follower] = (leader, float(coefficients[1]), float(coefficients[0] + y0 - coefficients[1] * x0))
    return relations


def _refuse_unsupported(label: str, m: Any, name: Any) -> None:
    mujoco = _require_mujoco()
    for t in range(m.ntendon):
        if m.tendon_stiffness[t] != 0 or m.tendon_damping[t] != 0:
            raise ValueError(
                f"{label}: tendon {name(mujoco.mjtObj.mjOBJ_TENDON, t)!r} has stiffness or damping; passive tendons are not supported"
            )
    for b in range(1, m.nbody):
        if m.body_gravcomp[b] != 0:
            raise ValueError(
                f"{label}: body {name(mujoco.mjtObj.mjOBJ_BODY, b)!r} has gravcomp; gravity compensation is not supported"
            )
    for j in range(m.njnt):
        joint = repr(name(mujoco.mjtObj.mjOBJ_JOINT, j))
        body = repr(name(mujoco.mjtObj.mjOBJ_BODY, int(m.jnt_bodyid[j])))
        kind = int(m.jnt_type[j])
        if kind == _BALL:
            raise ValueError(
                f"{label}: joint {joint} of body {body} is a ball joint; sdjax joints are hinges or slides (use three hinges)"
            )
        if kind == _FREE and m.body_parentid[m.jnt_bodyid[j]] != 0:
            raise ValueError(
                f"{label}: joint {joint} of body {body} is a free joint below the root; only the base moves freely in sdjax"
            )
        dof = int(m.jnt_dofadr[j])
        if kind in (_HINGE, _SLIDE):
            if m.dof_armature[dof] != 0:
                raise ValueError(
                    f"{label}: joint {joint} has armature {float(m.dof_armature[dof])}; rotor inertia is not modelled in sdjax"
                )
            if m.dof_frictionloss[dof] != 0:
                raise ValueError(
                    f"{label}: joint {joint} has frictionloss {float(m.dof_frictionloss[dof])}; dry friction is not modelled in sdjax"
                )
            if m.jnt_stiffness[j] != 0 and m.qpos_spring[m.jnt_qposadr[j]] != 0:
                raise ValueError(
                    f"{label}: joint {joint} has a spring (stiffness {float(m.jnt_stiffness[j])}) with rest position "
                    f"{float(m.qpos_spring[m.jnt_qposadr[j]])}; sdjax springs rest at q = 0"
                )


#: The compiled arrays this reader uses (besides integer topology), checked to be finite and of a
#: sane size before any arithmetic; quaternions and axes must also have a direction.
_NUMERIC_FIELDS = (
    "body_pos",
    "body_quat",
    "body_mass",
    "body_inertia",
    "body_ipos",
    "body_iquat",
    "jnt_pos",
    "jnt_axis",
    "jnt_stiffness",
    "qpos_spring",
    "qpos0",
    "dof_damping",
    "site_pos",
    "site_quat",
)


def _refuse_out_of_range(label: str, m: Any) -> None:
    for field in _NUMERIC_FIELDS:
        values = np.asarray(getattr(m, field), dtype=np.float64)
        bad = np.argwhere(~(np.abs(values) <= MAX_MAGNITUDE))
        if bad.size:
            row = int(bad[0][0])
            raise ValueError(
                f"{label}: compiled {field}[{row}] = {values[row].tolist()} is not finite or beyond {MAX_MAGNITUDE:g} in size"
            )
    for field in ("body_quat", "body_iquat", "site_quat", "jnt_axis"):  # normalised by the reader
        norms = np.linalg.norm(
            np.asarray(getattr(m, field), dtype=np.float64).reshape(-1, 3 if field == "jnt_axis" else 4), axis=1
        )
        for zero in np.flatnonzero(~(norms > 0.0)):  # MuJoCo compiles an overflowing quat or axis to zero
            raise ValueError(f"{label}: compiled {field}[{int(zero)}] is zero (a quaternion or axis with no direction)")


def _moving_bodies(m: Any) -> np.ndarray:
    """``(nbody,)`` True where a body has a joint in its subtree (itself included)."""
    moving = m.body_jntnum > 0
    for b in range(m.nbody - 1, 0, -1):  # children come after their parents
        if moving[b]:
            moving[m.body_parentid[b]] = True
    return moving


@names_the_file
def import_mjcf(
    source: str | os.PathLike,
    *,
    name: str | None = None,
    end_points: Sequence[str] | None = None,
    gravity: Any = None,
    dtype: Any = None,
    inertia_check: str = "physical",
) -> MjcfImport:
    """Read an MJCF model (file path or XML text) into an sdjax model (module docstring).

    Arguments:
        source: a file path, or the MJCF text itself (a string starting with ``<``).
        name: model name (default: the ``<mujoco model>`` name).
        end_points: frames (site, welded-body or leaf-body names) that become end points, in
            this order (default: every site, welded body and moving leaf).
        gravity: ``(3,)`` m/s^2 (default: the file's ``option/gravity``).
        dtype: floating dtype of the model arrays.
        inertia_check: as :func:`sdjax.io.urdf.import_urdf`.

    Raises:
        ImportError: without the ``mujoco`` package.
        ValueError: naming the element that sdjax cannot represent (module docstring), or
            MuJoCo's own compile error.
    """
    mujoco = _require_mujoco()
    m, label = _compile(source, mujoco)

    def element_name(kind: Any, index: int) -> str:
        return mujoco.mj_id2name(m, kind, index) or ""

    _refuse_unsupported(label, m, element_name)
    _refuse_out_of_range(label, m)
    mimic = _mimic_relations(label, m, element_name)
    body_names = [element_name(mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}" for b in range(m.nbody)]
    body_names[0] = WORLD_LINK
    moving = _moving_bodies(m)
    free_roots = [
        b
        for b in range(1, m.nbody)
        if m.body_parentid[b] == 0 and m.body_jntnum[b] and m.jnt_type[m.body_jntadr[b]] == _FREE
    ]
    if len(free_roots) > 1:
        raise ValueError(
            f"{label}: several free bodies {[body_names[b] for b in free_roots]}; sdjax simulates one system with one base"
        )

    geom_name = lambda g: element_name(mujoco.mjtObj.mjOBJ_GEOM, g)  # noqa: E731
    links: dict[str, TreeLink] = {
        WORLD_LINK: TreeLink(WORLD_LINK, visuals=mjcf_body_visuals(m, 0, label, WORLD_LINK, geom_name))
    }
    joints: list[TreeJoint] = []
    anchor = {0: np.zeros(3)}  # origin of each body's (last) link frame in the body frame
    link_of = {0: WORLD_LINK}  # the link that carries each body
    joint_ids: list[int] = []
    used = set(links)

    def unique(candidate: str) -> str:
        while candidate in used:
            candidate += "_"
        used.add(candidate)
        return candidate

    for b in range(1, m.nbody):
        parent = int(m.body_parentid[b])
        if parent == 0 and free_roots and not moving[b]:
            continue  # scenery beside a free-flying system
        if parent not in link_of:
            continue  # below dropped scenery
        rotation, position = _rotation_wxyz(m.body_quat[b]), np.asarray(m.body_pos[b], np.float64) - anchor[parent]
        previous, origin = link_of[parent], np.zeros(3)
        adr, count = int(m.body_jntadr[b]), int(m.body_jntnum[b])
        body_link = unique(body_names[b])
        if count == 0:
            joints.append(
                TreeJoint(
                    unique(f"{body_names[b]}_weld"),
                    "fixed",
                    previous,
                    body_link,
                    rotation,
                    position,
                    np.array([0.0, 0.0, 1.0]),
                    0.0,
                )
            )
        elif m.jnt_type[adr] == _FREE:
            joints.append(
                TreeJoint(
                    unique(element_name(mujoco.mjtObj.mjOBJ_JOINT, adr) or f"{body_names[b]}_free"),
                    "floating",
                    previous,
                    body_link,
                    rotation,
                    position,
                    np.array([0.0, 0.0, 1.0]),
                    0.0,
                )
            )
        else:
            for k in range(count):
                j = adr + k
                axis = np.asarray(m.jnt_axis[j], np.float64)
                axis = axis / np.linalg.norm(axis)
                point = np.asarray(m.jnt_pos[j], np.float64)
                ref = float(m.qpos0[m.jnt_qposadr[j]])
                hinge = int(m.jnt_type[j]) == _HINGE
                # The joint origin relative to the previous link frame (which, at the XML pose,
                # has the body's orientation and sits at the previous anchor); ref folded in so
                # that q = qpos.
                joint_rotation = rotation @ (_axis_rotation(axis, -ref) if hinge else np.eye(3))
                joint_position = position + rotation @ (point - origin - (0.0 if hinge else ref) * axis)
                child = body_link if k == count - 1 else unique(f"{body_names[b]}#{k + 1}")
                joint_name = element_name(mujoco.mjtObj.mjOBJ_JOINT, j) or f"{body_names[b]}_joint{k + 1}"
                joints.append(
                    TreeJoint(
                        unique(joint_name),
                        "continuous" if hinge else "prismatic",
                        previous,
                        child,
                        joint_rotation,
                        joint_position,
                        axis,
                        float(m.dof_damping[m.jnt_dofadr[j]]),
                    )
                )
                joint_ids.append(j)
                if child != body_link:
                    links[child] = TreeLink(child)
                previous, origin, rotation, position = child, point, np.eye(3), np.zeros(3)
        anchor[b] = origin
        link_of[b] = body_link
        principal = _rotation_wxyz(m.body_iquat[b])
        links[body_link] = TreeLink(
            body_link,
            float(m.body_mass[b]),
            np.asarray(m.body_ipos[b], np.float64) - origin,
            principal @ np.diag(np.asarray(m.body_inertia[b], np.float64)) @ principal.T,
            # Geoms: MuJoCo body frame -> link frame (same axes, origin on the last joint's anchor).
            [
                v.moved(-1, v.rotation, v.position - origin)
                for v in mjcf_body_visuals(m, b, label, body_names[b], geom_name)
            ],
        )
    for s in range(m.nsite):
        b = int(m.site_bodyid[s])
        if b not in link_of or (b == 0 and free_roots):
            continue  # on dropped scenery, or on the world beside a free-flying system
        site = unique(element_name(mujoco.mjtObj.mjOBJ_SITE, s) or f"site{s}")
        links[site] = TreeLink(site)
        joints.append(
            TreeJoint(
                unique(f"{site}_site"),
                "fixed",
                link_of[b],
                site,
                _rotation_wxyz(m.site_quat[s]),
                np.asarray(m.site_pos[s], np.float64) - anchor[b],
                np.array([0.0, 0.0, 1.0]),
                0.0,
            )
        )
    if len(links) == 1:
        raise ValueError(f"{label}: no bodies")
    if mimic:  # joint equalities: the follower's TreeJoint names its leader's (module docstring)
        moving_joints = [jt for jt in joints if jt.kind in ("continuous", "prismatic")]
        tree_name = {j: joint.name for joint, j in zip(moving_joints, joint_ids)}
        missing = [j for j in (*mimic, *(leader for leader, _, _ in mimic.values())) if j not in tree_name]
        if missing:
            raise ValueError(
                f"{label}: joint equality on {[element_name(mujoco.mjtObj.mjOBJ_JOINT, j) for j in missing]}: "
                "not hinges or slides of the simulated system"
            )
        mj_id = {joint_name: j for j, joint_name in tree_name.items()}
        for k, joint in enumerate(joints):
            j = mj_id.get(joint.name, -1) if joint.kind in ("continuous", "prismatic") else -1
            if j in mimic:
                leader, multiplier, offset = mimic[j]
                joints[k] = dataclasses.replace(joint, mimic=(tree_name[leader], multiplier, offset))
    model_name = (
        name if name is not None else bytes(m.names).split(b"\0", 1)[0].decode() or "mjcf_model"
    )  # names start with the model's
    tree = tree_import(
        label,
        links,
        joints,
        base_link=None,
        name=model_name,
        end_points=end_points,
        gravity=np.asarray(m.opt.gravity, np.float64) if gravity is None else gravity,
        dtype=dtype,
        inertia_check=inertia_check,
        base=None,
    )
    # tree_import numbers the joints depth-first in document order; map them back by name.
    by_name = {
        joint.name: j for joint, j in zip([jt for jt in joints if jt.kind in ("continuous", "prismatic")], joint_ids)
    }
    ids = tuple(by_name[joint_name] for joint_name in tree.joint_names)
    stiffness = np.array([float(m.jnt_stiffness[j]) for j in ids])
    model = edit_model(tree.model, joint_stiffness=stiffness) if np.any(stiffness) else tree.model
    return MjcfImport(model=model, tree=tree, joint_ids=ids, root_body=free_roots[0] if free_roots else 0)


def model_from_mjcf(source: str | os.PathLike, **kwargs: Any):
    """The sdjax model of an MJCF file or string (see :func:`import_mjcf`)."""
    return import_mjcf(source, **kwargs).model


def state_from_mujoco(info: MjcfImport, mj_model: Any, qpos: Any, qvel: Any) -> State:
    """The sdjax :class:`~sdjax.State` of MuJoCo coordinates ``(qpos, qvel)`` of the model
    ``info`` was imported from. A free base: MuJoCo's ``qpos[:7]`` places the root body frame
    (position, quaternion ``w x y z``), ``qvel[:6]`` is its origin's velocity (world frame) and
    its angular velocity (body frame); the sdjax base frame has the body's axes, centred on the
    base centroid. A fixed base: the world, at its centroid. Mimic joints (from joint
    equalities, which MuJoCo's solver holds only approximately) take the positions and rates
    their leaders give them: MuJoCo's own values for them are not used."""
    qpos, qvel = np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)
    q = np.array([qpos[mj_model.jnt_qposadr[j]] for j in info.joint_ids])
    qd = np.array([qvel[mj_model.jnt_dofadr[j]] for j in info.joint_ids])
    if info.model.has_mimic:  # MuJoCo holds joint equalities softly: the mimic joints follow their leaders
        q, qd = q[info.model.independent_joints], qd[info.model.independent_joints]
    offset = np.asarray(info.tree.root_to_base, np.float64)
    if info.root_body == 0:
        return make_state(info.model, base_position=offset, q=q, qd=qd)
    free = int(mj_model.body_jntadr[info.root_body])
    p, v = int(mj_model.jnt_qposadr[free]), int(mj_model.jnt_dofadr[free])
    rotation = _rotation_wxyz(qpos[p + 3 : p + 7])
    omega = rotation @ qvel[v + 3 : v + 6]
    lever = rotation @ offset
    return make_state(
        info.model,
        base_position=qpos[p : p + 3] + lever,
        base_quaternion=np.asarray(matrix_to_quat(rotation), np.float64),
        base_linear_velocity=qvel[v : v + 3] + np.cross(omega, lever),
        base_angular_velocity=omega,
        q=q,
        qd=qd,
    )
