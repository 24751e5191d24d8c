"""Where a batched forward dynamics spends its time, by parts, and whether the library's
batched Cholesky is the right solve on this device.

Times, per evaluation under ``jit(vmap(...))`` on the default device: the inertia matrix ``H``
alone, the bias forces alone, the whole forward dynamics (its solve is JAX's Cholesky: LAPACK
on the CPU, cuSOLVER's batched factorisation and triangular solves on a GPU), the same
``H`` and bias followed by the unrolled Cholesky of :func:`sdjax.algebra.small_cholesky_solve`
(array arithmetic over the batch, no library call), and the two solves alone on stored
matrices. Each route's accelerations are checked against the forward dynamics before timing.
Compile times are reported apart (the unrolled factorisation's graph grows as ``(6 + n)^3``).

    python benchmarks/probe_solve.py --batches 16384,131072 --dtypes float32,float64

Writes ``benchmarks/results/probe_solve[_gpu].json``.
"""

from __future__ import annotations

import argparse
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
from sdjax.algebra import small_cholesky_solve  # noqa: E402


def routes(model: sdjax.Model):
    """Per-sample functions of ``(state, tau)``, each returning an array."""
    n = model.num_joints

    def applied_minus_bias(s, tau):
        # The joints' own springs and dampers act beside the applied torques, as in
        # forward_dynamics (free-floating base: no base force or torque applied).
        applied = tau + sdjax.passive_joint_torques(model, s)
        return jnp.concatenate([jnp.zeros(6, tau.dtype), applied]) - sdjax.bias_forces(model, s)

    return {
        "inertia_matrix": lambda s, tau: sdjax.inertia_matrix(model, s),
        "bias_forces": lambda s, tau: sdjax.bias_forces(model, s),
        "forward_dynamics": lambda s, tau: jnp.concatenate(sdjax.forward_dynamics(model, s, tau)),
        "H + bias + unrolled Cholesky": lambda s, tau: small_cholesky_solve(
            sdjax.inertia_matrix(model, s), applied_minus_bias(s, tau)
        ),
    }, 6 + n


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
                    seconds, compiled = common.compile_seconds(jax.jit(jax.vmap(fn)), states, tau)
                    out = compiled(states, tau)
                    check = ""
                    if route == "forward_dynamics":
                        reference = np.asarray(out, np.float64)
                    elif "Cholesky" in route:
                        error = np.max(np.abs(np.asarray(out, np.float64) - reference)) / np.max(np.abs(reference))
                        check = f"{error:.1e}"
                    timing = common.time_call(lambda: compiled(states, tau), repeats=3)
                    rows.append([dtype, name, batch, route, batch / timing["min"], seconds, check])
                    print(rows[-1], flush=True)
                h = jax.jit(jax.vmap(functions["inertia_matrix"]))(states, tau)
                b = jnp.asarray(np.random.default_rng(1).normal(size=(batch, size)), dtype)
                for route, fn in solves().items():
                    seconds, compiled = common.compile_seconds(jax.jit(jax.vmap(fn)), h, b)
                    timing = common.time_call(lambda: compiled(h, b), repeats=3)
                    rows.append([dtype, name, batch, route, batch / timing["min"], seconds, ""])
                    print(rows[-1], flush=True)
    headers = ["dtype", "model", "batch", "route", "evaluations/s", "compile s", "vs FD (rel.)"]
    print(common.table(headers, rows))
    gpu = jax.default_backend() == "gpu"
    path = common.write_result(
        args.output or ("probe_solve_gpu" if gpu else "probe_solve"), {"headers": headers, "rows": rows}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
