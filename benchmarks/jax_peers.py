"""The other JAX rigid-body engines as peers of sdjax's batched forward dynamics (used by
``bench_dynamics.py``): jaxsim (its articulated-body algorithm, ``forward_dynamics_aba``) and
adam-robotics (its JAX backend's ``aba``), on the same model and states as sdjax and Pinocchio.

Each is called the way a JAX user batches it, ``jit(vmap(f))`` of a per-sample function from a
state to its accelerations, so the work timed is the same as sdjax's ``forward_dynamics(model,
state, tau)``: jaxsim's includes building its ``JaxSimModelData`` (its forward kinematics, which
its users pay whenever they set a state). Both engines take the base velocity in their "mixed"
representation (the linear velocity of the base frame's origin and the angular velocity, both in
the world frame) and return the base acceleration in it: with the base frame's origin on the base
centroid (as sdjax's exports put it) that is sdjax's base twist and acceleration, so the values
compare directly (``check`` in ``bench_dynamics.py``).

adam reads the URDF of :func:`sdjax.io.urdf.model_to_urdf`. jaxsim reads URDF only through
Gazebo's ``sdformat`` executables (``gz``/``ign``), which PyPI does not carry, so it is given the
same model as SDF 1.7, written here by :func:`model_to_sdf` (link frames on the joints, as in the
URDF; jaxsim orders its joints by its own traversal, so its vectors are permuted by name).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import pathlib
import tempfile
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import sdjax
from sdjax.io.urdf import model_to_urdf
from sdjax.rotation import matrix_to_rpy_numpy, quat_to_matrix, rpy_to_matrix

#: Per-sample inputs of a peer's forward dynamics, in this order: base position (3,), base
#: quaternion (4,) as sdjax stores it ``[x, y, z, w]``, base linear and angular velocity (3,)
#: (world frame), joint positions, rates and torques (n,) in sdjax's joint order.
Inputs = tuple[jax.Array, ...]


def _joint_names(model: sdjax.Model) -> list[str]:
    """The moving joints' names in the exported files (``model_to_urdf``'s, :func:`model_to_sdf`'s)."""
    return [f"{name}_joint" for name in model.link_names]


def _pose(rotation: np.ndarray, position: np.ndarray) -> str:
    """An SDF ``<pose>``: position, then roll-pitch-yaw with ``R = Rz(y) Ry(p) Rx(r)`` (as URDF's rpy)."""
    rpy = -matrix_to_rpy_numpy(rotation.T)  # (sdjax's rpy is R = Rx Ry Rz: transposed, it is URDF's)
    return " ".join(repr(float(x)) for x in (*position, *rpy))


def _inertial(mass: float, centroid: np.ndarray, inertia: np.ndarray) -> str:
    moments = "".join(
        f"<i{a}{b}>{float(inertia['xyz'.index(a), 'xyz'.index(b)])!r}</i{a}{b}>"
        for a, b in ("xx", "xy", "xz", "yy", "yz", "zz")
    )
    return f"<inertial><pose>{_pose(np.eye(3), centroid)}</pose><mass>{float(mass)!r}</mass><inertia>{moments}</inertia></inertial>"


def model_to_sdf(model: sdjax.Model, base_name: str = "base") -> str:
    """SDF 1.7 text of a floating-base model without passive joints: every link's frame on its
    joint (z the joint axis), placed in the model frame at zero joint positions with the base
    frame at the origin; inertias about the centroids, as :func:`sdjax.io.urdf.model_to_urdf`
    writes them. End points are left out (no body)."""
    if model.base != "floating" or np.any(np.asarray(model.joint_stiffness)) or np.any(np.asarray(model.joint_damping)):
        raise ValueError(f"model_to_sdf: {model.name} is not a floating-base model without passive joints")
    n = model.num_joints
    offsets = np.asarray(model.parent_centroid_to_joint, np.float64)
    centroid_to_joint = np.asarray(model.centroid_to_joint, np.float64)
    turns = np.asarray(rpy_to_matrix(np.asarray(model.joint_rpy, np.float64)), np.float64).reshape(n, 3, 3)
    names = [base_name, *model.link_names]
    rotations, positions = [np.eye(3)], [np.zeros(3)]
    links = [f'<link name="{base_name}"><pose>{_pose(np.eye(3), np.zeros(3))}</pose>']
    links[0] += _inertial(float(model.base_mass), np.zeros(3), np.asarray(model.base_inertia, np.float64)) + "</link>"
    joints = []
    for k in range(n):
        p = model.parent[k]
        offset = offsets[k] - (centroid_to_joint[p - 1] if p > 0 else 0.0)  # from the parent's joint
        rotations.append(rotations[p] @ turns[k])
        positions.append(positions[p] + rotations[p] @ offset)
        links.append(
            f'<link name="{names[k + 1]}"><pose>{_pose(rotations[-1], positions[-1])}</pose>'
            + _inertial(float(model.link_mass[k]), -centroid_to_joint[k], np.asarray(model.link_inertia[k], np.float64))
            + "</link>"
        )
        kind = "revolute" if model.joint_type[k] == "R" else "prismatic"
        joints.append(
            f'<joint name="{names[k + 1]}_joint" type="{kind}"><parent>{names[p]}</parent><child>{names[k + 1]}</child>'
            "<axis><xyz>0 0 1</xyz><limit><lower>-1e16</lower><upper>1e16</upper></limit></axis></joint>"
        )
    return f'<?xml version="1.0"?><sdf version="1.7"><model name="{model.name}">{"".join(links + joints)}</model></sdf>'


def _gravity_along_z(model: sdjax.Model) -> float:
    """The model's gravity as jaxsim takes it: a magnitude along -z."""
    gravity = np.asarray(model.gravity, np.float64)
    if np.any(gravity[:2]):
        raise ValueError(f"{model.name}: jaxsim takes gravity along z only, not {gravity}")
    return -float(gravity[2])


def jaxsim_forward_dynamics(model: sdjax.Model) -> tuple[str, Callable[..., jax.Array]]:
    """jaxsim's label and per-sample forward dynamics ``f(*Inputs) -> (6 + n,)`` (base
    acceleration, then joint accelerations in sdjax's order)."""
    import jaxsim.api as js
    from jaxsim import VelRepr

    names = _joint_names(model)
    peer = js.model.JaxSimModel.build_from_model_description(
        model_to_sdf(model), considered_joints=names, gravity=_gravity_along_z(model)
    )
    order = np.array([names.index(name) for name in peer.joint_names()])  # its joint k is sdjax's order[k]
    back = np.argsort(order)

    def forward_dynamics(position, quaternion, linear, angular, q, qd, tau):
        data = js.data.JaxSimModelData.build(
            model=peer,
            base_position=position,
            base_quaternion=jnp.concatenate([quaternion[3:], quaternion[:3]]),  # (w, x, y, z)
            joint_positions=q[order],
            base_linear_velocity=linear,
            base_angular_velocity=angular,
            joint_velocities=qd[order],
            velocity_representation=VelRepr.Mixed,
        )
        base, qdd = js.model.forward_dynamics_aba(peer, data, joint_forces=tau[order])
        return jnp.concatenate([base, qdd[back]])

    return f"jaxsim {importlib.metadata.version('jaxsim')} (jit + vmap)", forward_dynamics


def adam_forward_dynamics(model: sdjax.Model) -> tuple[str, Callable[..., jax.Array]]:
    """adam's label and per-sample forward dynamics, as :func:`jaxsim_forward_dynamics`'s."""
    import adam.jax.computations
    from adam.jax import KinDynComputations

    # adam 0.5 asks for jax<=0.6. Under the JAX pinned here it creates every array with
    # ``device=`` its reference array's sharding, which ``jnp.asarray`` rejects inside ``jit``
    # (AttributeError: 'SingleDeviceSharding' object has no attribute 'spec'); its arrays are
    # built here on the default device instead (the same arithmetic, nothing else changed).
    spec = adam.jax.computations.spec_from_reference
    adam.jax.computations.spec_from_reference = lambda ref: dataclasses.replace(spec(ref), device=None)
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = pathlib.Path(folder) / f"{model.name}.urdf"
            path.write_text(model_to_urdf(model))
            gravity = jnp.concatenate([jnp.asarray(model.gravity, jnp.float64), jnp.zeros(3)])  # (linear, angular)
            peer = KinDynComputations(str(path), _joint_names(model), gravity=gravity)
    finally:
        adam.jax.computations.spec_from_reference = spec

    def forward_dynamics(position, quaternion, linear, angular, q, qd, tau):
        transform = jnp.eye(4).at[:3, :3].set(quat_to_matrix(quaternion)).at[:3, 3].set(position)
        return peer.aba(transform, q, jnp.concatenate([linear, angular]), qd, tau)

    return f"adam-robotics {importlib.metadata.version('adam-robotics')} (JAX, jit + vmap)", forward_dynamics


#: The peers, by name: each builds its label and per-sample function for a model, or raises.
PEERS = {"jaxsim": jaxsim_forward_dynamics, "adam": adam_forward_dynamics}


def inputs(states: Any, tau: jax.Array) -> Inputs:
    """A batch's :data:`Inputs` from sdjax states (leading batch axis) and torques ``(B, n)``."""
    return (
        states.base_position,
        states.base_quaternion,
        states.base_linear_velocity,
        states.base_angular_velocity,
        states.q,
        states.qd,
        tau,
    )
