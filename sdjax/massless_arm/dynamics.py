"""Two rigid bodies joined by a massless six-joint arm (seed 004 section 2 and appendix A).

Body 1 (the *orbiter*) and body 2 (the *payload*) are free rigid bodies; the arm between them
has no mass, so the joint-servo torques ``tau`` act on the two bodies only through the
end-effector load of eq 2-3,

    [F_e; M_e] = J^-T tau                                   (eq 2-3, sdjax order),

applied to the payload at the end-effector tip, and its opposite applied to the orbiter at the
same point (the interaction loads of subroutine RMSFM). Each body obeys Newton's and Euler's
equations (eqs 2-4 .. 2-9) with its own quaternion; the joint angles follow from the relative
motion of the bodies,

    V_R = B1^T (dR2/dt - dR1/dt) + p1 x w1 - B12 (p2 x w2)   (eq 2-10),
    w_R = B12 w2 - w1                                        (eq 2-11),
    dtheta/dt = J^-1 [V_R; w_R]                              (eq 2-12),

and the payload attitude and position follow from the orbiter's through the arm,
``B2 = B1 B12`` (eq 2-13) with ``B12`` the chain orbiter -> longeron -> joints -> end
effector -> payload (eq 2-14). Like the seed, the simulation integrates both bodies and the
joint angles; :func:`closure_error` measures how well eq 2-13 still holds (integration error
only).

Conventions (the rest of sdjax's): SI units; quaternions scalar-last ``(x, y, z, w)`` of the
body-to-inertial rotation (the seed's ``B1``, ``B2``); linear and angular velocities of the
bodies, external forces and moments in the **inertial** frame (the seed writes ``F1``, ``M1``,
``w1`` in body axes; Euler's equations are evaluated in body axes internally, as eqs 2-5 and
2-9). Six-vectors are ``[linear; angular]`` (``[V_R; w_R]``, ``[F_e; M_e]``) as sdjax's
Jacobians; the seed orders them ``[angular; linear]`` (``{w_R; V_R}``, ``{M_e; F_e}``), which
is the same physics with the rows swapped.

The arm is described by an sdjax :class:`~sdjax.Model` whose base is the orbiter (its base mass
and inertia are the orbiter's, its base centroid the orbiter's centre of mass), with six joints
in a chain and end point 0 at the end-effector tip; its link masses are ignored here (they are
used by :func:`full_multibody_model`, the reference this approximation is validated against).
The first joint frame's fixed rotation ``joint_rpy[0]`` is the orbiter -> longeron
transformation ``T_LB`` of eq 2-14 and ``parent_centroid_to_joint[0]`` the shoulder position.

Singular arm configurations. ``J^-1`` and ``J^-T`` are computed by
:func:`sdjax.damped_least_squares` with the system's ``singular_threshold`` and
``max_damping``: where the smallest singular value of ``J`` is at least the threshold the
result is the exact inverse; below it, a damped least-squares solution (bounded, never NaN)
is used. ``simulate_two_body(..., check=True)`` and :func:`check_configuration` raise instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from sdjax.algebra import matmul
from sdjax.editing import merge_payload
from sdjax.solvers import solve_damped_least_squares
from sdjax.integrate import runge_kutta4
from sdjax.jacobians import jacobians_at_points
from sdjax.kinematics import end_point_frames, forward_kinematics, joint_motion_axes, relative_frames
from sdjax.model import Model, check_inertia
from sdjax.rotation import (
    matrix_to_quat,
    matrix_to_rotation_vector,
    quat_normalize,
    quat_rate,
    quat_to_matrix,
    rpy_to_matrix,
    skew,
)
from sdjax._checks import check_count, check_type, check_vector, is_traced, rotation_matrix
from sdjax.state import State, make_state

__all__ = [
    "MAX_DAMPING",
    "SINGULAR_THRESHOLD",
    "ArmKinematics",
    "ExternalLoads",
    "InteractionLoads",
    "MasslessArmState",
    "MasslessArmSystem",
    "MasslessArmTrajectory",
    "arm_kinematics",
    "check_configuration",
    "closure_error",
    "end_effector_wrench",
    "full_multibody_model",
    "interaction_loads",
    "joint_rates",
    "joint_space_inertia",
    "make_loads",
    "make_massless_state",
    "momentum",
    "multibody_payload_pose",
    "multibody_state",
    "payload_pose",
    "relative_velocity",
    "simulate_two_body",
    "smallest_singular_value",
    "two_body_kinetic_energy",
    "two_body_rk4_step",
    "two_body_state_derivative",
]

#: Default singularity handling of ``J^-1`` / ``J^-T`` (units of ``J``: m for the linear rows,
#: 1 for the angular rows). A 15 m arm has singular values of order 0.1-10 away from
#: singularities; below 1e-4 the damped solution (damping up to 1e-3) takes over, which bounds
#: ``|J^-T tau|`` by ``|tau| / 2e-3`` at an exact singularity instead of producing inf/NaN.
SINGULAR_THRESHOLD = 1e-4
#: Default largest damping of that damped least-squares solution (see :data:`SINGULAR_THRESHOLD`).
MAX_DAMPING = 1e-3


class MasslessArmSystem(eqx.Module):
    """Orbiter, massless six-joint arm and payload (seed 004 section 2).

    Attributes:
        arm: sdjax :class:`~sdjax.Model` of the orbiter (base) and the arm: six joints in a
            chain (``parent = (0, 1, 2, 3, 4, 5)``), end point 0 on link 6 = end-effector tip
            and end-effector frame. ``arm.base_mass`` (kg) and ``arm.base_inertia`` (kg m^2,
            orbiter body frame, about its centre of mass) are the orbiter's ``m1`` and ``A1``;
            link masses are not used by the massless equations.
        payload_mass: ``()`` ``m2``, kg.
        payload_inertia: ``(3, 3)`` ``A2`` about the payload centre of mass, payload frame, kg m^2.
        payload_to_tip: ``(3,)`` ``p2``: from the payload centre of mass to the end-effector
            tip, payload frame, m.
        payload_rotation: ``(3, 3)`` rotation of the payload frame relative to the end-effector
            frame (``v_EE = payload_rotation @ v_payload``), i.e. ``T_PE^T`` of eq 2-14.
        singular_threshold, max_damping: ``()`` singularity handling of ``J^-1``, ``J^-T``
            (see the module docstring).
    """

    arm: Model
    payload_mass: Array
    payload_inertia: Array
    payload_to_tip: Array
    payload_rotation: Array
    singular_threshold: Array
    max_damping: Array

    def __init__(
        self,
        arm: Model,
        payload_mass: Any,
        payload_inertia: Any,
        payload_to_tip: Any = None,
        payload_rotation: Any = None,
        *,
        singular_threshold: Any = SINGULAR_THRESHOLD,
        max_damping: Any = MAX_DAMPING,
    ):
        check_type("MasslessArmSystem.arm", arm, Model, "an sdjax Model")
        if arm.base != "floating":
            raise ValueError(
                f"MasslessArmSystem.arm: the orbiter floats freely; model {arm.name!r} has a {arm.base} base"
            )
        dtype = arm.dtype
        self.arm = arm

        def array(name, value, shape, default):
            value = default if value is None else value
            try:
                arr = jnp.asarray(value)
            except (TypeError, ValueError) as err:
                raise ValueError(f"MasslessArmSystem.{name}: cannot convert to a numeric array ({err})") from None
            if arr.shape != shape:
                raise ValueError(f"MasslessArmSystem.{name}: expected shape {shape}, got {arr.shape}")
            return arr.astype(dtype)

        self.payload_mass = array("payload_mass", payload_mass, (), None)
        self.payload_inertia = array("payload_inertia", payload_inertia, (3, 3), None)
        self.payload_to_tip = array("payload_to_tip", payload_to_tip, (3,), np.zeros(3))
        self.payload_rotation = array("payload_rotation", payload_rotation, (3, 3), np.eye(3))
        self.singular_threshold = array("singular_threshold", singular_threshold, (), None)
        self.max_damping = array("max_damping", max_damping, (), None)

    def __check_init__(self):
        arm = self.arm
        if arm.num_joints != 6 or arm.parent != (0, 1, 2, 3, 4, 5):
            raise ValueError(
                f"MasslessArmSystem.arm: expected a six-joint serial chain (parent (0, 1, 2, 3, 4, 5)) so that the "
                f"arm Jacobian is square (eqs 2-3, 2-12), got parent {arm.parent}"
            )
        if arm.num_end_points < 1 or arm.end_point_link[0] != 6:
            raise ValueError(
                f"MasslessArmSystem.arm: end point 0 must be the end-effector tip on link 6, got end points on links {arm.end_point_link}"
            )
        leaves = (
            self.payload_mass,
            self.payload_inertia,
            self.payload_to_tip,
            self.payload_rotation,
            self.singular_threshold,
            self.max_damping,
        )
        if is_traced(*leaves):
            return
        for name, value in zip(
            (
                "payload_mass",
                "payload_inertia",
                "payload_to_tip",
                "payload_rotation",
                "singular_threshold",
                "max_damping",
            ),
            leaves,
        ):
            if not np.all(np.isfinite(np.asarray(value, np.float64))):
                raise ValueError(f"MasslessArmSystem.{name}: value is not finite ({np.asarray(value).tolist()})")
        if not float(self.payload_mass) > 0:
            raise ValueError(f"MasslessArmSystem.payload_mass: mass must be positive, got {float(self.payload_mass)}")
        check_inertia("payload_inertia", "the payload", np.asarray(self.payload_inertia, np.float64))
        rotation_matrix("MasslessArmSystem.payload_rotation", self.payload_rotation)
        for name in ("singular_threshold", "max_damping"):
            if not float(getattr(self, name)) >= 0:
                raise ValueError(f"MasslessArmSystem.{name}: must be non-negative, got {float(getattr(self, name))}")

    @property
    def dtype(self) -> Any:
        return self.arm.dtype

    @property
    def orbiter_mass(self) -> Array:
        """``m1``, kg (``arm.base_mass``)."""
        return self.arm.base_mass

    @property
    def orbiter_inertia(self) -> Array:
        """``A1`` (3, 3), orbiter body frame, kg m^2 (``arm.base_inertia``)."""
        return self.arm.base_inertia


class MasslessArmState(eqx.Module):
    """State of the orbiter-arm-payload system (a pytree; batch with ``jax.vmap``).

    Attributes:
        orbiter_position: ``(3,)`` ``R1``, orbiter centre of mass, inertial frame, m.
        orbiter_quaternion: ``(4,)`` scalar-last quaternion of ``B1`` (orbiter body to inertial).
        orbiter_velocity: ``(3,)`` ``dR1/dt``, inertial frame, m/s.
        orbiter_angular_velocity: ``(3,)`` ``w1``, inertial frame, rad/s.
        payload_position: ``(3,)`` ``R2``, payload centre of mass, inertial frame, m.
        payload_quaternion: ``(4,)`` quaternion of ``B2`` (payload body to inertial).
        payload_velocity: ``(3,)`` ``dR2/dt``, inertial frame, m/s.
        payload_angular_velocity: ``(3,)`` ``w2``, inertial frame, rad/s.
        q: ``(6,)`` joint angles ``theta``, rad (integrated from eq 2-12).
    """

    orbiter_position: Array
    orbiter_quaternion: Array
    orbiter_velocity: Array
    orbiter_angular_velocity: Array
    payload_position: Array
    payload_quaternion: Array
    payload_velocity: Array
    payload_angular_velocity: Array
    q: Array

    def __check_init__(self):
        for field in self.__dataclass_fields__:
            size = 4 if field.endswith("quaternion") else 6 if field == "q" else 3
            shape = jnp.shape(getattr(self, field))
            if shape != (size,):
                raise ValueError(
                    f"MasslessArmState.{field}: expected shape ({size},), got {shape} (batch states with jax.vmap)"
                )


class ExternalLoads(eqx.Module):
    """External loads and gravity on the two bodies (inputs of eqs 2-4, 2-5, 2-8, 2-9).

    All ``(3,)``, inertial frame: forces in N, moments about each body's centre of mass in
    N m, gravitational accelerations ``g1``, ``g2`` in m/s^2 (they may differ: gravity gradient).
    """

    orbiter_force: Array
    orbiter_moment: Array
    payload_force: Array
    payload_moment: Array
    orbiter_gravity: Array
    payload_gravity: Array


def make_loads(
    dtype: Any = None,
    *,
    orbiter_force: Any = None,
    orbiter_moment: Any = None,
    payload_force: Any = None,
    payload_moment: Any = None,
    orbiter_gravity: Any = None,
    payload_gravity: Any = None,
) -> ExternalLoads:
    """:class:`ExternalLoads` with shape checks; omitted entries are zero."""
    dtype = jnp.result_type(float) if dtype is None else dtype
    values = dict(
        orbiter_force=orbiter_force,
        orbiter_moment=orbiter_moment,
        payload_force=payload_force,
        payload_moment=payload_moment,
        orbiter_gravity=orbiter_gravity,
        payload_gravity=payload_gravity,
    )
    return ExternalLoads(**{k: check_vector(f"make_loads: {k}", v, (3,), dtype) for k, v in values.items()})


# ------------------------------------------------------------------------------------------
# Arm kinematics in the orbiter frame (appendix A, eq 2-14).


class ArmKinematics(eqx.Module):
    """The arm seen from the orbiter, all in the orbiter body frame, positions from its CM.

    Attributes:
        tip_position: ``(3,)`` ``p1``, orbiter CM to end-effector tip, m.
        tip_rotation: ``(3, 3)`` end-effector frame to orbiter frame.
        jacobian: ``(6, 6)`` ``J``: ``[V_R; w_R] = J dtheta/dt`` (eq 2-2 / A-13, rows
            ``[linear; angular]``).
        joint_position: ``(6, 3)`` joint origins, m.
        joint_axis: ``(6, 3)`` unit joint axes.
        link_rotation: ``(7, 3, 3)`` body frames (0 = orbiter = identity, 1..6 = links) to
            orbiter frame.
    """

    tip_position: Array
    tip_rotation: Array
    jacobian: Array
    joint_position: Array
    joint_axis: Array
    link_rotation: Array


def _check_q(q: Any, dtype: Any) -> Array:
    return check_vector("joint angles q", q, (6,), dtype)


def arm_kinematics(system: MasslessArmSystem, q: Any) -> ArmKinematics:
    """Forward kinematics and Jacobian of the arm in the orbiter frame (appendix A).

    The Jacobian columns are ``[u_j x (p1 - r_j); u_j]`` (eq A-5 / A-14 with the rows
    swapped to ``[linear; angular]``), computed by sdjax's Jacobian code on ``system.arm`` with
    the orbiter frame as the reference frame.

    Arguments:
        system: the system.
        q: ``(6,)`` joint angles, rad.

    Returns:
        :class:`ArmKinematics`.
    """
    return _arm_kinematics(system.arm, _check_q(q, system.dtype))


def _arm_kinematics(arm: Model, q: Array) -> ArmKinematics:
    """:func:`arm_kinematics` of an arm model (orbiter = base) at ``q`` ``(6,)``."""
    frames = relative_frames(arm, jnp.eye(3, dtype=q.dtype), q)
    axes = joint_motion_axes(arm, frames)
    tip_position, tip_rotation = end_point_frames(arm, frames)
    jac = jacobians_at_points(arm, axes, np.array([arm.end_point_link[0]]), tip_position[:1])[0][:, 6:]
    return ArmKinematics(
        tip_position=tip_position[0],
        tip_rotation=tip_rotation[0],
        jacobian=jac,
        joint_position=frames.joint_position,
        joint_axis=frames.joint_axis,
        link_rotation=frames.rotation,
    )


def _solve(system: MasslessArmSystem, matrix: Array, rhs: Array) -> Array:
    """``matrix^-1 rhs`` with the system's damped fallback near singularities."""
    return solve_damped_least_squares(matrix, rhs, system.singular_threshold, system.max_damping, None).solution


def smallest_singular_value(system: MasslessArmSystem, q: Any) -> Array:
    """``()`` smallest singular value of ``J(q)`` (0 at a singular configuration)."""
    jac = arm_kinematics(system, q).jacobian
    return jnp.linalg.svd(jac, compute_uv=False)[-1]


def check_configuration(system: MasslessArmSystem, q: Any) -> None:
    """Raise ``ValueError`` if the arm is within ``singular_threshold`` of a singularity at
    ``q`` (eager; inside ``jit`` use ``simulate_two_body(..., check=True)``)."""
    sigma = float(smallest_singular_value(system, q))
    if not sigma >= float(system.singular_threshold):
        raise ValueError(
            f"massless arm: singular configuration at q = {np.round(np.asarray(q, np.float64), 6).tolist()}: smallest "
            f"singular value of J is {sigma:.3g} < singular_threshold {float(system.singular_threshold):.3g}; "
            "J^-1 (eq 2-12) and J^-T (eq 2-3) do not exist there"
        )


def end_effector_wrench(system: MasslessArmSystem, q: Any, tau: Any) -> Array:
    """End-effector load on the payload from the joint torques, eq 2-3: ``[F_e; M_e] = J^-T tau``.

    Arguments:
        system: the system.
        q: ``(6,)`` joint angles, rad.
        tau: ``(6,)`` joint-servo output torques, N m (on the outboard link, about ``+u_j``).

    Returns:
        ``(6,)`` ``[F_e (N); M_e (N m)]`` acting on the payload at the end-effector tip (moment
        about the tip), orbiter frame. The orbiter receives the opposite load at the same point.
    """
    kin = arm_kinematics(system, q)
    tau = check_vector("end_effector_wrench: tau", tau, (6,), kin.jacobian.dtype)
    return _solve(system, kin.jacobian.T, tau)


class InteractionLoads(eqx.Module):
    """Loads of the massless arm on the two bodies (subroutine RMSFM).

    Attributes:
        end_effector_force, end_effector_moment: ``(3,)`` ``F_e``, ``M_e`` on the payload at
            the tip, orbiter frame (eq 2-3).
        orbiter_force, orbiter_moment: ``(3,)`` ``F_R1 = -F_e`` and ``M_R1 = -M_e - p1 x F_e``
            (about the orbiter CM), orbiter frame.
        payload_force, payload_moment: ``(3,)`` ``F_R2 = B21 F_e`` and
            ``M_R2 = B21 M_e + p2 x F_R2`` (about the payload CM), payload frame.
    """

    end_effector_force: Array
    end_effector_moment: Array
    orbiter_force: Array
    orbiter_moment: Array
    payload_force: Array
    payload_moment: Array


def interaction_loads(system: MasslessArmSystem, state: MasslessArmState, tau: Any) -> InteractionLoads:
    """Interaction loads on orbiter and payload from the joint torques (eqs 2-3 .. 2-9, RMSFM).

    ``B21`` is taken from the two bodies' own attitudes (``B2^T B1``), so the loads are exactly
    equal and opposite in the inertial frame.
    """
    kin = arm_kinematics(system, state.q)
    tau = check_vector("interaction_loads: tau", tau, (6,), kin.jacobian.dtype)
    wrench = _solve(system, kin.jacobian.T, tau)
    force, moment = wrench[:3], wrench[3:]
    b21 = matmul(quat_to_matrix(state.payload_quaternion).T, quat_to_matrix(state.orbiter_quaternion))
    payload_force = matmul(b21, force)
    return InteractionLoads(
        end_effector_force=force,
        end_effector_moment=moment,
        orbiter_force=-force,
        orbiter_moment=-moment - jnp.cross(kin.tip_position, force),
        payload_force=payload_force,
        payload_moment=matmul(b21, moment) + jnp.cross(system.payload_to_tip.astype(force.dtype), payload_force),
    )


def relative_velocity(system: MasslessArmSystem, state: MasslessArmState) -> Array:
    """Velocity of the end-effector tip relative to the orbiter, eqs 2-10 and 2-11.

    Returns:
        ``(6,)`` ``[V_R (m/s); w_R (rad/s)]`` in the orbiter frame: the velocity of the tip (as
        carried by the payload) minus that of the orbiter point it passes through, and
        ``B12 w2 - w1`` (body-frame rates).
    """
    kin = arm_kinematics(system, state.q)
    return _relative_velocity(system, state, kin)


def _relative_velocity(system: MasslessArmSystem, state: MasslessArmState, kin: ArmKinematics) -> Array:
    b1 = quat_to_matrix(state.orbiter_quaternion)
    b2 = quat_to_matrix(state.payload_quaternion)
    p1 = matmul(b1, kin.tip_position)
    p2 = matmul(b2, system.payload_to_tip.astype(p1.dtype))
    w1, w2 = state.orbiter_angular_velocity, state.payload_angular_velocity
    tip_2 = state.payload_velocity + jnp.cross(w2, p2)
    tip_1 = state.orbiter_velocity + jnp.cross(w1, p1)
    return jnp.concatenate([matmul(b1.T, tip_2 - tip_1), matmul(b1.T, w2 - w1)])


def joint_rates(system: MasslessArmSystem, state: MasslessArmState) -> Array:
    """Joint rates from the relative motion of the two bodies, eq 2-12:
    ``dtheta/dt = J^-1 [V_R; w_R]``; ``(6,)`` rad/s."""
    kin = arm_kinematics(system, state.q)
    return _solve(system, kin.jacobian, _relative_velocity(system, state, kin))


def _euler_rate(inertia: Array, rotation: Array, omega: Array, moment: Array) -> Array:
    """Inertial ``dw/dt`` from Euler's equations in body axes: ``A dw_b/dt + w_b x A w_b = M_b``."""
    wb = matmul(rotation.T, omega)
    mb = matmul(rotation.T, moment)
    return matmul(rotation, jnp.linalg.solve(inertia, mb - jnp.cross(wb, matmul(inertia, wb))))


def two_body_state_derivative(
    system: MasslessArmSystem, state: MasslessArmState, tau: Any, loads: ExternalLoads | None = None
) -> MasslessArmState:
    """Time derivative of the state (a :class:`MasslessArmState` of rates), eqs 2-3 .. 2-12.

    Arguments:
        system: the system.
        state: the state.
        tau: ``(6,)`` joint-servo torques, N m.
        loads: external loads and gravity (default none).

    Returns:
        ``dR/dt``, quaternion rates (``1/2 [w, 0] * quat``, eq 2-6), accelerations from eqs
        2-4, 2-5, 2-8, 2-9, and ``dtheta/dt`` from eq 2-12.
    """
    dtype = state.q.dtype
    loads = make_loads(dtype) if loads is None else loads
    tau = check_vector("two_body_state_derivative: tau", tau, (6,), dtype)
    kin = arm_kinematics(system, state.q)
    b1 = quat_to_matrix(state.orbiter_quaternion)
    b2 = quat_to_matrix(state.payload_quaternion)
    wrench = _solve(system, kin.jacobian.T, tau)  # eq 2-3, orbiter frame
    force = matmul(b1, wrench[:3])  # F_e, inertial
    moment = matmul(b1, wrench[3:])  # M_e, inertial
    p1 = matmul(b1, kin.tip_position)
    p2 = matmul(b2, system.payload_to_tip.astype(dtype))
    m1, m2 = system.orbiter_mass.astype(dtype), system.payload_mass.astype(dtype)
    # eqs 2-4 and 2-8: translation (external forces in the inertial frame here).
    a1 = (loads.orbiter_force - force) / m1 + loads.orbiter_gravity
    a2 = (loads.payload_force + force) / m2 + loads.payload_gravity
    # eqs 2-5 and 2-9: rotation, Euler's equations in body axes.
    n1 = loads.orbiter_moment - moment - jnp.cross(p1, force)
    n2 = loads.payload_moment + moment + jnp.cross(p2, force)
    alpha1 = _euler_rate(system.orbiter_inertia.astype(dtype), b1, state.orbiter_angular_velocity, n1)
    alpha2 = _euler_rate(system.payload_inertia.astype(dtype), b2, state.payload_angular_velocity, n2)
    qd = _solve(system, kin.jacobian, _relative_velocity(system, state, kin))  # eq 2-12
    return MasslessArmState(
        orbiter_position=state.orbiter_velocity,
        orbiter_quaternion=quat_rate(state.orbiter_quaternion, state.orbiter_angular_velocity),
        orbiter_velocity=a1,
        orbiter_angular_velocity=alpha1,
        payload_position=state.payload_velocity,
        payload_quaternion=quat_rate(state.payload_quaternion, state.payload_angular_velocity),
        payload_velocity=a2,
        payload_angular_velocity=alpha2,
        q=qd,
    )


# ------------------------------------------------------------------------------------------
# States consistent with the arm (eqs 2-13, 2-14) and the closure diagnostic.


def payload_pose(
    system: MasslessArmSystem, orbiter_position: Any, orbiter_rotation: Any, q: Any
) -> tuple[Array, Array]:
    """Payload pose from the orbiter pose and the joint angles, eqs 2-13 and 2-14.

    ``B2 = B1 B12`` with ``B12`` = (orbiter -> longeron -> joints -> end effector) then
    ``payload_rotation``; ``R2 = R1 + B1 p1 - B2 p2``.

    Arguments:
        orbiter_position: ``(3,)`` ``R1``, m.
        orbiter_rotation: ``(3, 3)`` ``B1``.
        q: ``(6,)`` joint angles, rad.

    Returns:
        ``(R2 (3,), B2 (3, 3))``.
    """
    dtype = system.dtype
    r1 = check_vector("payload_pose: orbiter_position", orbiter_position, (3,), dtype)
    b1 = check_vector("payload_pose: orbiter_rotation", orbiter_rotation, (3, 3), dtype)
    kin = arm_kinematics(system, q)
    b2 = matmul(matmul(b1, kin.tip_rotation), system.payload_rotation)
    return r1 + matmul(b1, kin.tip_position) - matmul(b2, system.payload_to_tip), b2


def closure_error(system: MasslessArmSystem, state: MasslessArmState) -> tuple[Array, Array]:
    """How far the integrated payload pose is from the one the arm implies (eqs 2-13, 2-14).

    Returns:
        ``(position error (3,) m, attitude error (3,) rad)``, inertial frame: the integrated
        ``R2`` minus the arm's, and the rotation vector of ``B2 B2_arm^T``.
    """
    r2, b2 = payload_pose(system, state.orbiter_position, quat_to_matrix(state.orbiter_quaternion), state.q)
    attitude = matrix_to_rotation_vector(matmul(quat_to_matrix(state.payload_quaternion), b2.T))
    return state.payload_position - r2, attitude


def make_massless_state(
    system: MasslessArmSystem,
    *,
    q: Any,
    qd: Any = None,
    orbiter_position: Any = None,
    orbiter_rotation: Any = None,
    orbiter_velocity: Any = None,
    orbiter_angular_velocity: Any = None,
) -> MasslessArmState:
    """A state in which the payload sits where the arm holds it (eqs 2-13, 2-14) and moves
    with the given joint rates (eqs 2-10 .. 2-12 solved for the payload's velocity).

    Arguments:
        q, qd: ``(6,)`` joint angles (rad) and rates (rad/s, default 0).
        orbiter_position, orbiter_velocity, orbiter_angular_velocity: ``(3,)`` inertial (default 0).
        orbiter_rotation: ``(3, 3)`` ``B1`` (default identity).

    Returns:
        :class:`MasslessArmState`.
    """
    dtype = system.dtype
    q = _check_q(q, dtype)
    qd = check_vector("make_massless_state: qd", qd, (6,), dtype)
    r1 = check_vector("make_massless_state: orbiter_position", orbiter_position, (3,), dtype)
    b1 = (
        jnp.eye(3, dtype=dtype)
        if orbiter_rotation is None
        else check_vector("make_massless_state: orbiter_rotation", orbiter_rotation, (3, 3), dtype)
    )
    v1 = check_vector("make_massless_state: orbiter_velocity", orbiter_velocity, (3,), dtype)
    w1 = check_vector("make_massless_state: orbiter_angular_velocity", orbiter_angular_velocity, (3,), dtype)
    kin = arm_kinematics(system, q)
    r2, b2 = payload_pose(system, r1, b1, q)
    relative = matmul(kin.jacobian, qd)  # [V_R; w_R], orbiter frame
    w2 = w1 + matmul(b1, relative[3:])
    tip = v1 + jnp.cross(w1, matmul(b1, kin.tip_position)) + matmul(b1, relative[:3])
    v2 = tip - jnp.cross(w2, matmul(b2, system.payload_to_tip))
    return MasslessArmState(
        orbiter_position=r1,
        orbiter_quaternion=matrix_to_quat(b1),
        orbiter_velocity=v1,
        orbiter_angular_velocity=w1,
        payload_position=r2,
        payload_quaternion=matrix_to_quat(b2),
        payload_velocity=v2,
        payload_angular_velocity=w2,
        q=q,
    )


# ------------------------------------------------------------------------------------------
# Energy, momentum, effective joint inertia.


def two_body_kinetic_energy(system: MasslessArmSystem, state: MasslessArmState) -> Array:
    """``()`` kinetic energy of orbiter and payload (the arm has none), J."""
    total = jnp.zeros((), state.q.dtype)
    for m, inertia, quat, v, w in (
        (
            system.orbiter_mass,
            system.orbiter_inertia,
            state.orbiter_quaternion,
            state.orbiter_velocity,
            state.orbiter_angular_velocity,
        ),
        (
            system.payload_mass,
            system.payload_inertia,
            state.payload_quaternion,
            state.payload_velocity,
            state.payload_angular_velocity,
        ),
    ):
        wb = matmul(quat_to_matrix(quat).T, w)
        total = total + 0.5 * m * matmul(v, v) + matmul(0.5 * wb, matmul(inertia, wb))
    return total


def momentum(system: MasslessArmSystem, state: MasslessArmState) -> Array:
    """``(6,)`` ``[P; L]``: total linear momentum (kg m/s) and angular momentum about the
    inertial origin (kg m^2/s), inertial frame."""
    p = jnp.zeros((3,), state.q.dtype)
    angular = jnp.zeros((3,), state.q.dtype)
    for m, inertia, r, quat, v, w in (
        (
            system.orbiter_mass,
            system.orbiter_inertia,
            state.orbiter_position,
            state.orbiter_quaternion,
            state.orbiter_velocity,
            state.orbiter_angular_velocity,
        ),
        (
            system.payload_mass,
            system.payload_inertia,
            state.payload_position,
            state.payload_quaternion,
            state.payload_velocity,
            state.payload_angular_velocity,
        ),
    ):
        rot = quat_to_matrix(quat)
        p = p + m * v
        angular = angular + m * jnp.cross(r, v) + matmul(rot, matmul(inertia, matmul(rot.T, w)))
    return jnp.concatenate([p, angular])


def joint_space_inertia(system: MasslessArmSystem, state: MasslessArmState) -> Array:
    """Effective inertia of the relative motion seen at the joints, ``J^T Phi^-1 J`` (6, 6).

    ``Phi = sum_k T_k M_k^-1 T_k^T`` is the mobility of the tip (relative acceleration per unit
    end-effector load, orbiter frame) of the two free bodies, ``T_k = [[E, -p_k x], [0, E]]``
    the shift from body ``k``'s centre of mass to the tip. It is the free-floating generalized
    inertia ``H*`` (seed 003 eq 45) of the full model in the limit of a massless arm; use it to
    size joint-servo gains.
    """
    dtype = state.q.dtype
    kin = arm_kinematics(system, state.q)
    b1 = quat_to_matrix(state.orbiter_quaternion)
    b12 = matmul(b1.T, quat_to_matrix(state.payload_quaternion))
    eye, zero = jnp.eye(3, dtype=dtype), jnp.zeros((3, 3), dtype)
    mobility = jnp.zeros((6, 6), dtype)
    for m, inertia, lever in (
        (system.orbiter_mass, system.orbiter_inertia, kin.tip_position),
        (system.payload_mass, matmul(matmul(b12, system.payload_inertia), b12.T), matmul(b12, system.payload_to_tip)),
    ):
        shift = jnp.block([[eye, -skew(lever)], [zero, eye]])
        inverse_mass = jnp.block([[eye / m, zero], [zero, jnp.linalg.inv(inertia)]])
        mobility = mobility + matmul(matmul(shift, inverse_mass), shift.T)
    jac = kin.jacobian
    return matmul(jac.T, jnp.linalg.solve(mobility, jac))


# ------------------------------------------------------------------------------------------
# Integration.

ArmControl = Callable[[Array, Array, Array], Array]


def _normalize(state: MasslessArmState) -> MasslessArmState:
    return eqx.tree_at(
        lambda s: (s.orbiter_quaternion, s.payload_quaternion),
        state,
        (quat_normalize(state.orbiter_quaternion), quat_normalize(state.payload_quaternion)),
    )


def two_body_rk4_step(
    system: MasslessArmSystem, state: MasslessArmState, dt: Any, tau: Any, loads: ExternalLoads | None = None
) -> MasslessArmState:
    """One classical RK4 step with ``tau`` and ``loads`` held over the step; quaternions
    normalised at the end (sdjax's :func:`sdjax.integrate.runge_kutta4`)."""
    dtype = state.q.dtype
    loads = make_loads(dtype) if loads is None else loads
    new = runge_kutta4(lambda s, _: two_body_state_derivative(system, s, tau, loads), state, jnp.asarray(dt, dtype))
    return _normalize(new)


class MasslessArmTrajectory(eqx.Module):
    """Result of :func:`simulate_two_body`.

    Attributes:
        time: ``(N + 1,)`` s.
        states: :class:`MasslessArmState` with leading axis ``N + 1``.
        tau: ``(N, 6)`` joint torques held over each step, N m.
        joint_rates: ``(N, 6)`` ``dtheta/dt`` at the start of each step (eq 2-12), rad/s.
        wrench: ``(N, 6)`` ``[F_e; M_e]`` on the payload at the start of each step (eq 2-3),
            orbiter frame.
    """

    time: Array
    states: MasslessArmState
    tau: Array
    joint_rates: Array
    wrench: Array


@eqx.filter_jit
def simulate_two_body(
    system: MasslessArmSystem,
    initial_state: MasslessArmState,
    dt: Any,
    num_steps: int,
    control: ArmControl | Array | None = None,
    loads: ExternalLoads | None = None,
    *,
    t0: Any = 0.0,
    check: bool = False,
) -> MasslessArmTrajectory:
    """Simulate the orbiter-arm-payload system with RK4 and ``lax.scan`` (fixed steps).

    Arguments:
        system: the system.
        initial_state: state at ``t0`` (e.g. from :func:`make_massless_state`).
        dt: step, s.
        num_steps: ``N`` (static).
        control: joint-servo torques, held over each step (zero-order hold, as
            :func:`sdjax.rollout`): a function ``(t, q, qd) -> tau (6,)`` of the joint angles
            and rates (e.g. :class:`~sdjax.massless_arm.ArmController`), evaluated at the start
            of each step; an ``(N, 6)`` torque sequence; or ``None`` (zero torque).
        loads: external loads and gravity, constant (default none).
        t0: initial time, s.
        check: raise (``equinox.error_if``) if the arm comes within ``singular_threshold`` of a
            singular configuration or the state becomes non-finite.

    Returns:
        :class:`MasslessArmTrajectory`.
    """
    num_steps = check_count("simulate_two_body: num_steps", num_steps, 0)
    dtype = initial_state.q.dtype
    loads = make_loads(dtype) if loads is None else loads
    sequence = None
    if control is not None and not callable(control):
        sequence = jnp.asarray(control, dtype)
        if sequence.shape != (num_steps, 6):
            raise ValueError(
                f"simulate_two_body: torque sequence expected shape ({num_steps}, 6), got {sequence.shape}"
            )
    t0 = jnp.asarray(t0, dtype)
    dt = jnp.asarray(dt, dtype)

    def step(carry, applied):
        state, k = carry
        t = t0 + k.astype(dtype) * dt
        kin = arm_kinematics(system, state.q)
        qd = _solve(system, kin.jacobian, _relative_velocity(system, state, kin))
        if control is None:
            tau = jnp.zeros((6,), dtype)
        elif sequence is not None:
            tau = applied
        else:
            tau = check_vector("simulate_two_body: control output", control(t, state.q, qd), (6,), dtype)
        wrench = _solve(system, kin.jacobian.T, tau)
        new = two_body_rk4_step(system, state, dt, tau, loads)
        if check:
            sigma = jnp.linalg.svd(kin.jacobian, compute_uv=False)[-1]
            new = eqx.error_if(
                new,
                sigma < system.singular_threshold,
                "simulate_two_body: the arm reached a singular configuration (J^-1 does not exist)",
            )
            finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(new)]))
            new = eqx.error_if(new, ~finite, "simulate_two_body: the state became non-finite")
        return (new, k + 1), (new, tau, qd, wrench)

    (_, _), (states, tau, qd, wrench) = lax.scan(
        step, (initial_state, jnp.asarray(0, jnp.int32)), sequence, length=num_steps
    )
    history = jax.tree.map(lambda x0, xs: jnp.concatenate([x0[None], xs]), initial_state, states)
    time = t0 + jnp.arange(num_steps + 1, dtype=dtype) * dt
    return MasslessArmTrajectory(time=time, states=history, tau=tau, joint_rates=qd, wrench=wrench)


# ------------------------------------------------------------------------------------------
# The full multibody reference (section 1's checkout against a distributed-mass arm).


def full_multibody_model(system: MasslessArmSystem) -> Model:
    """The same system as an sdjax :class:`~sdjax.Model`: orbiter = base, the arm links with
    their own masses, the payload rigidly merged into link 6 (:func:`sdjax.merge_payload`).

    Its end point 0 stays the end-effector tip; the payload centre of mass is at
    ``tip - payload_rotation p2`` in the end-effector frame.
    """
    arm = system.arm
    tip_in_link = arm.centroid_to_end_point[0]  # from link 6 centroid, link 6 frame
    ee_in_link = rpy_to_matrix(arm.end_point_rpy[0])
    payload_in_link = matmul(ee_in_link, system.payload_rotation)  # payload frame -> link 6 frame
    centroid = tip_in_link - matmul(payload_in_link, system.payload_to_tip)
    inertia = matmul(matmul(payload_in_link, system.payload_inertia), payload_in_link.T)
    return merge_payload(arm, 6, system.payload_mass, centroid, inertia)


def multibody_state(system: MasslessArmSystem, state: MasslessArmState, qd: Any = None) -> State:
    """The sdjax :class:`~sdjax.State` of :func:`full_multibody_model` with the same orbiter
    motion and joint angles (joint rates from eq 2-12 unless given)."""
    qd = joint_rates(system, state) if qd is None else qd
    return make_state(
        system.arm,
        base_position=state.orbiter_position,
        base_quaternion=state.orbiter_quaternion,
        base_linear_velocity=state.orbiter_velocity,
        base_angular_velocity=state.orbiter_angular_velocity,
        q=state.q,
        qd=qd,
        dtype=state.q.dtype,
    )


def multibody_payload_pose(system: MasslessArmSystem, model: Model, state: State) -> tuple[Array, Array]:
    """Payload centre of mass ``(3,)`` and attitude ``B2 (3, 3)`` in a state of
    :func:`full_multibody_model` (from its end-effector frame, unaffected by the merge)."""
    kin = forward_kinematics(model, state)
    b2 = matmul(kin.end_point_rotation[0], system.payload_rotation)
    return kin.end_point_position[0] - matmul(b2, system.payload_to_tip), b2
