"""Reverse-mode gradient of a 1000-step RK4 rollout loss with respect to every mass and
inertia parameter, against the forward rollout: time ratio and peak memory, with and
without checkpointing (``rollout(..., checkpoint=True)`` rematerialises each step).

    python benchmarks/bench_gradient.py          # 1000 steps, free_flying_arm_7dof
    python benchmarks/bench_gradient.py --quick  # 100 steps

Measured for one robot (the loss of a single trajectory) and for a batch of 64 robots
(one loss summed over the batch, ``vmap`` inside): at batch 1 every step is a string of tiny
kernels whose fixed cost dominates, which penalises the reverse pass (more, smaller kernels);
a batch shows the arithmetic ratio.

Peak memory is XLA's own account of the compiled program (``memory_analysis()``: temporary
buffers plus arguments and outputs), which is exact for the CPU backend and independent of
the machine's other load. Writes ``benchmarks/results/gradient.json``.
"""

from __future__ import annotations

import argparse

import common

common.configure(float64=True)

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax.models import free_flying_arm_7dof  # noqa: E402
from sdjax.models.builtin import free_flying_arm_initial_q  # noqa: E402


def make_loss(model: sdjax.Model, states: sdjax.State, steps: int, checkpoint: bool):
    """Loss of the mass parameters: final base attitude and joint errors after a PD manoeuvre,
    summed over a batch of initial states (leading axis of ``states``)."""
    target = jnp.asarray(free_flying_arm_initial_q() + 0.3)
    gains = jnp.asarray([40.0, 40.0, 20.0, 20.0, 5.0, 5.0, 2.0])

    def law(t, s):
        return gains * (target - s.q) - 0.5 * gains * s.qd

    def loss(params):
        base_mass, base_inertia, link_mass, link_inertia = params
        m = eqx.tree_at(lambda m: (m.base_mass, m.base_inertia, m.link_mass, m.link_inertia), model, params)

        def one(state):
            traj = sdjax.rollout(m, state, 0.002, steps, law, checkpoint=checkpoint)
            end = jax.tree.map(lambda x: x[-1], traj.states)
            return jnp.sum(end.base_quaternion[:3] ** 2) + jnp.sum((end.q - target) ** 2)

        return jnp.sum(jax.vmap(one)(states))

    return loss


def memory_bytes(compiled) -> int | None:
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return int(analysis.temp_size_in_bytes + analysis.argument_size_in_bytes + analysis.output_size_in_bytes)


def initial_states(model: sdjax.Model, batch: int) -> sdjax.State:
    """``batch`` initial states (leading axis) around the arm's reference pose."""
    rng = np.random.default_rng(0)
    q0 = free_flying_arm_initial_q()
    states = [sdjax.make_state(model, q=q0 + (0.1 * rng.normal(size=7) if k else 0.0)) for k in range(batch)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def run(steps: int, repeats: int, batch: int = 1) -> dict:
    model = free_flying_arm_7dof()
    state = initial_states(model, batch)
    params = (model.base_mass, model.base_inertia, model.link_mass, model.link_inertia)
    rows = []
    forward_seconds = None
    for checkpoint in (False, True):
        loss = make_loss(model, state, steps, checkpoint)
        for kind, fn in (("forward", jax.jit(loss)), ("gradient", jax.jit(jax.grad(loss)))):
            if kind == "forward" and checkpoint:
                continue  # checkpointing changes nothing without differentiation
            compile_s, compiled = common.compile_seconds(fn, params)
            timing = common.time_call(lambda: compiled(params), repeats=repeats, min_seconds=0.5)
            if kind == "forward":
                forward_seconds = timing["min"]
            row = dict(
                kind=kind,
                checkpoint=checkpoint,
                steps=steps,
                batch=batch,
                seconds=timing["min"],
                median_seconds=timing["median"],
                compile_seconds=compile_s,
                peak_bytes=memory_bytes(compiled),
                ratio_to_forward=timing["min"] / forward_seconds,
            )
            rows.append(row)
            mem = f"{row['peak_bytes'] / 2**20:8.1f} MiB" if row["peak_bytes"] is not None else "n/a"
            print(
                f"batch {batch:4d} {kind:8s} checkpoint={checkpoint!s:5s} {timing['min']:8.3f} s  ({row['ratio_to_forward']:.2f}x forward)  peak {mem}  compile {compile_s:.1f} s",
                flush=True,
            )
    # Memory growth with the horizon: both variants at half the steps.
    for checkpoint in (False, True):
        half = make_loss(model, state, steps // 2, checkpoint)
        _, compiled = common.compile_seconds(jax.jit(jax.grad(half)), params)
        rows.append(
            dict(
                kind="gradient", checkpoint=checkpoint, steps=steps // 2, batch=batch, peak_bytes=memory_bytes(compiled)
            )
        )
    return {
        "model": model.name,
        "parameters": "base mass and inertia, link masses and inertias (1 + 9 + 7 + 63 = 80 numbers)",
        "results": rows,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64], help="robots per loss (default 1 64)")
    parser.add_argument("--output", help="result name (default gradient, or gradient_gpu on a GPU)")
    args = parser.parse_args(argv)
    runs = [run(100 if args.quick else 1000, repeats=2 if args.quick else 5, batch=b) for b in args.batches]
    payload = dict(runs[0], results=[row for r in runs for row in r["results"]])
    path = common.write_result(
        args.output or ("gradient_gpu" if jax.default_backend() == "gpu" else "gradient"), payload
    )
    rows = [
        [
            r["batch"],
            r["kind"],
            r["checkpoint"],
            r["steps"],
            r.get("seconds", ""),
            r.get("ratio_to_forward", ""),
            (r["peak_bytes"] or 0) / 2**20,
        ]
        for r in payload["results"]
    ]
    print(common.table(["batch", "kind", "checkpoint", "steps", "seconds", "x forward", "peak MiB"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
