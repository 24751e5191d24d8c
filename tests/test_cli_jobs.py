"""``sdjax plan``, ``identify`` and ``montecarlo``: each example config end to end (shrunk by
``--set``), and the config refusals as one error line naming the file and the key."""

import importlib.util
import json
import os
import sys
import time

import numpy as np
import pytest

from sdjax.cli import main
from sdjax.simulation import load_run

EXAMPLES = os.path.join(os.path.dirname(__file__), os.pardir, "examples")


def example(name):
    return os.path.join(EXAMPLES, f"{name}.toml")


def assert_png(path):
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 1000


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, which refuses new files")
@pytest.mark.parametrize("job", ["plan", "identify", "montecarlo"])
def test_jobs_refuse_an_output_directory_they_cannot_write_before_running(job, capsys):
    """A job tries its output directory (a probe file, ``cli_jobs.unwritable``) before the work:
    /proc refuses new entries even to root, whom permission bits would let through."""
    assert main([job, example(job), "--out", "/proc/sdjax-job-out", "--no-progress"]) == 1
    # (the check's own message: after a run, writing would have failed with the system's)
    assert "/proc/sdjax-job-out: cannot write the outputs there" in capsys.readouterr().err


def test_plan_example_reaches_its_target(tmp_path, capsys):
    out = tmp_path / "plan"
    # Shrunk: the straight-line planner (no optimisation loop) over 10 steps.
    argv = ["plan", example("plan"), "--out", str(out), "--no-progress",
            "--set", "problem.steps=10", "--set", 'planner.method="straight_line"', "--set", "planner.refine_iterations=6"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    # Six Gauss-Newton refinements through the rollout put the end point on the target to
    # well below a micrometre (they converge quadratically from a millimetre-level IK start).
    assert summary["position_error_m"] < 1e-6
    final, target = np.asarray(summary["final_position"]), np.asarray(summary["target_position"])
    assert np.linalg.norm(final - target) == pytest.approx(summary["position_error_m"], abs=1e-12)  # same number
    assert np.allclose(target - summary["start_position"], [0.15, 0.1, -0.1], atol=1e-12)  # target_offset
    assert summary["torque_ratio"] == pytest.approx(summary["peak_torque"] / 20.0)
    run = load_run(out / "plan.npz")  # the run format of 'sdjax simulate': 'sdjax plot' reads it
    assert run.num_steps == 10 and run.model.name == "free_flying_arm_7dof"
    assert_png(out / "plan.png")
    assert main(["plot", str(out / "plan.npz"), "--out", str(tmp_path / "plots"), "--dpi", "30"]) == 0
    # A second run refuses to overwrite the outputs (before planning).
    assert main(argv) == 1
    assert "plan.npz: exists; pass --force to overwrite it" in capsys.readouterr().err


def test_plan_minimum_time_meets_the_torque_limits(tmp_path, capsys):
    """method = "minimum_time": the duration search of sdjax.minimum_time_plan; the summary
    reports the shortest feasible duration among those tried, and the plan there keeps the
    torques within the limit at its sample points, on the target, the base unturned."""
    out = tmp_path / "plan"
    # A short search (relative_tolerance 0.5: a feasible and an infeasible duration, no bisection).
    argv = ["plan", example("plan"), "--out", str(out), "--no-progress",
            "--set", "problem.steps=10", "--set", 'planner.method="minimum_time"',
            "--set", "planner.relative_tolerance=0.5"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    durations, feasible = np.asarray(summary["durations_tried"]), np.asarray(summary["feasible"])
    assert summary["converged"] and summary["duration"] == pytest.approx(durations[feasible].min())
    # solved to zero excess at LIMIT_SAMPLES points per step (the torque row's tolerance, 4e-10
    # N m s, over samples >= 10 ms apart: < 1e-7 N m)
    assert summary["peak_torque"] <= 20.0 + 1e-7
    # converged residuals: 4e-10 m and rad (the solver's tolerance)
    assert summary["position_error_m"] < 1e-9 and summary["base_attitude_change_deg"] < 1e-7


def test_identify_example_recovers_the_payload_mass(tmp_path, capsys):
    out = tmp_path / "identify"
    argv = ["identify", example("identify"), "--out", str(out), "--no-progress", "--set", "excitation.duration=0.5"]
    assert main(argv) == 0, capsys.readouterr().err
    estimates = json.loads((out / "estimates.json").read_text())
    (body,) = estimates["bodies"]
    assert body["true_mass"] == 30.0
    # Noise of 1e-3 of each channel's spread on 26 samples: the notebook measures mass errors of
    # a few 1e-3 at this level for the shortest record; 2 % leaves a margin of several times.
    assert abs(body["mass"] - 30.0) / 30.0 < 0.02
    assert body["errors"]["mass"] == pytest.approx(abs(body["mass"] - 30.0) / 30.0, rel=1e-9)
    assert estimates["rank"] == 10  # a payload is fully identifiable from one tumbling manoeuvre
    assert "10 of 10 parameter combinations identifiable" in (out / "identifiability.txt").read_text()
    for name in ("excitation", "convergence", "singular_values"):
        assert_png(out / f"{name}.png")


def test_identify_with_an_optimal_excitation(tmp_path, capsys):
    """[excitation] kind = "optimal": the experiment is designed (sdjax.excitation), run, and
    the link parameters identified; the summary reports the design and the base parameters,
    estimated and true (noise-free: equal to the RK4 momentum drift's level); keys of the other
    kind are refused."""
    config = tmp_path / "job.toml"
    text = (
        'model = "free_flying_arm_7dof"\n[unknowns]\nlinks = [6, 7]\n[excitation]\nkind = "optimal"\n'
        "initial_q = [0.3, -0.6, 0.2, 1.2, -0.3, 0.7, 0.1]\nduration = 0.5\nharmonics = 2\niterations = 3\n"
        "max_excursion = 0.2\nrate_limit = 0.8\n"
        "[outputs]\nplots = false\n"
    )
    config.write_text(text)
    out = tmp_path / "out"
    assert main(["identify", str(config), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    summary = json.loads((out / "estimates.json").read_text())
    design = summary["excitation"]
    assert design["kind"] == "optimal" and design["criterion"] == "trace" and design["iterations"] == 3
    # The design's limits hold on its record (the nominal model's; 1e-8 for the round-off between
    # the compiled check and the re-simulated record).
    assert max(design["limits_used_nominal_model"].values()) <= 1.0 + 1e-8
    base = summary["base_parameters"]
    assert len(base) == summary["rank"] and all("combination" in b for b in base)
    scale = max(abs(b["truth"]) for b in base)
    # Noise-free RK4 record of the nominal model itself: the momentum drift is ~1e-10 relative;
    # 1e-6 also covers the Levenberg-Marquardt stopping tolerance on the smallest base direction.
    assert max(abs(b["estimate"] - b["truth"]) for b in base) < 1e-6 * scale
    config.write_text(text.replace('kind = "optimal"', 'kind = "optimal"\namplitude = 0.2'))
    assert main(["identify", str(config), "--out", str(tmp_path / "o")]) == 1
    assert "excitation.amplitude: unknown key" in capsys.readouterr().err


def test_identify_from_a_measured_record(tmp_path, capsys):
    """[data] file: a record written by another tool (plain named arrays, no sdjax meta) of the
    arm holding a 30 kg payload; identified without a truth (no errors reported), then with the
    payload given as truth; refusals name the file and the key."""
    import sdjax
    from sdjax import identification as ident
    from sdjax.models import free_flying_arm_7dof
    from sdjax.models.builtin import free_flying_arm_initial_q

    arm = free_flying_arm_7dof()
    payload = sdjax.payload_parameters(30.0, np.array([0.3, 0.05, -0.04]), np.diag([0.9, 0.7, 0.6]))
    plant = sdjax.attach_payload(arm, 7, payload)
    record = ident.sinusoidal_excitation(plant, free_flying_arm_initial_q(), 0.5, 0.005, seed=3).subsample(4)
    arrays = {"time": np.asarray(record.time)}
    for field in ("base_position", "base_quaternion", "base_linear_velocity", "base_angular_velocity", "q", "qd"):
        arrays[field] = np.asarray(getattr(record.states, field))
    np.savez(tmp_path / "record.npz", **arrays)
    config = tmp_path / "job.toml"
    config.write_text('model = "free_flying_arm_7dof"\n[unknowns]\npayload_link = 7\n[data]\nfile = "record.npz"\n')
    out = tmp_path / "out"
    assert main(["identify", str(config), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    estimates = json.loads((out / "estimates.json").read_text())
    (body,) = estimates["bodies"]
    assert "true_mass" not in body and "errors" not in body and estimates["noise_level"] is None
    assert estimates["record"].endswith("record.npz") and estimates["num_samples"] == 26
    # noise-free record: the momentum residual identifies the mass to the RK4 truncation error
    assert abs(body["mass"] - 30.0) < 1e-4 * 30.0, body["mass"]
    with_truth = config.read_text() + "[payload]\nmass = 30.0\ncentroid = [0.3, 0.05, -0.04]\n"
    config.write_text(with_truth + "inertia = [[0.9, 0, 0], [0, 0.7, 0], [0, 0, 0.6]]\n")
    assert main(["identify", str(config), "--out", str(out), "--force", "--no-progress"]) == 0
    (body,) = json.loads((out / "estimates.json").read_text())["bodies"]
    assert body["true_mass"] == 30.0 and body["errors"]["mass"] < 1e-4
    capsys.readouterr()
    refusals = [
        ("[excitation]\nduration = 1.0\n", "job.toml: excitation: applies to simulated data only"),
        ("[noise]\nlevel = 0.1\n", "job.toml: noise: applies to simulated data only"),
    ]
    for extra, message in refusals:
        config.write_text(
            with_truth.replace("[payload]", extra + "[payload]") + "inertia = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\n"
        )
        assert main(["identify", str(config), "--out", str(tmp_path / "o")]) == 1
        assert message in capsys.readouterr().err
    config.write_text(
        config.read_text()
        .replace('"free_flying_arm_7dof"', '"spacedyn_sample"')
        .replace("[excitation]\nduration = 1.0\n", "")
        .replace("[noise]\nlevel = 0.1\n", "")
    )
    config.write_text(config.read_text().replace("payload_link = 7", "payload_link = 3"))
    assert main(["identify", str(config), "--out", str(tmp_path / "o")]) == 1
    assert "record.npz: array 'q' holds 7 joints; the model has 6" in capsys.readouterr().err
    (tmp_path / "record.npz").unlink()
    assert main(["identify", str(config), "--out", str(tmp_path / "o")]) == 1
    assert "record.npz: no such file" in capsys.readouterr().err


def test_montecarlo_example_statistics_match_the_results_file(tmp_path, capsys):
    import sdjax.montecarlo as mc

    out = tmp_path / "mc"
    argv = ["montecarlo", example("montecarlo"), "--out", str(out),
            "--set", "samples=12", "--set", "chunk_size=4", "--set", "scenario.steps=10",
            "--set", "requirements.attitude_error_deg=0.17", "--set", "requirements.final_joint_error=0.495"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "12/12" in printed.err  # a progress bar over the chunks
    results = mc.MonteCarloResults.load(out / "results.npz")
    assert results.num_samples == 12 and results.seed == 2026
    written = json.loads((out / "summary.json").read_text())
    summary = written["statistics"]
    for name in results.metrics:  # the sensitivity ranking, as the saved results give it
        ranking = [row._asdict() for row in results.sensitivity(name)]
        assert written["sensitivity"][name] == ranking and ranking  # the example records its draws
        assert f"{name}: most sensitive to {ranking[0]['input']}" in printed.out
    for name, values in results.metrics.items():
        # Same numbers through JSON (exact float round trip) as from the saved samples.
        assert summary[name]["mean"] == float(np.mean(values))
        assert summary[name]["p50"] == float(np.percentile(values, 50))
    # Requirements: the fraction of samples meeting each (and both), from the saved samples, with
    # the Wilson score interval written out here (z = 1.96 at 95 %).
    bounds = {"attitude_error_deg": 0.17, "final_joint_error": 0.495}
    inside = {name: results.metrics[name] < bound for name, bound in bounds.items()}
    inside["all"] = inside["attitude_error_deg"] & inside["final_joint_error"]
    z = 1.959963984540054
    for name, hits in inside.items():
        row, k, count = written["requirements"][name], int(np.sum(hits)), hits.size
        p = k / count
        centre = (p + z * z / (2 * count)) / (1 + z * z / count)
        half = z / (1 + z * z / count) * np.sqrt(p * (1 - p) / count + z * z / (4 * count**2))
        assert row["probability"] == p and row["confidence"] == 0.95
        np.testing.assert_allclose(
            [row["low"], row["high"]], [max(0, centre - half), min(1, centre + half)], rtol=1e-12
        )
        assert f"P({'all requirements' if name == 'all' else name}" in printed.out
    assert 0 < written["requirements"]["all"]["probability"] < 1  # the bounds split the samples
    rows = (out / "summary.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert header[0] == "metric" and len(rows) == 1 + len(results.metrics)
    first = dict(zip(header, rows[1].split(",")))
    assert float(first["max"]) == summary[first["metric"]]["max"]  # repr round-trips floats
    assert_png(out / "histograms.png")
    assert_png(out / "sensitivity.png")
    if importlib.util.find_spec("pyarrow") is not None:  # outputs.parquet defaults to true with pyarrow
        table = mc.MonteCarloResults.from_parquet(out / "results.parquet")
        assert table.num_samples == 12 and list(table.draws) == list(results.draws)
        for name, values in results.metrics.items():
            np.testing.assert_array_equal(table.metrics[name], values)
    else:
        assert not (out / "results.parquet").exists()


def test_montecarlo_two_arm_example_runs_and_answers_its_requirements(tmp_path, capsys):
    """The second example (SpaceDyn's two-arm sample, shrunk): its requirements table parses and
    every probability lies in its interval."""
    out = tmp_path / "two_arm"
    argv = ["montecarlo", example("montecarlo_two_arm"), "--out", str(out), "--no-progress",
            "--set", "samples=8", "--set", "chunk_size=8", "--set", "scenario.steps=10", "--set", "outputs.plots=false"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    written = json.loads((out / "summary.json").read_text())["requirements"]
    assert sorted(written) == ["all", "attitude_error_deg", "final_joint_error"]
    for row in written.values():
        assert row["low"] <= row["probability"] <= row["high"]


def test_montecarlo_parquet_option(tmp_path, capsys, monkeypatch):
    """``outputs.parquet``: an existing results.parquet is refused without --force only when the
    table is written; true without pyarrow is refused before the run."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.parquet").write_text("old")
    base = ["montecarlo", example("montecarlo"), "--out", str(out), "--set", "outputs.plots=false"]
    # An unknown key is refused after the outputs are checked: the first error shows what was checked.
    later = ["--set", "bogus=1"]
    if importlib.util.find_spec("pyarrow") is not None:
        assert main(base + later) == 1
        assert "results.parquet: exists; pass --force" in capsys.readouterr().err
    assert main(base + ["--set", "outputs.parquet=false"] + later) == 1
    assert "bogus: unknown key" in capsys.readouterr().err
    assert main(base + ["--set", "outputs.parquet=1"]) == 1
    assert "outputs.parquet: expected true or false" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    assert main(base + ["--set", "outputs.parquet=true"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "montecarlo.toml: outputs.parquet: needs pyarrow" in err and "sdjax[data]" in err
    assert main(base + later) == 1  # default false without pyarrow: the old file is not checked
    assert "bogus: unknown key" in capsys.readouterr().err
    assert (out / "results.parquet").read_text() == "old"


BRAKED = """model = "spacedyn_sample"
samples = 2
[scenario]
initial_q = [0, 0, 0, 0, 0, 0]
goal_offset = [0, 0.3, 0, 0, 0, 0]
kp = 100.0
kd = 20.0
dt = 0.01
steps = 50
brakes = [[2, 0]]
[outputs]
plots = false
parquet = false
"""


def test_montecarlo_brake_holds_its_joint(tmp_path, capsys):
    """scenario.brakes: joint 2, the only one asked to move (0.3 rad), is braked from the first
    step, so it stays at 0 and the final joint error is its whole 0.3 rad (the other joints,
    asked to hold, stay within a fraction of that while the base reacts). Without the brake the
    same job ends 0.012 rad from the goal (measured), with the brake engaging at step 25 0.082."""
    import sdjax.montecarlo as mc

    out = tmp_path / "mc"
    assert main(["montecarlo", _config(tmp_path, BRAKED), "--out", str(out), "--no-progress"]) == 0, (
        capsys.readouterr().err
    )
    results = mc.MonteCarloResults.load(out / "results.npz")
    # The brake holds joint 2 to round-off (projection after every step): error 0.3 to 1e-12.
    np.testing.assert_allclose(results.metrics["final_joint_error"], 0.3, atol=1e-12)
    # An empty list is no brakes.
    from sdjax.cli_jobs import _brakes, _Table

    assert _brakes(_Table("job.toml", {"brakes": []}, "scenario."), 6, 50) == []


def _config(tmp_path, text):
    path = tmp_path / "job.toml"
    path.write_text(text)
    return str(path)


PLAN = """model = "spacedyn_sample"
[problem]
target_offset = [0.1, 0.0, 0.0]
duration = 2.0
steps = 10
[planner]
method = "straight_line"
"""

REFUSALS = [
    ("colour = 3\n" + PLAN, "job.toml: colour: unknown key"),
    (PLAN.replace("steps = 10", "steps = 10\nstpes = 3"), "job.toml: problem.stpes: unknown key"),
    (
        PLAN.replace("duration = 2.0", 'duration = "long"'),
        "job.toml: problem.duration: expected a number, got str 'long'",
    ),
    (PLAN.replace("duration = 2.0", "duration = -1.0"), "job.toml: problem.duration: expected a positive number"),
    (PLAN.replace("duration = 2.0", "duration = nan"), "job.toml: problem.duration: expected a finite number, got nan"),
    (PLAN.replace("duration = 2.0", "duration = inf"), "problem.duration: expected a finite number"),
    (PLAN.replace("duration = 2.0\n", ""), "job.toml: problem.duration: missing required key"),
    (PLAN.replace('model = "spacedyn_sample"', ""), "job.toml: model: missing required key"),
    (PLAN.replace("steps = 10", "steps = 2.5"), "problem.steps: expected an integer, got float 2.5"),
    (PLAN.replace("steps = 10", "steps = true"), "problem.steps: expected an integer, got a boolean (true)"),
    (PLAN.replace("steps = 10", "steps = 100000000"), "problem.steps: expected at most 10000000"),  # MAX_STEPS
    (PLAN.replace("[0.1, 0.0, 0.0]", "[0.1, 0.0]"), "problem.target_offset: expected 3 values, got 2"),
    (PLAN.replace("[0.1, 0.0, 0.0]", '[0.1, "x", 0.0]'), "problem.target_offset[1]: expected a number"),
    (
        PLAN.replace("duration", "target_rotation = [[1, 0, 0], [0, 1, 0], [0, 0, -1]]\nduration"),
        "problem.target_rotation: not a proper rotation matrix: det R = -1 (a reflection)",
    ),
    (
        PLAN.replace("duration", "target_rotation = [[1, 0, 0], [0, 1, 0], [0, 0, 1.01]]\nduration"),
        "problem.target_rotation: not a proper rotation matrix: R^T R differs from the identity by 2.0e-02",
    ),
    (
        PLAN.replace('"straight_line"', '"magic"'),
        "planner.method: expected one of reactionless, minimum_time, straight_line, optimize",
    ),
    ("planner = 3\n" + PLAN.split("[planner]")[0], "job.toml: planner: expected a table [planner], got int 3"),
    (PLAN + "[limits]\ntorque = [1.0, 2.0]\n", "limits.torque: expected 1 or 6 values, got 2"),
    (PLAN + "[limits]\njoint_lower = [0, 0, 0, 0, 0, 0]\n", "give both joint_lower and joint_upper"),
    (PLAN + "[limits]\nobstacles = [[1, 2, 3]]\n", "limits.obstacles: expected a list of rows of 4 numbers"),
    (PLAN + "[limits]\nobstacles = [[1, 2, 3, -0.1]]\n", "limits.obstacles: every sphere's radius"),
    (PLAN + "[limits]\nlink_radius = 0.1\n", "limits.link_radius: applies with obstacles only"),
    (PLAN.replace('model = "spacedyn_sample"', 'model = "nosuch.json"'), "nosuch.json: no such model file"),
    ("model = [", "job.toml: not valid TOML"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n" + PLAN, "job.toml: not readable TOML: arrays or tables nested too deeply"),
    (PLAN.replace("steps = ", "steps = 1" + "0" * 30 + " #"), "problem.steps: expected an integer within"),
    (
        PLAN + "[limits]\ntorque = 1" + "0" * 400 + "\n",
        "limits.torque: expected a finite number, got an integer of about 401 digits",
    ),
    (PLAN + "meet_torque_limits = true\n", "planner.meet_torque_limits: applies to method = 'reactionless' only"),
    (
        PLAN.replace('"straight_line"', '"reactionless"') + "meet_torque_limits = true\n",
        "planner.meet_torque_limits: needs torque limits ([limits] torque)",
    ),
    (
        PLAN.replace('"straight_line"', '"minimum_time"'),
        "planner.method: 'minimum_time' needs torque limits ([limits] torque)",
    ),
    (PLAN + "relative_tolerance = 0.1\n", "planner.relative_tolerance: applies to method = 'minimum_time' only"),
    (PLAN.replace("steps = 10", "steps = 10\nend_point = 2"), "problem.end_point: expected at most 1, got 2"),
]


def test_plan_reports_the_penetration_of_keep_out_spheres(tmp_path, capsys):
    """[limits] obstacles: the straight line (which ignores them) is reported as penetrating a
    sphere centred on its start end point by the sphere's radius plus the link radius, and not
    at all a sphere far away."""
    import sdjax
    from sdjax.models import spacedyn_sample

    model = spacedyn_sample()  # PLAN's model, started at q = 0
    start = np.asarray(sdjax.forward_kinematics(model, sdjax.make_state(model)).end_point_position[0])
    for center, expected in ((start, 0.05 + 0.01), (start + 100.0, 0.0)):
        sphere = ", ".join(f"{x:.17g}" for x in center)
        text = PLAN + f"[limits]\nobstacles = [[{sphere}, 0.05]]\nlink_radius = 0.01\n"
        out = tmp_path / f"out{expected}"
        assert main(["plan", _config(tmp_path, text), "--out", str(out), "--no-progress"]) == 0, capsys.readouterr().err
        summary = json.loads((out / "summary.json").read_text())
        # The end point is on its link's axis: at the start it is the sphere's centre (depth
        # radius + link radius, to round-off of the kinematics).
        assert summary["obstacle_violation_m"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("text, message", REFUSALS)
def test_plan_config_refusals(tmp_path, capsys, text, message):
    assert main(["plan", _config(tmp_path, text), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sdjax: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()  # refused before anything ran or was written


@pytest.mark.parametrize(
    "command, text, message",
    [
        ("identify", 'model = "free_flying_arm_7dof"\n[unknowns]\npayload_link = 9\n', "unknowns.payload_link: expected at most 7"),
        ("identify", 'model = "free_flying_arm_7dof"\n[unknowns]\npayload_link = 7\n', "payload.mass: missing required key"),
        ("identify", 'model = "free_flying_arm_7dof"\n[unknowns]\n', "nothing to identify"),
        ("montecarlo", 'model = "spacedyn_sample"\nsamples = 0\n', "job.toml: samples: expected an integer >= 1"),
        ("montecarlo", 'model = "spacedyn_sample"\nsamples = 4\n[scenario]\nq_goal = [0,0,0,0,0,0]\nkp = 1.0\nkd = 1.0\n'
         'dt = 0.01\nsteps = 10\n[uncertainty]\npayload_mass = [0.0, 1.0]\n', "uncertainty.payload_mass: needs uncertainty.payload_link"),
        ("montecarlo", 'model = "spacedyn_sample"\nsamples = 4000\nchunk_size = 4000\n[scenario]\nq_goal = [0,0,0,0,0,0]\n'
         "kp = 1.0\nkd = 1.0\ndt = 0.01\nsteps = 10000\n", "chunk_size x scenario.steps = 40000000 exceeds"),
        ("montecarlo", BRAKED + "[requirements]\nattitude_err = 1.0\n", "requirements.attitude_err: unknown key (expected a metric: attitude_error_deg"),
        ("montecarlo", BRAKED + "[requirements]\nconfidence = 1.5\n", "requirements.confidence: expected a level in (0, 1)"),
        ("montecarlo", BRAKED.replace("[[2, 0]]", "[[7, 0]]"), "scenario.brakes[0][0]: expected a joint number 1..6, got 7"),
        ("montecarlo", BRAKED.replace("[[2, 0]]", "[[2, 50]]"), "scenario.brakes[0][1]: expected a step 0..49"),
        ("montecarlo", BRAKED.replace("[[2, 0]]", "[[2, 0.5]]"), "scenario.brakes[0][1]: expected a step 0..49"),
        ("montecarlo", BRAKED.replace("[[2, 0]]", "[[2, 0], [2, 3]]"), "scenario.brakes: each joint takes one brake"),
        ("montecarlo", BRAKED.replace("[[2, 0]]", "[2, 0]"), "scenario.brakes: expected a list of rows of 2 numbers"),
    ],
)  # fmt: skip
def test_identify_and_montecarlo_refusals(tmp_path, capsys, command, text, message):
    assert main([command, _config(tmp_path, text), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_set_override_and_usage_errors(tmp_path, capsys):
    path = _config(tmp_path, PLAN)
    assert main(["plan", path, "--set", "problem.steps=abc"]) == 1
    assert "--set problem.steps=abc: 'abc' is not a TOML value" in capsys.readouterr().err
    assert main(["plan", path, "--set", "problem.duration=-2", "--out", str(tmp_path / "o")]) == 1
    assert "problem.duration: expected a positive number, got -2" in capsys.readouterr().err
    assert main(["plan", str(tmp_path / "missing.toml")]) == 1
    assert "missing.toml: no such config file" in capsys.readouterr().err
    assert main(["plan", path, "--set", "problem.duration=" + "[" * 5000 + "]" * 5000]) == 1
    assert "--set problem.duration: the value is nested too deeply to read" in capsys.readouterr().err
    huge = tmp_path / "huge.toml"
    huge.write_text(PLAN + "#" * (1024 * 1024))
    assert main(["plan", str(huge)]) == 1
    assert "exceeds the config size limit of 1048576" in capsys.readouterr().err
    # A byte-order mark (as some editors write) is read past.
    marked = tmp_path / "marked.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + PLAN.encode())
    assert main(["plan", str(marked), "--set", "problem.steps=abc"]) == 1  # (read: then the override fails)
    assert "--set problem.steps=abc: 'abc' is not a TOML value" in capsys.readouterr().err
    assert main(["plan"]) == 2  # no CONFIG: usage
    (tmp_path / "file").write_text("")
    assert main(["plan", path, "--out", str(tmp_path / "file")]) == 1
    assert "exists and is not a directory" in capsys.readouterr().err


IDENTIFY = """model = "spacedyn_sample"
[unknowns]
payload_link = 6
[payload]
mass = 3.0
centroid = [0.1, 0.0, 0.0]
inertia = [[0.1, 0, 0], [0, 0.1, 0], [0, 0, 0.1]]
[excitation]
duration = 1.0
dt = 0.25
[outputs]
plots = false
"""


@pytest.mark.parametrize(
    "duration, dt, message",
    [
        ("1e300", "1e-10", "job.toml: excitation.duration / excitation.dt = inf steps exceeds the limit of 10000000 steps"),
        ("1.0", "1e-8", "excitation.duration / excitation.dt = 1e+08 steps exceeds the limit of 10000000 steps"),
        ("1.0", "0.3", "job.toml: excitation.duration 1 is not a whole number of excitation.dt 0.3 steps (3.333); "
                       "the run would end at 0.9 s"),
        ("1.0", "2.0", "job.toml: need excitation.dt <= excitation.duration, got excitation.dt 2, excitation.duration 1"),
    ],
)  # fmt: skip
def test_identify_refuses_a_duration_of_no_whole_number_of_steps_before_running(
    tmp_path, capsys, duration, dt, message
):
    """[excitation] duration / dt is the step count of the simulated record: refused (before any
    compilation) unless a whole number of steps within the limit, by the rule of
    ``simulate --duration --dt`` (``cli_jobs.duration_steps``). It overflowed (1e300 / 1e-10: an
    unexpected OverflowError) and ran 3 steps (0.9 s) reporting a 1 s record."""
    argv = ["identify", _config(tmp_path, IDENTIFY), "--out", str(tmp_path / "out"), "--no-progress",
            "--set", f"excitation.duration={duration}", "--set", f"excitation.dt={dt}"]  # fmt: skip
    start = time.perf_counter()
    assert main(argv) == 1
    assert time.perf_counter() - start < 5.0  # (refused while reading the config: no JAX program compiled)
    err = capsys.readouterr().err
    assert err.startswith("sdjax: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_plan_refuses_a_model_without_end_points(tmp_path, capsys, sample_model):
    """A plan moves an end point: a model with none is refused before planning (it ended with
    an unexpected IndexError of the end-point kinematics)."""
    import sdjax

    sdjax.save_model(sample_model, tmp_path / "sample.json")
    data = json.loads((tmp_path / "sample.json").read_text())
    data["end_points"] = []
    (tmp_path / "noend.json").write_text(json.dumps(data))
    text = PLAN.replace('"spacedyn_sample"', '"noend.json"').replace("duration = 2.0", "duration = 1.0")
    assert main(["plan", _config(tmp_path, text), "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "job.toml: problem.end_point: the model spacedyn_sample has no end points" in err
    assert not (tmp_path / "out").exists()


def test_jobs_refuse_an_empty_output_directory(tmp_path, capsys, monkeypatch):
    """``--out ""`` (a usage error, status 2) or ``[outputs] directory = ""`` (a config refusal,
    status 1) names no directory: refused before the run (which failed after the work with
    "[Errno 2] No such file or directory: ''")."""
    monkeypatch.chdir(tmp_path)
    path = _config(tmp_path, PLAN)
    for job in ("plan", "identify", "montecarlo"):
        assert main([job, path, "--out", "", "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err == "sdjax: error: --out '': an empty path; name a directory\n", err
    assert main(["plan", _config(tmp_path, PLAN + '[outputs]\ndirectory = ""\n'), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sdjax: error: ") and err.count("\n") == 1, err
    assert err.endswith("job.toml: outputs.directory: an empty path; name a directory\n"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.toml"]  # nothing written


def test_set_refuses_a_value_that_goes_on_past_a_line_break(tmp_path, capsys):
    """One --set sets one key: text after a line break in its value (more TOML) was dropped
    silently; a value spread over lines (an array) is still one value."""
    from sdjax.cli_jobs import read_config

    path = _config(tmp_path, PLAN)
    assert main(["plan", path, "--set", "problem.steps=10\nstpes = 3", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err == (
        "sdjax: error: --set problem.steps: the value goes on past a line break to set stpes; "
        "give one KEY=VALUE per --set\n"
    ), err
    assert main(["plan", path, "--set", "problem.steps=10\n[planner]\nmethod = 'optimize'"]) == 1
    assert "the value goes on past a line break to set planner;" in capsys.readouterr().err
    assert main(["plan", path, "--set", "problem\n.steps=10"]) == 1
    assert "--set 'problem\\n.steps': the key holds a line break" in capsys.readouterr().err
    config = read_config(path, ["problem.target_offset=[0.2,\n 0.0, 0.0]  # a comment\n"])
    assert config.data["problem"]["target_offset"] == [0.2, 0.0, 0.0]
