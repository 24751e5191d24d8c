"""The command line: end to end in a subprocess, bad input as one error line (in process)."""

import json
import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.cli import main
from sdjax.simulation import load_run

SAMPLE_TARGET = ["0.3", "0.2", "0.1", "0.6", "0.5", "0.4"]


def run(*args, cwd=None):
    env = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run(
        [sys.executable, "-m", "sdjax", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def test_demo_prints_a_summary():
    result = run("demo", "--duration", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "spacedyn_sample (6 joints, 2 end points, 160.0 kg), float64" in out
    assert "200 RK4 steps" in out
    drift = re.search(r"angular ([0-9.e+-]+) kg m\^2/s", out)
    assert drift and float(drift.group(1)) < 1e-8  # momentum conserved (started at rest)


def test_demo_bad_option_is_one_line_error():
    result = run("demo", "--dt", "-1")
    assert result.returncode == 2
    assert "argument --dt: expected a positive number" in result.stderr
    assert "Traceback" not in result.stderr
    result = run("demo", "--model", "nonexistent")
    assert result.returncode == 2 and "invalid choice" in result.stderr


def test_simulate_then_plot_end_to_end(tmp_path):
    out = tmp_path / "run.npz"
    result = run(
        "simulate", "spacedyn_sample", "--duration", "0.4", "--dt", "0.02", "--controller", "pd",
        "--target", *SAMPLE_TARGET, "--chunk-steps", "8", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout and "20 rk4 steps" in result.stdout
    assert "20/20" in result.stderr  # several chunks: a progress bar
    saved = load_run(out)
    assert saved.num_steps == 20 and saved.model.name == "spacedyn_sample"
    assert saved.info["controller"] == "pd" and saved.info["target"] == [float(v) for v in SAMPLE_TARGET]
    q = np.asarray(saved.trajectory.states.q)
    assert np.all(np.abs(q[-1]) > 0)  # the joints moved towards the target
    plots, gif = tmp_path / "plots", tmp_path / "run.gif"
    result = run("plot", str(out), "--out", str(plots), "--animate", str(gif), "--max-frames", "3", "--dpi", "40")
    assert result.returncode == 0, result.stderr
    for name in ("joints", "base", "momentum", "energy"):
        assert (plots / f"{name}.png").stat().st_size > 1000
    assert gif.stat().st_size > 1000
    # A bad input in a real process: one line on stderr, no traceback.
    result = run("simulate", str(tmp_path / "missing.json"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("sdjax: error: ")


def test_info(capsys, tmp_path, sample_model):
    assert main(["info", "spacedyn_sample"]) == 0
    out = capsys.readouterr().out
    assert "joints 6 (4 revolute, 2 prismatic), DOF 12 (6 base + 6 joints; floating base), end points 2" in out
    assert "total 160 kg" in out  # 100 kg base + 6 x 10 kg links
    assert "`-- 3 arm1_slider  prismatic, 10 kg  [end point: end_point1]" in out  # link 3 hangs on link 2
    assert "joints from the base: 4-5-6" in out
    assert "WARN" not in out and out.count("  ok  ") == 2
    path = tmp_path / "robot.json"
    sdjax.save_json_model(sample_model, path)
    assert main(["info", str(path)]) == 0
    from_file = capsys.readouterr().out
    assert from_file.split("\n", 1)[1] == out.split("\n", 1)[1]  # same description, other source line


@pytest.fixture(scope="module")
def sample_run_file(tmp_path_factory, sample_model) -> str:
    """A run file of the sample model: two samples at rest."""
    from sdjax.simulation import SimulationRun

    states = jax.tree.map(lambda x: jnp.stack([x, x]), sdjax.make_state(sample_model))
    path = tmp_path_factory.mktemp("runs") / "run.npz"
    controls = jax.vmap(lambda tau: sdjax.make_controls(sample_model, tau))(jnp.zeros((1, 6)))  # one step
    SimulationRun(sample_model, sdjax.Trajectory(jnp.array([0.0, 0.1]), states, controls)).save(path)
    return str(path)


def _write(path, text):
    path.write_text(text)
    return str(path)


def _bad_mass_model(tmp_path, sample_model):
    data = sdjax.model_to_dict(sample_model)
    data["links"][1]["mass"] = -1.0
    return _write(tmp_path / "negative.json", json.dumps(data))


# Each case: argv (with {tmp}/{model} placeholders) and a piece of the expected message.
BAD_INPUTS = [
    (["info", "{tmp}/missing.json"], "no such model file, and not a built-in model"),
    (["info", "{tmp}"], "not a model file"),
    (["info", "{malformed}"], "not valid JSON"),
    (["info", "{negative}"], "link_mass[1]"),
    (["info", "{unknown_suffix}"], "robot.xyz"),  # the loader refuses an unknown suffix
    (["simulate", "spacedyn_sample", "--dt", "abc"], "argument --dt: expected a number, got 'abc'"),
    (["simulate", "spacedyn_sample", "--dt", "-0.1"], "expected a positive number"),
    (["simulate", "spacedyn_sample", "--duration", "nan"], "expected a finite number"),
    (["simulate", "spacedyn_sample", "--duration", "0.1", "--dt", "0.5"], "need --dt <= --duration"),
    (
        ["simulate", "spacedyn_sample", "--duration", "1", "--dt", "0.4"],
        "--duration 1 is not a whole number of --dt 0.4 steps (2.5); the run would end at 0.8 s",
    ),
    (
        ["simulate", "spacedyn_sample", "--initial-q", "0.1", "0.2"],
        "--initial-q: expected 6 values (the model has 6 joints), got 2",
    ),
    (["simulate", "spacedyn_sample", "--initial-q", "0.1,0.2,0.3,0.4,0.5,0.6,0.7"], "expected 6 values"),
    (["simulate", "spacedyn_sample", "--controller", "pd"], "needs --target"),
    (["simulate", "spacedyn_sample", "--controller", "pd", "--target", "1", "2"], "--target: expected 6 values"),
    (
        ["simulate", "spacedyn_sample", "--controller", "pd", "--target", *SAMPLE_TARGET, "--kp", "1", "2"],
        "--kp: expected 1 or 6 values",
    ),
    (
        ["simulate", "spacedyn_sample", "--controller", "pd", "--target", *SAMPLE_TARGET, "--kd", "-1"],
        "must be non-negative",
    ),
    (["simulate", "spacedyn_sample", "--target", *SAMPLE_TARGET], "need --controller pd or computed-torque"),
    (
        ["simulate", "spacedyn_sample", "--controller", "computed-torque", "--target", *SAMPLE_TARGET, "--kp", "3"],
        "torque gains of --controller pd",
    ),
    (["simulate", "spacedyn_sample", "--controller", "magic"], "invalid choice: 'magic'"),
    (["simulate", "spacedyn_sample", "--chunk-steps", "0"], "expected a positive integer"),
    (["simulate", "spacedyn_sample", "--base-rpy", "0.1"], "--base-rpy: expected 3 values"),
    (["simulate", "spacedyn_sample", "--out", "{tmp}/no/such/dir/run.npz"], "does not exist"),
    (
        ["simulate", "spacedyn_sample", "--out", "{tmp}/old"],
        "old.npz: exists; pass --force to overwrite it",
    ),  # .npz appended
    (
        ["simulate", "spacedyn_sample", "--duration", "1e6", "--dt", "1e-3"],
        "1e+09 steps exceeds the limit of 10000000 steps",
    ),
    (["demo", "--duration", "inf"], "argument --duration: expected a finite number"),
    (["demo", "--duration", "1e6"], "1e+08 steps exceeds the limit"),
    (["demo", "--dt", "0"], "argument --dt: expected a positive number"),
    (["plot", "{tmp}/missing.npz"], "missing.npz: no such file (expected a sdjax run file)"),
    (["plot", "{malformed}"], "not a sdjax run file"),
    (["plot", "{tmp}/x.npz", "--animate", "run.avi"], "must end in .gif or .mp4"),
    (["plot", "{tmp}/x.npz", "--fps", "0"], "expected a positive number"),
    (["plot", "{run}", "--dpi", "4000"], "argument --dpi: expected at most 600, got 4000"),
    (["plot", "{run}", "--out", "{tmp}/no/such/dir"], "does not exist"),
    (["plot", "{run}", "--out", "{tmp}/p", "--animate", "{tmp}/no/such/dir/a.gif"], "no/such/dir does not exist"),
    (["plot", "{run}", "--out", "{tmp}/p", "--animate", "{old_gif}"], "old.npz.gif: exists; pass --force"),
    (["view", "{tmp}/missing.npz"], "missing.npz: no such file (expected a sdjax run file)"),
    (["view", "{tmp}/x.npz", "--port", "70000"], "argument --port: expected a port number in 0..65535, got '70000'"),
    (
        ["view", "{run}", "--base", "planar"],
        "--base, --inertia-check, --gravity, --end-points and --mimic apply to --model",
    ),
    (
        ["view", "{run}", "--model", "free_flying_arm_7dof", "--no-browser"],
        "run.npz: the run has 6 joint coordinates, but --model free_flying_arm_7dof has 7 joints",
    ),
    (["info", "spacedyn_sample", "--base", "hovering"], "argument --base: invalid choice: 'hovering'"),
    (
        ["info", "spacedyn_sample", "--end-points", "tool"],
        "--end-points and --mimic read URDF files; built-in models have their end points and joints",
    ),
    (["info", "spacedyn_sample", "--gravity", "0", "-9.8"], "--gravity: expected 3 values, got 2"),
    (
        ["info", "spacedyn_sample", "--base", "planar", "--inertia-check", "physical", "--gravity", "0", "0", "nan"],
        "argument --gravity: expected a finite number",
    ),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    ([], "required: {demo,info,simulate,plot,view,plan,identify,montecarlo,kernels}"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_input_is_one_error_line(argv, message, tmp_path, sample_model, sample_run_file, capsys):
    files = {
        "tmp": str(tmp_path),
        "malformed": _write(tmp_path / "malformed.json", '{"format": "sdjax-model", '),
        "negative": _bad_mass_model(tmp_path, sample_model),
        "unknown_suffix": _write(tmp_path / "robot.xyz", "robot"),
        "old": _write(tmp_path / "old.npz", "an earlier run"),
        "old_gif": _write(tmp_path / "old.npz.gif", "an earlier animation"),
        "run": sample_run_file,
    }
    argv = [arg.format(**files) for arg in argv]
    status = main(argv)
    err = capsys.readouterr().err
    assert status in (1, 2)  # 2: usage, 1: input files
    lines = err.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("sdjax: error: "), err
    assert message in lines[0]
    assert "Traceback" not in err


def test_plot_checks_every_output_before_drawing(tmp_path, sample_run_file, capsys):
    """``sdjax plot`` refuses, before drawing anything, to overwrite a PNG or the animation
    without --force, and an output it could not write (the probe file of
    ``cli_jobs.unwritable``); with --force it redraws."""
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "energy.png").write_text("an earlier figure")
    assert main(["plot", sample_run_file, "--out", str(plots), "--dpi", "20"]) == 1
    assert "energy.png exists; pass --force to overwrite it" in capsys.readouterr().err
    assert sorted(p.name for p in plots.iterdir()) == ["energy.png"]  # nothing drawn
    assert (plots / "energy.png").read_text() == "an earlier figure"
    gif = tmp_path / "old.gif"
    gif.write_text("an earlier animation")
    fresh = tmp_path / "fresh"
    assert main(["plot", sample_run_file, "--out", str(fresh), "--animate", str(gif)]) == 1
    assert "old.gif: exists; pass --force" in capsys.readouterr().err
    assert not fresh.exists() and gif.read_text() == "an earlier animation"
    if os.path.isdir("/proc/self"):  # (Linux: /proc refuses new files, even to root)
        assert main(["plot", sample_run_file, "--out", "/proc/sdjax-plots"]) == 1
        assert "--out /proc/sdjax-plots: cannot write there" in capsys.readouterr().err
    assert main(["plot", sample_run_file, "--out", str(plots), "--dpi", "20", "--force"]) == 0
    assert (plots / "energy.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "argv, status, message",
    [
        (["simulate", "spacedyn_sample", "--out", ""], 2, "--out '': an empty path; name a file"),
        (["simulate", "spacedyn_sample", "--out", "sub/"], 2, "--out 'sub/': ends in a path separator (names a directory)"),
        (["simulate", "spacedyn_sample", "--out", "sub"], 1, "--out sub: is a directory; name a file in it"),
        (["plot", "{run}", "--out", ""], 2, "--out '': an empty path; name a directory"),
    ],
)  # fmt: skip
def test_output_paths_naming_no_file_are_refused_before_running(
    argv, status, message, tmp_path, sample_run_file, capsys, monkeypatch
):
    """An empty output path, or a file's path ending in a separator or naming a directory, is
    refused before the run (it wrote the hidden ./.npz, sub/.npz, or failed after the work)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    assert main([arg.format(run=sample_run_file) for arg in argv]) == status
    err = capsys.readouterr().err
    assert err.startswith("sdjax: error: ") and err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub"]  # nothing written


def test_info_tree_of_a_very_deep_chain():
    """A chain far deeper than Python's recursion limit (a long flexible beam) is drawn
    without recursion, with bounded indentation: every link once, deep ones with their depth."""
    from sdjax.cli import TREE_DRAWN_DEPTH, _tree_lines
    from sdjax.models import random_model

    model = random_model(0, 3000, chain_probability=1.0)  # NumPy only: nothing is compiled
    lines = _tree_lines(model)
    assert len(lines) == 1 + 3000 and lines[-1].endswith("(depth 3000)")
    assert max(map(len, lines)) < 4 * TREE_DRAWN_DEPTH + 120


def test_info_warns_of_stiff_passive_joints(capsys, tmp_path, sample_model):
    """Damping of 5000 N m s/rad on the sample's 10 kg links needs steps far below simulate's
    default 0.01 s: info says so with the step to use (the value is max_stable_step's, tested
    against rollouts in test_integrate.py)."""
    import equinox as eqx
    import jax.numpy as jnp

    from sdjax.cli import SIMULATE_DT

    stiff = eqx.tree_at(lambda m: m.joint_damping, sample_model, jnp.full(6, 5000.0))
    path = tmp_path / "stiff.json"
    sdjax.save_json_model(stiff, path)
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    step = sdjax.max_stable_step(stiff)
    assert step < SIMULATE_DT
    assert (
        f"WARN  largest stable RK4 step of the passive joint terms at q = 0: {step:.3g} s (below simulate's default --dt"
        in out
    )
    assert main(["info", "spacedyn_sample"]) == 0  # no passive joints: no line
    assert "largest stable" not in capsys.readouterr().out
    # simulate picks the step with implicit passive terms for that model at its default step,
    # and the run stays finite; RK4 where the step is stable.
    out_file = tmp_path / "stiff.npz"
    assert main(["simulate", str(path), "--duration", "0.2", "--out", str(out_file), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"20 implicit steps of {SIMULATE_DT} s" in out
    assert np.all(np.isfinite(np.asarray(sdjax.load_run(out_file).trajectory.states.qd)))
    assert (
        main(
            [
                "simulate",
                "spacedyn_sample",
                "--duration",
                "0.05",
                "--out",
                str(tmp_path / "sample.npz"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert "5 rk4 steps" in capsys.readouterr().out


def test_reader_options_reach_the_model(capsys):
    """``--base``, ``--gravity`` and ``--end-points`` set the model that ``info`` and
    ``simulate`` see (a URDF's world root gives a fixed base by itself)."""
    urdf = os.path.join(os.path.dirname(__file__), "data", "fixed_base_arm.urdf")
    assert main(["info", urdf, "--end-points", "link3", "base"]) == 0
    out = capsys.readouterr().out
    assert "DOF 7 (0 base + 7 joints; fixed base), end points 2" in out
    assert "1 link3: on link 3 (link3)" in out and "2 base: on the base" in out
    assert main(["info", "spacedyn_sample", "--base", "planar", "--gravity", "0", "0", "-9.81"]) == 0
    out = capsys.readouterr().out
    assert "DOF 9 (3 base + 6 joints; planar base)" in out and "gravity [m/s^2]: [ 0.    0.   -9.81]" in out
