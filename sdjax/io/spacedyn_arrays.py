"""Models from and to SpaceDyn's link-parameter arrays (MATLAB layouts, seed 000 chapter 2).

Layouts (``n`` links, columns are links, 1-based topology with 0 = base):

======== ============ =====================================================================
name     shape        meaning
======== ============ =====================================================================
BB       (n,)         parent of link i (0 = base), ``BB[i] < i``
J_type   str / (n,)   ``'R'`` or ``'P'`` per joint
c0       (3, n)       base centroid to joint i, base frame (zero unless ``BB[i] == 0``)
cc       (3, n, n)    ``cc[:, i, j]``: centroid of link i to joint j, link-i frame
                      (used: ``j == i`` and ``BB[j] == i``; every other entry must be zero)
ce       (3, n)       centroid of link i to its end point, link-i frame
Qi       (3, n)       RPY angles of joint frame i relative to its parent, rad
Qe       (3, n)       RPY angles of the end-point frame relative to link i, rad
SE       (n,)         1 if link i carries an end point
m0, m    (), (n,)     masses, kg
inertia0 (3, 3)       base inertia, base frame
inertia  (3, 3n)      link inertias, ``inertia[:, 3i:3i+3]`` in the link-i frame
======== ============ =====================================================================

Entries that SpaceDyn would ignore (``c0`` of a link not on the base, ``cc`` entries that do
not join a link to its child, ``ce``/``Qe`` of a link without an end point) must be zero: a
non-zero value there is refused rather than silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sdjax.io.inputs import numeric_array, real_numbers
from sdjax.model import Model, check_spacedyn_base, check_spacedyn_end_points, warn_unphysical_inertia

__all__ = ["model_from_lp", "model_from_spacedyn_arrays", "model_to_spacedyn_arrays"]

#: Largest number of links accepted from array data (refused before allocating).
MAX_LINKS = 10_000


def _array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    return numeric_array("SpaceDyn ", name, value, shape, matlab_vectors=True)


def _require_zero(name: str, values: np.ndarray, columns: np.ndarray, rule: str) -> None:
    """Refuse non-zero entries of ``values`` (3, n) in the masked ``columns``."""
    nonzero = np.argwhere((values != 0) & columns[None, :])
    if nonzero.size:
        row, col = (int(i) for i in nonzero[0])
        raise ValueError(
            f"SpaceDyn {name}({row + 1}, {col + 1}) (1-based) is {values[row, col]} but must be zero: {rule}"
        )


def model_from_spacedyn_arrays(
    BB: Any,
    J_type: Any,
    c0: Any,
    cc: Any,
    ce: Any,
    Qi: Any,
    Qe: Any,
    SE: Any,
    m0: Any,
    m: Any,
    inertia0: Any,
    inertia: Any,
    *,
    SS: Any = None,
    S0: Any = None,
    mass: Any = None,
    gravity: Any = None,
    joint_stiffness: Any = None,
    joint_damping: Any = None,
    name: str = "spacedyn_model",
    link_names: Any = None,
    dtype: Any = None,
    inertia_check: str = "positive_definite",
) -> Model:
    """Build a :class:`~sdjax.Model` from SpaceDyn link-parameter arrays (table above).

    ``SS``, ``S0`` and ``mass`` are derived from ``BB`` and ``m``; when given they must agree
    with them. Arrays are converted to ``dtype`` (default JAX's float). Inertia tensors are
    accepted as SpaceDyn accepts them (``inertia_check="positive_definite"``): one
    ``UserWarning`` names the bodies whose tensors break the triangle inequality; pass
    ``inertia_check="physical"`` to refuse them.

    Raises:
        ValueError: naming the array, the (1-based) entry and the rule broken.
    """
    if isinstance(BB, str):  # (a MATLAB char array, read as text)
        raise ValueError(f"SpaceDyn BB: expected integers, got text {BB!r}")
    try:
        parents = real_numbers(BB).reshape(-1)
    except ValueError as err:
        raise ValueError(f"SpaceDyn BB: expected integers ({err})") from None
    n = parents.size
    if n > MAX_LINKS:
        raise ValueError(f"SpaceDyn BB: {n} links exceeds the limit of {MAX_LINKS}")
    for i, b in enumerate(parents):  # (before any cast to integers: 1e300 has no int64)
        if not (np.isfinite(b) and b == np.floor(b)):
            raise ValueError(f"SpaceDyn BB({i + 1}) = {b:g}: entries must be integers")
        if not 0 <= b <= i:
            raise ValueError(
                f"SpaceDyn BB({i + 1}) = {b:g}: the parent of link {i + 1} must be 0 (base) or a lower-numbered link"
            )
    bb = parents.astype(np.int64)
    joint_type = list(J_type) if isinstance(J_type, str) else [str(t) for t in np.asarray(J_type).reshape(-1)]
    if len(joint_type) != n:
        raise ValueError(f"SpaceDyn J_type: expected {n} joint types, got {len(joint_type)}")
    c0 = _array("c0", c0, (3, n))
    cc = _array("cc", cc, (3, n, n))
    ce = _array("ce", ce, (3, n))
    Qi = _array("Qi", Qi, (3, n))
    Qe = _array("Qe", Qe, (3, n))
    se = _array("SE", SE, (n,))
    if not np.all(np.isin(se, (0, 1))):
        raise ValueError(f"SpaceDyn SE: entries must be 0 or 1, got {se.tolist()}")
    m = _array("m", m, (n,))
    inertia0 = _array("inertia0", inertia0, (3, 3))
    inertia = _array("inertia", inertia, (3, 3 * n))
    m0 = _array("m0", m0, ())

    parent_centroid_to_joint = np.zeros((n, 3))
    used_cc = np.zeros((n, n), dtype=bool)
    for i, b in enumerate(bb):
        used_cc[i, i] = True
        if b == 0:
            parent_centroid_to_joint[i] = c0[:, i]
        else:
            parent_centroid_to_joint[i] = cc[:, b - 1, i]
            used_cc[b - 1, i] = True
    _require_zero("c0", c0, bb != 0, "c0(:, i) is used only for links attached to the base (BB(i) == 0)")
    for i, j in np.argwhere(~used_cc):
        if np.any(cc[:, i, j] != 0):
            raise ValueError(
                f"SpaceDyn cc(:, {i + 1}, {j + 1}) = {cc[:, i, j].tolist()} must be zero: link {j + 1} is not "
                f"a child of link {i + 1} (BB({j + 1}) = {bb[j]}) and j != i, so SpaceDyn would ignore it"
            )
    end_links = np.flatnonzero(se == 1)
    _require_zero("ce", ce, se == 0, "ce(:, i) is used only for links with an end point (SE(i) == 1)")
    _require_zero("Qe", Qe, se == 0, "Qe(:, i) is used only for links with an end point (SE(i) == 1)")

    if SS is not None:
        expected = -np.eye(n)
        for j, b in enumerate(bb):
            if b > 0:
                expected[b - 1, j] = 1
        got = _array("SS", SS, (n, n))
        if not np.array_equal(got, expected):
            raise ValueError(
                f"SpaceDyn SS: does not match BB = {bb.tolist()} (expected {expected.astype(int).tolist()})"
            )
    if S0 is not None:
        got = _array("S0", S0, (n,))
        if not np.array_equal(got, (bb == 0).astype(float)):
            raise ValueError(f"SpaceDyn S0: {got.astype(int).tolist()} does not match BB = {bb.tolist()}")
    mass = None if mass is None else _array("mass", mass, ())
    if mass is not None and not np.isclose(float(mass), float(m0) + float(np.sum(m)), rtol=1e-12, atol=0.0):
        raise ValueError(f"SpaceDyn mass: {float(mass)} is not m0 + sum(m) = {float(m0) + float(np.sum(m))}")

    model = Model(
        parent=tuple(int(b) for b in bb),
        joint_type=tuple(joint_type),
        base_mass=m0,
        base_inertia=inertia0,
        link_mass=m,
        link_inertia=inertia.reshape(3, n, 3).transpose(1, 0, 2),
        parent_centroid_to_joint=parent_centroid_to_joint,
        centroid_to_joint=np.stack([cc[:, i, i] for i in range(n)]) if n else np.zeros((0, 3)),
        joint_rpy=Qi.T,
        end_point_link=tuple(int(i) + 1 for i in end_links),
        centroid_to_end_point=ce[:, end_links].T,
        end_point_rpy=Qe[:, end_links].T,
        joint_stiffness=joint_stiffness,
        joint_damping=joint_damping,
        gravity=gravity,
        link_names=link_names,
        name=name,
        dtype=dtype,
        inertia_check=inertia_check,
    )
    warn_unphysical_inertia(model, f"SpaceDyn model {name!r}")
    return model


def model_from_lp(lp: Mapping[str, Any], **kwargs: Any) -> Model:
    """Build a model from a SpaceDyn ``LP`` mapping (fields as in the table above; ``SS``,
    ``S0``, ``mass`` and ``num_q`` optional). Keyword arguments go to
    :func:`model_from_spacedyn_arrays` (e.g. ``gravity=``, ``name=``)."""
    required = ("BB", "J_type", "c0", "cc", "ce", "Qi", "Qe", "SE", "m0", "m", "inertia0", "inertia")
    missing = [k for k in required if k not in lp]
    if missing:
        raise ValueError(f"SpaceDyn LP: missing field(s) {missing}")
    known = set(required) | {"SS", "S0", "mass", "num_q"}
    unknown = sorted(set(lp) - known)
    if unknown:
        raise ValueError(f"SpaceDyn LP: unknown field(s) {unknown}; expected {sorted(known)}")
    if "num_q" in lp:
        num_q = np.asarray(lp["num_q"])  # a number, or MATLAB's 1 x 1 array
        if num_q.size != 1 or num_q.reshape(()).item() != np.asarray(lp["BB"]).size:
            raise ValueError(
                f"SpaceDyn LP.num_q = {num_q.tolist()} does not match len(BB) = {np.asarray(lp['BB']).size}"
            )
    args = {k: lp[k] for k in required}
    return model_from_spacedyn_arrays(**args, SS=lp.get("SS"), S0=lp.get("S0"), mass=lp.get("mass"), **kwargs)


def model_to_spacedyn_arrays(model: Model) -> dict[str, Any]:
    """SpaceDyn ``LP`` arrays (NumPy, MATLAB layouts) of a model; inverse of :func:`model_from_lp`.

    Returns:
        dict with ``BB, J_type, SS, S0, SE, c0, cc, ce, Qi, Qe, m0, m, mass, inertia0, inertia,
        num_q``.

    Raises:
        ValueError: if the end points do not fit SpaceDyn's layout (several on one link, one on
            the base, or out of link order).
    """
    check_spacedyn_base(model, "model_to_spacedyn_arrays")
    check_spacedyn_end_points(model, "model_to_spacedyn_arrays")
    n = model.num_joints
    bb = np.asarray(model.parent, dtype=np.int64)
    c0 = np.zeros((3, n))
    cc = np.zeros((3, n, n))
    offsets = np.asarray(model.parent_centroid_to_joint, dtype=np.float64)
    own = np.asarray(model.centroid_to_joint, dtype=np.float64)
    for i, b in enumerate(bb):
        cc[:, i, i] = own[i]
        if b == 0:
            c0[:, i] = offsets[i]
        else:
            cc[:, b - 1, i] = offsets[i]
    ce = np.zeros((3, n))
    qe = np.zeros((3, n))
    links = np.asarray(model.end_point_link, dtype=np.int64) - 1
    ce[:, links] = np.asarray(model.centroid_to_end_point, dtype=np.float64).T
    qe[:, links] = np.asarray(model.end_point_rpy, dtype=np.float64).T
    link_mass = np.asarray(model.link_mass, dtype=np.float64)
    return dict(
        BB=bb,
        J_type="".join(model.joint_type),
        SS=model.incidence_matrix,
        S0=model.base_incidence,
        SE=model.end_link_flags,
        c0=c0,
        cc=cc,
        ce=ce,
        Qi=np.asarray(model.joint_rpy, dtype=np.float64).T,
        Qe=qe,
        m0=float(model.base_mass),
        m=link_mass,
        mass=float(model.base_mass) + float(np.sum(link_mass)),
        inertia0=np.asarray(model.base_inertia, dtype=np.float64),
        inertia=np.asarray(model.link_inertia, dtype=np.float64).transpose(1, 0, 2).reshape(3, 3 * n),
        num_q=n,
    )
