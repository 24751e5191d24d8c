"""Rollout throughput: a batch of free-floating robots stepped with RK4 (dt 2 ms), sdjax
against MuJoCo's threaded C ``rollout`` module (RK4, as many threads as cores) and MuJoCo MJX
on the same model (exported with ``sdjax.io.mjcf.to_mjcf``: free joint + hinges, no contacts)
and the same initial states.

    python benchmarks/bench_rollout.py           # batch 1024, 1000 steps, float64 and float32
    python benchmarks/bench_rollout.py --quick   # batch 64, 20 steps

sdjax runs the whole rollout as one ``jit(vmap(rollout))`` (``lax.scan`` inside). MuJoCo's
``rollout.rollout`` steps every trajectory in C on a thread pool (one ``MjData`` per thread).
MJX is timed the way its users run it: ``jit(vmap(lax.scan(mjx.step)))`` over ``--mjx-steps``
steps (default 100), compiled apart, throughput per step (``mjx_worker.py``; ``--mjx-python
PATH`` times it in another environment, with the JAX its MJX release wants). Before timing is
reported, every engine's final joint angles are compared with sdjax's (same physics,
``max_q_difference_*``).
Throughput is ``batch * steps / seconds``. Writes ``benchmarks/results/rollout.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import common
import mjx_worker

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


def initial_states(model: sdjax.Model, batch: int, dtype) -> sdjax.State:
    """``batch`` initial states (leading axis, NumPy leaves) around the arm's reference pose."""
    rng = np.random.default_rng(0)
    draws = [(rng.normal(size=7), rng.normal(size=7), rng.normal(size=3)) for _ in range(batch)]
    q, qd, w = (np.stack(column) for column in zip(*draws))
    make = jax.vmap(lambda q, qd, w: sdjax.make_state(model, q=q, qd=qd, base_angular_velocity=w))
    # Built on the host in one program (per-state operations would each be a kernel launch on a
    # GPU); sdjax_rollout moves the batch to the default device once.
    with jax.default_device(jax.devices("cpu")[0]):
        states = jax.jit(make)(free_flying_arm_initial_q() + 0.1 * q, 0.2 * qd, 0.01 * w)
    return jax.tree.map(lambda x: np.asarray(x).astype(dtype), states)


def mujoco_states(model: sdjax.Model, states: sdjax.State) -> tuple[np.ndarray, np.ndarray]:
    """MuJoCo ``qpos``, ``qvel`` of each state of a batch (leading axis), computed once for both peers."""
    from sdjax.io.mjcf import mujoco_coordinates

    batch = states.q.shape[0]
    # On the host: on a GPU each sample's small array operations would be device round trips
    # (53 s for 16,384 states on an H200 machine).
    with jax.default_device(jax.devices("cpu")[0]):
        coords = [mujoco_coordinates(model, jax.tree.map(lambda x: x[k], states)) for k in range(batch)]
    return np.stack([c[0] for c in coords]), np.stack([c[1] for c in coords])


def sdjax_rollout(model, states, steps: int, repeats: int) -> dict:
    batch = jax.device_put(states)
    fn = jax.jit(jax.vmap(lambda s: sdjax.rollout(model, s, DT, steps).states.q[-1]))
    compile_s, compiled = common.compile_seconds(fn, batch)
    timing = common.time_call(lambda: compiled(batch), repeats=repeats, min_seconds=0.0)
    return {
        "compile_seconds": compile_s,
        "seconds": timing["min"],
        "median_seconds": timing["median"],
        "final_q": np.asarray(compiled(batch)),
    }


def mujoco_xml(model) -> str:
    """The MJCF both MuJoCo peers run (RK4, the benchmark's step)."""
    from sdjax.io.mjcf import to_mjcf

    return to_mjcf(model, timestep=DT, integrator="RK4")


def mujoco_model(model):
    import mujoco

    return mujoco.MjModel.from_xml_string(mujoco_xml(model))


def mujoco_rollout(model, coordinates, steps: int, repeats: int) -> dict:
    """MuJoCo's threaded C rollout (float64 only: MuJoCo computes in double) from ``coordinates``
    (``mujoco_states``)."""
    import mujoco
    from mujoco import rollout

    mj_model = mujoco_model(model)
    threads = os.cpu_count() or 1
    datas = [mujoco.MjData(mj_model) for _ in range(threads)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    qpos, qvel = coordinates
    initial = np.zeros((len(qpos), mujoco.mj_stateSize(mj_model, spec)))
    scratch = mujoco.MjData(mj_model)
    for k in range(len(qpos)):
        scratch.qpos[:], scratch.qvel[:] = qpos[k], qvel[k]
        mujoco.mj_getState(mj_model, scratch, initial[k], spec)
    out = np.zeros((len(qpos), steps, initial.shape[1]))
    call = lambda: rollout.rollout(mj_model, datas, initial, nstep=steps, state=out)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    # FULLPHYSICS state = [time, qpos, qvel, ...]; joint angles follow the free joint's 7.
    return {"seconds": min(samples), "threads": threads, "final_qpos": out[:, -1, 1 : 1 + mj_model.nq]}


def mjx_rollout(model, coordinates, steps: int, dtype_name: str, python: str | None) -> dict:
    """MJX's rollout (:func:`mjx_worker.mjx_rollout`) from ``coordinates`` (``mujoco_states``):
    in this process, or, with ``python``, in that interpreter's environment."""
    if python is None:
        return mjx_worker.mjx_rollout(mujoco_xml(model), *coordinates, steps, dtype_name)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder)
        (path / "model.xml").write_text(mujoco_xml(model))
        np.savez(path / "coordinates.npz", qpos=coordinates[0], qvel=coordinates[1])
        worker = pathlib.Path(__file__).with_name("mjx_worker.py")
        proc = subprocess.run([python, str(worker), folder, str(steps), dtype_name], stdout=subprocess.PIPE, text=True)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(
                f"the MJX worker ({python}) failed (exit status {proc.returncode}; its messages are above)"
            )
        return {**json.loads(lines[-1][len("RESULT ") :]), "final_qpos": np.load(path / "final_qpos.npy")}


def run(batch: int, steps: int, repeats: int, dtypes: list[str], mjx_steps: int, mjx_python: str | None) -> dict:
    model64 = free_flying_arm_7dof()
    rows = []
    for dtype_name in dtypes:
        dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
        model = model64.astype(dtype)
        states = initial_states(model64, batch, dtype)
        sd = sdjax_rollout(model, states, steps, repeats)
        row = dict(
            model=model.name,
            dtype=dtype_name,
            batch=batch,
            steps=steps,
            dt=DT,
            sdjax_seconds=sd["seconds"],
            sdjax_steps_per_second=batch * steps / sd["seconds"],
            sdjax_compile_seconds=sd["compile_seconds"],
        )
        print(
            f"sdjax {dtype_name} batch {batch}: {row['sdjax_steps_per_second']:,.0f} steps/s (compile {sd['compile_seconds']:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
        try:
            coordinates = mujoco_states(model64, states)
            mj = mujoco_rollout(model64, coordinates, steps, repeats)
            row.update(
                mujoco_threads=mj["threads"],
                mujoco_seconds=mj["seconds"],
                mujoco_steps_per_second=batch * steps / mj["seconds"],
            )
            row["ratio_to_mujoco"] = row["sdjax_steps_per_second"] / row["mujoco_steps_per_second"]
            print(
                f"MuJoCo rollout ({mj['threads']} threads): {row['mujoco_steps_per_second']:,.0f} steps/s",
                file=sys.stderr,
                flush=True,
            )
            # MuJoCo orders joints depth-first: the identity for this chain.
            row["max_q_difference_mujoco"] = float(np.max(np.abs(mj["final_qpos"][:, 7:] - sd["final_q"])))
            # Same physics or no comparison: float64 RK4 of both engines agrees to round-off
            # (~1e-16 over 1000 steps); float32 is reported, not gated.
            if dtype_name == "float64" and row["max_q_difference_mujoco"] > 1e-8:
                sys.exit(
                    f"MuJoCo and sdjax disagree after {steps} steps ({row['max_q_difference_mujoco']:.1e}); not reporting"
                )
            if mjx_steps <= 0:
                raise ImportError("MJX skipped (--mjx-steps 0)")
            mx = mjx_rollout(model64, coordinates, mjx_steps, dtype_name, mjx_python)
            row.update(
                mjx_jax=mx["jax"],
                mjx_mujoco=mx["mujoco"],
                mjx_steps_timed=mjx_steps,
                mjx_seconds_per_step=mx["seconds_per_step"],
                mjx_steps_per_second=batch / mx["seconds_per_step"],
                mjx_compile_seconds=mx["compile_seconds"],
            )
            row["ratio_to_mjx"] = row["sdjax_steps_per_second"] / row["mjx_steps_per_second"]
            short = sdjax_rollout(model, states, mjx_steps, 1)["final_q"]
            row["max_q_difference_mjx"] = float(np.max(np.abs(mx["final_qpos"][:, 7:] - short)))
        except ImportError as error:
            print(f"peer missing: {error}", file=sys.stderr)
        rows.append(row)
        print({k: (f"{v:,.4g}" if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    return {"results": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--mjx-steps",
        type=int,
        default=100,
        help="MJX steps in its timed scan (default 100; 0 skips MJX, whose CPU compile and run can take many minutes)",
    )
    parser.add_argument(
        "--mjx-python",
        help="a Python interpreter whose environment has MJX (and its own JAX) to time MJX in (default: this one)",
    )
    parser.add_argument("--batch", type=int, help="robots per batch (default 1024 on a CPU, 16384 on a GPU)")
    parser.add_argument("--steps", type=int, help="RK4 steps per rollout (default 1000)")
    parser.add_argument("--dtypes", help="comma-separated precisions (default float64,float32; float32 on a GPU)")
    parser.add_argument("--output", help="result name (default rollout, or rollout_gpu on a GPU)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    gpu = jax.default_backend() == "gpu"
    if args.quick:
        batch, steps, repeats = 64, 20, 1
        args.mjx_steps = min(args.mjx_steps, 5)
    else:
        batch, steps, repeats = (16384 if gpu else 1024), 1000, 3
    batch, steps = args.batch or batch, args.steps or steps
    if args.worker:  # one precision, in this process
        payload = run(batch, steps, repeats, [os.environ["SDJAX_BENCH_DTYPE"]], args.mjx_steps, args.mjx_python)
        print("RESULT " + json.dumps(payload, default=common._json_default))
        return
    results = []
    dtypes = args.dtypes.split(",") if args.dtypes else (["float32"] if gpu else ["float64", "float32"])
    if not set(dtypes) <= {"float64", "float32"}:
        parser.error(f"unknown dtype(s) {sorted(set(dtypes) - {'float64', 'float32'})}: choose from float64, float32")
    for dtype in dtypes:
        command = [
            sys.executable,
            __file__,
            "--worker",
            "--mjx-steps",
            str(args.mjx_steps),
            *(["--mjx-python", args.mjx_python] if args.mjx_python else []),
            "--batch",
            str(batch),
            "--steps",
            str(steps),
        ] + (["--quick"] if args.quick else [])
        # The worker's progress (stderr) goes straight to ours: it is still seen if this run is stopped.
        proc = subprocess.run(
            command, env={**os.environ, "SDJAX_BENCH_DTYPE": dtype}, stdout=subprocess.PIPE, text=True
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            sys.exit(f"{dtype} run failed (exit status {proc.returncode}; its messages are above)")
        results += json.loads(lines[-1][len("RESULT ") :])["results"]
    payload = {"results": results}
    path = common.write_result(args.output or ("rollout_gpu" if gpu else "rollout"), payload)
    rows = [
        [
            r["dtype"],
            r["batch"],
            r["steps"],
            r["sdjax_steps_per_second"],
            r.get("mujoco_steps_per_second", ""),
            r.get("mjx_steps_per_second", ""),
            r.get("ratio_to_mujoco", ""),
        ]
        for r in payload["results"]
    ]
    print(
        common.table(
            ["dtype", "batch", "steps", "sdjax steps/s", "MuJoCo rollout steps/s", "MJX steps/s", "x MuJoCo"], rows
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
