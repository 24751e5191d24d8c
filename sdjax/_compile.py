"""XLA compiler options for sdjax's largest programs: solvers iterating over a whole rollout
and its derivative (the planners' Gauss-Newton and Adam loops).

Such a program is compiled once and run for a few seconds, and XLA's CPU compilation of it
takes longer than the run (a 40-step closed-loop RK4 rollout of the 7-joint arm with its
forward-mode Jacobian: 7 s to compile, 0.1 s to run). XLA's fast-compile preset with its
loop emitters instead of the fusion emitters compiles these programs 1.5-2x faster at the
same or better run time (measured on the planning notebook's problem, AMD EPYC 2 cores,
benchmarks/README.md "Workflows"). Other programs (dynamics, rollouts, Monte-Carlo kernels)
compile with XLA's defaults: they run long enough for the default optimisation to pay.

The options are CPU settings (other backends ignore them); a jaxlib that does not know them
compiles with its defaults (checked once by a trial compilation).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import numpy as np

__all__ = ["SOLVER_PROGRAM_OPTIONS", "solver_jit", "solver_program_options"]

#: XLA options of the solver programs (``jax.jit(..., compiler_options=...)``).
SOLVER_PROGRAM_OPTIONS: dict[str, Any] = {
    "xla_cpu_use_fusion_emitters": False,
    "xla_cpu_opt_preset": "CPU_OPT_PRESET_FAST_COMPILE",
}


@functools.cache
def solver_program_options() -> dict[str, Any] | None:
    """:data:`SOLVER_PROGRAM_OPTIONS` if this jaxlib accepts them (one trial compilation of a
    trivial program on the default backend, cached), else ``None`` (XLA's defaults)."""
    try:
        jax.jit(lambda x: x + 1, compiler_options=SOLVER_PROGRAM_OPTIONS).lower(np.float32(0)).compile()
    except Exception:  # an unknown option or value: XLA raises its own error types
        return None
    return dict(SOLVER_PROGRAM_OPTIONS)


def solver_jit(fun: Callable[..., Any]) -> Callable[..., Any]:
    """``eqx.filter_jit(fun)``, compiled with :func:`solver_program_options` when called at top
    level (the options are chosen at the first such call, not at import: JAX's configuration is
    the caller's until then).

    Inside another transformation (``jit``, ``grad``, ``vmap`` of the caller) the function is
    part of the caller's program, and JAX takes compiler options only from the outermost
    ``jit``: the plain ``eqx.filter_jit`` version runs there.
    """
    nested = eqx.filter_jit(fun)
    top_level: Callable[..., Any] | None = None

    @functools.wraps(fun)
    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal top_level
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return nested(*args, **kwargs)
        if top_level is None:
            # (equinox passes jax.jit's keywords through; its type stubs do not list them)
            top_level = cast(Any, eqx.filter_jit)(fun, compiler_options=solver_program_options())
        try:
            return top_level(*args, **kwargs)
        except ValueError as error:  # concrete arguments, but called inside a caller's trace
            if "compiler_options" not in str(error):
                raise
            return nested(*args, **kwargs)

    return call
