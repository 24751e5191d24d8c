"""Seed 003's example systems (Wilde et al., section "Numerical Simulations") and an
ETS-VII-like arm, all built from customised DH tables with :func:`sdjax.io.model_from_dh`.

Seed 003's Tables 3-6 (mass properties and DH parameters of its planar four-link and spatial
six-link systems) are not part of the seed text: the numbers below are *chosen* to match the
described layouts, and are documented in each builder.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.io.dh import model_from_dh
from sdjax.model import Model

__all__ = ["ets7_like", "planar_four_link", "spatial_six_link"]

HALF_PI = 0.5 * np.pi


def _rx(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _rod_along_x(mass: float, length: float, radius: float) -> np.ndarray:
    """Solid cylinder along x about its centroid: ``diag(m r^2/2, m(3r^2 + L^2)/12 x 2)``."""
    axial = 0.5 * mass * radius**2
    transverse = mass * (3.0 * radius**2 + length**2) / 12.0
    return np.diag([axial, transverse, transverse])


def _link_frame_to_l(inertia_f: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Inertias given in sdjax's link frames ``F_i`` to seed 003's ``L_i = F_i Rx(alpha_i)``."""
    return np.stack([_rx(a).T @ i @ _rx(a) for i, a in zip(inertia_f, alpha)])


def planar_four_link(dtype: Any = None) -> Model:
    """Seed 003's planar spacecraft-manipulator: a base and four identical links (chosen values).

    All joint axes are along the base z axis (``alpha_i = 0``, ``d_i = 0``), so the arm moves
    in the base x-y plane; at ``q = 0`` it is fully extended along the base x axis.

    Chosen parameters (seed 003's Tables 3 and 4 are not in the seed text):

    - base: 250 kg, inertia ``60 E`` kg m^2 (a 1.2 m cube), joint 1 mounted at
      ``0b0 = (0.6, 0, 0)`` m on the +x face, ``(epsilon, zeta, eta) = 0``;
    - links 1-4: 5 kg, ``c_i = 0.5`` m with the centroid mid-way (``a_i = b_i = 0.25`` m),
      ``d_i = theta_i(0) = alpha_i = 0``; inertia of a solid cylinder of radius 0.03 m along
      ``x_{L_i}``: ``diag(0.00225, 0.105292, 0.105292)`` kg m^2;
    - end effector ``J_5`` at the tip of link 4 (2.6 m from the base centroid at ``q = 0``).
    """
    n = 4
    inertia = np.stack([_rod_along_x(5.0, 0.5, 0.03)] * n)
    return model_from_dh(
        d=np.zeros(n),
        theta_offset=np.zeros(n),
        alpha=np.zeros(n),
        a=np.full(n, 0.25),
        b=np.full(n, 0.25),
        link_mass=np.full(n, 5.0),
        link_inertia=inertia,
        base_mass=250.0,
        base_inertia=60.0 * np.eye(3),
        mount_position=(0.6, 0.0, 0.0),
        mount_euler=(0.0, 0.0, 0.0),
        name="seed003_planar_four_link",
        dtype=dtype,
    )


def spatial_six_link(dtype: Any = None) -> Model:
    """Seed 003's spatial spacecraft-manipulator: a base and a six-link arm (chosen values).

    Joint 1 rotates about the base x axis (the arm's long axis at ``q = 0``); joints 2-6 are
    parallel to each other and, at ``q_1 = 0``, to the base y axis, so they move the arm in
    a plane parallel to the base x-z plane (as seed 003 describes for its Figure 7: joint 1
    disturbs the base in x, y and z, joints 2-6 only in x and z). At ``q = 0`` the arm is
    fully extended along +x.

    Chosen parameters (seed 003's Tables 5 and 6 are not in the seed text):

    - base: 500 kg, inertia ``[[150, 3, -2], [3, 180, 4], [-2, 4, 160]]`` kg m^2 (the products
      of inertia make joint 1's reaction a three-axis rotation), joint 1 at
      ``0b0 = (0.75, 0, 0.25)`` m, ``(epsilon, zeta, eta) = (0, pi/2, 0)`` (``z_J1`` = base x,
      ``x_J1`` = -base z);
    - DH table (m, rad)::

          i   d_i   theta_i(0)  alpha_i   a_i    b_i    mass (kg)
          1   0.20   0          -pi/2     0      0       6
          2   0.10  -pi/2        0        0.40   0.40    8
          3   0      0           0        0.40   0.40    8
          4   0      0           0        0.20   0.20    4
          5   0      0           0        0.15   0.15    3
          6   0      0           0        0.10   0.10    2

      link 1 is a 0.2 m stub along the joint-1 axis with its centroid at joint 2 (the
      customised DH places centroid ``i`` at ``(a_i, 0, d_i)``); ``d_2 = 0.1`` m offsets links
      2-6 sideways (+y) from the joint-1 axis;
    - inertias: solid cylinders of radius 0.04 m (link 1: radius 0.06 m, along its joint
      axis), about the centroid;
    - end effector ``J_7`` at the tip of link 6.
    """
    d = np.array([0.20, 0.10, 0.0, 0.0, 0.0, 0.0])
    theta = np.array([0.0, -HALF_PI, 0.0, 0.0, 0.0, 0.0])
    alpha = np.array([-HALF_PI, 0.0, 0.0, 0.0, 0.0, 0.0])
    half = np.array([0.0, 0.40, 0.40, 0.20, 0.15, 0.10])
    mass = np.array([6.0, 8.0, 8.0, 4.0, 3.0, 2.0])
    inertia_f = [np.diag([mass[0] * (3 * 0.06**2 + 0.2**2) / 12] * 2 + [0.5 * mass[0] * 0.06**2])]
    inertia_f += [_rod_along_x(m, 2 * h, 0.04) for m, h in zip(mass[1:], half[1:])]
    return model_from_dh(
        d=d,
        theta_offset=theta,
        alpha=alpha,
        a=half,
        b=half,
        link_mass=mass,
        link_inertia=_link_frame_to_l(np.stack(inertia_f), alpha),
        base_mass=500.0,
        base_inertia=np.array([[150.0, 3.0, -2.0], [3.0, 180.0, 4.0], [-2.0, 4.0, 160.0]]),
        mount_position=(0.75, 0.0, 0.25),
        mount_euler=(0.0, HALF_PI, 0.0),
        name="seed003_spatial_six_link",
        dtype=dtype,
    )


#: ETS-VII-like published data (Yoshida 2003): masses (kg), link lengths ``c_i`` and
#: offsets ``d_i`` (m), ``I_zz`` about each joint axis (kg m^2).
ETS7_LINK_MASS = (35.0, 22.5, 21.9, 16.5, 26.0, 18.5)
ETS7_LINK_LENGTH = (0.35, 0.87, 0.63, 0.0, 0.0, 0.53)
ETS7_LINK_OFFSET = (0.28, 0.0, 0.0, 0.26, 0.28, 0.0)
ETS7_LINK_IZZ = (1.69, 3.75, 2.53, 0.072, 0.13, 0.26)
ETS7_BASE_INERTIA = ((6200.0, 48.2, 78.5), (48.2, 3540.0, -29.2), (78.5, -29.2, 7090.0))


def ets7_like(dtype: Any = None) -> Model:
    """An ETS-VII-like free-floating robot: a 2550 kg satellite with a 6-R arm.

    Published values (Yoshida 2003): base 2550 kg, inertia
    ``[[6200, 48.2, 78.5], [48.2, 3540, -29.2], [78.5, -29.2, 7090]]`` kg m^2; link masses
    35.0, 22.5, 21.9, 16.5, 26.0, 18.5 kg; lengths 0.35, 0.87, 0.63, 0, 0, 0.53 m; offsets
    0.28, 0, 0, 0.26, 0.28, 0 m; ``I_zz`` 1.69, 3.75, 2.53, 0.072, 0.13, 0.26 kg m^2; arm
    mounted at ``(-0.79, -0.29, 1.00)`` m in the base frame.

    Filled in (not published; plausible choices):

    - the DH layout of a standard 6-R arm with an offset wrist: lengths are ``c_i``,
      offsets are ``d_i``, twists ``alpha = (pi/2, 0, pi/2, -pi/2, pi/2, 0)``,
      ``theta_i(0) = 0``; joint 1 along the base z axis (``(epsilon, zeta, eta) = 0``);
      centroids mid-way along ``c_i`` (``a_i = b_i = c_i / 2``), on the joint for
      ``c_i = 0`` (then at ``(0, 0, d_i)`` in ``F_i``);
    - ``I_zz`` is taken about the link's own joint axis (z of ``J_i``); links with a length
      ``c_i > 0`` get ``I_yy = I_zz`` and ``I_xx = I_zz / 2`` (about the link's long x axis),
      links 4 and 5 (extended along their joint axis by ``d_i``) are solid cylinders of that
      ``I_zz``: ``I_xx = I_yy = I_zz/2 + m d_i^2/12``; products of inertia zero. All tensors
      satisfy the triangle inequality.

    At ``q = 0`` the arm is stretched (a kinematic singularity); start from a bent elbow,
    e.g. ``q = (0, 0.6, -1.2, 0.3, 0.8, 0.2)`` as in ``notebooks/ets7_resolved_rate.ipynb``.
    """
    mass = np.array(ETS7_LINK_MASS)
    c = np.array(ETS7_LINK_LENGTH)
    d = np.array(ETS7_LINK_OFFSET)
    izz = np.array(ETS7_LINK_IZZ)
    alpha = np.array([HALF_PI, 0.0, HALF_PI, -HALF_PI, HALF_PI, 0.0])
    inertia_f = []
    for m, ci, di, iz in zip(mass, c, d, izz):
        if ci > 0:
            inertia_f.append(np.diag([0.5 * iz, iz, iz]))
        else:
            transverse = 0.5 * iz + m * di**2 / 12.0
            inertia_f.append(np.diag([transverse, transverse, iz]))
    return model_from_dh(
        d=d,
        theta_offset=np.zeros(6),
        alpha=alpha,
        a=0.5 * c,
        b=0.5 * c,
        link_mass=mass,
        link_inertia=_link_frame_to_l(np.stack(inertia_f), alpha),
        base_mass=2550.0,
        base_inertia=np.array(ETS7_BASE_INERTIA),
        mount_position=(-0.79, -0.29, 1.00),
        mount_euler=(0.0, 0.0, 0.0),
        name="ets7_like",
        dtype=dtype,
    )
