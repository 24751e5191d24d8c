"""SpaceDyn C++ model files (``.def``): reader :func:`model_from_def`, writer :func:`model_to_def`.

Layout (whitespace-separated; ``###`` lines are comments except ``###LINK_NUMBER``; a ``#``
after data on a line starts a comment; a bracket may span lines)::

    ###LINK_NUMBER 7                  # bodies, base included (n + 1); n (links) is accepted too
    BB[ 0 1 2 0 4 5 ]                 # parent body of links 1..n (0 = base), BB(i) < i
    J_type[ 0 0 1 0 0 1 ]             # 0 = revolute, 1 = prismatic
    EE[ 0 0 1 0 0 2 ]                 # 0: no end point; k > 0: link carries end point number k
    rpy1[ -90 0 0 ]                   # joint-frame RPY of link i w.r.t. its parent, DEGREES
    ...
    CtoJ_0_1[ 0 1 0 ]                 # parent centroid -> joint i, parent frame, m
    JtoC_1_1[ 0 0 0.5 ]               # joint i -> centroid i, link frame, m
    ...
    CtoE_1[ 0 0 0.5 ]                 # centroid -> end point e, link frame, m
    rpyE_1[ 0 0 90 ]                  # end-point frame RPY w.r.t. the link frame, DEGREES
    mass[ 100 10 10 10 10 10 10 ]     # m0 m1 ... mn, kg
    I11= 10  I22= 10  I33= 10  I12= 0  I13= 0  I23= 0      # base, then each link in order

Meaning and conventions (SpaceDyn, seed 000 chapter 2; sdjax :class:`~sdjax.Model` fields):

- ``###LINK_NUMBER``: SpaceDyn's C++ model writer counts *bodies* (the base is link 1 there),
  so ``BB`` has ``N - 1`` entries. A file whose ``BB`` has ``N`` entries counts links; both are
  accepted, the ``BB`` length deciding, and every other block is checked against that ``n``.
- ``rpy<i>`` / ``rpyE_<e>``: SpaceDyn RPY angles ``Rx Ry Rz`` (:func:`sdjax.rotation.rpy_to_matrix`)
  in degrees: ``joint_rpy`` / ``end_point_rpy`` in radians.
- ``CtoJ_<B(i)>_<i>`` = ``parent_centroid_to_joint`` (SpaceDyn ``c0`` / ``cc(:, B_i, i)``). The
  label's first index must equal ``BB(i)``.
- ``JtoC_<i>_<i>`` is the vector from joint ``i`` to centroid ``i``: ``centroid_to_joint =
  -JtoC`` (SpaceDyn ``cc(:, i, i)`` points from the centroid to the joint). Files that label
  this line ``CtoJ_<i>_<i>`` are read by the name, *centroid to joint*:
  ``centroid_to_joint = +CtoJ_i_i`` (no sign change). A link may have one of the two, not
  both. ``JtoC_0_0`` (always zero for the base) may appear and must be zero.
- ``EE``: SpaceDyn's MATLAB ``SE`` is a 0/1 flag; the C++ writer stores the end-point *number*
  (1..ne). Both are read: non-zero marks an end point; if all non-zero values are 1 the end
  points are numbered in link order, otherwise they must be exactly ``1..ne``.
- ``CtoE_<e>`` / ``rpyE_<e>``: indexed by end-point number ``e`` (the C++ writer's rule). If the
  labels are not ``1..ne`` but are exactly the links carrying end points, they are read as
  link numbers. When both readings fit, the end-point number wins. ``rpyE`` may be omitted
  (zero).
- Inertia: six entries per body, base first (``k``-th occurrence of a key = body ``k - 1``),
  forming ``[[I11, I12, I13], [I12, I22, I23], [I13, I23, I33]]`` about the centroid in the
  body frame: SpaceDyn stores the tensor entries (products of inertia are the off-diagonal
  tensor elements, already negative of the product integrals ``∫xy dm``).
- Not in the format: joint stiffness/damping, gravity and names (the model gets the defaults
  ``link1..``; its name is the ``name`` argument, else the file stem). :func:`model_to_def`
  refuses non-zero stiffness or damping and does not write gravity.

Every malformation is a ``ValueError`` naming the line (``line 12``) and key: a missing block,
a wrong count, a non-number, an unknown ``J_type``, a ``BB`` entry that is not a lower body,
duplicate or unknown keys, a file over :data:`MAX_FILE_BYTES` or a ``LINK_NUMBER`` over
:data:`MAX_LINKS`.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from sdjax.io.inputs import names_the_file, read_text_file, text_number
from sdjax.model import Model, check_spacedyn_base, check_spacedyn_end_points, warn_unphysical_inertia

__all__ = ["model_from_def", "model_to_def", "save_def"]

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_LINKS = 10_000

_INERTIA_KEYS = ("I11", "I22", "I33", "I12", "I13", "I23")
_BLOCK = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\[")
_ENTRY = re.compile(r"(I11|I22|I33|I12|I13|I23)\s*=\s*(\S*)")
_SPACE = re.compile(r"\s*")


def _excerpt(text: str, size: int = 40) -> str:
    """``text``, cut to ``size`` characters (with ``...``) for a message."""
    return text if len(text) <= size else text[:size] + "..."


def _skip_space(text: str, pos: int) -> int:
    """The position of the first non-space character of ``text`` at or after ``pos``."""
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # (\s* always matches)


class _Entry:
    def __init__(self, key: str, tokens: list[str], line: int):
        self.key, self.tokens, self.line = key, tokens, line

    def where(self) -> str:
        return f"line {self.line}: {self.key}"

    def numbers(self, count: int | None = None) -> np.ndarray:
        if count is not None and len(self.tokens) != count:
            raise ValueError(
                f"{self.where()}: expected {count} value(s), got {len(self.tokens)} ({' '.join(self.tokens)!r})"
            )
        values = []
        for token in self.tokens:
            try:
                value = text_number(token)
            except ValueError as err:
                raise ValueError(f"{self.where()}: {err}") from None
            if not np.isfinite(value):
                raise ValueError(f"{self.where()}: {token!r} is not a finite number")
            values.append(value)
        return np.array(values, dtype=np.float64)

    def integers(self, count: int) -> list[int]:
        values = self.numbers(count)
        for token, value in zip(self.tokens, values):
            if not float(value).is_integer():
                raise ValueError(f"{self.where()}: {token!r} is not an integer")
        return [int(v) for v in values]


def _scan(text: str) -> tuple[tuple[int, int] | None, dict[str, _Entry], dict[str, list[_Entry]]]:
    """Split the file into ``(LINK_NUMBER, its line)``, bracket blocks and inertia entries."""
    link_number = None
    blocks: dict[str, _Entry] = {}
    inertia: dict[str, list[_Entry]] = {k: [] for k in _INERTIA_KEYS}
    lines = text.splitlines()
    k = 0
    while k < len(lines):
        number = k + 1
        raw = lines[k].strip()
        k += 1
        if raw.upper().startswith("###LINK_NUMBER"):
            tokens = raw[len("###LINK_NUMBER") :].split()
            if link_number is not None:
                raise ValueError(f"line {number}: LINK_NUMBER given twice (first on line {link_number[1]})")
            # (ASCII digits only: str.isdigit accepts "²"; at most 18 of them, within int64)
            if len(tokens) != 1 or not (tokens[0].isascii() and tokens[0].isdigit() and len(tokens[0]) <= 18):
                raise ValueError(
                    f"line {number}: LINK_NUMBER expects one non-negative integer, got {_excerpt(' '.join(tokens))!r}"
                )
            link_number = (int(tokens[0]), number)
            continue
        # Read with a position into the line, never re-slicing what is left of it: linear in the
        # line's length however many entries it holds (re-slicing took 26 s on a 2.8 MB line).
        body = raw.split("#", 1)[0]
        pos = _skip_space(body, 0)
        while pos < len(body):
            block = _BLOCK.match(body, pos)
            entry = _ENTRY.match(body, pos)
            if block:
                key, start = block.group(1), number
                close = body.find("]", block.end())
                if close >= 0:
                    inside, pos = body[block.end() : close], close + 1
                else:
                    parts = [body[block.end() :]]
                    while True:  # (each line looked at once: linear in the block's length)
                        if k >= len(lines):
                            raise ValueError(f"line {start}: {key}[ has no closing ']'")
                        more = lines[k].split("#", 1)[0]
                        if "[" in more:
                            raise ValueError(
                                f"line {start}: {key}[ has no closing ']' before the next block on line {k + 1}"
                            )
                        k += 1
                        close = more.find("]")
                        if close >= 0:
                            parts.append(more[:close])
                            body, pos = more, close + 1
                            break
                        parts.append(more)
                    inside = " ".join(parts)
                if key in blocks:
                    raise ValueError(f"line {start}: {key} given twice (first on line {blocks[key].line})")
                blocks[key] = _Entry(key, inside.split(), start)
            elif entry:
                inertia[entry.group(1)].append(
                    _Entry(entry.group(1), [entry.group(2)] if entry.group(2) else [], number)
                )
                pos = entry.end()
            else:
                rest = _excerpt(body[pos:].strip(), 60)
                raise ValueError(f"line {number}: cannot read {rest!r} (expected KEY[ values ] or Ixy= value)")
            pos = _skip_space(body, pos)
    return link_number, blocks, inertia


@names_the_file
def model_from_def(
    source: str | os.PathLike, *, name: str | None = None, dtype: Any = None, inertia_check: str = "positive_definite"
) -> Model:
    """Read a SpaceDyn C++ ``.def`` model (see the module docstring for the layout).

    Arguments:
        source: a file path, or the file's text (a string containing a newline).
        name: model name (default: the file stem, or ``"spacedyn_def"`` for text).
        dtype: floating dtype of the model arrays.
        inertia_check: ``"positive_definite"`` (default) accepts inertia tensors as SpaceDyn does,
            with one ``UserWarning`` naming the bodies whose tensors break the triangle
            inequality; ``"physical"`` refuses them.

    Returns:
        The validated :class:`~sdjax.Model`.

    Raises:
        ValueError: naming the line and key of the first malformation.
    """
    if isinstance(source, str) and "\n" in source:
        text, default_name, source_label = source, "spacedyn_def", ".def text"
    else:
        path = os.fspath(source)
        text = read_text_file(path, ".def", MAX_FILE_BYTES)
        default_name, source_label = os.path.splitext(os.path.basename(path))[0], path
    link_number, blocks, inertia = _scan(text)
    if link_number is None:
        raise ValueError("missing ###LINK_NUMBER line")
    count, count_line = link_number
    if count > MAX_LINKS:
        raise ValueError(f"line {count_line}: LINK_NUMBER {count} exceeds the limit of {MAX_LINKS}")
    used: set[str] = set()

    def block(key: str) -> _Entry:
        if key not in blocks:
            raise ValueError(f"missing block {key}[ ... ]")
        used.add(key)
        return blocks[key]

    bb_entry = block("BB")
    if len(bb_entry.tokens) == count - 1:
        n = count - 1
    elif len(bb_entry.tokens) == count:
        n = count
    else:
        raise ValueError(
            f"{bb_entry.where()}: expected {count - 1} entries (LINK_NUMBER {count} bodies on line {count_line}) "
            f"or {count} (links), got {len(bb_entry.tokens)}"
        )
    parent = bb_entry.integers(n)
    for i, p in enumerate(parent, start=1):
        if not 0 <= p < i:
            raise ValueError(
                f"{bb_entry.where()}: entry {i} is {p}; the parent of link {i} must be a lower body 0..{i - 1} (0 = base)"
            )
    jt_entry = block("J_type")
    joint_type = []
    for i, t in enumerate(jt_entry.integers(n), start=1):
        if t not in (0, 1):
            raise ValueError(f"{jt_entry.where()}: entry {i} is {t}; unknown joint type (0 = revolute, 1 = prismatic)")
        joint_type.append("R" if t == 0 else "P")
    ee_entry = block("EE")
    ee = ee_entry.integers(n)
    end_links = [i for i, e in enumerate(ee, start=1) if e != 0]
    ne = len(end_links)
    if any(e < 0 for e in ee):
        raise ValueError(
            f"{ee_entry.where()}: entries must be 0 (no end point) or a positive end-point number, got {ee}"
        )
    if any(e != 1 for e in ee if e):
        numbers = sorted(e for e in ee if e)
        if numbers != list(range(1, ne + 1)):
            raise ValueError(f"{ee_entry.where()}: end-point numbers {numbers} must be 0/1 flags or exactly 1..{ne}")
        link_of_number = {e: i for i, e in enumerate(ee, start=1) if e}
    else:
        link_of_number = {k + 1: link for k, link in enumerate(end_links)}

    joint_rpy = np.stack([np.deg2rad(block(f"rpy{i}").numbers(3)) for i in range(1, n + 1)]) if n else np.zeros((0, 3))
    pcj = np.zeros((n, 3))
    cj = np.zeros((n, 3))
    for i in range(1, n + 1):
        key = f"CtoJ_{parent[i - 1]}_{i}"
        if key not in blocks:
            other = [k for k in blocks if re.fullmatch(rf"CtoJ_\d+_{i}", k) and k != f"CtoJ_{i}_{i}"]
            if other:
                raise ValueError(
                    f"{blocks[other[0]].where()}: link {i} has parent {parent[i - 1]} in BB (line {bb_entry.line}); expected {key}"
                )
        pcj[i - 1] = block(key).numbers(3)
        jtoc, ctoj = f"JtoC_{i}_{i}", f"CtoJ_{i}_{i}"
        if jtoc in blocks and ctoj in blocks:
            raise ValueError(
                f"{blocks[ctoj].where()}: link {i} has both {jtoc} (line {blocks[jtoc].line}) and {ctoj}; give one"
            )
        if ctoj in blocks:
            cj[i - 1] = block(ctoj).numbers(3)  # centroid -> joint, as named
        else:
            cj[i - 1] = -block(jtoc).numbers(3)  # joint -> centroid, negated
    if "JtoC_0_0" in blocks and np.any(block("JtoC_0_0").numbers(3) != 0):
        raise ValueError(f"{blocks['JtoC_0_0'].where()}: must be [ 0 0 0 ] (the base frame is on its centroid)")

    labels = sorted(int(k[5:]) for k in blocks if re.fullmatch(r"CtoE_\d+", k))
    if labels == list(range(1, ne + 1)):
        link_of_label = link_of_number
    elif labels == end_links:
        link_of_label = {link: link for link in end_links}
    else:
        raise ValueError(
            f"CtoE blocks {labels}: expected CtoE_1..CtoE_{ne} (one per end point, numbered as in EE, line "
            f"{ee_entry.line}) or CtoE_<link> for the end-point links {end_links}"
        )
    label_of_link = {link: label for label, link in link_of_label.items()}
    cte = np.zeros((ne, 3))
    erpy = np.zeros((ne, 3))
    for e, link in enumerate(end_links):
        label = label_of_link[link]
        cte[e] = block(f"CtoE_{label}").numbers(3)
        if f"rpyE_{label}" in blocks:
            erpy[e] = np.deg2rad(block(f"rpyE_{label}").numbers(3))
    mass = block("mass").numbers(n + 1)

    tensors = np.zeros((n + 1, 3, 3))
    values = {}
    for key in _INERTIA_KEYS:
        entries = inertia[key]
        if len(entries) != n + 1:
            lines = f" (lines {[e.line for e in entries]})" if entries else ""
            raise ValueError(
                f"{key}=: expected {n + 1} entries (base and {n} links, in order), got {len(entries)}{lines}"
            )
        values[key] = np.array([e.numbers(1)[0] for e in entries])
    for a, b, key in ((0, 0, "I11"), (1, 1, "I22"), (2, 2, "I33"), (0, 1, "I12"), (0, 2, "I13"), (1, 2, "I23")):
        tensors[:, a, b] = tensors[:, b, a] = values[key]

    unknown = sorted(set(blocks) - used, key=lambda k: blocks[k].line)
    if unknown:
        raise ValueError(f"{blocks[unknown[0]].where()}: unknown or unused key (links 1..{n}, end points 1..{ne})")
    model = Model(
        parent=tuple(parent),
        joint_type=tuple(joint_type),
        base_mass=mass[0],
        base_inertia=tensors[0],
        link_mass=mass[1:],
        link_inertia=tensors[1:],
        parent_centroid_to_joint=pcj,
        centroid_to_joint=cj,
        joint_rpy=joint_rpy,
        end_point_link=tuple(end_links),
        centroid_to_end_point=cte,
        end_point_rpy=erpy,
        name=name if name is not None else default_name,
        dtype=dtype,
        inertia_check=inertia_check,
    )
    warn_unphysical_inertia(model, source_label)
    return model


def _row(values: Any) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(np.asarray(values, np.float64)))


def model_to_def(model: Model) -> str:
    """The ``.def`` text of a model, in the layout of SpaceDyn's C++ writer (``LINK_NUMBER`` =
    bodies, ``EE`` = end-point numbers, ``JtoC_i_i``, angles in degrees).

    Raises:
        ValueError: if the model has joint stiffness or damping (the format cannot hold them).
    """
    check_spacedyn_base(model, "model_to_def")
    check_spacedyn_end_points(model, "model_to_def")
    for field in ("joint_stiffness", "joint_damping"):
        values = np.asarray(getattr(model, field), np.float64)
        for nonzero in np.flatnonzero(values != 0):
            raise ValueError(
                f"model_to_def: link {nonzero + 1} ({model.link_names[nonzero]!r}) has {field} {values[nonzero]}; the .def format has none"
            )
    n = model.num_joints
    ee = [0] * n
    for e, link in enumerate(model.end_point_link, start=1):
        ee[link - 1] = e
    out = [
        f"###Parameters_for_MODEL {model.name} (sdjax)",
        f"###LINK_NUMBER {n + 1}",
        "###LINK_CONNECTIVITY",
        "BB[ " + " ".join(str(p) for p in model.parent) + " ]",
        "###Joint_Type_[_0=rotational__1=prismatic]",
        "J_type[ " + " ".join("0" if t == "R" else "1" for t in model.joint_type) + " ]",
        "###EE",
        "EE[ " + " ".join(str(e) for e in ee) + " ]",
        "###Roll_Pitch_Yaw_of_each_joint_frame_[deg]",
    ]
    rpy = np.rad2deg(np.asarray(model.joint_rpy, np.float64))
    out += [f"rpy{i}[ {_row(rpy[i - 1])} ]" for i in range(1, n + 1)]
    out.append("###Link_vectors_[m]:_CtoJ_<parent>_<i>_parent_frame,_JtoC_<i>_<i>_link_frame")
    pcj = np.asarray(model.parent_centroid_to_joint, np.float64)
    cj = np.asarray(model.centroid_to_joint, np.float64)
    for i in range(1, n + 1):
        out.append(f"CtoJ_{model.parent[i - 1]}_{i}[ {_row(pcj[i - 1])} ]")
        out.append(f"JtoC_{i}_{i}[ {_row(-cj[i - 1])} ]")
    out.append("###Vector_To_End-Effector_[m]")
    cte = np.asarray(model.centroid_to_end_point, np.float64)
    out += [f"CtoE_{e}[ {_row(cte[e - 1])} ]" for e in range(1, model.num_end_points + 1)]
    out.append("###Relative_Coordinate_For_End-Effector_[deg]")
    erpy = np.rad2deg(np.asarray(model.end_point_rpy, np.float64))
    out += [f"rpyE_{e}[ {_row(erpy[e - 1])} ]" for e in range(1, model.num_end_points + 1)]
    out += [
        "###Mass_Parameter",
        f"mass[ {_row(np.concatenate([[model.base_mass], model.link_mass]))} ]",
        "###Inertia_Matrix",
    ]
    tensors = [np.asarray(model.base_inertia, np.float64)] + list(np.asarray(model.link_inertia, np.float64))
    for k, t in enumerate(tensors):
        out.append(f"###Link{k}")
        for key, (a, b) in zip(_INERTIA_KEYS, ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))):
            out.append(f"{key}= {float(t[a, b])!r}")
    out.append("###EOF")
    return "\n".join(out) + "\n"


def save_def(model: Model, path: str | os.PathLike) -> None:
    """Write :func:`model_to_def` of ``model`` to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(model_to_def(model))
