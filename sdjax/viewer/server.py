"""The viser scene, GUI and playback of :func:`show` (imports viser when called)."""

from __future__ import annotations

import html
import re
import signal
import threading
import time as _time
import webbrowser
from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.model import Model
from sdjax.viewer.geometry import (
    SceneGeometry,
    attitudes,
    camera_pose,
    check_visuals,
    frame_index,
    scene_geometries,
    segment_poses,
    split_trajectories,
)

#: The viser release the viewer was written and tested against (the ``viewer`` extra pins it).
VISER_VERSION = "1.1.1"

#: Link colours, RGB, one per trajectory argument (a batch shares one), cycled.
PALETTE = (
    (30, 90, 170),
    (220, 100, 20),
    (40, 140, 70),
    (130, 70, 180),
    (190, 40, 40),
    (20, 150, 160),
    (160, 130, 20),
    (100, 100, 100),
)
JOINT_COLOR = (40, 40, 50)  # dark actuators: they stand out on the white background and on the links
BASE_COLOR = (214, 170, 60)  # gold foil
#: The base box is translucent: the centre of mass and the base frame inside it stay visible.
BASE_OPACITY = 0.6
COM_COLOR = (220, 40, 160)
#: Radius of the centre-of-mass sphere in thickest link radii.
COM_RADIUS = 1.5
LINEAR_MOMENTUM_COLOR = (255, 140, 0)
ANGULAR_MOMENTUM_COLOR = (120, 60, 220)

#: Opacity of the members of a batched trajectory (Monte-Carlo ghosts) unless ``opacity=`` is given.
GHOST_OPACITY = 0.3
#: Frames per second of the playback loop (it shows the last sample at or before the time).
PLAYBACK_FPS = 30.0
#: Vertical field of view of the initial camera, rad.
CAMERA_FOV = np.radians(50.0)
#: Lengths as fractions of the model size: end-point axes, base axes (of the box's median
#: side), the longest momentum arrow over the trajectory.
END_POINT_AXES, BASE_AXES, ARROW_LENGTH = 0.08, 0.75, 0.4
#: Momentum arrows are scaled so the longest over the trajectory is ``ARROW_LENGTH`` sizes;
#: none is drawn when the largest is below this fraction of the system's mass moving one size
#: per second (linear) or turning at 1 rad/s with a radius of gyration of one size (angular).
MOMENTUM_FLOOR = 1e-6


def import_viser():
    """The viser module, or an ImportError that says how to install it."""
    try:
        import viser
    except ImportError as err:
        raise ImportError(
            f"sdjax.viewer needs the viser package (not installed): pip install 'sdjax[viewer]' (viser=={VISER_VERSION})"
        ) from err
    return viser


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_") or "trajectory"


def _unit_meshes():
    """Unit cylinder (radius 1, height 1 along z, centred) and unit sphere, ``(vertices, faces)``."""
    import trimesh  # a dependency of viser

    cylinder = trimesh.creation.cylinder(radius=1.0, height=1.0, sections=24)
    sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
    return (cylinder.vertices, cylinder.faces), (sphere.vertices, sphere.faces)


def _arrow_scale(values: np.ndarray, size: float, floor: float) -> float:
    """Metres per unit of a vector ``(T, 3)`` drawn as an arrow: the longest finite one is
    ``ARROW_LENGTH * size`` long; 0 (no arrow) when that is below ``floor``."""
    norms = np.linalg.norm(values, axis=-1)
    norms = norms[np.isfinite(norms)]
    largest = float(np.max(norms, initial=0.0))
    return ARROW_LENGTH * size / largest if largest > floor else 0.0


class _Robot:
    """The scene nodes of one trajectory, updated sample by sample."""

    def __init__(self, scene, root: str, geometry: SceneGeometry, color, opacity: float, meshes, overlays: bool, momentum_floor,
                 shapes=(), failed=frozenset(), file_colors=True):  # fmt: skip
        (cyl_v, cyl_f), (sph_v, sph_f) = meshes
        g, self.geometry = geometry, geometry
        self.wxyz = attitudes(g)  # once for every sample
        alpha = None if opacity >= 1.0 else float(opacity)
        S, n, ne = g.segment_radius.shape[0], g.joint_radius.shape[0], g.end_point_position.shape[1]
        self.root = scene.add_frame(root, show_axes=False)
        zeros, ident = np.zeros((1, 3)), np.array([[1.0, 0.0, 0.0, 0.0]])
        self._add_shapes(scene, root, shapes, failed, color, opacity, file_colors)

        def batched(name, vertices, faces, count, rgb):
            # viser needs at least one instance; an empty group is one invisible instance.
            return scene.add_batched_meshes_simple(
                f"{root}/{name}",
                vertices,
                faces,
                np.repeat(ident, max(count, 1), 0),
                np.repeat(zeros, max(count, 1), 0),
                batched_scales=np.zeros((max(count, 1), 3)),
                batched_colors=rgb,
                opacity=alpha,
                visible=count > 0,
            )

        self.bones = batched("links", cyl_v, cyl_f, S, color)
        self.caps = batched("link_ends", sph_v, sph_f, 2 * S, color)  # capsule ends: bone starts, then ends
        self.joints = batched("joints", sph_v, sph_f, n, JOINT_COLOR)
        self.box = scene.add_box(
            f"{root}/base",
            color=BASE_COLOR,
            dimensions=np.maximum(g.base_box_sides, 1e-6),
            opacity=BASE_OPACITY * opacity,
            visible=bool(np.any(g.base_box_sides > 0)),
        )
        self.overlays = overlays
        self._sample = 0
        if overlays:
            self._add_overlays(scene, root, g, ne, zeros, ident, momentum_floor)
        self.set_meshes(True)

    def _add_overlays(self, scene, root: str, g: SceneGeometry, ne: int, zeros, ident, momentum_floor) -> None:
        """Base frame, end-point frames, centre of mass and momentum arrows (first trajectory)."""
        box = float(np.median(g.base_box_sides))  # an elongated orbiter gets axes of its girth
        base_axes = BASE_AXES * box if box > 0 else END_POINT_AXES * g.size
        self.base_frame = scene.add_frame(f"{root}/base_frame", axes_length=base_axes, axes_radius=0.04 * base_axes)
        length = END_POINT_AXES * g.size
        self.end_points = scene.add_batched_axes(
            f"{root}/end_points",
            np.repeat(ident, max(ne, 1), 0),
            np.repeat(zeros, max(ne, 1), 0),
            axes_length=length,
            axes_radius=0.06 * length,
            visible=ne > 0,
        )
        self.com = scene.add_icosphere(
            f"{root}/center_of_mass",
            radius=COM_RADIUS * float(np.max(g.segment_radius, initial=0.005 * g.size)),
            color=COM_COLOR,
            subdivisions=2,
        )
        self.arrow_scale = [
            _arrow_scale(g.linear_momentum, g.size, momentum_floor[0]),
            _arrow_scale(g.angular_momentum, g.size, momentum_floor[1]),
        ]
        self.momentum = scene.add_arrows(
            f"{root}/momentum",
            np.zeros((2, 2, 3)),
            np.array([LINEAR_MOMENTUM_COLOR, ANGULAR_MOMENTUM_COLOR]),
            shaft_radius=0.01 * g.size,
            head_radius=0.025 * g.size,
            head_length=0.05 * g.size,
        )

    def _add_shapes(self, scene, root: str, shapes, failed, color, opacity: float, file_colors: bool) -> None:
        """One frame per body that carries visual shapes (posed at every sample) and, under
        it, one mesh node per shape at its fixed pose in the body frame (sent once)."""
        from sdjax.viewer.meshes import has_own_colors

        self.body_frames: dict[int, Any] = {}  # body -> its viser frame
        self.shape_nodes = []
        for j, drawn in enumerate(shapes):
            shape, mesh = drawn.shape, drawn.mesh
            b = shape.body
            if b not in self.body_frames:
                self.body_frames[b] = scene.add_frame(f"{root}/bodies/{b}", show_axes=False)
            name, pose = (
                f"{root}/bodies/{b}/shape{j}",
                dict(wxyz=drawn.wxyz, position=np.asarray(shape.position, np.float64)),
            )
            rgba = shape.rgba if file_colors else None
            alpha = opacity * (float(rgba[3]) if rgba is not None else 1.0)
            if rgba is None and file_colors and alpha >= 1.0 and has_own_colors(mesh):
                node = scene.add_mesh_trimesh(name, mesh, **pose)  # the file's own materials
            else:
                rgb = tuple(int(round(255 * c)) for c in rgba[:3]) if rgba is not None else color
                node = scene.add_mesh_simple(name, np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.uint32), color=rgb,
                                             opacity=None if alpha >= 1.0 else alpha, side="double", **pose)  # fmt: skip
            self.shape_nodes.append(node)
        #: Bodies drawn by their shapes (their capsules, joint sphere or base box are hidden).
        self.mesh_bodies = frozenset(self.body_frames) - frozenset(failed)

    def set_meshes(self, on: bool) -> None:
        """Draw the bodies that have visual shapes by them (``on``) or as capsules."""
        g = self.geometry
        drawn = self.mesh_bodies if on else frozenset()
        self.meshes_on = bool(on)
        for frame in self.body_frames.values():
            frame.visible = bool(on)
        self.bone_keep = np.array([b not in drawn for b in g.segment_body], np.float64)
        if self.bone_keep.size:
            ends = np.concatenate([g.segment_radius * self.bone_keep] * 2)
            self.caps.batched_scales = np.repeat(ends[:, None], 3, axis=1)
        if g.joint_radius.size:
            keep = np.array([i + 1 not in drawn for i in range(g.joint_radius.shape[0])], np.float64)
            self.joints.batched_scales = np.repeat((g.joint_radius * keep)[:, None], 3, axis=1)
        self.box.visible = bool(np.any(g.base_box_sides > 0)) and 0 not in drawn
        self.show_sample(self._sample)

    def show_sample(self, k: int) -> None:
        g = self.geometry
        self._sample = k
        start, end, radius = g.segment_start[k], g.segment_end[k], g.segment_radius
        if radius.size:
            centre, wxyz, length = segment_poses(start, end)
            self.bones.batched_positions = centre
            self.bones.batched_wxyzs = wxyz
            self.bones.batched_scales = np.stack([radius, radius, length], axis=-1) * self.bone_keep[:, None]
            self.caps.batched_positions = np.concatenate([start, end])
        if g.joint_radius.size:
            self.joints.batched_positions = g.joint_position[k]
        self.box.position, self.box.wxyz = g.base_position[k], self.wxyz["box"][k]
        for b, frame in self.body_frames.items():
            frame.position, frame.wxyz = g.body_position[k, b], self.wxyz["bodies"][k, b]
        if not self.overlays:
            return
        self.base_frame.position, self.base_frame.wxyz = g.base_position[k], self.wxyz["base"][k]
        if g.end_point_position.shape[1]:
            self.end_points.batched_positions = g.end_point_position[k]
            self.end_points.batched_wxyzs = self.wxyz["end_points"][k]
        com = g.center_of_mass[k]
        self.com.position = com
        tips = [com + s * v[k] for s, v in zip(self.arrow_scale, (g.linear_momentum, g.angular_momentum))]
        self.momentum.points = np.stack([np.stack([com, tip]) for tip in tips])


class Viewer:
    """A running viewer (see :func:`show`): a viser server drawing one or more trajectories.

    Attributes:
        server: the ``viser.ViserServer``.
        geometries: the :class:`~sdjax.viewer.geometry.SceneGeometry` of every trajectory.
        time: ``(T,)`` the timeline, s: the first trajectory's times; the others show their
            last sample at or before the current time.
    """

    def __init__(
        self,
        geometries: Sequence[SceneGeometry],
        groups: Sequence[int],
        opacity: Sequence[float],
        *,
        host: str,
        port: int,
        momentum: bool,
        title: str,
        shapes: Sequence[Any] = (),
        failed: frozenset = frozenset(),
        ghosts: Sequence[bool] = (),
    ):
        viser = import_viser()
        self.geometries = list(geometries)
        self.time = self.geometries[0].time
        self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.server.gui.configure_theme(show_share_button=False)  # no public share links from a simulator
        self._lock = threading.RLock()
        self._index = -1
        self._t = float(self.time[0])
        self._playing = False
        self._stop = threading.Event()
        server = self.server
        position, look_at = camera_pose(self.geometries, CAMERA_FOV)
        radius = float(np.linalg.norm(position - look_at))
        cam = server.initial_camera
        cam.fov, cam.near, cam.far = float(CAMERA_FOV), 1e-3 * radius, 100.0 * radius
        cam.position, cam.look_at = position, look_at
        meshes = _unit_meshes()
        self._robots = []
        for k, (g, group, alpha) in enumerate(zip(self.geometries, groups, opacity)):
            color = PALETTE[group % len(PALETTE)]
            # Momenta below MOMENTUM_FLOOR of the whole system moving one size per second
            # (turning at one radian per second) get no arrow: round-off of a conserved zero.
            floor = (MOMENTUM_FLOOR * g.total_mass * g.size, MOMENTUM_FLOOR * g.total_mass * g.size**2)
            # Visual shapes for the main trajectories; ghosts (members of a batch) stay capsules.
            # The file's colours for the first argument, the trajectory's colour for the others.
            drawn = () if k < len(ghosts) and ghosts[k] else shapes
            self._robots.append(_Robot(server.scene, f"/{k}_{_slug(g.label)}", g, color, alpha, meshes, overlays=k == 0, momentum_floor=floor,
                                       shapes=drawn, failed=failed, file_colors=group == groups[0]))  # fmt: skip
        self._build_gui(title, groups, momentum)
        self._show(0)
        self._thread = threading.Thread(target=self._playback, name="sdjax-viewer-playback", daemon=True)
        self._thread.start()

    # --------------------------------------------------------------------------------------
    # GUI.

    def _build_gui(self, title: str, groups: Sequence[int], momentum: bool) -> None:
        gui = self.server.gui
        last = self.time.shape[0] - 1
        with gui.add_folder("Playback"):
            self._slider = gui.add_slider(
                "sample", min=0, max=max(last, 1), step=1, initial_value=0, disabled=last == 0
            )
            self._clock = gui.add_markdown(self._clock_text(0))
            self._play = gui.add_button("Play", disabled=last == 0)
            self._speed = gui.add_number(
                "speed", initial_value=1.0, min=1e-3, max=1e3, step=0.1, hint="simulated seconds per second"
            )
            self._loop = gui.add_checkbox("loop", initial_value=True)
        self._slider.on_update(lambda _: self._show(int(self._slider.value), seek=True))

        self._play.on_click(lambda _: self.play(not self._playing))

        first = self._robots[0]
        with gui.add_folder("Show"):
            toggles = [
                ("base frame", [first.base_frame], True),
                ("end-point frames", [first.end_points], True),
                ("centre of mass", [first.com], True),
                ("momentum P (orange), L about CoM (purple)", [first.momentum], momentum),
            ]
            for label, nodes, value in toggles:
                self._toggle(label, [node for node in nodes if node.visible], value)  # empty nodes stay hidden
            if any(robot.body_frames for robot in self._robots):
                meshes = gui.add_checkbox("visual meshes (off: capsules)", initial_value=True)

                @meshes.on_update
                def _(_) -> None:
                    self.set_meshes(bool(meshes.value))

                self._meshes_box = meshes
            self._trajectory_boxes = []
            if len(self._robots) <= 16:
                for robot in self._robots:
                    self._trajectory_boxes.append(self._toggle(robot.geometry.label, [robot.root], True))
        gui.add_markdown(f"**{html.escape(title)}**  \n" + "  \n".join(self._legend(groups)))

    def _legend(self, groups: Sequence[int]) -> list[str]:
        """One line per colour: the first trajectory drawn in it and how many more share it."""
        lines = []
        for group in dict.fromkeys(groups):
            labels = [g.label for g, grp in zip(self.geometries, groups) if grp == group]
            more = f" and {len(labels) - 1} more" if len(labels) > 1 else ""
            lines.append(
                f'<span style="color: rgb{PALETTE[group % len(PALETTE)]}">&#9632;</span> {html.escape(labels[0])}{more}'
            )
        return lines

    def _toggle(self, label: str, nodes: list, value: bool):
        box = self.server.gui.add_checkbox(label, initial_value=value)
        for node in nodes:
            node.visible = value

        @box.on_update
        def _(_) -> None:
            for node in nodes:
                node.visible = bool(box.value)

        return box

    def _clock_text(self, index: int) -> str:
        return f"t = {self.time[index]:.3f} s (sample {index} of {self.time.shape[0] - 1})"

    # --------------------------------------------------------------------------------------
    # Time.

    def _show(self, index: int, seek: bool = False) -> None:
        """Draw sample ``index``; ``seek``: a user moved the time (the playback goes on from there)."""
        with self._lock:
            if index == self._index:
                return
            self._index = index
            t = float(self.time[index])
            if seek:
                self._t = t
            with self.server.atomic():
                for robot in self._robots:
                    robot.show_sample(frame_index(robot.geometry.time, t))
                self._clock.content = self._clock_text(index)
            self._slider.value = index  # no-op when the slider moved itself
        self.server.flush()

    def _playback(self) -> None:
        last = _time.perf_counter()
        while not self._stop.wait(1.0 / PLAYBACK_FPS):
            now = _time.perf_counter()
            elapsed, last = now - last, now
            with self._lock:
                if not self._playing:
                    continue
                t = self._t + elapsed * float(self._speed.value)
                if t > self.time[-1]:
                    if self._loop.value:
                        t = float(self.time[0])
                    else:
                        t, self._playing, self._play.label = float(self.time[-1]), False, "Play"
                self._t = t
                self._show(frame_index(self.time, t))

    @property
    def index(self) -> int:
        """Index of the sample shown (into :attr:`time`)."""
        return self._index

    @property
    def playing(self) -> bool:
        return self._playing

    def set_time(self, index: int) -> None:
        """Show sample ``index`` of the timeline (negative counts from the end), as the slider does.

        Raises:
            IndexError: ``index`` outside the trajectory's ``T`` samples.
        """
        count = self.time.shape[0]
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise TypeError(f"set_time: index must be an integer sample index, got {type(index).__name__}")
        if not -count <= index < count:
            raise IndexError(f"set_time: index {index} out of range for {count} samples")
        self._show(int(index) % count, seek=True)

    def play(self, playing: bool = True) -> None:
        """Start (or stop) the playback, as the Play/Pause button does; playing from the last
        sample starts again from the first."""
        with self._lock:
            if playing and not self._playing and self._index == self.time.shape[0] - 1:
                self._t = float(self.time[0])
            self._playing = bool(playing)
            self._play.label = "Pause" if self._playing else "Play"

    def set_meshes(self, on: bool) -> None:
        """Draw the bodies that have visual shapes by them (``on``), or every body as capsules,
        as the "visual meshes" checkbox does."""
        with self._lock, self.server.atomic():
            for robot in self._robots:
                robot.set_meshes(on)
        box = getattr(self, "_meshes_box", None)
        if box is not None and box.value != bool(on):
            box.value = bool(on)
        self.server.flush()

    def set_visible(self, label: str, visible: bool) -> None:
        """Show or hide one trajectory (by label), as its checkbox does."""
        labels = [g.label for g in self.geometries]
        if label not in labels:
            raise ValueError(f"set_visible: no trajectory labelled {label!r}; labels are {labels}")
        robot = self._robots[labels.index(label)]
        robot.root.visible = bool(visible)
        if self._trajectory_boxes:
            self._trajectory_boxes[labels.index(label)].value = bool(visible)
        self.server.flush()

    # --------------------------------------------------------------------------------------
    # Server.

    @property
    def port(self) -> int:
        return int(self.server.get_port())

    @property
    def url(self) -> str:
        host = self.server.get_host()
        host = "localhost" if host in ("0.0.0.0", "::", "127.0.0.1") else host
        return f"http://{host}:{self.port}"

    def wait(self) -> None:
        """Block until :meth:`close` (or Ctrl-C, which is raised as ``KeyboardInterrupt``).

        In the main thread, while it waits, a Ctrl-C (SIGINT) only records that it came and is
        raised from this loop: Python's own handler raises ``KeyboardInterrupt`` wherever the
        thread happens to be, and inside a finaliser or a callback it is printed and dropped
        (a server that ignored its Ctrl-C was seen in tests). SIGINT is also unblocked in this
        thread for the wait (a mask inherited from the process that started this one would keep
        it pending). The previous handler and mask are restored after."""
        # Polled with a plain sleep: a Ctrl-C raised inside ``Event.wait`` could land while the
        # event's lock is held, and close() sets that event.
        with _recorded_interrupt() as interrupted:
            while not self._stop.is_set():
                if interrupted():
                    raise KeyboardInterrupt
                _time.sleep(0.2)

    def close(self) -> None:
        """Stop the playback and the server (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.server.stop()

    def __enter__(self) -> Viewer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _repr_html_(self) -> str:  # Jupyter: the viewer inline
        return f'<iframe src="{html.escape(self.url)}" width="100%" height="500" style="border: none"></iframe>'

    def __repr__(self) -> str:
        return f"Viewer({len(self.geometries)} trajectories, {self.time.shape[0]} samples, {self.url})"


def _opacities(opacity: Any, count: int, ghosts: Sequence[bool]) -> list[float]:
    if opacity is None:
        return [GHOST_OPACITY if ghost else 1.0 for ghost in ghosts]
    values = np.asarray(opacity, np.float64)
    if values.ndim == 0:
        values = np.full(count, float(values))
    if values.shape != (count,):
        raise ValueError(f"opacity: expected one number or {count} (one per trajectory), got shape {values.shape}")
    if not np.all((values > 0) & (values <= 1)):
        raise ValueError(f"opacity: expected values in (0, 1], got {values.tolist()}")
    return values.tolist()


def show(
    model: Model | Sequence[Model],
    trajectory: Any,
    *,
    labels: Sequence[str] | None = None,
    opacity: float | Sequence[float] | None = None,
    momentum: bool = False,
    port: int = 8080,
    host: str = "127.0.0.1",
    open_browser: bool = False,
    title: str | None = None,
    visuals: Any = None,
) -> Viewer:
    """Draw trajectories of a model in the browser: viser server, time slider, Play button.

    Arguments:
        model: the system, or one model per trajectory (same topology not required).
        trajectory: a :class:`~sdjax.Trajectory` (``N + 1`` states), a :class:`~sdjax.State`
            with a leading time axis (times = sample index), a
            :class:`~sdjax.simulation.SimulationRun`, a batch of them (leading batch axis, e.g.
            ``vmap`` of a rollout: Monte-Carlo samples, drawn as ghosts) or a list of any of
            these (planned vs executed, several starts).
        labels: one name per trajectory (default ``trajectory``, ``trajectory[k]``...).
        opacity: one number in ``(0, 1]`` or one per trajectory (default: 1, and
            :data:`GHOST_OPACITY` for the members of a batch).
        momentum: show the linear momentum and the angular momentum about the centre of mass
            as arrows from the centre of mass at start (a checkbox toggles them).
        port: preferred port (viser takes the next free one when it is busy; ``0``: any free
            port); the port used is :attr:`Viewer.port`.
        host: interface to listen on (default local only; ``"0.0.0.0"`` for other machines).
        open_browser: open :attr:`Viewer.url` in the default browser.
        title: heading in the GUI (default: the model name).
        visuals: visual geometry to draw the robot with: the ``visuals`` of
            :func:`sdjax.io.import_urdf` or :func:`sdjax.io.mjcf_import.import_mjcf` (a
            sequence of :class:`sdjax.io.visuals.VisualShape`), or the import result itself.
            Each shape moves with its body; a body with shapes is drawn by them instead of its
            capsules (a "visual meshes" checkbox switches back), one whose mesh file is missing
            or unreadable keeps its capsules (one warning per file). The main trajectories get
            the shapes (the first argument's in the file's colours, the others in their
            trajectory colour); members of a batch (ghosts) stay capsules, light to draw.
            Default: none, every body drawn from its inertia.

    Returns:
        The running :class:`Viewer`: ``set_time(index)``, ``play()``, ``set_visible(label, on)``,
        ``url``, ``port``, ``close()``; in Jupyter it displays itself inline.

    Raises:
        ImportError: viser is not installed (``pip install 'sdjax[viewer]'``).
        ValueError: bad input, naming the argument and the field (wrong shapes, a joint count
            that does not match the model, label or opacity counts, a visual shape on a body
            the model does not have).
    """
    import_viser()
    items = split_trajectories(trajectory)
    geometries = scene_geometries(model, items, labels)
    alphas = _opacities(opacity, len(items), [item.batched for item in items])
    first = model if isinstance(model, Model) else model[0]
    shapes = check_visuals(visuals, [model] if isinstance(model, Model) else list(model))
    if shapes:
        from sdjax.viewer.meshes import drawn_shapes

        drawn, failed = drawn_shapes(shapes)
    else:
        drawn, failed = [], set()
    groups = [item.group for item in items]
    viewer = Viewer(geometries, groups, alphas, host=host, port=port, momentum=momentum, title=title or first.name,
                    shapes=drawn, failed=frozenset(failed), ghosts=[item.batched for item in items])  # fmt: skip
    if open_browser:
        webbrowser.open(viewer.url)
    return viewer


class _recorded_interrupt:
    """``with _recorded_interrupt() as interrupted:``: in the main thread, SIGINT only records
    that it came (``interrupted()`` is then true) and is unblocked until the block ends; the
    previous handler and mask are restored after. Elsewhere (where handlers cannot be set)
    nothing changes and ``interrupted()`` stays false."""

    def __enter__(self) -> Any:
        self.received: list[int] = []
        self.installed = threading.current_thread() is threading.main_thread()
        self.unblocked: set[int] = set()
        if self.installed:
            self.previous = signal.signal(signal.SIGINT, lambda signum, frame: self.received.append(signum))
            if hasattr(signal, "pthread_sigmask"):  # (POSIX)
                self.unblocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}) & {signal.SIGINT}
        return lambda: bool(self.received)

    def __exit__(self, *exc: Any) -> None:
        if self.unblocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, self.unblocked)
        if self.installed:  # (None: a handler set outside Python, which cannot be put back)
            signal.signal(signal.SIGINT, signal.default_int_handler if self.previous is None else self.previous)


__all__ = ["PALETTE", "VISER_VERSION", "Viewer", "import_viser", "show"]
