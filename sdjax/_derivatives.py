"""Computations whose batched evaluation takes another route while their derivatives stay those
of the plain JAX code, and the JVP of a plain function along the arguments that carry a tangent.

sdjax evaluates several computations another way under ``vmap`` (chunks of the batch, the
compiled batch kernel): :func:`batched_route` builds them, one ``custom_vmap`` rule for the
evaluation under a ``custom_jvp`` whose derivatives are the plain function's. By default JAX
hands such a derivative rule a zero array for every argument that is not being differentiated
(a model's masses when only the joint torques are), and the rule's ``jax.jvp`` then computes
that zero tangent's whole propagation. A rule defined with ``symbolic_zeros=True`` sees those
tangents as ``SymbolicZero`` instead, and :func:`jvp_along_nonzero` differentiates along the
others only: the program is then the one JAX builds for the plain function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import jax
from jax.custom_batching import custom_vmap
from jax.custom_derivatives import SymbolicZero

__all__ = ["BatchEvaluator", "batched_evaluation", "batched_route", "jvp_along_nonzero", "split_batched"]


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


def split_batched(args: Any, in_batched: Any) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The batched leaves of ``args`` (a pytree; ``in_batched``: its ``custom_vmap`` batch
    flags) and ``rebuild(leaves) -> args``, which puts such leaves (or one sample of them)
    back beside the shared ones: a batching rule's fallback is
    ``jax.vmap(lambda m: f(*rebuild(m)), axis_size=B)(mapped)`` (or ``lax.map`` over it)."""
    leaves, treedef = jax.tree.flatten(args)
    batched = jax.tree.leaves(in_batched)
    mapped = [x for x, b in zip(leaves, batched) if b]

    def rebuild(batched_leaves: list[Any]) -> Any:
        it = iter(batched_leaves)
        return jax.tree.unflatten(treedef, [next(it) if b else x for x, b in zip(leaves, batched)])

    return mapped, rebuild


class BatchEvaluator(Protocol):
    """The batched evaluation of a :func:`batched_route` computation (primal values only)."""

    def __call__(
        self,
        axis_size: int,
        args: tuple[Any, ...],
        in_batched: Any,
        mapped: list[Any],
        rebuild: Callable[[list[Any]], Any],
    ) -> Any:
        """The outputs of ``fun`` for ``axis_size`` samples, every output leaf batched on axis 0.

        Arguments:
            axis_size: the batch size ``B``.
            args: ``fun``'s arguments as ``custom_vmap`` hands them: a leaf is batched (batch on
                axis 0) or shared by the batch, as ``in_batched`` says.
            in_batched: the batch flags of ``args`` (the same structure, booleans).
            mapped, rebuild: the batched leaves and the function that puts them (or one sample
                of them) back beside the shared ones (:func:`split_batched`).
        """
        ...


def batched_route(fun: Callable[..., Any], evaluate_batch: BatchEvaluator) -> Callable[..., Any]:
    """``fun`` (pytrees of arrays in and out), evaluated by ``evaluate_batch`` under ``vmap``.

    A ``custom_vmap`` rule routes the batched evaluation (chunks of the batch, the compiled
    kernel, or any other program computing the same values); the rule only ever sees primal
    values. A ``custom_jvp`` above it makes every derivative that of ``fun`` itself (its JVP,
    which every transformation, reverse mode included, handles; under a derivative the whole
    batch is then ``fun``'s vectorised program), taken along the arguments that carry a tangent
    only (:func:`jvp_along_nonzero`).

    Arguments:
        fun: ``fun(*args)``, the per-sample computation.
        evaluate_batch: :class:`BatchEvaluator`.

    Returns:
        ``routed(*args)``, equal to ``fun(*args)``, with ``fun``'s name and signature.
    """

    batchable = batched_evaluation(fun, evaluate_batch)

    @jax.custom_jvp
    @functools.wraps(fun)
    def routed(*args: Any) -> Any:
        return batchable(*args)

    routed.defjvp(lambda primals, tangents: jvp_along_nonzero(fun, primals, tangents), symbolic_zeros=True)
    return routed


def batched_evaluation(fun: Callable[..., Any], evaluate_batch: BatchEvaluator) -> Callable[..., Any]:
    """``fun`` evaluated by ``evaluate_batch`` under ``vmap`` (a ``custom_vmap`` rule), without
    a derivative rule of its own: for the primal function of a ``jax.custom_jvp`` whose rule
    gives every derivative (``custom_vmap`` functions are not differentiable by themselves);
    elsewhere use :func:`batched_route`.

    Returns:
        ``batchable(*args)``, equal to ``fun(*args)``, with ``fun``'s name and signature.
    """

    @custom_vmap
    @functools.wraps(fun)
    def batchable(*args: Any) -> Any:
        return fun(*args)

    @batchable.def_vmap
    def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
        mapped, rebuild = split_batched(args, in_batched)
        out = evaluate_batch(axis_size, args, in_batched, mapped, rebuild)
        return out, jax.tree.map(lambda _: True, out)

    return batchable
