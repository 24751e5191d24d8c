"""Where a batched forward dynamics spends its time, by parts, and whether the library's
batched Cholesky is the right solve on this device.

Times, per evaluation under ``jit(vmap(...))`` on the default device: the inertia matrix ``H``
alone, the bias forces alone, the whole forward dynamics with the library's factorisation
(JAX's Cholesky: LAPACK on the CPU, cuSOLVER's batched factorisation and triangular solves on
a GPU), the forward dynamics as the library runs it (on an accelerator, up to
:data:`sdjax.dynamics.UNROLLED_CHOLESKY_MAX_SIZE` free coordinates, the Cholesky factorisation
unrolled in array arithmetic over the batch: :func:`sdjax.algebra.small_cholesky_factor`), and
the two solves alone on stored matrices (also, with ``--solve-sizes``, on random matrices of
other sizes: the unrolled program's compile time grows as the cube of the size). Each route's
accelerations are checked against the library-factorisation forward dynamics before timing.
Compile times are reported apart.

    python benchmarks/probe_solve.py --batches 16384,131072 --dtypes float32,float64 --solve-sizes 16,20

Writes ``benchmarks/results/probe_solve[_gpu].json``.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import common  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
from bench_dynamics import MODELS, random_state  # noqa: E402

import sdjax  # noqa: E402
from sdjax import dynamics  # noqa: E402
from sdjax.algebra import small_cholesky_solve  # noqa: E402

#: The route whose accelerations every other is checked against.
REFERENCE = "forward_dynamics (library Cholesky)"


def routes(model: sdjax.Model):
    """Per-sample functions of ``(state, tau)``, each returning an array."""
    n = model.num_joints

    def forward_dynamics(s, tau):
        return jnp.concatenate(sdjax.forward_dynamics(model, s, tau))

    return {
        "inertia_matrix": lambda s, tau: sdjax.inertia_matrix(model, s),
        "bias_forces": lambda s, tau: sdjax.bias_forces(model, s),
        REFERENCE: forward_dynamics,
        "forward_dynamics": forward_dynamics,
    }, 6 + n


@contextlib.contextmanager
def unrolled_up_to(size: int):
    """Programs traced inside unroll the factorisation up to ``size`` free coordinates (0: never).

    JAX's trace caches are dropped on the way in and out: the route is chosen when a batch is
    traced, and ``sdjax.forward_dynamics`` (jitted) would otherwise reuse the other route's trace."""
    kept = dynamics.UNROLLED_CHOLESKY_MAX_SIZE
    jax.clear_caches()
    dynamics.UNROLLED_CHOLESKY_MAX_SIZE = size
    try:
        yield
    finally:
        dynamics.UNROLLED_CHOLESKY_MAX_SIZE = kept
        jax.clear_caches()


def spd_matrices(batch: int, size: int, dtype) -> tuple:
    """``batch`` random well-conditioned symmetric positive definite ``(size, size)`` matrices
    (64 distinct ones, repeated) and right-hand sides."""
    rng = np.random.default_rng(size)
    m = rng.normal(size=(64, size, size))
    h = m @ np.swapaxes(m, 1, 2) + size * np.eye(size)
    b = rng.normal(size=(64, size))
    return tuple(jnp.asarray(np.resize(x, (batch, *x.shape[1:])), dtype) for x in (h, b))


def time_solves(rows: list, dtype: str, name: str, batch: int, h, b) -> None:
    for route, fn in solves().items():
        seconds, compiled = common.compile_seconds(jax.jit(jax.vmap(fn)), h, b)
        timing = common.time_call(lambda: compiled(h, b), repeats=3)
        rows.append([dtype, name, batch, route, batch / timing["min"], seconds, ""])
        print(rows[-1], flush=True)


def solves():
    """Per-sample solves of ``(h, b)`` on stored matrices."""
    return {
        "library Cholesky + solve": lambda h, b: jsl.cho_solve((jsl.cho_factor(h, lower=True)[0], True), b),
        "unrolled Cholesky + solve": small_cholesky_solve,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="free_flying_arm_7dof,random_tree_30")
    parser.add_argument("--batches", default="1024,16384")
    parser.add_argument("--dtypes", default="float64,float32")
    parser.add_argument("--output", help="result name (default probe_solve, or probe_solve_gpu on a GPU)")
    parser.add_argument(
        "--solve-sizes", default="", help="sizes of random matrices whose solves alone are also timed (first batch)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: the arm, batch 256, float64")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.batches, args.dtypes = "free_flying_arm_7dof", "256", "float64"
    common.configure(float64=True)  # (float32 runs cast the model and the inputs)
    rows = []
    for dtype in args.dtypes.split(","):
        for name in args.models.split(","):
            model = MODELS[name]().astype(dtype)
            functions, size = routes(model)
            for batch in (int(b) for b in args.batches.split(",")):
                states = common.batch_of(lambda k: random_state(model, k), batch)
                states = jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, states)
                tau = jnp.asarray(np.random.default_rng(0).normal(size=(batch, model.num_joints)), dtype)
                reference = None
                for route, fn in functions.items():
                    with unrolled_up_to(0) if route == REFERENCE else contextlib.nullcontext():
                        seconds, compiled = common.compile_seconds(jax.jit(jax.vmap(fn)), states, tau)
                    out = compiled(states, tau)
                    check = ""
                    if route == REFERENCE:
                        reference = np.asarray(out, np.float64)
                    elif route == "forward_dynamics":
                        error = np.max(np.abs(np.asarray(out, np.float64) - reference)) / np.max(np.abs(reference))
                        check = f"{error:.1e}"
                    timing = common.time_call(lambda: compiled(states, tau), repeats=3)
                    rows.append([dtype, name, batch, route, batch / timing["min"], seconds, check])
                    print(rows[-1], flush=True)
                h = jax.jit(jax.vmap(functions["inertia_matrix"]))(states, tau)
                b = jnp.asarray(np.random.default_rng(1).normal(size=(batch, size)), dtype)
                time_solves(rows, dtype, name, batch, h, b)
        for size in (int(k) for k in args.solve_sizes.split(",") if k):
            batch = int(args.batches.split(",")[0])
            time_solves(rows, dtype, f"random SPD {size} x {size}", batch, *spd_matrices(batch, size, dtype))
    headers = ["dtype", "model", "batch", "route", "evaluations/s", "compile s", "vs FD (rel.)"]
    print(common.table(headers, rows))
    gpu = jax.default_backend() == "gpu"
    path = common.write_result(
        args.output or ("probe_solve_gpu" if gpu else "probe_solve"), {"headers": headers, "rows": rows}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
