"""A free-floating capture target: a defunct satellite with a grapple handle (for :mod:`sdjax.capture`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model

#: Handle (grapple fixture) position relative to the target's centroid, body frame, m.
TARGET_HANDLE_OFFSET = (-0.75, 0.0, 0.0)


def tumbling_target(mass: float = 250.0, inertia: Any = ((60.0, 2.0, 0.0), (2.0, 85.0, -1.0), (0.0, -1.0, 100.0)), dtype: Any = None) -> Model:
    """A rigid target satellite (base only, no joints): ``mass`` kg and ``inertia`` (kg m^2, about
    its centroid, body frame), no gravity. Grasp it at :data:`TARGET_HANDLE_OFFSET` (a handle
    on its -x face, 0.75 m from the centroid)."""
    return model_from_reference_pose(
        parent=(),
        joint_type="",
        joint_axis=np.zeros((0, 3)),
        joint_position=np.zeros((0, 3)),
        link_centroid=np.zeros((0, 3)),
        link_mass=np.zeros(0),
        link_inertia=np.zeros((0, 3, 3)),
        base_mass=mass,
        base_inertia=np.asarray(inertia, np.float64),
        name="tumbling_target",
        dtype=dtype,
    )
