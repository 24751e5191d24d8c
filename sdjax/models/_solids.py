"""Inertias of uniform solids, for the ready-made models: about the centroid, kg m^2, in the
frame the shape's dimensions are given in."""

from __future__ import annotations

import numpy as np

__all__ = ["box_inertia", "cylinder_between", "cylinder_inertia"]


def box_inertia(mass: float, size: tuple[float, float, float]) -> np.ndarray:
    """``(3, 3)`` inertia of a uniform box of ``mass`` kg with edges ``size = (a, b, c)`` m along
    ``x, y, z``: ``m / 12 diag(b^2 + c^2, a^2 + c^2, a^2 + b^2)``."""
    a, b, c = size
    return mass / 12.0 * np.diag([b**2 + c**2, a**2 + c**2, a**2 + b**2])


def cylinder_inertia(mass: float, radius: float, length: float, axis: int | np.ndarray) -> np.ndarray:
    """``(3, 3)`` inertia of a uniform solid cylinder (a rod, a disk) of ``mass`` kg, ``radius`` and
    ``length`` m: ``m r^2 / 2`` about its axis, ``m (3 r^2 + L^2) / 12`` across it. ``axis`` is a
    coordinate index (0, 1, 2: a diagonal matrix) or a ``(3,)`` direction."""
    axial = 0.5 * mass * radius**2
    transverse = mass * (3 * radius**2 + length**2) / 12.0
    if isinstance(axis, (int, np.integer)):
        moments = np.full(3, transverse)
        moments[axis] = axial
        return np.diag(moments)
    u = np.asarray(axis, np.float64) / np.linalg.norm(axis)
    return transverse * np.eye(3) + (axial - transverse) * np.outer(u, u)


def cylinder_between(mass: float, radius: float, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """:func:`cylinder_inertia` of the cylinder whose axis runs from ``start`` to ``end`` (m)."""
    axis = np.asarray(end, np.float64) - np.asarray(start, np.float64)
    return cylinder_inertia(mass, radius, float(np.linalg.norm(axis)), axis)
