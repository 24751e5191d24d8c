"""Figures and animations (sdjax.plotting), drawn with the Agg backend (no display)."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image, ImageSequence  # noqa: E402  (Pillow comes with matplotlib)

import sdjax  # noqa: E402
from sdjax import plotting  # noqa: E402
from sdjax.integrate import Trajectory  # noqa: E402
from sdjax.simulation import trajectory_quantities  # noqa: E402


@pytest.fixture(scope="module")
def run(sample_model):
    """Sample robot from rest under joint PD: 1.2 s in 60 steps of 0.02 s."""
    law = sdjax.JointPD(10.0, 10.0, jnp.asarray([0.3, 0.2, 0.1, 0.6, 0.5, 0.4]))
    traj = sdjax.rollout(sample_model, sdjax.make_state(sample_model), 0.02, 60, law)
    return sample_model, traj, trajectory_quantities(sample_model, traj)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_joint_lines_are_the_trajectory(run):
    model, traj, _ = run
    fig = plotting.plot_joints(model, traj)
    axes = np.asarray(fig.axes).reshape(2, 2)  # rows: revolute, prismatic; columns: q, qd
    t = np.asarray(traj.time)
    for i, (name, kind) in enumerate(zip(model.link_names, model.joint_type)):
        row = 0 if kind == "R" else 1
        for col, values in ((0, traj.states.q), (1, traj.states.qd)):
            line = _lines(axes[row, col])[name]
            np.testing.assert_array_equal(line.get_xdata(), t)
            np.testing.assert_array_equal(line.get_ydata(), np.asarray(values)[:, i])
    assert "rad" in axes[0, 0].get_ylabel() and "[m]" in axes[1, 0].get_ylabel()
    assert len(_lines(axes[0, 0])) == 4 and len(_lines(axes[1, 0])) == 2  # 4 revolute, 2 prismatic joints


def test_base_attitude_of_a_known_spin(sample_model):
    """A base spinning about z at 2 rad/s for 5 s (1.6 turns), built by hand: yaw = 2 t
    (unwrapped past pi), roll = pitch = 0, angle from start = |2 t| wrapped into [0, pi]."""
    n = sample_model.num_joints
    t = np.linspace(0.0, 5.0, 101)
    angle = 2.0 * t
    quat = np.stack([np.zeros_like(t), np.zeros_like(t), np.sin(angle / 2), np.cos(angle / 2)], axis=1)
    position = np.stack([0.1 * t, np.zeros_like(t), np.zeros_like(t)], axis=1)
    template = sdjax.make_state(sample_model)
    leaves = [position, quat, np.zeros((101, 3)), np.zeros((101, 3)), np.zeros((101, n)), np.zeros((101, n))]
    states = jax.tree.unflatten(jax.tree.structure(template), [jnp.asarray(x) for x in leaves])
    controls = jax.tree.map(lambda x: jnp.zeros((100,) + x.shape), sdjax.make_controls(sample_model))
    traj = Trajectory(time=jnp.asarray(t), states=states, controls=controls)
    fig = plotting.plot_base(sample_model, traj)
    position_ax, _, attitude_ax, _ = fig.axes
    attitude = _lines(attitude_ax)
    # Degrees of exact angles through float64 quaternions and atan2: round-off, 1e-9 deg.
    np.testing.assert_allclose(attitude["yaw"].get_ydata(), np.degrees(angle), atol=1e-9)
    np.testing.assert_allclose(attitude["roll"].get_ydata(), 0.0, atol=1e-9)
    np.testing.assert_allclose(attitude["pitch"].get_ydata(), 0.0, atol=1e-9)
    wrapped = np.abs((angle + np.pi) % (2 * np.pi) - np.pi)
    np.testing.assert_allclose(
        attitude["angle from start"].get_ydata(), np.degrees(wrapped), atol=1e-9
    )  # atan2 form: round-off
    np.testing.assert_array_equal(_lines(position_ax)["x"].get_ydata(), position[:, 0])


def test_momentum_and_energy_figures(run):
    model, traj, values = run
    fig = plotting.plot_momentum(model, traj, values)
    p_ax, l_ax, drift_ax = fig.axes
    for k, axis in enumerate("xyz"):
        np.testing.assert_array_equal(_lines(p_ax)[f"P{axis}"].get_ydata(), values["linear_momentum"][:, k])
        np.testing.assert_array_equal(_lines(l_ax)[f"L{axis}"].get_ydata(), values["angular_momentum"][:, k])
    # Free floating from rest: the drift lines stay at RK4 error level (< 1e-8, see test_simulate).
    for line in drift_ax.get_lines():
        assert np.max(line.get_ydata()) < 1e-8
    fig = plotting.plot_energy(model, traj)  # quantities computed here
    top, bottom = fig.axes
    lines = _lines(top)
    np.testing.assert_allclose(
        lines["kinetic"].get_ydata(), values["kinetic_energy"], rtol=1e-12, atol=1e-15
    )  # recomputed: round-off
    assert np.max(lines["kinetic"].get_ydata()) > 0.1  # the arms moved
    # Energy balance: total energy minus the joint work is constant (RK4 error < 1e-8 J).
    assert np.max(np.abs(_lines(bottom)["E - E(0) - W"].get_ydata())) < 1e-8
    figures = plotting.plot_time_histories(model, traj, values)
    assert list(figures) == list(plotting.TIME_HISTORIES)


def test_save_time_histories(run, tmp_path):
    model, traj, values = run
    paths = plotting.save_time_histories(model, traj, tmp_path / "plots", values, dpi=40)
    assert [p.rsplit("/", 1)[-1] for p in paths] == [f"{name}.png" for name in plotting.TIME_HISTORIES]
    for p in paths:
        with Image.open(p) as image:
            assert image.format == "PNG" and image.size[0] > 100
    assert plt.get_fignums() == []  # closed after saving


def test_stick_figure_geometry(run, arm7_model):
    model, traj, _ = run
    figure = plotting.StickFigure(model, traj.states)
    frames = traj.states.q.shape[0]
    assert figure.segments.shape == (frames, 2 * model.num_joints + model.num_end_points, 2, 3)
    # Rigid links: a revolute link's joint-to-centroid bone keeps the length |c_ii|.
    for k, kind in enumerate(model.joint_type):
        bone = figure.segments[:, 2 * k + 1]
        length = np.linalg.norm(bone[:, 1] - bone[:, 0], axis=-1)
        if kind == "R":
            np.testing.assert_allclose(
                length, np.linalg.norm(np.asarray(model.centroid_to_joint[k])), rtol=1e-12
            )  # round-off
    # Fixed cubic limits enclosing every point of every frame.
    limits = figure.limits()
    ranges = limits[:, 1] - limits[:, 0]
    np.testing.assert_allclose(ranges, ranges[0], rtol=1e-12)  # equal aspect: same range on x, y, z
    points = figure.all_points()
    assert np.all(points >= limits[:, 0]) and np.all(points <= limits[:, 1])


@pytest.mark.parametrize("name", ["sample_model", "arm7_model"])
def test_base_box_has_the_base_inertia(name, request):
    """A uniform box of the base mass with the drawn corners has the base inertia tensor."""
    model = request.getfixturevalue(name)
    corners = plotting.base_box(model)
    centre = corners.mean(axis=0)
    np.testing.assert_allclose(centre, 0.0, atol=1e-12)  # centred on the base centroid
    # Edge vectors from corner 0 along the three principal axes (corners differ in one bit).
    edges = np.stack([corners[1 << k] - corners[0] for k in range(3)])
    sides = np.linalg.norm(edges, axis=1)
    axes = edges / sides[:, None]
    mass = float(model.base_mass)
    principal = (
        mass
        / 12.0
        * np.array([sides[1] ** 2 + sides[2] ** 2, sides[0] ** 2 + sides[2] ** 2, sides[0] ** 2 + sides[1] ** 2])
    )
    inertia = axes.T @ np.diag(principal) @ axes
    np.testing.assert_allclose(
        inertia, np.asarray(model.base_inertia), rtol=1e-10, atol=1e-10 * float(np.max(principal))
    )  # eigh round-off


def test_plot_frame(run):
    model, traj, _ = run
    state = jax.tree.map(lambda x: x[-1], traj.states)
    fig = plotting.plot_frame(model, state, time=1.2)
    (ax,) = fig.axes
    assert ax.name == "3d"
    kin = sdjax.forward_kinematics(model, state)
    marker_lines = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(marker_lines) == 1
    x, y, z = marker_lines[0].get_data_3d()
    np.testing.assert_array_equal(np.stack([x, y, z], axis=1), np.asarray(kin.joint_position))
    assert any(text.get_text() == "t = 1.200 s" for text in ax.texts)


def test_animation_frames(run):
    _, traj, _ = run  # 1.2 s, 61 states
    # 10 frames per simulated second over 1.2 s: frames at 0, 0.1, ..., 1.2 s -> 13.
    frames = plotting.animation_frames(traj, fps=10, speed=1.0, max_frames=100)
    np.testing.assert_array_equal(frames, np.arange(0, 61, 5))
    assert len(plotting.animation_frames(traj, fps=10, speed=1.0, max_frames=4)) == 4
    assert len(plotting.animation_frames(traj, fps=1000, speed=1.0, max_frames=1000)) == 61  # at most one per state
    assert len(plotting.animation_frames(traj, fps=10, speed=2.0, max_frames=100)) == 7  # twice as fast: 0.2 s apart


def test_animation_gif(run, tmp_path):
    model, traj, _ = run
    path = plotting.animate(model, traj, tmp_path / "run.gif", fps=5, max_frames=100, dpi=30, figsize=(3, 3))
    with Image.open(path) as image:
        # 5 frames per second over 1.2 s: t = 0, 0.2, ..., 1.2 -> 7 frames (each has its own time label).
        assert image.format == "GIF" and sum(1 for _ in ImageSequence.Iterator(image)) == 7
        assert image.size == (90, 90)  # 3 in x 30 dpi
    assert plt.get_fignums() == []


def test_animation_errors(run, tmp_path):
    model, traj, _ = run
    with pytest.raises(ValueError, match="unknown animation suffix '.avi'"):
        plotting.animate(model, traj, tmp_path / "run.avi")
    with pytest.raises(ValueError, match="animate: fps: must be positive"):
        plotting.animate(model, traj, tmp_path / "run.gif", fps=0)
    with pytest.raises(TypeError, match="animate: speed: expected a number, got str"):
        plotting.animate(model, traj, tmp_path / "run.gif", speed="fast")
    from matplotlib import animation

    if not animation.writers.is_available("ffmpeg"):
        with pytest.raises(ValueError, match="needs ffmpeg"):
            plotting.animate(model, traj, tmp_path / "run.mp4")


def test_limits_ignore_a_diverged_tail(run):
    model, traj, _ = run
    states = jax.tree.map(lambda x: x.at[-1].set(jnp.nan), traj.states)
    limits = plotting.StickFigure(model, states).limits()
    assert np.all(np.isfinite(limits))


def test_importing_sdjax_does_not_import_matplotlib():
    code = "import sys, sdjax, sdjax.plotting, sdjax.simulation, sdjax.cli; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
