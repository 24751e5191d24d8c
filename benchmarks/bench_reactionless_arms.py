"""Zero-disturbance planning on several redundant arms: ``sdjax.reactionless_plan`` against the
straight joint-space line, each with library defaults, compile included.

    python benchmarks/bench_reactionless_arms.py           # every arm (~5 min on 2 cores)
    python benchmarks/bench_reactionless_arms.py --quick   # 20 RK4 steps instead of 40

The planning issue asks, with library defaults and an end-point error below 0.1 mm, for a final
base attitude change at least 100x smaller than the straight line's on the 7-joint arm *and on
other redundant arms*. Each case is a point-to-point move of the end point (or a full pose) over
4 s on a zero-momentum base, 40 RK4 steps, 5 free control points per joint, joint limits of
+-1.5 rad around the start; the straight line is ``straight_line_plan`` (refined onto the target,
so both plans reach it), the plan ``reactionless_plan`` with its defaults. Every plan is then
checked at four times finer steps (``simulate_plan(..., continuous=True)`` at 160 steps), which
is the figure reported: a plan that only worked at its own discretisation would fail there.

The arms: the 7-joint arm of the notebooks; the ETS-VII-like 6-joint arm; the seed's spatial
six-link arm; the SRMS-like 6-joint arm (15 m, 3 t payload-free); a random 7-link chain with
prismatic joints (``random_model``, seed 11). A 6-joint arm reaching a point keeps 3 degrees of
redundancy for the base attitude. One case asks for a full end-point pose (position and a 10 deg
rotation: 9 residuals) on the 7-joint arm.

Writes ``benchmarks/results/reactionless_arms.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import common

common.configure(float64=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax import models  # noqa: E402
from sdjax.models.builtin import free_flying_arm_initial_q  # noqa: E402

#: Requirements of the planning issue.
MAX_POSITION_ERROR_M = 1e-4
MIN_FACTOR = 100.0


def arms() -> list[tuple[str, Any, np.ndarray, bool]]:
    """``(name, model, start joint positions, full pose target)``."""
    seven = np.asarray(free_flying_arm_initial_q())
    chain = models.random_model(11, 7, chain_probability=1.0, end_point_probability=0.0)
    return [
        ("free_flying_arm_7dof", models.free_flying_arm_7dof(), seven, False),
        ("free_flying_arm_7dof, full pose", models.free_flying_arm_7dof(), seven, True),
        ("ets7_like", models.ets7_like(), np.array([0.3, -0.5, 0.8, 0.2, 0.6, -0.3]), False),
        ("spatial_six_link", models.spatial_six_link(), np.array([0.3, -0.5, 0.8, 0.2, 0.6, -0.3]), False),
        ("srms_arm", models.srms_arm(), np.array([0.3, -0.5, 0.8, 0.2, 0.6, -0.3]), False),
        ("random 7-link chain (seed 11)", chain, 0.3 * np.ones(7), False),
    ]


def problem_for(model, q0, full_pose: bool, num_steps: int) -> sdjax.PlanningProblem:
    state = sdjax.make_state(model, q=jnp.asarray(q0))
    kin = sdjax.forward_kinematics(model, state)
    start = kin.end_point_position[0]
    reach = float(jnp.linalg.norm(start - state.base_position))
    # a move of a tenth of the arm's reach, in a fixed oblique direction
    offset = 0.1 * reach * np.array([0.6, 0.4, -0.4]) / np.linalg.norm([0.6, 0.4, -0.4])
    rotation = None
    if full_pose:
        tilt = sdjax.rotation.rotation_vector_to_matrix(jnp.radians(10.0) * jnp.array([0.0, 0.6, 0.8]))
        rotation = tilt @ kin.end_point_rotation[0]
    return sdjax.PlanningProblem(
        model, state, start + offset, rotation, duration=4.0, num_steps=num_steps, num_coefficients=5,
        joint_limits=(jnp.asarray(q0) - 1.5, jnp.asarray(q0) + 1.5),
    )  # fmt: skip


def fine(problem: sdjax.PlanningProblem, factor: int = 4) -> sdjax.PlanningProblem:
    """The same problem at ``factor`` times finer RK4 steps."""
    state = problem.initial_state
    return sdjax.PlanningProblem(
        problem.model, state, problem.target_position, problem.target_rotation, duration=problem.duration,
        num_steps=factor * problem.num_steps, num_coefficients=problem.num_coefficients,
        joint_limits=(problem.joint_lower, problem.joint_upper),
    )  # fmt: skip


def run_case(name: str, model, q0, full_pose: bool, num_steps: int) -> dict[str, Any]:
    problem = problem_for(model, q0, full_pose, num_steps)
    t0 = time.perf_counter()
    line = sdjax.straight_line_plan(problem, refine_iterations=10)
    jax.block_until_ready(line.evaluation.loss)
    t1 = time.perf_counter()
    plan = sdjax.reactionless_plan(problem)
    jax.block_until_ready(plan.evaluation.loss)
    t2 = time.perf_counter()
    again = sdjax.reactionless_plan(problem)
    jax.block_until_ready(again.evaluation.loss)
    t3 = time.perf_counter()
    check = fine(problem)
    line_fine = sdjax.simulate_plan(check, line.reference, continuous=True)
    plan_fine = sdjax.simulate_plan(check, plan.coefficients, continuous=True)
    line_rotation = float(line_fine.base_attitude_change)
    plan_rotation = float(plan_fine.base_attitude_change)
    factor = line_rotation / plan_rotation if plan_rotation > 0 else float("inf")
    row = {
        "arm": name,
        "joints": model.num_joints,
        "residuals": 9 if full_pose else 6,
        "solve_residual": float(plan.residual_history[int(plan.iterations)]),
        "converged": bool(plan.converged),
        "iterations": int(plan.iterations),
        "position_error_mm": 1e3 * float(plan_fine.position_error),
        "orientation_error_deg": float(np.degrees(float(plan_fine.orientation_error))),
        "line_position_error_mm": 1e3 * float(line_fine.position_error),
        "line_base_rotation_deg": float(np.degrees(line_rotation)),
        "plan_base_rotation_deg": float(np.degrees(plan_rotation)),
        "factor": factor,
        "torque_ratio_peak_N_m": float(jnp.max(plan.evaluation.peak_torque)),
        "straight_line_s": t1 - t0,
        "reactionless_first_s": t2 - t1,
        "reactionless_run_s": t3 - t2,
    }
    row["met"] = bool(
        row["converged"] and row["position_error_mm"] < 1e3 * MAX_POSITION_ERROR_M and factor >= MIN_FACTOR
    )
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 RK4 steps instead of 40")
    parser.add_argument("--steps", type=int, default=None, help="RK4 steps over the 4 s (default 40)")
    args = parser.parse_args(argv)
    num_steps = args.steps or (20 if args.quick else 40)
    rows = []
    for name, model, q0, full_pose in arms():
        rows.append(run_case(name, model, q0, full_pose, num_steps))
        r = rows[-1]
        print(
            f"{name}: converged {r['converged']} in {r['iterations']}, error {r['position_error_mm']:.2e} mm, "
            f"base {r['line_base_rotation_deg']:.3g} -> {r['plan_base_rotation_deg']:.2e} deg (x{r['factor']:.3g}), "
            f"{r['reactionless_first_s']:.1f} s first / {r['reactionless_run_s']:.2f} s run",
            flush=True,
        )
    name = "reactionless_arms" if num_steps == 40 else f"reactionless_arms_{num_steps}_steps"
    path = common.write_result(name, {"quick": args.quick, "num_steps": num_steps, "rows": rows})
    headers = [
        "arm", "residuals", "converged (steps)", "end-point error mm (4x finer)", "straight line deg",
        "reactionless deg", "factor", "first call s", "run s", "met",
    ]  # fmt: skip
    print(
        common.table(
            headers,
            [
                [
                    r["arm"],
                    r["residuals"],
                    f"{r['converged']} ({r['iterations']})",
                    f"{r['position_error_mm']:.1e}",
                    f"{r['line_base_rotation_deg']:.3g}",
                    f"{r['plan_base_rotation_deg']:.1e}",
                    f"{r['factor']:.2g}",
                    f"{r['reactionless_first_s']:.1f}",
                    f"{r['reactionless_run_s']:.2f}",
                    "yes" if r["met"] else "no",
                ]  # fmt: skip
                for r in rows
            ],
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
