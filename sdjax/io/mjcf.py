"""Export to MuJoCo's MJCF (XML), for cross-checks and for MuJoCo / MJX users.

The base becomes a body with a free joint at its centroid (a planar base: slides along the
world x and y axes and a hinge about the world z axis through its centroid, its height and
reference attitude those of a given pose; a fixed base: no joint, at that pose); every link
becomes a body nested in its parent's, with its frame on the joint (SpaceDyn's link frame) and a hinge (``'R'``)
or slide (``'P'``) joint along its z axis. Contacts are disabled; gravity, the time step and
the integrator are options. End points become ``<site>`` elements. Mimic joints become joint
equalities (``<equality><joint joint1= joint2= polycoef=>``), which MuJoCo holds by a soft
constraint (sdjax exactly), and keep a ``qpos``/``qvel`` entry of their own.

Coordinates. MuJoCo's free joint uses ``qpos = [r0, quat (w, x, y, z)]`` and
``qvel = [v0 (world frame), A0^T w0 (body frame)]``, and its joints follow the nesting
(depth-first) order, so ``qvel = T nu_sd`` with ``T = blockdiag(E, A0^T, P)``
(``P``: :func:`sdjax.io.pinocchio.depth_first_order`). Because the linear part is in the
world frame and ``w0 x w0 = 0``, ``d(qvel)/dt = T d(nu_sd)/dt`` exactly. A planar base has
``qvel = [v0_x, v0_y, w0_z, P qd]`` (``T = blockdiag(E_3, P)``), a fixed one ``qvel = P qd``.
"""

from __future__ import annotations

from xml.sax.saxutils import quoteattr

import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from sdjax.io.pinocchio import depth_first_order, planar_yaw
from sdjax.model import Model, floating_coordinates
from sdjax.rotation import matrix_to_quat, rpy_to_matrix

__all__ = ["mujoco_coordinates", "to_mjcf"]


def _vec(values: ArrayLike) -> str:
    return " ".join(repr(float(v)) for v in np.ravel(values))


def _quat_wxyz(rotation: np.ndarray) -> str:
    x, y, z, w = np.asarray(matrix_to_quat(rotation), np.float64)
    return _vec([w, x, y, z])


def _inertia(mass: float, inertia: ArrayLike, centroid: ArrayLike) -> str:
    i = np.asarray(inertia, np.float64)
    full = [i[0, 0], i[1, 1], i[2, 2], i[0, 1], i[0, 2], i[1, 2]]
    return f'<inertial pos="{_vec(centroid)}" mass="{float(mass)!r}" fullinertia="{_vec(full)}"/>'


def to_mjcf(model: Model, timestep: float = 0.01, integrator: str = "RK4", base_pose=None) -> str:
    """MJCF text of ``model`` (see the module docstring).

    Arguments:
        model: the system.
        timestep: MuJoCo's ``option/timestep``, s.
        integrator: MuJoCo integrator name (``"RK4"``, ``"Euler"``, ``"implicitfast"``).
        base_pose: a :class:`~sdjax.State` whose base pose places a fixed base, or gives a
            planar base its height and reference attitude (default: origin, identity).

    Returns:
        The XML document as a string (load with ``mujoco.MjModel.from_xml_string``).
    """
    n = model.num_joints
    pcj = np.asarray(model.parent_centroid_to_joint, np.float64)
    cj = np.asarray(model.centroid_to_joint, np.float64)
    joint_rot = np.asarray(rpy_to_matrix(model.joint_rpy), np.float64).reshape(n, 3, 3)
    end_rot = np.asarray(rpy_to_matrix(model.end_point_rpy), np.float64).reshape(-1, 3, 3)
    cte = np.asarray(model.centroid_to_end_point, np.float64)
    children: dict[int, list[int]] = {b: [] for b in range(n + 1)}
    for link in depth_first_order(model.parent):
        children[model.parent[link - 1]].append(link)
    sites: dict[int, list[int]] = {b: [] for b in range(n + 1)}
    for e, link in enumerate(model.end_point_link):
        sites[link].append(e)

    def site_lines(body: int, pad: str) -> list[str]:  # the end points on a body, as named sites
        origin = cj[body - 1] if body > 0 else np.zeros(3)  # body frame origin from its centroid
        return [
            f'{pad}<site name={quoteattr(model.end_point_names[e])} pos="{_vec(cte[e] - origin)}" quat="{_quat_wxyz(end_rot[e])}"/>'
            for e in sites[body]
        ]

    def body(link: int, depth: int) -> list[str]:
        pad = "  " * depth
        p = model.parent[link - 1]
        offset = pcj[link - 1] - (cj[p - 1] if p > 0 else 0.0)
        kind = "hinge" if model.joint_type[link - 1] == "R" else "slide"
        lines = [
            f'{pad}<body name={quoteattr(model.link_names[link - 1])} pos="{_vec(offset)}" quat="{_quat_wxyz(joint_rot[link - 1])}">',
            f'{pad}  <joint name={quoteattr("joint_" + model.link_names[link - 1])} type="{kind}" axis="0 0 1" '
            f'stiffness="{float(model.joint_stiffness[link - 1])!r}" damping="{float(model.joint_damping[link - 1])!r}"/>',
            f"{pad}  " + _inertia(float(model.link_mass[link - 1]), model.link_inertia[link - 1], -cj[link - 1]),
        ]
        lines += site_lines(link, pad + "  ")
        for child in children[link]:
            lines += body(child, depth + 1)
        lines.append(f"{pad}</body>")
        return lines

    position = np.zeros(3) if base_pose is None else np.asarray(base_pose.base_position, np.float64)
    attitude = np.eye(3) if base_pose is None else np.asarray(base_pose.base_rotation, np.float64)
    if model.base == "floating":
        base = ['    <body name="base">', '      <freejoint name="base"/>']
    elif model.base == "planar":
        base = [f'    <body name="base" pos="0 0 {float(position[2])!r}" quat="{_quat_wxyz(attitude)}">']
        base += [
            f'      <joint name="base_{name}" type="{kind}" axis="{_vec(attitude.T[:, axis])}" limited="false"/>'
            for name, kind, axis in (("x", "slide", 0), ("y", "slide", 1), ("yaw", "hinge", 2))
        ]
    else:
        base = [f'    <body name="base" pos="{_vec(position)}" quat="{_quat_wxyz(attitude)}">']
    lines = [
        f"<mujoco model={quoteattr(model.name)}>",
        f'  <option gravity="{_vec(model.gravity)}" timestep="{float(timestep)!r}" integrator="{integrator}">',
        '    <flag contact="disable"/>',
        "  </option>",
        "  <worldbody>",
        *base,
        # (a massless fixed base, the world root of a URDF or MJCF file, has no inertial element)
        *(
            ["      " + _inertia(float(model.base_mass), model.base_inertia, np.zeros(3))]
            if float(model.base_mass)
            else []
        ),
        *site_lines(0, "      "),
    ]
    for child in children[0]:
        lines += body(child, 3)
    lines += ["    </body>", "  </worldbody>"]
    if model.has_mimic:  # MuJoCo's joint equality q_f = a0 + a1 q_leader (joint refs are 0 here)
        multiplier, offset = np.asarray(model.mimic_multiplier), np.asarray(model.mimic_offset)
        lines.append("  <equality>")
        lines += [
            f"    <joint joint1={quoteattr('joint_' + model.link_names[k])} "
            f"joint2={quoteattr('joint_' + model.link_names[leader - 1])} "
            f'polycoef="{float(offset[k])!r} {float(multiplier[k])!r} 0 0 0"/>'
            for k, leader in enumerate(model.mimic_leader)
            if leader
        ]
        lines.append("  </equality>")
    lines.append("</mujoco>")
    return "\n".join(lines) + "\n"


def mujoco_coordinates(model: Model, state, base_pose=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MuJoCo ``qpos``, ``qvel`` of an sdjax state and the map ``T`` (``qvel = T nu_sd``, with
    ``nu_sd`` the model's generalized velocity; mimic joints included in ``qpos``, ``qvel``);
    ``base_pose`` as given to :func:`to_mjcf`."""
    qpos, qvel, t = _mujoco_coordinates(model, state, base_pose)
    if model.has_mimic:  # nu_sd holds the joint coordinates: T composed with G
        g = np.asarray(floating_coordinates(model, jnp.eye(model.num_velocities)), np.float64).T  # (6 + n, nv)
        rows = {"floating": list(range(6)), "planar": [0, 1, 5], "fixed": []}[model.base]
        t = t @ g[rows + list(range(6, 6 + model.num_joints))]
    return qpos, qvel, t


def _mujoco_coordinates(model: Model, state, base_pose) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = model.num_joints
    order = depth_first_order(model.parent)
    permutation = np.zeros((n, n))
    for row, link in enumerate(order):
        permutation[row, link - 1] = 1.0
    joints, nu = permutation @ np.asarray(state.q), np.asarray(state.generalized_velocity, np.float64)
    if model.base == "fixed":
        return joints, permutation @ nu[6:], permutation
    if model.base == "planar":
        reference = np.eye(3) if base_pose is None else np.asarray(base_pose.base_rotation, np.float64)
        t = np.eye(3 + n)
        t[3:, 3:] = permutation
        qpos = np.concatenate([np.asarray(state.base_position, np.float64)[:2], [planar_yaw(state, reference)], joints])
        return qpos, t @ nu[[0, 1, 5, *range(6, 6 + n)]], t
    rotation = np.asarray(state.base_rotation, np.float64)
    t = np.zeros((6 + n, 6 + n))
    t[:3, :3] = np.eye(3)
    t[3:6, 3:6] = rotation.T
    t[6:, 6:] = permutation
    x, y, z, w = np.asarray(state.base_quaternion, np.float64)
    qpos = np.concatenate([np.asarray(state.base_position, np.float64), [w, x, y, z], joints])
    return qpos, t @ nu, t
