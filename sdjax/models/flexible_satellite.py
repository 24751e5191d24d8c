"""A satellite with a 3-joint manipulator arm and two flexible solar paddles."""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.models._solids import box_inertia, cylinder_between
from sdjax.flexible import Beam, attach_beam
from sdjax.io.reference_pose import model_from_reference_pose
from sdjax.model import Model

__all__ = ["ARM_JOINTS", "PADDLES", "flexible_satellite", "paddle_beam"]

#: Link names of the arm joints (links 1-3 of :func:`flexible_satellite`).
ARM_JOINTS = ("arm_yaw", "arm_shoulder", "arm_elbow")

#: Names of the two paddle beams (see :func:`sdjax.flexible.beam_layout`).
PADDLES = ("paddle_plus_y", "paddle_minus_y")


def paddle_beam(
    num_segments: int = 6,
    *,
    length: Any = 6.0,
    width: Any = 2.0,
    thickness: Any = 0.03,
    mass_per_length: Any = 5.0,
    out_of_plane_stiffness: Any = 3300.0,
    in_plane_stiffness: Any = 66000.0,
    torsional_stiffness: Any = 600.0,
    damping_ratio: Any = 0.01,
    planar: bool = False,
    dtype: Any = None,
) -> Beam:
    """The solar paddle of :func:`flexible_satellite` as a :class:`~sdjax.flexible.Beam`.

    A 6 m x 2 m panel of 5 kg/m (30 kg). Beam frame: ``x`` along the span, ``y`` normal to
    the panel (out-of-plane deflection, the soft direction: ``EI_z = out_of_plane_stiffness``),
    ``z`` across the width (in-plane, ``EI_y = in_plane_stiffness``, 20 times stiffer). The
    section mass moments are those of a ``width x thickness`` plate:
    ``rho I_y = mu width^2 / 12`` (about the beam y axis, the panel normal) and
    ``rho I_z = mu thickness^2 / 12`` (about the beam z axis, across the width). The default values give the clamped Euler-Bernoulli
    frequencies 2.51 rad/s (0.40 Hz) out of plane, 11.2 rad/s in plane and a torsional frequency
    of 4.9 rad/s, and 1 % Kelvin-Voigt damping of the first mode. ``planar=True`` keeps only
    out-of-plane bending (one joint per node).
    """
    mu = np.asarray(mass_per_length)
    beam_kwargs = dict(planar=planar, damping_ratio=damping_ratio, lumping="midpoint", dtype=dtype)
    section = (mu * np.asarray(width) ** 2 / 12.0, mu * np.asarray(thickness) ** 2 / 12.0)
    return Beam(
        length,
        mass_per_length,
        (in_plane_stiffness, out_of_plane_stiffness),
        num_segments,
        torsional_stiffness=None if planar else torsional_stiffness,
        section_inertia_per_length=section,
        **beam_kwargs,
    )


def flexible_satellite(
    num_segments: int = 6, *, planar_paddles: bool = False, paddle: Beam | None = None, dtype: Any = None
) -> Model:
    """A 1200 kg satellite with a 3-joint arm and two flexible solar paddles.

    - Base: a 2.0 x 2.2 x 2.4 m box (base frame axes), 1200 kg, centroid at the origin.
    - Arm (links 1-3, names :data:`ARM_JOINTS`) mounted on the +x face at ``(1.0, 0, 0.6)``:
      yaw about base z, shoulder and elbow pitch about base y; at ``q = 0`` stretched along
      +x: a 0.3 m yaw link (12 kg), a 1.5 m upper arm (25 kg) and a 1.2 m forearm with its
      end effector (20 kg), cylinders of radius 0.06 m; one end point at the forearm tip.
    - Paddles (names :data:`PADDLES`) clamped at ``(0, +-1.1, 0)`` on the +-y faces, spanning
      along +-y with their surface normal along base x (:func:`paddle_beam`, or ``paddle``).

    Arguments:
        num_segments: segments per paddle (see :mod:`sdjax.flexible` for the accuracy).
        planar_paddles: model out-of-plane bending only (fewer joints, faster).
        paddle: a custom :class:`~sdjax.flexible.Beam` for both paddles (overrides the two
            arguments above).
        dtype: floating dtype.

    Returns:
        The :class:`~sdjax.Model`: 3 arm joints, then the ``+y`` paddle's joints, then the
        ``-y`` paddle's (:func:`sdjax.flexible.beam_layout` finds them by name).
    """
    ex, ey, ez = np.eye(3)
    mount = np.array([1.0, 0.0, 0.6])
    segment = [0.3 * ex, 1.5 * ex, 1.2 * ex]
    joints = np.array([mount, mount + segment[0], mount + segment[0] + segment[1]])
    tips = joints + np.array(segment)
    masses = np.array([12.0, 25.0, 20.0])
    inertias = np.array([cylinder_between(m, 0.06, a, b) for m, a, b in zip(masses, joints, tips)])
    arm = model_from_reference_pose(
        parent=(0, 1, 2),
        joint_type="RRR",
        joint_axis=np.array([ez, ey, ey]),
        joint_position=joints,
        link_centroid=0.5 * (joints + tips),
        link_mass=masses,
        link_inertia=inertias,
        base_mass=1200.0,
        base_inertia=box_inertia(1200.0, (2.0, 2.2, 2.4)),
        end_point_link=(3,),
        end_point_position=tips[-1:],
        link_names=ARM_JOINTS,
        name="flexible_satellite",
        dtype=dtype,
    )
    beam = paddle if paddle is not None else paddle_beam(num_segments, planar=planar_paddles, dtype=arm.dtype)
    # Beam frames (columns = beam x, y, z in the base frame): x along the span, y = panel normal (base x).
    plus = np.column_stack([ey, ex, -ez])
    minus = np.column_stack([-ey, ex, ez])
    model = attach_beam(arm, beam, body=0, position=1.1 * ey, rotation=plus, name=PADDLES[0])
    return attach_beam(model, beam, body=0, position=-1.1 * ey, rotation=minus, name=PADDLES[1])
