"""Rotations: SpaceDyn RPY, quaternions, Rodrigues, skew."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.linalg import expm

from sdjax import rotation as rot
from helpers import assert_close

RNG = np.random.default_rng(0)
ANGLES = jnp.asarray(RNG.uniform(-np.pi, np.pi, size=(50, 3)))
# float64 compositions of a few O(1) trigonometric terms.
RTOL = 1e-14


def test_rpy_is_rx_ry_rz():
    a, b, c = 0.3, -0.7, 1.1
    expected = (
        expm(rot.skew(jnp.array([a, 0.0, 0.0])))
        @ expm(rot.skew(jnp.array([0.0, b, 0.0])))
        @ expm(rot.skew(jnp.array([0.0, 0.0, c])))
    )
    # expm's Pade approximation is accurate to ~1e-15.
    assert_close(rot.rpy_to_matrix(jnp.array([a, b, c])), expected, 1e-13, "Rx Ry Rz")


def test_rpy_round_trip_including_gimbal_lock():
    mats = rot.rpy_to_matrix(ANGLES)
    assert_close(rot.rpy_to_matrix(rot.matrix_to_rpy(mats)), mats, RTOL, "rpy round trip")
    locked = rot.rpy_to_matrix(jnp.array([[0.4, np.pi / 2, -0.3], [1.0, -np.pi / 2, 0.2]]))
    assert_close(rot.rpy_to_matrix(rot.matrix_to_rpy(locked)), locked, 1e-12, "gimbal lock")
    np.testing.assert_allclose(rot.matrix_to_rpy_numpy(np.asarray(mats)), rot.matrix_to_rpy(mats), atol=1e-14)


def test_quaternion_round_trips_and_products():
    mats = rot.rpy_to_matrix(ANGLES)
    quats = rot.matrix_to_quat(mats)
    assert_close(rot.quat_to_matrix(quats), mats, RTOL, "matrix -> quat -> matrix")
    assert bool(jnp.all(quats[:, 3] >= 0))
    assert_close(jnp.linalg.norm(quats, axis=1), jnp.ones(50), RTOL, "unit")
    # Non-unit quaternions give the same rotation.
    assert_close(rot.quat_to_matrix(3.0 * quats), mats, RTOL, "homogeneous")
    prod = rot.quat_multiply(quats[:-1], quats[1:])
    assert_close(rot.quat_to_matrix(prod), mats[:-1] @ mats[1:], RTOL, "Hamilton product")
    assert_close(rot.quat_to_matrix(rot.quat_conjugate(quats)), jnp.swapaxes(mats, 1, 2), RTOL, "conjugate")
    # Rotations of 180 degrees (w = 0) use the other pivots.
    flips = jnp.stack([jnp.diag(jnp.array(d)) for d in ([1.0, -1.0, -1.0], [-1.0, 1.0, -1.0], [-1.0, -1.0, 1.0])])
    assert_close(rot.quat_to_matrix(rot.matrix_to_quat(flips)), flips, RTOL, "half turns")


def _rotated_basis(quat):
    """``R(quat)`` by rotating the basis vectors with Hamilton products, ``q [e_i, 0] q* /
    |q|^2`` (written here with jnp: its derivatives are JAX's own)."""

    def hamilton(a, b):
        av, aw, bv, bw = a[:3], a[3], b[:3], b[3]
        return jnp.concatenate([aw * bv + bw * av + jnp.cross(av, bv), (aw * bw - av @ bv)[None]])

    conjugate = quat * jnp.array([-1.0, -1.0, -1.0, 1.0])
    columns = [hamilton(hamilton(quat, jnp.eye(4)[i]), conjugate)[:3] for i in range(3)]
    return jnp.stack(columns, axis=1) / (quat @ quat)


def test_quaternion_to_matrix_derivatives_to_third_order():
    """quat_to_matrix's derivative rule (a contraction) gives the derivatives of the rotation
    itself, non-unit quaternions included, to third order, forward and reverse (under vmap)."""
    rng = np.random.default_rng(3)
    quats = jnp.asarray(rng.normal(size=(4, 4)) * rng.uniform(0.5, 2.0, size=(4, 1)))
    tangent = jnp.asarray(rng.normal(size=4))
    weights = jnp.asarray(rng.normal(size=(3, 3)))

    def loss(f):
        return lambda x: jnp.sum(weights * jnp.sin(f(x)))

    def derivatives(f):
        """Value, tangent, gradient, Hessian and third derivatives at each quaternion (one
        compiled program: op by op, the third derivatives took 16 s)."""
        return jax.jit(
            jax.vmap(
                lambda x: (
                    f(x),
                    jax.jvp(f, (x,), (tangent,))[1],
                    jax.grad(loss(f))(x),
                    jax.hessian(loss(f))(x),
                    jax.jacrev(jax.hessian(loss(f)))(x),
                )
            )
        )(quats)

    # (sums of a few dozen O(1) products: round-off ~1e-14, growing with each order)
    tolerances = {"value": RTOL, "tangent": 1e-13, "gradient": 1e-13, "Hessian": 1e-12, "third derivatives": 1e-11}
    for (what, tolerance), ours, expected in zip(
        tolerances.items(), derivatives(rot.quat_to_matrix), derivatives(_rotated_basis)
    ):
        assert_close(ours, expected, tolerance, what)


def test_quaternion_rate_is_inertial_angular_velocity():
    quat = rot.matrix_to_quat(rot.rpy_to_matrix(ANGLES[0]))
    w = jnp.array([0.3, -0.8, 0.5])
    # d/dt R(q(t)) = skew(w) R for q' = quat_rate(q, w).
    dR = jax.jvp(rot.quat_to_matrix, (quat,), (rot.quat_rate(quat, w),))[1]
    assert_close(dR, rot.skew(w) @ rot.quat_to_matrix(quat), RTOL, "dR/dt")


@pytest.mark.parametrize("scale", [0.0, 1e-9, 1e-4, 0.5, 3.0])
def test_rotation_vector_exponential(scale):
    phi = scale * jnp.array([0.3, -0.5, 0.8])
    assert_close(rot.rotation_vector_to_matrix(phi), expm(rot.skew(phi)), 1e-13, "Rodrigues vs expm")
    assert_close(rot.quat_to_matrix(rot.rotation_vector_to_quat(phi)), expm(rot.skew(phi)), 1e-13, "quaternion exp")


def test_rodrigues_update_eq_3_4():
    a0 = rot.rpy_to_matrix(ANGLES[3])
    w = jnp.array([0.2, 1.5, -0.4])
    updated = rot.rodrigues_update(a0, w, 0.1)
    assert_close(updated, expm(rot.skew(w * 0.1)) @ a0, 1e-13, "eq 3.4")
    assert_close(updated @ updated.T, jnp.eye(3), RTOL, "orthonormal")


def test_skew_unskew():
    v = jnp.array([1.0, -2.0, 3.0])
    a = jnp.array([0.5, 0.1, -0.7])
    assert_close(rot.skew(v) @ a, jnp.cross(v, a), RTOL, "skew")
    assert_close(rot.unskew(rot.skew(v)), v, RTOL, "unskew")


def test_quat_to_rotation_vector_inverts_rotation_vector_to_quat():
    rng = np.random.default_rng(5)
    axes = rng.normal(size=(20, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    # Angles over (0, pi), including tiny ones on the series branch.
    angles = np.concatenate([rng.uniform(0.0, np.pi - 1e-3, size=17), [1e-9, 1e-7, 3e-6]])
    phi = jnp.asarray(axes * angles[:, None])
    quat = rot.rotation_vector_to_quat(phi)
    # Round-off of atan2 and the norms: ~1e-15; the series branch is exact to O(|phi|^5).
    np.testing.assert_allclose(rot.quat_to_rotation_vector(quat), phi, rtol=1e-12, atol=1e-15)
    # -q is the same rotation: the shortest vector comes back.
    np.testing.assert_allclose(rot.quat_to_rotation_vector(-quat), phi, rtol=1e-12, atol=1e-15)
    # Finite derivative at the identity (d phi / d v = 2 E there).
    jac = jax.jacfwd(rot.quat_to_rotation_vector)(jnp.array([0.0, 0.0, 0.0, 1.0]))
    np.testing.assert_allclose(jac[:, :3], 2.0 * np.eye(3), atol=1e-15)


def test_euler313_against_scipy_and_round_trip():
    from scipy.spatial.transform import Rotation

    # SciPy's intrinsic "ZXZ" is Rz(phi) Rx(theta) Rz(psi): an independent implementation.
    expected = Rotation.from_euler("ZXZ", np.asarray(ANGLES)).as_matrix()
    assert_close(rot.euler313_to_matrix(ANGLES), expected, RTOL, "Rz Rx Rz")
    mats = rot.euler313_to_matrix(ANGLES)
    angles = rot.matrix_to_euler313(mats)
    assert_close(rot.euler313_to_matrix(angles), mats, RTOL, "3-1-3 round trip")
    assert np.all((angles[:, 1] >= 0) & (angles[:, 1] <= np.pi)), "theta in [0, pi]"
    # Where theta is away from 0 and pi the angles themselves come back (mod 2 pi for phi, psi).
    regular = rot.matrix_to_euler313(rot.euler313_to_matrix(jnp.array([0.4, 1.2, -2.5])))
    assert_close(regular, jnp.array([0.4, 1.2, -2.5]), RTOL, "angles")
    # Gimbal lock at theta = 0 and pi: phi carries the whole z rotation.
    locked = rot.euler313_to_matrix(jnp.array([[0.4, 0.0, -0.3], [1.0, np.pi, 0.2]]))
    back = rot.matrix_to_euler313(locked)
    assert_close(rot.euler313_to_matrix(back), locked, 1e-12, "gimbal lock")
    assert_close(back[:, 2], jnp.zeros(2), 0.0, "psi = 0 at lock")


def test_rotation_difference_is_sin_angle_axis():
    axis = jnp.array([0.3, -0.5, 0.8]) / jnp.linalg.norm(jnp.array([0.3, -0.5, 0.8]))
    start = rot.rpy_to_matrix(jnp.array([0.2, -0.4, 1.3]))
    for angle in (1e-3, 0.3, 2.0):
        end = rot.rotation_vector_to_matrix(angle * axis) @ start
        # 1/2 sum a_k x (R a_k) = vee(R - R^T) / 2 = sin(angle) axis: a closed form.
        assert_close(rot.rotation_difference(start, end), np.sin(angle) * axis, RTOL, f"angle {angle}")
    assert_close(rot.rotation_difference(start, start), jnp.zeros(3), 1e-15, "no rotation")
