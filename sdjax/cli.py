"""Command line: ``python -m sdjax demo`` (also installed as the ``sdjax`` console script).

The command line is an application, so unlike the library it enables JAX's float64 mode
(``--float32`` keeps single precision).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    import jax
    import jax.numpy as jnp

    if not args.float32:
        jax.config.update("jax_enable_x64", True)
    import sdjax
    from sdjax.models import BUILTIN_MODELS
    from sdjax.models.builtin import free_flying_arm_initial_q

    model = BUILTIN_MODELS[args.model]()
    n = model.num_joints
    if args.model == "spacedyn_sample":
        # sample_v1r2.m: PD towards q_des from rest at q = 0, kp = kd = 10.
        target = jnp.asarray([0.3, 0.2, 0.1, 0.6, 0.5, 0.4], model.dtype)
        start_q = np.zeros(n)
        kp, kd = jnp.full(n, 10.0, model.dtype), jnp.full(n, 10.0, model.dtype)
    else:
        start_q = free_flying_arm_initial_q()
        target = jnp.asarray(start_q + 0.3, model.dtype)
        # Gains scaled by each joint's effective inertia (diagonal of the generalized
        # inertia H*): a critically damped 1 rad/s response per joint.
        inertia = jnp.diagonal(sdjax.generalized_inertia_matrix(model, sdjax.make_state(model, q=start_q)))
        kp, kd = inertia * 1.0, inertia * 2.0

    def pd_control(t, state):
        return kp * (target - state.q) - kd * state.qd

    state0 = sdjax.make_state(model, q=start_q)
    steps = int(round(args.duration / args.dt))
    simulate = jax.jit(lambda m, s: sdjax.rollout(m, s, args.dt, steps, pd_control))
    t_start = time.perf_counter()
    compiled = simulate.lower(model, state0).compile()
    t_compiled = time.perf_counter()
    trajectory = jax.block_until_ready(compiled(model, state0))
    t_run = time.perf_counter() - t_compiled

    first = jax.tree.map(lambda x: x[0], trajectory.states)
    last = jax.tree.map(lambda x: x[-1], trajectory.states)
    p0, p1 = sdjax.linear_momentum(model, first), sdjax.linear_momentum(model, last)
    l0, l1 = sdjax.angular_momentum(model, first), sdjax.angular_momentum(model, last)
    com0, com1 = sdjax.center_of_mass(model, first), sdjax.center_of_mass(model, last)
    relative = np.asarray(sdjax.quat_multiply(last.base_quaternion, sdjax.quat_conjugate(first.base_quaternion)))
    attitude_change = 2.0 * np.degrees(np.arctan2(np.linalg.norm(relative[:3]), abs(relative[3])))
    lines = [
        f"sdjax {sdjax.__version__} demo: free-floating {model.name} ({n} joints, {model.num_end_points} end points, "
        f"{float(model.total_mass):.1f} kg), {jnp.dtype(model.dtype).name}",
        f"  {steps} RK4 steps of {args.dt} s ({args.duration} s), joint PD control, no gravity",
        f"  compile {t_compiled - t_start:.2f} s, run {t_run * 1e3:.1f} ms ({steps / t_run:,.0f} steps/s)",
        f"  final q      [rad|m]: {np.array2string(np.asarray(last.q), precision=4)}",
        f"  target q     [rad|m]: {np.array2string(np.asarray(target), precision=4)}",
        f"  base moved {np.linalg.norm(np.asarray(last.base_position - first.base_position)):.4f} m, "
        f"turned {attitude_change:.3f} deg (reaction to the arm motion)",
        f"  centre of mass drift {np.linalg.norm(np.asarray(com1 - com0)):.2e} m",
        f"  momentum drift: linear {np.linalg.norm(np.asarray(p1 - p0)):.2e} kg m/s, "
        f"angular {np.linalg.norm(np.asarray(l1 - l0)):.2e} kg m^2/s (started at rest: both conserved at zero)",
    ]
    print("\n".join(lines))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sdjax`` and the ``sdjax`` console script."""
    from sdjax.models import BUILTIN_MODELS

    parser = argparse.ArgumentParser(prog="sdjax", description="Differentiable dynamics of space and mobile robots.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="simulate a built-in free-floating robot and print a summary")
    demo.add_argument("--model", choices=sorted(BUILTIN_MODELS), default="spacedyn_sample")
    demo.add_argument("--duration", type=float, default=20.0, help="simulated time, s (default 20)")
    demo.add_argument("--dt", type=float, default=0.01, help="RK4 step, s (default 0.01)")
    demo.add_argument("--float32", action="store_true", help="single precision (default float64)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        if not (args.duration > 0 and args.dt > 0 and args.dt <= args.duration):
            parser.error(f"need 0 < dt <= duration, got dt={args.dt}, duration={args.duration}")
        return _demo(args)
    return 2  # pragma: no cover - argparse enforces a command


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
