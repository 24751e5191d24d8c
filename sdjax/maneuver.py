"""Maneuvering modes of a spacecraft-manipulator system: reaction wheels, thrusters, mode laws.

Seed 003 (section "Detailed Classification of Spacecraft-Manipulator System Maneuvering",
Table 1) splits the classical free-floating / free-flying pair into five modes, defined for
an isolated system in weightlessness:

| mode                 | base actuation                                    | total momenta           |
|----------------------|---------------------------------------------------|-------------------------|
| `floating`           | none (joint motors only)                          | P, L conserved          |
| `rotation-floating`  | attitude by momentum exchange (reaction wheels)   | P, L conserved          |
| `rotation-flying`    | attitude by external torque (thruster couples)    | P conserved, L varies   |
| `translation-flying` | translation by external force at the base         | P varies (L: see below) |
|                      | centroid; attitude free or held by wheels         |                         |
| `flying`             | external force and torque                         | P, L vary               |

For ``translation-flying`` the seed states that the total angular momentum is constant. A
force ``F`` at the base centroid ``r0`` changes the angular momentum about a fixed point
``c`` at the rate ``(r0 - c) x F``, which vanishes only for points on the thrust line (so L
is constant about a fixed point for thrust along a fixed line through it); about the system
centre of mass the rate is ``(r0 - r_com) x F``, zero for thrust through the centre of mass.
About the inertial origin, ``dL/dt = r0 x F``.

The building blocks:

- :func:`add_reaction_wheels` appends reaction wheels to a model as ordinary revolute links
  on the base, so the dynamics, momenta and integrators treat them exactly (momentum
  exchange is internal and conserves P and L to integration error).
- :class:`Thrusters` realises a commanded base force/torque with per-base-axis limits and an
  explicit saturation choice (``"none"``, ``"clip"``, ``"tanh"``).
- :func:`maneuver_law` builds a control law ``(t, state) -> Controls`` for one mode, for
  :func:`sdjax.rollout`; :class:`AttitudePD` and :class:`TranslationPD` are ready base laws.

Frames: vectors are inertial unless stated; wheel axes, wheel positions and thruster limits
are in the base frame. Units SI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import matmul
from sdjax.dynamics import Controls
from sdjax.editing import append_links
from sdjax.model import Model, check_no_mimic
from sdjax.rotation import quat_conjugate, quat_multiply, quat_to_rotation_vector, rpy_to_matrix
from sdjax._checks import check_callable, check_choice, check_index, check_type, is_traced
from sdjax.state import State

#: The five maneuvering modes of seed 003, Table 1 (how the base is actuated; not to be confused
#: with the base modes of :data:`sdjax.BASE_MODES`, which say how the base may move).
MANEUVER_MODES = ("floating", "rotation-floating", "rotation-flying", "translation-flying", "flying")

#: Saturation choices of :class:`Thrusters` and :func:`saturate`.
SATURATIONS = ("none", "clip", "tanh")

#: Link-name prefix of the wheels made by :func:`add_reaction_wheels`; :func:`reaction_wheel_joints`
#: finds wheels by it.
REACTION_WHEEL_PREFIX = "reaction_wheel_"

#: Tolerance on ``| |axis| - 1 |`` for wheel axes (loose enough for float32 input).
AXIS_NORM_TOL = 1e-6


# ------------------------------------------------------------------------------------------
# Reaction wheels.


def axis_to_rpy(axis: Any) -> Array:
    """SpaceDyn RPY angles of a joint frame whose z axis is ``axis`` (parent frame).

    ``Rx(a) Ry(b) Rz(c) e_z = (sin b, -sin a cos b, cos a cos b)``, so ``b = asin(u_x)``,
    ``a = atan2(-u_y, u_z)``, ``c = 0`` (the spin angle of an axisymmetric wheel is arbitrary).

    Arguments:
        axis: ``(..., 3)`` unit vector(s).

    Returns:
        ``(..., 3)`` angles ``(alpha, beta, 0)``, rad.
    """
    u = jnp.asarray(axis)
    ux, uy, uz = u[..., 0], u[..., 1], u[..., 2]
    # Along +-x the roll angle is arbitrary (0 here); guarded so gradients stay finite there.
    r2 = uy**2 + uz**2
    on_x = r2 < 1e-24
    alpha = jnp.where(on_x, 0.0, jnp.arctan2(-uy, jnp.where(on_x, 1.0, uz)))
    beta = jnp.where(on_x, jnp.where(ux < 0, -0.5, 0.5) * jnp.pi, jnp.arctan2(ux, jnp.sqrt(jnp.where(on_x, 1.0, r2))))
    return jnp.stack([alpha, beta, jnp.zeros_like(alpha)], axis=-1)


def _per_wheel(name: str, value: Any, k: int, dtype: Any) -> Array:
    arr = jnp.asarray(value)
    if arr.ndim == 0:
        arr = jnp.broadcast_to(arr, (k,))
    if arr.shape != (k,):
        raise ValueError(
            f"add_reaction_wheels: {name} expected a scalar or shape ({k},) for {k} wheels, got {arr.shape}"
        )
    return arr.astype(dtype)


def add_reaction_wheels(
    model: Model,
    axes: Any,
    *,
    spin_inertia: Any,
    transverse_inertia: Any,
    mass: Any,
    positions: Any = None,
    names: Sequence[str] | None = None,
) -> Model:
    """Append reaction wheels (momentum-exchange devices on the base) as revolute links.

    Wheel ``k`` becomes link ``n + k + 1`` with parent 0 (the base), a revolute joint whose
    z axis is ``axes[k]`` (base frame; ``joint_rpy`` from :func:`axis_to_rpy`, SpaceDyn's
    ``Rx Ry Rz`` convention), its joint and centroid at ``positions[k]`` (base frame) and the
    axisymmetric inertia ``diag(transverse, transverse, spin)`` in its link frame. The wheel
    motor is the joint actuator: a joint torque ``tau_k`` spins the wheel up and reacts on the
    base with ``-tau_k axes[k]`` (seed 003, rotation-floating). Because wheels are ordinary
    links, every algorithm (dynamics, momenta, integrators, Jacobians) includes them exactly.

    Everything else of ``model`` (end points, joint stiffness and damping, gravity, names,
    dtype) is kept; wheel joints get zero stiffness and damping. Wheel joint rates are the
    wheel speeds *relative to the base*.

    Arguments:
        model: the system to extend.
        axes: ``(k, 3)`` unit spin axes, base frame (``[axis]`` for one wheel).
        spin_inertia: scalar or ``(k,)`` moment of inertia about the spin axis, kg m^2.
        transverse_inertia: scalar or ``(k,)`` moment about a diameter through the wheel
            centroid, kg m^2 (a physical body needs ``spin <= 2 transverse``).
        mass: scalar or ``(k,)`` wheel masses, kg.
        positions: ``(k, 3)`` wheel centroids, base frame, m (default: the base centroid).
        names: ``k`` link names (default ``reaction_wheel_1``, ... numbered after any wheels
            already present); :func:`reaction_wheel_joints` finds wheels by the prefix
            :data:`REACTION_WHEEL_PREFIX`, so custom names need an explicit ``wheel_joints``.

    Returns:
        A new :class:`~sdjax.Model` with ``n + k`` links; the wheels are joints
        ``n + 1 .. n + k`` (1-based, as ``end_point_link``).

    Raises:
        ValueError: naming the argument and wheel index for a wrong shape, a zero or non-unit
            axis, a non-positive or non-finite inertia or mass, an inertia violating the
            triangle inequality, or a repeated name.
    """
    dtype = model.dtype
    axes_arr = jnp.asarray(axes)
    if axes_arr.ndim != 2 or axes_arr.shape[1] != 3 or axes_arr.shape[0] < 1:
        raise ValueError(
            f"add_reaction_wheels: axes expected shape (k, 3) with k >= 1 (use [axis] for one wheel), got {axes_arr.shape}"
        )
    k = int(axes_arr.shape[0])
    spin = _per_wheel("spin_inertia", spin_inertia, k, dtype)
    transverse = _per_wheel("transverse_inertia", transverse_inertia, k, dtype)
    masses = _per_wheel("mass", mass, k, dtype)
    if positions is None:
        pos = jnp.zeros((k, 3), dtype)
    else:
        pos = jnp.asarray(positions)
        if pos.shape != (k, 3):
            raise ValueError(f"add_reaction_wheels: positions expected shape ({k}, 3) for {k} wheels, got {pos.shape}")
        pos = pos.astype(dtype)
    if not is_traced(axes, spin_inertia, transverse_inertia, mass, positions):
        axes64 = np.asarray(axes, np.float64)
        spin64, transverse64, masses64 = (
            np.broadcast_to(np.asarray(x, np.float64), (k,)) for x in (spin_inertia, transverse_inertia, mass)
        )
        _check_wheel_values(
            axes64,
            spin64,
            transverse64,
            masses64,
            np.zeros((k, 3)) if positions is None else np.asarray(positions, np.float64),
        )
    norms = jnp.sqrt(jnp.sum(axes_arr.astype(dtype) ** 2, axis=-1, keepdims=True))
    unit = axes_arr.astype(dtype) / norms
    if names is None:
        start = len(reaction_wheel_joints(model)) + 1
        names = tuple(f"{REACTION_WHEEL_PREFIX}{start + i}" for i in range(k))
    else:
        names = tuple(str(s) for s in names)
        if len(names) != k:
            raise ValueError(f"add_reaction_wheels: names expected {k} names, got {len(names)}")
    for i, s in enumerate(names):
        if s in model.link_names or s in names[:i]:
            raise ValueError(f"add_reaction_wheels: names[{i}] = {s!r} repeats a link name; names must be unique")

    inertia = jax.vmap(lambda t, s: jnp.diag(jnp.stack([t, t, s])))(transverse, spin)
    return append_links(
        model,
        (0,) * k,
        ("R",) * k,
        link_mass=masses,
        link_inertia=inertia,
        parent_centroid_to_joint=pos,
        centroid_to_joint=jnp.zeros((k, 3), dtype),
        joint_rpy=axis_to_rpy(unit),
        link_names=names,
    )


def _check_wheel_values(
    axes: np.ndarray, spin: np.ndarray, transverse: np.ndarray, masses: np.ndarray, pos: np.ndarray
) -> None:
    for i, axis in enumerate(axes):
        if not np.all(np.isfinite(axis)):
            raise ValueError(f"add_reaction_wheels: axes[{i}] = {axis.tolist()} is not finite")
        norm = float(np.linalg.norm(axis))
        if norm == 0.0:
            raise ValueError(f"add_reaction_wheels: axes[{i}] is zero; a wheel needs a unit spin axis")
        if abs(norm - 1.0) > AXIS_NORM_TOL:
            raise ValueError(f"add_reaction_wheels: axes[{i}] = {axis.tolist()} is not a unit vector (norm {norm:.9g})")
    for name, values in (("spin_inertia", spin), ("transverse_inertia", transverse), ("mass", masses)):
        values = np.asarray(values, np.float64)
        for i, v in enumerate(values):
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"add_reaction_wheels: {name}[{i}] must be positive and finite, got {v}")
    s, t = np.asarray(spin, np.float64), np.asarray(transverse, np.float64)
    for i in range(len(s)):
        # Principal moments (t, t, s) of a rigid body obey s <= t + t (a thin disc has s = 2 t).
        if s[i] > 2.0 * t[i] * (1.0 + 1e-9):
            raise ValueError(
                f"add_reaction_wheels: spin_inertia[{i}] = {s[i]:.6g} exceeds 2 * transverse_inertia[{i}] = "
                f"{2 * t[i]:.6g} (triangle inequality: no mass distribution has these moments)"
            )
    p = np.asarray(pos, np.float64)
    bad = np.argwhere(~np.isfinite(p))
    if bad.size:
        raise ValueError(f"add_reaction_wheels: positions[{int(bad[0][0])}] is not finite")


def reaction_wheel_joints(model: Model, prefix: str = REACTION_WHEEL_PREFIX) -> tuple[int, ...]:
    """Joints (1-based link indices) of the links whose names start with ``prefix``.

    These are the wheels made by :func:`add_reaction_wheels` with default names.
    """
    return tuple(i + 1 for i, s in enumerate(model.link_names) if s.startswith(prefix))


def _check_wheel_joints(model: Model, wheel_joints: Sequence[int]) -> tuple[int, ...]:
    joints = tuple(wheel_joints)
    n = model.num_joints
    for i, j in enumerate(joints):
        check_index(f"wheel_joints[{i}]", j, 1, n, f"the joints of {model.name!r}")
        if j in joints[:i]:
            raise ValueError(f"wheel_joints[{i}]: joint {j} is listed twice")
        if model.parent[j - 1] != 0 or model.joint_type[j - 1] != "R":
            raise ValueError(
                f"wheel_joints[{i}]: joint {j} ({model.link_names[j - 1]!r}) is not a reaction wheel: "
                "a wheel is a revolute joint whose parent is the base (0)"
            )
    return tuple(int(j) for j in joints)


def reaction_wheel_axes(model: Model, wheel_joints: Sequence[int] | None = None) -> Array:
    """Spin axes of the wheels in the base frame, as the columns of a ``(3, k)`` matrix.

    Arguments:
        model: the system.
        wheel_joints: 1-based wheel joints (default :func:`reaction_wheel_joints`).

    Returns:
        ``(3, k)`` matrix ``U`` of unit axes (the z axes of the wheel joint frames).
    """
    joints = reaction_wheel_joints(model) if wheel_joints is None else _check_wheel_joints(model, wheel_joints)
    index = np.asarray(joints, dtype=np.int64) - 1
    return rpy_to_matrix(model.joint_rpy[index])[:, :, 2].T


# ------------------------------------------------------------------------------------------
# Thrusters and saturation.


@eqx.filter_jit
def saturate(value: Array, limit: Array, saturation: str) -> Array:
    """Saturate each component of ``value`` to ``[-limit, limit]``.

    Arguments:
        value: ``(..., m)`` commands.
        limit: ``(m,)`` (or broadcastable) positive limits; ``inf`` means unlimited.
        saturation: ``"none"`` (identity), ``"clip"`` (hard limit; exact inside the limits,
            zero derivative outside) or ``"tanh"`` (``limit * tanh(value / limit)``: smooth,
            strictly inside the limits, derivative 1 at zero; unlimited components pass).

    Returns:
        Saturated commands, same shape and dtype as ``value``.
    """
    check_choice("saturate", saturation, SATURATIONS, "saturation")
    limit = jnp.asarray(limit).astype(value.dtype)
    if saturation == "none":
        return value
    if saturation == "clip":
        return jnp.clip(value, -limit, limit)
    finite = jnp.isfinite(limit)
    safe = jnp.where(finite, limit, 1.0)
    return jnp.where(finite, safe * jnp.tanh(value / safe), value)


def _limit_array(name: str, value: Any, dtype: Any) -> Array:
    if value is None:
        return jnp.full((3,), jnp.inf, dtype)
    arr = jnp.asarray(value)
    if arr.ndim == 0:
        arr = jnp.broadcast_to(arr, (3,))
    if arr.shape != (3,):
        raise ValueError(f"Thrusters.{name}: expected a scalar or shape (3,) (base x, y, z), got {arr.shape}")
    if not is_traced(value):
        values = np.broadcast_to(np.asarray(value, np.float64), (3,))
        for i, v in enumerate(values):
            if np.isnan(v) or not v > 0:
                raise ValueError(f"Thrusters.{name}[{i}]: limit must be positive (inf for unlimited), got {v}")
    return arr.astype(dtype)


class Thrusters(eqx.Module):
    """Base thrusters (a reaction control system): external force and torque on the base.

    Limits are per axis of the base frame (a thruster set rigidly mounted on the base); the
    force acts at the base centroid. Commands are inertial-frame vectors;
    :meth:`realised_wrench` rotates them into the base frame, saturates each axis as chosen and
    rotates back. Saturation happens only when asked for: ``saturation="none"`` refuses limits,
    ``"clip"``/``"tanh"`` need at least one.

    Attributes:
        force_limit: ``(3,)`` largest force magnitude per base axis, N (``inf``: unlimited).
        torque_limit: ``(3,)`` largest torque magnitude per base axis, N m (``inf``: unlimited).
        saturation: static ``"none"``, ``"clip"`` or ``"tanh"`` (see :func:`saturate`).
    """

    force_limit: Array
    torque_limit: Array
    saturation: str = eqx.field(static=True)

    def __init__(self, force_limit: Any = None, torque_limit: Any = None, saturation: str = "clip", dtype: Any = None):
        """Build and check a thruster set.

        Arguments:
            force_limit: scalar or ``(3,)`` positive force limits, base frame, N (default
                unlimited; ``inf`` entries are unlimited axes).
            torque_limit: scalar or ``(3,)`` positive torque limits, base frame, N m (default
                unlimited).
            saturation: ``"none"``, ``"clip"`` (default) or ``"tanh"``.
            dtype: floating dtype of the limits (default JAX's default float); at use they
                are cast to the dtype of the command.
        """
        check_choice("Thrusters.saturation", saturation, SATURATIONS, "saturation")
        if saturation == "none" and (force_limit is not None or torque_limit is not None):
            raise ValueError(
                "Thrusters: saturation='none' applies no limits; drop force_limit/torque_limit or choose "
                "saturation='clip' or 'tanh'"
            )
        if saturation != "none" and force_limit is None and torque_limit is None:
            raise ValueError(f"Thrusters: saturation={saturation!r} needs force_limit and/or torque_limit")
        dtype = jnp.result_type(float) if dtype is None else dtype
        self.force_limit = _limit_array("force_limit", force_limit, dtype)
        self.torque_limit = _limit_array("torque_limit", torque_limit, dtype)
        self.saturation = saturation

    def realised_wrench(self, base_rotation: Array, force: Array, torque: Array) -> tuple[Array, Array]:
        """See :func:`realised_base_wrench`."""
        return realised_base_wrench(self, base_rotation, force, torque)


@eqx.filter_jit
def realised_base_wrench(
    thrusters: Thrusters, base_rotation: Array, force: Array, torque: Array
) -> tuple[Array, Array]:
    """The base force and torque the thrusters actually produce for a command.

    ``F = A0 sat(A0^T F_cmd)``, ``N = A0 sat(A0^T N_cmd)``, saturating per base axis.

    Arguments:
        thrusters: limits and saturation.
        base_rotation: ``(3, 3)`` base-to-inertial rotation ``A0``.
        force: ``(3,)`` commanded force at the base centroid, inertial frame, N.
        torque: ``(3,)`` commanded torque on the base, inertial frame, N m.

    Returns:
        ``(force, torque)``, ``(3,)`` each, inertial frame, in the dtype of ``force``.
    """
    force = jnp.asarray(force)
    dtype = force.dtype
    rot = jnp.asarray(base_rotation).astype(dtype)
    torque = jnp.asarray(torque).astype(dtype)
    f_base = saturate(matmul(rot.T, force), thrusters.force_limit, thrusters.saturation)
    n_base = saturate(matmul(rot.T, torque), thrusters.torque_limit, thrusters.saturation)
    return matmul(rot, f_base), matmul(rot, n_base)


# ------------------------------------------------------------------------------------------
# Base laws.


def quat_error_vector(target: Array, quat: Array) -> Array:
    """Rotation vector (inertial frame, rad) of the shortest rotation from ``quat`` to ``target``.

    ``q_e = target * conj(quat)`` (so ``R(q_e) R(quat) = R(target)``) and
    ``phi = quat_to_rotation_vector(q_e)`` (shortest path; finite gradients at zero error).

    Arguments:
        target, quat: ``(..., 4)`` scalar-last unit quaternions (base to inertial).

    Returns:
        ``(..., 3)`` rotation vector, |phi| <= pi.
    """
    return quat_to_rotation_vector(quat_multiply(target, quat_conjugate(quat)))


class AttitudePD(eqx.Module):
    """Base attitude PD law: ``N = kp phi + kd (w_target - w0)`` (inertial frame, N m).

    ``phi`` is the shortest-path rotation vector from the base attitude to the target
    (:func:`quat_error_vector`). A pytree: its gains and target are traced array leaves, so
    they can be differentiated and changed without recompiling.

    Attributes:
        target_quaternion: ``(4,)`` scalar-last target attitude (base to inertial).
        kp: scalar or ``(3,)`` stiffness per inertial axis, N m/rad.
        kd: scalar or ``(3,)`` damping per inertial axis, N m s/rad.
        target_angular_velocity: ``(3,)`` target base angular velocity, inertial, rad/s.
    """

    target_quaternion: Array
    kp: Array
    kd: Array
    target_angular_velocity: Array

    def __init__(self, target_quaternion: Any, kp: Any, kd: Any, target_angular_velocity: Any = None):
        quat = jnp.asarray(target_quaternion)
        if quat.shape != (4,):
            raise ValueError(f"AttitudePD: target_quaternion expected shape (4,), got {quat.shape}")
        if not is_traced(target_quaternion) and not float(np.sum(np.asarray(target_quaternion, np.float64) ** 2)) > 0:
            raise ValueError("AttitudePD: target_quaternion must be non-zero")
        self.target_quaternion = quat / jnp.sqrt(jnp.sum(quat**2))
        self.kp = jnp.asarray(kp)
        self.kd = jnp.asarray(kd)
        self.target_angular_velocity = (
            jnp.zeros((3,), quat.dtype) if target_angular_velocity is None else jnp.asarray(target_angular_velocity)
        )

    def __call__(self, t: Array, state: State) -> Array:
        dtype = state.base_quaternion.dtype
        phi = quat_error_vector(self.target_quaternion.astype(dtype), state.base_quaternion)
        rate_error = self.target_angular_velocity.astype(dtype) - state.base_angular_velocity
        return self.kp.astype(dtype) * phi + self.kd.astype(dtype) * rate_error


class TranslationPD(eqx.Module):
    """Base position PD law: ``F = kp (r_target - r0) + kd (v_target - v0)`` (inertial, N).

    Attributes:
        target_position: ``(3,)`` target base centroid, inertial, m.
        kp: scalar or ``(3,)`` stiffness, N/m.
        kd: scalar or ``(3,)`` damping, N s/m.
        target_velocity: ``(3,)`` target base centroid velocity, inertial, m/s.
    """

    target_position: Array
    kp: Array
    kd: Array
    target_velocity: Array

    def __init__(self, target_position: Any, kp: Any, kd: Any, target_velocity: Any = None):
        pos = jnp.asarray(target_position)
        if pos.shape != (3,):
            raise ValueError(f"TranslationPD: target_position expected shape (3,), got {pos.shape}")
        self.target_position = pos
        self.kp = jnp.asarray(kp)
        self.kd = jnp.asarray(kd)
        self.target_velocity = jnp.zeros((3,), pos.dtype) if target_velocity is None else jnp.asarray(target_velocity)

    def __call__(self, t: Array, state: State) -> Array:
        dtype = state.base_position.dtype
        return self.kp.astype(dtype) * (self.target_position.astype(dtype) - state.base_position) + self.kd.astype(
            dtype
        ) * (self.target_velocity.astype(dtype) - state.base_linear_velocity)


# ------------------------------------------------------------------------------------------
# Mode laws.

#: For each mode: (uses attitude_law, uses translation_law, needs thrusters).
_MODE_INPUTS = {
    "floating": (False, False, False),
    "rotation-floating": (True, False, False),
    "rotation-flying": (True, False, True),
    "translation-flying": (None, True, True),  # attitude_law optional (then by wheels)
    "flying": (True, True, True),
}


class ManeuverLaw(eqx.Module):
    """A control law ``(t, state) -> Controls`` for one maneuvering mode (see :func:`maneuver_law`).

    Attributes:
        mode: static, one of :data:`MANEUVER_MODES`.
        joint_law: ``(t, state) -> (n,) or (n - k,)`` joint torques, or None (zero).
        attitude_law: ``(t, state) -> (3,)`` desired base torque, inertial, N m, or None.
        translation_law: ``(t, state) -> (3,)`` desired base force, inertial, N, or None.
        thrusters: :class:`Thrusters` or None.
        wheel_joints: static 1-based wheel joints.
        wheel_allocation: ``(k, 3)`` pseudo-inverse of the base-frame wheel axis matrix (or
            ``(0, 3)``).
        num_joints, num_end_points: static sizes of the model.
    """

    mode: str = eqx.field(static=True)
    joint_law: Callable[[Array, State], Array] | None
    attitude_law: Callable[[Array, State], Array] | None
    translation_law: Callable[[Array, State], Array] | None
    thrusters: Thrusters | None
    wheel_joints: tuple[int, ...] = eqx.field(static=True)
    wheel_allocation: Array
    num_joints: int = eqx.field(static=True)
    num_end_points: int = eqx.field(static=True)

    @property
    def wheels_control_attitude(self) -> bool:
        """True when the base torque is realised by the reaction wheels."""
        return self.attitude_law is not None and not self.thrusters_torque

    @property
    def thrusters_torque(self) -> bool:
        return self.mode in ("rotation-flying", "flying")

    @property
    def thrusters_force(self) -> bool:
        return self.mode in ("translation-flying", "flying")

    def __call__(self, t: Array, state: State) -> Controls:
        dtype = state.q.dtype
        n, k = self.num_joints, len(self.wheel_joints)
        wheels = np.asarray(self.wheel_joints, dtype=np.int64) - 1
        others = np.setdiff1d(np.arange(n), wheels)
        # Joint torques of the non-wheel joints from the joint law.
        tau = jnp.zeros((n,), dtype)
        if self.joint_law is not None:
            commanded = jnp.asarray(self.joint_law(t, state)).astype(dtype)
            if commanded.shape == (n,):
                tau = commanded.at[wheels].set(0.0) if k else commanded
            elif commanded.shape == (n - k,):
                tau = tau.at[others].set(commanded)
            else:
                raise ValueError(
                    f"maneuver_law: joint_law returned shape {commanded.shape}; expected ({n},) (wheel entries "
                    f"are replaced) or ({n - k},) (non-wheel joints in order)"
                )
        rot = state.base_rotation
        zero3 = jnp.zeros((3,), dtype)
        force, torque = zero3, zero3
        desired_torque = (
            None if self.attitude_law is None else self._vector(self.attitude_law, t, state, "attitude_law")
        )
        if self.wheels_control_attitude:
            assert desired_torque is not None  # (wheels_control_attitude: attitude_law is set)
            # Base receives -A0 U tau_w; choose tau_w = -pinv(U) A0^T N (least squares).
            tau_w = matmul(-self.wheel_allocation.astype(dtype), matmul(rot.T, desired_torque))
            tau = tau.at[wheels].set(tau_w)
        if self.thrusters_force or self.thrusters_torque:
            # (maneuver_law checks these; a ManeuverLaw built directly may lack them.)
            if self.thrusters is None:
                raise ValueError(
                    f"ManeuverLaw: mode {self.mode!r} applies external loads and needs thrusters (see maneuver_law)"
                )
            if self.thrusters_force:
                if self.translation_law is None:
                    raise ValueError(
                        f"ManeuverLaw: mode {self.mode!r} controls the base translation and needs translation_law (see maneuver_law)"
                    )
                force = self._vector(self.translation_law, t, state, "translation_law")
            if self.thrusters_torque:
                if desired_torque is None:
                    raise ValueError(
                        f"ManeuverLaw: mode {self.mode!r} controls the base attitude and needs attitude_law (see maneuver_law)"
                    )
                torque = desired_torque
            force, torque = realised_base_wrench(self.thrusters, rot, force, torque)
            # A thruster set used for one kind of load only gives exact zeros for the other.
            force = force if self.thrusters_force else zero3
            torque = torque if self.thrusters_torque else zero3
        ne = self.num_end_points
        return Controls(
            tau=tau,
            base_force=force,
            base_torque=torque,
            end_point_force=jnp.zeros((ne, 3), dtype),
            end_point_torque=jnp.zeros((ne, 3), dtype),
        )

    @staticmethod
    def _vector(law: Callable, t: Array, state: State, name: str) -> Array:
        value = jnp.asarray(law(t, state)).astype(state.q.dtype)
        if value.shape != (3,):
            raise ValueError(f"maneuver_law: {name} returned shape {value.shape}; expected (3,)")
        return value


def maneuver_law(
    model: Model,
    mode: str,
    joint_law: Callable[[Array, State], Array] | None = None,
    *,
    attitude_law: Callable[[Array, State], Array] | None = None,
    translation_law: Callable[[Array, State], Array] | None = None,
    thrusters: Thrusters | None = None,
    wheel_joints: Sequence[int] | None = None,
) -> ManeuverLaw:
    """Control law for a maneuvering mode of seed 003 (Table 1), for :func:`sdjax.rollout`.

    ``sdjax.rollout(model, state, dt, N, maneuver_law(model, mode, ...))`` simulates the mode;
    the applied loads are recorded in ``Trajectory.controls``. In every mode the non-wheel
    joints get ``joint_law``'s torques (the manipulator); the base loads are:

    - ``"floating"``: none; wheels (if any) are unpowered. Needs no base law.
    - ``"rotation-floating"``: the desired base torque ``N = attitude_law(t, state)`` is
      realised by the wheel motors alone: with the base-frame axis matrix ``U`` (3, k) the
      base receives ``-A0 U tau_w``, so ``tau_w = -pinv(U) A0^T N`` (least squares, minimum
      norm for k > 3). No external load; P and L are conserved.
    - ``"rotation-flying"``: ``N`` from ``attitude_law`` is applied by the thrusters as a pure
      couple (zero net force), saturated as the :class:`Thrusters` say. P is conserved.
    - ``"translation-flying"``: ``F = translation_law(t, state)`` is applied at the base
      centroid by the thrusters (zero torque). Attitude is free, or, with ``attitude_law``,
      held by the wheels as in rotation-floating. ``dP/dt = F``, ``dL_origin/dt = r0 x F``.
    - ``"flying"``: both, from the thrusters. Wheels (if any) are unpowered.

    Arguments:
        model: the system (wheels from :func:`add_reaction_wheels`, if any).
        mode: one of :data:`MANEUVER_MODES`.
        joint_law: ``(t, state) -> tau``: ``(n,)`` (wheel entries replaced by the mode logic)
            or ``(n - k,)`` for the non-wheel joints in order; None for zero.
        attitude_law: ``(t, state) -> (3,)`` desired base torque, inertial frame, N m (e.g.
            :class:`AttitudePD`).
        translation_law: ``(t, state) -> (3,)`` desired base force, inertial frame, N (e.g.
            :class:`TranslationPD`).
        thrusters: :class:`Thrusters` for the flying modes.
        wheel_joints: 1-based wheel joints (default :func:`reaction_wheel_joints`; ``()`` for
            none).

    Returns:
        A :class:`ManeuverLaw` (a pytree; its array leaves are traced by ``rollout``).

    Raises:
        ValueError: unknown mode (listing the valid ones); a law the mode needs is missing or
            one it forbids is given; thrusters missing or forbidden; wheels missing, not wheels,
            or spanning fewer than 3 independent axes where attitude is wheel-controlled.
    """
    check_no_mimic(model, "maneuver_law")
    check_choice("maneuver_law", mode, MANEUVER_MODES, "maneuvering mode")
    uses_attitude, uses_translation, uses_thrusters = _MODE_INPUTS[mode]
    if uses_attitude is True and attitude_law is None:
        raise ValueError(f"maneuver_law: mode {mode!r} controls the base attitude and needs attitude_law")
    if uses_attitude is False and attitude_law is not None:
        raise ValueError(f"maneuver_law: mode {mode!r} does not control the base attitude; attitude_law is not allowed")
    if uses_translation and translation_law is None:
        raise ValueError(f"maneuver_law: mode {mode!r} controls the base translation and needs translation_law")
    if not uses_translation and translation_law is not None:
        raise ValueError(
            f"maneuver_law: mode {mode!r} does not control the base translation; translation_law is not allowed"
        )
    if uses_thrusters and thrusters is None:
        raise ValueError(f"maneuver_law: mode {mode!r} applies external loads and needs thrusters (a Thrusters)")
    if not uses_thrusters and thrusters is not None:
        raise ValueError(f"maneuver_law: mode {mode!r} applies no external load; thrusters are not allowed")
    for name, law in (("joint_law", joint_law), ("attitude_law", attitude_law), ("translation_law", translation_law)):
        if law is not None:
            check_callable(f"maneuver_law: {name}", law, "(t, state) -> array")
    if thrusters is not None:
        check_type("maneuver_law: thrusters", thrusters, Thrusters, "a Thrusters")
    if mode != "floating" and model.base == "fixed":
        raise ValueError(f"maneuver_law: mode {mode!r} moves the base, but model {model.name!r} has a fixed base")
    joints = reaction_wheel_joints(model) if wheel_joints is None else _check_wheel_joints(model, wheel_joints)
    wheel_attitude = attitude_law is not None and mode in ("rotation-floating", "translation-flying")
    dtype = model.dtype
    if wheel_attitude:
        if not joints:
            raise ValueError(
                f"maneuver_law: mode {mode!r} with attitude_law holds the attitude by reaction wheels, but the "
                f"model has none (add them with add_reaction_wheels, or pass wheel_joints)"
            )
        if not is_traced(model.joint_rpy):
            # Third column of Rx(a) Ry(b) Rz(c): (sin b, -sin a cos b, cos a cos b), in NumPy so
            # the check also runs while maneuver_law is traced (e.g. under jax.grad).
            rpy = np.asarray(model.joint_rpy, np.float64)[np.asarray(joints) - 1]
            a, b = rpy[:, 0], rpy[:, 1]
            numeric_axes = np.stack([np.sin(b), -np.sin(a) * np.cos(b), np.cos(a) * np.cos(b)])
            singular = np.linalg.svd(numeric_axes, compute_uv=False)
            if len(singular) < 3 or singular[-1] < 1e-6 * singular[0]:
                raise ValueError(
                    f"maneuver_law: the {len(joints)} wheel axes span fewer than 3 independent directions "
                    f"(singular values {singular.tolist()}); 3-axis attitude control needs at least 3"
                )
        allocation = jnp.linalg.pinv(reaction_wheel_axes(model, joints))
    else:
        allocation = jnp.zeros((len(joints), 3), dtype)
    return ManeuverLaw(
        mode=mode,
        joint_law=joint_law,
        attitude_law=attitude_law,
        translation_law=translation_law,
        thrusters=thrusters,
        wheel_joints=joints,
        wheel_allocation=allocation,
        num_joints=model.num_joints,
        num_end_points=model.num_end_points,
    )


__all__ = [
    "MANEUVER_MODES",
    "REACTION_WHEEL_PREFIX",
    "SATURATIONS",
    "AttitudePD",
    "ManeuverLaw",
    "Thrusters",
    "TranslationPD",
    "add_reaction_wheels",
    "axis_to_rpy",
    "maneuver_law",
    "quat_error_vector",
    "reaction_wheel_axes",
    "reaction_wheel_joints",
    "realised_base_wrench",
    "saturate",
]


def __getattr__(name: str) -> Any:
    """``MODES``, the earlier name of :data:`MANEUVER_MODES`, with a ``DeprecationWarning``."""
    if name == "MODES":
        import warnings

        warnings.warn("sdjax.maneuver.MODES is now MANEUVER_MODES", DeprecationWarning, stacklevel=2)
        return MANEUVER_MODES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
