"""Linear and angular momentum, kinetic and potential energy of the whole system.

Computed directly from body velocities (not from ``H``), so the identities
``[P; L_r0] = H[:6] [v0; w0; qd]`` (the floating-base ``H``, whatever the base mode) and
``T = 1/2 nu^T H nu`` (``H`` and ``nu`` of the free coordinates) are independent checks. The
whole momentum is returned for every base mode; a planar base conserves only ``P_x, P_y,
L_z`` and a fixed base nothing (its mount carries the rest).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.algebra import PRECISION, cross3, einsum, matmul
from sdjax.kinematics import Frames, body_masses, kinematic_pass, relative_frames, world_inertias
from sdjax.model import Model
from sdjax.state import State, check_state

__all__ = ["angular_momentum", "center_of_mass_velocity", "kinetic_energy", "linear_momentum", "potential_energy"]


def _body_motion(model: Model, state: State) -> tuple[Frames, Array, Array]:
    """Checked state; body frames, ``(n + 1, 3)`` centroid velocities and angular velocities."""
    check_state(model, state)
    motion = kinematic_pass(model, state)
    return motion.frames, motion.centroid_velocities, motion.twists[:, :3]


@eqx.filter_jit
def linear_momentum(model: Model, state: State) -> Array:
    """Total linear momentum ``P = sum m_i v_i``, inertial frame, kg m/s; shape ``(3,)``."""
    _, velocity, _ = _body_motion(model, state)
    return matmul(body_masses(model), velocity)


@eqx.filter_jit
def angular_momentum(model: Model, state: State, about: str | Any = "origin") -> Array:
    """Total angular momentum ``sum I_i w_i + (r_i - c) x m_i v_i`` about a point ``c``.

    Arguments:
        model: the system.
        state: its state.
        about: ``"origin"`` (inertial origin, conserved in free flight), ``"com"`` (the
            system's centre of mass), ``"base"`` (the base centroid ``r0``) or a ``(3,)``
            inertial point, m.

    Returns:
        ``(3,)`` angular momentum, inertial frame, kg m^2/s.
    """
    frames, velocity, angular_velocity = _body_motion(model, state)
    masses = body_masses(model)
    spin = einsum("bij,bj->i", world_inertias(model, frames), angular_velocity)
    about_base = spin + jnp.sum(cross3(frames.centroid, masses[:, None] * velocity), axis=0)
    momentum = matmul(masses, velocity)
    if isinstance(about, str):
        if about == "base":
            return about_base
        if about == "origin":  # L_c = L_r0 + (r0 - c) x P with c = 0
            return about_base + cross3(state.base_position, momentum)
        if about == "com":
            com_from_base = matmul(masses, frames.centroid) / jnp.sum(masses)
            return about_base - cross3(com_from_base, momentum)
        raise ValueError(f"angular_momentum: about must be 'origin', 'com', 'base' or a (3,) point, got {about!r}")
    point = jnp.asarray(about)
    if point.shape != (3,):
        raise ValueError(f"angular_momentum: about point expected shape (3,), got {point.shape}")
    return about_base + cross3(state.base_position - point, momentum)


@eqx.filter_jit
def kinetic_energy(model: Model, state: State) -> Array:
    """Kinetic energy ``sum 1/2 m_i |v_i|^2 + 1/2 w_i . I_i w_i``, J; scalar."""
    frames, velocity, angular_velocity = _body_motion(model, state)
    spin = einsum("bi,bij,bj->", angular_velocity, world_inertias(model, frames), angular_velocity)
    return 0.5 * (matmul(body_masses(model), jnp.sum(velocity**2, axis=-1)) + spin)


@eqx.filter_jit
def potential_energy(model: Model, state: State) -> Array:
    """Gravitational potential energy ``-sum m_i g . r_i`` (zero at the inertial origin), J."""
    check_state(model, state)
    frames = relative_frames(model, state.base_rotation, state.q)
    masses = body_masses(model)
    return -jnp.dot(
        model.gravity, matmul(masses, frames.centroid) + jnp.sum(masses) * state.base_position, precision=PRECISION
    )


@eqx.filter_jit
def center_of_mass_velocity(model: Model, state: State) -> Array:
    """Velocity of the system's centre of mass, inertial frame, m/s; ``(3,)``."""
    return linear_momentum(model, state) / model.total_mass
