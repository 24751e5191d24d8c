"""A free-floating capture target: a defunct satellite with a grapple handle (for :mod:`sdjax.capture`)."""

from __future__ import annotations

from typing import Any

from sdjax.model import Model
from sdjax.models.builtin import rigid_body

__all__ = ["TARGET_HANDLE_OFFSET", "tumbling_target"]

#: Handle (grapple fixture) position relative to the target's centroid, body frame, m.
TARGET_HANDLE_OFFSET = (-0.75, 0.0, 0.0)


def tumbling_target(
    mass: float = 250.0, inertia: Any = ((60.0, 2.0, 0.0), (2.0, 85.0, -1.0), (0.0, -1.0, 100.0)), dtype: Any = None
) -> Model:
    """A rigid target satellite (base only, no joints): ``mass`` kg and ``inertia`` (kg m^2, about
    its centroid, body frame), no gravity. Grasp it at :data:`TARGET_HANDLE_OFFSET` (a handle
    on its -x face, 0.75 m from the centroid)."""
    return rigid_body(mass, inertia, name="tumbling_target", dtype=dtype)
