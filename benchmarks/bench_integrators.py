"""The step each integrator needs on contact problems, and its accuracy against an RK4
reference: a rover sliding down a slope (friction regularised over 0.1 mm/s, so its
slip dynamics are a stiff damper) and a lander touching down on stiff ground.

    python benchmarks/bench_integrators.py          # 1.5 s of each scenario, steps 0.1-10 ms
    python benchmarks/bench_integrators.py --quick  # 0.3 s, fewer steps

For each scheme of ``sdjax.INTEGRATORS`` (adaptive apart: it chooses its own steps) and each
step ``dt``: whether the run stays finite, the error of the scenario's measure against RK4 at
``dt = 2e-5`` s, and the wall time per simulated second (compile excluded, minimum of two
runs). The table then gives each scheme's largest step with an error below 1 % of the
measure (the "step it needs"). Writes ``benchmarks/results/integrators.json``.
"""

from __future__ import annotations

import argparse

import common

common.configure(float64=True)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import sdjax  # noqa: E402
import sdjax.contact as sc  # noqa: E402
from sdjax.models import lander, rover  # noqa: E402

SCHEMES = ["rk4", "simpson", "euler", "implicit", "implicit (loads explicit)", "newmark"]
REFERENCE_DT = 2e-5


def scheme(name: str) -> sdjax.Integrator:
    if name == "implicit (loads explicit)":
        return sdjax.ImplicitEuler(linearize_environment=False)
    return sdjax.INTEGRATORS[name]


def rover_slide():
    """Rover on a 0.3 rad slope, mu = 0.2 (< tan 0.3: it slides with a = g (sin - mu cos));
    measure: distance its centre of mass travels downhill."""
    rov = rover()
    feet = sc.ContactSpheres.at_end_points(rov, 0.03)
    angle = 0.3
    slope = sc.inclined_plane(angle)
    rotation = np.asarray(sdjax.rpy_to_matrix(jnp.array([0.0, angle, 0.0])))
    state = sdjax.make_state(
        rov, base_position=(0.1 + 0.35 + 0.03 + 1e-3) * np.asarray(slope.normal), base_rotation=rotation
    )
    downhill = jnp.array([np.cos(angle), 0.0, -np.sin(angle)])
    params = sc.ContactParameters(2.0e4, 300.0, friction=0.2, slip_velocity=1e-4, smoothing=1e-5)
    env = sc.contact_environment(rov, feet, slope, params)

    def measure(states):
        return (
            sdjax.center_of_mass(rov, jax.tree.map(lambda x: x[-1], states)) - sdjax.center_of_mass(rov, state)
        ) @ downhill

    return (
        "rover slide (0.3 rad slope, mu 0.2, slip 0.1 mm/s)",
        rov,
        state,
        env,
        measure,
        sc.stable_time_step(rov, state, feet, slope, params),
    )


def lander_touchdown():
    """Lunar lander at 1 m/s down and 0.3 m/s across onto stiff ground (k = 1e6 N/m per foot,
    mu = 0.5); measure: horizontal distance of its centre of mass after the touchdown."""
    model = lander(gravity=1.62)
    feet = sc.ContactSpheres.at_end_points(model, 0.1)
    kin = sdjax.forward_kinematics(model, sdjax.make_state(model))
    ground = sc.Plane([0.0, 0.0, 1.0], float(jnp.min(kin.end_point_position[:, 2])) - 0.1 - 0.05)
    state = sdjax.make_state(model, base_linear_velocity=[0.3, 0.0, -1.0])
    params = sc.ContactParameters(1.0e6, 2.0e4, friction=0.5, slip_velocity=1e-3, smoothing=1e-5)
    env = sc.contact_environment(model, feet, ground, params)

    def measure(states):
        return (
            sdjax.center_of_mass(model, jax.tree.map(lambda x: x[-1], states))[0]
            - sdjax.center_of_mass(model, state)[0]
        )

    return (
        "lander touchdown (1 m/s, k 1e6 N/m, mu 0.5)",
        model,
        state,
        env,
        measure,
        sc.stable_time_step(model, state, feet, ground, params),
    )


def run(model, state, env, measure, integrator, dt, duration):
    steps = int(round(duration / dt))
    fn = jax.jit(lambda s: measure(sdjax.rollout(model, s, dt, steps, environment=env, integrator=integrator).states))
    value = fn(state).block_until_ready()
    seconds = min(common.time_call(lambda: fn(state), repeats=2, min_seconds=0.0)["min"], 1e9)
    return float(value), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    duration = 0.3 if args.quick else 1.5
    steps = [1e-3, 5e-3] if args.quick else [1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2]
    results, rows, summary = [], [], []
    for build in (rover_slide, lander_touchdown):
        title, model, state, env, measure, rk4_limit = build()
        reference, _ = run(model, state, env, measure, sdjax.RK4(), REFERENCE_DT, duration)
        print(
            f"{title}: reference {reference:.6f} m (RK4, dt {REFERENCE_DT:g} s); RK4 stability estimate (contact.stable_time_step) {rk4_limit * 1e3:.2f} ms",
            flush=True,
        )
        for name in SCHEMES:
            needed = None
            for dt in steps:
                value, seconds = run(model, state, env, measure, scheme(name), dt, duration)
                error = abs(value - reference) if np.isfinite(value) else float("inf")
                relative = error / abs(reference)
                if relative < 0.01:
                    needed = dt
                results.append(
                    dict(
                        scenario=title,
                        scheme=name,
                        dt=dt,
                        value=value,
                        error=error,
                        relative_error=relative,
                        seconds_per_simulated_second=seconds / duration,
                    )
                )
                rows.append(
                    [
                        title.split(" (")[0],
                        name,
                        f"{dt * 1e3:g}",
                        "yes" if np.isfinite(value) else "no",
                        f"{relative:.1e}",
                        f"{seconds / duration:.2f}",
                    ]
                )
                print(" | ".join(rows[-1]), flush=True)
            summary.append([title, name, f"{needed * 1e3:g} ms" if needed else "none tried"])
    payload = {
        "machine": common.machine(),
        "duration": duration,
        "reference_dt": REFERENCE_DT,
        "results": results,
        "summary": summary,
    }
    path = common.write_result("integrators", payload)
    print(common.table(["scenario", "scheme", "dt ms", "finite", "relative error", "wall s per simulated s"], rows))
    print(common.table(["scenario", "scheme", "largest step with error < 1 %"], summary))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
