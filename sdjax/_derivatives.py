"""The JVP of a plain function inside a ``jax.custom_jvp`` rule, along the arguments that carry
a tangent only.

sdjax wraps several computations in ``jax.custom_jvp`` so that their batching or their primal
evaluation can take another route (chunks under ``vmap``, the compiled batch kernel) while
their derivatives stay those of the plain JAX code. By default JAX hands such a rule a zero
array for every argument that is not being differentiated (a model's masses when only the
joint torques are), and the rule's ``jax.jvp`` then computes that zero tangent's whole
propagation. A rule defined with ``symbolic_zeros=True`` sees those tangents as
``SymbolicZero`` instead, and :func:`jvp_along_nonzero` differentiates along the others only:
the program is then the one JAX builds for the plain function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.custom_derivatives import SymbolicZero

__all__ = ["jvp_along_nonzero"]


def jvp_along_nonzero(fun: Callable[..., Any], primals: Any, tangents: Any) -> tuple[Any, Any]:
    """``jax.jvp(fun, primals, tangents)`` for the rule of a ``custom_jvp`` defined with
    ``symbolic_zeros=True``: the leaves whose tangent is a ``SymbolicZero`` are held fixed
    (closed over), the others differentiated.

    Arguments:
        fun: ``fun(*primals)``.
        primals: the tuple of arguments (pytrees).
        tangents: their tangents, the same structure, ``SymbolicZero`` where there is none.

    Returns:
        ``(fun(*primals), its tangent)`` (a zero tangent where no argument carries one).
    """
    leaves, treedef = jax.tree.flatten(primals)
    tangent_leaves = jax.tree.leaves(tangents, is_leaf=lambda t: isinstance(t, SymbolicZero))
    live = [not isinstance(t, SymbolicZero) for t in tangent_leaves]

    def of_live(*values: Any) -> Any:
        it = iter(values)
        return fun(*jax.tree.unflatten(treedef, [next(it) if b else x for x, b in zip(leaves, live)]))

    return jax.jvp(of_live, [x for x, b in zip(leaves, live) if b], [t for t, b in zip(tangent_leaves, live) if b])
