"""A Shuttle-RMS-like orbiter-arm-payload system (seed 004's example), SI units.

Seed 004 gives only the masses: an orbiter of about 180,000 lb, payloads of 20,000 to 65,000
lb and arm moving parts of about 500 lb, and the joint sequence (shoulder yaw, shoulder pitch,
elbow pitch, wrist pitch, wrist yaw, wrist roll, eq 2-14). The rest is chosen here from the
published overall dimensions of the Shuttle Remote Manipulator System (a 50 ft 3 in arm, 15 in
in diameter, on the port longeron about 35 ft forward of the orbiter's centre of mass) and is
*plausible*, not flight data:

| item | value (SI) | value (lb, ft) |
|---|---|---|
| orbiter mass | 81,647 kg | 180,000 lb |
| orbiter inertia (body axes, about CM) | Ixx 1.29e6, Iyy 9.50e6, Izz 9.90e6, Ixz 2.6e5 kg m^2 | 0.95e6, 7.0e6, 7.3e6, 0.19e6 slug ft^2 |
| shoulder, from orbiter CM (x fwd, y stbd, z down) | (10.7, -2.7, -2.3) m | (35.1, -8.9, -7.5) ft |
| upper arm (shoulder to elbow) | 6.37 m | 20.9 ft |
| lower arm (elbow to wrist pitch) | 7.06 m | 23.2 ft |
| wrist (wrist pitch to wrist yaw) | 0.50 m | 1.6 ft |
| hand (wrist yaw/roll to end-effector tip) | 1.40 m | 4.6 ft |
| arm moving parts | 227 kg (25, 70, 65, 20, 12, 35) | 500 lb |
| payload (default) | 29,484 kg, cylinder 4.2 m x 9 m | 65,000 lb, 13.8 ft x 29.5 ft |
| motor torque limits | 1051, 1051, 746, 420, 420, 420 N m | 775, 775, 550, 310, 310, 310 ft lb |

Frames. The orbiter body frame has x forward, y starboard, z down. The longeron frame of
eq 2-14 (``T_LB``) has x aft, y starboard, z up; the shoulder yaw joint turns about its z,
the three pitch joints about one horizontal axis (positive raises the arm), the wrist yaw
joint about the axis normal to the pitch axis and the arm, the wrist roll joint about the
hand's axis. Shoulder yaw and pitch share one point, as do wrist yaw and roll (so link 5 has
zero length and the hand is link 6, as in section 4's nine load stations). At ``q = 0`` the
arm lies straight along the longeron, pointing aft: a singular configuration.

The payload frame is aligned with the orbiter body frame when the arm is at
:data:`GRAPPLE_Q`; its grapple fixture (the end-effector tip) is 2.6 m above and 0.8 m forward
of its centre of mass.

Flexibility (section 3): five beams (longeron and shoulder, upper arm, lower arm, wrist,
hand) as uniform cantilevers with equivalent stiffnesses that lump joint and gearbox
compliance: ``EI`` = 5e6, 2e6, 2e6, 1.5e6, 1.5e6 N m^2 and ``GJ`` = 0.75 ``EI``; they put the
first arm-payload mode of the 65,000 lb payload near 0.04 Hz.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sdjax.models._solids import cylinder_inertia
from sdjax.massless_arm import ArmFlexibility, MasslessArmSystem, arm_kinematics, cantilever_terms
from sdjax.model import Model

__all__ = ["srms_arm", "srms_flexibility", "srms_system"]

#: Unit conversions (exact).
LB = 0.45359237  # kg per lb (mass)
FT = 0.3048  # m per ft
SLUG_FT2 = 14.59390294 * FT**2  # kg m^2 per slug ft^2
FT_LB = 4.4482216152605 * FT  # N m per ft lbf

ORBITER_MASS = 180_000 * LB
PAYLOAD_MASS_RANGE = (20_000 * LB, 65_000 * LB)
ORBITER_INERTIA = np.array([[1.29e6, 0.0, -2.6e5], [0.0, 9.50e6, 0.0], [-2.6e5, 0.0, 9.90e6]])
SHOULDER = np.array([10.7, -2.7, -2.3])
UPPER_ARM, LOWER_ARM, WRIST, HAND = 6.37, 7.06, 0.50, 1.40
LINK_MASS = np.array([25.0, 70.0, 65.0, 20.0, 12.0, 35.0])
BOOM_RADIUS = 0.19
PAYLOAD_RADIUS, PAYLOAD_LENGTH = 2.1, 9.0
PAYLOAD_TO_TIP = np.array([0.8, 0.0, -2.6])
TORQUE_LIMIT = np.array([775.0, 775.0, 550.0, 310.0, 310.0, 310.0]) * FT_LB
JOINT_NAMES = ("shoulder_yaw", "shoulder_pitch", "elbow_pitch", "wrist_pitch", "wrist_yaw", "wrist_roll")
#: Joint angles holding the payload just above the payload bay (rad).
GRAPPLE_Q = np.array([0.25, 1.0, -1.3, -1.2708, 0.0, 0.0])
BEAM_EI = np.array([5.0e6, 2.0e6, 2.0e6, 1.5e6, 1.5e6])
BEAM_LENGTH = np.array([1.0, UPPER_ARM, LOWER_ARM, WRIST, HAND])


def srms_arm(link_mass_scale: float = 1.0, dtype: Any = None) -> Model:
    """The orbiter (base) with the six-joint arm, link masses included (an sdjax Model).

    Arguments:
        link_mass_scale: factor on every link's mass and inertia (1 = the 227 kg arm); the
            validation shrinks it towards the massless limit.
        dtype: floating dtype.
    """
    s = float(link_mass_scale)
    half_pi = np.pi / 2
    r = BOOM_RADIUS
    link_inertia = [
        cylinder_inertia(LINK_MASS[0], 0.25, 0.6, 2),
        cylinder_inertia(LINK_MASS[1], r, UPPER_ARM, 0),
        cylinder_inertia(LINK_MASS[2], r, LOWER_ARM, 0),
        cylinder_inertia(LINK_MASS[3], r, 0.6, 0),
        cylinder_inertia(LINK_MASS[4], r, 0.3, 0),
        cylinder_inertia(LINK_MASS[5], r, HAND, 2),
    ]
    return Model(
        parent=(0, 1, 2, 3, 4, 5),
        joint_type="RRRRRR",
        base_mass=ORBITER_MASS,
        base_inertia=ORBITER_INERTIA,
        link_mass=s * LINK_MASS,
        link_inertia=s * np.stack(link_inertia),
        parent_centroid_to_joint=[
            SHOULDER,
            [0, 0, -0.3],
            [UPPER_ARM / 2, 0, 0],
            [LOWER_ARM / 2, 0, 0],
            [WRIST / 2, 0, 0],
            [-0.05, 0, 0],
        ],
        centroid_to_joint=[
            [0, 0, -0.3],
            [-UPPER_ARM / 2, 0, 0],
            [-LOWER_ARM / 2, 0, 0],
            [-WRIST / 2, 0, 0],
            [-0.05, 0, 0],
            [0, 0, -HAND / 2],
        ],
        # T_LB = Ry(pi) (x aft, z up); pitch axes -y_L; wrist yaw normal to pitch; roll along the hand.
        joint_rpy=[[0, np.pi, 0], [half_pi, 0, 0], [0, 0, 0], [0, 0, 0], [-half_pi, 0, 0], [0, half_pi, 0]],
        end_point_link=(6,),
        centroid_to_end_point=[[0, 0, HAND / 2]],
        end_point_rpy=[[0, -half_pi, 0]],  # end-effector x along the hand, outwards
        link_names=JOINT_NAMES,
        name="srms",
        dtype=dtype,
    )


def srms_system(
    payload_mass: float = PAYLOAD_MASS_RANGE[1], *, link_mass_scale: float = 1.0, dtype: Any = None
) -> MasslessArmSystem:
    """Orbiter, massless SRMS-like arm and a cylindrical payload (default 65,000 lb).

    Arguments:
        payload_mass: kg; the payload keeps its shape (inertia scales with mass).
        link_mass_scale: passed to :func:`srms_arm` (used only by the full multibody model).
        dtype: floating dtype.
    """
    arm = srms_arm(link_mass_scale, dtype)
    tip_rotation = np.asarray(arm_kinematics_np(arm, GRAPPLE_Q)[1])
    return MasslessArmSystem(
        arm,
        payload_mass=payload_mass,
        payload_inertia=cylinder_inertia(float(payload_mass), PAYLOAD_RADIUS, PAYLOAD_LENGTH, 0),
        payload_to_tip=PAYLOAD_TO_TIP,
        payload_rotation=tip_rotation.T,  # payload frame = orbiter frame at GRAPPLE_Q
    )


def arm_kinematics_np(arm: Model, q: Any) -> tuple[np.ndarray, np.ndarray]:
    """Tip position and rotation in the orbiter frame (float64 NumPy, for builders)."""
    probe = MasslessArmSystem(arm, payload_mass=1.0, payload_inertia=np.eye(3))
    kin = arm_kinematics(probe, np.asarray(q, np.float64))
    return np.asarray(kin.tip_position, np.float64), np.asarray(kin.tip_rotation, np.float64)


def srms_flexibility(dtype: Any = None) -> ArmFlexibility:
    """The five beams of section 3 as uniform cantilevers (see the module docstring)."""
    terms = np.asarray(cantilever_terms(BEAM_LENGTH, BEAM_EI, BEAM_EI, 0.75 * BEAM_EI), np.float64)
    along_z = np.array([[0.0, 0.0, -1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # Ry(-pi/2): beam x = body z
    eye = np.eye(3)
    flex = ArmFlexibility(
        terms=terms,
        body=(1, 2, 3, 4, 6),
        rotation=np.stack([along_z, eye, eye, eye, along_z]),
        end=np.array([[0, 0, 0], [UPPER_ARM, 0, 0], [LOWER_ARM, 0, 0], [WRIST, 0, 0], [0, 0, HAND]], np.float64),
    )
    return (
        flex
        if dtype is None
        else ArmFlexibility(flex.terms.astype(dtype), flex.body, flex.rotation.astype(dtype), flex.end.astype(dtype))
    )
