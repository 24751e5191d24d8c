"""Small dense linear algebra written out component by component.

On CPU, XLA turns batched products of tiny matrices (3x3) into dot kernels that it cannot
fuse with the surrounding element-wise code. Written as sums of products of slices, the
same arithmetic fuses with its neighbours (measured 1.2-1.5x faster under ``jax.vmap``,
benchmarks/README.md). The results are the same up to round-off.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import Array


def matmul3(a: Array, b: Array) -> Array:
    """``a @ b`` for ``(..., 3, 3)`` matrices (broadcasting leading axes)."""
    return jnp.stack(
        [
            jnp.stack([a[..., i, 0] * b[..., 0, j] + a[..., i, 1] * b[..., 1, j] + a[..., i, 2] * b[..., 2, j] for j in range(3)], axis=-1)
            for i in range(3)
        ],
        axis=-2,
    )


def matvec3(a: Array, v: Array) -> Array:
    """``a @ v`` for ``(..., 3, 3)`` matrices and ``(..., 3)`` vectors."""
    return jnp.stack([a[..., i, 0] * v[..., 0] + a[..., i, 1] * v[..., 1] + a[..., i, 2] * v[..., 2] for i in range(3)], axis=-1)


def transpose3(a: Array) -> Array:
    """``a^T`` for ``(..., 3, 3)`` matrices."""
    return jnp.swapaxes(a, -1, -2)
