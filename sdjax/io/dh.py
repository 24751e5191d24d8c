"""Serial arms on a moving base from seed 003's customised Denavit-Hartenberg table.

Seed 003 (Wilde et al., section "Kinematics of a Spacecraft-Manipulator System") describes a
serial N-link arm on a base with joint frames ``J_i`` (``z`` along joint axis ``i``, DH
convention of Siciliano) and link frames ``L_i`` *parallel to* ``J_{i+1}`` with their origin
on the centroid of link ``i`` (eq 4). Per joint ``i`` (Table 2, eqs 1, 2, 9, 10):

- ``theta_i``: rotation about ``z_{J_i}`` from ``x_{J_i}`` to ``x_{J_{i+1}}`` (the joint angle
  ``q_i`` plus a constant offset for a revolute joint; constant for a prismatic joint);
- ``d_i``: displacement along ``z_{J_i}`` (constant for a revolute joint; offset plus the
  joint extension ``q_i`` for a prismatic one);
- ``alpha_i``: rotation about ``x_{J_{i+1}}`` from ``z_{J_i}`` to ``z_{J_{i+1}}``;
- ``c_i = a_i + b_i``: displacement along ``x_{J_{i+1}}`` (the common normal), split at the
  centroid of link ``i``: ``a_i`` from joint ``i`` to centroid ``i``, ``b_i`` from centroid
  ``i`` to joint ``i + 1``.

With ``A(beta, u, gamma, w) = Rz(beta) Tz(u) Tx(w) Rx(gamma)`` (eq 2):

    J_T_J1     = J_T_J0 [L0_R_J1, 0b0; 0, 1],   L0_R_J1 = Rz(eta) Ry(zeta) Rx(epsilon)  (eq 8)
    J_T_J(i+1) = J_T_Ji A(theta_i, d_i, alpha_i, a_i + b_i)                            (eqs 1, 9)
    J_T_Li     = J_T_Ji A(theta_i, d_i, alpha_i, a_i)                                  (eq 10)

and the end effector is the virtual joint frame ``J_{N+1}`` (``J_EE``).

The same table can be read from a ``.dh`` text file by :func:`model_from_dh_file` (format in
its docstring).

Conversion to sdjax (SpaceDyn) conventions. sdjax's frame of link ``i`` is the joint frame
rotated by the joint angle: ``F_i = J_i Rz(theta_i)`` (origin on joint ``i``), so

- ``L_i = F_i Rx(alpha_i)`` (rotation only): the inertia given in ``L_i`` becomes
  ``Rx(alpha_i) I_L Rx(alpha_i)^T`` in ``F_i``;
- centroid ``i`` is at ``(a_i, 0, d_i)`` in ``F_i``: ``centroid_to_joint_i = -(a_i, 0, d_i)``
  (for a prismatic joint ``d_i`` is the offset; sdjax adds the slide ``q_i e_z``);
- joint ``i + 1`` is ``(b_i, 0, 0)`` from centroid ``i`` in ``F_i``
  (``parent_centroid_to_joint``); joint 1 is ``0b0`` from the base centroid, base frame;
- the joint frame of ``i + 1`` relative to ``F_i`` is ``Rx(alpha_i) Rz(theta_offset_{i+1})``,
  i.e. ``joint_rpy = (alpha_i, 0, theta_offset_{i+1})``; joint 1's is
  ``Rz(eta) Ry(zeta) Rx(epsilon) Rz(theta_offset_1)`` converted to RPY angles;
- the end point sits on link ``N`` at ``(b_N, 0, 0)`` from its centroid, with frame
  ``F_N Rx(alpha_N) = J_{N+1}`` (``end_point_rpy = (alpha_N, 0, 0)``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.io.inputs import names_the_file, numeric_array, read_text_file, text_number
from sdjax.model import JOINT_TYPES, Model
from sdjax.rotation import matrix_to_rpy_numpy

__all__ = ["dh_matrix", "euler123_to_matrix", "model_from_dh", "model_from_dh_file"]

#: Largest arm accepted (refused before allocating anything).
MAX_LINKS = 10_000

_PER_JOINT = ("d", "theta_offset", "alpha", "a", "b", "link_mass")


def _rx(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _ry(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _rz(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def euler123_to_matrix(angles: Any) -> np.ndarray:
    """Seed 003's 1-2-3 Euler angles to a rotation matrix, ``Rz(a3) Ry(a2) Rx(a1)`` (eqs 6, 8).

    Arguments:
        angles: ``(3,)`` ``(epsilon, zeta, eta)`` (or roll, pitch, yaw ``(phi, theta, psi)``), rad.

    Returns:
        ``(3, 3)`` rotation mapping vectors of the rotated frame into the reference frame.
    """
    e = np.asarray(angles, dtype=np.float64)
    return _rz(e[2]) @ _ry(e[1]) @ _rx(e[0])


def dh_matrix(theta: float, d: float, alpha: float, c: float) -> np.ndarray:
    """The DH transformation ``A(theta, d, alpha, c) = Rz(theta) Tz(d) Tx(c) Rx(alpha)`` (eq 2).

    Returns:
        ``(4, 4)`` homogeneous transform from ``J_{i+1}`` (or ``L_i`` with ``c = a_i``) to ``J_i``.
    """
    ct, st, ca, sa = np.cos(theta), np.sin(theta), np.cos(alpha), np.sin(alpha)
    return np.array(
        [
            [ct, -st * ca, st * sa, c * ct],
            [st, ct * ca, -ct * sa, c * st],
            [0.0, sa, ca, d],
            [0.0, 0.0, 0.0, 1.0],
        ]
    )


def _vector(name: str, value: Any, n: int) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model_from_dh: {name} must be real numbers ({err})") from None
    if arr.shape != (n,):
        raise ValueError(
            f"model_from_dh: {name} expected shape ({n},) (one value per joint, n={n} from d), got {arr.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"model_from_dh: {name}[{bad[0]}] (joint {bad[0] + 1}) is not finite ({arr[bad[0]]})")
    return arr


def _array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    return numeric_array("model_from_dh: ", name, value, shape)


def model_from_dh(
    d: Any,
    theta_offset: Any,
    alpha: Any,
    a: Any,
    b: Any,
    *,
    link_mass: Any,
    link_inertia: Any,
    base_mass: Any,
    base_inertia: Any,
    joint_type: Sequence[str] | str | None = None,
    mount_position: Any = (0.0, 0.0, 0.0),
    mount_euler: Any = (0.0, 0.0, 0.0),
    joint_stiffness: Any = None,
    joint_damping: Any = None,
    gravity: Any = None,
    link_names: Sequence[str] | None = None,
    name: str = "dh_arm",
    dtype: Any = None,
) -> Model:
    """Build a serial arm on a moving base from seed 003's customised DH table (eqs 1-10).

    Link ``i`` (1..N) rides on joint ``i``; joint 1 sits on the base; the end effector
    (virtual joint ``N + 1``, frame ``J_EE``) is the model's single end point, on link ``N``.
    See the module docstring for the parameter meanings (Table 2) and the conversion.

    Arguments:
        d: ``(N,)`` DH ``d_i``, m (prismatic joint: the offset at ``q_i = 0``; the joint
            extension adds to it, ``d_i + q_i``).
        theta_offset: ``(N,)`` DH ``theta_i`` at ``q_i = 0``, rad (revolute joint:
            ``theta_i = theta_offset_i + q_i``; prismatic: constant).
        alpha: ``(N,)`` DH twist ``alpha_i``, rad.
        a: ``(N,)`` ``a_i``: joint ``i`` to centroid ``i`` along ``x_{L_i}``, m.
        b: ``(N,)`` ``b_i``: centroid ``i`` to joint ``i + 1`` along ``x_{L_i}``, m
            (``c_i = a_i + b_i``; ``b_N`` reaches the end effector).
        link_mass: ``(N,)`` kg, positive.
        link_inertia: ``(N, 3, 3)`` inertia of link ``i`` about its centroid in ``L_i``
            (oriented as ``J_{i+1}``, eq 4), kg m^2.
        base_mass: base mass, kg.
        base_inertia: ``(3, 3)`` base inertia about its centroid, base frame ``L_0``, kg m^2.
        joint_type: ``N`` characters ``'R'``/``'P'`` (default all revolute).
        mount_position: ``(3,)`` ``0b0``: base centroid to the origin of ``J_1``, base frame, m.
        mount_euler: ``(3,)`` 1-2-3 Euler angles ``(epsilon, zeta, eta)`` of ``J_1`` relative to
            the base frame, ``L0_R_J1 = Rz(eta) Ry(zeta) Rx(epsilon)`` (eq 8), rad.
        joint_stiffness, joint_damping, gravity, link_names, name, dtype: as :class:`Model`.

    Returns:
        A validated :class:`sdjax.Model` (``N`` links, one end point on link ``N``).

    Raises:
        ValueError: naming the parameter and joint: shape mismatch, unknown joint type,
            non-positive mass, non-finite value, unphysical inertia, too many links.
    """
    try:
        d_arr = np.asarray(d, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"model_from_dh: d must be real numbers ({err})") from None
    if d_arr.ndim != 1 or d_arr.size == 0:
        raise ValueError(
            f"model_from_dh: d expected a non-empty (N,) vector (one value per joint), got shape {d_arr.shape}"
        )
    n = d_arr.shape[0]
    if n > MAX_LINKS:
        raise ValueError(f"model_from_dh: {n} joints exceeds the limit of {MAX_LINKS}")
    values = dict(d=d, theta_offset=theta_offset, alpha=alpha, a=a, b=b, link_mass=link_mass)
    p = {key: _vector(key, values[key], n) for key in _PER_JOINT}
    if joint_type is None:
        joint_type = "R" * n
    types = tuple(joint_type)
    if len(types) != n:
        raise ValueError(f"model_from_dh: joint_type expected {n} entries (one per joint), got {len(types)}")
    for k, t in enumerate(types):
        if t not in JOINT_TYPES:
            raise ValueError(
                f"model_from_dh: joint_type[{k}] (joint {k + 1}) is {t!r}; expected 'R' (revolute) or 'P' (prismatic)"
            )
    for nonpositive in np.flatnonzero(~(p["link_mass"] > 0)):
        raise ValueError(
            f"model_from_dh: link_mass[{nonpositive}] (link {nonpositive + 1}) must be positive, got {p['link_mass'][nonpositive]}"
        )
    inertia_l = _array("link_inertia", link_inertia, (n, 3, 3))
    mount = _array("mount_position", mount_position, (3,))
    euler = _array("mount_euler", mount_euler, (3,))
    base_i = _array("base_inertia", base_inertia, (3, 3))
    base_m = _array("base_mass", base_mass, ())
    if not base_m > 0:
        raise ValueError(f"model_from_dh: base_mass must be positive, got {float(base_m)}")

    zeros = np.zeros(n)
    # Centroid i at (a_i, 0, d_i) in F_i (eq 10); joint i+1 at (b_i, 0, 0) from it (eq 9).
    centroid_to_joint = -np.stack([p["a"], zeros, p["d"]], axis=1)
    parent_centroid_to_joint = np.concatenate([mount[None], np.stack([p["b"][:-1], zeros[:-1], zeros[:-1]], axis=1)])
    # Joint frame i+1 = F_i Rx(alpha_i) Rz(theta_offset_{i+1}); joint 1 from the mount (eq 8).
    joint_rpy = np.stack([np.concatenate([[0.0], p["alpha"][:-1]]), zeros, p["theta_offset"]], axis=1)
    joint_rpy[0] = matrix_to_rpy_numpy(euler123_to_matrix(euler) @ _rz(p["theta_offset"][0]))
    # L_i = F_i Rx(alpha_i): inertia from L_i into F_i.
    rot = np.stack([_rx(x) for x in p["alpha"]])
    inertia_f = rot @ inertia_l @ np.swapaxes(rot, 1, 2)
    return Model(
        parent=tuple(range(n)),
        joint_type=types,
        base_mass=base_m,
        base_inertia=base_i,
        link_mass=p["link_mass"],
        link_inertia=inertia_f,
        parent_centroid_to_joint=parent_centroid_to_joint,
        centroid_to_joint=centroid_to_joint,
        joint_rpy=joint_rpy,
        end_point_link=(n,),
        centroid_to_end_point=np.array([[p["b"][-1], 0.0, 0.0]]),
        end_point_rpy=np.array([[p["alpha"][-1], 0.0, 0.0]]),
        joint_stiffness=joint_stiffness,
        joint_damping=joint_damping,
        gravity=gravity,
        link_names=link_names,
        name=name,
        dtype=dtype,
    )


# ------------------------------------------------------------------------------------------
# DH table files (``.dh``).

#: Column names of a ``.dh`` joint table, in order; the last two are optional (together).
DH_COLUMNS = ("type", "d", "theta_offset", "alpha", "a", "b", "mass", "ixx", "iyy", "izz", "ixy", "ixz", "iyz")
DH_PASSIVE_COLUMNS = ("stiffness", "damping")
_DH_SETTINGS = {
    "name": 1,
    "angle_unit": 1,
    "base_mass": 1,
    "base_inertia": 6,
    "mount_position": 3,
    "mount_euler": 3,
    "gravity": 3,
}
#: Largest ``.dh`` file accepted (bytes).
MAX_DH_FILE_BYTES = 16 * 1024 * 1024


def _tensor(ixx: float, iyy: float, izz: float, ixy: float, ixz: float, iyz: float) -> np.ndarray:
    return np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])


@names_the_file
def model_from_dh_file(path: str | os.PathLike, dtype: Any = None) -> Model:
    """Read a ``.dh`` table file into :func:`model_from_dh`.

    Format (plain text, ``#`` starts a comment, blank lines ignored)::

        sdjax-dh 1                               # first line: format and version
        name            demo_arm                 # optional (default: the file stem)
        angle_unit      deg                      # optional: rad (default) or deg, for every angle
        base_mass       200                      # kg
        base_inertia    20 22 18 0.5 0 0         # ixx iyy izz ixy ixz iyz, kg m^2, base frame
        mount_position  0.5 0 0.3                # optional, 0b0, m, base frame (default 0)
        mount_euler     0 90 0                   # optional, (epsilon, zeta, eta) of eq 8 (default 0)
        gravity         0 0 0                    # optional, m/s^2, inertial frame
        joints
        type d    theta_offset alpha a    b   mass ixx  iyy  izz  ixy ixz iyz  [stiffness damping]
        R    0.1  0            90    0.05 0.2 5    0.1  0.1  0.02 0   0   0
        P    0.0  0            0     0.0  0.3 3    0.05 0.05 0.01 0   0   0

    After the ``joints`` line comes the column header, exactly :data:`DH_COLUMNS` optionally
    followed by ``stiffness damping``, then one row per joint ``i = 1..N`` (seed 003 Table 2;
    meanings as in :func:`model_from_dh`): ``type`` ``R``/``P``; ``d``, ``a``, ``b`` in m;
    ``theta_offset``, ``alpha`` in ``angle_unit``; ``mass`` in kg; the inertia of link ``i``
    about its centroid in ``L_i`` (``ixy`` etc. are tensor entries), kg m^2. The model has
    one end point, the end effector ``J_{N+1}``.

    Raises:
        ValueError: naming the line and the problem (unknown setting, wrong count, bad
            header, non-number, unknown joint type, missing ``base_mass``/``base_inertia``/
            ``joints``), plus the checks of :func:`model_from_dh`.
    """
    path = os.fspath(path)
    text = read_text_file(path, "DH file", MAX_DH_FILE_BYTES)
    lines = [(k + 1, line.split("#", 1)[0].split()) for k, line in enumerate(text.splitlines())]
    lines = [(k, tokens) for k, tokens in lines if tokens]
    where = lambda k: f"{path}, line {k}"  # noqa: E731
    if not lines or lines[0][1] != ["sdjax-dh", "1"]:
        first = lines[0][0] if lines else 1
        raise ValueError(f"{where(first)}: the first line must be 'sdjax-dh 1'")
    settings: dict[str, tuple[int, list[str]]] = {}
    k = 1
    while k < len(lines) and lines[k][1] != ["joints"]:
        number, tokens = lines[k]
        key, values = tokens[0], tokens[1:]
        if key not in _DH_SETTINGS:
            raise ValueError(f"{where(number)}: unknown setting {key!r}; known: {sorted(_DH_SETTINGS)} (then 'joints')")
        if key in settings:
            raise ValueError(f"{where(number)}: {key} given twice (first on line {settings[key][0]})")
        if len(values) != _DH_SETTINGS[key]:
            raise ValueError(f"{where(number)}: {key} expects {_DH_SETTINGS[key]} value(s), got {len(values)}")
        settings[key] = (number, values)
        k += 1
    if k >= len(lines):
        raise ValueError(f"{path}: missing the 'joints' line and joint table")
    for key in ("base_mass", "base_inertia"):
        if key not in settings:
            raise ValueError(f"{path}: missing setting {key!r}")

    def numbers(number: int, what: str, tokens: list[str]) -> list[float]:
        try:
            return [text_number(t) for t in tokens]
        except ValueError:
            raise ValueError(f"{where(number)}: {what} must be numbers, got {' '.join(tokens)!r}") from None

    unit_line, unit = settings.get("angle_unit", (0, ["rad"]))
    if unit[0] not in ("rad", "deg"):
        raise ValueError(f"{where(unit_line)}: angle_unit must be 'rad' or 'deg', got {unit[0]!r}")
    scale = np.pi / 180.0 if unit[0] == "deg" else 1.0
    if k + 1 >= len(lines):
        raise ValueError(f"{where(lines[k][0])}: 'joints' must be followed by the column header and at least one row")
    header_line, header = lines[k + 1]
    if tuple(header) not in (DH_COLUMNS, DH_COLUMNS + DH_PASSIVE_COLUMNS):
        raise ValueError(
            f"{where(header_line)}: the column header must be {' '.join(DH_COLUMNS)} [stiffness damping], got {' '.join(header)!r}"
        )
    rows = lines[k + 2 :]
    if not rows:
        raise ValueError(f"{where(header_line)}: the joint table has no rows")
    if len(rows) > MAX_LINKS:
        raise ValueError(f"{path}: {len(rows)} joints exceeds the limit of {MAX_LINKS}")
    types, table = [], []
    for number, tokens in rows:
        if len(tokens) != len(header):
            raise ValueError(f"{where(number)}: expected {len(header)} columns ({' '.join(header)}), got {len(tokens)}")
        if tokens[0] not in JOINT_TYPES:
            raise ValueError(f"{where(number)}: joint type {tokens[0]!r}; expected 'R' or 'P'")
        types.append(tokens[0])
        table.append(numbers(number, "the row values after the type", tokens[1:]))
    t = np.array(table)
    col = {c: t[:, j - 1] for j, c in enumerate(header) if j > 0}
    setting = {
        key: numbers(number, key, values)
        for key, (number, values) in settings.items()
        if key not in ("name", "angle_unit")
    }
    passive = len(header) > len(DH_COLUMNS)
    return model_from_dh(
        d=col["d"],
        theta_offset=col["theta_offset"] * scale,
        alpha=col["alpha"] * scale,
        a=col["a"],
        b=col["b"],
        link_mass=col["mass"],
        link_inertia=np.stack([_tensor(*(col[c][i] for c in DH_COLUMNS[7:])) for i in range(len(rows))]),
        base_mass=setting["base_mass"][0],
        base_inertia=_tensor(*setting["base_inertia"]),
        joint_type="".join(types),
        mount_position=setting.get("mount_position", [0.0, 0.0, 0.0]),
        mount_euler=np.asarray(setting.get("mount_euler", [0.0, 0.0, 0.0])) * scale,
        joint_stiffness=col["stiffness"] if passive else None,
        joint_damping=col["damping"] if passive else None,
        gravity=setting.get("gravity"),
        name=settings["name"][1][0] if "name" in settings else os.path.splitext(os.path.basename(path))[0],
        dtype=dtype,
    )
