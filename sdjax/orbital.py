"""Orbital environment: gravity gradient and Clohessy-Wiltshire (Hill) relative motion.

Loads here are *environment* functions ``(t, state) -> Controls`` for
``sdjax.rollout(..., environment=...)``: they are evaluated at every integrator stage and
reach every body through :func:`sdjax.point_loads` (force at each body centroid plus a
couple). They are :mod:`equinox` modules, so their parameters (the mean motion) are pytree
leaves: ``jax.grad`` reaches them and ``rollout`` compiles once per structure. Combine them
with :func:`combine_environments` (or ``+``).

## Frames

The reference is a circular orbit of radius ``R0`` and mean motion ``n = sqrt(mu / R0^3)``. The
simulation's "inertial" frame is *centred on the reference orbit point* ``O`` (which falls
freely, so uniform gravity cancels against the frame's acceleration and only the tidal part
remains). Two orientations of that frame are offered:

- ``frame="hill"`` (LVLH / Hill frame, the default): ``x`` radial (away from the Earth),
  ``y`` along-track (direction of orbital motion), ``z`` orbit normal (along the orbital
  angular momentum). The frame rotates with ``Omega = n e_z``. *Everything* in the state is
  then relative to this rotating frame: positions and velocities are Hill-frame coordinates
  and their rates, the base quaternion is the attitude relative to LVLH (an Earth-pointing
  satellite is at rest), and ``w0`` is the angular velocity relative to LVLH.
- ``frame="nonrotating"``: axes fixed in inertial space, with the orbit in the ``x-y`` plane
  (orbit normal ``z``); the radial direction turns, ``R_hat(t) = (cos(n t + phase),
  sin(n t + phase), 0)``. Here the equations are Newton's and Euler's equations without
  fictitious terms.

## Loads

*Tidal (gravity-gradient) field.* To first order in ``|r| / R0`` the gravity at ``O + r``
minus that at ``O`` is ``g_t(r) = n^2 (3 R_hat R_hat^T - E) r``. A linear field acting on a rigid
body of mass ``m``, centroid ``c`` and (inertial-frame) inertia ``I`` gives exactly

    F = m n^2 (3 R_hat R_hat^T - E) (c - r_ref),        N = 3 n^2 R_hat x (I R_hat)

(the torque about the centroid: ``int s x T s dm = -n^2 eps : (I T)`` with ``s`` the offset from
the centroid and ``T`` symmetric; only the ``3 R_hat R_hat^T`` part contributes). ``r_ref`` is
``O`` (``about="origin"``: the system's centre of mass then moves relative to the reference
orbit) or the system's current centre of mass (``about="com"``: the forces sum to zero; the
system is taken to be *on* the reference orbit and only internal tidal stretching acts).
:class:`GravityGradient` applies ``F`` (optional, ``tidal_force=True``) and ``N``
(``torque=True``) to every body, base and links.

*Fictitious loads of the rotating frame* (:class:`RotatingFrame`, constant ``Omega``; the
Euler term ``-dOmega/dt x r`` vanishes for a circular orbit). On a mass element ``dm`` at
``r`` moving with the frame-relative velocity ``v``: Coriolis ``-2 dm Omega x v`` and
centrifugal ``-dm Omega x (Omega x r)``. Integrated over a rigid body with centroid velocity
``v_c`` and frame-relative angular velocity ``w`` (``v = v_c + w x s``,
``J = int s s^T dm = tr(I)/2 E - I``):

    F_cor = -2 m Omega x v_c,        N_cor = 2 w x (J Omega) = tr(I) w x Omega - 2 w x (I Omega),
    F_cf  = -m Omega x (Omega x c),  N_cf  = -Omega x (I Omega).

These are exactly the terms that turn Euler's equation ``I dw/dt + w x I w = N`` written with
the frame-relative ``w`` into the true one for the absolute rate ``w + Omega``:
``N_cor + N_cf = -I (Omega x w) - w x I Omega - Omega x I w - Omega x I Omega`` (identity
``tr(I) (a x b) = I (a x b) + (I a) x b + a x (I b)`` for symmetric ``I``), so the relative
attitude of every body is integrated exactly, not only the centre of mass.

*Clohessy-Wiltshire.* :func:`clohessy_wiltshire` = tidal field (force and torque, ``about="origin"``)
+ fictitious loads of the Hill frame. Summed over the system (the field is linear, so the sum
is exact for any articulated system, whatever its joints do), the centre of mass obeys

    x'' = 3 n^2 x + 2 n y',     y'' = -2 n x',     z'' = -n^2 z

(tidal ``n^2 (2x, -y, -z)`` + centrifugal ``n^2 (x, y, 0)`` + Coriolis ``2n (y', -x', 0)``).
The attitude obeys the gravity-gradient libration equations; e.g. a rigid body with principal
axes along Hill axes, pitched by a small ``theta`` about the orbit normal ``z``, follows
``I_zz theta'' = -3 n^2 (I_yy - I_xx) theta`` (only the gravity-gradient torque
``3 n^2 (I_xx - I_yy) sin(theta) cos(theta)`` about ``z`` acts; the fictitious torques vanish for
rotation about ``Omega``): stable, with frequency ``n sqrt(3 (I_yy - I_xx) / I_zz)``, when the
minimum-inertia axis points radially and ``I_yy > I_xx``; unstable (growth rate
``n sqrt(3 (I_xx - I_yy) / I_zz)``) otherwise.

*Energy.* In the Hill frame Coriolis loads do no work, so the Jacobi integral
``T_rel + V + 1/2 sum K q^2`` is conserved, with ``V`` the tidal plus centrifugal potential
(:meth:`GravityGradient.potential_energy`, :meth:`RotatingFrame.potential_energy`):

    V_tidal = sum_i [-1/2 m_i n^2 c_i^T (3 R_hat R_hat^T - E) c_i + 3/2 n^2 R_hat^T I_i R_hat - 1/2 n^2 tr I_i],
    V_cf    = sum_i [-1/2 m_i |Omega x c_i|^2 - 1/2 Omega^T I_i Omega].

Units SI; the mean motion is in rad/s.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import cross3, einsum, matmul
from sdjax.dynamics import Controls, point_loads
from sdjax.kinematics import body_masses, link_velocities, relative_frames, world_inertias
from sdjax.model import Model
from sdjax._checks import check_callable, check_choice, float_array, is_traced
from sdjax.state import State, check_state

__all__ = [
    "EnvironmentSum",
    "GravityGradient",
    "RotatingFrame",
    "body_loads",
    "clohessy_wiltshire",
    "clohessy_wiltshire_solution",
    "combine_environments",
    "gravity_gradient_wrenches",
    "mean_motion_from_radius",
    "rotating_frame_wrenches",
]

FRAMES = ("hill", "nonrotating")
ABOUT = ("origin", "com")


def _check_mean_motion(owner: str, mean_motion: Any) -> None:
    float_array(f"{owner}: mean_motion", mean_motion, shape=(), sign="positive")


def mean_motion_from_radius(radius: Any, gravitational_parameter: Any = 3.986004418e14) -> Array:
    """Mean motion ``n = sqrt(mu / R0^3)`` of a circular orbit of radius ``R0`` (m), rad/s
    (default ``mu``: the Earth's, m^3/s^2)."""
    return jnp.sqrt(jnp.asarray(gravitational_parameter) / jnp.asarray(radius) ** 3)


def body_loads(model: Model, state: State, forces: Array, torques: Array) -> Controls:
    """Generalized forces of one force at each body centroid and one couple per body.

    Arguments:
        forces: ``(n + 1, 3)`` forces at the centroids of the base and links, inertial frame, N.
        torques: ``(n + 1, 3)`` couples on the bodies, inertial frame, N m.

    Returns:
        :class:`~sdjax.Controls` (from :func:`sdjax.point_loads`).
    """
    frames = relative_frames(model, state.base_rotation, state.q)
    bodies = tuple(range(model.num_bodies))
    return point_loads(model, state, bodies, frames.centroid + state.base_position, forces, torques)


def _tidal_tensor(radial: Array) -> Array:
    return 3.0 * jnp.outer(radial, radial) - jnp.eye(3, dtype=radial.dtype)


def gravity_gradient_wrenches(
    model: Model, state: State, mean_motion: Any, radial: Any, *, about: str = "origin"
) -> tuple[Array, Array]:
    """Tidal force at every body centroid and gravity-gradient torque about it.

    ``F_i = m_i n^2 (3 R R^T - E)(c_i - r_ref)`` and ``N_i = 3 n^2 R x (I_i R)`` (module docstring).

    Arguments:
        model, state: the system (positions relative to the reference orbit point ``O``).
        mean_motion: ``n``, rad/s.
        radial: ``(3,)`` unit vector from the Earth's centre to ``O``, simulation frame.
        about: ``"origin"`` (``r_ref = O``) or ``"com"`` (``r_ref`` = the system's centre of mass).

    Returns:
        ``(forces (n + 1, 3), torques (n + 1, 3))``, inertial frame, N and N m.
    """
    check_state(model, state)
    check_choice("gravity_gradient_wrenches: about", about, ABOUT)
    dtype = state.q.dtype
    n2 = jnp.asarray(mean_motion, dtype) ** 2
    radial = jnp.asarray(radial, dtype)
    frames = relative_frames(model, state.base_rotation, state.q)
    masses = body_masses(model)
    centroids = frames.centroid + state.base_position
    if about == "com":
        centroids = centroids - matmul(masses, centroids) / jnp.sum(masses)
    forces = n2 * masses[:, None] * matmul(centroids, _tidal_tensor(radial))  # T symmetric
    inertia_radial = einsum("bij,j->bi", world_inertias(model, frames), radial)
    torques = 3.0 * n2 * cross3(radial, inertia_radial)
    return forces, torques


def rotating_frame_wrenches(model: Model, state: State, angular_velocity: Any) -> tuple[Array, Array]:
    """Coriolis plus centrifugal force at every body centroid and couple about it.

    For a frame rotating at the constant ``Omega`` about the simulation origin (module
    docstring): ``F = -2 m Omega x v_c - m Omega x (Omega x c)`` and
    ``N = tr(I) w x Omega - 2 w x (I Omega) - Omega x (I Omega)``.

    Arguments:
        model, state: the system; velocities relative to the rotating frame.
        angular_velocity: ``(3,)`` ``Omega``, rad/s, simulation frame.

    Returns:
        ``(forces (n + 1, 3), torques (n + 1, 3))``, N and N m.
    """
    check_state(model, state)
    dtype = state.q.dtype
    omega = jnp.asarray(angular_velocity, dtype)
    frames = relative_frames(model, state.base_rotation, state.q)
    masses = body_masses(model)[:, None]
    centroids = frames.centroid + state.base_position
    velocity, spin = link_velocities(model, state)
    inertia = world_inertias(model, frames)
    omega_b = jnp.broadcast_to(omega, centroids.shape)
    forces = -2.0 * masses * cross3(omega_b, velocity) - masses * cross3(omega_b, cross3(omega_b, centroids))
    inertia_omega = einsum("bij,j->bi", inertia, omega)
    trace = jnp.trace(inertia, axis1=-2, axis2=-1)[:, None]
    torques = trace * cross3(spin, omega_b) - 2.0 * cross3(spin, inertia_omega) - cross3(omega_b, inertia_omega)
    return forces, torques


class GravityGradient(eqx.Module):
    """Gravity-gradient torque (and optionally tidal force) on every body, as an environment.

    Call it as ``(t, state) -> Controls``; pass it to ``sdjax.rollout(environment=...)``.

    Attributes:
        model: the system the loads act on.
        mean_motion: ``()`` orbital rate ``n`` of the reference orbit, rad/s.
        phase: ``()`` orbital angle at ``t = 0`` (``frame="nonrotating"`` only), rad.
        frame: static ``"hill"`` (radial = ``e_x``, fixed) or ``"nonrotating"`` (radial
            ``(cos(n t + phase), sin(n t + phase), 0)``).
        tidal_force: static; apply the tidal forces (else only torques).
        torque: static; apply the gravity-gradient torques.
        about: static ``"origin"`` or ``"com"`` (reference point of the tidal forces).
    """

    model: Model
    mean_motion: Array
    phase: Array
    frame: str = eqx.field(static=True)
    tidal_force: bool = eqx.field(static=True)
    torque: bool = eqx.field(static=True)
    about: str = eqx.field(static=True)

    def __init__(
        self,
        model: Model,
        mean_motion: Any,
        *,
        frame: str = "hill",
        tidal_force: bool = True,
        torque: bool = True,
        about: str = "origin",
        phase: Any = 0.0,
    ):
        _check_mean_motion("GravityGradient", mean_motion)
        self.model = model
        self.mean_motion = jnp.asarray(mean_motion, model.dtype)
        self.phase = jnp.asarray(phase, model.dtype)
        self.frame = check_choice("GravityGradient: frame", frame, FRAMES)
        self.about = check_choice("GravityGradient: about", about, ABOUT)
        self.tidal_force = bool(tidal_force)
        self.torque = bool(torque)

    def radial(self, t: Any) -> Array:
        """``(3,)`` unit radial direction ``R_hat`` at time ``t``, simulation frame."""
        dtype = self.model.dtype
        if self.frame == "hill":
            return jnp.asarray([1.0, 0.0, 0.0], dtype)
        angle = self.mean_motion * jnp.asarray(t, dtype) + self.phase
        return jnp.stack([jnp.cos(angle), jnp.sin(angle), jnp.zeros_like(angle)])

    def wrenches(self, t: Any, state: State) -> tuple[Array, Array]:
        """Per-body ``(forces, torques)``, ``(n + 1, 3)`` each (switched terms zeroed)."""
        forces, torques = gravity_gradient_wrenches(
            self.model, state, self.mean_motion, self.radial(t), about=self.about
        )
        if not self.tidal_force:
            forces = jnp.zeros_like(forces)
        if not self.torque:
            torques = jnp.zeros_like(torques)
        return forces, torques

    def __call__(self, t: Any, state: State) -> Controls:
        forces, torques = self.wrenches(t, state)
        return body_loads(self.model, state, forces, torques)

    def potential_energy(self, t: Any, state: State) -> Array:
        """Tidal potential of the applied terms, J (module docstring; ``-1/2 n^2 tr I`` kept)."""
        model = self.model
        dtype = state.q.dtype
        n2 = self.mean_motion**2
        radial = self.radial(t)
        frames = relative_frames(model, state.base_rotation, state.q)
        masses = body_masses(model)
        centroids = frames.centroid + state.base_position
        if self.about == "com":
            centroids = centroids - matmul(masses, centroids) / jnp.sum(masses)
        energy = jnp.zeros((), dtype)
        if self.tidal_force:
            energy = energy - 0.5 * n2 * einsum("b,bi,ij,bj->", masses, centroids, _tidal_tensor(radial), centroids)
        if self.torque:
            inertia = world_inertias(model, frames)
            energy = energy + n2 * jnp.sum(
                1.5 * einsum("i,bij,j->b", radial, inertia, radial) - 0.5 * jnp.trace(inertia, axis1=-2, axis2=-1)
            )
        return energy


class RotatingFrame(eqx.Module):
    """Coriolis and centrifugal loads (forces and couples) of a frame rotating at constant
    ``Omega`` about the simulation origin, on every body, as an environment.

    Attributes:
        model: the system.
        angular_velocity: ``(3,)`` ``Omega`` of the simulation frame relative to inertial
            space, rad/s (the Hill frame: ``(0, 0, n)``).
    """

    model: Model
    angular_velocity: Array

    def __init__(self, model: Model, angular_velocity: Any):
        omega = jnp.asarray(angular_velocity)
        if omega.shape != (3,):
            raise ValueError(f"RotatingFrame: angular_velocity expected shape (3,), got {omega.shape}")
        if not is_traced(angular_velocity) and not np.all(np.isfinite(np.asarray(angular_velocity, np.float64))):
            raise ValueError(f"RotatingFrame: angular_velocity must be finite, got {angular_velocity!r}")
        self.model = model
        self.angular_velocity = omega.astype(model.dtype)

    def wrenches(self, t: Any, state: State) -> tuple[Array, Array]:
        """Per-body ``(forces, torques)``, ``(n + 1, 3)`` each."""
        del t
        return rotating_frame_wrenches(self.model, state, self.angular_velocity)

    def __call__(self, t: Any, state: State) -> Controls:
        forces, torques = self.wrenches(t, state)
        return body_loads(self.model, state, forces, torques)

    def potential_energy(self, t: Any, state: State) -> Array:
        """Centrifugal potential ``sum -1/2 m |Omega x c|^2 - 1/2 Omega^T I Omega``, J."""
        del t
        model = self.model
        frames = relative_frames(model, state.base_rotation, state.q)
        centroids = frames.centroid + state.base_position
        omega = self.angular_velocity
        arm = cross3(jnp.broadcast_to(omega, centroids.shape), centroids)
        spin = einsum("i,bij,j->", omega, world_inertias(model, frames), omega)
        return -0.5 * (matmul(body_masses(model), jnp.sum(arm * arm, axis=-1)) + spin)


class EnvironmentSum(eqx.Module):
    """The sum of several environment functions ``(t, state) -> Controls``."""

    terms: tuple

    def __call__(self, t: Any, state: State) -> Controls:
        models = [getattr(term, "model", None) for term in self.terms]
        if all(hasattr(term, "wrenches") for term in self.terms) and all(
            # (jaxlib ships no type stub for PyTreeDef, so mypy cannot see its __eq__.)
            isinstance(m, Model) and jax.tree.structure(m) == jax.tree.structure(models[0])  # type: ignore[operator]
            for m in models
        ):
            # Per-body wrenches of one system add up; map them to generalized forces once.
            wrenches = [term.wrenches(t, state) for term in self.terms]
            forces = sum((w[0] for w in wrenches[1:]), wrenches[0][0])
            torques = sum((w[1] for w in wrenches[1:]), wrenches[0][1])
            system = models[0]
            assert isinstance(system, Model)  # (every term's model is one: checked above)
            return body_loads(system, state, forces, torques)
        total: Controls | None = None
        for term in self.terms:
            loads = term(t, state)
            total = loads if total is None else jax.tree.map(jnp.add, total, loads)
        if total is None:
            raise ValueError("EnvironmentSum: expected at least one environment function")
        return total

    def potential_energy(self, t: Any, state: State) -> Array:
        """Sum of the terms' potentials (terms without one, e.g. Coriolis, add nothing)."""
        energies = [term.potential_energy(t, state) for term in self.terms if hasattr(term, "potential_energy")]
        return sum(energies[1:], energies[0]) if energies else jnp.zeros((), state.q.dtype)


def combine_environments(*terms: Any) -> EnvironmentSum:
    """Sum environment functions ``(t, state) -> Controls`` (orbital loads, contact, springs)."""
    if not terms:
        raise ValueError("combine_environments: expected at least one environment function")
    for k, term in enumerate(terms):
        check_callable(f"combine_environments: term {k}", term, "(t, state) -> Controls")
    flat: list[Any] = []
    for term in terms:
        flat.extend(term.terms if isinstance(term, EnvironmentSum) else (term,))
    return EnvironmentSum(tuple(flat))


def clohessy_wiltshire(model: Model, mean_motion: Any, *, gravity_gradient_torque: bool = True) -> EnvironmentSum:
    """Relative orbital motion in the Hill frame (x radial, y along-track, z orbit normal).

    Tidal forces and gravity-gradient torques on every body (:class:`GravityGradient`,
    ``frame="hill"``, ``about="origin"``) plus the Coriolis and centrifugal loads of the frame
    rotating at ``(0, 0, n)`` (:class:`RotatingFrame`). The system's centre of mass obeys the
    Clohessy-Wiltshire equations exactly (module docstring); each body's attitude is
    integrated relative to the Hill frame.

    Arguments:
        model: the system.
        mean_motion: ``n > 0``, rad/s.
        gravity_gradient_torque: keep the gravity-gradient couples (True); False leaves only
            the tidal forces at the centroids (a point-mass approximation of every body).

    Returns:
        An :class:`EnvironmentSum` (callable ``(t, state) -> Controls``, with ``potential_energy``).
    """
    _check_mean_motion("clohessy_wiltshire", mean_motion)
    n = jnp.asarray(mean_motion, model.dtype)
    return combine_environments(
        GravityGradient(model, n, frame="hill", torque=gravity_gradient_torque),
        RotatingFrame(model, jnp.stack([jnp.zeros_like(n), jnp.zeros_like(n), n])),
    )


def clohessy_wiltshire_solution(mean_motion: Any, position: Any, velocity: Any, t: Any) -> tuple[Array, Array]:
    """Closed-form CW solution from ``(position, velocity)`` at ``t = 0`` (Hill frame).

    Arguments:
        mean_motion: ``n``, rad/s.
        position, velocity: ``(3,)`` initial relative position (m) and velocity (m/s).
        t: ``(...)`` times, s.

    Returns:
        ``(positions (..., 3), velocities (..., 3))``.
    """
    _check_mean_motion("clohessy_wiltshire_solution", mean_motion)
    n = jnp.asarray(mean_motion)
    x0, y0, z0 = (jnp.asarray(position)[k] for k in range(3))
    u0, v0, w0 = (jnp.asarray(velocity)[k] for k in range(3))
    t = jnp.asarray(t)
    s, c = jnp.sin(n * t), jnp.cos(n * t)
    x = (4 - 3 * c) * x0 + s / n * u0 + 2 / n * (1 - c) * v0
    y = 6 * (s - n * t) * x0 + y0 - 2 / n * (1 - c) * u0 + (4 * s - 3 * n * t) / n * v0
    z = z0 * c + w0 / n * s
    u = 3 * n * s * x0 + c * u0 + 2 * s * v0
    v = 6 * n * (c - 1) * x0 - 2 * s * u0 + (4 * c - 3) * v0
    w = -z0 * n * s + w0 * c
    return jnp.stack([x, y, z], axis=-1), jnp.stack([u, v, w], axis=-1)
