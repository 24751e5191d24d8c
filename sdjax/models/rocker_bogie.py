"""A six-wheeled rocker-bogie rover with corner steering and a differential (Sojourner, Spirit,
Opportunity, Curiosity and Perseverance share this suspension).

Seed 001 (Fig 7d) simulates "an articulated off-road vehicle as a potential design of a planetary
rover" with a tyre-mechanics contact model; :func:`rocker_bogie_rover` is such an articulated
vehicle for :mod:`sdjax.wheels`. Each side carries a rocker pivoted on the chassis; the rocker's
front end holds the front wheel, its rear end pivots a bogie holding the middle and rear wheels.
The two rockers are joined through a differential, so that they turn by equal and opposite
angles and the chassis pitches by their mean: here the right rocker is a mimic joint of the left
one with multiplier -1 (:attr:`sdjax.Model.mimic_leader`), an exact kinematic relation rather
than a stiff spring. With no springs, all six wheels stay on uneven ground (the mechanism has as
many free pitch motions as are needed to conform: the rocker difference and the two bogies) and
share the load in the ratios the pivot positions set: with the default geometry
(``front - pivot = 2 (pivot - bogie pivot)``, bogie pivot midway between middle and rear) each
wheel carries an equal share of the chassis weight, and the links' own weights load the rear
wheels about 4 % more than the others on flat ground.
The four corner wheels steer about vertical axes (:func:`sdjax.wheels.turn_commands` gives the
steering angles and wheel rates of a turn about a point).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from sdjax.models._solids import box_inertia, cylinder_inertia
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model, edit_model
from sdjax.models.rover import MARS_GRAVITY
from sdjax.wheels import Wheels

__all__ = ["RockerBogie", "rocker_bogie_rover"]


class RockerBogie(NamedTuple):
    """What :func:`rocker_bogie_rover` returns.

    Attributes:
        model: the :class:`~sdjax.Model` (14 joints, 13 coordinates).
        wheels: the six wheels (:class:`~sdjax.wheels.Wheels`: front, middle, rear; left then right).
        steering: ``(6,)`` steering joint of each wheel in ``wheels`` order, 0 for the unsteered
            middle wheels, for :func:`sdjax.wheels.turn_commands`.
    """

    model: Model
    wheels: Wheels
    steering: tuple[int, ...]


def rocker_bogie_rover(
    *,
    chassis_mass: float = 50.0,
    chassis_size: tuple[float, float, float] = (1.0, 0.6, 0.25),
    front: float = 0.5,
    middle: float = 0.0,
    rear: float = -0.5,
    rocker_pivot: float = 0.0,
    track: float = 1.0,
    rocker_height: float = 0.0,
    bogie_height: float = -0.15,
    steering_height: float = -0.2,
    hub_height: float = -0.3,
    rocker_mass: float = 3.0,
    bogie_mass: float = 2.0,
    fork_mass: float = 0.5,
    wheel_mass: float = 2.0,
    wheel_radius: float = 0.125,
    wheel_width: float = 0.1,
    gravity: float = MARS_GRAVITY,
    dtype: Any = None,
) -> RockerBogie:
    """A rocker-bogie rover (module docstring); every position in the chassis frame at the
    reference pose (m; ``x`` forward, ``y`` left, ``z`` up; chassis centroid at the origin).

    Geometry, per side (``y = +track / 2`` left, ``-track / 2`` right): the rocker pivots about
    ``y`` at ``(rocker_pivot, y, rocker_height)``; the bogie about ``y`` at
    ``((middle + rear) / 2, y, bogie_height)``; the front and rear wheels' steering joints turn
    about ``+z`` at ``(front or rear, y, steering_height)``; every wheel turns about ``+y`` (so
    ``qd > 0`` rolls it forward at zero steering) with its hub at ``(front, middle or rear, y,
    hub_height)``. Links: the chassis a box ``chassis_size`` of ``chassis_mass``; each rocker a
    box ``(front - bogie pivot, 0.05, 0.05)`` of ``rocker_mass`` centred on the mean of its three
    joints (pivot, front steering, bogie pivot); each bogie a box ``(middle - rear, 0.05, 0.05)``
    of ``bogie_mass`` centred on the mean of its three joints (pivot, middle hub, rear steering);
    each steering fork a box ``(0.05, 0.05, steering_height - hub_height)`` of ``fork_mass`` centred
    midway between its joint and the hub (on the steering axis); each wheel a uniform disk of
    ``wheel_mass``, ``wheel_radius``, ``wheel_width`` centred on its hub. Gravity
    ``-gravity e_z`` (m/s^2, Mars by default). Default total mass 74 kg.

    Joints (1-based), left side then right side, each: rocker, front steering, front wheel,
    bogie, middle wheel, rear steering, rear wheel (left 1-7, right 8-14). The right rocker
    (joint 8) mimics the left one with multiplier -1 (the differential): 13 coordinates.

    Returns:
        :class:`RockerBogie` ``(model, wheels, steering)``.
    """
    lengths = {"track": track, "wheel_radius": wheel_radius, "wheel_width": wheel_width}
    bad = [f"{k}={v}" for k, v in lengths.items() if not v > 0]
    if bad:
        raise ValueError(f"rocker_bogie_rover: {', '.join(bad)} must be positive")
    if not front > rocker_pivot > (middle + rear) / 2 or not middle > rear:
        raise ValueError(
            "rocker_bogie_rover: expected front > rocker_pivot > (middle + rear) / 2 and middle > rear, got "
            f"front={front}, rocker_pivot={rocker_pivot}, middle={middle}, rear={rear}"
        )
    if not steering_height > hub_height:
        raise ValueError(
            f"rocker_bogie_rover: steering_height ({steering_height}) must lie above hub_height ({hub_height})"
        )
    if not chassis_mass > 0 or len(chassis_size) != 3 or not all(side > 0 for side in chassis_size):
        raise ValueError(
            f"rocker_bogie_rover: chassis_mass must be positive and chassis_size three positive lengths, got "
            f"{chassis_mass} and {chassis_size}"
        )
    if not rocker_height > bogie_height > hub_height:
        raise ValueError(
            "rocker_bogie_rover: expected rocker_height > bogie_height > hub_height (pivots above the hubs), got "
            f"{rocker_height}, {bogie_height}, {hub_height}"
        )
    masses = {"rocker_mass": rocker_mass, "bogie_mass": bogie_mass, "fork_mass": fork_mass, "wheel_mass": wheel_mass}
    bad = [f"{k}={v}" for k, v in masses.items() if not v > 0]
    if bad:
        raise ValueError(f"rocker_bogie_rover: {', '.join(bad)} must be positive")
    bogie_x = 0.5 * (middle + rear)
    fork = box_inertia(fork_mass, (0.05, 0.05, steering_height - hub_height))
    disk = cylinder_inertia(wheel_mass, wheel_radius, wheel_width, 1)
    y_axis, z_axis = np.array([0.0, 1.0, 0.0]), np.array([0.0, 0.0, 1.0])
    rows: list[tuple[int, np.ndarray, np.ndarray, np.ndarray, float, np.ndarray, str]] = []
    for side, y in (("left", 0.5 * track), ("right", -0.5 * track)):
        o = len(rows)  # links before this side
        pivot = np.array([rocker_pivot, y, rocker_height])
        steer_front = np.array([front, y, steering_height])
        bogie_pivot = np.array([bogie_x, y, bogie_height])
        steer_rear = np.array([rear, y, steering_height])
        hubs = {k: np.array([x, y, hub_height]) for k, x in (("front", front), ("middle", middle), ("rear", rear))}
        rows += [  # (parent, axis, joint, centroid, mass, inertia, name)
            (0, y_axis, pivot, (pivot + steer_front + bogie_pivot) / 3, rocker_mass,
             box_inertia(rocker_mass, (front - bogie_x, 0.05, 0.05)), f"rocker_{side}"),
            (o + 1, z_axis, steer_front, (steer_front + hubs["front"]) / 2, fork_mass, fork, f"steer_front_{side}"),
            (o + 2, y_axis, hubs["front"], hubs["front"], wheel_mass, disk, f"wheel_front_{side}"),
            (o + 1, y_axis, bogie_pivot, (bogie_pivot + hubs["middle"] + steer_rear) / 3, bogie_mass,
             box_inertia(bogie_mass, (middle - rear, 0.05, 0.05)), f"bogie_{side}"),
            (o + 4, y_axis, hubs["middle"], hubs["middle"], wheel_mass, disk, f"wheel_middle_{side}"),
            (o + 4, z_axis, steer_rear, (steer_rear + hubs["rear"]) / 2, fork_mass, fork, f"steer_rear_{side}"),
            (o + 6, y_axis, hubs["rear"], hubs["rear"], wheel_mass, disk, f"wheel_rear_{side}"),
        ]  # fmt: skip
    parent, axes, joints, centroids, link_masses, inertias, names = zip(*rows)
    n = len(parent)
    model = model_from_reference_pose(
        parent=parent,
        joint_type="R" * n,
        joint_axis=np.array(axes),
        joint_position=np.array(joints),
        link_centroid=np.array(centroids),
        link_mass=np.array(link_masses),
        link_inertia=np.array(inertias),
        base_mass=chassis_mass,
        base_inertia=box_inertia(chassis_mass, chassis_size),
        gravity=np.array([0.0, 0.0, -gravity]),
        link_names=tuple(names),
        name="rocker_bogie_rover",
        dtype=dtype,
    )
    # The differential: the right rocker (joint 8) turns by minus the left one's angle.
    leader = [0] * n
    leader[7] = 1
    multiplier = np.ones(n)
    multiplier[7] = -1.0
    model = edit_model(model, mimic_leader=tuple(leader), mimic_multiplier=multiplier, mimic_offset=np.zeros(n))
    wheels = Wheels((3, 10, 5, 12, 7, 14), wheel_radius, wheel_width)
    return RockerBogie(model, wheels, (2, 9, 0, 0, 6, 13))
