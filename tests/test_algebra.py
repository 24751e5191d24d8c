"""sdjax.algebra: component-wise values with contraction derivatives agree with NumPy/jnp's
own products in value, first and second derivatives, forward and reverse mode."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sdjax.algebra import cross3, dot, matmul3, matvec3, small_cho_solve, small_cholesky_factor, small_cholesky_solve

# Products of O(1) numbers: float64 round-off in a 3-term sum is ~1e-15; 1e-12 leaves room
# for the different summation orders of the two forms.
TOL = 1e-12

CASES = [
    # (our product, reference, shape of a, shape of b): broadcasting in both directions.
    (matmul3, jnp.matmul, (5, 3, 3), (5, 3, 3)),
    (matmul3, jnp.matmul, (4, 3, 3), (3, 3)),
    (matmul3, jnp.matmul, (3, 3), (2, 4, 3, 3)),
    (matvec3, lambda a, v: jnp.einsum("...ij,...j->...i", a, v), (5, 3, 3), (5, 3)),
    (matvec3, lambda a, v: jnp.einsum("...ij,...j->...i", a, v), (3, 3), (6, 3)),
    (cross3, jnp.cross, (5, 3), (5, 3)),
    (cross3, jnp.cross, (3,), (4, 3)),
    (cross3, jnp.cross, (2, 1, 3), (2, 5, 3)),
    (dot, lambda a, b: jnp.sum(a * b, axis=-1), (5, 6), (5, 6)),
    (dot, lambda a, b: jnp.sum(a * b, axis=-1), (3,), (4, 3)),
]


def _operands(shape_a, shape_b, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=shape_a)), jnp.asarray(rng.normal(size=shape_b))


@pytest.mark.parametrize("product, reference, shape_a, shape_b", CASES)
def test_value_and_first_derivatives_match_reference(product, reference, shape_a, shape_b):
    a, b = _operands(shape_a, shape_b)
    da, db = _operands(shape_a, shape_b, seed=1)
    np.testing.assert_allclose(product(a, b), reference(a, b), atol=TOL)
    # Forward mode, both operands moving and each alone (the symbolic-zero paths).
    for tangents in ((da, db), (da, jnp.zeros_like(b)), (jnp.zeros_like(a), db)):
        _, ours = jax.jvp(product, (a, b), tangents)
        _, ref = jax.jvp(reference, (a, b), tangents)
        np.testing.assert_allclose(ours, ref, atol=TOL)
    _, ours = jax.jvp(lambda x: product(x, b), (a,), (da,))
    _, ref = jax.jvp(lambda x: reference(x, b), (a,), (da,))
    np.testing.assert_allclose(ours, ref, atol=TOL)
    # Reverse mode, including the reduction over broadcast axes.
    cot = jnp.asarray(np.random.default_rng(2).normal(size=reference(a, b).shape))
    ours = jax.vjp(product, a, b)[1](cot)
    ref = jax.vjp(reference, a, b)[1](cot)
    for x, y in zip(ours, ref):
        np.testing.assert_allclose(x, y, atol=TOL)
    ours = jax.grad(lambda x: jnp.sum(jnp.sin(product(a, x))))(b)
    ref = jax.grad(lambda x: jnp.sum(jnp.sin(reference(a, x))))(b)
    np.testing.assert_allclose(ours, ref, atol=TOL)


@pytest.mark.parametrize("product, reference, shape_a, shape_b", CASES[::2])
def test_second_derivatives_match_reference(product, reference, shape_a, shape_b):
    a, b = _operands(shape_a, shape_b)

    for argnums in (0, 1):
        ours = jax.hessian(lambda x, y: jnp.sum(jnp.sin(product(x, y))), argnums=argnums)(a, b)
        ref = jax.hessian(lambda x, y: jnp.sum(jnp.sin(reference(x, y))), argnums=argnums)(a, b)
        np.testing.assert_allclose(ours, ref, atol=1e-11)  # sums of ~100 products of O(1) terms
    mixed = jax.jacfwd(jax.grad(lambda x, y: jnp.sum(jnp.sin(product(x, y))), argnums=0), argnums=1)(a, b)
    mixed_ref = jax.jacfwd(jax.grad(lambda x, y: jnp.sum(jnp.sin(reference(x, y))), argnums=0), argnums=1)(a, b)
    np.testing.assert_allclose(mixed, mixed_ref, atol=1e-11)


def test_derivatives_under_vmap_and_float32():
    a, b = _operands((8, 4, 3, 3), (8, 4, 3))
    grad = jax.vmap(jax.grad(lambda x, y: jnp.sum(matvec3(x, y) ** 2), argnums=(0, 1)))
    ref = jax.vmap(jax.grad(lambda x, y: jnp.sum(jnp.einsum("...ij,...j->...i", x, y) ** 2), argnums=(0, 1)))
    for x, y in zip(grad(a, b), ref(a, b)):
        np.testing.assert_allclose(x, y, atol=TOL)
    a32, b32 = a[..., 0].astype(jnp.float32), b.astype(jnp.float32)
    g = jax.grad(lambda x: jnp.sum(cross3(x, b32) ** 2))(a32)
    assert g.dtype == jnp.float32
    # float32 round-off (~1e-7 relative) on O(10) gradients.
    np.testing.assert_allclose(g, jax.grad(lambda x: jnp.sum(jnp.cross(x, b32) ** 2))(a32), atol=1e-5)


@pytest.mark.parametrize("k", [1, 3, 6])
def test_small_cholesky_solve_against_numpy(k):
    """The unrolled Cholesky solve of a floating base's block: values against NumPy's solve on
    random symmetric positive definite matrices (batched under vmap), and its derivative with
    respect to the matrix against the solve's closed form ``dx = -a^-1 (da) x``."""
    rng = np.random.default_rng(k)
    m = rng.normal(size=(5, k, k))
    a = m @ np.swapaxes(m, 1, 2) + k * np.eye(k)  # well conditioned (eigenvalues >= k)
    b = rng.normal(size=(5, k))
    x = jax.vmap(small_cholesky_solve)(jnp.asarray(a), jnp.asarray(b))
    # float64 round-off of a k x k solve with condition number < 100: ~1e-14
    np.testing.assert_allclose(x, np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-12, atol=1e-12)
    da = rng.normal(size=(k, k))
    da = da + da.T
    _, tangent = jax.jvp(
        lambda aa: small_cholesky_solve(aa, jnp.asarray(b[0])), (jnp.asarray(a[0]),), (jnp.asarray(da),)
    )
    expected = -np.linalg.solve(a[0], da @ np.linalg.solve(a[0], b[0]))
    np.testing.assert_allclose(tangent, expected, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("k", [1, 4, 13])
def test_small_cholesky_factor_and_solve_against_numpy(k):
    """The unrolled factor equals NumPy's Cholesky factor (lower, zeros above the diagonal), and
    solving with it, or with LAPACK's factor, equals NumPy's solve; the solve is linear in its
    right-hand side, so its transpose (reverse mode) is the solve with the same factor
    (``H`` symmetric)."""
    rng = np.random.default_rng(10 + k)
    m = rng.normal(size=(5, k, k))
    a = m @ np.swapaxes(m, 1, 2) + k * np.eye(k)  # well conditioned (eigenvalues >= k)
    b = rng.normal(size=(5, k))
    factor = jax.vmap(small_cholesky_factor)(jnp.asarray(a))
    # float64 round-off of a k x k factorisation with condition number < 100: ~1e-14
    np.testing.assert_allclose(factor, np.linalg.cholesky(a), rtol=1e-12, atol=1e-12)
    assert np.all(np.triu(np.asarray(factor), 1) == 0.0)
    expected = np.linalg.solve(a, b[..., None])[..., 0]
    np.testing.assert_allclose(jax.vmap(small_cho_solve)(factor, jnp.asarray(b)), expected, rtol=1e-12, atol=1e-12)
    # LAPACK's factor: only its lower triangle is read (garbage above must not matter).
    lapack = np.linalg.cholesky(a) + np.triu(rng.normal(size=(5, k, k)), 1)
    np.testing.assert_allclose(jax.vmap(small_cho_solve)(lapack, b), expected, rtol=1e-12, atol=1e-12)
    cotangent = rng.normal(size=k)
    (transposed,) = jax.linear_transpose(lambda v: small_cho_solve(factor[0], v), jnp.asarray(b[0]))(cotangent)
    np.testing.assert_allclose(transposed, np.linalg.solve(a[0], cotangent), rtol=1e-12, atol=1e-12)
