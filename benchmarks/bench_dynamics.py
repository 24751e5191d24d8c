"""Forward dynamics, inverse dynamics and the inertia matrix: sdjax (jit + vmap) at batch 1,
64, 1024, 16384 against Pinocchio called per sample from Python, on the same models and
states, in one run.

    python benchmarks/bench_dynamics.py            # float64 and float32, CPU
    python benchmarks/bench_dynamics.py --quick    # small repeat counts (a smoke run)

Writes ``benchmarks/results/dynamics.json`` (``dynamics_gpu.json`` on a GPU, where the batch
goes up to 1e6 in float32) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import sys

import common

common.configure(float64=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax.models import free_flying_arm_7dof, spacedyn_sample  # noqa: E402
from sdjax.models.random import random_rotation  # noqa: E402

MODELS = {"free_flying_arm_7dof": free_flying_arm_7dof, "spacedyn_sample": spacedyn_sample}
ALGORITHMS = ("forward_dynamics", "inverse_dynamics", "inertia_matrix")


def random_state(model: sdjax.Model, seed: int) -> sdjax.State:
    rng = np.random.default_rng(seed)
    n = model.num_joints
    return sdjax.make_state(
        model,
        base_position=rng.normal(size=3),
        base_rotation=random_rotation(rng),
        base_linear_velocity=rng.normal(size=3),
        base_angular_velocity=rng.normal(size=3),
        q=rng.uniform(-np.pi, np.pi, size=n),
        qd=rng.normal(size=n),
    )


def sdjax_functions(model: sdjax.Model):
    """Per-sample functions of (state, tau, base_acc, qdd); vmapped over all four."""
    return {
        "forward_dynamics": lambda s, tau, a, qdd: jnp.concatenate(sdjax.forward_dynamics(model, s, tau)),
        "inverse_dynamics": lambda s, tau, a, qdd: jnp.concatenate(sdjax.inverse_dynamics(model, s, a, qdd)),
        "inertia_matrix": lambda s, tau, a, qdd: sdjax.inertia_matrix(model, s),
    }


def pinocchio_loops(model: sdjax.Model, states: list, inputs: dict):
    """Per-sample Pinocchio calls, the way a Python user writes them."""
    import pinocchio as pin

    from sdjax.io.pinocchio import pinocchio_coordinates, to_pinocchio

    twin = to_pinocchio(model)
    data = twin.model.createData()
    coords = [pinocchio_coordinates(twin, s) for s in states]
    q = [c[0] for c in coords]
    v = [c[1] for c in coords]
    tau = [np.concatenate([np.zeros(6), t]) for t in inputs["tau"]]
    acc = [c[2] @ np.concatenate([a, b]) for c, a, b in zip(coords, inputs["base_acc"], inputs["qdd"])]
    pm = twin.model
    return {
        "forward_dynamics": lambda k: pin.aba(pm, data, q[k], v[k], tau[k]),
        "inverse_dynamics": lambda k: pin.rnea(pm, data, q[k], v[k], acc[k]),
        "inertia_matrix": lambda k: pin.crba(pm, data, q[k]),
    }


def run(batches: list[int], dtypes: list[str], repeats: int, min_seconds: float) -> dict:
    results = []
    for model_name, build in MODELS.items():
        model64 = build()
        n = model64.num_joints
        distinct = 256
        host_states = [random_state(model64, k) for k in range(distinct)]
        rng = np.random.default_rng(0)
        inputs = {
            "tau": rng.normal(size=(distinct, n)),
            "base_acc": rng.normal(size=(distinct, 6)),
            "qdd": rng.normal(size=(distinct, n)),
        }
        try:
            loops = pinocchio_loops(model64, host_states, inputs)
        except ImportError:
            loops = None
            print("pinocchio not installed: sdjax only", file=sys.stderr)
        pin_rate = {}
        if loops is not None:
            for algo in ALGORITHMS:
                t = common.time_python_loop(loops[algo], distinct, repeats=repeats)
                pin_rate[algo] = 1.0 / t["min"]
                results.append(dict(model=model_name, engine="pinocchio (per-sample Python)", algorithm=algo, dtype="float64", batch=1, seconds_per_eval=t["min"], evals_per_second=1.0 / t["min"], median_seconds_per_eval=t["median"]))
        for dtype_name in dtypes:
            dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
            model = model64.astype(dtype)
            functions = sdjax_functions(model)
            for batch in batches:
                states = common.batch_of(lambda k: jax.tree.map(lambda x: x.astype(dtype), host_states[k]), batch, distinct)
                args = (states,) + tuple(
                    jnp.resize(jnp.asarray(inputs[key], dtype), (batch,) + inputs[key].shape[1:]) for key in ("tau", "base_acc", "qdd")
                )
                for algo in ALGORITHMS:
                    compile_s, compiled = common.compile_seconds(jax.jit(jax.vmap(functions[algo])), *args)
                    t = common.time_call(lambda: compiled(*args), repeats=repeats, min_seconds=min_seconds)
                    rate = batch / t["min"]
                    row = dict(model=model_name, engine="sdjax (jit + vmap)", algorithm=algo, dtype=dtype_name, batch=batch, seconds_per_call=t["min"], median_seconds_per_call=t["median"], evals_per_second=rate, compile_seconds=compile_s)
                    if algo in pin_rate:
                        row["ratio_to_pinocchio"] = rate / pin_rate[algo]
                    results.append(row)
                    print(f"{model_name:22s} {algo:17s} {dtype_name} B={batch:6d}: {rate:12,.0f} evals/s" + (f"  ({row['ratio_to_pinocchio']:.2f}x Pinocchio)" if "ratio_to_pinocchio" in row else ""), flush=True)
    return {"results": results}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats and batches (smoke run)")
    args = parser.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    if args.quick:
        batches, repeats, min_seconds = [1, 64], 2, 0.02
    elif gpu:
        batches, repeats, min_seconds = [1, 1024, 16384, 131072, 1048576], 5, 0.2
    else:
        batches, repeats, min_seconds = [1, 64, 1024, 16384], 7, 0.3
    dtypes = ["float32"] if gpu else ["float64", "float32"]
    payload = run(batches, dtypes, repeats, min_seconds)
    path = common.write_result("dynamics_gpu" if gpu else "dynamics", payload)
    rows = [[r["model"], r["engine"], r["algorithm"], r["dtype"], r["batch"], r["evals_per_second"], r.get("ratio_to_pinocchio", "")] for r in payload["results"]]
    print(common.table(["model", "engine", "algorithm", "dtype", "batch", "evals/s", "x Pinocchio"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
