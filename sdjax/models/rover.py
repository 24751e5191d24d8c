"""A four-legged planetary rover (walker) with visco-elastic hip joints and spherical feet.

Seed 000 section 3.8 lists planetary rovers and walking robots among the applications of
contact models; :func:`rover` is a small such system for :mod:`sdjax.contact`
(``ContactSpheres.at_end_points(model, radius)`` puts a foot sphere at each leg tip).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.models._solids import cylinder_inertia
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model

__all__ = ["rover"]

#: Surface gravity of Mars, m/s^2.
MARS_GRAVITY = 3.711


def rover(
    *,
    body_mass: float = 40.0,
    body_size: tuple[float, float, float] = (0.8, 0.5, 0.2),
    leg_mass: float = 2.0,
    leg_length: float = 0.35,
    hip_stiffness: float = 400.0,
    hip_damping: float = 20.0,
    gravity: float = MARS_GRAVITY,
    dtype: Any = None,
) -> Model:
    """A rover body (box ``body_size`` m, ``body_mass`` kg, centroid at the origin) on four legs.

    Each leg hangs straight down from a bottom corner ``(+-a, +-b, -c)`` (half sizes) on a
    revolute hip joint about the body ``y`` axis (pitch), with passive stiffness
    ``hip_stiffness`` (N m/rad) and damping ``hip_damping`` (N m s/rad): a compliant suspension.
    A leg is a rod of ``leg_mass`` kg and ``leg_length`` m whose lower tip is an end point (the
    foot centre). Gravity ``-gravity e_z`` (m/s^2, Mars by default). In the reference pose
    (``q = 0``) the feet lie ``c + leg_length`` below the body centroid.
    """
    a, b, c = (0.5 * s for s in body_size)
    inertia = (
        body_mass
        / 12.0
        * np.diag(
            [
                body_size[1] ** 2 + body_size[2] ** 2,
                body_size[0] ** 2 + body_size[2] ** 2,
                body_size[0] ** 2 + body_size[1] ** 2,
            ]
        )
    )
    hips = np.array([[a, b, -c], [-a, b, -c], [-a, -b, -c], [a, -b, -c]])
    down = np.array([0.0, 0.0, -1.0])
    radius = 0.025
    leg_inertia = cylinder_inertia(leg_mass, radius, leg_length, 2)
    return model_from_reference_pose(
        parent=(0, 0, 0, 0),
        joint_type="RRRR",
        joint_axis=np.tile([0.0, 1.0, 0.0], (4, 1)),
        joint_position=hips,
        link_centroid=hips + 0.5 * leg_length * down,
        link_mass=np.full(4, leg_mass),
        link_inertia=np.tile(leg_inertia, (4, 1, 1)),
        base_mass=body_mass,
        base_inertia=inertia,
        end_point_link=(1, 2, 3, 4),
        end_point_position=hips + leg_length * down,
        joint_stiffness=np.full(4, hip_stiffness),
        joint_damping=np.full(4, hip_damping),
        gravity=np.array([0.0, 0.0, -gravity]),
        link_names=("leg_front_left", "leg_rear_left", "leg_rear_right", "leg_front_right"),
        name="rover",
        dtype=dtype,
    )
