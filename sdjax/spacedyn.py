"""SpaceDyn v2 compatibility: the toolbox's function names, meanings and MATLAB array layouts.

A migration aid for MATLAB scripts. ``LP`` becomes a :class:`~sdjax.Model` (build one with
:func:`model_from_lp`; every function also accepts any sdjax Model, or an LP mapping);
``SV`` is a dict of arrays (:func:`init_SV`). Functions are pure: where SpaceDyn writes
``SV = calc_pos(LP, SV)`` they return a new dict with the fields updated. SpaceDyn's globals
become keyword arguments: ``gravity=`` (default: the model's gravity) and ``d_time=``.

Layouts (``n`` joints, 1-based link and end-point numbers as in MATLAB):
``R0, v0, w0, vd0, wd0, F0, T0`` ``(3,)``; ``A0`` ``(3, 3)`` (base-to-inertial, SpaceDyn's
``A0 = C0^T``); ``q, qd, qdd, tau`` ``(n,)``; ``RR, vv, ww, vd, wd, Fe, Te`` ``(3, n)``
(column i = link i); ``AA`` ``(3, 3n)``; ``JJ_t, JJ_r`` ``(3, n*n)``; ``HH`` ``(6+n, 6+n)``.

Differences from SpaceDyn, all deliberate:

- Each function computes what it needs from the primary state (``R0, A0, v0, w0, q, qd``,
  accelerations, loads); stale derived fields (``AA``, ``RR``, ...) in ``SV`` are never read.
- ``f_dyn_rk2`` returns ``AA``/``RR``/``vd0``/``wd0``/``qdd`` unchanged, as SpaceDyn does
  (call :func:`calc_aa` and :func:`calc_pos` after a step to refresh them).
- A model's passive joint torques ``-K q - D qd`` (an sdjax extension) act in ``f_dyn`` and
  ``f_dyn_rk2``; ``r_ne`` returns the total Newton-Euler joint force, as SpaceDyn does.
- ``Fe``/``Te`` on links without an end point are refused (SpaceDyn ignores them).

Sign of ``Fe``/``Te``: ``f_dyn``/``f_dyn_rk2`` take them as loads applied *to* the robot
(``H a + c = F + J^T [Fe; Te]``); ``r_ne`` follows SpaceDyn v2r1 and seed 000 eq 3.32, where
they are the loads the end points exert *on* the environment (``Force = H a + c + J^T [Fe; Te]``).

Name mapping to the core API: see the migration table of the documentation (docs/spacedyn.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.dynamics import Controls, floating_acceleration, inertia_matrix, inverse_dynamics, passive_joint_torques
from sdjax.gjm import generalized_jacobian
from sdjax.integrate import runge_kutta4, state_derivative
from sdjax.io.spacedyn_arrays import model_from_lp as _model_from_lp
from sdjax.jacobians import end_point_jacobians, link_jacobians
from sdjax.kinematics import forward_kinematics, link_accelerations, link_velocities
from sdjax.model import Model, check_no_mimic, check_spacedyn_end_points, edit_model
from sdjax.rotation import (
    euler313_to_matrix,
    matrix_to_euler313,
    matrix_to_quat,
    matrix_to_rpy,
    quat_normalize,
    quat_rate,
    quat_to_matrix,
    rotation_difference,
    rpy_to_matrix,
    skew,
)
from sdjax.state import State
from sdjax._checks import check_index, check_type

__all__ = [
    "calc_aa",
    "calc_acc",
    "calc_gj",
    "calc_hh",
    "calc_je",
    "calc_jr",
    "calc_jt",
    "calc_pos",
    "calc_vel",
    "dc2eul",
    "dc2qtn",
    "dc2rpy",
    "eul2dc",
    "f_dyn",
    "f_dyn_fix",
    "f_dyn_rk2",
    "f_kin_e",
    "f_kin_j",
    "i_dyn_fix",
    "init_SV",
    "j_num",
    "model_from_lp",
    "qtn2dc",
    "r_ne",
    "rpy2dc",
    "tilde",
    "tr2diff",
    "w2dQtn",
]

SV = dict  # the state record: a dict of arrays


def model_from_lp(LP: Mapping[str, Any], **kwargs: Any) -> Model:
    """Model from a SpaceDyn ``LP`` mapping: fields ``BB, J_type ('R'/'P' string), c0, cc, ce,
    Qi, Qe (radians), SE, m0, m, inertia0, inertia`` (``SS, S0, mass, num_q`` optional and
    checked). Keyword arguments (``gravity=``, ``name=``, ``dtype=``) go to
    :func:`sdjax.io.model_from_spacedyn_arrays`."""
    return _model_from_lp(LP, **kwargs)


def _model(model: Model | Mapping[str, Any], gravity: Any = None) -> Model:
    if isinstance(model, Mapping):
        model = model_from_lp(model)
    check_type("model", model, Model, "an sdjax Model or a SpaceDyn LP mapping")
    check_no_mimic(model, "the SpaceDyn-compatible functions")
    if model.base != "floating":
        raise ValueError(
            f"model {model.name!r} has a {model.base} base; the SpaceDyn-compatible functions use SpaceDyn's "
            "floating-base layouts ([v0; w0; qd]): use sdjax's own functions, or f_dyn_fix / i_dyn_fix for a base "
            "held fixed"
        )
    if gravity is not None:
        g = jnp.asarray(gravity, model.dtype).reshape(-1)
        if g.shape != (3,):
            raise ValueError(f"gravity: expected 3 components, got shape {np.shape(gravity)}")
        return eqx.tree_at(lambda m: m.gravity, model, g)
    return model


def _field(sv: Mapping[str, Any], name: str, shape: tuple[int, ...], dtype: Any) -> Array:
    if name not in sv:
        raise ValueError(f"SV.{name}: missing (build SV with init_SV(model))")
    value = jnp.asarray(sv[name], dtype)
    if value.shape != shape:
        if value.size == int(np.prod(shape)) and len(shape) == 1:
            value = value.reshape(shape)  # MATLAB column/row vectors
        else:
            raise ValueError(f"SV.{name}: expected shape {shape}, got {value.shape}")
    return value


def _state(model: Model, sv: Mapping[str, Any]) -> State:
    n, dtype = model.num_joints, model.dtype
    return State(
        base_position=_field(sv, "R0", (3,), dtype),
        base_quaternion=matrix_to_quat(_field(sv, "A0", (3, 3), dtype)),
        base_linear_velocity=_field(sv, "v0", (3,), dtype),
        base_angular_velocity=_field(sv, "w0", (3,), dtype),
        q=_field(sv, "q", (n,), dtype),
        qd=_field(sv, "qd", (n,), dtype),
    )


def _end_point_loads(model: Model, sv: Mapping[str, Any]) -> tuple[Array, Array]:
    """``Fe``/``Te`` (3, n) columns of the end links, as (ne, 3); refuse loads elsewhere."""
    check_spacedyn_end_points(model, "SV.Fe/SV.Te")
    n = model.num_joints
    fe, te = _field(sv, "Fe", (3, n), model.dtype), _field(sv, "Te", (3, n), model.dtype)
    others = np.setdiff1d(np.arange(n), np.asarray(model.end_point_link, dtype=np.int64) - 1)
    for name, value in (("Fe", fe), ("Te", te)):
        if not isinstance(value, jax.core.Tracer) and others.size and np.any(np.asarray(value)[:, others] != 0):
            bad = int(others[np.flatnonzero(np.any(np.asarray(value)[:, others] != 0, axis=0))[0]]) + 1
            raise ValueError(
                f"SV.{name}(:, {bad}): link {bad} has no end point (SE({bad}) = 0), so this load would be ignored"
            )
    links = jnp.asarray(model.end_point_link, dtype=jnp.int32) - 1
    return fe.T[links], te.T[links]


def _columns(x: Array) -> Array:
    """``(n, 3)`` per-link rows to SpaceDyn's ``(3, n)`` columns."""
    return x.T


def _blocks(x: Array) -> Array:
    """``(n, 3, 3)`` per-link matrices to SpaceDyn's ``(3, 3n)`` side-by-side blocks."""
    return jnp.transpose(x, (1, 0, 2)).reshape(3, -1)


# ------------------------------------------------------------------------------------------
# Attitude helpers.


def rpy2dc(roll: Any, pitch: Any = None, yaw: Any = None) -> Array:
    """Direction cosines ``C = (Rx(roll) Ry(pitch) Rz(yaw))^T`` (inertial/parent to body);
    accepts three angles or one 3-vector."""
    rpy = jnp.asarray(roll) if pitch is None else jnp.stack([jnp.asarray(roll), jnp.asarray(pitch), jnp.asarray(yaw)])
    return rpy_to_matrix(rpy).T


def dc2rpy(C: Any) -> Array:
    """RPY angles ``(3,)`` of direction cosines ``C`` (inverse of :func:`rpy2dc`)."""
    return matrix_to_rpy(jnp.asarray(C).T)


def eul2dc(phi: Any, theta: Any = None, psi: Any = None) -> Array:
    """Direction cosines ``C = (Rz(phi) Rx(theta) Rz(psi))^T`` of 3-1-3 Euler angles; accepts
    three angles or one 3-vector."""
    angles = jnp.asarray(phi) if theta is None else jnp.stack([jnp.asarray(phi), jnp.asarray(theta), jnp.asarray(psi)])
    return euler313_to_matrix(angles).T


def dc2eul(C: Any) -> Array:
    """3-1-3 Euler angles ``(3,)`` of direction cosines ``C`` (inverse of :func:`eul2dc`;
    ``theta`` in ``[0, pi]``, ``psi = 0`` at gimbal lock)."""
    return matrix_to_euler313(jnp.asarray(C).T)


def tr2diff(A1: Any, A2: Any) -> Array:
    """Differential motion from pose 1 to pose 2: for 3 x 3 attitude matrices ``A`` (body to
    inertial, as ``SV.A0`` and ``calc_aa``) the rotation ``1/2 sum_k A1[:, k] x A2[:, k]``
    ``(3,)``; for 4 x 4 homogeneous transforms ``[p2 - p1; rotation]`` ``(6,)``."""
    A1, A2 = jnp.asarray(A1), jnp.asarray(A2)
    if A1.shape != A2.shape or A1.shape not in ((3, 3), (4, 4)):
        raise ValueError(
            f"tr2diff: give two 3 x 3 attitude matrices or two 4 x 4 transforms, not {A1.shape} and {A2.shape}"
        )
    rotation = rotation_difference(A1[:3, :3], A2[:3, :3])
    return rotation if A1.shape == (3, 3) else jnp.concatenate([A2[:3, 3] - A1[:3, 3], rotation])


def tilde(a: Any) -> Array:
    """Skew matrix: ``tilde(a) @ b == cross(a, b)``."""
    return skew(jnp.asarray(a).reshape(3))


def qtn2dc(qtn: Any) -> Array:
    """Direction cosines ``C = A^T`` of a scalar-last quaternion ``(x, y, z, w)``."""
    return quat_to_matrix(jnp.asarray(qtn).reshape(4)).T


def dc2qtn(C: Any) -> Array:
    """Scalar-last unit quaternion of direction cosines ``C`` (the quaternion of ``A = C^T``)."""
    return matrix_to_quat(jnp.asarray(C).T)


def w2dQtn(w: Any, qtn: Any) -> Array:
    """Quaternion rate for an inertial-frame angular velocity ``w``."""
    return quat_rate(jnp.asarray(qtn).reshape(4), jnp.asarray(w).reshape(3))


# ------------------------------------------------------------------------------------------
# State record and kinematics.


def init_SV(model: Model | Mapping[str, Any]) -> SV:
    """A zero state record: base at the origin with ``A0 = E``, everything else zero."""
    model = _model(model)
    n, dtype = model.num_joints, model.dtype
    z3, zn, z3n = jnp.zeros(3, dtype), jnp.zeros(n, dtype), jnp.zeros((3, n), dtype)
    return dict(
        R0=z3, A0=jnp.eye(3, dtype=dtype), Q0=z3, v0=z3, w0=z3, vd0=z3, wd0=z3,
        q=zn, qd=zn, qdd=zn,
        AA=jnp.zeros((3, 3 * n), dtype), RR=z3n, vv=z3n, ww=z3n, vd=z3n, wd=z3n,
        F0=z3, T0=z3, Fe=z3n, Te=z3n, tau=zn,
    )  # fmt: skip


def calc_aa(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> SV:
    """``SV.AA`` (3, 3n): link-to-inertial rotations."""
    model = _model(model)
    kin = forward_kinematics(model, _state(model, SV))
    return {**SV, "AA": _blocks(kin.rotation[1:])}


def calc_pos(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> SV:
    """``SV.RR`` (3, n): link centroids, inertial frame (``SV.AA`` is refreshed too)."""
    model = _model(model)
    kin = forward_kinematics(model, _state(model, SV))
    return {**SV, "AA": _blocks(kin.rotation[1:]), "RR": _columns(kin.centroid[1:])}


def calc_vel(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> SV:
    """``SV.vv``, ``SV.ww`` (3, n): centroid linear and angular velocities (eqs 3.8-3.13)."""
    model = _model(model)
    linear, angular = link_velocities(model, _state(model, SV))
    return {**SV, "vv": _columns(linear[1:]), "ww": _columns(angular[1:])}


def calc_acc(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> SV:
    """``SV.vd``, ``SV.wd`` (3, n) from ``vd0, wd0, qdd`` (eqs 3.10-3.15; no gravity)."""
    model = _model(model)
    dtype, n = model.dtype, model.num_joints
    base_acc = jnp.concatenate([_field(SV, "vd0", (3,), dtype), _field(SV, "wd0", (3,), dtype)])
    linear, angular = link_accelerations(model, _state(model, SV), base_acc, _field(SV, "qdd", (n,), dtype))
    return {**SV, "vd": _columns(linear[1:]), "wd": _columns(angular[1:])}


def j_num(model: Model | Mapping[str, Any], num_e: int) -> np.ndarray:
    """Joints (1-based, base first) from the base to end point ``num_e`` (1-based)."""
    model = _model(model)
    num_e = check_index("j_num: end point number", num_e, 1, model.num_end_points)
    return np.asarray(model.end_point_paths[num_e - 1], dtype=np.int64)


def _end_point_of(model: Model, joints: Sequence[int]) -> int:
    """0-based end-point index of the link ``joints[-1]``."""
    check_spacedyn_end_points(model, "joints (an end point named by its link)")
    path = np.asarray(joints, dtype=np.int64).reshape(-1)
    if path.size == 0:
        raise ValueError("joints: empty joint list")
    link = int(path[-1])
    if link not in model.end_point_link:
        raise ValueError(f"joints: link {link} (the last entry) carries no end point; use j_num(model, num_e)")
    return model.end_point_link.index(link)


def f_kin_e(model: Model | Mapping[str, Any], SV: Mapping[str, Any], joints: Sequence[int]) -> tuple[Array, Array]:
    """Position ``(3,)`` and orientation ``(3, 3)`` (end-point-to-inertial) of the end point on
    link ``joints[-1]``."""
    model = _model(model)
    e = _end_point_of(model, joints)
    kin = forward_kinematics(model, _state(model, SV))
    return kin.end_point_position[e], kin.end_point_rotation[e]


def f_kin_j(model: Model | Mapping[str, Any], SV: Mapping[str, Any], joints: Sequence[int]) -> tuple[Array, Array]:
    """Positions ``(3, m)`` and orientations ``(3, 3m)`` of the given joints (1-based)."""
    model = _model(model)
    idx = np.asarray(joints, dtype=np.int64).reshape(-1) - 1
    if idx.size and (idx.min() < 0 or idx.max() >= model.num_joints):
        raise ValueError(f"f_kin_j: joint numbers must be 1..{model.num_joints}, got {list(idx + 1)}")
    kin = forward_kinematics(model, _state(model, SV))
    return _columns(kin.joint_position[idx]), _blocks(kin.rotation[1:][idx])


def calc_je(model: Model | Mapping[str, Any], SV: Mapping[str, Any], joints: Sequence[int]) -> Array:
    """End-point Jacobian w.r.t. joint rates, ``(6, n)`` ``[linear; angular]`` (base excluded)."""
    model = _model(model)
    e = _end_point_of(model, joints)
    return end_point_jacobians(model, _state(model, SV))[e, :, 6:]


def calc_gj(model: Model | Mapping[str, Any], SV: Mapping[str, Any], num_e: int) -> Array:
    """Generalized Jacobian ``(6, n)`` of end point ``num_e``: ``J_m - J_b H_b^-1 H_bm``."""
    model = _model(model)
    j_num(model, num_e)
    e = num_e - 1
    link = model.end_point_link[e]
    return generalized_jacobian(model, _state(model, SV), link, model.centroid_to_end_point[e])


def calc_jt(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> Array:
    """Translational Jacobians of all link centroids, ``JJ_t`` (3, n*n); block i is ``J_Ti``."""
    model = _model(model)
    jac = link_jacobians(model, _state(model, SV))[1:, :3, 6:]
    return jnp.transpose(jac, (1, 0, 2)).reshape(3, -1)


def calc_jr(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> Array:
    """Rotational Jacobians of all link centroids, ``JJ_r`` (3, n*n); block i is ``J_Ri``."""
    model = _model(model)
    jac = link_jacobians(model, _state(model, SV))[1:, 3:, 6:]
    return jnp.transpose(jac, (1, 0, 2)).reshape(3, -1)


# ------------------------------------------------------------------------------------------
# Dynamics.


def calc_hh(model: Model | Mapping[str, Any], SV: Mapping[str, Any]) -> Array:
    """Inertia matrix ``HH`` (6 + n, 6 + n) for ``[v0; w0; qd]``."""
    model = _model(model)
    return inertia_matrix(model, _state(model, SV))


def r_ne(model: Model | Mapping[str, Any], SV: Mapping[str, Any], *, gravity: Any = None) -> Array:
    """Newton-Euler inverse dynamics: ``Force = [F0; T0; tau]`` (6 + n,) for ``vd0, wd0, qdd``
    with ``Fe``/``Te`` the loads the end points exert on the environment (SpaceDyn v2 sign)."""
    model = _model(model, gravity)
    state = _state(model, SV)
    dtype, n = model.dtype, model.num_joints
    fe, te = _end_point_loads(model, SV)
    base_acc = jnp.concatenate([_field(SV, "vd0", (3,), dtype), _field(SV, "wd0", (3,), dtype)])
    base, tau = inverse_dynamics(
        model, state, base_acc, _field(SV, "qdd", (n,), dtype), end_point_force=-fe, end_point_torque=-te
    )
    return jnp.concatenate([base, tau + passive_joint_torques(model, state)])


def _controls(model: Model, SV: Mapping[str, Any]) -> Controls:
    fe, te = _end_point_loads(model, SV)
    dtype, n = model.dtype, model.num_joints
    return Controls(
        tau=_field(SV, "tau", (n,), dtype),
        base_force=_field(SV, "F0", (3,), dtype),
        base_torque=_field(SV, "T0", (3,), dtype),
        end_point_force=fe,
        end_point_torque=te,
    )


def f_dyn(model: Model | Mapping[str, Any], SV: Mapping[str, Any], *, gravity: Any = None) -> SV:
    """Forward dynamics: ``SV.vd0, SV.wd0, SV.qdd`` from ``F0, T0, tau, Fe, Te`` (eq 3.29)."""
    model = _model(model, gravity)
    acc = floating_acceleration(model, _state(model, SV), _controls(model, SV))
    return {**SV, "vd0": acc[:3], "wd0": acc[3:6], "qdd": acc[6:]}


def _held_fixed(model: Model | Mapping[str, Any], SV: Mapping[str, Any], gravity: Any) -> tuple[Model, State]:
    """The model with its base welded at ``SV.R0``, ``SV.A0`` and the state there at rest."""
    model = edit_model(_model(model, gravity), base="fixed")
    state = _state(model, SV)
    zero = jnp.zeros(3, model.dtype)
    return model, State(state.base_position, state.base_quaternion, zero, zero, state.q, state.qd)


def f_dyn_fix(model: Model | Mapping[str, Any], SV: Mapping[str, Any], *, gravity: Any = None) -> SV:
    """Forward dynamics with the base held fixed at ``SV.R0``, ``SV.A0`` (a manipulator on a
    ground test bed): ``SV.qdd`` from ``tau``, ``Fe``, ``Te`` (as :func:`f_dyn`); ``vd0``,
    ``wd0`` are set to zero and ``v0``, ``w0``, ``F0``, ``T0`` are not used (the mount carries
    the base loads). The fixed-base counterpart of :func:`f_dyn` (SpaceDyn C++'s
    fixed-base dynamics); sdjax's own is a ``Model(base="fixed")``."""
    model, state = _held_fixed(model, SV, gravity)
    acc = floating_acceleration(model, state, _controls(model, SV))
    return {**SV, "vd0": acc[:3], "wd0": acc[3:6], "qdd": acc[6:]}


def i_dyn_fix(model: Model | Mapping[str, Any], SV: Mapping[str, Any], *, gravity: Any = None) -> Array:
    """Inverse dynamics with the base held fixed at ``SV.R0``, ``SV.A0``: ``[F0; T0; tau]``
    (6 + n,) for ``qdd`` (``v0``, ``w0``, ``vd0``, ``wd0`` taken as zero), ``F0``/``T0`` the
    wrench the mount applies to the base (at its centroid, inertial frame), ``Fe``/``Te`` with
    :func:`r_ne`'s sign (loads the end points exert on the environment)."""
    model, state = _held_fixed(model, SV, gravity)
    fe, te = _end_point_loads(model, SV)
    base, tau = inverse_dynamics(
        model,
        state,
        None,
        _field(SV, "qdd", (model.num_joints,), model.dtype),
        end_point_force=-fe,
        end_point_torque=-te,
    )
    return jnp.concatenate([base, tau + passive_joint_torques(model, state)])


@eqx.filter_jit
def _rk4_with_normalised_stages(model: Model, start: State, controls: Controls, dt: Array) -> State:
    def normalise_later_stages(stage: State, is_first: Array) -> State:
        # Stage 1 runs on SV.A0 as given; Qtn + k1/2, Qtn + k2/2, Qtn + k3 are normalised.
        quat = jnp.where(is_first, stage.base_quaternion, quat_normalize(stage.base_quaternion))
        return eqx.tree_at(lambda s: s.base_quaternion, stage, quat)

    return runge_kutta4(lambda s, _offset: state_derivative(model, s, controls), start, dt, normalise_later_stages)


def f_dyn_rk2(model: Model | Mapping[str, Any], SV: Mapping[str, Any], *, d_time: Any, gravity: Any = None) -> SV:
    """One RK4 step of length ``d_time`` (SpaceDyn v2r1 ``f_dyn_rk2``).

    Classical RK4 on ``(R0, Qtn, v0, w0, q, qd)`` with ``F0, T0, tau, Fe, Te`` held. The first
    stage uses ``SV.A0``; every later stage quaternion ``Qtn + k1/2``, ``Qtn + k2/2``,
    ``Qtn + k3`` is normalised and gives that stage's ``A0``; the final quaternion is
    normalised. Returns ``SV`` with ``R0, A0, v0, w0, q, qd`` updated.
    """
    model = _model(model, gravity)
    end = _rk4_with_normalised_stages(model, _state(model, SV), _controls(model, SV), jnp.asarray(d_time, model.dtype))
    return {
        **SV,
        "R0": end.base_position,
        "A0": quat_to_matrix(quat_normalize(end.base_quaternion)),
        "v0": end.base_linear_velocity,
        "w0": end.base_angular_velocity,
        "q": end.q,
        "qd": end.qd,
    }
