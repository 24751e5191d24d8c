"""Export to Pinocchio (an independent rigid-body dynamics library), for cross-checks and
benchmarks. Pinocchio is optional: it is imported when a function here is called.

Coordinates. sdjax's generalized velocity is ``nu_sd = [v0, w0, qd]`` with ``v0``, ``w0`` the
base centroid velocity and base angular velocity in the *inertial* frame. Pinocchio's free
flyer (placed on the base centroid) uses the *base-frame* twist, so

    nu_pin = T nu_sd,    T = blockdiag(A0^T, A0^T, P),

``A0`` the base-to-inertial rotation and ``P`` the permutation from sdjax's joint order to
Pinocchio's (the identity unless the links are numbered non-depth-first, see
:func:`depth_first_order`). Power conservation gives ``tau_sd = T^T tau_pin`` (base part:
force at and torque about the base centroid, inertial frame), hence ``H_sd = T^T M T``.
Pinocchio's free-flyer acceleration is the time derivative of the base-frame twist:
``a_pin = T a_sd + Tdot nu_sd`` with ``Tdot nu_sd = [-A0^T (w0 x v0); 0; 0]``. Therefore
``c_sd = T^T (M Tdot nu_sd + nle)``. ``T`` is orthogonal, so ``T^-1 = T^T``.

Base modes. A planar base becomes three Pinocchio joints ``PX``, ``PY``, ``RZ`` (world-aligned,
massless between them): their rates are sdjax's ``[v0_x, v0_y, w0_z]`` directly, so
``T = blockdiag(E_3, P)`` and ``Tdot nu = 0``. A fixed base is a body of Pinocchio's universe:
``T = P``. Both place the base frame at a reference pose (the base centroid's height and the
attitude at ``RZ`` angle zero) given when the twin is built.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from sdjax.model import BASE_MODES, Model, check_no_mimic
from sdjax.rotation import rpy_to_matrix
from sdjax.state import State

__all__ = [
    "PinocchioTwin",
    "depth_first_order",
    "pinocchio_acceleration_offset",
    "pinocchio_coordinates",
    "to_pinocchio",
]


@dataclasses.dataclass
class PinocchioTwin:
    """A Pinocchio model of an sdjax model and the index maps between the two.

    Attributes:
        model: the ``pin.Model``.
        joint_id: ``(n + 1,)`` Pinocchio joint id of each sdjax body (``[0]`` = the free flyer).
        frame_id: ``(ne,)`` Pinocchio frame id of each sdjax end point.
        permutation: ``(n, n)`` 0/1 matrix mapping sdjax joint vectors to Pinocchio's joint
            order: ``q_pin[7:] = permutation @ q``, ``v_pin[6:] = permutation @ qd``.
        base: the sdjax base mode.
        base_placement: ``pin.SE3`` of the sdjax base frame (origin on the base centroid) in
            the frame of Pinocchio joint ``joint_id[0]`` (identity for a floating base).
    """

    model: Any  # pinocchio.Model
    joint_id: list[int]
    frame_id: list[int]
    permutation: np.ndarray
    base: str = "floating"
    base_placement: Any = None


def depth_first_order(parent: tuple[int, ...]) -> list[int]:
    """Links (1..n) in depth-first pre-order, children in increasing index order.

    sdjax only requires ``parent[i-1] < i``; Pinocchio's CRBA further assumes that every
    subtree occupies a contiguous range of velocity indices, which a depth-first order
    guarantees. With the joints added in sdjax order, e.g. parents ``(0, 1, 0, 2)`` (link 4
    hangs on link 2 but link 3, on another branch, comes between), ``pin.crba`` (Pinocchio
    4.1.0) returns wrong coupling entries ``M[0, 3]`` and ``M[1, 3]`` while ``pin.rnea`` (and
    its columns ``M e_k``) stays right.
    """
    children: dict[int, list[int]] = {b: [] for b in range(len(parent) + 1)}
    for i, p in enumerate(parent, start=1):
        children[p].append(i)
    order: list[int] = []
    stack = list(reversed(children[0]))
    while stack:
        link = stack.pop()
        order.append(link)
        stack.extend(reversed(children[link]))
    return order


def to_pinocchio(model: Model, base_pose: State | None = None) -> PinocchioTwin:
    """Build the Pinocchio model of an sdjax model.

    Joints: Pinocchio joint 1 is a ``JointModelFreeFlyer`` whose frame is the sdjax base frame
    (origin on the base centroid); the links follow in depth-first order (see
    :func:`depth_first_order`), so Pinocchio's joint vectors are a permutation of sdjax's.
    A planar base is the joints ``PX``, ``PY``, ``RZ`` and a fixed base a body of the universe
    (module docstring), placed at ``base_pose``'s base pose (default: the origin, identity
    attitude; a planar twin takes its height and its attitude as that at ``RZ`` angle 0).

    Geometry (sdjax conventions, see :mod:`sdjax.model` and :mod:`sdjax.kinematics`):

    - The frame of link ``i`` has its origin on joint ``i`` and is rotated from its parent's
      frame by ``rpy_to_matrix(joint_rpy[i-1]) = Rx Ry Rz``, then by the joint motion about /
      along its z axis: Pinocchio ``JointModelRZ`` (``'R'``) or ``JointModelPZ`` (``'P'``).
    - The joint placement is expressed in the parent *joint* frame. For a base parent that
      frame is centred on the base centroid, so the translation is
      ``parent_centroid_to_joint[i-1]``. For a link parent ``p`` the parent joint frame's origin
      is joint ``p``, which lies at ``centroid_to_joint[p-1]`` from the parent's centroid, so the
      translation is ``parent_centroid_to_joint[i-1] - centroid_to_joint[p-1]``. This also holds
      for a prismatic parent: sdjax puts the parent's centroid at ``p_p + A_p (q_p e_z - c_pp)``
      and Pinocchio's prismatic child frame moves with ``q_p``, so both move the whole subtree
      by ``q_p`` along the slider axis.
    - Link ``i``'s spatial inertia (in its joint frame) has its centroid at ``-centroid_to_joint``
      and its rotational inertia ``link_inertia`` about the centroid (link-frame axes = joint
      frame axes). The base inertia is centred on the free-flyer origin.
    - End point ``k`` on link ``i`` becomes an ``OP_FRAME`` on link ``i``'s joint at
      ``centroid_to_end_point[k] - centroid_to_joint[i-1]`` with rotation
      ``rpy_to_matrix(end_point_rpy[k])``.
    - Gravity: ``pin.Motion(model.gravity, 0)``. Passive joint springs/dampers are not
      modelled in Pinocchio; the tests add them to the joint torques explicitly.
    """
    import pinocchio as pin

    check_no_mimic(model, "to_pinocchio")
    n = model.num_joints
    pcj = np.asarray(model.parent_centroid_to_joint, np.float64)
    cj = np.asarray(model.centroid_to_joint, np.float64)
    joint_rot = np.asarray(rpy_to_matrix(model.joint_rpy), np.float64).reshape(n, 3, 3)
    masses = np.asarray(model.link_mass, np.float64)
    inertias = np.asarray(model.link_inertia, np.float64)

    pm = pin.Model()
    pm.name = model.name
    pm.gravity = pin.Motion(np.asarray(model.gravity, np.float64), np.zeros(3))
    joint_id = [0] * (n + 1)
    if base_pose is None:
        pose = pin.SE3.Identity()
    else:
        pose = pin.SE3(np.asarray(base_pose.base_rotation, np.float64), np.asarray(base_pose.base_position, np.float64))
    if model.base == "floating":
        joint_id[0], base_placement = (
            pm.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "base"),
            pin.SE3.Identity(),
        )
    elif model.base == "planar":
        slider_x = pm.addJoint(0, pin.JointModelPX(), pin.SE3.Identity(), "base_x")
        slider_y = pm.addJoint(slider_x, pin.JointModelPY(), pin.SE3.Identity(), "base_y")
        joint_id[0] = pm.addJoint(slider_y, pin.JointModelRZ(), pin.SE3.Identity(), "base_yaw")
        base_placement = pin.SE3(pose.rotation, np.array([0.0, 0.0, pose.translation[2]]))
    else:
        joint_id[0], base_placement = 0, pose
    pm.appendBodyToJoint(
        joint_id[0],
        pin.Inertia(float(model.base_mass), np.zeros(3), np.asarray(model.base_inertia, np.float64)),
        base_placement,
    )
    for i in depth_first_order(model.parent):
        p = model.parent[i - 1]
        offset = pcj[i - 1] - (cj[p - 1] if p > 0 else 0.0)
        joint_model = pin.JointModelRZ() if model.joint_type[i - 1] == "R" else pin.JointModelPZ()
        placement = pin.SE3(joint_rot[i - 1], offset)
        if p == 0:
            placement = base_placement * placement
        joint_id[i] = pm.addJoint(joint_id[p], joint_model, placement, model.link_names[i - 1])
        pm.appendBodyToJoint(
            joint_id[i], pin.Inertia(float(masses[i - 1]), -cj[i - 1], inertias[i - 1]), pin.SE3.Identity()
        )
    end_rot = np.asarray(rpy_to_matrix(model.end_point_rpy), np.float64).reshape(-1, 3, 3)
    cte = np.asarray(model.centroid_to_end_point, np.float64)
    frame_id = []
    for k, link in enumerate(model.end_point_link):
        placement = pin.SE3(end_rot[k], cte[k] - (cj[link - 1] if link > 0 else 0.0))
        if link == 0:
            placement = base_placement * placement
        frame = pin.Frame(model.end_point_names[k], joint_id[link], placement, pin.FrameType.OP_FRAME)
        frame_id.append(pm.addFrame(frame, False))
    nb = model.num_base_velocities
    assert pm.nv == nb + n and pm.nq == nb + n + (1 if model.base == "floating" else 0)
    permutation = np.zeros((n, n))
    for i in range(1, n + 1):
        permutation[pm.idx_vs[joint_id[i]] - nb, i - 1] = 1.0
    return PinocchioTwin(pm, joint_id, frame_id, permutation, model.base, base_placement)


def pinocchio_coordinates(twin: PinocchioTwin, state: State) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pinocchio configuration and velocity of an sdjax state, and the map ``T``.

    Returns:
        ``q_pin (7 + n,)`` = ``[r0, quat (x, y, z, w), P q]``, ``v_pin (6 + n,)`` = ``T nu_sd``,
        and ``T (6 + n, 6 + n)`` (planar base: ``q_pin = [x0, y0, yaw, P q]``, where ``yaw``
        turns the twin's reference attitude into the state's, and ``T = blockdiag(E_3, P)``;
        fixed base: ``P q``, ``T = P``; ``nu_sd`` the state's generalized velocity).
    """
    rotation = np.asarray(state.base_rotation, np.float64)
    n = twin.permutation.shape[0]
    joints = twin.permutation @ np.asarray(state.q)
    if twin.base == "floating":
        t = np.zeros((6 + n, 6 + n))
        t[:3, :3] = t[3:6, 3:6] = rotation.T
        t[6:, 6:] = twin.permutation
        q_pin = np.concatenate([np.asarray(state.base_position), np.asarray(state.base_quaternion), joints])
        nu_sd = np.asarray(state.generalized_velocity, np.float64)
    elif twin.base == "planar":
        t = np.eye(3 + n)
        t[3:, 3:] = twin.permutation
        yaw = planar_yaw(state, np.asarray(twin.base_placement.rotation))
        q_pin = np.concatenate([np.asarray(state.base_position)[:2], [yaw], joints])
        nu_sd = np.concatenate(
            [
                np.asarray(state.base_linear_velocity)[:2],
                np.asarray(state.base_angular_velocity)[2:],
                np.asarray(state.qd),
            ]
        )
    else:
        t, q_pin, nu_sd = twin.permutation, joints, np.asarray(state.qd, np.float64)
    return q_pin, t @ nu_sd, t


def planar_yaw(state: State, reference: np.ndarray) -> float:
    """The angle ``yaw`` (rad) of a planar base's attitude ``A0 = Rz(yaw) reference``."""
    turn = np.asarray(state.base_rotation, np.float64) @ np.asarray(reference, np.float64).T
    return float(np.arctan2(turn[1, 0], turn[0, 0]))


def pinocchio_acceleration_offset(state: State, base: str = "floating") -> np.ndarray:
    """``Tdot nu_sd`` (6 + n,): Pinocchio's acceleration of an sdjax motion is
    ``a_pin = T a_sd + Tdot nu_sd`` (``T`` of :func:`pinocchio_coordinates`). Only the
    free-flyer's linear part has a rate term, that of the base-frame velocity ``A0^T v0``:
    ``[-A0^T (w0 x v0); 0; 0]``; zero for planar and fixed bases (``T`` constant), of the
    size of their generalized velocity."""
    if base != "floating":
        return np.zeros(len(BASE_MODES[base]) + np.shape(state.q)[-1])
    rotation = np.asarray(state.base_rotation, np.float64)
    w0, v0 = np.asarray(state.base_angular_velocity, np.float64), np.asarray(state.base_linear_velocity, np.float64)
    offset = np.zeros(6 + np.shape(state.q)[-1])
    offset[:3] = -rotation.T @ np.cross(w0, v0)
    return offset
