"""Smooth, differentiable penalty contact between spheres (or points) on bodies and terrain.

Seed 000 (sections 3.7-3.8) handles ground contact of landers, walkers and rovers with a
contact-force model applied at each contact point (SpaceDyn has no constraint solver); this
module is that model, written so that ``jax.grad`` flows through touchdown.

Geometry. A :class:`ContactSpheres` set lists spheres fixed on bodies: body index (0 = base),
centre offset from the body centroid in the body frame, radius (a radius of zero is a point).
The terrain is a :class:`Plane` (any unit normal ``n``, offset ``d``: the surface
``n . x = d``) or a :class:`HeightField` (heights ``z = h(x, y)`` on a regular grid,
Catmull-Rom bicubic or bilinear interpolation, normal from the gradient). For a sphere with
centre ``c`` the terrain returns the signed distance ``s`` of ``c`` above the surface and the
outward normal ``n``; the penetration is ``delta = r - s`` and the contact point (where the
loads act, a point of the body) is ``x = c - r n``.

Normal force: a smoothly clipped Kelvin-Voigt spring-damper with no adhesion,

    f_n = sigmoid(delta / w) * w_f softplus((k delta + c delta_dot) / w_f),  w_f = k w,

with ``delta_dot = -n . v_x`` (``v_x`` the velocity of the body point at ``x``), stiffness
``k`` (N/m), damping ``c`` (N s/m) and a smoothing length ``w`` (m). For ``delta >> w`` it is
``max(k delta + c delta_dot, 0)``: the linear spring-damper, clipped so that it never pulls
(no adhesion). The damping force ``c v0`` of an impact at speed ``v0`` switches on across the
onset zone (a few ``w`` deep); a step ``dt`` comparable to ``w / v0`` resolves it, a much larger
step samples it at an arbitrary phase and makes an ``O(c v0 dt)`` impulse error (restitution
off by ``~1e-4`` at ``w_n dt = 0.0025``, ``w = 1e-7`` m, ``zeta = 0.6``; ``1e-5`` with ``w = 1e-5`` m). It is positive and infinitely differentiable everywhere, so values and
gradients stay finite across contact onset; the sigmoid makes it vanish (exponentially)
above the surface. ``w`` must be small against the penetrations of interest (it sets how
closely the closed forms of the linear spring-damper hold, e.g. restitution below).

Friction: regularised Coulomb friction on the tangential slip velocity
``v_t = v_x - (n . v_x) n``,

    f_t = -mu f_n v_t / sqrt(|v_t|^2 + eps^2),

smooth at zero slip (no NaN in gradients), equal to Coulomb's ``mu f_n`` for ``|v_t| >> eps``.
Below ``eps`` it acts as a viscous damper ``mu f_n / eps``, so a body on a slope steeper than
nothing but flatter than ``atan(mu)`` creeps at the speed ``v = eps tan(a) / sqrt(mu^2 - tan(a)^2)``
(one contact, slope ``a``) instead of sticking exactly.

Restitution. For one point of mass ``m`` with damping ratio ``zeta = c / (2 sqrt(k m))``
(``zeta < 1``) the linear spring-damper that may pull gives ``e = exp(-zeta pi / sqrt(1 - zeta^2))``
(:func:`restitution_linear`); with the no-adhesion clip the contact ends earlier, when
``k delta + c delta_dot = 0`` (:func:`restitution_no_adhesion`); both coincide to first
order in ``zeta``.

Stable steps. Explicit RK4 is stable for the linear oscillator ``x'' = -w^2 x`` while
``w dt <= 2 sqrt(2) ~ 2.83``; with damping ratio ``zeta`` the bound along the eigenvalue ray
is :func:`rk4_stability_limit` (2.83 at ``zeta = 0``, 2.79 for a real eigenvalue). With
``w = sqrt(k / m_eff)`` (``m_eff`` the effective mass of the body point along the normal)
the step must stay below ``limit / w``; the regularised friction adds the real eigenvalue
``-mu f_n / (eps m_eff,t)``. :func:`stable_time_step` evaluates all of them for a set of
contacts at a state (linearisation of the contact loads, every contact assumed touching)
and returns a safe step; a step beyond it makes the contact oscillation grow until the
body is thrown off (tests/test_contact.py checks both sides).

Use: ``env = contact_environment(model, spheres, terrain, parameters)`` is a function
``(t, state) -> Controls`` for ``sdjax.rollout(..., environment=env)`` (evaluated at every RK4
stage); :func:`contact_diagnostics` gives per-contact penetration, forces and slip for plots.
Units SI; vectors in the inertial frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import PRECISION, einsum, matmul
from sdjax.dynamics import Controls, inertia_matrix, point_loads
from sdjax.jacobians import jacobians_at_points
from sdjax.kinematics import kinematic_pass, point_velocity
from sdjax.model import Model, free_coordinates
from sdjax._checks import check_choice, check_scalar, check_type, float_array, is_traced
from sdjax.state import State, check_state

#: Interpolation schemes of :class:`HeightField`.
INTERPOLATIONS = ("bicubic", "bilinear")


# ------------------------------------------------------------------------------------------
# Contact geometry on the bodies.


class ContactSpheres(eqx.Module):
    """Spheres (or points) fixed on bodies that can touch the terrain.

    Attributes:
        bodies: ``(m,)`` static body indices (0 = base, 1..n = links).
        offsets: ``(m, 3)`` sphere centres relative to the body centroid, body frame, m.
        radii: ``(m,)`` radii, m (``0`` = a contact point).
    """

    bodies: tuple[int, ...] = eqx.field(static=True)
    offsets: Array
    radii: Array

    def __init__(self, bodies: Sequence[int], offsets: Any, radii: Any = None):
        """``radii=None`` makes every entry a point (radius 0); given radii must be positive."""
        bodies_arr = np.asarray(bodies)
        if bodies_arr.ndim != 1 or bodies_arr.size == 0 or not np.issubdtype(bodies_arr.dtype, np.integer):
            raise ValueError(
                f"ContactSpheres.bodies: expected a non-empty flat sequence of integer body indices, got {bodies!r}"
            )
        if np.any(bodies_arr < 0):
            raise ValueError(
                f"ContactSpheres.bodies: body index out of range, got {bodies_arr.tolist()} (0 = base, 1..n = links)"
            )
        self.bodies = tuple(int(b) for b in bodies_arr)
        m = len(self.bodies)
        self.offsets = float_array("ContactSpheres.offsets", offsets, shape=(m, 3), hint=f"{m} contacts")
        if radii is None:
            self.radii = jnp.zeros((m,), self.offsets.dtype)
        else:
            self.radii = float_array(
                "ContactSpheres.radii",
                radii,
                shape=(m,),
                dtype=self.offsets.dtype,
                scalar="broadcast",
                sign="positive",
                hint="sphere radii",
            )

    @classmethod
    def at_end_points(cls, model: Model, radius: Any = None) -> ContactSpheres:
        """One sphere (or point, ``radius=None``) centred on each end point of ``model``."""
        if model.num_end_points == 0:
            raise ValueError(f"ContactSpheres.at_end_points: model {model.name!r} has no end points")
        return cls(model.end_point_link, model.centroid_to_end_point, radius)

    @property
    def num_contacts(self) -> int:
        return len(self.bodies)

    def check(self, model: Model) -> None:
        """Raise ``ValueError`` if a body index does not exist in ``model``."""
        bad = [b for b in self.bodies if not 0 <= b <= model.num_joints]
        if bad:
            raise ValueError(
                f"ContactSpheres.bodies: body index out of range {bad} for model {model.name!r} "
                f"(0 = base, 1..{model.num_joints} = links)"
            )


# ------------------------------------------------------------------------------------------
# Terrain.


class Plane(eqx.Module):
    """The plane ``n . x = offset`` with unit outward normal ``n`` (the free side is ``n . x > offset``).

    Attributes:
        normal: ``(3,)`` unit normal, inertial frame (normalised at construction).
        offset: ``()`` signed distance of the plane from the origin along ``normal``, m.
    """

    normal: Array
    offset: Array

    def __init__(self, normal: Any = (0.0, 0.0, 1.0), offset: Any = 0.0):
        normal = float_array("Plane.normal", normal)
        if normal.shape != (3,):
            raise ValueError(f"Plane.normal: expected shape (3,), got {normal.shape}")
        if not is_traced(normal) and not float(np.linalg.norm(np.asarray(normal, np.float64))) > 0:
            raise ValueError("Plane.normal: must be a non-zero vector")
        self.normal = normal / jnp.sqrt(jnp.sum(normal**2))
        self.offset = float_array("Plane.offset", offset, dtype=normal.dtype)
        if self.offset.shape != ():
            raise ValueError(f"Plane.offset: expected a scalar, got shape {self.offset.shape}")

    def query(self, points: Array) -> tuple[Array, Array]:
        """Signed distance ``(m,)`` (m, positive above) and outward normal ``(m, 3)`` at ``(m, 3)`` points."""
        normal = self.normal.astype(points.dtype)
        distance = matmul(points, normal) - self.offset.astype(points.dtype)
        return distance, jnp.broadcast_to(normal, points.shape)


def inclined_plane(angle: Any, downhill: Any = (1.0, 0.0, 0.0), through: Any = (0.0, 0.0, 0.0)) -> Plane:
    """A plane through ``through`` inclined by ``angle`` (rad) from horizontal (``z`` up),
    descending along the horizontal direction ``downhill``: normal
    ``cos(angle) e_z + sin(angle) u`` with ``u`` the unit horizontal part of ``downhill``."""
    u = np.asarray(downhill, np.float64) * np.array([1.0, 1.0, 0.0])
    if not np.linalg.norm(u) > 0:
        raise ValueError(f"inclined_plane: downhill must have a horizontal component, got {downhill!r}")
    u = jnp.asarray(u / np.linalg.norm(u))
    angle = jnp.asarray(angle, jnp.result_type(float))
    normal = jnp.cos(angle) * jnp.array([0.0, 0.0, 1.0]) + jnp.sin(angle) * u
    return Plane(normal, jnp.dot(normal, jnp.asarray(through, normal.dtype), precision=PRECISION))


def _catmull_rom(s: Array) -> tuple[Array, Array]:
    """Catmull-Rom weights ``(4,)`` of nodes ``i-1, i, i+1, i+2`` at ``s`` in [0, 1], and their
    ``d/ds``; they reproduce linear functions exactly and give a C1 interpolant."""
    s2, s3 = s * s, s * s * s
    w = 0.5 * jnp.stack([-s3 + 2 * s2 - s, 3 * s3 - 5 * s2 + 2, -3 * s3 + 4 * s2 + s, s3 - s2], axis=-1)
    dw = 0.5 * jnp.stack([-3 * s2 + 4 * s - 1, 9 * s2 - 10 * s, -9 * s2 + 8 * s + 1, 3 * s2 - 2 * s], axis=-1)
    return w, dw


def _linear(s: Array) -> tuple[Array, Array]:
    """Linear weights on the same 4-node stencil (nodes ``i`` and ``i+1`` only)."""
    zero = jnp.zeros_like(s)
    one = jnp.ones_like(s)
    return jnp.stack([zero, 1 - s, s, zero], axis=-1), jnp.stack([zero, -one, one, zero], axis=-1)


class HeightField(eqx.Module):
    """Terrain ``z = h(x, y)`` from heights on a regular grid (``z`` is up in the inertial frame).

    Node ``(i, j)`` sits at ``(x0 + i dx, y0 + j dy)`` and has height ``heights[i, j]``.
    ``"bicubic"`` interpolation is Catmull-Rom in each direction (C1: continuous normals),
    ``"bilinear"`` is bilinear (continuous heights, normals jump across cell edges); both
    reproduce a plane sampled on the grid exactly (the border cells use nodes extrapolated
    linearly). Outside the grid the query point is clamped to the grid's edge: the terrain
    continues at the edge height.

    The signed distance of a point ``p`` above the surface is taken to the tangent plane at
    ``(p_x, p_y, h)``: ``s = (p_z - h) n_z`` with ``n = (-h_x, -h_y, 1) / sqrt(1 + h_x^2 + h_y^2)``
    (exact for planes; first order in the curvature otherwise).

    Attributes:
        heights: ``(nx, ny)`` heights, m (``nx, ny >= 2``).
        origin: ``(2,)`` ``(x0, y0)`` of node ``(0, 0)``, m.
        spacing: ``(2,)`` ``(dx, dy) > 0``, m.
        interpolation: static, ``"bicubic"`` (default) or ``"bilinear"``.
    """

    heights: Array
    origin: Array
    spacing: Array
    interpolation: str = eqx.field(static=True)

    def __init__(
        self, heights: Any, origin: Any = (0.0, 0.0), spacing: Any = (1.0, 1.0), interpolation: str = "bicubic"
    ):
        self.heights = float_array("HeightField.heights", heights)
        if self.heights.ndim != 2 or min(self.heights.shape) < 2:
            raise ValueError(
                f"HeightField.heights: expected a (nx, ny) grid with nx, ny >= 2, got shape {self.heights.shape}"
            )
        dtype = self.heights.dtype
        self.origin = float_array("HeightField.origin", origin, shape=(2,), dtype=dtype)
        self.spacing = float_array(
            "HeightField.spacing", spacing, shape=(2,), dtype=dtype, scalar="broadcast", sign="positive"
        )
        self.interpolation = check_choice("HeightField.interpolation", interpolation, INTERPOLATIONS)

    def height(self, xy: Array) -> tuple[Array, Array]:
        """Height ``(m,)`` and gradient ``(m, 2)`` ``(dh/dx, dh/dy)`` at ``(m, 2)`` horizontal points."""
        dtype = xy.dtype
        h = self.heights.astype(dtype)
        nx, ny = h.shape
        # Ghost nodes by linear extrapolation, so that planes are reproduced up to the border.
        h = jnp.concatenate([2 * h[:1] - h[1:2], h, 2 * h[-1:] - h[-2:-1]], axis=0)
        h = jnp.concatenate([2 * h[:, :1] - h[:, 1:2], h, 2 * h[:, -1:] - h[:, -2:-1]], axis=1)
        spacing = self.spacing.astype(dtype)
        u = (xy - self.origin.astype(dtype)) / spacing
        upper = jnp.asarray([nx - 1, ny - 1], dtype)
        u = jnp.clip(u, 0.0, upper)
        cell = jnp.clip(jnp.floor(u), 0.0, upper - 1)
        s = u - cell
        index = cell.astype(jnp.int32)
        weights = _catmull_rom if self.interpolation == "bicubic" else _linear
        wx, dwx = weights(s[:, 0])
        wy, dwy = weights(s[:, 1])
        offsets = jnp.arange(4, dtype=jnp.int32)
        # Padded index of node i-1 is i (one ghost row first).
        rows = index[:, 0:1] + offsets  # (m, 4)
        cols = index[:, 1:2] + offsets
        patch = h[rows[:, :, None], cols[:, None, :]]  # (m, 4, 4)
        value = einsum("mi,mij,mj->m", wx, patch, wy)
        dx = einsum("mi,mij,mj->m", dwx, patch, wy) / spacing[0]
        dy = einsum("mi,mij,mj->m", wx, patch, dwy) / spacing[1]
        return value, jnp.stack([dx, dy], axis=-1)

    def query(self, points: Array) -> tuple[Array, Array]:
        """Signed distance ``(m,)`` (m, positive above) and outward normal ``(m, 3)`` at ``(m, 3)`` points."""
        value, gradient = self.height(points[:, :2])
        normal = jnp.concatenate([-gradient, jnp.ones_like(value)[:, None]], axis=-1)
        normal = normal / jnp.sqrt(jnp.sum(normal**2, axis=-1, keepdims=True))
        return (points[:, 2] - value) * normal[:, 2], normal


Terrain = Plane | HeightField


# ------------------------------------------------------------------------------------------
# Contact law.


class ContactParameters(eqx.Module):
    """Penalty contact law (see the module docstring for the equations).

    Each value is a scalar or one value per contact ``(m,)``; all are array leaves (so
    ``jax.grad`` reaches them).

    Attributes:
        stiffness: ``k > 0``, N/m.
        damping: ``c >= 0``, N s/m (``c = 2 zeta sqrt(k m_eff)`` for a damping ratio ``zeta``,
            :func:`damping_for_ratio`).
        friction: Coulomb coefficient ``mu >= 0``.
        slip_velocity: regularisation ``eps > 0`` of friction, m/s.
        smoothing: length ``w > 0`` of the smooth onset and clip, m.
    """

    stiffness: Array
    damping: Array
    friction: Array
    slip_velocity: Array
    smoothing: Array

    def __init__(
        self, stiffness: Any, damping: Any = 0.0, friction: Any = 0.0, slip_velocity: Any = 1e-3, smoothing: Any = 1e-5
    ):
        # Each a scalar or one value per contact (m,); in the stiffness's floating dtype.
        per_contact: dict[str, Any] = dict(shape=(None,), scalar="keep", hint="one per contact")
        self.stiffness = float_array("ContactParameters.stiffness", stiffness, sign="positive", **per_contact)
        dtype = self.stiffness.dtype
        self.damping = float_array(
            "ContactParameters.damping", damping, dtype=dtype, sign="non-negative", **per_contact
        )
        self.friction = float_array(
            "ContactParameters.friction (friction coefficient)",
            friction,
            dtype=dtype,
            sign="non-negative",
            **per_contact,
        )
        self.slip_velocity = float_array(
            "ContactParameters.slip_velocity", slip_velocity, dtype=dtype, sign="positive", **per_contact
        )
        self.smoothing = float_array(
            "ContactParameters.smoothing", smoothing, dtype=dtype, sign="positive", **per_contact
        )

    def per_contact(self, m: int, dtype: Any) -> tuple[Array, Array, Array, Array, Array]:
        """The five parameters broadcast to ``(m,)`` in ``dtype``."""
        out = []
        for name in ("stiffness", "damping", "friction", "slip_velocity", "smoothing"):
            value = getattr(self, name)
            if value.ndim == 1 and value.shape != (m,):
                raise ValueError(
                    f"ContactParameters.{name}: expected a scalar or shape ({m},) for {m} contacts, got {value.shape}"
                )
            out.append(jnp.broadcast_to(value.astype(dtype), (m,)))
        stiffness, damping, friction, slip_velocity, smoothing = out
        return stiffness, damping, friction, slip_velocity, smoothing


class ContactDiagnostics(eqx.Module):
    """Per-contact quantities at one state (``m`` contacts; add leading axes with ``jax.vmap``).

    Attributes:
        penetration: ``(m,)`` ``delta = r - s``, m (positive when touching).
        penetration_rate: ``(m,)`` ``d delta/dt = -n . v_x``, m/s.
        normal_force: ``(m,)`` ``f_n >= 0``, N.
        friction_force: ``(m, 3)`` ``f_t``, inertial frame, N.
        force: ``(m, 3)`` total force on the body ``f_n n + f_t``, N.
        slip_velocity: ``(m, 3)`` tangential velocity ``v_t`` of the body point, m/s.
        point: ``(m, 3)`` contact point ``x = c - r n`` (inertial), m.
        normal: ``(m, 3)`` terrain normal, inertial frame.
    """

    penetration: Array
    penetration_rate: Array
    normal_force: Array
    friction_force: Array
    force: Array
    slip_velocity: Array
    point: Array
    normal: Array


def penalty_normal_force(
    penetration: Array, penetration_rate: Array, stiffness: Array, damping: Array, smoothing: Array
) -> Array:
    """The normal contact law of this module (the module docstring has its properties):
    ``f_n = sigmoid(delta / w) w_f softplus((k delta + c delta_dot) / w_f)``, ``w_f = k w``.

    Shared by every penalty contact of sdjax (spheres here, wheel rims in :mod:`sdjax.wheels`).

    Arguments:
        penetration: ``delta`` (any shape), m, positive when touching.
        penetration_rate: ``d delta/dt``, m/s (same shape).
        stiffness, damping, smoothing: ``k`` (N/m), ``c`` (N s/m), ``w`` (m), broadcast against
            ``penetration``.

    Returns:
        ``f_n >= 0`` (N), the shape of ``penetration``.
    """
    force_width = stiffness * smoothing
    raw = stiffness * penetration + damping * penetration_rate
    return jax.nn.sigmoid(penetration / smoothing) * force_width * jax.nn.softplus(raw / force_width)


def _contact_state(
    model: Model, state: State, spheres: ContactSpheres, terrain: Terrain, parameters: ContactParameters
) -> ContactDiagnostics:
    dtype = state.q.dtype
    m = spheres.num_contacts
    stiffness, damping, friction, eps, width = parameters.per_contact(m, dtype)
    motion = kinematic_pass(model, state)
    frames, twists = motion.frames, motion.twists
    bodies = jnp.asarray(spheres.bodies, dtype=jnp.int32)
    rotation = frames.rotation[bodies]
    centre = frames.centroid[bodies] + einsum("mij,mj->mi", rotation, spheres.offsets.astype(dtype))  # from r0
    radius = spheres.radii.astype(dtype)
    distance, normal = terrain.query(centre + state.base_position)
    penetration = radius - distance
    point = centre - radius[:, None] * normal  # from r0
    velocity = point_velocity(twists[bodies], point)
    normal_speed = jnp.sum(velocity * normal, axis=-1)
    rate = -normal_speed
    normal_force = penalty_normal_force(penetration, rate, stiffness, damping, width)
    slip = velocity - normal_speed[:, None] * normal
    slip_norm = jnp.sqrt(jnp.sum(slip**2, axis=-1) + eps**2)
    friction_force = -(friction * normal_force / slip_norm)[:, None] * slip
    force = normal_force[:, None] * normal + friction_force
    return ContactDiagnostics(
        penetration=penetration,
        penetration_rate=rate,
        normal_force=normal_force,
        friction_force=friction_force,
        force=force,
        slip_velocity=slip,
        point=point + state.base_position,
        normal=normal,
    )


def _check_terrain(terrain: Any) -> None:
    check_type("terrain", terrain, (Plane, HeightField), "a sdjax.contact.Plane or HeightField")


@eqx.filter_jit
def contact_diagnostics(
    model: Model, state: State, spheres: ContactSpheres, terrain: Terrain, parameters: ContactParameters
) -> ContactDiagnostics:
    """Penetration, forces and slip of every contact at one state (for plots and checks).

    Arguments:
        model: the system.
        state: its state (``jax.vmap`` over a trajectory's states for time series).
        spheres: the contact spheres/points.
        terrain: :class:`Plane` or :class:`HeightField`.
        parameters: :class:`ContactParameters`.

    Returns:
        :class:`ContactDiagnostics`.
    """
    check_state(model, state)
    spheres.check(model)
    _check_terrain(terrain)
    return _contact_state(model, state, spheres, terrain, parameters)


class ContactEnvironment(eqx.Module):
    """Contact loads as an environment function ``(t, state) -> Controls`` for
    :func:`sdjax.rollout` (a pytree: stiffness, geometry and terrain are traced leaves).

    The contact forces act on the bodies at the contact points (through
    :func:`sdjax.point_loads`); the terrain is fixed in the inertial frame.
    """

    model: Model
    spheres: ContactSpheres
    terrain: Terrain
    parameters: ContactParameters

    def __call__(self, t: Array, state: State) -> Controls:
        contacts = _contact_state(self.model, state, self.spheres, self.terrain, self.parameters)
        return point_loads(self.model, state, self.spheres.bodies, contacts.point, contacts.force)


def contact_environment(
    model: Model, spheres: ContactSpheres, terrain: Terrain, parameters: ContactParameters
) -> ContactEnvironment:
    """Contact with the terrain as ``environment=`` for :func:`sdjax.rollout`.

    Arguments:
        model: the system (its body indices are checked against ``spheres``).
        spheres: :class:`ContactSpheres`.
        terrain: :class:`Plane` or :class:`HeightField`.
        parameters: :class:`ContactParameters` (scalars or one value per contact).

    Returns:
        :class:`ContactEnvironment`, callable as ``env(t, state) -> Controls``.
    """
    spheres.check(model)
    _check_terrain(terrain)
    parameters.per_contact(spheres.num_contacts, parameters.stiffness.dtype)
    return ContactEnvironment(model, spheres, terrain, parameters)


# ------------------------------------------------------------------------------------------
# Closed forms and step-size guidance.


def damping_for_ratio(damping_ratio: Any, stiffness: Any, mass: Any) -> Array:
    """Damping ``c = 2 zeta sqrt(k m)`` (N s/m) giving the ratio ``zeta`` on a mass ``m`` (kg)."""
    return 2.0 * jnp.asarray(damping_ratio) * jnp.sqrt(jnp.asarray(stiffness) * jnp.asarray(mass))


def restitution_linear(damping_ratio: Any) -> Array:
    """Restitution ``e = exp(-zeta pi / sqrt(1 - zeta^2))`` of a linear spring-damper that may
    pull (contact ends when the penetration returns to zero); ``0 <= zeta < 1``."""
    zeta = jnp.asarray(damping_ratio)
    return jnp.exp(-zeta * jnp.pi / jnp.sqrt(1.0 - zeta**2))


def restitution_no_adhesion(damping_ratio: Any) -> Array:
    """Restitution of the linear spring-damper clipped at zero force (no adhesion), ``0 <= zeta < 1``.

    With ``w_d = sqrt(1 - zeta^2)`` (time in units of ``1 / w_n``) the penetration is
    ``delta = v0 e^{-zeta t} sin(w_d t) / w_d``; the force ``k delta + c delta_dot`` vanishes
    at ``w_d t* = pi - atan2(2 zeta w_d, 1 - 2 zeta^2)`` and the body leaves with
    ``e = e^{-zeta t*} (zeta sin(w_d t*) / w_d - cos(w_d t*))``.
    """
    zeta = jnp.asarray(damping_ratio)
    wd = jnp.sqrt(1.0 - zeta**2)
    phase = jnp.pi - jnp.arctan2(2.0 * zeta * wd, 1.0 - 2.0 * zeta**2)
    return jnp.exp(-zeta * phase / wd) * (zeta * jnp.sin(phase) / wd - jnp.cos(phase))


def _rk4_amplification(z: np.ndarray) -> np.ndarray:
    return np.abs(1 + z + z**2 / 2 + z**3 / 6 + z**4 / 24)


def _rk4_ray_limit(direction: complex) -> float:
    """Largest ``s`` with ``|R(s u)| <= 1`` on ``[0, s]`` for the unit direction ``u``."""
    grid = np.linspace(1e-6, 4.0, 4001)
    unstable = np.flatnonzero(_rk4_amplification(grid * direction) > 1 + 1e-12)
    if unstable.size == 0:
        return float("inf")
    lo, hi = (grid[unstable[0] - 1] if unstable[0] > 0 else 0.0), grid[unstable[0]]
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _rk4_amplification(np.array(mid * direction)) <= 1 + 1e-12 else (lo, mid)
    return float(lo)


def rk4_stability_limit(damping_ratio: Any = 0.0) -> float:
    """Largest ``w_n dt`` for which classical RK4 is stable on ``x'' + 2 zeta w_n x' + w_n^2 x = 0``.

    The eigenvalues ``w_n (-zeta +- i sqrt(1 - zeta^2))`` (``zeta < 1``) or
    ``w_n (-zeta +- sqrt(zeta^2 - 1))`` must stay in RK4's stability region
    ``|1 + z + z^2/2 + z^3/6 + z^4/24| <= 1``: ``2 sqrt(2) ~ 2.83`` at ``zeta = 0``, about 2.79
    for a real eigenvalue. Plain NumPy (a planning helper, not traced).
    """
    zeta = check_scalar("rk4_stability_limit: damping_ratio", damping_ratio, sign="non-negative")
    if zeta < 1:
        return _rk4_ray_limit(complex(-zeta, np.sqrt(1 - zeta**2)))
    fastest = zeta + np.sqrt(zeta**2 - 1)  # |eigenvalue| / w_n of the faster real mode
    return _rk4_ray_limit(complex(-1.0, 0.0)) / fastest


def stable_time_step(
    model: Model,
    state: State,
    spheres: ContactSpheres,
    terrain: Terrain,
    parameters: ContactParameters,
    *,
    normal_force: Any = None,
    safety: float = 0.8,
) -> float:
    """A safe RK4 step for contact at ``state``: ``safety`` times the stability limit of the
    linearised contact dynamics.

    Every contact is assumed touching (the conservative case). With ``G = J H^-1 J^T``
    ``(3m, 3m)`` (``J`` the linear Jacobians of the contact points, ``H`` the inertia
    matrix: ``G`` holds the inverse effective masses), contact stiffness
    ``K = diag(k_i n_i n_i^T)`` and damping ``C = diag(c_i n_i n_i^T + (mu_i f_n,i / eps_i)(E - n_i n_i^T))``
    (the regularised friction is viscous below ``eps``, with the normal forces ``f_n`` at
    ``state`` unless ``normal_force`` is given),
    the contact modes solve ``x'' = -G (K x + C x')``; each eigenvalue ``lambda`` of
    ``[[0, E], [-G K, -G C]]`` must satisfy ``|R(dt lambda)| <= 1`` (RK4's stability
    function). For one contact on a body of mass ``m`` this is ``dt <= rk4_stability_limit(zeta) / w_n``
    with ``w_n = sqrt(k / m)``.

    Arguments:
        model, state: the system and a representative state (concrete, not traced).
        spheres, terrain, parameters: as for :func:`contact_environment`.
        normal_force: scalar or ``(m,)`` normal forces (N) that set the friction's viscous
            rate, e.g. the peak of an impact (about ``m v0 w_n``); default: those at ``state``.
            Sticking contacts need ``dt`` below about ``2.8 eps m_eff / (mu f_n)``; sliding ones
            (``|v_t| >> eps``) are much less stiff, so this bound is conservative for them.
        safety: fraction of the limit returned, in (0, 1].

    Returns:
        Step in s (a Python float); ``inf`` if nothing limits it.
    """
    if not 0 < safety <= 1:
        raise ValueError(f"stable_time_step: safety must be in (0, 1], got {safety!r}")
    check_state(model, state)
    spheres.check(model)
    _check_terrain(terrain)
    dtype = state.q.dtype
    m = spheres.num_contacts
    contacts = contact_diagnostics(model, state, spheres, terrain, parameters)
    stiffness, damping, friction, eps, _ = (np.asarray(x, np.float64) for x in parameters.per_contact(m, dtype))
    axes = kinematic_pass(model, state).axes
    linear = jacobians_at_points(model, axes, np.asarray(spheres.bodies), contacts.point - state.base_position)[
        :, :3, :
    ]
    jac = np.asarray(free_coordinates(model, linear, -1), np.float64).reshape(
        3 * m, -1
    )  # free coordinates of the base mode
    h = np.asarray(inertia_matrix(model, state), np.float64)
    g = jac @ np.linalg.solve(h, jac.T)
    normal = np.asarray(contacts.normal, np.float64)
    if normal_force is None:
        fn = np.asarray(contacts.normal_force, np.float64)
    else:
        fn = np.broadcast_to(np.asarray(normal_force, np.float64), (m,))
        if np.any(fn < 0) or not np.all(np.isfinite(fn)):
            raise ValueError(f"stable_time_step: normal_force must be finite and non-negative, got {fn.tolist()}")
    k_blocks = np.zeros((3 * m, 3 * m))
    c_blocks = np.zeros((3 * m, 3 * m))
    for i in range(m):
        nn = np.outer(normal[i], normal[i])
        block = slice(3 * i, 3 * i + 3)
        k_blocks[block, block] = stiffness[i] * nn
        c_blocks[block, block] = damping[i] * nn + friction[i] * fn[i] / eps[i] * (np.eye(3) - nn)
    system = np.block([[np.zeros((3 * m, 3 * m)), np.eye(3 * m)], [-g @ k_blocks, -g @ c_blocks]])
    limit = float("inf")
    for lam in np.linalg.eigvals(system):
        size = abs(lam)
        if size < 1e-9 * max(1.0, float(np.max(np.abs(system)))):
            continue  # rigid-body (free) directions
        limit = min(limit, _rk4_ray_limit(lam / size) / size)
    return safety * limit


__all__ = [
    "ContactDiagnostics",
    "ContactEnvironment",
    "ContactParameters",
    "ContactSpheres",
    "HeightField",
    "INTERPOLATIONS",
    "Plane",
    "contact_diagnostics",
    "contact_environment",
    "damping_for_ratio",
    "inclined_plane",
    "penalty_normal_force",
    "restitution_linear",
    "restitution_no_adhesion",
    "rk4_stability_limit",
    "stable_time_step",
]
