"""Arm flexibility of the massless arm (seed 004 section 3 and appendix B).

- Per-beam flexibility (eq B-7): a 6x6 matrix with seven independent terms
  ``y11, y22, y33, y26, y35, y55, y66`` (figure B-2's sparsity: torsion, two bending planes,
  no axial compliance, ``y26 <= 0``, all others positive). :func:`cantilever_terms` gives them
  for a uniform Euler-Bernoulli cantilever.
- Chain flexibility (eq B-6): ``Y = sum_i L_in Y_i L_in^T``, each beam's tip flexibility
  carried to the end-effector tip by the shift ``L_in`` (eqs A-6, A-20) and rotated from the
  beam frame to the orbiter frame: :func:`chain_flexibility`, :func:`arm_flexibility_matrix`.
- Joint flexibility (eqs 3-1 .. 3-5): ``YJ = J^-1 Y J^-T``, so that ``dtheta = -YJ tau_F``.
- Passive mode (locked joints, eq 3-6): ``tau_F = -YJ^-1 (theta - theta_neutral)``
  (:func:`passive_flexibility_torques`, :class:`PassiveFlexibility` as a controller).
- Active mode (eq 3-7): the flexibility term of motor ``i``,
  ``Y_i^e = YJ_ii - {YJ_i^21}^T [YJ_i^22]^-1 {YJ_i^21}`` (:func:`motor_flexibility_terms`).

Order of the six-vectors. The seed writes loads ``{M; F}`` and deflections ``{rotation;
displacement}``; sdjax uses ``[linear; angular]``: here a flexibility matrix maps ``[F; M]``
(N, N m) to ``[displacement; rotation]`` (m, rad). The seven named terms keep the seed's
meaning and indices (``y26`` couples the rotation about the beam's y axis with the force
along z, ``y35`` the rotation about z with the force along y); :func:`beam_flexibility`
places them. Beam frames have x along the beam (root to end).

Sign conventions (consistent with section 2): ``Y`` relates a load *applied to the arm* at
the tip (minus the end-effector load on the payload) to the elastic deflection of the tip;
``tau_F`` is the elastic joint torque acting like a servo torque (on the outboard link).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import einsum, matmul
from sdjax.massless_arm.dynamics import MasslessArmSystem, _arm_kinematics, _check_q, _solve
from sdjax.rotation import skew
from sdjax._checks import check_vector, is_traced

__all__ = [
    "BEAM_TERMS",
    "ArmFlexibility",
    "PassiveFlexibility",
    "arm_flexibility_matrix",
    "beam_flexibility",
    "cantilever_terms",
    "chain_flexibility",
    "joint_flexibility_matrix",
    "motor_flexibility_terms",
    "passive_flexibility_torques",
    "shift_matrix",
]

#: Names of the seven independent terms of eq B-7, in this order everywhere.
BEAM_TERMS = ("y11", "y22", "y33", "y26", "y35", "y55", "y66")

# Seed order (moment/rotation first) -> sdjax order (force/displacement first).
_TO_SDJAX = np.array([3, 4, 5, 0, 1, 2])


def _check_terms(terms: Array) -> None:
    if is_traced(terms):
        return
    values = np.asarray(terms, np.float64).reshape(-1, 7)
    for b, row in enumerate(values):
        y = dict(zip(BEAM_TERMS, row))
        where = f"beam {b}" if values.shape[0] > 1 else "beam"
        if not np.all(np.isfinite(row)):
            raise ValueError(f"beam_flexibility: {where} terms must be finite, got {row.tolist()}")
        for name in ("y11", "y22", "y33", "y55", "y66"):
            if not y[name] > 0:
                raise ValueError(f"beam_flexibility: {where} term {name} must be positive (eq B-7), got {y[name]}")
        if y["y26"] > 0 or y["y35"] < 0:
            raise ValueError(
                f"beam_flexibility: {where}: eq B-7 needs y26 <= 0 and y35 >= 0 (x along the beam), got y26 = {y['y26']}, y35 = {y['y35']}"
            )
        # Positive semi-definite bending blocks: strain energy cannot be negative.
        for a, c, name in ((y["y22"], y["y66"], "y26"), (y["y33"], y["y55"], "y35")):
            if y[name] ** 2 > a * c * (1 + 1e-12):  # round-off margin on an exact cantilever (det = L^4/12 EI^2 > 0)
                raise ValueError(
                    f"beam_flexibility: {where}: {name}^2 = {y[name] ** 2:.6g} exceeds the product of its diagonal terms ({a * c:.6g}): not a flexibility matrix"
                )


def beam_flexibility(terms: Any) -> Array:
    """6x6 tip flexibility matrix of a beam from its seven terms (eq B-7).

    Arguments:
        terms: ``(..., 7)`` ``(y11, y22, y33, y26, y35, y55, y66)``: rotation per moment (rad/(N m)),
            rotation per force (rad/N) and displacement per force (m/N), beam frame (x along the
            beam), seed indices (1-3 rotations/moments about x, y, z; 4-6 displacements/forces).

    Returns:
        ``(..., 6, 6)`` symmetric matrix mapping ``[F; M]`` at the beam end to
        ``[displacement; rotation]`` of the beam end (sdjax order).
    """
    terms = jnp.asarray(terms)
    if terms.shape[-1:] != (7,):
        raise ValueError(f"beam_flexibility: terms expected shape (..., 7) {BEAM_TERMS}, got {terms.shape}")
    if not jnp.issubdtype(terms.dtype, jnp.floating):
        terms = terms.astype(jnp.result_type(float))
    _check_terms(terms)
    y11, y22, y33, y26, y35, y55, y66 = (terms[..., k] for k in range(7))
    zero = jnp.zeros_like(y11)
    seed = jnp.stack(  # eq B-7 in the seed's [M; F] -> [rotation; displacement] order
        [
            jnp.stack([y11, zero, zero, zero, zero, zero], -1),
            jnp.stack([zero, y22, zero, zero, zero, y26], -1),
            jnp.stack([zero, zero, y33, zero, y35, zero], -1),
            jnp.stack([zero, zero, zero, zero, zero, zero], -1),
            jnp.stack([zero, zero, y35, zero, y55, zero], -1),
            jnp.stack([zero, y26, zero, zero, zero, y66], -1),
        ],
        -2,
    )
    return seed[..., _TO_SDJAX, :][..., :, _TO_SDJAX]


def cantilever_terms(
    length: Any, bending_stiffness_y: Any, bending_stiffness_z: Any, torsional_stiffness: Any
) -> Array:
    """The seven terms of a uniform Euler-Bernoulli cantilever along x (clamped at its root,
    loaded at its end).

    ``y11 = L/GJ``, ``y22 = L/EI_y``, ``y33 = L/EI_z``, ``y26 = -L^2/(2 EI_y)``,
    ``y35 = L^2/(2 EI_z)``, ``y55 = L^3/(3 EI_z)``, ``y66 = L^3/(3 EI_y)`` (axially rigid).

    Arguments:
        length: ``L``, m.
        bending_stiffness_y, bending_stiffness_z: ``EI_y``, ``EI_z`` (bending about y, z), N m^2.
        torsional_stiffness: ``GJ``, N m^2.

    Returns:
        ``(..., 7)`` terms in :data:`BEAM_TERMS` order.
    """
    length, eiy, eiz, gj = jnp.broadcast_arrays(
        *(jnp.asarray(x) for x in (length, bending_stiffness_y, bending_stiffness_z, torsional_stiffness))
    )
    return jnp.stack(
        [
            length / gj,
            length / eiy,
            length / eiz,
            -(length**2) / (2 * eiy),
            length**2 / (2 * eiz),
            length**3 / (3 * eiz),
            length**3 / (3 * eiy),
        ],
        -1,
    )


def shift_matrix(offset: Array) -> Array:
    """``L`` of eqs A-6/A-7 in sdjax order: ``[[E, -skew(r)], [0, E]]`` (6, 6) for ``r`` the
    vector from a point ``i`` to the tip ``n``.

    ``[d_n; phi_n] = L [d_i; phi_i]`` (a small rotation at ``i`` moves the tip by
    ``phi x r``) and ``[F_i; M_i] = L^T [F_n; M_n]`` (eq A-20: ``M_i = M_n + r x F_n``).
    """
    eye = jnp.eye(3, dtype=offset.dtype)
    zero = jnp.zeros((3, 3), offset.dtype)
    return jnp.block([[eye, -skew(offset)], [zero, eye]])


def chain_flexibility(beam_matrices: Any, beam_rotations: Any, beam_ends: Any, tip: Any) -> Array:
    """Flexibility of a cantilevered chain of beams at its tip, eq B-6.

    ``Y = sum_i L_in R_i Y_i R_i^T L_in^T`` with ``R_i = diag(C_i, C_i)`` (beam frame to the
    reference frame) and ``L_in`` the shift from the end of beam ``i`` to the tip (eq B-4).

    Arguments:
        beam_matrices: ``(nb, 6, 6)`` beam flexibilities ``Y_i`` (:func:`beam_flexibility`),
            each at its own beam end, beam frame.
        beam_rotations: ``(nb, 3, 3)`` ``C_i``: beam frame to reference frame.
        beam_ends: ``(nb, 3)`` end point of each beam, reference frame, m.
        tip: ``(3,)`` tip of the chain, reference frame, m.

    Returns:
        ``(6, 6)`` ``Y``: ``[d; phi]`` of the tip per ``[F; M]`` applied at the tip, reference frame.
    """
    ys = jnp.asarray(beam_matrices)
    nb = ys.shape[0] if ys.ndim == 3 else -1
    if ys.ndim != 3 or ys.shape[1:] != (6, 6):
        raise ValueError(f"chain_flexibility: beam_matrices expected shape (nb, 6, 6), got {ys.shape}")
    rot = check_vector("chain_flexibility: beam_rotations", beam_rotations, (nb, 3, 3), ys.dtype)
    ends = check_vector("chain_flexibility: beam_ends", beam_ends, (nb, 3), ys.dtype)
    tip = check_vector("chain_flexibility: tip", tip, (3,), ys.dtype)
    zero = jnp.zeros((nb, 3, 3), ys.dtype)
    r6 = jnp.concatenate([jnp.concatenate([rot, zero], -1), jnp.concatenate([zero, rot], -1)], -2)
    shifts = jnp.stack([shift_matrix(tip - ends[b]) for b in range(nb)])
    carried = matmul(shifts, r6)
    return jnp.sum(matmul(matmul(carried, ys), jnp.swapaxes(carried, -1, -2)), axis=0)


class ArmFlexibility(eqx.Module):
    """The beams of a massless arm (seed 004 divides the RMS into five: longeron and shoulder,
    upper arm, lower arm, wrist, hand).

    Attributes:
        terms: ``(nb, 7)`` seven terms per beam (:data:`BEAM_TERMS`, eq B-7).
        body: static ``(nb,)`` tuple: the arm body each beam moves with (0 = orbiter,
            1..6 = link ``i``).
        rotation: ``(nb, 3, 3)`` beam frame (x along the beam) to that body's frame.
        end: ``(nb, 3)`` end (outboard point) of each beam in that body's frame, m, from the
            body frame's origin (the orbiter's CM for body 0, joint ``i`` for link ``i``).
    """

    terms: Array
    body: tuple[int, ...] = eqx.field(static=True)
    rotation: Array
    end: Array

    def __init__(self, terms: Any, body: Sequence[int], rotation: Any, end: Any):
        self.body = tuple(int(b) for b in body)
        nb = len(self.body)
        if any(not 0 <= b <= 6 for b in self.body):
            raise ValueError(f"ArmFlexibility.body: expected body indices 0..6, got {self.body}")
        terms = jnp.asarray(terms)
        if terms.shape != (nb, 7):
            raise ValueError(f"ArmFlexibility.terms: expected shape ({nb}, 7) for {nb} beams, got {terms.shape}")
        self.terms = terms.astype(jnp.result_type(float)) if not jnp.issubdtype(terms.dtype, jnp.floating) else terms
        _check_terms(self.terms)
        self.rotation = check_vector("ArmFlexibility.rotation", rotation, (nb, 3, 3), self.terms.dtype)
        self.end = check_vector("ArmFlexibility.end", end, (nb, 3), self.terms.dtype)


def arm_flexibility_matrix(system: MasslessArmSystem, flexibility: ArmFlexibility, q: Any) -> Array:
    """End-effector flexibility matrix ``Y`` of the arm at joint angles ``q`` (eq B-6, RMSFLX).

    Returns:
        ``(6, 6)``: tip ``[displacement; rotation]`` per ``[F; M]`` applied to the arm at the
        tip, orbiter frame.
    """
    q = _check_q(q, system.dtype)
    kin = _arm_kinematics(system.arm, q)
    origins = jnp.concatenate([jnp.zeros((1, 3), q.dtype), kin.joint_position])  # body frame origins
    bodies = np.asarray(flexibility.body)
    body_rot = kin.link_rotation[bodies]
    rot = matmul(body_rot, flexibility.rotation.astype(q.dtype))
    ends = origins[bodies] + einsum("bij,bj->bi", body_rot, flexibility.end.astype(q.dtype))
    return chain_flexibility(beam_flexibility(flexibility.terms.astype(q.dtype)), rot, ends, kin.tip_position)


def joint_flexibility_matrix(system: MasslessArmSystem, flexibility: ArmFlexibility | Array, q: Any) -> Array:
    """Joint flexibility matrix ``YJ = J^-1 Y J^-T`` (eqs 3-4, 3-5): ``dtheta = -YJ tau_F``.

    Arguments:
        flexibility: :class:`ArmFlexibility`, or an end-effector flexibility matrix ``Y``
            ``(6, 6)`` (orbiter frame) already computed.
        q: ``(6,)`` joint angles, rad.

    Returns:
        ``(6, 6)`` symmetric, rad per N m.
    """
    q = _check_q(q, system.dtype)
    y = (
        arm_flexibility_matrix(system, flexibility, q)
        if isinstance(flexibility, ArmFlexibility)
        else check_vector("joint_flexibility_matrix: Y", flexibility, (6, 6), q.dtype)
    )
    jac = _arm_kinematics(system.arm, q).jacobian
    left = _solve(system, jac, y)  # J^-1 Y
    yj = _solve(system, jac, left.T).T  # (J^-1 (J^-1 Y)^T)^T = J^-1 Y J^-T (Y symmetric)
    return 0.5 * (yj + yj.T)


def passive_flexibility_torques(joint_flexibility: Any, deflection: Any) -> Array:
    """Passive mode (joints locked), eq 3-6: ``tau_F = -YJ^-1 (theta - theta_neutral)``.

    ``YJ`` must be non-singular: beams with no axial compliance (eq B-7) all in one line (a
    straight arm) make the arm rigid along that line and ``YJ`` singular.

    Arguments:
        joint_flexibility: ``(6, 6)`` ``YJ``.
        deflection: ``(6,)`` elastic joint rotations ``theta - theta_neutral``, rad.

    Returns:
        ``(6,)`` joint torques, N m (acting like servo torques, eq 2-3).
    """
    yj = jnp.asarray(joint_flexibility)
    if yj.shape != (6, 6):
        raise ValueError(f"passive_flexibility_torques: joint_flexibility expected shape (6, 6), got {yj.shape}")
    return -jnp.linalg.solve(yj, check_vector("passive_flexibility_torques: deflection", deflection, (6,), yj.dtype))


#: For motor i, the indices of the other five (eq 3-7's deleted row and column).
_OTHERS = np.array([[j for j in range(6) if j != i] for i in range(6)])


def motor_flexibility_terms(joint_flexibility: Any) -> Array:
    """Active mode, eq 3-7: the flexibility term of each torque motor,
    ``Y_i^e = YJ_ii - {YJ_i^21}^T [YJ_i^22]^-1 {YJ_i^21}``.

    ``[YJ_i^22]`` is ``YJ`` without row and column ``i`` (5x5) and ``{YJ_i^21}`` row ``i``
    without its ``i``-th element. By the Schur-complement identity ``Y_i^e = 1 / (YJ^-1)_ii``:
    the compliance motor ``i`` sees when the other joints do not deflect.

    Arguments:
        joint_flexibility: ``(6, 6)`` ``YJ``.

    Returns:
        ``(6,)`` rad per N m.
    """
    yj = jnp.asarray(joint_flexibility)
    if yj.shape != (6, 6):
        raise ValueError(f"motor_flexibility_terms: joint_flexibility expected shape (6, 6), got {yj.shape}")
    rows = jnp.arange(6)
    y22 = yj[_OTHERS[:, :, None], _OTHERS[:, None, :]]  # (6, 5, 5)
    y21 = yj[rows[:, None], _OTHERS]  # (6, 5)
    return jnp.diagonal(yj) - einsum("ij,ij->i", y21, jnp.linalg.solve(y22, y21[..., None])[..., 0])


class PassiveFlexibility(eqx.Module):
    """Passive-mode arm as a controller ``(t, q, qd) -> tau`` for
    :func:`sdjax.massless_arm.simulate_two_body`: locked joints at ``q_neutral``, elastic torques
    ``tau_F = -YJ(q)^-1 (q - q_neutral)`` (eq 3-6), plus an optional joint damping
    ``-D qd`` (structural damping; the seed has none).

    Attributes:
        system: the massless-arm system (its arm kinematics and singularity settings).
        flexibility: :class:`ArmFlexibility`.
        q_neutral: ``(6,)`` rad.
        damping: ``(6,)`` N m s/rad (default 0).
    """

    system: MasslessArmSystem
    flexibility: ArmFlexibility
    q_neutral: Array
    damping: Array

    def __init__(self, system: MasslessArmSystem, flexibility: ArmFlexibility, q_neutral: Any, damping: Any = None):
        self.system, self.flexibility = system, flexibility
        self.q_neutral = check_vector("PassiveFlexibility: q_neutral", q_neutral, (6,), system.dtype)
        self.damping = check_vector("PassiveFlexibility: damping", damping, (6,), system.dtype)

    def __call__(self, t: Array, q: Array, qd: Array) -> Array:
        yj = joint_flexibility_matrix(self.system, self.flexibility, q)
        return passive_flexibility_torques(yj, q - self.q_neutral.astype(q.dtype)) - self.damping.astype(q.dtype) * qd
