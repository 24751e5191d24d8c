"""Built-in models."""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.models._solids import cylinder_between
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.io.spacedyn_arrays import model_from_spacedyn_arrays
from sdjax.model import Model

__all__ = ["free_flying_arm_7dof", "free_flying_arm_initial_q", "rigid_body", "spacedyn_sample"]


def rigid_body(
    mass: Any, inertia: Any, *, gravity: Any = (0.0, 0.0, 0.0), name: str = "rigid_body", dtype: Any = None
) -> Model:
    """A single free rigid body (a base without links or end points).

    Arguments:
        mass: kg.
        inertia: ``(3, 3)`` inertia tensor about the centroid, body frame, kg m^2.
        gravity: ``(3,)`` gravitational acceleration, inertial frame, m/s^2.
        name: model name.
        dtype: parameter dtype (default JAX's default float).
    """
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
        gravity=np.asarray(gravity, np.float64),
        name=name,
        dtype=dtype,
    )


def spacedyn_sample(dtype: Any = None) -> Model:
    """The sample system of the SpaceDyn v1.2 distribution (``sample_v1r2.m``).

    A 100 kg base (inertia 10 E) with two 3-joint arms (revolute, revolute, prismatic)
    attached at ``(0, +-1, 0)`` m; 10 kg links, 1 m between joints (centroids mid-way), one
    end point 0.5 m beyond each arm's centroid. Its sample run drives the joints with
    ``tau = 10 (q_des - q) - 10 qd``, ``q_des = (0.3, 0.2, 0.1, 0.6, 0.5, 0.4)``, no gravity,
    RK4 with ``d_time = 0.01`` s from rest at ``q = 0`` (see ``python -m sdjax demo``).
    """
    n = 6
    cc = np.zeros((3, n, n))
    for i in range(n):
        cc[2, i, i] = -0.5
    for i, j in ((0, 1), (1, 2), (3, 4), (4, 5)):
        cc[2, i, j] = 0.5
    half_pi = np.pi / 2
    link_inertia = [np.diag([1.0, 1.0, 0.1]), np.diag([1.0, 0.1, 1.0]), np.diag([1.0, 0.1, 1.0])] * 2
    return model_from_spacedyn_arrays(
        BB=[0, 1, 2, 0, 4, 5],
        J_type="RRPRRP",
        c0=[[0, 0, 0, 0, 0, 0], [1, 0, 0, -1, 0, 0], [0, 0, 0, 0, 0, 0]],
        cc=cc,
        ce=[[0, 0, 0, 0, 0, 0], [0, 0, 0.5, 0, 0, 0.5], [0, 0, 0, 0, 0, 0]],
        Qi=[[-half_pi, half_pi, 0, half_pi, half_pi, 0], [0] * 6, [0] * 6],
        Qe=[[0] * 6, [0] * 6, [0, 0, half_pi, 0, 0, half_pi]],
        SE=[0, 0, 1, 0, 0, 1],
        m0=100.0,
        m=[10.0] * 6,
        inertia0=10.0 * np.eye(3),
        inertia=np.hstack(link_inertia),
        name="spacedyn_sample",
        link_names=("arm1_link1", "arm1_link2", "arm1_slider", "arm2_link1", "arm2_link2", "arm2_slider"),
        dtype=dtype,
    )


def free_flying_arm_7dof(dtype: Any = None) -> Model:
    """A free-flying servicer: 500 kg box-shaped base with a 7-joint, 2.6 m revolute arm.

    Reference pose (``q = 0``, arm stretched along the base +x axis from the mount point
    ``(0.75, 0, 0.5)`` m): joint axes z, y, x, y, x, y, x of the base frame (shoulder yaw,
    shoulder pitch, upper-arm roll, elbow pitch, forearm roll, wrist pitch, wrist roll);
    upper arm and forearm 1.0 m and 0.8 m, modelled as solid aluminium-like cylinders
    (radius 6 cm); a 0.35 m end effector. Total arm mass 74 kg. The straight reference pose
    is a kinematic singularity; :func:`sdjax.models.builtin.free_flying_arm_initial_q` gives a
    well-conditioned bent posture.
    """
    mount = np.array([0.75, 0.0, 0.5])
    ex, ey, ez = np.eye(3)
    axis = np.array([ez, ey, ex, ey, ex, ey, ex])
    segment = [0.25 * ez, 0.2 * ex, 1.0 * ex, 0.15 * ex, 0.8 * ex, 0.15 * ex, 0.35 * ex]
    masses = np.array([9.0, 8.0, 22.0, 6.0, 17.0, 5.0, 7.0])
    points = [mount]
    for seg in segment[:-1]:
        points.append(points[-1] + seg)
    joints = np.array(points)
    tips = joints + np.array(segment)
    centroids = 0.5 * (joints + tips)
    inertias = np.array([cylinder_between(m, 0.06, a, b) for m, a, b in zip(masses, joints, tips)])
    base_inertia = np.array([[140.0, 2.0, -1.5], [2.0, 120.0, 1.0], [-1.5, 1.0, 105.0]])
    return model_from_reference_pose(
        parent=range(7),
        joint_type="RRRRRRR",
        joint_axis=axis,
        joint_position=joints,
        link_centroid=centroids,
        link_mass=masses,
        link_inertia=inertias,
        base_mass=500.0,
        base_inertia=base_inertia,
        end_point_link=(7,),
        end_point_position=tips[-1:],
        link_names=(
            "shoulder_yaw",
            "shoulder_pitch",
            "upper_arm_roll",
            "elbow_pitch",
            "forearm_roll",
            "wrist_pitch",
            "wrist_roll",
        ),
        name="free_flying_arm_7dof",
        dtype=dtype,
    )


def free_flying_arm_initial_q() -> np.ndarray:
    """A bent, well-conditioned posture of :func:`free_flying_arm_7dof`, rad."""
    return np.array([0.3, -0.6, 0.2, 1.2, -0.3, 0.7, 0.1])
