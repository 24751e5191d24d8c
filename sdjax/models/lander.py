"""A small-body lander: a box-shaped spacecraft bus on four telescopic, visco-elastic legs.

Seed 000 section 3.8 shows the touchdown of the MUSES-C asteroid sample-return spacecraft as a
contact application; :func:`lander` is a MUSES-C-sized system for such studies (the numbers are
representative, not the flight vehicle's). Use it with :mod:`sdjax.contact`:
``ContactSpheres.at_end_points(model, radius)`` puts a foot pad on each leg tip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.models._solids import cylinder_inertia
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model
from sdjax.models.builtin import rigid_body

__all__ = ["lander", "point_mass_probe"]

#: Gravity of a small asteroid (order of magnitude of 25143 Itokawa's, 1e-5..1e-4 m/s^2).
SMALL_BODY_GRAVITY = 1e-4


def lander(
    *,
    bus_mass: float = 480.0,
    bus_size: tuple[float, float, float] = (1.6, 1.6, 1.2),
    leg_mass: float = 5.0,
    leg_length: float = 0.8,
    leg_splay: float = 0.35,
    leg_stiffness: float = 2.0e4,
    leg_damping: float = 1.0e3,
    gravity: float = SMALL_BODY_GRAVITY,
    dtype: Any = None,
) -> Model:
    """A ~500 kg lander: a box bus (``bus_size`` m, centroid at the origin) with four legs.

    Each leg is a prismatic joint (a telescopic shock absorber) attached at a bottom corner
    of the bus, ``(+-a, +-b, -c)`` with ``(a, b, c)`` the half sizes, pointing down and outward
    (``leg_splay`` rad from the vertical, in the corner's diagonal plane); ``q > 0`` extends
    the leg. The leg's passive stiffness ``leg_stiffness`` (N/m) and damping ``leg_damping``
    (N s/m) are the landing-gear compliance. Each leg is a rod of ``leg_mass`` kg and length
    ``leg_length`` m whose tip is an end point (the foot-pad centre). Gravity is ``-gravity e_z``
    (m/s^2). Total mass ``bus_mass + 4 leg_mass``.

    Reference pose (``q = 0``): bus frame = inertial frame; the feet lie ``c + leg_length cos(leg_splay)``
    below the bus centroid.
    """
    a, b, c = (0.5 * s for s in bus_size)
    bus_inertia = (
        bus_mass
        / 12.0
        * np.diag(
            [
                bus_size[1] ** 2 + bus_size[2] ** 2,
                bus_size[0] ** 2 + bus_size[2] ** 2,
                bus_size[0] ** 2 + bus_size[1] ** 2,
            ]
        )
    )
    corners = np.array([[a, b, -c], [-a, b, -c], [-a, -b, -c], [a, -b, -c]])
    axes, centroids, tips, inertias = [], [], [], []
    for corner in corners:
        horizontal = corner[:2] / np.linalg.norm(corner[:2])
        axis = np.array([np.sin(leg_splay) * horizontal[0], np.sin(leg_splay) * horizontal[1], -np.cos(leg_splay)])
        axes.append(axis)
        centroids.append(corner + 0.5 * leg_length * axis)
        tips.append(corner + leg_length * axis)
        inertias.append(cylinder_inertia(leg_mass, 0.03, leg_length, axis))
    return model_from_reference_pose(
        parent=(0, 0, 0, 0),
        joint_type="PPPP",
        joint_axis=np.array(axes),
        joint_position=corners,
        link_centroid=np.array(centroids),
        link_mass=np.full(4, leg_mass),
        link_inertia=np.array(inertias),
        base_mass=bus_mass,
        base_inertia=bus_inertia,
        end_point_link=(1, 2, 3, 4),
        end_point_position=np.array(tips),
        joint_stiffness=np.full(4, leg_stiffness),
        joint_damping=np.full(4, leg_damping),
        gravity=np.array([0.0, 0.0, -gravity]),
        link_names=("leg_px_py", "leg_mx_py", "leg_mx_my", "leg_px_my"),
        name="lander",
        dtype=dtype,
    )


def point_mass_probe(
    mass: float = 500.0, inertia: float = 100.0, gravity: float = SMALL_BODY_GRAVITY, dtype: Any = None
) -> Model:
    """A single rigid body (base only, no joints): ``mass`` kg, isotropic ``inertia`` kg m^2,
    gravity ``-gravity e_z``. With one contact point under its centroid it is the single-contact
    oscillator of the restitution closed forms (:func:`sdjax.contact.restitution_no_adhesion`)."""
    return rigid_body(mass, inertia * np.eye(3), gravity=(0.0, 0.0, -gravity), name="probe", dtype=dtype)
