"""Forward dynamics, inverse dynamics and the inertia matrix: sdjax (jit + vmap) at batch 1,
64, 1024, 8192 against Pinocchio called per sample from Python and Pinocchio's threaded batch
functions (``abaInParallel``, ``rneaInParallel`` on as many threads as cores), and the forward
dynamics of the other JAX engines, jaxsim and adam (``jit + vmap``, float64; :mod:`jax_peers`), on
the same models and states, in one run. Before any timing, each peer's forward dynamics is checked
against sdjax's on the benchmark's own states (``max_relative_difference`` in the results); a
peer that cannot build or evaluate a model gets a ``not_timed`` row with its error.

    python benchmarks/bench_dynamics.py            # float64 and float32, CPU
    python benchmarks/bench_dynamics.py --quick    # small repeat counts (a smoke run)

Writes ``benchmarks/results/dynamics.json`` (``dynamics_gpu.json`` on a GPU, where the batch
goes up to 1e6 in float32) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys

import common

common.configure(float64=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jax_peers  # noqa: E402

import sdjax  # noqa: E402
from sdjax import batch_kernel  # noqa: E402
from sdjax.models import free_flying_arm_7dof, random_model, spacedyn_sample  # noqa: E402
from sdjax.models.random import random_rotation  # noqa: E402

MODELS = {
    "free_flying_arm_7dof": free_flying_arm_7dof,
    "spacedyn_sample": spacedyn_sample,
    # A 30-link tree with branches and prismatic joints (36 DOF): how the engines scale.
    "random_tree_30": lambda: random_model(3, 30),
    # The same size, bushier (links 9 deep at most, against 17; as a humanoid or a multi-arm servicer):
    # the batch kernel solves it by the sparse factorisation that follows the tree.
    "random_tree_30_bushy": lambda: random_model(3, 30, chain_probability=0.25),
}
#: Pinocchio's threaded batch functions (Pinocchio 4.1 has no crbaInParallel).
PINOCCHIO_PARALLEL = {"forward_dynamics": "abaInParallel", "inverse_dynamics": "rneaInParallel"}
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


#: Engine labels of the sdjax rows: the default path, and the XLA path alone.
SDJAX_DEFAULT = "sdjax (jit + vmap)"
SDJAX_XLA = "sdjax (jit + vmap, XLA path)"


def sdjax_functions(model: sdjax.Model):
    """Per-sample functions of (state, tau, base_acc, qdd); vmapped over all four."""
    return {
        "forward_dynamics": lambda s, tau, a, qdd: jnp.concatenate(sdjax.forward_dynamics(model, s, tau)),
        "inverse_dynamics": lambda s, tau, a, qdd: jnp.concatenate(sdjax.inverse_dynamics(model, s, a, qdd)),
        "inertia_matrix": lambda s, tau, a, qdd: sdjax.inertia_matrix(model, s),
    }


class PinocchioPeer:
    """Pinocchio on the same model, states and inputs, in Pinocchio's coordinates (see
    :mod:`sdjax.io.pinocchio`: ``nu_pin = T nu_sd``, ``a_pin = T a_sd + Tdot nu_sd``)."""

    def __init__(self, model: sdjax.Model, states: list, inputs: dict):
        import pinocchio as pin

        from sdjax.io.pinocchio import pinocchio_acceleration_offset, pinocchio_coordinates, to_pinocchio

        self.pin = pin
        twin = to_pinocchio(model)
        self.pm, self.data = twin.model, twin.model.createData()
        coords = [pinocchio_coordinates(twin, s) for s in states]
        self.t = [c[2] for c in coords]
        self.q = [c[0] for c in coords]
        self.v = [c[1] for c in coords]
        self.tdot_nu = [pinocchio_acceleration_offset(s) for s in states]
        self.tau = [np.concatenate([np.zeros(6), twin.permutation @ t]) for t in inputs["tau"]]
        self.acc = [
            t @ np.concatenate([a, b]) + td
            for t, a, b, td in zip(self.t, inputs["base_acc"], inputs["qdd"], self.tdot_nu)
        ]
        self.pool = pin.ModelPool(self.pm, os.cpu_count() or 1)

    def loops(self):
        """Per-sample calls, the way a Python user writes them."""
        pin, pm, data = self.pin, self.pm, self.data
        return {
            "forward_dynamics": lambda k: pin.aba(pm, data, self.q[k], self.v[k], self.tau[k]),
            "inverse_dynamics": lambda k: pin.rnea(pm, data, self.q[k], self.v[k], self.acc[k]),
            "inertia_matrix": lambda k: pin.crba(pm, data, self.q[k]),
        }

    def sdjax_accelerations(self, k: int) -> np.ndarray:
        """Pinocchio's forward dynamics of sample ``k`` in sdjax's coordinates."""
        a_pin = self.pin.aba(self.pm, self.data, self.q[k], self.v[k], self.tau[k])
        return self.t[k].T @ (a_pin - self.tdot_nu[k])

    def parallel(self, algorithm: str, batch: int):
        """A call of Pinocchio's threaded batch function on ``batch`` samples (as many threads
        as cores), with its inputs laid out as it wants them (column-major, one column each)."""
        count = len(self.q)
        columns = lambda xs: np.asfortranarray(np.stack([xs[k % count] for k in range(batch)], axis=1))
        q, v = columns(self.q), columns(self.v)
        third = columns(self.tau if algorithm == "forward_dynamics" else self.acc)
        fn = getattr(self.pin, PINOCCHIO_PARALLEL[algorithm])
        threads = os.cpu_count() or 1
        return lambda: fn(threads, self.pool, q, v, third)


#: Largest difference of a timed batch's values from the per-sample float64 reference,
#: relative to the reference's largest entry, by precision and algorithm. float64 paths agree to
#: ~1e-13 (1e-9 leaves room for the kernel's reassociated arithmetic). float32, measured on the
#: benchmark's models and states: inverse dynamics and ``H`` 2.7e-7..7.5e-7, forward dynamics
#: up to 2.8e-4 (the arm's ``H`` has condition numbers up to 6e4 on these states). An H200's
#: default TF32 products (10-bit mantissas) made ``H`` wrong by 7e-5 and 1 in 16 of the arm's
#: accelerations NaN; these bounds catch both.
TOLERANCE = {"float64": 1e-9, "float32": 1e-5, ("float32", "forward_dynamics"): 1e-3}


def batch_difference(values: jax.Array | np.ndarray, reference: np.ndarray, rows: int = 4096) -> float:
    """Max difference of a batch's first and last ``rows`` samples from ``reference`` (the
    ``d`` distinct samples the batch repeats, row ``k`` being sample ``k mod d``), relative to
    the reference's largest entry; NaN where a value is not finite. The rows are taken where
    ``values`` lives, so only they reach the host (a whole batch of ``H`` for the 36-DOF tree at
    10^6 samples is 5 GB)."""
    batch, distinct = values.shape[0], reference.shape[0]
    index = np.unique(np.concatenate([np.arange(min(rows, batch)), np.arange(max(batch - rows, 0), batch)]))
    chosen = np.asarray(values[index]).astype(np.float64)
    if not np.all(np.isfinite(chosen)):
        return float("nan")
    return float(np.max(np.abs(chosen - reference[index % distinct])) / np.max(np.abs(reference)))


def timed_row(
    compiled,
    args: tuple,
    labels: dict,
    difference: float,
    compile_s: float,
    repeats: int,
    min_seconds: float,
    pin_rate: dict,
) -> dict:
    """Times ``compiled(*args)`` (a batch, already checked: ``difference`` from the float64
    reference) and returns its result row, ``labels`` (model, engine, algorithm, dtype, batch)
    first, with the ratio to Pinocchio's per-sample loop where that was timed; prints it."""
    batch = labels["batch"]
    t = common.time_call(lambda: compiled(*args), repeats=repeats, min_seconds=min_seconds)
    row = dict(
        labels,
        seconds_per_call=t["min"],
        median_seconds_per_call=t["median"],
        evals_per_second=batch / t["min"],
        compile_seconds=compile_s,
        max_relative_difference_to_float64=difference,
    )
    if labels["algorithm"] in pin_rate:
        row["ratio_to_pinocchio"] = row["evals_per_second"] / pin_rate[labels["algorithm"]]
    print(
        f"{labels['model']:22s} {labels['algorithm']:17s} {labels['dtype']} B={batch:6d} {labels['engine']}: "
        f"{row['evals_per_second']:12,.0f} evals/s"
        + (f"  ({row['ratio_to_pinocchio']:.2f}x Pinocchio)" if "ratio_to_pinocchio" in row else ""),
        flush=True,
    )
    return row


def jax_peer_rows(
    model_name: str,
    model: sdjax.Model,
    host_states: list,
    tau: np.ndarray,
    reference: np.ndarray,
    batches: list[int],
    repeats: int,
    min_seconds: float,
    pin_rate: dict,
) -> list[dict]:
    """The other JAX engines' forward dynamics (:mod:`jax_peers`: jaxsim, adam), float64,
    ``jit(vmap)`` at each batch, checked against ``reference`` (sdjax's per-sample values on the
    distinct ``host_states`` and torques ``tau``) before timing. A peer that is not installed,
    or cannot build or evaluate this model, gets a row saying why instead of a rate."""
    distinct = len(host_states)
    rows = []
    for name, build in jax_peers.PEERS.items():
        try:
            engine, per_sample = build(model)
            fd = jax.jit(jax.vmap(per_sample))
            check = fd(
                *jax_peers.inputs(common.batch_of(lambda k: host_states[k], distinct, distinct), jnp.asarray(tau))
            )
            difference = batch_difference(check, reference)
        except Exception as error:  # (a peer's own failure is a result: reported, not fatal)
            reason = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
            print(f"{model_name}: {name} not timed ({reason})", file=sys.stderr, flush=True)
            rows.append(
                dict(model=model_name, engine=name, algorithm="forward_dynamics", dtype="float64", not_timed=reason)
            )
            continue
        print(f"{model_name}: {engine} vs sdjax forward dynamics, max relative difference {difference:.1e}", flush=True)
        if not difference <= TOLERANCE["float64"]:
            sys.exit(f"{model_name}: {engine} disagrees with sdjax ({difference:.1e}); not timing")
        for batch in [b for b in batches if b >= 64]:
            args = jax_peers.inputs(
                common.batch_of(lambda k: host_states[k], batch, distinct),
                jnp.resize(jnp.asarray(tau), (batch, tau.shape[1])),
            )
            compile_s, compiled = common.compile_seconds(fd, *args)
            labels = dict(model=model_name, engine=engine, algorithm="forward_dynamics", dtype="float64", batch=batch)
            rows.append(timed_row(compiled, args, labels, difference, compile_s, repeats, min_seconds, pin_rate))
    return rows


def run(
    batches: list[int],
    dtypes: list[str],
    repeats: int,
    min_seconds: float,
    models: list[str] | None = None,
    algorithms: tuple[str, ...] = ALGORITHMS,
) -> dict:
    results = []
    for model_name, build in MODELS.items():
        if models is not None and model_name not in models:
            continue
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
            peer = PinocchioPeer(model64, host_states, inputs)
        except ImportError:
            peer = None
            print("pinocchio not installed: sdjax only", file=sys.stderr)
        pin_rate = {}
        if peer is not None:
            # Same answers first: Pinocchio's accelerations against sdjax's on these states.
            fd = jax.jit(jax.vmap(sdjax_functions(model64)["forward_dynamics"]))
            states = common.batch_of(lambda k: host_states[k], 64, distinct)
            ours = np.asarray(fd(states, jnp.asarray(inputs["tau"][:64]), None, None))
            theirs = np.stack([peer.sdjax_accelerations(k) for k in range(64)])
            difference = float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))
            print(
                f"{model_name}: Pinocchio vs sdjax forward dynamics, max relative difference {difference:.1e}",
                flush=True,
            )
            if difference > 1e-8:
                sys.exit(f"{model_name}: engines disagree ({difference:.1e}); not timing")
            loops = peer.loops()
            for algo in algorithms:
                t = common.time_python_loop(loops[algo], distinct, repeats=repeats)
                pin_rate[algo] = 1.0 / t["min"]
                results.append(
                    dict(
                        model=model_name,
                        engine="pinocchio (per-sample Python)",
                        algorithm=algo,
                        dtype="float64",
                        batch=1,
                        seconds_per_eval=t["min"],
                        evals_per_second=1.0 / t["min"],
                        median_seconds_per_eval=t["median"],
                        max_relative_difference=difference,
                    )
                )
            for algo in [a for a in PINOCCHIO_PARALLEL if a in algorithms]:
                for batch in batches:
                    if batch < 64:
                        continue
                    t = common.time_call(peer.parallel(algo, batch), repeats=repeats, min_seconds=min_seconds)
                    results.append(
                        dict(
                            model=model_name,
                            engine=f"pinocchio {PINOCCHIO_PARALLEL[algo]} ({os.cpu_count()} threads)",
                            algorithm=algo,
                            dtype="float64",
                            batch=batch,
                            seconds_per_call=t["min"],
                            evals_per_second=batch / t["min"],
                            median_seconds_per_call=t["median"],
                        )
                    )
                    print(
                        f"{model_name:22s} {algo:17s} pinocchio {PINOCCHIO_PARALLEL[algo]} B={batch:6d}: {batch / t['min']:12,.0f} evals/s",
                        flush=True,
                    )
        # The default path (the compiled kernel of sdjax.batch_kernel for large batches when
        # Numba is installed), then, for comparison in the same run, every algorithm on the
        # XLA path alone (SDJAX_KERNEL=jax) at the batches the kernel would take.
        paths = [(SDJAX_DEFAULT, "auto", algorithms, batches)]
        if batch_kernel.available():
            paths.append((SDJAX_XLA, "jax", algorithms, [b for b in batches if b >= batch_kernel.MIN_BATCH]))
        # The reference every timed batch is checked against: float64 values of the distinct
        # samples, per sample (no batch path), on the default device.
        reference = {}
        for algo in algorithms:
            one = jax.jit(sdjax_functions(model64)[algo])
            reference[algo] = np.stack(
                [
                    np.asarray(
                        one(host_states[k], *(jnp.asarray(inputs[key][k]) for key in ("tau", "base_acc", "qdd")))
                    )
                    for k in range(distinct)
                ]
            )
        if "forward_dynamics" in algorithms and "float64" in dtypes:
            results += jax_peer_rows(
                model_name,
                model64,
                host_states,
                inputs["tau"],
                reference["forward_dynamics"],
                batches,
                repeats,
                min_seconds,
                pin_rate,
            )
        for engine, kernel, algorithms, path_batches in paths:
            os.environ[batch_kernel.KERNEL_ENV] = kernel
            jax.clear_caches()  # (the path is chosen when a function is traced)
            for dtype_name in dtypes:
                dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
                model = model64.astype(dtype)
                functions = sdjax_functions(model)
                for batch in path_batches:
                    states = common.batch_of(
                        lambda k: jax.tree.map(lambda x: x.astype(dtype), host_states[k]), batch, distinct
                    )
                    args = (states,) + tuple(
                        jnp.resize(jnp.asarray(inputs[key], dtype), (batch,) + inputs[key].shape[1:])
                        for key in ("tau", "base_acc", "qdd")
                    )
                    for algo in algorithms:
                        compile_s, compiled = common.compile_seconds(jax.jit(jax.vmap(functions[algo])), *args)
                        difference = batch_difference(compiled(*args), reference[algo])
                        if not difference <= TOLERANCE.get((dtype_name, algo), TOLERANCE[dtype_name]):
                            sys.exit(
                                f"{model_name} {algo} {dtype_name} B={batch} ({engine}): the batch differs from "
                                f"the per-sample float64 values by {difference:.1e} (relative); not timing"
                            )
                        labels = dict(model=model_name, engine=engine, algorithm=algo, dtype=dtype_name, batch=batch)
                        results.append(
                            timed_row(compiled, args, labels, difference, compile_s, repeats, min_seconds, pin_rate)
                        )
        os.environ.pop(batch_kernel.KERNEL_ENV, None)
    return {"results": results}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats and batches (smoke run)")
    parser.add_argument("--models", help=f"comma-separated subset of {','.join(MODELS)}")
    parser.add_argument("--algorithms", help=f"comma-separated subset of {','.join(ALGORITHMS)}")
    parser.add_argument("--batches", help="comma-separated batch sizes (default: by device)")
    parser.add_argument("--dtypes", help="comma-separated precisions (default float64,float32; float32 on a GPU)")
    parser.add_argument("--output", help="result name (default dynamics, or dynamics_gpu on a GPU)")
    args = parser.parse_args(argv)
    models = args.models.split(",") if args.models else None
    algorithms = tuple(args.algorithms.split(",")) if args.algorithms else ALGORITHMS
    for name, known, what in ((models or [], MODELS, "model"), (algorithms, ALGORITHMS, "algorithm")):
        unknown = sorted(set(name) - set(known))
        if unknown:
            parser.error(f"unknown {what}(s) {unknown}: choose from {sorted(known)}")
    gpu = jax.default_backend() == "gpu"
    if args.quick:
        batches, repeats, min_seconds = [1, 64], 2, 0.02
    elif gpu:
        batches, repeats, min_seconds = [1, 1024, 16384, 131072, 1048576], 5, 0.2
    else:
        batches, repeats, min_seconds = [1, 64, 1024, 8192], 7, 0.3
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    dtypes = args.dtypes.split(",") if args.dtypes else (["float32"] if gpu else ["float64", "float32"])
    if not set(dtypes) <= {"float64", "float32"}:
        parser.error(f"unknown dtype(s) {sorted(set(dtypes) - {'float64', 'float32'})}: choose from float64, float32")
    payload = run(batches, dtypes, repeats, min_seconds, models, algorithms)
    path = common.write_result(args.output or ("dynamics_gpu" if gpu else "dynamics"), payload)
    rows = [
        [
            r["model"],
            r["engine"],
            r["algorithm"],
            r["dtype"],
            r["batch"],
            r["evals_per_second"],
            r.get("ratio_to_pinocchio", ""),
        ]
        for r in payload["results"]
        if "not_timed" not in r
    ]
    for r in payload["results"]:
        if "not_timed" in r:
            print(f"not timed: {r['engine']} on {r['model']} ({r['not_timed']})")
    print(common.table(["model", "engine", "algorithm", "dtype", "batch", "evals/s", "x Pinocchio per sample"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
