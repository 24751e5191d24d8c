"""Small dense linear algebra (3x3 matrices, 3-vectors) tuned for XLA's CPU backend, and the
full-precision matrix products (:func:`matmul`, :func:`einsum`) every module uses.

Two forms of the same arithmetic are used, each where it is fast:

- **Values** are written component by component (sums of products of slices). XLA turns
  batched products of tiny matrices into dot kernels that it cannot fuse with the
  surrounding element-wise code; the component form fuses with its neighbours (measured
  1.2-1.5x faster under ``jax.vmap``, benchmarks/README.md).
- **Derivatives** use contractions (``einsum``). Every product here is bilinear, so its
  tangent is ``f(da, b) + f(a, db)``; written with slices, reverse mode would transpose each
  slice into a zero-padded copy of the whole operand (one ``pad`` kernel per component,
  measured to take half of a gradient's time), whereas a contraction transposes into another
  contraction. The custom JVP rules below give 2-3.5x faster reverse-mode gradients of the
  inertia matrix, the bias forces and forward dynamics (benchmarks/README.md). A rule's value
  is the product itself, so second and higher derivatives take the rules again instead of
  differentiating the components (with :func:`sdjax.rotation.quat_to_matrix`'s rule, the
  gradient of a four-bar's constrained rollout, whose constraint Jacobians differentiate the
  kinematics twice, compiled in 18 s instead of 32 s at XLA's default settings).

Results are the same up to round-off. Tangents that are known to be zero (symbolic zeros,
e.g. model constants when differentiating with respect to the state) cost nothing.

**Compiled once per shape.** The value forms and :func:`einsum` are ``jax.jit`` functions
(so are the hot helpers of :mod:`sdjax.rotation`; ``jnp.cross`` is one already): a
program calls them hundreds of times, and JAX traces each once per operand shape, lowers it
once per program and transforms it (``vmap``, JVP, transpose) from a cache, where inline code
was traced, lowered and transformed at every call (each component of a 3x3 product a
primitive of its own). XLA inlines the calls before it optimises, so the compiled program is
the same, instruction for instruction (the batched inverse dynamics' optimised HLO, the 7-joint
arm and a 30-link tree: diffed), and runs at the same speed (batch 1024 forward and inverse dynamics, the gradient of a
20-step rollout: best of 7 within 2 %). Tracing and lowering are most of what a new program
costs: 66 representative tests took 116 s before and 74 s after, and the default test run
942 s -> 763 s (2-core CPU, cold caches; both with ``propagate_down`` compiled apart too, since
withdrawn: it changed a 30-link tree's optimised program; 660 s after that, warm Numba cache).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

__all__ = [
    "PRECISION",
    "cross3",
    "dot",
    "einsum",
    "matmul",
    "matmul3",
    "matvec3",
    "small_cho_solve",
    "small_cholesky_factor",
    "small_cholesky_solve",
    "transpose3",
]

#: Precision of every matrix product sdjax writes (``precision=`` of :func:`einsum` and
#: :func:`matmul`): float32 operands multiplied in float32. JAX's default lets an accelerator
#: round them first (TF32's 10-bit mantissas on NVIDIA GPUs, bfloat16 passes on TPUs): on an
#: H200, at batch 131,072 in float32, the inertia matrix of a 7-joint arm came out 7e-5 off
#: (relative) and indefinite for 1 in 16 states, whose accelerations were then NaN. No effect on
#: a CPU or in float64. ``tests/test_precision.py`` checks the products of the core's programs
#: and of the feature layer's (planning's gradient, identification, contact, the massless arm).
PRECISION = lax.Precision.HIGHEST


@functools.partial(jax.jit, static_argnums=0)
def einsum(subscripts: str, *operands: Any) -> Array:
    """:func:`jax.numpy.einsum` at full precision (:data:`PRECISION`)."""
    return jnp.einsum(subscripts, *operands, precision=PRECISION)


def matmul(a: Any, b: Any) -> Array:
    """``a @ b`` (:func:`jax.numpy.matmul`) at full precision (:data:`PRECISION`)."""
    return jnp.matmul(a, b, precision=PRECISION)


#: Levi-Civita symbol: ``cross(a, b)_i = sum_jk LEVI_CIVITA[i, j, k] a_j b_k``.
LEVI_CIVITA = np.zeros((3, 3, 3))
LEVI_CIVITA[0, 1, 2] = LEVI_CIVITA[1, 2, 0] = LEVI_CIVITA[2, 0, 1] = 1.0
LEVI_CIVITA[0, 2, 1] = LEVI_CIVITA[2, 1, 0] = LEVI_CIVITA[1, 0, 2] = -1.0


def _bilinear(value: Callable[[Array, Array], Array], contraction: Callable[[Array, Array], Array]):
    """A bilinear product computed by ``value`` whose derivatives use ``contraction``.

    Both must compute the same product ``f(a, b)`` with broadcasting over leading axes.
    """
    product = jax.custom_jvp(value)

    def jvp(primals, tangents):
        a, b = primals
        da, db = tangents
        # (the product itself, not ``value``: a derivative of this rule, a second derivative,
        # takes the rule again instead of differentiating the components)
        out = product(a, b)
        terms = []
        if not isinstance(da, SymbolicZero):
            terms.append(contraction(da, b))
        if not isinstance(db, SymbolicZero):
            terms.append(contraction(a, db))
        tangent = sum(terms[1:], terms[0]) if terms else jnp.zeros_like(out)
        return out, jnp.broadcast_to(tangent, out.shape).astype(out.dtype)

    product.defjvp(jvp, symbolic_zeros=True)
    product.__doc__ = value.__doc__
    return product


def _components(x: Array, shape: tuple[int, ...]) -> list:
    """The entries of the trailing ``shape`` of ``x`` as a nested list of arrays (each sliced once)."""
    if len(shape) == 1:
        return [x[..., i] for i in range(shape[0])]
    return [[x[..., i, j] for j in range(shape[1])] for i in range(shape[0])]


def _matmul3_components(a: Array, b: Array) -> Array:
    """``a @ b`` for ``(..., 3, 3)`` matrices (broadcasting leading axes)."""
    # Each entry is sliced once (a program of 18 slices, not 54: smaller programs compile faster).
    ac, bc = _components(a, (3, 3)), _components(b, (3, 3))
    return jnp.stack(
        [
            jnp.stack([ac[i][0] * bc[0][j] + ac[i][1] * bc[1][j] + ac[i][2] * bc[2][j] for j in range(3)], axis=-1)
            for i in range(3)
        ],
        axis=-2,
    )


def _matvec3_components(a: Array, v: Array) -> Array:
    """``a @ v`` for ``(..., 3, 3)`` matrices and ``(..., 3)`` vectors."""
    ac, vc = _components(a, (3, 3)), _components(v, (3,))
    return jnp.stack([ac[i][0] * vc[0] + ac[i][1] * vc[1] + ac[i][2] * vc[2] for i in range(3)], axis=-1)


def _cross3_value(a: Array, b: Array) -> Array:
    """``a x b`` for ``(..., 3)`` vectors (broadcasting leading axes)."""
    # jnp.cross's own component form measured ~4% fewer flops than a stack along the last
    # axis in forward dynamics (XLA's cost analysis), and faster.
    return jnp.cross(a, b)


def _dot_components(a: Array, b: Array) -> Array:
    """``sum_k a[..., k] b[..., k]`` for vectors of any (small) size, broadcasting leading axes."""
    # An explicit sum of products fuses with its neighbours; ``jnp.sum`` over a short last
    # axis becomes a reduction kernel of its own (measured 1.1 ms of a 7 ms forward dynamics at
    # batch 1024 for the parallel-axis term, benchmarks/README.md).
    terms = [a[..., k] * b[..., k] for k in range(max(a.shape[-1], b.shape[-1]))]
    return sum(terms[1:], terms[0])


def _cross3_contraction(a: Array, b: Array) -> Array:
    return einsum("ijk,...j,...k->...i", jnp.asarray(LEVI_CIVITA, jnp.result_type(a, b)), a, b)


matmul3 = _bilinear(jax.jit(_matmul3_components), lambda a, b: einsum("...ij,...jk->...ik", a, b))
matvec3 = _bilinear(jax.jit(_matvec3_components), lambda a, v: einsum("...ij,...j->...i", a, v))
cross3 = _bilinear(_cross3_value, _cross3_contraction)  # (jnp.cross is a jit function already)
dot = _bilinear(jax.jit(_dot_components), lambda a, b: einsum("...k,...k->...", a, b))


def transpose3(a: Array) -> Array:
    """``a^T`` for ``(..., 3, 3)`` matrices."""
    return jnp.swapaxes(a, -1, -2)


def _minus(value: Array, products: Iterable[Array]) -> Array:
    """``value - sum(products)``, with no zero to start from (an empty sum leaves ``value``)."""
    for product in products:
        value = value - product
    return value


def _unrolled_factor(a: Array) -> list[list[Array]]:
    """The lower Cholesky factor of ``(..., k, k)`` matrices as rows of ``(...)`` arrays:
    ``lower[i][j]`` for ``j <= i``."""
    k = a.shape[-1]
    lower: list[list[Array]] = [[] for _ in range(k)]
    for j in range(k):
        pivot = jnp.sqrt(_minus(a[..., j, j], (lower[j][m] ** 2 for m in range(j))))
        lower[j].append(pivot)
        for i in range(j + 1, k):
            lower[i].append(_minus(a[..., i, j], (lower[i][m] * lower[j][m] for m in range(j))) / pivot)
    return lower


def _unrolled_substitution(lower: list[list[Array]], b: Array) -> Array:
    """``x`` with ``L L^T x = b`` for a factor in rows (:func:`_unrolled_factor`) and ``b`` of
    shape ``(..., k)``: forward then backward substitution."""
    k = len(lower)
    forward: list[Array] = []
    for i in range(k):
        forward.append(_minus(b[..., i], (lower[i][m] * forward[m] for m in range(i))) / lower[i][i])
    backward: list[Array] = [forward[0]] * k  # (placeholders, each written once below)
    for i in reversed(range(k)):
        backward[i] = _minus(forward[i], (lower[m][i] * backward[m] for m in range(i + 1, k))) / lower[i][i]
    return jnp.stack(backward, axis=-1)


def small_cholesky_solve(a: Array, b: Array) -> Array:
    """``x`` with ``a x = b`` for a small symmetric positive definite ``(k, k)`` matrix ``a``
    and ``b`` of shape ``(k,)``, by a Cholesky factorisation unrolled in array arithmetic.

    For the base block of a floating base (``k <= 6``): no LAPACK call, so under ``vmap`` the
    arithmetic runs over the batch instead of one library call per sample. A batched LAPACK
    Cholesky of that block inside the forward-mode Jacobian of a rollout (the planners' torque
    rows: 200 steps x 56 unknowns) stalled XLA's CPU runtime, every thread asleep; this form
    runs it in 18 s. Differentiable by JAX (square roots and divisions of a positive definite
    matrix's pivots). The program grows as ``k^3`` scalar operations (compile time: see
    :data:`sdjax.dynamics.UNROLLED_CHOLESKY_MAX_SIZE`).
    """
    return _unrolled_substitution(_unrolled_factor(a), b)


def small_cholesky_factor(a: Array) -> Array:
    """The lower Cholesky factor ``L`` (``a = L L^T``, zeros above the diagonal) of a small
    symmetric positive definite ``(..., k, k)`` matrix, unrolled as :func:`small_cholesky_solve`
    is: what ``jax.scipy.linalg.cho_factor(a, lower=True)`` gives, without a library call."""
    lower = _unrolled_factor(a)
    k = len(lower)
    zero = jnp.zeros_like(lower[0][0])
    return jnp.stack([jnp.stack(row + [zero] * (k - len(row)), axis=-1) for row in lower], axis=-2)


def small_cho_solve(factor: Array, b: Array) -> Array:
    """``x`` with ``L L^T x = b`` for a lower factor ``L`` ``(..., k, k)`` (of
    :func:`small_cholesky_factor`, or LAPACK's: only the lower triangle is read) and ``b``
    ``(..., k)``, by substitutions unrolled in array arithmetic (``k^2`` scalar operations):
    what ``jax.scipy.linalg.cho_solve((L, True), b)`` gives, without a library call."""
    k = factor.shape[-1]
    return _unrolled_substitution([[factor[..., i, j] for j in range(i + 1)] for i in range(k)], b)
