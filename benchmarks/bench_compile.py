"""Compile time and run time against the number of links: chains of 7, 14, 28, 56, 112 and
200 links (free-floating base, revolute joints).

    python benchmarks/bench_compile.py                # all sizes
    python benchmarks/bench_compile.py --quick        # 7 and 14 links
    python benchmarks/bench_compile.py --derivatives  # programs under nested derivatives only

Measures ``jax.jit(f).lower(...).compile()`` of forward dynamics and of a 100-step RK4 rollout,
and the run time per call (single sample) of inverse dynamics, forward dynamics and the
inertia matrix, to show how cost grows with the number of links. Writes
``benchmarks/results/compile.json``. With ``--derivatives``, the compile time of programs whose
derivatives are nested (the 7-joint arm: the gradient and the Hessian of a 20-step closed-loop
rollout; the gradient of a 150-step constrained rollout of the arm on a fixed base with its end
point held, whose constraint Jacobian and its rate differentiate the kinematics twice) and
their operation counts; writes ``benchmarks/results/compile_derivatives.json``.
"""

from __future__ import annotations

import argparse
from typing import Any

import common

common.configure(float64=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax.models import random_model  # noqa: E402
from sdjax.models.random import random_rotation  # noqa: E402

SIZES = (7, 14, 28, 56, 112, 200)
ROLLOUT_STEPS = 100


def chain(n: int) -> sdjax.Model:
    return random_model(1000 + n, n, chain_probability=1.0, prismatic_probability=0.0, end_point_probability=0.0)


def state_of(model: sdjax.Model) -> sdjax.State:
    rng = np.random.default_rng(model.num_joints)
    return sdjax.make_state(
        model,
        base_rotation=random_rotation(rng),
        base_angular_velocity=0.1 * rng.normal(size=3),
        q=rng.uniform(-0.5, 0.5, size=model.num_joints),
        qd=0.1 * rng.normal(size=model.num_joints),
    )


def run(sizes: tuple[int, ...], repeats: int) -> dict:
    rows = []
    for n in sizes:
        model, state = chain(n), state_of(chain(n))
        tau = jnp.zeros(n)
        acc = jnp.ones(6 + n)
        row: dict = {"links": n}
        jobs = {
            "forward_dynamics": (jax.jit(lambda m, s, t: sdjax.forward_dynamics(m, s, t)), (model, state, tau)),
            "inverse_dynamics": (
                jax.jit(lambda m, s, a: sdjax.inverse_dynamics(m, s, a[:6], a[6:])),
                (model, state, acc),
            ),
            "inertia_matrix": (jax.jit(sdjax.inertia_matrix), (model, state)),
            "rollout": (jax.jit(lambda m, s: sdjax.rollout(m, s, 0.001, ROLLOUT_STEPS).states.q[-1]), (model, state)),
        }
        for name, (jitted, args) in jobs.items():
            seconds, compiled = common.compile_seconds(jitted, *args)
            timing = common.time_call(lambda: compiled(*args), repeats=repeats, min_seconds=0.1)
            row[f"{name}_compile_seconds"] = seconds
            row[f"{name}_run_seconds"] = timing["min"]
            print(f"n={n:4d} {name:17s} compile {seconds:6.2f} s   run {timing['min'] * 1e6:10.1f} us", flush=True)
        row["inverse_dynamics_run_seconds_per_link"] = row["inverse_dynamics_run_seconds"] / n
        rows.append(row)
    return {"rollout_steps": ROLLOUT_STEPS, "results": rows}


def _operations(jaxpr: Any) -> int:
    """Equations of ``jaxpr``, those of its sub-programs counted at every call (as XLA, which
    inlines the calls, sees them)."""
    total = 0
    for equation in jaxpr.eqns:
        total += 1
        for param in equation.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    total += _operations(inner)
    return total


def nested_derivatives() -> dict:
    """Compile seconds and operation counts of programs under nested derivatives."""
    from sdjax import constraints

    arm = sdjax.models.free_flying_arm_7dof()
    start = sdjax.make_state(arm, q=0.3 * jnp.ones(7), base_angular_velocity=jnp.array([0.1, 0.2, -0.1]))

    def closed_loop(gain: Any) -> Any:
        law = lambda t, x: -gain * x.q - 2.0 * x.qd  # noqa: E731
        return jnp.sum(sdjax.rollout(arm, start, 0.005, 20, law).states.q[-1] ** 2)

    held = sdjax.edit_model(arm, base="fixed")
    held_start = sdjax.make_state(held, q=0.3 * jnp.ones(7))
    tip = sdjax.forward_kinematics(held, held_start).end_point_position[0]
    hold = (constraints.point_constraint(held.end_point_names[0], position=tip),)

    def constrained(link_mass: Any) -> Any:
        model = sdjax.edit_model(held, link_mass=link_mass)
        trajectory = constraints.constrained_rollout(model, held_start, 0.002, 150, jnp.full((150, 7), 0.2), hold)
        return jnp.sum(trajectory.states.q[-1] ** 2)

    jobs = {
        "closed-loop rollout, gradient": (jax.grad(closed_loop), jnp.full(7, 5.0)),
        "closed-loop rollout, Hessian": (jax.hessian(closed_loop), jnp.full(7, 5.0)),
        "constrained rollout, gradient": (jax.grad(constrained), held.link_mass),
    }
    rows = []
    for name, (function, argument) in jobs.items():
        operations = _operations(jax.make_jaxpr(function)(argument).jaxpr)
        seconds, compiled = common.compile_seconds(jax.jit(function), argument)
        instructions = compiled.as_text().count("\n")
        rows.append({"program": name, "compile_seconds": seconds, "operations": operations, "hlo_lines": instructions})
        print(
            f"{name:32s} compile {seconds:6.2f} s  {operations:7d} operations  {instructions:7d} HLO lines", flush=True
        )
    return {"results": rows}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--derivatives", action="store_true", help="programs under nested derivatives only")
    args = parser.parse_args(argv)
    if args.derivatives:
        payload = nested_derivatives()
        path = common.write_result("compile_derivatives", payload)
        rows = [[r["program"], r["compile_seconds"], r["operations"], r["hlo_lines"]] for r in payload["results"]]
        print(common.table(["program", "compile s", "operations", "optimised HLO lines"], rows))
        print(f"wrote {path}")
        return
    sizes = SIZES[:2] if args.quick else SIZES
    payload = run(sizes, repeats=2 if args.quick else 5)
    path = common.write_result("compile", payload)
    rows = [
        [
            r["links"],
            r["forward_dynamics_compile_seconds"],
            r["rollout_compile_seconds"],
            r["inverse_dynamics_run_seconds"] * 1e6,
            r["inverse_dynamics_run_seconds_per_link"] * 1e6,
            r["forward_dynamics_run_seconds"] * 1e6,
            r["inertia_matrix_run_seconds"] * 1e6,
        ]
        for r in payload["results"]
    ]
    print(common.table(["links", "FD compile s", "rollout compile s", "ID us", "ID us/link", "FD us", "H us"], rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
