"""Rollout throughput: a batch of free-floating robots stepped with RK4 (1000 steps), sdjax
against MuJoCo MJX on the same model (exported with ``sdjax.io.mjcf.to_mjcf``: free joint +
hinges, no contacts) and the same initial states.

    python benchmarks/bench_rollout.py           # batch 1024, 1000 steps, float64 and float32
    python benchmarks/bench_rollout.py --quick   # batch 64, 20 steps

sdjax runs the whole rollout as one ``jit(vmap(rollout))`` (``lax.scan`` inside). MJX's
``step`` is compiled once as ``jit(vmap(mjx.step))`` and called once per step from Python
(compiling MJX's RK4 step inside a scan takes far longer; the per-call dispatch cost,
~0.1 ms, is negligible at this batch). On this CPU one batched MJX step takes minutes, so
MJX is timed over ``--mjx-steps`` steps (default 2) and its throughput is per step, which is
what a longer rollout would repeat; both engines are also compared on the state after those
steps (same physics). Throughput is ``batch * steps / seconds``. Writes
``benchmarks/results/rollout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import common

# MJX follows JAX's x64 flag for its internal constants, so each precision runs in its own
# process (see main()).
common.configure(float64=os.environ.get("SDJAX_BENCH_DTYPE", "float64") == "float64")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax.models import free_flying_arm_7dof  # noqa: E402
from sdjax.models.builtin import free_flying_arm_initial_q  # noqa: E402

DT = 0.002


def initial_states(model: sdjax.Model, batch: int, dtype) -> list[sdjax.State]:
    rng = np.random.default_rng(0)
    q0 = free_flying_arm_initial_q()
    return [
        jax.tree.map(
            lambda x: x.astype(dtype),
            sdjax.make_state(model, q=q0 + 0.1 * rng.normal(size=7), qd=0.2 * rng.normal(size=7), base_angular_velocity=0.01 * rng.normal(size=3)),
        )
        for _ in range(batch)
    ]


def sdjax_rollout(model, states, steps: int, repeats: int) -> dict:
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    fn = jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, DT, steps).states.q[-1]))
    compile_s, compiled = common.compile_seconds(fn, batch)
    timing = common.time_call(lambda: compiled(batch), repeats=repeats, min_seconds=0.0)
    return {"compile_seconds": compile_s, "seconds": timing["min"], "median_seconds": timing["median"], "final_q": np.asarray(compiled(batch))}


def mjx_rollout(model, states, steps: int, dtype) -> dict:
    import mujoco
    from mujoco import mjx

    from sdjax.io.mjcf import mujoco_coordinates, to_mjcf

    mj_model = mujoco.MjModel.from_xml_string(to_mjcf(model, timestep=DT, integrator="RK4"))
    mx = mjx.put_model(mj_model)
    mx = jax.tree.map(lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x, mx)
    coords = [mujoco_coordinates(model, s) for s in states]
    qpos = jnp.asarray(np.stack([c[0] for c in coords]), dtype)
    qvel = jnp.asarray(np.stack([c[1] for c in coords]), dtype)
    data0 = mjx.make_data(mx)
    data0 = jax.tree.map(lambda x: x.astype(dtype) if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating) else x, data0)
    data = jax.vmap(lambda p, v: data0.replace(qpos=p, qvel=v))(qpos, qvel)
    step = jax.jit(jax.vmap(mjx.step, in_axes=(None, 0)))
    compile_s, compiled = common.compile_seconds(step, mx, data)
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        data = jax.block_until_ready(compiled(mx, data))
        samples.append(time.perf_counter() - start)
    return {"compile_seconds": compile_s, "seconds_per_step": min(samples), "final_qpos": np.asarray(data.qpos)}


def run(batch: int, steps: int, repeats: int, dtypes: list[str], mjx_steps: int) -> dict:
    model64 = free_flying_arm_7dof()
    rows = []
    for dtype_name in dtypes:
        dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
        model = model64.astype(dtype)
        states = initial_states(model64, batch, dtype)
        sd = sdjax_rollout(model, states, steps, repeats)
        row = dict(model=model.name, dtype=dtype_name, batch=batch, steps=steps, dt=DT, sdjax_seconds=sd["seconds"], sdjax_steps_per_second=batch * steps / sd["seconds"], sdjax_compile_seconds=sd["compile_seconds"])
        try:
            mj = mjx_rollout(model64, states, mjx_steps, dtype)
            row.update(mjx_steps_timed=mjx_steps, mjx_seconds_per_step=mj["seconds_per_step"], mjx_steps_per_second=batch / mj["seconds_per_step"], mjx_compile_seconds=mj["compile_seconds"])
            row["ratio_to_mjx"] = row["sdjax_steps_per_second"] / row["mjx_steps_per_second"]
            # Same physics: joint angles after the MJX steps (MuJoCo orders joints
            # depth-first, the identity for this chain).
            short = sdjax_rollout(model, states, mjx_steps, 1)["final_q"]
            row["max_q_difference_after_mjx_steps"] = float(np.max(np.abs(mj["final_qpos"][:, 7:] - short)))
        except ImportError:
            print("mujoco-mjx not installed: sdjax only", file=sys.stderr)
        rows.append(row)
        print({k: (f"{v:,.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return {"results": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--mjx-steps", type=int, default=2, help="MJX steps to time (default 2)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    if args.quick:
        batch, steps, repeats = 64, 20, 1
    else:
        batch, steps, repeats = (16384 if gpu else 1024), 1000, 3
    if args.worker:  # one precision, in this process
        payload = run(batch, steps, repeats, [os.environ["SDJAX_BENCH_DTYPE"]], args.mjx_steps)
        print("RESULT " + json.dumps(payload, default=common._json_default))
        return
    results = []
    for dtype in ["float32"] if gpu else ["float64", "float32"]:
        command = [sys.executable, __file__, "--worker", "--mjx-steps", str(args.mjx_steps)] + (["--quick"] if args.quick else [])
        proc = subprocess.run(command, env={**os.environ, "SDJAX_BENCH_DTYPE": dtype}, capture_output=True, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"{dtype} run failed:\n{proc.stderr[-3000:]}")
        results += json.loads(lines[-1][len("RESULT "):])["results"]
    payload = {"results": results}
    path = common.write_result("rollout_gpu" if gpu else "rollout", payload)
    rows = [[r["dtype"], r["batch"], r["steps"], r["sdjax_steps_per_second"], r.get("mjx_steps_per_second", ""), r.get("ratio_to_mjx", "")] for r in payload["results"]]
    print(common.table(["dtype", "batch", "steps", "sdjax steps/s", "MJX steps/s", "x MJX"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
