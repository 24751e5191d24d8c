"""Static loads in the massless arm (seed 004 section 4, eq A-20, subroutine RMLOAD).

The arm has no mass, so every member is in static equilibrium between the end-effector load
and the joint loads: with the load on the payload ``[F_e; M_e]`` (eq 2-3), the load that
link ``k`` receives from its inboard neighbour at joint ``k`` is (eq A-20 with the end load
carried from the tip to joint ``k``)

    V = F_e,    M = M_e + (r_tip - r_k) x F_e,

and the load it receives at its outboard end (joint ``k + 1``, or the tip for the last link)
is the opposite of what it passes on, ``-(F_e, M_e + (r_tip - r_k+1) x F_e)``. Each is
expressed in the link's own frame (the seed's ``T_kB``). The component of the inboard moment
along joint ``k``'s axis is the joint torque ``tau_k`` (virtual work: ``tau = J^T [F_e; M_e]``).

:func:`seed_joint_loads` returns the seed's nine stations ``M1..M9``, ``V1..V9`` for an RMS-like
arm whose shoulder yaw and pitch joints coincide and whose wrist roll joint sits at the wrist
yaw joint (link 5 of zero length), so that the "hand" is link 6.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import einsum
from sdjax.massless_arm.dynamics import MasslessArmSystem, _arm_kinematics, _check_q
from sdjax._checks import check_vector

__all__ = ["SEED_STATIONS", "MemberLoads", "member_loads", "seed_joint_loads"]


class MemberLoads(eqx.Module):
    """Loads on each arm link at its two ends, in the link's frame.

    Attributes:
        inboard_force, inboard_moment: ``(6, 3)`` on link ``k`` at joint ``k`` (moment about
            the joint), N and N m.
        outboard_force, outboard_moment: ``(6, 3)`` on link ``k`` at joint ``k + 1`` (the tip
            for link 6), N and N m.
    """

    inboard_force: Array
    inboard_moment: Array
    outboard_force: Array
    outboard_moment: Array


def member_loads(system: MasslessArmSystem, q: Any, wrench: Any) -> MemberLoads:
    """Static loads on the arm links from the end-effector load (eq A-20, section 4).

    Arguments:
        system: the system (arm kinematics).
        q: ``(6,)`` joint angles, rad.
        wrench: ``(6,)`` ``[F_e; M_e]`` on the payload at the tip, orbiter frame (eq 2-3,
            :func:`~sdjax.massless_arm.end_effector_wrench`).

    Returns:
        :class:`MemberLoads`.
    """
    q = _check_q(q, system.dtype)
    wrench = check_vector("member_loads: wrench", wrench, (6,), q.dtype)
    force, moment = wrench[:3], wrench[3:]
    kin = _arm_kinematics(system.arm, q)
    to_link = jnp.swapaxes(kin.link_rotation[1:], -1, -2)  # T_kB: orbiter frame -> link k frame
    inboard = kin.joint_position  # r_k
    outboard = jnp.concatenate([kin.joint_position[1:], kin.tip_position[None]])  # r_k+1 (tip for k = 6)
    moment_in = moment + jnp.cross(kin.tip_position - inboard, force)
    moment_out = -(moment + jnp.cross(kin.tip_position - outboard, force))
    in_frame = lambda v: einsum("kij,kj->ki", to_link, jnp.broadcast_to(v, (6, 3)))  # noqa: E731
    return MemberLoads(
        inboard_force=in_frame(force),
        inboard_moment=in_frame(moment_in),
        outboard_force=in_frame(-force),
        outboard_moment=in_frame(moment_out),
    )


#: (link 1..6, end) of the seed's stations 1..9 (section 4): shoulder; upper arm at shoulder,
#: at elbow; lower arm at elbow, at wrist pitch; wrist at wrist pitch, at wrist yaw; hand at
#: wrist yaw (= wrist roll), at the end effector.
SEED_STATIONS = ((1, "out"), (2, "in"), (2, "out"), (3, "in"), (3, "out"), (4, "in"), (4, "out"), (6, "in"), (6, "out"))


def seed_joint_loads(system: MasslessArmSystem, q: Any, wrench: Any) -> tuple[Array, Array]:
    """The seed's ``M1..M9`` and ``V1..V9`` (section 4, RMLOAD).

    Returns:
        ``(M (9, 3) N m, V (9, 3) N)``, each in its member's frame (:data:`SEED_STATIONS`).
    """
    loads = member_loads(system, q, wrench)
    links = np.array([k - 1 for k, _ in SEED_STATIONS])
    inboard = np.array([end == "in" for _, end in SEED_STATIONS])[:, None]
    moments = jnp.where(inboard, loads.inboard_moment[links], loads.outboard_moment[links])
    forces = jnp.where(inboard, loads.inboard_force[links], loads.outboard_force[links])
    return moments, forces
