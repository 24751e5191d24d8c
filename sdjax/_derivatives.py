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

Reverse mode can take another route too. JAX transposes a rule's tangent operation by
operation; :func:`linearized_tangent` makes the tangent one linear primitive instead, whose
transpose is the plain tangent map's transpose as a whole, evaluated under ``vmap`` by a
:class:`VjpEvaluator` (the compiled kernel's vector-Jacobian product) where it serves. Reverse
mode then stores the primitive's operands only (the transpose recomputes the rest); forward
mode evaluates the plain map, and higher derivatives differentiate it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.extend
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.custom_derivatives import SymbolicZero
from jax.interpreters import ad, batching, mlir

_ad_internal: Any
try:  # JAX's table of linearization rules (internal; see _linearized_linearize)
    from jax._src.interpreters import ad as _ad_internal
except ImportError:  # pragma: no cover - other JAX versions: JAX's own fallback, same results
    _ad_internal = None

__all__ = [
    "BatchEvaluator",
    "VjpEvaluator",
    "batched_evaluation",
    "batched_route",
    "jvp_along_nonzero",
    "linearized_tangent",
    "split_batched",
]


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


def batched_route(
    fun: Callable[..., Any], evaluate_batch: BatchEvaluator, evaluate_vjp: VjpEvaluator | None = None
) -> Callable[..., Any]:
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
        evaluate_vjp: optional :class:`VjpEvaluator`: then reverse mode takes its route too. The
            rule's tangent is a linear primitive (``_linearized_p``: the plain JVP when
            evaluated) whose transpose is the plain function's VJP, evaluated under ``vmap`` by
            ``evaluate_vjp`` (where it serves); without it, reverse mode transposes the plain
            JVP's operations.

    Returns:
        ``routed(*args)``, equal to ``fun(*args)``, with ``fun``'s name and signature.
    """

    fun = _traced_once(fun)
    batchable = batched_evaluation(fun, evaluate_batch)

    @jax.custom_jvp
    @functools.wraps(fun)
    def routed(*args: Any) -> Any:
        return batchable(*args)

    if evaluate_vjp is None:

        def rule(primals: Any, tangents: Any) -> tuple[Any, Any]:
            out, tangent = jvp_along_nonzero(fun, primals, tangents)
            return _batch_axis_first(out), tangent

        routed.defjvp(rule, symbolic_zeros=True)
    else:
        routed.defjvp(functools.partial(_jvp_through_linearization, fun, routed, evaluate_vjp), symbolic_zeros=True)
    return routed


def _batch_axis_first(tree: Any) -> Any:
    """The identity, whose batched form has the batch axis first.

    A ``custom_jvp`` rule's primal output under ``vmap`` whose batch axis is not the first (the
    stacked outputs of a ``lax.scan`` have it second) is taken to have it first when JAX
    linearizes a ``jit`` under ``vmap`` whose function holds a ``custom_vmap`` inside the
    ``custom_jvp`` (JAX 0.10: ``grad`` of ``vmap`` of a jitted rollout failed with a shape
    error); this puts it there: a ``custom_vmap``, as the primitive of
    :func:`_differentiable_as` differentiated as the identity (also where JAX inlines it when it
    linearizes a gradient's program again)."""
    return _differentiable_as(_batch_axis_first_vmap, _identity)(tree)


@custom_vmap
def _batch_axis_first_vmap(tree: Any) -> Any:
    return tree


@_batch_axis_first_vmap.def_vmap
def _batch_axis_first_rule(axis_size: int, in_batched: Any, tree: Any) -> tuple[Any, Any]:
    return tree, in_batched[0]


def _identity(tree: Any) -> Any:
    return tree


def _traced_once(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``jax.jit(fun)`` (``fun`` itself if it is one already): a program calls a routed
    function many times (the four stages of an RK4 step, each with its derivative rules), and a
    ``jit`` function is traced and differentiated once per shape and lowered once per program
    (see :mod:`sdjax.algebra`). Its arguments are pytrees of arrays (as ``custom_vmap`` takes)."""
    return fun if hasattr(fun, "lower") else jax.jit(fun)


def batched_evaluation(fun: Callable[..., Any], evaluate_batch: BatchEvaluator) -> Callable[..., Any]:
    """``fun`` evaluated by ``evaluate_batch`` under ``vmap`` (a ``custom_vmap`` rule), for the
    primal function of a ``jax.custom_jvp`` whose rule gives the derivatives; elsewhere use
    :func:`batched_route`. Its own derivatives (``fun``'s JVP, through :func:`_differentiable_as`)
    serve where JAX inlines that primal function: differentiating a gradient's program again
    (the forward sweep of a differentiated ``lax.scan``, reverse over reverse).

    Returns:
        ``batchable(*args)``, equal to ``fun(*args)``, with ``fun``'s name and signature.
    """

    fun = _traced_once(fun)

    @custom_vmap
    @functools.wraps(fun)
    def batchable(*args: Any) -> Any:
        return fun(*args)

    @batchable.def_vmap
    def rule(axis_size: int, in_batched: Any, *args: Any) -> Any:
        def routed_batch(*args: Any) -> Any:
            mapped, rebuild = split_batched(args, in_batched)
            return evaluate_batch(axis_size, args, in_batched, mapped, rebuild)

        def plain_batch(*args: Any) -> Any:
            mapped, rebuild = split_batched(args, in_batched)
            return jax.vmap(lambda m: fun(*rebuild(m)), axis_size=axis_size)(mapped)

        out = _differentiable_as(routed_batch, plain_batch)(*args)
        return out, jax.tree.map(lambda _: True, out)

    # (Unbatched too: a custom_jvp's primal function inlined where JAX linearizes a gradient's
    # program again, e.g. the forward sweep of a differentiated lax.scan, meets this evaluation.)
    return functools.wraps(fun)(_differentiable_as(batchable, fun))


def _differentiable_as(evaluate: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
    """``evaluate`` (a batch's other route, e.g. the compiled kernel's custom call, which JAX
    cannot differentiate) as one primitive with the derivatives of ``plain`` (the same values
    by plain JAX: the vectorised per-sample function, the XLA path).

    The derivative rules above (:func:`batched_route`'s) apply before a batch is evaluated, so
    first derivatives never reach this one. But JAX keeps no ``custom_jvp`` rule in the primal
    half of a linearization (it inlines the primal function there): differentiating a gradient
    again (forward-over-reverse Hessian-vector products, reverse-over-reverse) meets the
    batch's evaluation itself, and, where the gradient's program holds a ``lax.scan`` (a
    rollout), the unbatched ``custom_vmap`` of :func:`batched_evaluation` in the scan's forward
    sweep. A primitive survives there, and its JVP is ``plain``'s along the arguments that
    carry a tangent."""

    def differentiable(*args: Any) -> Any:
        leaves, treedef = jax.tree.flatten(args)
        closed, out_shape = jax.make_jaxpr(lambda *x: evaluate(*jax.tree.unflatten(treedef, x)), return_shape=True)(
            *leaves
        )
        out = _batch_route_p.bind(*leaves, jaxpr=closed, plain=_Plain(plain, treedef))
        return jax.tree.unflatten(jax.tree.structure(out_shape), out)

    return differentiable


class _Plain:
    """The plain function whose derivatives a batch's route takes (on the arguments, whose
    flattening is ``treedef``). Compared by identity (a primitive parameter)."""

    def __init__(self, function: Callable[..., Any], treedef: Any):
        self.function, self.treedef = function, treedef

    def __repr__(self) -> str:
        return f"plain({getattr(self.function, '__name__', 'function')})"


#: ``_batch_route_p.bind(*leaves, jaxpr=J, plain=P)``: the closed program ``J`` (a batch's route)
#: on the flat leaves of the arguments, differentiated as ``P`` (see :func:`_differentiable_as`).
#: The program is a parameter of its own, so that walkers of a program's sub-programs
#: (``jax.extend.core.jaxprs_in_params``, printing) see it.
_batch_route_p = jax.extend.core.Primitive("sdjax_batch_route")
_batch_route_p.multiple_results = True


def _batch_route_impl(*leaves: Any, jaxpr: Any, plain: _Plain) -> list[Any]:
    return jax.extend.core.jaxpr_as_fun(jaxpr)(*leaves)


def _batch_route_jvp(primals: Any, tangents: Any, *, jaxpr: Any, plain: _Plain) -> tuple[list[Any], list[Any]]:
    out = _batch_route_p.bind(*primals, jaxpr=jaxpr, plain=plain)
    tangents = [SymbolicZero(t.aval) if isinstance(t, ad.Zero) else t for t in tangents]
    args = jax.tree.unflatten(plain.treedef, list(primals))
    tangent = jvp_along_nonzero(plain.function, args, jax.tree.unflatten(plain.treedef, tangents))[1]
    return out, jax.tree.leaves(tangent)


def _batch_route_batch(leaves: Any, dims: Any, *, jaxpr: Any, plain: _Plain) -> tuple[Any, list[int]]:
    """A ``vmap`` around the batch's: the route's program vectorised as JAX vectorises it, still
    differentiated as the plain function (vectorised the same way)."""
    in_axes = list(dims)

    def evaluate(*leaves: Any) -> Any:
        return jax.vmap(jax.extend.core.jaxpr_as_fun(jaxpr), in_axes=in_axes)(*leaves)

    def plain_leaves(*leaves: Any) -> Any:
        return jax.tree.leaves(plain.function(*jax.tree.unflatten(plain.treedef, leaves)))

    out = _differentiable_as(evaluate, jax.vmap(plain_leaves, in_axes=in_axes))(*leaves)
    return out, [0] * len(out)


_batch_route_p.def_impl(_batch_route_impl)
_batch_route_p.def_abstract_eval(lambda *avals, jaxpr, plain: jaxpr.out_avals)
# (The program lowered as it stands: lower_fun would trace it again, op by op.)
mlir.register_lowering(
    _batch_route_p,
    lambda ctx, *operands, jaxpr, plain: mlir.core_call_lowering(ctx, *operands, name="batch_route", call_jaxpr=jaxpr),
)
batching.primitive_batchers[_batch_route_p] = _batch_route_batch
ad.primitive_jvps[_batch_route_p] = _batch_route_jvp


# ------------------------------------------------------------------------------------------
# Reverse mode through another route: a linear primitive whose transpose is batched apart.


class VjpEvaluator(Protocol):
    """The batched vector-Jacobian product of a :func:`batched_route` computation, for reverse
    mode (see :func:`batched_route`)."""

    def __call__(self, axis_size: int, args: tuple[Any, ...], in_batched: Any, cotangent: Any) -> Any:
        """The cotangents of ``fun``'s arguments for ``axis_size`` samples, or None where this
        evaluator does not serve the batch (the plain function's VJP, vectorised, then runs).

        Arguments:
            axis_size: the batch size ``B``.
            args, in_batched: ``fun``'s arguments and their batch flags, as for
                :class:`BatchEvaluator`.
            cotangent: the cotangent of ``fun``'s output, every leaf batched on axis 0.

        Returns:
            A tuple of pytrees of the structure of ``args`` (less the trailing ``constants`` of
            :func:`linearized_tangent`, which have none), each leaf ``(B, *leaf.shape)``: each
            sample's cotangent (a shared leaf's too: the sum over the batch is taken outside).
            Only the leaves being differentiated are read (the others may be anything of that
            shape).
        """
        ...


class _Linearization:
    """A tangent map at a point, as the operands of :data:`_linearized_p` see it:
    ``jvp(*leaves, *tangents)`` (``tangent_map(primals, tangents)``, the tangents of the leaves
    marked ``live``, the others ``SymbolicZero``) and its transpose ``vjp(*leaves,
    *cotangents)``, both per sample on flat lists of arrays. The transpose is
    :func:`batched_evaluation` of the plain map's transpose, so that under ``vmap`` it takes the
    evaluator's route. ``out_avals``: the per-sample output's abstract values (known beforehand,
    so that abstract evaluation traces nothing). Compared by identity (a primitive parameter)."""

    def __init__(
        self,
        tangent_map: Callable[..., Any],
        treedef: Any,
        live: tuple[bool, ...],
        evaluate_vjp: VjpEvaluator,
        out_like: Any,
    ):
        self.tangent_map, self.treedef, self.live = tangent_map, treedef, live
        self.num_leaves = len(live)
        out_leaves, out_treedef = jax.tree.flatten(out_like)
        self.out_treedef: Any = out_treedef
        self.out_avals = [jax.typeof(x).to_tangent_aval() for x in out_leaves]

        def plain_vjp(leaves: list[Any], cotangents: list[Any]) -> list[Any]:
            tangent_avals = [jax.typeof(x).to_tangent_aval() for x in self._live(leaves)]
            examples = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in tangent_avals]
            transpose = jax.linear_transpose(lambda *tangents: self.jvp(*leaves, *tangents), *examples)
            return list(transpose(cotangents))

        def batched_vjp(axis_size: int, args: Any, in_batched: Any, mapped: list[Any], rebuild: Any) -> Any:
            leaves, cotangents = args
            leaves_batched, cotangents_batched = in_batched
            cotangents = [
                c if b else jnp.broadcast_to(c, (axis_size, *c.shape)) for c, b in zip(cotangents, cotangents_batched)
            ]
            out = evaluate_vjp(
                axis_size,
                jax.tree.unflatten(self.treedef, leaves),
                jax.tree.unflatten(self.treedef, leaves_batched),
                jax.tree.unflatten(self.out_treedef, cotangents),
            )
            if out is not None:
                # (The constants of linearized_tangent stand in for their cotangents: never live.)
                args = jax.tree.unflatten(self.treedef, leaves)
                return self._live(self.treedef.flatten_up_to((*out, *args[len(out) :])))
            return jax.vmap(lambda m: plain_vjp(*rebuild(m)), axis_size=axis_size)(mapped)

        batchable_vjp = batched_evaluation(plain_vjp, batched_vjp)

        @jax.custom_jvp
        def vjp_route(leaves: list[Any], cotangents: list[Any]) -> list[Any]:
            return batchable_vjp(leaves, cotangents)

        def vjp_route_jvp(primals: Any, tangents: Any) -> tuple[Any, Any]:
            # The primal by the route itself (batched as the route batches it: the plain map's
            # primal may not be, e.g. a zero cotangent, which custom_jvp's batching then
            # mislabels under jit) and the tangent by the plain map's (second derivatives).
            return vjp_route(*primals), jvp_along_nonzero(plain_vjp, primals, tangents)[1]

        vjp_route.defjvp(vjp_route_jvp, symbolic_zeros=True)
        self.vjp_route = vjp_route

    def _live(self, leaves: list[Any]) -> list[Any]:
        return [x for x, b in zip(leaves, self.live) if b]

    def jvp(self, *operands: Any) -> list[Any]:
        leaves, live_tangents = list(operands[: self.num_leaves]), iter(operands[self.num_leaves :])
        tangents = [
            next(live_tangents) if b else SymbolicZero(jax.typeof(x).to_tangent_aval())
            for x, b in zip(leaves, self.live)
        ]
        out_tangent = self.tangent_map(
            jax.tree.unflatten(self.treedef, leaves), jax.tree.unflatten(self.treedef, tangents)
        )
        out_leaves, out_treedef = jax.tree.flatten(out_tangent)
        avals = [jax.typeof(x) for x in out_leaves]
        if out_treedef != self.out_treedef or [(a.shape, a.dtype) for a in avals] != [
            (a.shape, a.dtype) for a in self.out_avals
        ]:
            raise TypeError(
                f"sdjax_linearized: the tangent map returned {out_treedef} of {avals}, "
                f"not the declared {self.out_treedef} of {self.out_avals}"
            )
        return out_leaves

    def vjp(self, *operands: Any) -> list[Any]:
        leaves, cotangents = list(operands[: self.num_leaves]), list(operands[self.num_leaves :])
        return self.vjp_route(leaves, cotangents)


#: ``_linearized_p.bind(*leaves, *tangents, linearization=L, levels=...)``: ``L.jvp`` (linear in
#: the tangents), under the ``vmap``s recorded in ``levels`` (innermost first: ``(axis_size,
#: in_axes)``, each operand batched on axis 0 or not at all). A primitive so that reverse mode
#: transposes it by the rule below, ``L.vjp`` under the same ``vmap``s (where the batched route
#: of ``L.vjp`` runs), instead of transposing the operations of ``L.jvp`` one by one.
_linearized_p = jax.extend.core.Primitive("sdjax_linearized")
_linearized_p.multiple_results = True


def _under_levels(function: Callable[..., Any], levels: tuple) -> Callable[..., Any]:
    for axis_size, in_axes in levels:
        function = jax.vmap(function, in_axes=in_axes, axis_size=axis_size)
    return function


def _linearized_impl(*operands: Any, linearization: _Linearization, levels: tuple) -> list[Any]:
    return _under_levels(linearization.jvp, levels)(*operands)


def _linearized_abstract_eval(*avals: Any, linearization: _Linearization, levels: tuple) -> list[Any]:
    # Each vmap level (innermost first) puts its batch axis in front of the outputs.
    batch = tuple(axis_size for axis_size, _ in reversed(levels))
    return [jax.core.ShapedArray(batch + a.shape, a.dtype) for a in linearization.out_avals]


def _linearized_batch(operands: Any, dims: Any, *, linearization: _Linearization, levels: tuple) -> Any:
    axis_size = next(x.shape[d] for x, d in zip(operands, dims) if d is not None)
    moved = [x if d is None else jnp.moveaxis(x, d, 0) for x, d in zip(operands, dims)]
    level = (axis_size, tuple(None if d is None else 0 for d in dims))
    out = _linearized_p.bind(*moved, linearization=linearization, levels=levels + (level,))
    return out, [0] * len(out)


def _linearized_jvp(primals: Any, tangents: Any, *, linearization: _Linearization, levels: tuple) -> Any:
    # (Second derivatives: the plain JVP's own derivative.)
    tangents = [ad.instantiate_zeros(t) for t in tangents]
    return jax.jvp(_under_levels(linearization.jvp, levels), list(primals), tangents)


def _linearized_linearize(
    is_vjp: bool, nonzeros: list[bool], *primals: Any, linearization: _Linearization, levels: tuple
) -> tuple[Any, ...]:
    """The linearization of the primitive: itself where only its tangent operands vary (it is
    linear in them), without tracing the plain map's JVP as JAX's fallback (the JVP rule,
    partially evaluated) would; that fallback where a leaf varies too."""
    if any(nonzeros[: linearization.num_leaves]):
        return _ad_internal.fallback_linearize_rule(
            _linearized_p, is_vjp, nonzeros, *primals, linearization=linearization, levels=levels
        )
    leaves = list(primals[: linearization.num_leaves])
    out = _linearized_p.bind(*primals, linearization=linearization, levels=levels)

    def linearized(residuals: list[Any], *tangents: Any) -> list[Any]:
        live = [ad.instantiate_zeros(t) for t in tangents[linearization.num_leaves :]]
        return _linearized_p.bind(*residuals, *live, linearization=linearization, levels=levels)

    return out, [True] * len(out), leaves, linearized


def _linearized_transpose(cotangents: Any, *operands: Any, linearization: _Linearization, levels: tuple) -> list[Any]:
    leaves = operands[: linearization.num_leaves]
    if any(ad.is_undefined_primal(x) for x in leaves):
        raise NotImplementedError("sdjax_linearized: linear in its tangents only")
    cotangents = [ad.instantiate_zeros(c) for c in cotangents]
    vjp = linearization.vjp
    for axis_size, in_axes in levels:
        vjp = _lift_transpose(
            vjp, axis_size, in_axes[: linearization.num_leaves], in_axes[linearization.num_leaves :], len(cotangents)
        )
    return [None] * len(leaves) + list(vjp(*leaves, *cotangents))


def _lift_transpose(
    vjp: Callable[..., Any], axis_size: int, leaf_axes: tuple, tangent_axes: tuple, num_cotangents: int
) -> Callable[..., Any]:
    """``vjp`` under one ``vmap`` level: the cotangents are batched, and the cotangent of a
    tangent operand that level does not map is the sum over the batch."""
    mapped = jax.vmap(vjp, in_axes=(*leaf_axes, *[0] * num_cotangents), axis_size=axis_size)

    def lifted(*operands: Any) -> list[Any]:
        return [c if axis == 0 else c.sum(0) for c, axis in zip(mapped(*operands), tangent_axes)]

    return lifted


_linearized_p.def_impl(_linearized_impl)
_linearized_p.def_abstract_eval(_linearized_abstract_eval)
mlir.register_lowering(
    _linearized_p,
    lambda ctx, *operands, linearization, levels: mlir.lower_fun(
        functools.partial(_linearized_impl, linearization=linearization, levels=levels), multiple_results=True
    )(ctx, *operands),
)
batching.primitive_batchers[_linearized_p] = _linearized_batch
ad.primitive_jvps[_linearized_p] = _linearized_jvp
if hasattr(_ad_internal, "primitive_linearizations") and hasattr(_ad_internal, "fallback_linearize_rule"):
    _ad_internal.primitive_linearizations[_linearized_p] = _linearized_linearize
ad.primitive_transposes[_linearized_p] = _linearized_transpose


def linearized_tangent(
    tangent_map: Callable[[Any, Any], Any],
    evaluate_vjp: VjpEvaluator,
    primals: Any,
    tangents: Any,
    out_like: Any,
    constants: tuple[Any, ...] = (),
) -> Any:
    """The tangent ``tangent_map(primals, tangents)`` of a ``custom_jvp`` rule (defined with
    ``symbolic_zeros=True``), as one linear primitive whose transpose (reverse mode) is the
    plain map's, evaluated under ``vmap`` by ``evaluate_vjp`` where it serves.

    Arguments:
        tangent_map: ``tangent_map((*primals, *constants), tangents) -> output tangent``,
            linear in the tangents (``SymbolicZero`` where an argument carries none; always for
            the constants), plain JAX.
        evaluate_vjp: :class:`VjpEvaluator` of the map's transpose (``args``: ``(*primals,
            *constants)``; it returns the cotangents of ``primals`` only).
        primals, tangents: the rule's arguments (tuples of pytrees).
        out_like: a pytree of arrays (or tracers) whose tangents are the map's output, e.g. the
            rule's primal output: the output's structure, shapes and dtypes, known without
            tracing the map.
        constants: more arguments of the map that carry no tangent (e.g. the rule's solution,
            computed beside its primal output).

    Returns:
        The output tangent (zero where no argument carries a tangent).
    """
    primals = (*primals, *constants)
    tangents = (
        *tangents,
        *[jax.tree.map(lambda x: SymbolicZero(jax.typeof(x).to_tangent_aval()), c) for c in constants],
    )
    leaves, treedef = jax.tree.flatten(primals)
    tangent_leaves = jax.tree.leaves(tangents, is_leaf=lambda t: isinstance(t, SymbolicZero))
    live = tuple(not isinstance(t, SymbolicZero) for t in tangent_leaves)
    linearization = _Linearization(tangent_map, treedef, live, evaluate_vjp, out_like)
    operands = [*leaves, *[t for t, b in zip(tangent_leaves, live) if b]]
    out_tangent = _linearized_p.bind(*operands, linearization=linearization, levels=())
    return jax.tree.unflatten(linearization.out_treedef, out_tangent)


def _jvp_through_linearization(
    fun: Callable[..., Any], routed: Callable[..., Any], evaluate_vjp: VjpEvaluator, primals: Any, tangents: Any
) -> tuple[Any, Any]:
    """The ``custom_jvp`` rule of a :func:`batched_route` with a VJP evaluator: the primal by
    ``routed`` itself (the batched route; differentiable, so that the rule is), the tangent by
    :func:`linearized_tangent` of ``fun``'s JVP."""
    out = routed(*primals)
    if not any(
        not isinstance(t, SymbolicZero)
        for t in jax.tree.leaves(tangents, is_leaf=lambda t: isinstance(t, SymbolicZero))
    ):
        return out, jax.tree.map(jnp.zeros_like, out)
    tangent = linearized_tangent(lambda p, t: jvp_along_nonzero(fun, p, t)[1], evaluate_vjp, primals, tangents, out)
    return out, tangent
