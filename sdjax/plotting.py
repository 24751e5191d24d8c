"""Figures of a simulated run: time histories and a 3-D stick-figure animation.

matplotlib is imported inside the functions, so ``import sdjax`` needs neither matplotlib nor
a display; on a machine without a display select the non-interactive backend first
(``MPLBACKEND=Agg`` or ``matplotlib.use("Agg")``; the ``sdjax plot`` command does).

Time histories (each returns a ``matplotlib.figure.Figure``; ``trajectory`` is a
:class:`~sdjax.Trajectory` from :func:`sdjax.rollout` or :func:`sdjax.simulation.simulate`):

- :func:`plot_joints`: joint positions and rates, revolute (rad, rad/s) and prismatic (m, m/s)
  joints on separate axes, one line per joint labelled with the link name;
- :func:`plot_base`: base centroid position and velocity (inertial frame), attitude as
  SpaceDyn RPY angles of ``A0`` (:func:`sdjax.matrix_to_rpy`, unwrapped in time) with the
  rotation angle from the initial attitude, and the base angular velocity;
- :func:`plot_momentum`: linear momentum, angular momentum about the inertial origin and their
  drift from the initial values;
- :func:`plot_energy`: kinetic, potential and total energy against the initial energy plus the
  work of the joint forces, and the balance residual.

:func:`plot_frame` draws one configuration and :func:`animate` writes a GIF (Pillow) or MP4
(ffmpeg) of the whole motion. The stick figure follows the tree: every body is drawn as bones
(dark grey) from its centroid (purple dot) to its own joint, to its children's joints and to its
end points; joints are white circles, end points orange triangles (with their paths as
trails). The base is its *inertia-equivalent box* (the uniform box with the base's mass and
principal moments, sides ``a_k = sqrt(6 (tr I - 2 I_k) / m)`` along the principal axes) with
its frame axes (x red, y green, z blue). The axes have fixed limits covering the whole motion
and equal scales.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from sdjax._checks import check_scalar
from sdjax.integrate import Trajectory
from sdjax.kinematics import forward_kinematics
from sdjax.model import Model
from sdjax.rotation import matrix_to_rpy, quat_multiply, quat_conjugate, quat_to_matrix
from sdjax.state import State

#: Names of the figures of :func:`plot_time_histories` (also the PNG file stems).
TIME_HISTORIES = ("joints", "base", "momentum", "energy")

_AXIS_COLORS = ("tab:red", "tab:green", "tab:blue")
_XYZ = ("x", "y", "z")


def _pyplot():
    import matplotlib.pyplot as plt

    return plt


def _time(trajectory: Trajectory) -> np.ndarray:
    return np.asarray(trajectory.time, dtype=np.float64)


def _quantities(model: Model, trajectory: Trajectory, quantities: Mapping[str, Any] | None) -> Mapping[str, np.ndarray]:
    if quantities is not None:
        return quantities
    from sdjax.simulation import trajectory_quantities

    return trajectory_quantities(model, trajectory)


# ------------------------------------------------------------------------------------------
# Time histories.


def plot_joints(model: Model, trajectory: Trajectory):
    """Joint positions (left) and rates (right) against time.

    Revolute joints (rad, rad/s) and prismatic joints (m, m/s) get separate rows; each line is
    labelled with its link name.

    Arguments:
        model: the system (joint types and link names).
        trajectory: ``N + 1`` states.

    Returns:
        The Figure.
    """
    plt = _pyplot()
    t = _time(trajectory)
    q = np.asarray(trajectory.states.q)
    qd = np.asarray(trajectory.states.qd)
    groups = [(kind, [i for i, j in enumerate(model.joint_type) if j == kind]) for kind in ("R", "P")]
    groups = [(kind, idx) for kind, idx in groups if idx] or [("R", [])]
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.4 * len(groups)), sharex=True, squeeze=False)
    units = {"R": ("rad", "rad/s", "revolute"), "P": ("m", "m/s", "prismatic")}
    for row, (kind, idx) in zip(axes, groups):
        unit, rate_unit, label = units[kind]
        for i in idx:
            (line,) = row[0].plot(t, q[:, i], label=model.link_names[i])
            row[1].plot(t, qd[:, i], label=model.link_names[i], color=line.get_color())
        row[0].set_ylabel(f"{label} q [{unit}]")
        row[1].set_ylabel(f"{label} qd [{rate_unit}]")
        for ax in row:
            ax.grid(True, alpha=0.3)
        if idx:
            row[0].legend(fontsize=8, ncol=2)
    for ax in axes[-1]:
        ax.set_xlabel("time [s]")
    axes[0, 0].set_title("joint positions")
    axes[0, 1].set_title("joint rates")
    fig.suptitle(f"{model.name}: joints")
    fig.tight_layout()
    return fig


def base_attitude(trajectory: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    """Base attitude along a trajectory, as plotted by :func:`plot_base`.

    Returns:
        ``rpy`` ``(N + 1, 3)``: SpaceDyn RPY angles of ``A0`` (``A0 = Rx Ry Rz``), rad,
        unwrapped in time (no 2 pi jumps); ``angle`` ``(N + 1,)``: rotation angle from the
        initial attitude, rad, in ``[0, pi]``.
    """
    quat = np.asarray(trajectory.states.base_quaternion)
    rpy = np.unwrap(np.asarray(matrix_to_rpy(quat_to_matrix(quat))), axis=0)
    relative = np.asarray(quat_multiply(quat, quat_conjugate(quat[:1])))
    angle = 2.0 * np.arctan2(np.linalg.norm(relative[:, :3], axis=-1), np.abs(relative[:, 3]))
    return rpy, angle


def plot_base(model: Model, trajectory: Trajectory):
    """Base centroid position and velocity, attitude (RPY, deg) and angular velocity (deg/s).

    Arguments:
        model: the system (its name titles the figure).
        trajectory: ``N + 1`` states.

    Returns:
        The Figure (2 x 2 axes; lines labelled ``x``, ``y``, ``z`` / ``roll``, ``pitch``,
        ``yaw``, ``angle from start``).
    """
    plt = _pyplot()
    t = _time(trajectory)
    states = trajectory.states
    rpy, angle = base_attitude(trajectory)
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
    panels = (
        (axes[0, 0], np.asarray(states.base_position), _XYZ, "position r0 [m]", 1.0),
        (axes[0, 1], np.asarray(states.base_linear_velocity), _XYZ, "velocity v0 [m/s]", 1.0),
        (axes[1, 0], rpy, ("roll", "pitch", "yaw"), "attitude (RPY of A0) [deg]", np.degrees(1.0)),
        (axes[1, 1], np.asarray(states.base_angular_velocity), _XYZ, "angular velocity w0 [deg/s]", np.degrees(1.0)),
    )
    for ax, values, labels, ylabel, scale in panels:
        for k, (label, color) in enumerate(zip(labels, _AXIS_COLORS)):
            ax.plot(t, scale * values[:, k], label=label, color=color)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    axes[1, 0].plot(t, np.degrees(angle), "k--", label="angle from start")
    for ax in axes.flat:
        ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("time [s]")
    fig.suptitle(f"{model.name}: base (inertial frame)")
    fig.tight_layout()
    return fig


def plot_momentum(model: Model, trajectory: Trajectory, quantities: Mapping[str, Any] | None = None):
    """Linear and angular momentum (about the inertial origin) and their drift.

    Arguments:
        model: the system.
        trajectory: ``N + 1`` states.
        quantities: precomputed :func:`sdjax.simulation.trajectory_quantities` (e.g. from a run
            file); computed when omitted.

    Returns:
        The Figure: P components [kg m/s], L components [kg m^2/s] and
        ``|P - P(0)|``, ``|L - L(0)|`` (zero up to integration error without external forces).
    """
    plt = _pyplot()
    values = _quantities(model, trajectory, quantities)
    t = _time(trajectory)
    p = np.asarray(values["linear_momentum"])
    am = np.asarray(values["angular_momentum"])
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for k, (label, color) in enumerate(zip(_XYZ, _AXIS_COLORS)):
        axes[0].plot(t, p[:, k], label=f"P{label}", color=color)
        axes[1].plot(t, am[:, k], label=f"L{label}", color=color)
    axes[2].plot(t, np.linalg.norm(p - p[0], axis=-1), label="|P - P(0)| [kg m/s]", color="tab:purple")
    axes[2].plot(t, np.linalg.norm(am - am[0], axis=-1), label="|L - L(0)| [kg m^2/s]", color="tab:orange")
    axes[0].set_ylabel("linear momentum [kg m/s]")
    axes[1].set_ylabel("angular momentum\nabout origin [kg m^2/s]")
    axes[2].set_ylabel("drift")
    axes[2].set_xlabel("time [s]")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(f"{model.name}: momentum (inertial frame)")
    fig.tight_layout()
    return fig


def plot_energy(model: Model, trajectory: Trajectory, quantities: Mapping[str, Any] | None = None):
    """Energies and the energy balance.

    Top: kinetic ``T``, potential ``V`` and total ``E = T + V`` energy, and ``E(0) + W`` with
    ``W`` the work of the joint forces (``quantities["joint_work"]``). Bottom: the residual
    ``E - E(0) - W``, zero up to the integrator's error when no base or end-point forces act
    and the joints are not passive (stiffness and damping are not counted in ``W``).

    Arguments:
        model: the system.
        trajectory: ``N + 1`` states, ``N`` controls.
        quantities: precomputed :func:`sdjax.simulation.trajectory_quantities`, or None.

    Returns:
        The Figure (labels ``kinetic``, ``potential``, ``total``, ``E(0) + joint work``,
        ``E - E(0) - W``), J.
    """
    plt = _pyplot()
    values = _quantities(model, trajectory, quantities)
    t = _time(trajectory)
    kinetic = np.asarray(values["kinetic_energy"])
    potential = np.asarray(values["potential_energy"])
    total = kinetic + potential
    work = np.asarray(values["joint_work"])
    fig, axes = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True, gridspec_kw={"height_ratios": (2, 1)})
    axes[0].plot(t, kinetic, label="kinetic", color="tab:blue")
    axes[0].plot(t, potential, label="potential", color="tab:green")
    axes[0].plot(t, total, label="total", color="k")
    axes[0].plot(t, total[0] + work, "--", label="E(0) + joint work", color="tab:orange")
    axes[1].plot(t, total - total[0] - work, label="E - E(0) - W", color="tab:red")
    axes[0].set_ylabel("energy [J]")
    axes[1].set_ylabel("balance residual [J]")
    axes[1].set_xlabel("time [s]")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(f"{model.name}: energy")
    fig.tight_layout()
    return fig


def plot_time_histories(
    model: Model, trajectory: Trajectory, quantities: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """All time histories: ``{"joints", "base", "momentum", "energy"}`` -> Figure."""
    values = _quantities(model, trajectory, quantities)
    return {
        "joints": plot_joints(model, trajectory),
        "base": plot_base(model, trajectory),
        "momentum": plot_momentum(model, trajectory, values),
        "energy": plot_energy(model, trajectory, values),
    }


def save_time_histories(
    model: Model,
    trajectory: Trajectory,
    directory: str | os.PathLike,
    quantities: Mapping[str, Any] | None = None,
    *,
    dpi: int = 100,
) -> list[str]:
    """Write the figures of :func:`plot_time_histories` as ``<directory>/<name>.png``
    (the directory is created) and close them; returns the paths."""
    plt = _pyplot()
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, fig in plot_time_histories(model, trajectory, quantities).items():
        path = os.path.join(os.fspath(directory), f"{name}.png")
        fig.savefig(path, dpi=dpi)
        plt.close(fig)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------------
# Stick figure.


def inertia_box(mass: Any, inertia: Any) -> tuple[np.ndarray, np.ndarray]:
    """The uniform box with a body's mass and principal moments (its *inertia-equivalent box*).

    A uniform box of mass ``m`` and sides ``a_k`` has principal moments
    ``I_k = m (a_i^2 + a_j^2) / 12`` (``i, j`` the other two axes), so
    ``a_k = sqrt(6 (I_1 + I_2 + I_3 - 2 I_k) / m)``, non-negative when the moments obey the
    triangle inequality (a body that breaks it gets the side clipped to zero). A massless body
    is a point.

    Arguments:
        mass: ``()`` kg.
        inertia: ``(3, 3)`` inertia about the centroid, body frame, kg m^2.

    Returns:
        ``sides`` ``(3,)`` m, in the order of ascending principal moments, and ``axes``
        ``(3, 3)``: column ``k`` is the body-frame unit vector along side ``k`` (a proper
        rotation, determinant +1).
    """
    inertia = np.asarray(inertia, np.float64)
    moments, axes = np.linalg.eigh(0.5 * (inertia + inertia.T))
    if np.linalg.det(axes) < 0:
        axes[:, 2] = -axes[:, 2]
    if not float(mass) > 0:
        return np.zeros(3), axes
    return np.sqrt(np.maximum(6.0 * (np.sum(moments) - 2.0 * moments) / float(mass), 0.0)), axes


def box_corners(sides: Any, axes: Any) -> np.ndarray:
    """Corners ``(8, 3)`` of a box centred at the origin with ``sides`` ``(3,)`` along the
    columns of ``axes`` ``(3, 3)``; corner ``c`` is + along axis ``k`` when bit ``k`` of ``c``
    is set."""
    signs = np.array([[1.0 if (c >> k) & 1 else -1.0 for k in range(3)] for c in range(8)])
    return (signs * (0.5 * np.asarray(sides))) @ np.asarray(axes).T


def base_box(model: Model) -> np.ndarray:
    """Corners of the base's inertia-equivalent box (:func:`inertia_box`, :func:`box_corners`)
    in the base frame, ``(8, 3)`` m. A massless base (a fixed base may have none) is drawn as a
    point: every corner at the origin.
    """
    return box_corners(*inertia_box(model.base_mass, model.base_inertia))


#: Box edges as corner pairs (corners differ in exactly one bit).
_BOX_EDGES = tuple((a, a | (1 << k)) for a in range(8) for k in range(3) if not a & (1 << k))


def body_segments(model: Model) -> list[tuple[str, int, str, int]]:
    """Static list of the bones ``(kind_a, index_a, kind_b, index_b)`` with kinds ``"c"``
    (centroid of body), ``"j"`` (joint of link, 0-based) and ``"e"`` (end point): for every
    link, parent centroid -> its joint and joint -> its centroid; then body centroid -> each
    end point. The bone belongs to body ``index_a`` when ``kind_a == "c"``, else to ``index_b``."""
    segments = []
    for k, p in enumerate(model.parent):
        segments.append(("c", p, "j", k))  # parent centroid -> joint k+1
        segments.append(("j", k, "c", k + 1))  # joint k+1 -> its link's centroid
    for e, link in enumerate(model.end_point_link):
        segments.append(("c", link, "e", e))
    return segments


class StickFigure:
    """Points of the stick figure at chosen states, NumPy arrays, inertial frame, m.

    Attributes:
        centroid: ``(F, n + 1, 3)``; joint: ``(F, n, 3)``; end_point: ``(F, ne, 3)``;
        end_point_rotation: ``(F, ne, 3, 3)`` end-point-frame-to-inertial rotations;
        rotation: ``(F, 3, 3)`` base attitude ``A0``; box: ``(F, 8, 3)`` base box corners;
        axes: ``(F, 3, 3)`` tips of the base frame axes (x, y, z), from ``centroid[:, 0]``;
        segments: ``(F, S, 2, 3)`` bone segments following the tree.
    """

    def __init__(self, model: Model, states: State):
        batched = jax.vmap(forward_kinematics, in_axes=(None, 0))
        kin = jax.device_get(batched(model, states))
        self.centroid = np.asarray(kin.centroid, np.float64)
        self.joint = np.asarray(kin.joint_position, np.float64)
        self.end_point = np.asarray(kin.end_point_position, np.float64)
        self.end_point_rotation = np.asarray(kin.end_point_rotation, np.float64)
        self.rotation = np.asarray(kin.rotation[:, 0], np.float64)
        corners = base_box(model)
        r0 = self.centroid[:, 0]
        self.box = r0[:, None] + np.einsum("fij,cj->fci", self.rotation, corners)
        size = float(np.max(np.ptp(corners, axis=0))) if corners.size else 0.0
        length = 0.75 * size if size > 0 else 0.5
        self.axes = r0[:, None] + length * np.swapaxes(self.rotation, 1, 2)
        points = {"c": self.centroid, "j": self.joint, "e": self.end_point}
        segs = body_segments(model)
        self.segments = (
            np.stack([np.stack([points[ka][:, ia], points[kb][:, ib]], axis=1) for ka, ia, kb, ib in segs], axis=1)
            if segs
            else np.zeros((len(self.centroid), 0, 2, 3))
        )

    def all_points(self) -> np.ndarray:
        """Every drawn point, ``(P, 3)``."""
        parts = [self.centroid, self.joint, self.end_point, self.box, self.axes]
        return np.concatenate([p.reshape(-1, 3) for p in parts])

    def limits(self, margin: float = 0.05) -> np.ndarray:
        """Cubic axis limits ``(3, 2)`` enclosing every point of every frame (equal ranges)."""
        points = self.all_points()
        points = points[np.all(np.isfinite(points), axis=1)]  # a diverged run: draw what is finite
        if not points.size:
            points = np.zeros((1, 3))
        low, high = points.min(axis=0), points.max(axis=0)
        centre = 0.5 * (low + high)
        half = 0.5 * float(np.max(high - low)) * (1.0 + 2.0 * margin)
        half = half if half > 0 else 1.0
        return np.stack([centre - half, centre + half], axis=1)


def _polyline(segments: np.ndarray) -> np.ndarray:
    """``(S, 2, 3)`` segments as one ``(3 S, 3)`` polyline with NaN breaks."""
    breaks = np.full(segments.shape[:1] + (1, 3), np.nan)
    return np.concatenate([segments, breaks], axis=1).reshape(-1, 3)


class _Artists:
    """The matplotlib artists of one stick figure, updated frame by frame."""

    def __init__(self, ax, figure: StickFigure, trail: bool):
        self.figure = figure
        empty: tuple[list[float], list[float], list[float]] = ([], [], [])
        self.bones = ax.plot(*empty, color="0.15", linewidth=2.5, solid_capstyle="round")[0]
        self.box = ax.plot(*empty, color="0.55", linewidth=1.2)[0]
        self.axes = [ax.plot(*empty, color=c, linewidth=2.0)[0] for c in _AXIS_COLORS]
        self.centroids = ax.plot(*empty, linestyle="none", marker=".", color="tab:purple", markersize=6)[0]
        self.joints = ax.plot(
            *empty, linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="k", markersize=6
        )[0]
        self.ends = ax.plot(*empty, linestyle="none", marker="^", color="tab:orange", markersize=8)[0]
        self.trails = (
            [ax.plot(*empty, color="tab:orange", linewidth=0.8, alpha=0.6)[0] for _ in range(figure.end_point.shape[1])]
            if trail
            else []
        )
        self.label = ax.text2D(0.02, 0.95, "", transform=ax.transAxes)

    def update(self, f: int, t: float | None):
        fig = self.figure
        self.bones.set_data_3d(*_polyline(fig.segments[f]).T)
        self.box.set_data_3d(*_polyline(fig.box[f][np.array(_BOX_EDGES)]).T)
        for k, line in enumerate(self.axes):
            line.set_data_3d(*np.stack([fig.centroid[f, 0], fig.axes[f, k]]).T)
        self.centroids.set_data_3d(*fig.centroid[f].T)
        self.joints.set_data_3d(*fig.joint[f].T)
        self.ends.set_data_3d(*fig.end_point[f].T)
        for e, line in enumerate(self.trails):
            line.set_data_3d(*fig.end_point[: f + 1, e].T)
        self.label.set_text("" if t is None else f"t = {t:.3f} s")
        return [self.bones, self.box, *self.axes, self.centroids, self.joints, self.ends, *self.trails, self.label]


def _axes3d(model: Model, limits: np.ndarray, figsize: tuple[float, float], elev: float, azim: float):
    plt = _pyplot()
    fig = plt.figure(figsize=figsize)
    ax = fig.add_subplot(projection="3d")
    ax.set_xlim(*limits[0])
    ax.set_ylim(*limits[1])
    ax.set_zlim(*limits[2])
    ax.set_box_aspect((1.0, 1.0, 1.0))
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_zlabel("z [m]")
    ax.view_init(elev=elev, azim=azim)
    ax.set_title(model.name)
    fig.subplots_adjust(left=0.02, right=0.95, bottom=0.04, top=0.95)
    return fig, ax


def _take(states: State, index: Any) -> State:
    return jax.tree.map(lambda x: np.asarray(x)[index], states)


def plot_frame(
    model: Model,
    state: State,
    *,
    figsize: tuple[float, float] = (6.0, 6.0),
    elev: float = 25.0,
    azim: float = -60.0,
    time: float | None = None,
):
    """Draw one configuration as a stick figure (see the module docstring).

    Arguments:
        model: the system.
        state: one :class:`State` (unbatched).
        time: time shown in the corner, s (none if omitted).

    Returns:
        The Figure (one 3-D axes, equal scales).
    """
    states = jax.tree.map(lambda x: np.asarray(x)[None], state)
    figure = StickFigure(model, states)
    fig, ax = _axes3d(model, figure.limits(), figsize, elev, azim)
    _Artists(ax, figure, trail=False).update(0, time)
    return fig


def animation_frames(trajectory: Trajectory, fps: float, speed: float, max_frames: int) -> np.ndarray:
    """Indices of the states shown by :func:`animate`: evenly spaced in time, ``fps`` frames
    per second of playback at ``speed`` simulated seconds per second, at most ``max_frames``
    and at most one per state; always the first and the last state."""
    t = _time(trajectory)
    last = t.shape[0] - 1
    span = float(t[-1] - t[0]) if last > 0 else 0.0
    if not np.isfinite(span):
        raise ValueError(f"animate: the trajectory's time is not finite (from {t[0]} to {t[-1]} s)")
    wanted = span * fps / speed + 1e-9  # frames over the span (inf for an extreme fps / speed)
    count = min(int(max_frames), last + 1)
    if wanted < count:
        count = int(np.floor(wanted)) + 1
    count = max(count, 2 if last > 0 else 1)
    return np.round(np.linspace(0, last, count)).astype(int)


def animate(
    model: Model,
    trajectory: Trajectory,
    path: str | os.PathLike,
    *,
    fps: float = 20.0,
    speed: float = 1.0,
    max_frames: int = 200,
    dpi: int = 80,
    figsize: tuple[float, float] = (6.0, 6.0),
    elev: float = 25.0,
    azim: float = -60.0,
    trail: bool = True,
) -> str:
    """Write a 3-D stick-figure animation of a trajectory.

    Arguments:
        model: the system.
        trajectory: ``N + 1`` states.
        path: ``.gif`` (Pillow, always available) or ``.mp4`` (needs ``ffmpeg`` on the PATH).
        fps: frames per second of the file.
        speed: simulated seconds per second of playback (2 = twice as fast).
        max_frames: cap on the number of frames (longer runs are shown faster).
        dpi, figsize: size of the frames (pixels = dpi x figsize).
        elev, azim: view angles, deg.
        trail: draw the end-point paths up to the current time.

    Returns:
        The path written. The frames are :func:`animation_frames`.

    Raises:
        ValueError: unknown suffix, ``.mp4`` without ffmpeg, non-positive ``fps``/``speed``/
            ``max_frames``.
    """
    from matplotlib import animation

    path = os.fspath(path)
    suffix = os.path.splitext(path)[1].lower()
    for name, value in (("fps", fps), ("speed", speed), ("max_frames", max_frames)):
        check_scalar(f"animate: {name}", value, sign="positive")
    # (matplotlib's stubs say fps: int; the writers only compute with it, 1000 / fps and
    # str(fps), so a float frame rate works.)
    writer: animation.AbstractMovieWriter
    if suffix == ".gif":
        writer = animation.PillowWriter(fps=fps)  # type: ignore[arg-type]
    elif suffix == ".mp4":
        if not animation.writers.is_available("ffmpeg"):
            raise ValueError(
                f"animate: {path}: writing .mp4 needs ffmpeg on the PATH (not found); write a .gif instead"
            )
        writer = animation.FFMpegWriter(fps=fps)  # type: ignore[arg-type]
    else:
        raise ValueError(f"animate: {path}: unknown animation suffix {suffix!r}; use .gif or .mp4")
    plt = _pyplot()
    frames = animation_frames(trajectory, fps, speed, max_frames)
    figure = StickFigure(model, _take(trajectory.states, frames))
    fig, ax = _axes3d(model, figure.limits(), figsize, elev, azim)
    artists = _Artists(ax, figure, trail)
    times = _time(trajectory)[frames]
    anim = animation.FuncAnimation(fig, lambda f: artists.update(f, float(times[f])), frames=len(frames), blit=False)
    try:
        anim.save(path, writer=writer, dpi=dpi)
    finally:
        plt.close(fig)
    return path


__all__ = [
    "TIME_HISTORIES",
    "StickFigure",
    "animate",
    "animation_frames",
    "base_attitude",
    "base_box",
    "body_segments",
    "box_corners",
    "inertia_box",
    "plot_base",
    "plot_energy",
    "plot_frame",
    "plot_joints",
    "plot_momentum",
    "plot_time_histories",
    "save_time_histories",
]
