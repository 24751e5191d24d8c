"""Tree recursion: the one place where passes over the kinematic tree are written.

Bodies are numbered SpaceDyn's way: body 0 is the base, link ``i`` (1..n) is body ``i`` and
carries joint ``i``; ``parent[i-1] < i`` is the body that joint ``i`` attaches to. Arrays
indexed by body have a leading axis of length ``n + 1``; arrays indexed by link/joint have
length ``n`` (entry ``i - 1`` for link ``i``).

Two passes cover every algorithm of sdjax:

- :func:`propagate_down` (root to leaves): ``out[i] = out[parent(i)] (op) x[i]`` for an
  associative ``op`` (matrix product for orientations, addition for positions, twists and
  accelerations);
- :func:`accumulate_up` (leaves to root): subtree sums ``out[i] = sum_{j in subtree(i)} x[j]``
  (composite inertias, the wrenches transmitted by each joint).

Both are vectorised over links, so compile time does not grow with the number of links.
``propagate_down`` uses *pointer jumping*: after step ``k`` every body holds the product over
its last ``2^k`` ancestors, so ``ceil(log2(depth))`` steps of static gathers cover any tree
(O(n log n) work). ``accumulate_up`` multiplies by the static 0/1 support matrix for trees of
up to :data:`DENSE_MAX_LINKS` links (one fused product; exact, the zeros add nothing) and
runs one ``lax.scan`` over depth levels beyond (all links of a level at once: O(n) work).
An earlier link-by-link unrolled variant was measured slower under ``vmap`` and slower to
compile, and was dropped (see benchmarks/README.md).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from sdjax.algebra import einsum

__all__ = ["DENSE_MAX_LINKS", "TreeIndex", "accumulate_up", "propagate_down", "tree_index"]

#: Trees with at most this many links use the dense support matrix for subtree sums.
DENSE_MAX_LINKS = 48


@dataclasses.dataclass(frozen=True, eq=False)
class TreeIndex:
    """Static index arrays of a kinematic tree (NumPy, used at trace time only).

    Build with :func:`tree_index`, which caches one instance per topology.

    Attributes:
        parent: ``(n,)`` parent body of each link (0 = base).
        depth: ``(n,)`` depth of each link (links on the base have depth 1).
        jumps: per pointer-jumping step ``k``, ``(n + 1,)`` body indices: the ancestor
            ``2^k`` generations up (0 once past the base; body 0 maps to itself).
        level_links: ``(D, W)`` 0-based links per depth level, padded with ``n`` (scratch).
        level_parents: ``(D, W)`` parent body of each entry of ``level_links`` (pad ``n + 1``).
        support: ``(n, n)`` 0/1 matrix, ``support[i, j] = 1`` if joint ``j`` lies on the path
            from the base to link ``i`` (``j == i`` included), 0-based link indices.
    """

    parent: np.ndarray
    depth: np.ndarray
    jumps: tuple[np.ndarray, ...]
    level_links: np.ndarray
    level_parents: np.ndarray
    support: np.ndarray

    @property
    def num_links(self) -> int:
        return int(self.parent.shape[0])


@functools.lru_cache(maxsize=256)
def tree_index(parent: tuple[int, ...]) -> TreeIndex:
    """Index arrays of the tree with the given parent tuple (validated by the Model)."""
    n = len(parent)
    parent_arr = np.asarray(parent, dtype=np.int64).reshape(n)
    depth = np.zeros(n, dtype=np.int64)
    support = np.zeros((n, n), dtype=np.int64)
    for k, p in enumerate(parent):
        depth[k] = 1 if p == 0 else depth[p - 1] + 1
        if p > 0:
            support[k] = support[p - 1]
        support[k, k] = 1
    max_depth = int(depth.max()) if n else 0
    # Pointer jumping: ancestor 1, 2, 4, ... generations up; enough steps to reach the base.
    ancestor = np.concatenate([[0], parent_arr])
    jumps = []
    reach = 1
    while reach < max_depth:
        jumps.append(ancestor)
        ancestor = ancestor[ancestor]
        reach *= 2
    levels = [np.flatnonzero(depth == d) for d in range(1, max_depth + 1)]
    width = max((len(lv) for lv in levels), default=0)
    level_links = np.full((max_depth, width), n, dtype=np.int64)
    level_parents = np.full((max_depth, width), n + 1, dtype=np.int64)
    for d, lv in enumerate(levels):
        level_links[d, : len(lv)] = lv
        level_parents[d, : len(lv)] = parent_arr[lv]
    return TreeIndex(parent_arr, depth, tuple(jumps), level_links, level_parents, support)


def propagate_down(tree: TreeIndex, op: Callable[[Any, Any], Any], root: Any, link_values: Any, identity: Any) -> Any:
    """Root-to-leaves pass: ``out[0] = root``, ``out[i] = op(out[parent(i)], link_values[i-1])``.

    Arguments:
        tree: the tree's :class:`TreeIndex`.
        op: associative binary operation that broadcasts over leading axes (e.g.
            :func:`sdjax.algebra.matmul3`, ``jnp.add``).
        root: value of body 0, shape ``S``.
        link_values: ``(n,) + S``.
        identity: neutral element of ``op``, shape ``S``.

    Returns:
        ``(n + 1,) + S`` body-indexed values.
    """
    products = jnp.concatenate([identity[None], link_values])
    # After the step with jump k, products[i] is the product over the path from the
    # ancestor 2^(k+1) generations up (exclusive) to i; ancestor-side factors on the left.
    for ancestor in tree.jumps:
        products = op(products[ancestor], products)
    return op(jnp.broadcast_to(root, products.shape), products)


def accumulate_up(tree: TreeIndex, body_values: Any) -> Any:
    """Leaves-to-root pass: subtree sums ``out[i] = sum_{j in subtree(i)} body_values[j]``.

    ``out[0]`` is the sum over every body (the base's subtree is the whole system).

    Arguments:
        tree: the tree's :class:`TreeIndex`.
        body_values: pytree whose leaves have a leading axis of length ``n + 1``.

    Returns:
        Pytree of the same shapes.
    """
    n = tree.num_links
    if n == 0:
        return body_values
    if n <= DENSE_MAX_LINKS:

        def dense(x):
            links = einsum("ji,j...->i...", jnp.asarray(tree.support, x.dtype), x[1:])
            return jnp.concatenate([jnp.sum(x, axis=0, keepdims=True), links])

        return jax.tree.map(dense, body_values)

    def step(buf, level):
        links, parents = level
        return jax.tree.map(lambda a: a.at[parents].add(a[links + 1]), buf), None

    scratch = jax.tree.map(lambda x: jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)]), body_values)
    acc, _ = lax.scan(step, scratch, (jnp.asarray(tree.level_links[::-1]), jnp.asarray(tree.level_parents[::-1])))
    return jax.tree.map(lambda a: a[: n + 1], acc)
