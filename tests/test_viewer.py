"""The 3-D viewer (sdjax.viewer): the drawn geometry against sdjax's kinematics and closed forms,
input errors, the ``sdjax view`` command, and the real page in headless Chromium."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import sdjax
from sdjax.models import random_model, rigid_body, spacedyn_sample
from sdjax.viewer import geometry as G
from helpers import random_state, with_frames

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


def _stack(states):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *states)


def _quat_wxyz_to_matrix(wxyz):
    """Rotation matrices of scalar-first unit quaternions (written out; independent of sdjax)."""
    w, x, y, z = np.moveaxis(np.asarray(wxyz), -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


@pytest.fixture(scope="module")
def tree():
    """A random tree with branches, prismatic joints and frames on the base and on links, at
    four random states (a State with a time axis)."""
    model = with_frames(random_model(3, 7))
    return model, _stack([random_state(model, seed) for seed in range(4)])


# ------------------------------------------------------------------------------------------
# Geometry (no browser).


def test_capsules_join_the_joints_centroids_and_end_points(tree):
    """Every capsule, as the viewer poses its unit cylinder, runs between the points
    forward_kinematics gives at that sample: parent centroid -> joint i -> centroid i for each
    link, and body centroid -> end point for each end point."""
    model, states = tree
    geometry = G.scene_geometry(model, np.arange(4.0), states)
    expected = []  # (kind, index) pairs, written from the topology
    for i, p in enumerate(model.parent):
        expected += [(("c", p), ("j", i)), (("j", i), ("c", i + 1))]
    expected += [(("c", body), ("e", e)) for e, body in enumerate(model.end_point_link)]
    assert geometry.segment_start.shape == (4, len(expected), 3)
    for k in range(4):
        kin = sdjax.forward_kinematics(model, jax.tree.map(lambda x: x[k], states))
        points = {
            "c": np.asarray(kin.centroid),
            "j": np.asarray(kin.joint_position),
            "e": np.asarray(kin.end_point_position),
        }
        centre, wxyz, length = G.segment_poses(geometry.segment_start[k], geometry.segment_end[k])
        axis = _quat_wxyz_to_matrix(wxyz)[:, :, 2]  # the cylinder's z axis
        start, end = centre - 0.5 * length[:, None] * axis, centre + 0.5 * length[:, None] * axis
        for s, ((ka, ia), (kb, ib)) in enumerate(expected):
            np.testing.assert_allclose(start[s], points[ka][ia], atol=1e-12)  # float64 round-off of a few-metre model
            np.testing.assert_allclose(end[s], points[kb][ib], atol=1e-12)
        np.testing.assert_allclose(geometry.joint_position[k], points["j"], atol=1e-12)
        np.testing.assert_allclose(geometry.end_point_position[k], points["e"], atol=1e-12)
        np.testing.assert_allclose(geometry.end_point_rotation[k], np.asarray(kin.end_point_rotation), atol=1e-12)
        np.testing.assert_allclose(geometry.base_position[k], np.asarray(states.base_position[k]), atol=1e-12)


def test_segment_poses_of_edge_directions():
    """Along +z, along -z (the half turn) and of zero length: the cylinder's z axis is the
    segment direction and its centre the midpoint."""
    start = np.zeros((4, 3))
    end = np.array([[0.0, 0.0, 2.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
    centre, wxyz, length = G.segment_poses(start, end)
    np.testing.assert_allclose(length, np.linalg.norm(end, axis=1), rtol=1e-15)  # one sqrt
    np.testing.assert_allclose(centre, 0.5 * end)
    rotation = _quat_wxyz_to_matrix(wxyz)
    np.testing.assert_allclose(
        np.einsum("sij,sjk->sik", rotation, np.swapaxes(rotation, 1, 2)),
        np.broadcast_to(np.eye(3), (4, 3, 3)),
        atol=1e-15,
    )
    moving = length > 0
    np.testing.assert_allclose(
        rotation[moving, :, 2] * length[moving, None], end[moving], atol=1e-15
    )  # unit quaternions, round-off


@pytest.mark.parametrize("inertia", [np.diag([2.0, 3.0, 4.0]), [[5.0, 0.5, -0.3], [0.5, 4.0, 0.2], [-0.3, 0.2, 3.0]]])
def test_base_box_has_the_principal_moments_and_axes_of_the_base(inertia):
    """The uniform box of the base mass with the drawn sides, turned by the drawn attitude, has
    the base's inertia tensor in the inertial frame: I_k = m (a_i^2 + a_j^2) / 12."""
    model = rigid_body(120.0, np.asarray(inertia))
    state = sdjax.make_state(model, base_rpy=[0.3, -0.2, 1.1])
    geometry = G.scene_geometry(model, [0.0], _stack([state]))
    a = geometry.base_box_sides
    moments = 120.0 / 12.0 * np.array([a[1] ** 2 + a[2] ** 2, a[0] ** 2 + a[2] ** 2, a[0] ** 2 + a[1] ** 2])
    np.testing.assert_allclose(moments, np.linalg.eigvalsh(np.asarray(inertia)), rtol=1e-12)  # eigh round-off
    # The box as drawn: attitude quaternion of base rotation x principal axes.
    box = _quat_wxyz_to_matrix(G.attitudes(geometry)["box"][0])  # as sent to viser
    world = box @ np.diag(moments) @ box.T
    a0 = np.asarray(sdjax.quat_to_matrix(state.base_quaternion))
    np.testing.assert_allclose(
        world, a0 @ np.asarray(inertia) @ a0.T, atol=1e-12 * np.max(moments)
    )  # float64 round-off


def test_center_of_mass_and_momentum_markers(tree):
    """The centre of mass is sum m_i r_i / M of the kinematics' centroids; the linear momentum
    is sum m_i v_i and the angular momentum about the centre of mass
    sum A_i I_i A_i^T w_i + m_i (r_i - c) x v_i, from link_velocities."""
    model, states = tree
    geometry = G.scene_geometry(model, np.arange(4.0), states)
    masses = np.concatenate([[float(model.base_mass)], np.asarray(model.link_mass)])
    inertias = np.concatenate([np.asarray(model.base_inertia)[None], np.asarray(model.link_inertia)])
    for k in range(4):
        state = jax.tree.map(lambda x: x[k], states)
        kin = sdjax.forward_kinematics(model, state)
        r, rotation = np.asarray(kin.centroid), np.asarray(kin.rotation)
        v, w = (np.asarray(x) for x in sdjax.link_velocities(model, state))
        com = masses @ r / masses.sum()
        spin = np.einsum("bij,bjk,blk,bl->i", rotation, inertias, rotation, w) + np.sum(
            masses[:, None] * np.cross(r - com, v), axis=0
        )
        scale = float(np.max(np.abs(spin))) + 1.0
        np.testing.assert_allclose(geometry.center_of_mass[k], com, atol=1e-12)  # round-off, metres
        np.testing.assert_allclose(
            geometry.linear_momentum[k], masses @ v, atol=1e-11 * (1.0 + np.abs(masses @ v).max())
        )  # round-off
        np.testing.assert_allclose(
            geometry.angular_momentum[k], spin, atol=1e-11 * scale
        )  # round-off of sums of products


def _rod_model(radius: float, mass: float = 2.0, length: float = 1.0):
    """Base, a link with the inertia of a uniform solid cylinder (axis along the link's z), a
    massless dummy link and a small sliding end link."""
    axial, transverse = mass * radius**2 / 2.0, mass * (3 * radius**2 + length**2) / 12.0
    return sdjax.Model(
        [0, 1, 2], "RRP", base_mass=50.0, base_inertia=np.eye(3) * 5.0,
        link_mass=[mass, 0.0, 1.0], link_inertia=[np.diag([transverse, transverse, axial]), np.zeros((3, 3)), np.eye(3) * 0.01],
        parent_centroid_to_joint=[[0.0, 0.0, 0.5], [0.0, 0.0, 0.5 * length], [0.0, 0.0, 0.1]],
        centroid_to_joint=[[0.0, 0.0, -0.5 * length], [0.0, 0.0, -0.1], [0.0, 0.0, -0.1]],
        joint_rpy=[[0.0, 0.0, 0.0], [np.pi / 2, 0.0, 0.0], [0.0, 0.0, 0.0]],  # joint 2 across the rod
    )  # fmt: skip


def test_link_radius_is_that_of_the_equivalent_cylinder():
    """A link with the inertia of a uniform solid cylinder of radius r is drawn with radius r
    (inside the bounds and below the length cap); a massless link with the lower bound; radii
    clip at the bounds and at the length cap."""
    size = 2.0
    radii = G.link_radii(_rod_model(0.03), size)
    low, high = (b * size for b in G.RADIUS_BOUNDS)
    np.testing.assert_allclose(radii[1], 0.03, rtol=1e-12)  # sqrt of a ratio: round-off
    assert radii[2] == low  # massless
    assert radii[0] == pytest.approx(np.mean(radii[1:]))  # base bones: the mean link radius
    assert G.link_radii(_rod_model(0.5), size)[1] == high
    assert G.link_radii(_rod_model(1e-4), size)[1] == low
    # At most RADIUS_PER_LENGTH of the link's longest bone: a short, thick segment stays a rod.
    lengths = np.array([1.0, 0.2, 0.1, 0.1])
    assert G.link_radii(_rod_model(0.03), size, lengths)[1] == 0.03  # 0.03 < 0.3 x 0.2
    assert G.link_radii(_rod_model(0.07), size, lengths)[1] == pytest.approx(G.RADIUS_PER_LENGTH * 0.2, rel=1e-15)
    # The drawn model: the rod's longest bone is half its length (joint -> centroid -> next joint).
    rod = _rod_model(0.03)
    geometry = G.scene_geometry(rod, [0.0], _stack([sdjax.make_state(rod)]))
    np.testing.assert_allclose(geometry.segment_radius[geometry.segment_body == 1], 0.03, rtol=1e-12)


def test_a_batch_is_drawn_as_ghosts_of_one_size(sample_model):
    """A batch (leading axis B) gives B trajectories, flagged as ghosts, each the geometry of
    its own states, all at the size of the first; a list keeps its items apart."""
    states = _stack([_stack([random_state(sample_model, 10 * b + k) for k in range(3)]) for b in range(2)])
    times = np.array([0.0, 0.5, 1.0])
    batch = sdjax.Trajectory(times, states, sdjax.make_controls(sample_model))  # controls are not drawn
    single = jax.tree.map(lambda x: x[0], states)
    items = G.split_trajectories([single, batch])
    assert [(i.where, i.group, i.batched) for i in items] == [
        ("trajectory[0]", 0, False), ("trajectory[1][0]", 1, True), ("trajectory[1][1]", 1, True)
    ]  # fmt: skip
    np.testing.assert_array_equal(items[0].time, np.arange(3.0))  # a State has no times: sample indices
    np.testing.assert_array_equal(items[2].time, times)
    geometries = G.scene_geometries(sample_model, items, labels=["nominal", "mc0", "mc1"])
    assert [g.label for g in geometries] == ["nominal", "mc0", "mc1"]
    assert len({g.size for g in geometries}) == 1
    alone = G.scene_geometry(sample_model, times, jax.tree.map(lambda x: x[1], states), size=geometries[0].size)
    np.testing.assert_array_equal(geometries[2].segment_end, alone.segment_end)


def test_frame_index_and_camera():
    times = np.array([0.0, 0.1, 0.2, 0.4])
    assert [G.frame_index(times, t) for t in (-1.0, 0.0, 0.15, 0.2, 0.39, 0.4, 9.0)] == [0, 0, 1, 2, 2, 3, 3]


def test_camera_sees_every_point(tree):
    """Every drawn point lies inside the camera's cone of half-angle fov/2 around the view
    direction (the bounding sphere is framed, with a margin)."""
    model, states = tree
    geometry = G.scene_geometry(model, np.arange(4.0), states)
    fov = np.radians(50.0)
    position, look_at = G.camera_pose([geometry], fov)
    view = (look_at - position) / np.linalg.norm(look_at - position)
    rays = geometry.points() - position
    angles = np.arccos(np.clip(rays @ view / np.linalg.norm(rays, axis=1), -1.0, 1.0))
    assert np.max(angles) < 0.5 * fov / G.CAMERA_MARGIN * 1.001  # within the margin (sin ~ angle: 0.1 % slack)


def test_a_diverged_run_is_drawn_until_it_diverges(sample_model):
    """Samples whose coordinates overflow (or are NaN) are not drawn (NaN), the others are, and
    when the drawn ones spread over more than CAMERA_MAX_SPREAD sizes (here 1e5 m away) the
    initial view frames the first sample."""
    states = _stack([random_state(sample_model, seed) for seed in range(4)])
    far = states.base_position.at[1].add(1e5).at[2].set(1e200).at[3].set(jnp.nan)
    geometry = G.scene_geometry(sample_model, np.arange(4.0), eqx.tree_at(lambda s: s.base_position, states, far))
    assert np.all(np.isfinite(geometry.segment_start[:2])) and np.all(np.isnan(geometry.segment_start[2:]))
    assert np.all(np.isfinite(geometry.center_of_mass[:2])) and np.all(np.isnan(geometry.center_of_mass[2:]))
    start = G.scene_geometry(sample_model, np.arange(1.0), jax.tree.map(lambda x: x[:1], states))
    for got, want in zip(G.camera_pose([geometry], 0.8), G.camera_pose([start], 0.8)):
        np.testing.assert_allclose(got, want, rtol=1e-12)  # same points, same arithmetic
    centre, wxyz, length = G.segment_poses(
        geometry.segment_start[3], geometry.segment_end[3]
    )  # no warnings (errors here)
    assert np.all(np.isnan(centre))


BAD_INPUTS = [
    (
        lambda m, s: jax.tree.map(lambda x: x[..., :0] if x.ndim == 2 and x.shape[-1] == 6 else x, s),
        "trajectory.states.q: 0 joint coordinates, but model 'spacedyn_sample' has 6 joints",
    ),
    (lambda m, s: jax.tree.map(lambda x: x[0], s), "trajectory.states.q: expected shape (T, n) or (B, T, n)"),
    (
        lambda m, s: eqx.tree_at(lambda t: t.base_position, s, s.base_position[:2]),  # tree_at skips State's own check
        "trajectory.states.base_position: expected shape (3, 3) to match states.q (3, 6), got (2, 3)",
    ),
    (
        lambda m, s: sdjax.Trajectory(jnp.arange(2.0), s, sdjax.make_controls(m)),
        "trajectory.time: expected shape (3,) (one time per state), got (2,)",
    ),
    (
        lambda m, s: sdjax.Trajectory(jnp.array([0.0, 1.0, 1.0]), s, sdjax.make_controls(m)),
        "trajectory.time: times must be finite and increasing",
    ),
    (lambda m, s: [], "trajectory: expected at least one trajectory, got an empty list"),
    (lambda m, s: [s, [s]], "trajectory[1]: expected a Trajectory or a State, got a nested list"),
    (
        lambda m, s: np.zeros((3, 6)),
        "trajectory: expected a sdjax Trajectory, a State with a time axis or a list of them, got ndarray",
    ),
]


@pytest.mark.parametrize("make, message", BAD_INPUTS)
def test_bad_trajectory_names_the_field(make, message):
    model = spacedyn_sample()
    states = _stack([sdjax.make_state(model)] * 3)
    with pytest.raises(ValueError) as err:
        G.scene_geometries(model, G.split_trajectories(make(model, states)))
    assert message in str(err.value)


def test_bad_labels_models_and_opacity(sample_model):
    from sdjax.viewer.server import _opacities

    items = G.split_trajectories([_stack([sdjax.make_state(sample_model)] * 2)] * 2)
    for kwargs, message in [
        (dict(labels=["a"]), "labels: expected 2 labels (one per trajectory), got 1"),
        (dict(labels=["a", "a"]), "labels: expected distinct labels"),
        (
            dict(models=[sample_model]),
            "model: expected a Model or a list of 2 Models (one per trajectory), got 1 items",
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            G.scene_geometries(kwargs.pop("models", sample_model), items, **kwargs)
    with pytest.raises(
        ValueError, match=re.escape("opacity: expected one number or 2 (one per trajectory), got shape (3,)")
    ):
        _opacities([1.0, 0.5, 0.5], 2, [False, False])
    with pytest.raises(ValueError, match=re.escape("opacity: expected values in (0, 1], got [1.0, 0.0]")):
        _opacities([1.0, 0.0], 2, [False, False])
    assert _opacities(None, 3, [False, True, True]) == [1.0, 0.3, 0.3]


def test_missing_viser_names_the_extra(monkeypatch, sample_model):
    monkeypatch.setitem(sys.modules, "viser", None)  # import viser now raises ImportError
    from sdjax import viewer

    with pytest.raises(ImportError, match=re.escape("pip install 'sdjax[viewer]'")):
        viewer.show(sample_model, _stack([sdjax.make_state(sample_model)] * 2))


def test_importing_sdjax_does_not_import_viser():
    code = "import sys, sdjax, sdjax.viewer, sdjax.cli; print('viser' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------
# The server: the command line and the page in a real browser.


@pytest.fixture(scope="module")
def sample_run(sample_model):
    """The sample robot reaching far (4 x sample_v1r2's target): 1 s in 20 steps of 0.05 s."""
    law = sdjax.JointPD(10.0, 10.0, 4.0 * jnp.asarray([0.3, 0.2, 0.1, 0.6, 0.5, 0.4]))
    return sdjax.rollout(sample_model, sdjax.make_state(sample_model), 0.05, 20, law)


def test_view_command_serves_the_page_until_interrupted(sample_model, sample_run, tmp_path):
    from sdjax.simulation import SimulationRun

    path = tmp_path / "reach.npz"
    SimulationRun(sample_model, sample_run).save(path)
    command = [sys.executable, "-m", "sdjax", "view", str(path), "--no-browser", "--port", "0"]
    # faulthandler: a SIGABRT (sent below if the server does not exit) prints every thread's stack.
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    watchdog = threading.Timer(120.0, process.kill)  # a hung server fails the test instead of hanging it
    watchdog.start()
    try:
        for line in process.stdout:  # viser's banner, then ours once the server is up
            if line.startswith("sdjax view:"):
                break
        match = re.search(r"sdjax view: reach \(spacedyn_sample, 20 steps\) at (http://\S+);", line)
        assert match, (line, process.stderr.read() if process.poll() is not None else "")
        with urllib.request.urlopen(match.group(1), timeout=30) as response:
            assert response.status == 200 and b"<html" in response.read().lower()
        process.send_signal(signal.SIGINT)
        try:  # (for the message below)
            with open(f"/proc/{process.pid}/status") as status:
                masks = [line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
        except OSError as error:
            masks = [str(error)]
        # The server's own shutdown is bounded by ~11 s of joins (playback thread, viser's loop
        # thread); it takes under 1 s alone and ~15 s on a loaded machine.
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # the threads' stacks, for the message below
            process.wait(timeout=30)
            stderr = process.stderr.read()
            pytest.fail(
                f"sdjax view did not exit within 60 s of Ctrl-C; signal masks {masks}; its stderr before the "
                f"stacks:\n{stderr[:-8000][-4000:]}\nits threads:\n{stderr[-8000:]}"
            )
        assert process.returncode == 0, process.stderr.read()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def test_a_ctrl_c_stops_wait(sample_model, sample_run):
    """``Viewer.wait`` ends on a Ctrl-C with ``KeyboardInterrupt``: a SIGINT to the process, and
    one sent to the waiting thread while that thread blocks SIGINT (a mask inherited from the
    process that started it would leave it pending for ever: wait unblocks it). Its handler
    only records the signal and the loop raises; the previous handler and mask are back after.
    (A close() after 5 s ends a wait that missed the signal, and the test fails.)"""
    pytest.importorskip("viser")
    from sdjax import viewer

    shown = viewer.show(sample_model, sample_run, port=0)
    original = signal.getsignal(signal.SIGINT)
    main = threading.main_thread().ident
    try:
        for blocked in (False, True):
            if blocked:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                send = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
            else:
                send = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
            rescue = threading.Timer(5.0, shown.close)
            send.start()
            rescue.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    shown.wait()
            finally:
                rescue.cancel()
                send.join()
            assert signal.getsignal(signal.SIGINT) is original
            assert (signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())) == blocked
    finally:
        if signal.SIGINT in signal.sigpending():  # (one a failed wait left pending: dropped)
            signal.sigwait({signal.SIGINT})
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        shown.close()


def test_scene_follows_the_timeline(sample_model, sample_run):
    """The scene nodes hold the geometry of the sample shown: the first trajectory's sample,
    and for a trajectory on a coarser time grid its last sample at or before that time;
    set_time refuses bad indices; play() advances the time and stops."""
    from sdjax import viewer

    coarse = sdjax.Trajectory(
        sample_run.time[::4], jax.tree.map(lambda x: x[::4], sample_run.states), sample_run.controls
    )
    shown = viewer.show(sample_model, [sample_run, coarse], labels=["executed", "planned"], port=0, momentum=True)
    try:
        for index in (0, 7, 20, -1):
            shown.set_time(index)
            assert shown.index == index % 21
            for robot, geometry in zip(shown._robots, shown.geometries):
                k = G.frame_index(geometry.time, float(sample_run.time[index]))
                centre, _, length = G.segment_poses(geometry.segment_start[k], geometry.segment_end[k])
                np.testing.assert_allclose(robot.bones.batched_positions, centre, atol=1e-6)  # viser stores float32
                np.testing.assert_allclose(robot.bones.batched_scales[:, 2], length, atol=1e-6)
                np.testing.assert_allclose(robot.joints.batched_positions, geometry.joint_position[k], atol=1e-6)
            first = shown.geometries[0]
            # Started at rest: the momentum is a conserved zero, no arrow (both ends on the centre of mass).
            np.testing.assert_allclose(
                shown._robots[0].momentum.points, np.broadcast_to(first.center_of_mass[index], (2, 2, 3)), atol=1e-6
            )
        assert f'src="{shown.url}"' in shown._repr_html_()  # Jupyter shows the page inline
        with pytest.raises(IndexError, match="set_time: index 21 out of range for 21 samples"):
            shown.set_time(21)
        with pytest.raises(TypeError, match="set_time: index must be an integer sample index, got float"):
            shown.set_time(1.5)
        with pytest.raises(
            ValueError,
            match=re.escape("set_visible: no trajectory labelled 'nominal'; labels are ['executed', 'planned']"),
        ):
            shown.set_visible("nominal", False)
        shown.set_time(0)
        shown.play()
        start = time.monotonic()
        while shown.index == 0 and time.monotonic() - start < 10:
            time.sleep(0.05)
        shown.play(False)
        stopped = shown.index
        assert stopped > 0 and not shown.playing
        time.sleep(0.2)
        assert shown.index == stopped
    finally:
        shown.close()


def _projector(camera):
    """Pixel coordinates of inertial points ``(P, 3) -> (P, 2)`` seen by a viser client's
    pinhole camera (vertical field of view, square pixels)."""
    position, look_at, up = (np.asarray(x, np.float64) for x in (camera.position, camera.look_at, camera.up_direction))
    forward = (look_at - position) / np.linalg.norm(look_at - position)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    focal = 0.5 * camera.image_height / np.tan(0.5 * camera.fov)

    def project(points):
        d = np.asarray(points) - position
        depth = d @ forward
        return np.stack(
            [
                0.5 * camera.image_width + focal * (d @ right) / depth,
                0.5 * camera.image_height + focal * (d @ down) / depth,
            ],
            -1,
        )

    return project


def _on(mask, pixels, reach=2):
    """Whether ``mask`` has a set pixel within ``reach`` pixels of each ``(x, y)``."""
    out = []
    for x, y in np.round(pixels).astype(int):
        window = mask[max(y - reach, 0) : y + reach + 1, max(x - reach, 0) : x + reach + 1]
        out.append(bool(window.any()))
    return np.array(out)


@pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium); the browser test needs it"
)
def test_robot_is_drawn_and_scrubbed_in_a_real_browser(sample_model, sample_run, tmp_path):
    """Headless Chromium (software WebGL) opens the viewer: the robot's pixels are where its
    joints project through the browser's own camera, the links have their material's colour,
    and moving the time slider moves them."""
    import io

    from PIL import Image
    from playwright.sync_api import sync_playwright

    from sdjax import viewer

    shown = viewer.show(sample_model, sample_run, port=0, labels=["reach"])
    geometry = shown.geometries[0]
    try:
        shown.server.gui.main_panel.minimize()  # keep the GUI panel off the robot
        shown.set_visible("reach", False)  # first the empty scene: the background
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--use-angle=swiftshader", "--enable-unsafe-swiftshader"]
            )
            try:
                page = browser.new_page(viewport={"width": 1000, "height": 800})
                page.goto(shown.url)

                def screenshot():
                    return np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("RGB")).astype(np.int32)

                def settled(unlike=None, timeout=60.0):
                    """The page once two screenshots 0.3 s apart agree (and differ from ``unlike``)."""
                    previous, start = screenshot(), time.monotonic()
                    while time.monotonic() - start < timeout:
                        time.sleep(0.3)
                        current = screenshot()
                        if np.array_equal(current, previous) and (
                            unlike is None or not np.array_equal(current, unlike)
                        ):
                            return current
                        previous = current
                    raise TimeoutError("the page did not settle")

                start = time.monotonic()
                while not shown.server.get_clients():
                    assert time.monotonic() - start < 60, "the browser did not connect"
                    time.sleep(0.1)
                time.sleep(1.0)
                background = settled()
                shown.set_visible("reach", True)
                first = settled(unlike=background)
                project = _projector(next(iter(shown.server.get_clients().values())).camera)
                Image.fromarray(first.astype(np.uint8)).save(tmp_path / "first.png")  # for a look when it fails
                # Colour differences above 40 of 255 (anti-aliased edges blend less).
                robot = np.abs(first - background).max(axis=-1) > 40
                joints = project(geometry.joint_position[0])
                assert np.all((joints > 0) & (joints < [1000, 800])), joints  # the camera frames the robot
                assert np.all(_on(robot, joints)), joints[~_on(robot, joints)]
                assert robot.mean() < 0.5  # the robot, not a changed background
                # Link material: blue at each link's centroid, where its two capsules meet (the
                # joint -> centroid bones come second for each link, as test_capsules_... checks).
                centroids = project(geometry.segment_end[0, 1 : 2 * sample_model.num_joints : 2])
                for x, y in np.round(centroids).astype(int):
                    r, g, b = first[y, x]
                    assert robot[y, x] and b > r + 30, (x, y, first[y, x])  # lit blue: blue well above red
                # Scrubbing: the last sample, drawn where the joints are then.
                shown.set_time(-1)
                assert shown.index == 20
                last = settled(unlike=first)
                moved = np.abs(last - first).max(axis=-1) > 40
                robot_last = np.abs(last - background).max(axis=-1) > 40
                assert np.all(_on(robot_last, project(geometry.joint_position[-1])))
                far = (
                    np.linalg.norm(project(geometry.joint_position[-1]) - joints, axis=-1) > 10
                )  # joints that moved on screen
                assert far.any() and np.all(_on(moved, project(geometry.joint_position[-1])[far]))
                Image.fromarray(last.astype(np.uint8)).save(tmp_path / "last.png")  # for a look when it fails
            finally:
                browser.close()
    finally:
        shown.close()
