"""Tables and a plot from ``benchmarks/results/*.json``.

    python benchmarks/report.py          # prints the markdown tables, writes results/throughput.png
    python benchmarks/report.py --write  # also replaces the tables section of benchmarks/README.md

The reading of the tables (what is met, what is not and why) is written in the README by hand,
outside the generated section.
"""

from __future__ import annotations

import argparse
import json
import pathlib

from common import RESULTS, table


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def machine_line(data: dict) -> str:
    m = data["machine"]
    backend = f"{m['backend']} {m['gpu']}" if m.get("gpu") else m["backend"]
    return f"{m['cpu']} ({m['cpu_count']} cores), {backend}, JAX {m['jax']}, sdjax {m['sdjax']}, {m['date']}"


def _engine(row: dict) -> str:
    """A dynamics row's engine column: sdjax's path (default, XLA), or another JAX engine's name."""
    engine = row["engine"]
    if not engine.startswith("sdjax"):
        return engine.replace(" (jit + vmap)", "").replace(", jit + vmap", "")
    return "XLA" if "XLA" in engine else "chunked (before)" if "chunked" in engine else "default"


def dynamics_tables(data: dict) -> str:
    """One table per model: sdjax (and the other JAX engines) per batch beside Pinocchio per
    sample (Python loop) and Pinocchio's threaded batch call at the same batch, with both
    ratios; engines that could not be timed are listed under the table with the reason."""
    out = [f"Machine: {machine_line(data)}; Pinocchio {data['machine'].get('pinocchio')}", ""] + (
        [data["note"], ""] if "note" in data else []
    )
    not_timed = [r for r in data["results"] if "not_timed" in r]
    rows = [r for r in data["results"] if "not_timed" not in r]
    per_sample = {
        (r["model"], r["algorithm"]): r["evals_per_second"]
        for r in rows
        if r["engine"] == "pinocchio (per-sample Python)"
    }
    threaded = {
        (r["model"], r["algorithm"], r["batch"]): r
        for r in rows
        if r["engine"].startswith("pinocchio") and "InParallel" in r["engine"]
    }
    for model in dict.fromkeys(r["model"] for r in rows):
        body = []
        for r in rows:
            if r["model"] != model or r["engine"].startswith("pinocchio"):
                continue
            loop = per_sample.get((model, r["algorithm"]), "")
            parallel = threaded.get((model, r["algorithm"], r["batch"]), {}).get("evals_per_second", "")
            body.append(
                [
                    r["algorithm"],
                    _engine(r),
                    r["dtype"],
                    r["batch"],
                    r["evals_per_second"],
                    loop,
                    r.get("ratio_to_pinocchio", ""),
                    parallel,
                    r["evals_per_second"] / parallel if parallel else "",
                ]
            )
        headers = [
            "algorithm",
            "sdjax path (or engine)",
            "dtype",
            "batch",
            "evals/s",
            "Pinocchio loop evals/s",
            "x loop",
            "Pinocchio threaded evals/s",
            "x threaded",
        ]
        out += [f"**{model}**", "", table(headers, body), ""]
        out += [f"Not timed: {r['engine']} ({r['not_timed']})" for r in not_timed if r["model"] == model]
        out += [""] if any(r["model"] == model for r in not_timed) else []
    return "\n".join(out)


def rollout_table(data: dict) -> str:
    body = [
        [
            r["dtype"],
            r["batch"],
            r["steps"],
            r["sdjax_steps_per_second"],
            r.get("mujoco_steps_per_second", ""),
            r.get("ratio_to_mujoco", ""),
            r.get("mjx_steps_per_second", ""),
            r.get("ratio_to_mjx", ""),
            r.get("sdjax_compile_seconds", ""),
            r.get("mjx_compile_seconds", ""),
        ]
        for r in data["results"]
    ]
    threads = next((r["mujoco_threads"] for r in data["results"] if "mujoco_threads" in r), "?")
    note = f"{data['note']}\n\n" if "note" in data else ""
    # (MJX timed in an environment of its own: bench_rollout.py --mjx-python)
    mjx = next(
        (f"; MJX of MuJoCo {r['mjx_mujoco']} on JAX {r['mjx_jax']}" for r in data["results"] if "mjx_jax" in r), ""
    )
    return (
        f"Machine: {machine_line(data)}; MuJoCo {data['machine'].get('mujoco')} (`rollout` on {threads} threads, RK4, float64){mjx}\n\n{note}"
        + table(
            [
                "dtype",
                "batch",
                "steps",
                "sdjax steps/s",
                "MuJoCo rollout steps/s",
                "x MuJoCo",
                "MJX steps/s",
                "x MJX",
                "sdjax compile s",
                "MJX compile s",
            ],
            body,
        )
    )


def compile_table(data: dict) -> str:
    body = [
        [
            r["links"],
            r["forward_dynamics_compile_seconds"],
            r["rollout_compile_seconds"],
            r["inverse_dynamics_run_seconds"] * 1e6,
            r["inverse_dynamics_run_seconds_per_link"] * 1e6,
            r["forward_dynamics_run_seconds"] * 1e6,
            r["inertia_matrix_run_seconds"] * 1e6,
        ]
        for r in data["results"]
    ]
    return f"Machine: {machine_line(data)}; rollout of {data['rollout_steps']} RK4 steps\n\n" + table(
        ["links", "FD compile s", "rollout compile s", "ID us", "ID us/link", "FD us", "H us"], body
    )


def compile_derivatives_table(data: dict) -> str:
    body = [[r["program"], r["compile_seconds"], r["operations"], r["hlo_lines"]] for r in data["results"]]
    return f"Machine: {machine_line(data)}\n\n" + table(
        ["program", "compile s", "operations", "optimised HLO lines"], body
    )


def gradient_table(data: dict) -> str:
    body = [
        [
            r.get("batch", 1),
            r["kind"],
            r["checkpoint"],
            r["steps"],
            r.get("seconds", ""),
            r.get("ratio_to_forward", ""),
            (r["peak_bytes"] or 0) / 2**20,
        ]
        for r in data["results"]
    ]
    return f"Machine: {machine_line(data)}; {data['model']}, parameters: {data['parameters']}\n\n" + table(
        ["batch", "kind", "checkpoint", "steps", "seconds", "x forward", "peak MiB"], body
    )


def excitation_table(data: dict) -> str:
    body = [
        [
            r["model"],
            r.get("criterion", "log_det"),
            f"{r['base_parameters']} / {r['parameters']}",
            r["sinusoidal"]["condition_number"],
            r["optimal"]["condition_number"],
            r["sinusoidal"]["base_error"],
            r["optimal"]["base_error"],
            r["error_ratio"],
            r["design_seconds"],
        ]
        for r in data["results"]
    ]
    note = f"{data['note']}\n\n" if "note" in data else ""
    headers = ["arm", "criterion", "base / all", "cond sine", "cond optimal", "base error sine"]
    headers += ["base error optimal", "error ratio", "design s"]
    return (
        f"Machine: {machine_line(data)}; noise {data['noise']} (median over seeds {data['seeds']})\n\n{note}"
        + table(headers, body)
    )


def plot(data: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["results"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, algo in zip(axes, ("forward_dynamics", "inverse_dynamics", "inertia_matrix")):
        for model in dict.fromkeys(r["model"] for r in rows):
            for dtype, style in (("float64", "-o"), ("float32", "--s")):
                pts = [
                    (r["batch"], r["evals_per_second"])
                    for r in rows
                    if r["model"] == model
                    and r["algorithm"] == algo
                    and r["dtype"] == dtype
                    and r["engine"] == "sdjax (jit + vmap)"
                ]
                if pts:
                    ax.plot(*zip(*pts), style, label=f"sdjax {model} {dtype}")
            pin = [
                r["evals_per_second"]
                for r in rows
                if r["model"] == model and r["algorithm"] == algo and r["engine"] == "pinocchio (per-sample Python)"
            ]
            if pin:
                ax.axhline(pin[0], color="gray", lw=1, ls=":")
                ax.text(1, pin[0] * 1.05, f"Pinocchio {model}", fontsize=7, color="gray")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_title(algo.replace("_", " "))
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("evaluations / s")
    axes[-1].legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Throughput vs batch size ({machine_line(data)})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


README = pathlib.Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- tables:begin (generated by report.py --write) -->", "<!-- tables:end -->"


def write_readme(tables: str) -> None:
    """Replace the text between the markers of benchmarks/README.md with ``tables``."""
    text = README.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{README}: markers {BEGIN!r} and {END!r} not found")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n\n{tables}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the tables into benchmarks/README.md")
    args = parser.parse_args()
    sections = [
        ("Dynamics", "dynamics", dynamics_tables),
        ("Dynamics, the kernel as an XLA custom call", "dynamics_ffi", dynamics_tables),
        ("Dynamics, the kernel as an XLA custom call (float32)", "dynamics_ffi_float32", dynamics_tables),
        ("Dynamics, the other JAX engines", "dynamics_jax_peers", dynamics_tables),
        ("Dynamics (GPU)", "dynamics_gpu", dynamics_tables),
        ("Dynamics (GPU, float64)", "dynamics_gpu_float64", dynamics_tables),
        ("Rollout", "rollout", rollout_table),
        ("Rollout, MJX in its own environment", "rollout_mjx", rollout_table),
        ("Rollout (GPU)", "rollout_gpu", rollout_table),
        ("Compile time and scaling", "compile", compile_table),
        ("Compile time under nested derivatives", "compile_derivatives", compile_derivatives_table),
        ("Gradient of a rollout", "gradient", gradient_table),
        ("Gradient of a rollout, batch 1024", "gradient_1024", gradient_table),
        ("Gradient of a rollout (GPU)", "gradient_gpu", gradient_table),
        ("Optimal excitation", "excitation", excitation_table),
    ]
    tables = []
    for title, name, render in sections:
        data = load(name)
        if data is not None:
            tables.append(f"### {title}\n\n{render(data)}\n")
    print("\n".join(tables))
    if args.write:
        write_readme("\n".join(tables))
        print(f"wrote {README}")
    dynamics = load("dynamics")
    if dynamics is not None:
        path = RESULTS / "throughput.png"
        plot(dynamics, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
