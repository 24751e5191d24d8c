"""Where the compiled rollout kernel starts to pay: open-loop RK4 rollouts of the 7-joint arm
(dt 2 ms) at small batches, through the kernel (``sdjax.batch_kernel.rk4_rollout``) and through
XLA's ``lax.scan``, same states, same run. ``sdjax.batch_kernel.MIN_ROLLOUT_BATCH`` is the
smallest batch that ``sdjax.rollout`` under ``vmap`` sends to the kernel; this measures it.

    python benchmarks/bench_rollout_crossover.py            # batches 1..256, 500 steps
    python benchmarks/bench_rollout_crossover.py --quick    # batches 1, 16, 64; 50 steps

Both paths are compiled apart (compile time reported, not timed); final joint angles are compared
before timing. Writes ``benchmarks/results/rollout_crossover.json``. Needs Numba (the ``fast``
extra); CPU only (the kernel is a CPU kernel).
"""

from __future__ import annotations

import argparse

import common

common.configure(float64=True)

import jax  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax import batch_kernel  # noqa: E402
from sdjax.models import free_flying_arm_7dof  # noqa: E402

from bench_rollout import DT, initial_states  # noqa: E402


def _timed(model, batch_states, steps: int, kernel: bool, repeats: int) -> dict:
    """Compile and time ``jit(vmap(rollout))`` with the kernel on or off (the choice is made when
    the rollout is traced, from ``MIN_ROLLOUT_BATCH``)."""
    saved = batch_kernel.MIN_ROLLOUT_BATCH
    batch_kernel.MIN_ROLLOUT_BATCH = 1 if kernel else 1 << 30
    # JAX caches batched jaxprs of jitted functions (sdjax.rollout is one): without clearing,
    # the second path would reuse the first one's batching decision.
    jax.clear_caches()
    try:
        fn = jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, DT, steps).states.q[-1]))
        compile_s, compiled = common.compile_seconds(fn, batch_states)
    finally:
        batch_kernel.MIN_ROLLOUT_BATCH = saved
    timing = common.time_call(lambda: compiled(batch_states), repeats=repeats, min_seconds=0.2)
    return {"compile_seconds": compile_s, "seconds": timing["min"], "final_q": np.asarray(compiled(batch_states))}


def run(batches: list[int], steps: int, repeats: int) -> dict:
    if not batch_kernel.available():
        raise SystemExit("Numba is not installed: pip install -e '.[fast]'")
    model = free_flying_arm_7dof()
    rows = []
    for batch in batches:
        states = jax.tree.map(lambda *xs: np.stack(xs), *initial_states(model, batch, np.float64))
        scan = _timed(model, states, steps, kernel=False, repeats=repeats)
        kern = _timed(model, states, steps, kernel=True, repeats=repeats)
        difference = float(np.max(np.abs(scan["final_q"] - kern["final_q"])))
        # Same RK4 arithmetic in two compilers: round-off after `steps` steps.
        assert difference < 1e-9, f"batch {batch}: kernel and scan final q differ by {difference}"
        rows.append(
            {
                "batch": batch,
                "steps": steps,
                "scan_seconds": scan["seconds"],
                "kernel_seconds": kern["seconds"],
                "scan_robot_steps_per_s": batch * steps / scan["seconds"],
                "kernel_robot_steps_per_s": batch * steps / kern["seconds"],
                "kernel_speedup": scan["seconds"] / kern["seconds"],
                "scan_compile_seconds": scan["compile_seconds"],
                "kernel_compile_seconds": kern["compile_seconds"],
                "max_q_difference": difference,
            }
        )
        print(
            f"batch {batch:4d}: scan {rows[-1]['scan_robot_steps_per_s']:10.0f} robot-steps/s, "
            f"kernel {rows[-1]['kernel_robot_steps_per_s']:10.0f} ({rows[-1]['kernel_speedup']:.2f}x), "
            f"|dq| {difference:.1e}",
            flush=True,
        )
    return {"min_rollout_batch": batch_kernel.MIN_ROLLOUT_BATCH, "rows": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, help="RK4 steps per rollout (default 500)")
    args = parser.parse_args(argv)
    batches = [1, 16, 64] if args.quick else [1, 2, 4, 8, 16, 32, 64, 256]
    steps = args.steps or (50 if args.quick else 500)
    result = run(batches, steps, repeats=3 if args.quick else 5)
    print(f"wrote {common.write_result('rollout_crossover', result)}")


if __name__ == "__main__":
    main()
