"""Optimal excitation against the sinusoidal manoeuvre on arms the notebooks do not use: every
link of the arm unknown, the design within the sinusoid's own envelope, base-parameter errors of
the two experiments at noise 1e-3, compile included.

    python benchmarks/bench_excitation.py           # every arm, 60 L-BFGS iterations (~6 min on 2 cores)
    python benchmarks/bench_excitation.py --quick   # 5 iterations, 1 s records

For each arm: the sinusoidal excitation (``identification.sinusoidal_excitation``: 0.2 rad,
1-3 rad/s, PD-tracked, tumbling base, 5 s at dt 5 ms, logged every 20 ms) gives the envelope (each
joint's largest excursion from the start and largest rate); ``excitation.optimal_excitation``
designs within it on a nominal model whose link masses and inertias are 20 % too large (same
centroids; too large, not too small, see the identification guide's caution); both experiments
run on the true arm, each is identified from the nominal model (every link unknown, momentum
residual) over three noise seeds, and the base parameters are compared with the truth's, in the
equilibrated units of the design's structural regressor (median over seeds).

Writes ``benchmarks/results/excitation.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import common

common.configure(float64=True)

import numpy as np  # noqa: E402

import sdjax  # noqa: E402
from sdjax import excitation as ex  # noqa: E402
from sdjax import identification as ident  # noqa: E402
from sdjax import models  # noqa: E402

TWIST = (0.02, -0.01, 0.01, 0.01, 0.02, -0.015)
NOISE = 1e-3
SEEDS = (0, 1, 2)


def arms() -> list[tuple[str, Any, np.ndarray]]:
    """``(name, model, start joint positions)``: arms the notebooks do not identify."""
    chain = models.random_model(5, 6, chain_probability=1.0, end_point_probability=0.0)
    return [
        ("ets7_like", models.ets7_like(), np.array([0.3, -0.5, 0.8, 0.2, 0.6, -0.3])),
        ("spacedyn_sample (two arms)", models.spacedyn_sample(), np.array([0.3, -0.5, 0.8, -0.3, 0.5, -0.8])),
        ("random 6-link chain (seed 5)", chain, 0.3 * np.ones(6)),
    ]


def base_errors(base: ident.BaseParameters, estimate, truth) -> tuple[float, float]:
    """Norm of the base-parameter error over the truth's, and the largest error over the largest
    base parameter, in the structural regressor's equilibrated units."""
    weights = base.column_scale[base.independent]
    error = (base.values(estimate) - base.values(truth)) * weights
    reference = base.values(truth) * weights
    return float(np.linalg.norm(error) / np.linalg.norm(reference)), float(
        np.max(np.abs(error)) / np.max(np.abs(reference))
    )


def run_arm(name: str, model: Any, q0: np.ndarray, duration: float, iterations: int, criterion: str) -> dict:
    n = model.num_joints
    links = sdjax.Unknowns(links=tuple(range(1, n + 1)))
    truth = ident.link_parameters(model, links.links)
    nominal = ident.apply_parameters(
        model, links.links, ident.InertialParameters(truth.mass * 1.2, truth.first_moment, truth.inertia * 1.2)
    )
    sine = ident.sinusoidal_excitation(model, q0, duration, base_twist=TWIST)
    envelope = dict(
        max_excursion=np.max(np.abs(np.asarray(sine.states.q) - q0), axis=0),
        rate_limit=np.max(np.abs(np.asarray(sine.states.qd)), axis=0),
    )
    start = time.perf_counter()
    design = ex.optimal_excitation(
        nominal, links, q0, duration, max_iterations=iterations, criterion=criterion, base_twist=TWIST, **envelope
    )
    design_seconds = time.perf_counter() - start
    records = {
        "sinusoidal": sine,
        "optimal": ident.tracking_record(model, q0, design.reference, duration, base_twist=TWIST),
    }
    row: dict[str, Any] = dict(
        model=name,
        parameters=10 * n,
        base_parameters=design.base.rank,
        duration_s=duration,
        iterations=iterations,
        criterion=criterion,
        design_seconds=design_seconds,
        objective=[float(design.history[0]), float(design.history[-1])],  # the design's start and end
        scale=design.scale,
        limits_used=design.peaks,
    )
    for kind, record in records.items():
        data = record.subsample(4)
        sv = np.asarray(ex.base_singular_values(nominal, data, links, design.base))
        errors = []
        for seed in SEEDS:
            result = ident.identify(nominal, ident.add_noise(data, NOISE, seed), links)
            errors.append(base_errors(design.base, result.parameters, truth))
        row[kind] = dict(
            rank=ident.identifiability(nominal, data, links).rank,
            log_det_criterion=float(ex.excitation_criterion(sv, "log_det")),
            trace_criterion=float(ex.excitation_criterion(sv, "trace")),
            condition_number=float(sv[0] / sv[-1]),
            smallest_singular_value=float(sv[-1]),
            base_error=float(np.median([e[0] for e in errors])),
            largest_base_error=float(np.median([e[1] for e in errors])),
        )
    row["error_ratio"] = row["sinusoidal"]["base_error"] / row["optimal"]["base_error"]
    print(
        f"{name} ({criterion}): {row['base_parameters']} base of {row['parameters']}; condition "
        f"{row['sinusoidal']['condition_number']:.1f} -> {row['optimal']['condition_number']:.1f}; base error "
        f"{row['sinusoidal']['base_error']:.2e} -> {row['optimal']['base_error']:.2e} ({row['error_ratio']:.1f}x); "
        f"design {design_seconds:.1f} s",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--criteria", default="log_det,trace", help="comma-separated design criteria (log_det,trace)")
    args = parser.parse_args(argv)
    duration, iterations = (1.0, 5) if args.quick else (5.0, 60)
    rows = [
        run_arm(name, model, q0, duration, iterations, criterion)
        for criterion in args.criteria.split(",")
        for name, model, q0 in arms()
    ]
    path = common.write_result("excitation", {"noise": NOISE, "seeds": list(SEEDS), "results": rows})
    from report import excitation_table  # the README's table of this result

    print(excitation_table(json.loads(path.read_text())))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
