"""Rotations: skew matrices, SpaceDyn RPY angles, quaternions, the Rodrigues update.

Conventions (used throughout sdjax):

- A *rotation matrix* ``R`` is active: it maps vectors expressed in a rotated frame to the
  frame it is rotated from (``v_parent = R @ v_child``). SpaceDyn's direction-cosine matrix
  is its transpose, ``C = R^T`` (seed 000, section 3.3: ``C_i^T = ^I A_i``).
- *RPY angles* follow SpaceDyn (seed 000, eq 3.1): roll ``alpha`` about x, then pitch ``beta``
  about the new y, then yaw ``gamma`` about the new z, i.e. ``R = Rx(alpha) Ry(beta) Rz(gamma)``.
  This is **not** URDF's fixed-axis ``rpy`` (``Rz(yaw) Ry(pitch) Rx(roll)``).
- *3-1-3 Euler angles* ``(phi, theta, psi)``: ``phi`` about z, then ``theta`` about the new x,
  then ``psi`` about the new z, i.e. ``R = Rz(phi) Rx(theta) Rz(psi)`` (SpaceDyn's ``eul2dc``
  returns the transpose).
- Quaternions are scalar-last ``(x, y, z, w)`` and describe the active rotation
  ``R(quat)`` (Hamilton product).

Every function works on leading batch dimensions and is safe to differentiate at zero
rotation (no NaN in values or gradients). The public conversions are ``jax.jit`` functions,
traced once per shape (see :mod:`sdjax.algebra`): inside a program a rollout step's calls share
one trace, and outside one (building a state from a rotation matrix) a call compiles one program
instead of one per operation (a first ``make_state`` from a rotation matrix compiled 21 programs
in 0.86 s, now 4 in 0.45 s).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from sdjax.algebra import cross3, dot, einsum, matmul

__all__ = [
    "euler313_to_matrix",
    "matrix_to_euler313",
    "matrix_to_quat",
    "matrix_to_rotation_vector",
    "matrix_to_rpy",
    "matrix_to_rpy_numpy",
    "quat_conjugate",
    "quat_multiply",
    "quat_normalize",
    "quat_rate",
    "quat_to_matrix",
    "quat_to_rotation_vector",
    "rodrigues_update",
    "rot_x",
    "rot_y",
    "rot_z",
    "rotation_difference",
    "rotation_vector_to_matrix",
    "rotation_vector_to_quat",
    "rpy_to_matrix",
    "skew",
    "unskew",
]


@jax.jit
def skew(v: Array) -> Array:
    """Cross-product matrix: ``skew(v) @ a == cross(v, a)``.

    Arguments:
        v: ``(..., 3)`` vector.

    Returns:
        ``(..., 3, 3)`` skew-symmetric matrix (SpaceDyn's ``tilde``).
    """
    x, y, z = v[..., 0], v[..., 1], v[..., 2]
    zero = jnp.zeros_like(x)
    return jnp.stack(
        [
            jnp.stack([zero, -z, y], axis=-1),
            jnp.stack([z, zero, -x], axis=-1),
            jnp.stack([-y, x, zero], axis=-1),
        ],
        axis=-2,
    )


@jax.jit
def unskew(m: Array) -> Array:
    """Vector of the skew-symmetric part of ``m``: inverse of :func:`skew`.

    Arguments:
        m: ``(..., 3, 3)`` matrix.

    Returns:
        ``(..., 3)`` vector ``v`` with ``skew(v) == (m - m^T) / 2``.
    """
    return 0.5 * jnp.stack(
        [m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0], m[..., 1, 0] - m[..., 0, 1]],
        axis=-1,
    )


def _axis_rotation(angle: Array, axis: int) -> Array:
    c, s = jnp.cos(angle), jnp.sin(angle)
    one, zero = jnp.ones_like(c), jnp.zeros_like(c)
    if axis == 0:
        rows = [[one, zero, zero], [zero, c, -s], [zero, s, c]]
    elif axis == 1:
        rows = [[c, zero, s], [zero, one, zero], [-s, zero, c]]
    else:
        rows = [[c, -s, zero], [s, c, zero], [zero, zero, one]]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def rot_x(angle: Array) -> Array:
    """Active rotation by ``angle`` (rad) about x; shape ``(..., 3, 3)``."""
    return _axis_rotation(jnp.asarray(angle), 0)


def rot_y(angle: Array) -> Array:
    """Active rotation by ``angle`` (rad) about y; shape ``(..., 3, 3)``."""
    return _axis_rotation(jnp.asarray(angle), 1)


def rot_z(angle: Array) -> Array:
    """Active rotation by ``angle`` (rad) about z; shape ``(..., 3, 3)``."""
    return _axis_rotation(jnp.asarray(angle), 2)


@jax.jit
def rpy_to_matrix(rpy: ArrayLike) -> Array:
    """SpaceDyn RPY angles to a rotation matrix, ``R = Rx(roll) Ry(pitch) Rz(yaw)`` (eq 3.1).

    ``R`` maps vectors of the rotated (child) frame into the reference (parent) frame; it is
    the transpose of SpaceDyn's ``rpy2dc``.

    Arguments:
        rpy: ``(..., 3)`` angles ``(alpha, beta, gamma)`` in rad.

    Returns:
        ``(..., 3, 3)`` rotation matrix.
    """
    rpy = jnp.asarray(rpy)
    ca, sa = jnp.cos(rpy[..., 0]), jnp.sin(rpy[..., 0])
    cb, sb = jnp.cos(rpy[..., 1]), jnp.sin(rpy[..., 1])
    cc, sc = jnp.cos(rpy[..., 2]), jnp.sin(rpy[..., 2])
    # Rx(a) Ry(b) Rz(c), multiplied out.
    rows = [
        [cb * cc, -cb * sc, sb],
        [ca * sc + sa * sb * cc, ca * cc - sa * sb * sc, -sa * cb],
        [sa * sc - ca * sb * cc, sa * cc + ca * sb * sc, ca * cb],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def _matrix_to_rpy(xp, r):
    # R = Rx(a) Ry(b) Rz(g): R[0,2] = sin b, R[1,2] = -sin a cos b, R[2,2] = cos a cos b,
    # R[0,0] = cos b cos g, R[0,1] = -cos b sin g.
    sin_b = xp.clip(r[..., 0, 2], -1.0, 1.0)
    cos_b = xp.sqrt(r[..., 0, 0] ** 2 + r[..., 0, 1] ** 2)
    locked = cos_b < 1e-9
    roll = xp.where(locked, 0.0, xp.arctan2(-r[..., 1, 2], r[..., 2, 2]))
    # Gimbal lock: with roll = 0, R = Ry(+-pi/2) Rz(g), so R[1,0] = sin g, R[1,1] = cos g.
    yaw = xp.where(locked, xp.arctan2(r[..., 1, 0], r[..., 1, 1]), xp.arctan2(-r[..., 0, 1], r[..., 0, 0]))
    return xp.stack([roll, xp.arctan2(sin_b, cos_b), yaw], axis=-1)


@jax.jit
def matrix_to_rpy(matrix: ArrayLike) -> Array:
    """Inverse of :func:`rpy_to_matrix`, with pitch in ``[-pi/2, pi/2]``.

    At pitch = +-pi/2 (gimbal lock) roll is set to zero and yaw absorbs the rest, so that
    ``rpy_to_matrix(matrix_to_rpy(R)) == R`` holds for every rotation.

    Arguments:
        matrix: ``(..., 3, 3)`` rotation matrix.

    Returns:
        ``(..., 3)`` angles in rad.
    """
    return _matrix_to_rpy(jnp, jnp.asarray(matrix))


def matrix_to_rpy_numpy(matrix: np.ndarray) -> np.ndarray:
    """:func:`matrix_to_rpy` in float64 NumPy, for model builders (independent of JAX's x64 flag)."""
    return _matrix_to_rpy(np, np.asarray(matrix, dtype=np.float64))


@jax.jit
def euler313_to_matrix(angles: ArrayLike) -> Array:
    """3-1-3 (z-x-z) Euler angles to a rotation matrix, ``R = Rz(phi) Rx(theta) Rz(psi)``.

    Arguments:
        angles: ``(..., 3)`` ``(phi, theta, psi)`` in rad.

    Returns:
        ``(..., 3, 3)`` active rotation (child to parent); SpaceDyn's ``eul2dc`` is its transpose.
    """
    angles = jnp.asarray(angles)
    c1, s1 = jnp.cos(angles[..., 0]), jnp.sin(angles[..., 0])
    c2, s2 = jnp.cos(angles[..., 1]), jnp.sin(angles[..., 1])
    c3, s3 = jnp.cos(angles[..., 2]), jnp.sin(angles[..., 2])
    # Rz(phi) Rx(theta) Rz(psi), multiplied out.
    rows = [
        [c1 * c3 - s1 * c2 * s3, -c1 * s3 - s1 * c2 * c3, s1 * s2],
        [s1 * c3 + c1 * c2 * s3, -s1 * s3 + c1 * c2 * c3, -c1 * s2],
        [s2 * s3, s2 * c3, c2],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


@jax.jit
def matrix_to_euler313(matrix: ArrayLike) -> Array:
    """Inverse of :func:`euler313_to_matrix`, with ``theta`` in ``[0, pi]`` and ``phi``, ``psi``
    in ``(-pi, pi]``.

    At ``theta = 0`` or ``pi`` (gimbal lock: the two z rotations share an axis) ``psi`` is set
    to zero and ``phi`` carries the rest, so ``euler313_to_matrix(matrix_to_euler313(R)) == R``
    holds for every rotation.

    Arguments:
        matrix: ``(..., 3, 3)`` rotation matrix.

    Returns:
        ``(..., 3)`` angles in rad.
    """
    r = jnp.asarray(matrix)
    # R[0,2] = sin phi sin theta, R[1,2] = -cos phi sin theta, R[2,2] = cos theta,
    # R[2,0] = sin theta sin psi, R[2,1] = sin theta cos psi.
    sin_theta = jnp.sqrt(r[..., 0, 2] ** 2 + r[..., 1, 2] ** 2)
    locked = sin_theta < 1e-9
    theta = jnp.arctan2(sin_theta, r[..., 2, 2])
    # Locked, with psi = 0: R = Rz(phi) Rx(0 or pi), so R[0,0] = cos phi and R[1,0] = sin phi.
    phi = jnp.where(locked, jnp.arctan2(r[..., 1, 0], r[..., 0, 0]), jnp.arctan2(r[..., 0, 2], -r[..., 1, 2]))
    psi = jnp.where(locked, 0.0, jnp.arctan2(r[..., 2, 0], r[..., 2, 1]))
    return jnp.stack([phi, theta, psi], axis=-1)


@jax.jit
def rotation_difference(rotation_from: Array, rotation_to: Array) -> Array:
    """Small-rotation difference ``1/2 sum_k a_k x b_k`` of the axes ``a_k``, ``b_k`` (columns)
    of two rotation matrices (SpaceDyn's and Corke's ``tr2diff``).

    For ``rotation_to = exp(skew(u t)) rotation_from`` it equals ``sin(t) u`` exactly: the
    rotation vector to first order (an attitude error for resolved-rate control), in the
    frame both matrices map into.

    Arguments:
        rotation_from, rotation_to: ``(..., 3, 3)`` rotation matrices (child to parent).

    Returns:
        ``(..., 3)``.
    """
    a, b = jnp.asarray(rotation_from), jnp.asarray(rotation_to)
    return 0.5 * jnp.sum(cross3(jnp.swapaxes(a, -1, -2), jnp.swapaxes(b, -1, -2)), axis=-2)


@jax.jit
def quat_to_matrix(quat: Array | np.ndarray) -> Array:
    """Rotation matrix of a scalar-last quaternion ``(x, y, z, w)``.

    The quaternion need not be unit: the homogeneous form divides by ``|quat|^2``, so the
    result is a proper rotation for any non-zero quaternion (integrator stages rely on this).

    Arguments:
        quat: ``(..., 4)`` quaternion.

    Returns:
        ``(..., 3, 3)`` active rotation matrix.
    """
    return _quat_to_matrix(jnp.asarray(quat))


def _quat_products() -> np.ndarray:
    """``(3, 3, 4, 4)`` ``C``, symmetric in its last two axes, with ``R(quat) = I + (2 /
    |quat|^2) M``, ``M_ij = 1/2 sum_kl C_ijkl quat_k quat_l`` (:func:`quat_to_matrix`'s entries
    as one bilinear form; its tangent is ``dM_ij = sum_kl C_ijkl dquat_k quat_l``)."""
    products = np.zeros((3, 3, 4, 4))
    # (row, column): (k, l, sign) of each product, x y z w = 0 1 2 3
    terms = {
        (0, 0): ((1, 1, -1), (2, 2, -1)),
        (0, 1): ((0, 1, 1), (2, 3, -1)),
        (0, 2): ((0, 2, 1), (1, 3, 1)),
        (1, 0): ((0, 1, 1), (2, 3, 1)),
        (1, 1): ((0, 0, -1), (2, 2, -1)),
        (1, 2): ((1, 2, 1), (0, 3, -1)),
        (2, 0): ((0, 2, 1), (1, 3, -1)),
        (2, 1): ((1, 2, 1), (0, 3, 1)),
        (2, 2): ((0, 0, -1), (1, 1, -1)),
    }
    for (i, j), entry in terms.items():
        for k, m, sign in entry:
            products[i, j, k, m] += sign
            products[i, j, m, k] += sign
    return products


_QUAT_PRODUCTS = _quat_products()


@jax.custom_jvp
def _quat_to_matrix(quat: Array) -> Array:
    """:func:`quat_to_matrix`: values entry by entry, the tangent a contraction (rule below)."""
    x, y, z, w = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    s = 2.0 / (x * x + y * y + z * z + w * w)
    rows = [
        [1 - s * (y * y + z * z), s * (x * y - z * w), s * (x * z + y * w)],
        [s * (x * y + z * w), 1 - s * (x * x + z * z), s * (y * z - x * w)],
        [s * (x * z - y * w), s * (y * z + x * w), 1 - s * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


@_quat_to_matrix.defjvp
def _quat_to_matrix_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    # R = I + s M(quat), s = 2 / |quat|^2: dR = s (dM - (quat . dquat) (R - I)), dM the
    # bilinear form at (dquat, quat) + (quat, dquat). A few contractions, where the entries'
    # own derivatives were ~30 operations per order of differentiation (a constrained
    # rollout's gradient, whose constraint Jacobians differentiate the kinematics twice, held
    # 5,200 of them).
    (quat,), (d_quat,) = primals, tangents
    rotation = _quat_to_matrix(quat)
    d_products = einsum("ijkl,...k,...l->...ij", jnp.asarray(_QUAT_PRODUCTS, rotation.dtype), d_quat, quat)
    s = 2.0 / dot(quat, quat)
    along = dot(quat, d_quat)
    identity = jnp.eye(3, dtype=rotation.dtype)
    d_rotation = s[..., None, None] * (d_products - along[..., None, None] * (rotation - identity))
    return rotation, d_rotation


@jax.jit
def matrix_to_quat(matrix: ArrayLike) -> Array:
    """Scalar-last unit quaternion of a rotation matrix, with ``w >= 0``.

    Uses the largest of the four diagonal combinations (Shepperd's method) so the result is
    accurate for every rotation; the unused branches are evaluated on safe inputs so that
    gradients stay finite.

    Arguments:
        matrix: ``(..., 3, 3)`` rotation matrix.

    Returns:
        ``(..., 4)`` quaternion ``(x, y, z, w)``.
    """
    m = jnp.asarray(matrix)
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    trace = m00 + m11 + m22
    # 4*w^2, 4*x^2, 4*y^2, 4*z^2 (each >= 0 for a rotation); pick the largest as pivot.
    pivots = jnp.stack([1 + trace, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], axis=-1)
    best = jnp.argmax(pivots, axis=-1)
    d21, d12 = m[..., 2, 1] - m[..., 1, 2], m[..., 0, 2] - m[..., 2, 0]
    d10 = m[..., 1, 0] - m[..., 0, 1]
    s01, s02, s12 = m[..., 0, 1] + m[..., 1, 0], m[..., 0, 2] + m[..., 2, 0], m[..., 1, 2] + m[..., 2, 1]

    def branch(k: int) -> Array:
        # Safe square root: this branch is only selected when its pivot is the largest
        # (>= 1), so clamping the others keeps unused branches finite.
        r = jnp.sqrt(jnp.maximum(pivots[..., k], 0.25))
        half_inv = 0.5 / r
        if k == 0:
            q = [d21 * half_inv, d12 * half_inv, d10 * half_inv, 0.5 * r]
        elif k == 1:
            q = [0.5 * r, s01 * half_inv, s02 * half_inv, d21 * half_inv]
        elif k == 2:
            q = [s01 * half_inv, 0.5 * r, s12 * half_inv, d12 * half_inv]
        else:
            q = [s02 * half_inv, s12 * half_inv, 0.5 * r, d10 * half_inv]
        return jnp.stack(q, axis=-1)

    quat = branch(0)
    for k in (1, 2, 3):
        quat = jnp.where((best == k)[..., None], branch(k), quat)
    return quat * jnp.where(quat[..., 3:4] < 0, -1.0, 1.0)


@jax.jit
def quat_multiply(a: Array | np.ndarray, b: Array | np.ndarray) -> Array:
    """Hamilton product ``a * b`` of scalar-last quaternions: ``R(a*b) = R(a) R(b)``.

    Arguments:
        a, b: ``(..., 4)`` quaternions.

    Returns:
        ``(..., 4)`` product.
    """
    av, aw = a[..., :3], a[..., 3:]
    bv, bw = b[..., :3], b[..., 3:]
    vector = aw * bv + bw * av + cross3(av, bv)
    scalar = aw * bw - jnp.sum(av * bv, axis=-1, keepdims=True)
    return jnp.concatenate([vector, scalar], axis=-1)


@jax.jit
def quat_conjugate(quat: Array | np.ndarray) -> Array:
    """Conjugate ``(-x, -y, -z, w)``: the inverse rotation for a unit quaternion."""
    return jnp.concatenate([-quat[..., :3], quat[..., 3:]], axis=-1)


@jax.jit
def quat_normalize(quat: Array) -> Array:
    """Unit quaternion in the direction of ``quat``; shape ``(..., 4)``.

    The norm is guarded so that a zero quaternion gives a non-NaN (zero) result; callers that
    must refuse it use the opt-in checks of :mod:`sdjax.integrate`.
    """
    norm_sq = jnp.sum(quat * quat, axis=-1, keepdims=True)
    safe = jnp.where(norm_sq > 0, norm_sq, 1.0)
    return quat / jnp.sqrt(safe)


@jax.jit
def quat_rate(quat: Array, angular_velocity: Array) -> Array:
    """Time derivative of the attitude quaternion for an inertial-frame angular velocity.

    With ``dR/dt = skew(w) R`` (``w`` in the inertial frame, seed 000 eq 3.3 transposed),
    ``dquat/dt = 1/2 [w, 0] * quat``.

    Arguments:
        quat: ``(..., 4)`` scalar-last quaternion of the body-to-inertial rotation.
        angular_velocity: ``(..., 3)`` angular velocity, inertial frame, rad/s.

    Returns:
        ``(..., 4)`` quaternion rate, 1/s.
    """
    omega = jnp.concatenate([angular_velocity, jnp.zeros_like(angular_velocity[..., :1])], axis=-1)
    return 0.5 * quat_multiply(omega, quat)


@jax.jit
def quat_to_rotation_vector(quat: Array) -> Array:
    """Rotation vector (axis times angle, rad) of a unit quaternion, the shortest one.

    The inverse of :func:`rotation_vector_to_quat`: the quaternion is sign-flipped to
    ``w >= 0`` (so ``|phi| <= pi``), then ``phi = 2 atan2(|v|, w) v / |v|``; for ``|v| < 1e-6``
    the series ``atan2(s, w) / s = (1 - s^2 / (3 w^2)) / w + O(s^4)`` keeps values and
    gradients finite at the identity.

    Arguments:
        quat: ``(..., 4)`` scalar-last unit quaternion.

    Returns:
        ``(..., 3)`` rotation vector in the frame the quaternion's axis is expressed in.
    """
    quat = jnp.where(quat[..., 3:4] < 0, -quat, quat)
    v, w = quat[..., :3], quat[..., 3]
    s2 = jnp.sum(v * v, axis=-1)
    small = s2 < 1e-12
    s = jnp.sqrt(jnp.where(small, 1.0, s2))
    w_safe = jnp.where(small, jnp.maximum(w, 0.5), w)
    ratio = jnp.where(small, (1.0 - s2 / (3.0 * w_safe**2)) / w_safe, jnp.arctan2(s, w) / s)
    return 2.0 * ratio[..., None] * v


@jax.jit
def matrix_to_rotation_vector(rotation: Array) -> Array:
    """Rotation vector ``phi`` (axis times angle in [0, pi]) with ``exp(skew(phi)) = rotation``;
    ``(3, 3) -> (3,)`` (the matrix logarithm, through :func:`quat_to_rotation_vector`)."""
    return quat_to_rotation_vector(matrix_to_quat(rotation))


def _rotation_coefficients(theta_sq: Array) -> tuple[Array, Array]:
    """``sin(t)/t`` and ``(1 - cos t)/t^2`` for ``t^2 = theta_sq``, safe (and smooth) at 0."""
    small = theta_sq < 1e-8
    safe_sq = jnp.where(small, 1.0, theta_sq)
    theta = jnp.sqrt(safe_sq)
    sinc = jnp.where(small, 1.0 - theta_sq / 6.0, jnp.sin(theta) / theta)
    cosc = jnp.where(small, 0.5 - theta_sq / 24.0, (1.0 - jnp.cos(theta)) / safe_sq)
    return sinc, cosc


@jax.jit
def rotation_vector_to_matrix(rotation_vector: Array) -> Array:
    """Matrix exponential ``exp(skew(phi))`` (Rodrigues' formula).

    Arguments:
        rotation_vector: ``(..., 3)`` axis times angle, rad.

    Returns:
        ``(..., 3, 3)`` rotation matrix.
    """
    k = skew(rotation_vector)
    sinc, cosc = _rotation_coefficients(jnp.sum(rotation_vector**2, axis=-1))
    eye = jnp.eye(3, dtype=k.dtype)
    return eye + sinc[..., None, None] * k + cosc[..., None, None] * matmul(k, k)


@jax.jit
def rotation_vector_to_quat(rotation_vector: Array) -> Array:
    """Unit quaternion ``(sin(t/2) u, cos(t/2))`` of the rotation by ``t = |phi|`` about ``u``.

    Arguments:
        rotation_vector: ``(..., 3)`` axis times angle ``phi``, rad.

    Returns:
        ``(..., 4)`` scalar-last quaternion; equals ``matrix_to_quat(rotation_vector_to_matrix(phi))``
        up to sign.
    """
    half_sq = 0.25 * jnp.sum(rotation_vector**2, axis=-1)  # (t/2)^2
    sinc_half, _ = _rotation_coefficients(half_sq)  # sin(t/2) / (t/2)
    small = half_sq < 1e-8
    cos_half = jnp.where(small, 1.0 - half_sq / 2.0, jnp.cos(jnp.sqrt(jnp.where(small, 1.0, half_sq))))
    return jnp.concatenate([0.5 * sinc_half[..., None] * rotation_vector, cos_half[..., None]], axis=-1)


def rodrigues_update(base_rotation: Array, angular_velocity: Array, dt: Array) -> Array:
    """Attitude after rotating for ``dt`` at constant inertial angular velocity (eq 3.4).

    ``A0(t + dt) = exp(skew(w dt)) A0(t)``. Eq 3.4 writes the rotation as
    ``E + sin(theta) w~ + (1 - cos(theta)) w~^T w~`` with a *unit* axis ``w~``; the matrix it
    denotes is the proper rotation ``E + sin(theta) K + (1 - cos(theta)) K K`` with
    ``K = skew(w/|w|)``, which is what is computed here (as in SpaceDyn's code).

    Arguments:
        base_rotation: ``(..., 3, 3)`` base-to-inertial rotation ``A0``.
        angular_velocity: ``(..., 3)`` inertial-frame angular velocity, rad/s.
        dt: time step, s.

    Returns:
        ``(..., 3, 3)`` updated rotation.
    """
    return matmul(rotation_vector_to_matrix(angular_velocity * dt), base_rotation)
