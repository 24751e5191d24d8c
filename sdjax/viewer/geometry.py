"""What the viewer draws, as NumPy arrays: no viser here, so it is tested without a browser.

One :class:`SceneGeometry` per trajectory holds every drawn shape at every time sample, in the
inertial frame, in metres; the viewer only indexes it. The bones follow the stick figure of
:mod:`sdjax.plotting` (:func:`sdjax.plotting.body_segments`: parent centroid -> joint,
joint -> centroid, centroid -> end point) and are drawn as capsules of a radius set per body
by :func:`link_radii`; the base is its inertia-equivalent box
(:func:`sdjax.plotting.inertia_box`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import equinox as eqx
import jax
import numpy as np

from sdjax.integrate import Trajectory
from sdjax.kinematics import Kinematics, center_of_mass, forward_kinematics
from sdjax.model import Model
from sdjax.momentum import angular_momentum, linear_momentum
from sdjax.plotting import body_segments, box_corners, inertia_box
from sdjax.rotation import matrix_to_quat
from sdjax.state import State

_matrix_to_quat = jax.jit(matrix_to_quat)  # compiled once per shape, not op by op

#: Bounds of a drawn link radius as fractions of the model size (:func:`extent`): a thin
#: rod or a massless link stays visible, a heavy compact link does not hide the others.
RADIUS_BOUNDS = (0.008, 0.04)

#: Largest drawn link radius as a fraction of the link's longest bone.
RADIUS_PER_LENGTH = 0.3

#: Room around the drawn points in the initial view (link radii, the GUI panel).
CAMERA_MARGIN = 1.2

#: Largest spread of the drawn points, in model sizes, that the initial view frames whole.
CAMERA_MAX_SPREAD = 100.0

#: Largest coordinate drawn (m, kg m/s, kg m^2/s): the browser draws in float32 (to 3.4e38).
DRAWABLE_LIMIT = 1e30

#: Most trajectories shown at once (Monte-Carlo ghosts): each is a few scene nodes updated at
#: every frame, and the browser slows down well before this.
MAX_TRAJECTORIES = 256


@dataclasses.dataclass(frozen=True)
class SceneGeometry:
    """Everything drawn for one trajectory of ``T`` samples (inertial frame, m, NumPy float64).

    Attributes:
        label: the trajectory's name in the viewer.
        time: ``(T,)`` s.
        segment_start, segment_end: ``(T, S, 3)`` ends of the ``S`` bones
            (:func:`sdjax.plotting.body_segments`), each a capsule.
        segment_body: ``(S,)`` body each bone belongs to (0 = base).
        segment_radius: ``(S,)`` capsule radius, m (:func:`link_radii` of its body).
        joint_position: ``(T, n, 3)`` joint positions (origins of the joint frames).
        joint_radius: ``(n,)`` radius of the joint spheres, m.
        base_position: ``(T, 3)`` base centroid ``r0``.
        base_rotation: ``(T, 3, 3)`` base attitude ``A0`` (base to inertial).
        base_box_sides: ``(3,)`` sides of the base's inertia-equivalent box, m, along
            ``base_box_axes``.
        base_box_axes: ``(3, 3)`` columns: the box's principal axes in the base frame.
        end_point_position: ``(T, ne, 3)``; end_point_rotation: ``(T, ne, 3, 3)`` end-point
            frame to inertial. Values of a diverged run beyond :data:`DRAWABLE_LIMIT`, and
            non-finite ones, are NaN in every field: not drawn.
        body_position: ``(T, n + 1, 3)`` centroid of every body (0 = base), the origin of
            its body frame; body_rotation: ``(T, n + 1, 3, 3)`` body frame to inertial
            (:func:`sdjax.forward_kinematics`): visual shapes are posed on these frames.
        center_of_mass: ``(T, 3)`` centre of mass of the system.
        linear_momentum: ``(T, 3)`` kg m/s; angular_momentum: ``(T, 3)`` about the centre of
            mass, kg m^2/s.
        size: model size, m (:func:`extent`): sets the radii, axes and arrow lengths.
        total_mass: mass of the system, kg.
    """

    label: str
    time: np.ndarray
    segment_start: np.ndarray
    segment_end: np.ndarray
    segment_body: np.ndarray
    segment_radius: np.ndarray
    joint_position: np.ndarray
    joint_radius: np.ndarray
    base_position: np.ndarray
    base_rotation: np.ndarray
    base_box_sides: np.ndarray
    base_box_axes: np.ndarray
    end_point_position: np.ndarray
    end_point_rotation: np.ndarray
    body_position: np.ndarray
    body_rotation: np.ndarray
    center_of_mass: np.ndarray
    linear_momentum: np.ndarray
    angular_momentum: np.ndarray
    size: float
    total_mass: float

    @property
    def num_samples(self) -> int:
        return int(self.time.shape[0])

    def points(self, sample: int | None = None) -> np.ndarray:
        """Every drawn point of every sample (or of one), ``(P, 3)`` (finite ones only): bone
        ends, joints, end points and the base box corners."""
        take = slice(None) if sample is None else slice(sample, sample + 1)
        corners = box_corners(self.base_box_sides, self.base_box_axes)  # (8, 3) base frame
        box = self.base_position[take, None] + np.einsum("tij,cj->tci", self.base_rotation[take], corners)
        parts = [
            self.segment_start[take],
            self.segment_end[take],
            self.joint_position[take],
            self.end_point_position[take],
            box,
        ]
        points = np.concatenate([p.reshape(-1, 3) for p in parts])
        return points[np.all(np.isfinite(points), axis=1)]


# ------------------------------------------------------------------------------------------
# Input.


def _named(value: Any) -> str:
    return type(value).__name__


class TrajectoryItem(NamedTuple):
    """One trajectory found in :func:`sdjax.viewer.show`'s ``trajectory`` argument."""

    where: str  # names it in messages and is its default label: trajectory, trajectory[2], trajectory[1][5]
    time: np.ndarray  # (T,) s; a State without times gets the sample index
    states: State  # leaves with a leading time axis T
    group: int  # which item of the argument it came from (a batch is one group)
    batched: bool  # a member of a batch (a Monte-Carlo ghost)


def split_trajectories(trajectory: Any, name: str = "trajectory") -> list[TrajectoryItem]:
    """The trajectories in one argument of :func:`sdjax.viewer.show`.

    Arguments:
        trajectory: a :class:`~sdjax.Trajectory` (``N + 1`` states), a :class:`~sdjax.State`
            whose leaves have a leading time axis, either with an extra leading batch axis
            (``vmap`` of a rollout: ``(B, N + 1, ...)``), a :class:`sdjax.simulation.SimulationRun`,
            or a list/tuple of these.
        name: the argument's name, for the messages.

    Returns:
        One :class:`TrajectoryItem` per trajectory.

    Raises:
        ValueError: an item of another type, or states whose leaves disagree in shape (the
            message names the item and the field).
    """
    if not isinstance(trajectory, (list, tuple)):
        return _split_one(trajectory, name, 0)
    if not trajectory:
        raise ValueError(f"{name}: expected at least one trajectory, got an empty {_named(trajectory)}")
    out = []
    for k, item in enumerate(trajectory):
        if isinstance(item, (list, tuple)):
            raise ValueError(f"{name}[{k}]: expected a Trajectory or a State, got a nested {_named(item)}")
        out += _split_one(item, f"{name}[{k}]", k)
    return out


def _split_one(trajectory: Any, name: str, group: int) -> list[TrajectoryItem]:
    if isinstance(getattr(trajectory, "trajectory", None), Trajectory):  # a SimulationRun
        trajectory = trajectory.trajectory
    if isinstance(trajectory, Trajectory):
        states, time = trajectory.states, np.asarray(trajectory.time, np.float64)
    elif isinstance(trajectory, State):
        states, time = trajectory, None
    else:
        raise ValueError(
            f"{name}: expected a sdjax Trajectory, a State with a time axis or a list of them, got {_named(trajectory)}"
        )
    q = np.shape(states.q)
    if len(q) not in (2, 3):
        raise ValueError(
            f"{name}.states.q: expected shape (T, n) or (B, T, n) (time, or batch and time, then joints), got {q}"
        )
    lead = q[:-1]
    for field, size in (
        ("base_position", 3),
        ("base_quaternion", 4),
        ("base_linear_velocity", 3),
        ("base_angular_velocity", 3),
        ("qd", q[-1]),
    ):
        shape = np.shape(getattr(states, field))
        if shape != (*lead, size):
            raise ValueError(
                f"{name}.states.{field}: expected shape {(*lead, size)} to match states.q {q}, got {shape}"
            )
    if time is not None and time.shape not in (lead, lead[-1:]):
        raise ValueError(f"{name}.time: expected shape {lead[-1:]} (one time per state), got {time.shape}")
    if len(lead) == 1:
        return [
            TrajectoryItem(name, np.arange(lead[0], dtype=np.float64) if time is None else time, states, group, False)
        ]
    items = []
    for b in range(lead[0]):
        times = np.arange(lead[1], dtype=np.float64) if time is None else (time[b] if time.ndim == 2 else time)
        items.append(
            TrajectoryItem(f"{name}[{b}]", times, jax.tree.map(lambda x: np.asarray(x)[b], states), group, True)
        )
    return items


def check_trajectory(model: Model, where: str, time: np.ndarray, states: State) -> None:
    """Raise ``ValueError`` (naming ``where`` and the field) when a trajectory does not fit the
    model or cannot be drawn: joint count, empty, non-increasing or non-finite times."""
    n = model.num_joints
    found = np.shape(states.q)[-1]
    if found != n:
        raise ValueError(f"{where}.states.q: {found} joint coordinates, but model {model.name!r} has {n} joints")
    if time.shape[0] < 1:
        raise ValueError(f"{where}: no samples (the time axis is empty)")
    if not np.all(np.isfinite(time)) or np.any(np.diff(time) <= 0):
        raise ValueError(f"{where}.time: times must be finite and increasing")


# ------------------------------------------------------------------------------------------
# Sizes.


def extent(points: np.ndarray) -> float:
    """Size of a set of points ``(P, 3)``, m: their largest extent along x, y or z (non-finite
    points ignored); 1 m for a single point. Link radii, frame axes and arrow lengths are
    fractions of the model's size at its first sample, so a 30 m orbiter and a 0.3 m test-bed
    arm look alike."""
    points = points[np.all(np.isfinite(points), axis=1)]
    size = float(np.max(np.ptp(points, axis=0))) if points.size else 0.0
    return size if size > 0 else 1.0


def link_radii(model: Model, size: float, lengths: Any = None) -> np.ndarray:
    """Drawn radius of every body, ``(n + 1,)`` m.

    A link is drawn as the uniform solid cylinder with its mass and its smallest principal
    moment as the moment about the cylinder axis, ``I_min = m r^2 / 2``, so
    ``r = sqrt(2 I_min / m)`` (a slender rod's smallest moment is about its own axis), at most
    :data:`RADIUS_PER_LENGTH` of its longest bone (a short segment of a plate or a beam stays a
    rod) and clipped to :data:`RADIUS_BOUNDS` times ``size``; a massless link gets the lower
    bound. The base is drawn as a box; its bones (centroid to the joints on it) get the mean
    link radius.

    Arguments:
        model: the system.
        size: model size, m (:func:`extent`).
        lengths: ``(n + 1,)`` longest bone of each body, m (default: no length cap).
    """
    low, high = (bound * size for bound in RADIUS_BOUNDS)
    masses = np.asarray(model.link_mass, np.float64)
    smallest = (
        np.linalg.eigvalsh(np.asarray(model.link_inertia, np.float64))[..., 0] if model.num_joints else np.zeros(0)
    )
    safe = np.where(masses > 0, masses, 1.0)
    radius = np.where(masses > 0, np.sqrt(np.maximum(2.0 * smallest / safe, 0.0)), low)
    if lengths is not None:
        radius = np.minimum(radius, RADIUS_PER_LENGTH * np.asarray(lengths, np.float64)[1:])
    radius = np.clip(radius, low, high)
    base = float(np.mean(radius)) if radius.size else low
    return np.concatenate([[base], radius])


# ------------------------------------------------------------------------------------------
# Geometry.


def _drawable(values: Any) -> np.ndarray:
    """Float64 copy with the values the browser cannot draw (non-finite, or beyond
    :data:`DRAWABLE_LIMIT`: a diverged run) set to NaN, which viser leaves undrawn."""
    values = np.asarray(values, np.float64)
    return np.where(np.abs(values) <= DRAWABLE_LIMIT, values, np.nan)


@eqx.filter_jit
def _samples(model: Model, states: State) -> tuple[Kinematics, jax.Array, jax.Array, jax.Array]:
    """Kinematics, centre of mass, linear momentum and angular momentum about the centre of
    mass of every sample (one compiled program: op-by-op dispatch compiles dozens)."""

    def one(state: State):
        return (
            forward_kinematics(model, state),
            center_of_mass(model, state),
            linear_momentum(model, state),
            angular_momentum(model, state, about="com"),
        )

    return jax.vmap(one)(states)


def scene_geometry(
    model: Model, time: Any, states: State, *, label: str = "trajectory", size: float | None = None
) -> SceneGeometry:
    """The drawn geometry of one trajectory (see :class:`SceneGeometry`).

    Arguments:
        model: the system.
        time: ``(T,)`` times, s.
        states: :class:`~sdjax.State` with a leading time axis ``T``.
        label: the trajectory's name.
        size: model size, m (default: the :func:`extent` of the drawn points at the first
            sample); pass one size to give several trajectories the same radii.

    Returns:
        :class:`SceneGeometry`.
    """
    time = np.asarray(time, np.float64)
    check_trajectory(model, label, time, states)
    kin, com, momentum, spin = jax.device_get(_samples(model, states))
    points = {"c": _drawable(kin.centroid), "j": _drawable(kin.joint_position), "e": _drawable(kin.end_point_position)}
    rotation = _drawable(kin.rotation)
    segments = body_segments(model)

    def bone_ends(pairs: list[tuple[str, int]]) -> np.ndarray:  # (T, S, 3)
        return (
            np.stack([points[kind][:, index] for kind, index in pairs], axis=1)
            if pairs
            else np.zeros((time.shape[0], 0, 3))
        )

    start, end = bone_ends([(ka, ia) for ka, ia, _, _ in segments]), bone_ends([(kb, ib) for _, _, kb, ib in segments])
    owner = np.array([ia if ka == "c" else ib for ka, ia, _, ib in segments], dtype=np.int64)
    sides, axes = inertia_box(model.base_mass, model.base_inertia)
    base = points["c"][:, 0]
    if size is None:
        box = base[0] + box_corners(sides, axes) @ rotation[0, 0].T
        size = extent(np.concatenate([points["c"][0], points["j"][0], points["e"][0], box]))
    bone = np.linalg.norm(end[0] - start[0], axis=-1)  # (S,) at the first sample
    longest = np.zeros(model.num_joints + 1)
    np.maximum.at(longest, owner, np.where(np.isfinite(bone), bone, 0.0))
    radii = link_radii(model, size, longest)
    return SceneGeometry(
        label=label,
        time=time,
        segment_start=start,
        segment_end=end,
        segment_body=owner,
        segment_radius=radii[owner],
        joint_position=points["j"],
        joint_radius=1.4 * radii[1:],
        base_position=base,
        base_rotation=rotation[:, 0],
        base_box_sides=sides,
        base_box_axes=axes,
        end_point_position=points["e"],
        end_point_rotation=_drawable(kin.end_point_rotation),
        body_position=points["c"],
        body_rotation=rotation,
        center_of_mass=_drawable(com),
        linear_momentum=_drawable(momentum),
        angular_momentum=_drawable(spin),
        size=float(size),
        total_mass=float(model.total_mass),
    )


def scene_geometries(
    models: Model | Sequence[Model], items: Sequence[TrajectoryItem], labels: Sequence[str] | None = None
) -> list[SceneGeometry]:
    """Geometry of every trajectory of :func:`sdjax.viewer.show`'s arguments, all drawn at the
    size of the first (:func:`extent`), so Monte-Carlo ghosts match the nominal robot.

    Arguments:
        models: one model for every trajectory, or one per trajectory (same count).
        items: :func:`split_trajectories` of the ``trajectory`` argument.
        labels: one name per trajectory (default: where each came from, ``trajectory[k]``).

    Raises:
        ValueError: naming the argument: joint counts that do not match the model, a labels or
            models count that differs from the trajectory count, more than
            :data:`MAX_TRAJECTORIES`.
    """
    count = len(items)
    if count > MAX_TRAJECTORIES:
        raise ValueError(
            f"trajectory: {count} trajectories, more than the viewer shows at once ({MAX_TRAJECTORIES}); pass a subset"
        )
    if isinstance(models, Model):
        models = [models] * count
    else:
        models = list(models)
        if len(models) != count or not all(isinstance(m, Model) for m in models):
            raise ValueError(
                f"model: expected a Model or a list of {count} Models (one per trajectory), got {len(models)} items"
            )
    if labels is None:
        labels = [item.where for item in items]
    else:
        labels = [str(label) for label in labels]
        if len(labels) != count:
            raise ValueError(f"labels: expected {count} labels (one per trajectory), got {len(labels)}")
        if len(set(labels)) != count:
            raise ValueError(f"labels: expected distinct labels, got {labels}")
    for item, model in zip(items, models):
        check_trajectory(model, item.where, item.time, item.states)
    first = scene_geometry(models[0], items[0].time, items[0].states, label=labels[0])
    rest = [
        scene_geometry(model, item.time, item.states, label=label, size=first.size)
        for item, model, label in zip(items[1:], models[1:], labels[1:])
    ]
    return [first, *rest]


def camera_pose(
    geometries: Sequence[SceneGeometry], fov: float, elev: float = 25.0, azim: float = -60.0
) -> tuple[np.ndarray, np.ndarray]:
    """Camera ``(position, look_at)`` that frames every drawn point of every sample.

    The camera looks at the centre of the points' bounding box from the direction of the
    view angles (``elev``, ``azim`` in degrees, as :func:`sdjax.plotting.plot_frame`), far
    enough that the sphere around the points, enlarged by :data:`CAMERA_MARGIN`, fits the
    vertical field of view ``fov`` (rad). When the points spread over more than
    :data:`CAMERA_MAX_SPREAD` model sizes (a diverged run, a long traverse) the first samples
    are framed instead.
    """
    points = np.concatenate([g.points() for g in geometries])
    if extent(points) > CAMERA_MAX_SPREAD * geometries[0].size:
        points = np.concatenate([g.points(0) for g in geometries])
    if not points.size:
        points = np.zeros((1, 3))
    low, high = points.min(axis=0), points.max(axis=0)
    centre = 0.5 * (low + high)
    radius = max(float(np.max(np.linalg.norm(points - centre, axis=1))), 0.5 * geometries[0].size)
    e, a = np.radians(elev), np.radians(azim)
    direction = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    return centre + direction * CAMERA_MARGIN * radius / np.sin(0.5 * fov), centre


def frame_index(time: np.ndarray, t: float) -> int:
    """Index of the last sample at or before ``t`` (the first sample before it starts)."""
    return int(np.clip(np.searchsorted(time, t, side="right") - 1, 0, time.shape[0] - 1))


def segment_poses(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poses of unit cylinders (radius 1, height 1 along z, centred) stretched onto segments.

    Arguments:
        start, end: ``(S, 3)`` segment ends.

    Returns:
        ``centre`` ``(S, 3)``, ``wxyz`` ``(S, 4)`` (scalar-first, viser's convention: turns
        ``e_z`` onto the segment direction) and ``length`` ``(S,)``. The cylinder's axis ends
        are ``centre -/+ length/2 R e_z`` = ``start``, ``end``.
    """
    delta = end - start
    length = np.linalg.norm(delta, axis=-1)
    d = delta / np.where(length > 0, length, 1.0)[:, None]
    d[length == 0] = (0.0, 0.0, 1.0)
    # Shortest rotation from e_z to d: axis e_z x d = (-d_y, d_x, 0), cos(angle) = d_z; as a
    # quaternion (1 + d_z, e_z x d) normalised. Opposite to e_z: half a turn about x.
    wxyz = np.stack([1.0 + d[:, 2], -d[:, 1], d[:, 0], np.zeros_like(length)], axis=-1)
    opposite = d[:, 2] < -1.0 + 1e-12
    wxyz[opposite] = (0.0, 1.0, 0.0, 0.0)
    wxyz /= np.linalg.norm(wxyz, axis=-1, keepdims=True)
    return 0.5 * (start + end), wxyz, length


def attitudes(geometry: SceneGeometry) -> dict[str, np.ndarray]:
    """Attitudes of the drawn bodies at every sample, as viser's scalar-first quaternions:
    ``base`` ``(T, 4)`` (``A0``), ``box`` ``(T, 4)`` (``A0`` times the box's principal axes),
    ``end_points`` ``(T, ne, 4)`` and ``bodies`` ``(T, n + 1, 4)`` (the body frames that carry
    the visual shapes)."""
    return {
        "base": matrix_to_wxyz(geometry.base_rotation),
        "box": matrix_to_wxyz(geometry.base_rotation @ geometry.base_box_axes),
        "end_points": matrix_to_wxyz(geometry.end_point_rotation),
        "bodies": matrix_to_wxyz(geometry.body_rotation),
    }


def check_visuals(visuals: Any, models: Sequence[Model]) -> tuple[Any, ...]:
    """The :class:`sdjax.io.visuals.VisualShape` sequence of :func:`sdjax.viewer.show`'s
    ``visuals`` argument (``None``: none; a sequence of shapes; or an import result with a
    ``visuals`` attribute, ``UrdfImport``/``MjcfImport``).

    Raises:
        ValueError: naming the argument: an item that is not a shape, or a body index that
            one of the models does not have.
    """
    from sdjax.io.visuals import VisualShape

    if visuals is None:
        return ()
    if hasattr(visuals, "visuals") and not isinstance(visuals, (list, tuple)):
        visuals = visuals.visuals
    if not isinstance(visuals, (list, tuple)):
        raise TypeError(
            f"visuals: expected a sequence of sdjax.io.visuals.VisualShape or an import result (UrdfImport, MjcfImport), got {_named(visuals)}"
        )
    bodies = min(model.num_joints for model in models) + 1
    for k, shape in enumerate(visuals):
        if not isinstance(shape, VisualShape):
            raise TypeError(f"visuals[{k}]: expected a sdjax.io.visuals.VisualShape, got {_named(shape)}")
        if not 0 <= shape.body < bodies:
            raise ValueError(
                f"visuals[{k}].body: {shape.body}, but the model has bodies 0 to {bodies - 1} ({shape.source or shape.kind})"
            )
    return tuple(visuals)


def matrix_to_wxyz(rotation: np.ndarray) -> np.ndarray:
    """Scalar-first quaternions ``(..., 4)`` of rotation matrices ``(..., 3, 3)`` (viser's
    convention; :func:`sdjax.matrix_to_quat` is scalar-last)."""
    xyzw = np.asarray(_matrix_to_quat(np.asarray(rotation, np.float64)), np.float64)
    return np.concatenate([xyzw[..., 3:], xyzw[..., :3]], axis=-1)


__all__ = [
    "MAX_TRAJECTORIES",
    "RADIUS_BOUNDS",
    "RADIUS_PER_LENGTH",
    "SceneGeometry",
    "TrajectoryItem",
    "attitudes",
    "camera_pose",
    "check_trajectory",
    "check_visuals",
    "frame_index",
    "link_radii",
    "matrix_to_wxyz",
    "extent",
    "scene_geometries",
    "scene_geometry",
    "segment_poses",
    "split_trajectories",
]
