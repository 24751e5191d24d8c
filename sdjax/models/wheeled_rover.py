"""A wheeled planetary rover: a box chassis on four (or six) driven wheels.

Seed 001 (Fig 7d) shows "an articulated off-road vehicle as a potential design of a planetary
rover" simulated with a contact model for tyre mechanics; :func:`wheeled_rover` is a small such
vehicle for :mod:`sdjax.wheels` (the legged walker is :func:`sdjax.models.rover`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sdjax.models._solids import box_inertia, cylinder_inertia
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model
from sdjax.models.rover import MARS_GRAVITY
from sdjax.wheels import Wheels

__all__ = ["wheeled_rover"]

_AXLE_NAMES = {1: ("middle",), 2: ("front", "rear"), 3: ("front", "middle", "rear")}


def wheeled_rover(
    *,
    chassis_mass: float = 40.0,
    chassis_size: tuple[float, float, float] = (0.8, 0.5, 0.2),
    axles: Sequence[float] = (0.35, -0.35),
    track: float = 0.7,
    hub_height: float = -0.1,
    wheel_mass: float = 2.0,
    wheel_radius: float = 0.15,
    wheel_width: float = 0.1,
    gravity: float = MARS_GRAVITY,
    dtype: Any = None,
) -> tuple[Model, Wheels]:
    """A rigid chassis (floating base: a box ``chassis_size`` m of ``chassis_mass`` kg, centroid at
    the origin) with one pair of wheels per axle.

    Axle ``k`` carries a left wheel at ``(axles[k], +track / 2, hub_height)`` and a right wheel at
    ``(axles[k], -track / 2, hub_height)`` (chassis frame, m; ``x`` forward, ``z`` up). Each wheel
    is a revolute joint about the chassis ``+y`` axis (so ``qd > 0`` rolls every wheel forward,
    along ``+x``) whose link is a uniform disk of ``wheel_mass`` kg, radius ``wheel_radius`` and
    width ``wheel_width`` (centroid on the hub; inertia ``m r^2 / 2`` about the axle,
    ``m (3 r^2 + w^2) / 12`` across). Gravity ``-gravity e_z`` (m/s^2, Mars by default). Total
    mass ``chassis_mass + 2 len(axles) wheel_mass`` (48 kg by default); in the reference pose the
    wheels' lowest points lie ``wheel_radius - hub_height`` (0.25 m) below the chassis centroid.

    Wheels are numbered axle by axle, left then right (joints ``1..2 len(axles)``); no
    suspension (a rigid chassis on four wheels is statically indeterminate; the contact
    stiffness shares the load).

    Returns:
        ``(model, wheels)``: the :class:`~sdjax.Model` and its :class:`~sdjax.wheels.Wheels`
        (every joint a wheel), for :func:`sdjax.wheels.wheel_environment`.
    """
    axle_x = np.asarray(axles, np.float64).reshape(-1)
    if axle_x.size == 0:
        raise ValueError("wheeled_rover: axles must list at least one axle position")
    if not 0 < wheel_radius or not 0 < wheel_width or not 0 < track:
        raise ValueError(
            f"wheeled_rover: wheel_radius, wheel_width and track must be positive, got {wheel_radius}, {wheel_width}, {track}"
        )
    chassis_inertia = box_inertia(chassis_mass, chassis_size)
    hubs = np.array([[x, side * 0.5 * track, hub_height] for x in axle_x for side in (1.0, -1.0)])
    n = len(hubs)
    disk = cylinder_inertia(wheel_mass, wheel_radius, wheel_width, 1)
    names = _AXLE_NAMES.get(len(axle_x), tuple(f"axle{k + 1}" for k in range(len(axle_x))))
    model = model_from_reference_pose(
        parent=(0,) * n,
        joint_type="R" * n,
        joint_axis=np.tile([0.0, 1.0, 0.0], (n, 1)),
        joint_position=hubs,
        link_centroid=hubs,
        link_mass=np.full(n, wheel_mass),
        link_inertia=np.tile(disk, (n, 1, 1)),
        base_mass=chassis_mass,
        base_inertia=chassis_inertia,
        gravity=np.array([0.0, 0.0, -gravity]),
        link_names=tuple(f"wheel_{axle}_{side}" for axle in names for side in ("left", "right")),
        name="wheeled_rover",
        dtype=dtype,
    )
    return model, Wheels(tuple(range(1, n + 1)), wheel_radius, wheel_width)
