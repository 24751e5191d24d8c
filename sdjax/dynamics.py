"""Dynamics: recursive Newton-Euler, composite-rigid-body inertia matrix, forward dynamics.

The equation of motion (seed 000 eq 3.18) in SpaceDyn's coordinates is

    H(x) [dv0/dt; dw0/dt; qdd] + c(x, xd) = [F0; N0; tau + tau_passive] + J_e^T [F_e; T_e]

with the generalized velocity ``[v0, w0, qd]`` (base centroid velocity and base angular
velocity in the inertial frame), ``F0``/``N0`` the force and torque applied at the base
centroid, ``tau_passive = -K q - D qd`` the model's visco-elastic joint torques, and
``F_e``/``T_e`` forces and torques applied *to the robot* at its end points (inertial frame).
The bias ``c`` contains Coriolis, centrifugal and gravity terms.

Base modes (:data:`sdjax.BASE_MODES`). A planar or fixed base moves only along some components
of ``[v0, w0]``: the generalized velocity keeps those and ``qd`` (``model.velocity_indices``),
and the equations above are restricted to them, ``H_r = H[idx][:, idx]``, ``c_r = c[idx]``
(the other rows carry the bearing's or the mount's reaction and drop out; the projection of
Lagrange's equation onto the free coordinates). Inertia matrix, bias, generalized
acceleration and Jacobians are given in these coordinates; forward and inverse dynamics keep
their 6-vector base arguments, with the constrained components of the base acceleration zero.

Mimic joints (``model.mimic_leader``) restrict the joints the same way, with
``[v0, w0, qd] = G nu`` (``G``: the base mode's selection and
:func:`sdjax.model.joint_coordinate_map`): ``H_r = G^T H G``, ``c_r = G^T c``, applied loads
``G^T [F0; N0; tau]`` (a mimic joint's torque acts on its leader, multiplied). Joint vectors
(``qdd``, ``tau``) keep every joint: accelerations returned satisfy the mimic relations, and
inverse dynamics returns the coordinates' torques on the independent joints, zero on the mimic
ones (Pinocchio's ``rnea`` on its mimic models).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from sdjax import batch_kernel
from sdjax._derivatives import batched_evaluation, batched_route, jvp_along_nonzero, linearized_tangent
from sdjax.kinematics import (
    Frames,
    KinematicPass,
    base_spatial_acceleration,
    body_masses,
    body_spatial_accelerations,
    end_point_frames,
    kinematic_pass,
    point_acceleration,
    subtree_mass_moments,
    world_inertias,
)
from sdjax.model import (
    Model,
    floating_coordinates,
    free_coordinates,
    free_motion,
    leader_torques,
    on_independent_joints,
)
from sdjax.algebra import cross3, dot, matmul, matvec3, small_cho_solve, small_cholesky_factor, small_cholesky_solve
from sdjax.rotation import skew
from sdjax._checks import check_index, check_vector, is_traced
from sdjax.state import BASE_TWIST_NAMES, State, check_state, with_mimic_relations_checked
from sdjax.tree import accumulate_up


class Controls(eqx.Module):
    """Applied forces, held constant over an integration step.

    Attributes:
        tau: ``(n,)`` joint torques (N m) or forces (N), in addition to the passive ones.
        base_force: ``(3,)`` force on the base centroid, inertial frame, N.
        base_torque: ``(3,)`` torque on the base, inertial frame, N m.
        end_point_force: ``(ne, 3)`` force applied to the robot at each end point, inertial
            frame, N.
        end_point_torque: ``(ne, 3)`` torque applied to the robot at each end point, N m.
    """

    tau: Array
    base_force: Array
    base_torque: Array
    end_point_force: Array
    end_point_torque: Array


def make_controls(
    model: Model,
    tau: Any = None,
    base_force: Any = None,
    base_torque: Any = None,
    end_point_force: Any = None,
    end_point_torque: Any = None,
    dtype: Any = None,
) -> Controls:
    """Build :class:`Controls`, checking shapes; omitted entries are zero.

    Arguments:
        model: the system (``n`` joints, ``ne`` end points; its dtype is the default).
        tau: ``(n,)`` joint torques (N m) or forces (N), beside the passive ones.
        base_force: ``(3,)`` force on the base centroid, inertial frame, N.
        base_torque: ``(3,)`` torque on the base, inertial frame, N m.
        end_point_force: ``(ne, 3)`` force applied to the robot at each end point, inertial frame, N.
        end_point_torque: ``(ne, 3)`` torque applied to the robot at each end point, inertial frame, N m.
        dtype: floating dtype of the result (default: the model's).

    Returns:
        :class:`Controls` (batch them with ``jax.vmap``).
    """
    return _checked_controls(model, (tau, base_force, base_torque, end_point_force, end_point_torque), dtype, "")


def _checked_controls(model: Model, values: Sequence[Any], dtype: Any, prefix: str) -> Controls:
    """:class:`Controls` of ``values`` (its five fields in order; ``None``: zero), each of
    ``dtype`` (default: the model's) and checked for its shape; messages start ``prefix``."""
    dtype = model.dtype if dtype is None else dtype
    n, ne = model.num_joints, model.num_end_points
    shapes = ((n,), (3,), (3,), (ne, 3), (ne, 3))
    return Controls(
        *(check_vector(f"{prefix}{field}", value, shape, dtype) for field, value, shape in zip(_FIELDS, values, shapes))
    )


_FIELDS = ("tau", "base_force", "base_torque", "end_point_force", "end_point_torque")


def check_controls(model: Model, controls: Any, dtype: Any, what: str, *, optional: bool = False) -> Controls:
    """``controls`` checked for ``model`` (a :class:`Controls` whose fields have the shapes
    :func:`make_controls` requires: ``(n,)``, ``(3,)``, ``(3,)``, ``(ne, 3)``, ``(ne, 3)``),
    cast to ``dtype``; with ``optional``, ``None`` gives zero loads. The one check of a
    :class:`Controls` built directly, which every dynamics function and integrator step taking
    one passes through (shapes only: values are the hot-path inputs, as in :func:`check_vector`).

    Raises:
        TypeError: ``controls`` is no :class:`Controls` (naming ``what``).
        ValueError: a field of the wrong shape (e.g. the controls of another model).
    """
    if controls is None and optional:
        return make_controls(model, dtype=dtype)
    if not isinstance(controls, Controls):  # (an array is traced inside the jit: named an array)
        given = "an array" if isinstance(controls, (jax.Array, np.ndarray)) else type(controls).__name__
        raise TypeError(f"{what}: controls: expected a sdjax.Controls (sdjax.make_controls), got {given}")
    values = (getattr(controls, field) for field in _FIELDS)
    return _checked_controls(model, tuple(values), dtype, f"{what}: controls.")


def point_loads(
    model: Model, state: State, bodies: Sequence[int], points: Any, forces: Any, torques: Any = None
) -> Controls:
    """Generalized forces of loads applied at points of given bodies, as :class:`Controls`.

    The principle of virtual power: a force ``f`` at point ``p`` of a body and a couple ``n``
    on it do the power ``f . v_p + n . w`` = ``(J_p^T [f; n]) . [v0; w0; qd]``, so they enter
    the dynamics exactly as the base force ``sum f``, the base torque about the base centroid
    ``sum (p - r0) x f + n`` and the joint torques ``J_q^T [f; n]``. This is how environment
    loads (contact, gravity gradient, virtual springs) reach any body, not only end points.

    Arguments:
        model: the system.
        state: its state.
        bodies: ``m`` static body indices (0 = base, 1..n = links), one per load.
        points: ``(m, 3)`` points of application, inertial frame, absolute positions, m.
        forces: ``(m, 3)`` forces on the bodies, inertial frame, N.
        torques: ``(m, 3)`` couples on the bodies, inertial frame, N m (default zero).

    Returns:
        :class:`Controls` with ``tau``, ``base_force`` and ``base_torque`` set (end-point loads
        zero); add it to other controls with ``jax.tree.map(jnp.add, a, b)``.
    """
    check_state(model, state, "point_loads")
    try:  # (object entries: a float or a string stays what it is, and is refused below)
        given = np.asarray(bodies, dtype=object).reshape(-1)
    except Exception:  # a traced array (the indices select the program's structure)
        shown = "a traced value" if is_traced(bodies) else type(bodies).__name__
        raise TypeError(
            f"point_loads: bodies: expected static integer indices 0..{model.num_joints}, got {shown}"
        ) from None
    indices = np.asarray(
        [
            check_index(f"point_loads: bodies[{k}]", body, 0, model.num_joints, "0 = base, 1..n = links")
            for k, body in enumerate(given)
        ],
        dtype=np.int64,
    )
    m, dtype = len(indices), state.q.dtype
    points = check_vector("points", points, (m, 3), dtype)
    forces = check_vector("forces", forces, (m, 3), dtype)
    torques = check_vector("torques", torques, (m, 3), dtype)
    # Each load as a wrench [moment about r0; force] on its body, summed over subtrees (one
    # leaves-to-root pass, O(n + m)); joint j then receives axis_j . subtree wrench_j, i.e.
    # w_j . M_j + v_j . F_j with the joint's motion axis (w_j, v_j) about r0.
    offsets = points - state.base_position
    wrench = jnp.concatenate([torques + cross3(offsets, forces), forces], axis=-1)
    per_body = jnp.zeros((model.num_bodies, 6), dtype).at[jnp.asarray(indices, dtype=jnp.int32)].add(wrench)
    subtree = accumulate_up(model.tree, per_body)
    axes = kinematic_pass(model, state).axes
    generalized = jnp.concatenate([subtree[0, 3:], subtree[0, :3], dot(axes, subtree[1:])])
    return make_controls(
        model, tau=generalized[6:], base_force=generalized[:3], base_torque=generalized[3:6], dtype=dtype
    )


def generalized_loads(model: Model, state: State, controls: Controls) -> Array:
    """Generalized force of applied loads (no passive joint terms), ``(6 + n,)`` in floating
    order ``[F0, N0, tau]``: the base force and torque, the joint torques, and the end-point
    loads mapped by the principle of virtual power, ``J_e^T [F_e; T_e]`` (as in eq 3.29's
    right-hand side; end-point forces add to ``F0``, their moments about ``r0`` to ``N0``).
    Linear in ``controls``; what an implicit integrator differentiates to treat
    state-dependent loads implicitly."""
    check_state(model, state, "generalized_loads")
    controls = check_controls(model, controls, state.q.dtype, "generalized_loads")
    motion = kinematic_pass(model, state)
    subtree = accumulate_up(
        model.tree, _end_point_wrenches(model, motion.frames, controls.end_point_force, controls.end_point_torque)
    )
    return jnp.concatenate(
        [
            controls.base_force + subtree[0, 3:],
            controls.base_torque + subtree[0, :3],
            controls.tau + dot(motion.axes, subtree[1:]),
        ]
    )


def generalized_velocity(model: Model, state: State) -> Array:
    """``(num_velocities,)`` generalized velocity of the model's base mode: ``[v0, w0, qd]``
    (floating), ``[v0_x, v0_y, w0_z, qd]`` (planar) or ``qd`` (fixed). ``State`` always holds
    the whole base twist; see :func:`sdjax.state.check_base_motion`. With mimic joints, the
    independent joints' rates."""
    return free_motion(model, state.generalized_velocity)


def passive_joint_torques(model: Model, state: State) -> Array:
    """Visco-elastic joint torques ``-K q - D qd`` of the model's passive joints; ``(n,)``."""
    return -model.joint_stiffness * state.q - model.joint_damping * state.qd


# ------------------------------------------------------------------------------------------
# Recursive Newton-Euler (eqs 3.30-3.39).


def _applied_loads(model: Model, state: State, controls: Controls) -> Array:
    """``[F0; N0; tau + tau_passive]`` (6 + n,): eq 3.18's applied loads on the base and the
    joints, the passive joint torques included (the end-point loads enter the Newton-Euler pass
    as external wrenches instead)."""
    return jnp.concatenate(
        [controls.base_force, controls.base_torque, controls.tau + passive_joint_torques(model, state)]
    )


def _end_point_wrenches(model: Model, frames: Frames, force: Array, torque: Array) -> Array:
    """``(n + 1, 6)`` external wrenches (moment about r0, force) per body from end-point loads."""
    position, _ = end_point_frames(model, frames)
    wrench = jnp.concatenate([torque + cross3(position, force), force], axis=-1)
    links = jnp.asarray(model.end_point_link, dtype=jnp.int32)
    return jnp.zeros((model.num_bodies, 6), wrench.dtype).at[links].add(wrench)


def _subtree_wrenches(model: Model, motion: KinematicPass, accelerations: Array, external_wrench: Array) -> Array:
    """``(n + 1, 6)`` wrench (moment about r0, force; inertial frame) each subtree needs for
    the given motion: row ``i >= 1`` is the load joint ``i`` transmits from the parent (eqs
    3.32-3.35), row 0 the whole system's (eqs 3.38-3.39 plus the base's own inertia).

    Per body (eqs 3.30-3.31): ``F_i = m_i (dv_i/dt - g)``, ``N_i = I_i dw_i/dt + w_i x I_i w_i``,
    taken about r0 and summed over each subtree (a sum of wrenches about one point needs no
    lever-arm bookkeeping). ``external_wrench`` ``(n + 1, 6)`` (moment about r0, force) is
    applied to the bodies and therefore subtracted.
    """
    r, twists = motion.frames.centroid, motion.twists
    angular_velocity, angular_acceleration = twists[:, :3], accelerations[:, :3]
    linear_acceleration = point_acceleration(accelerations, twists, r)
    force = body_masses(model)[:, None] * (linear_acceleration - model.gravity)
    inertia = world_inertias(model, motion.frames)
    momentum = matvec3(inertia, angular_velocity)
    moment = matvec3(inertia, angular_acceleration) + cross3(angular_velocity, momentum)
    wrench = jnp.concatenate([moment + cross3(r, force), force], axis=-1) - external_wrench
    return accumulate_up(model.tree, wrench)


def _newton_euler(model: Model, motion: KinematicPass, accelerations: Array, external_wrench: Array) -> Array:
    """Generalized force ``[F0, N0, tau]`` (6 + n,) that produces the given motion: the subtree
    wrenches (:func:`_subtree_wrenches`) projected on each joint's motion axis (eqs 3.36-3.37)
    and the whole sum at the base (eqs 3.38-3.39)."""
    subtree = _subtree_wrenches(model, motion, accelerations, external_wrench)
    tau = dot(motion.axes, subtree[1:])
    return jnp.concatenate([subtree[0, 3:], subtree[0, :3], tau])


def _motion(model: Model, state: State, base_acceleration: Array, qdd: Array) -> tuple[KinematicPass, Array]:
    """The kinematic pass at ``state`` and the ``(n + 1, 6)`` body spatial accelerations of the
    motion ``(base_acceleration, qdd)`` (eqs 3.10-3.11, 3.14-3.15)."""
    motion = kinematic_pass(model, state)
    accelerations = body_spatial_accelerations(
        model, motion.axes, motion.twists, base_spatial_acceleration(state, base_acceleration), state.qd, qdd
    )
    return motion, accelerations


@eqx.filter_jit
def inverse_dynamics(
    model: Model,
    state: State,
    base_acceleration: Any = None,
    qdd: Any = None,
    *,
    end_point_force: Any = None,
    end_point_torque: Any = None,
) -> tuple[Array, Array]:
    """Recursive Newton-Euler inverse dynamics with gravity (SpaceDyn ``r_ne``, eqs 3.30-3.39).

    Returns the base wrench and joint torques that produce the given accelerations, given
    the end-point loads and the model's passive joint torques:
    ``[F0; N0; tau] = H a + c - J_e^T [F_e; T_e] - [0; 0; tau_passive]``.

    Planar or fixed base: the constrained components of ``base_acceleration`` must be zero,
    and the base wrench returned includes the reaction of the bearing or mount (all of it
    for a fixed base: the load on the mounting interface).

    Sign convention: ``end_point_force``/``end_point_torque`` are applied **to** the robot
    (``F_h`` of eq 3.18), the same inputs :func:`forward_dynamics` takes, so that
    ``forward_dynamics(inverse_dynamics(a)) == a``. Eq 3.32's ``f_e`` is the opposite load (the
    force the hand exerts on its environment), as is ``Fe`` in SpaceDyn v2's ``r_ne``;
    :func:`sdjax.spacedyn.r_ne` keeps that sign.

    Arguments:
        model: the system.
        state: positions and velocities.
        base_acceleration: ``(6,)`` ``[dv0/dt, dw0/dt]`` of the base centroid, inertial frame
            (default zero).
        qdd: ``(n,)`` joint accelerations (default zero).
        end_point_force: ``(ne, 3)`` forces on the robot at the end points, inertial frame, N.
        end_point_torque: ``(ne, 3)`` torques on the robot at the end points, N m.

    Mimic joints (``model.mimic_leader``): ``qdd`` must follow the mimic relations, and the
    torque a mimic joint needs is carried by its leader (multiplied; zero on the mimic joint):
    ``tau`` is the generalized force of the joint coordinates (Pinocchio's ``rnea`` on a mimic
    model), on the independent joints.

    Returns:
        ``(base_wrench, tau)``: ``(6,)`` ``[F0, N0]`` (force at, and torque about, the base
        centroid, inertial frame) and ``(n,)`` actuator torques/forces.
    """
    inputs = _checked_motion_inputs(
        "inverse_dynamics", model, state, base_acceleration, qdd, end_point_force, end_point_torque
    )
    return _inverse_dynamics(model, state, *inputs)


def _newton_euler_inverse(
    model: Model,
    state: State,
    base_acceleration: Array,
    qdd: Array,
    end_point_force: Array,
    end_point_torque: Array,
) -> tuple[Array, Array]:
    """:func:`inverse_dynamics` of checked inputs (eqs 3.30-3.39)."""
    motion, accelerations, external = _motion_and_loads(
        model, state, base_acceleration, qdd, end_point_force, end_point_torque
    )
    force = _newton_euler(model, motion, accelerations, external)
    return force[:6], leader_torques(model, force[6:] - passive_joint_torques(model, state))


def _checked_motion(what, model, state, base_acceleration, qdd, end_point_force, end_point_torque):
    """Checked inputs of inverse dynamics and joint loads, and the motion they describe:
    ``(kinematic pass, body spatial accelerations, external wrenches)``."""
    inputs = _checked_motion_inputs(what, model, state, base_acceleration, qdd, end_point_force, end_point_torque)
    return _motion_and_loads(model, state, *inputs)


def _checked_motion_inputs(what, model, state, base_acceleration, qdd, end_point_force, end_point_torque):
    """``(base_acceleration, qdd, end_point_force, end_point_torque)`` checked (shapes, dtype,
    the base mode's fixed components, mimic relations) and defaulted to zero."""
    check_state(model, state, what)
    dtype = state.q.dtype
    n, ne = model.num_joints, model.num_end_points
    base_acceleration = check_vector("base_acceleration", base_acceleration, (6,), dtype)
    if model.base != "floating":  # (inside jit: checked when the program runs)
        fixed = [k for k in range(6) if k not in model.base_coordinates]
        base_acceleration = eqx.error_if(
            base_acceleration,
            jnp.any(base_acceleration[jnp.asarray(fixed)] != 0),
            f"{what}: the {model.base} base cannot accelerate along "
            f"{', '.join('d' + BASE_TWIST_NAMES[k] + '/dt' for k in fixed)}: give zero there",
        )
    qdd = check_vector("qdd", qdd, (n,), dtype)
    qdd = with_mimic_relations_checked(model, what, "qdd", qdd)  # (inside jit: when the program runs)
    end_point_force = check_vector("end_point_force", end_point_force, (ne, 3), dtype)
    end_point_torque = check_vector("end_point_torque", end_point_torque, (ne, 3), dtype)
    return base_acceleration, qdd, end_point_force, end_point_torque


def _motion_and_loads(model, state, base_acceleration, qdd, end_point_force, end_point_torque):
    """``(kinematic pass, body spatial accelerations, external wrenches)`` of checked inputs."""
    motion, accelerations = _motion(model, state, base_acceleration, qdd)
    return motion, accelerations, _end_point_wrenches(model, motion.frames, end_point_force, end_point_torque)


class JointLoads(eqx.Module):
    """Loads transmitted through every joint (SpaceDyn's ``f_i``, ``n_i``, eqs 3.32-3.35): what
    the parent exerts on the subtree of link ``i`` through joint ``i``, gravity included.

    Attributes:
        force: ``(n, 3)`` force ``f_i``, inertial frame, N.
        moment: ``(n, 3)`` moment ``n_i`` about the joint point (the origin of joint frame
            ``i``; for a prismatic joint the slider origin at zero displacement, on the
            parent, as eq 3.35), inertial frame, N m.
        force_joint_frame, moment_joint_frame: the same in link ``i``'s frame (joint axis
            ``z``): the axial component along ``z`` is the actuator plus passive load
            ``tau_i + tau_passive_i`` of that joint (eqs 3.36-3.37), the rest the bearing's.
    """

    force: Array
    moment: Array
    force_joint_frame: Array
    moment_joint_frame: Array


@eqx.filter_jit
def joint_reaction_loads(
    model: Model,
    state: State,
    base_acceleration: Any = None,
    qdd: Any = None,
    *,
    end_point_force: Any = None,
    end_point_torque: Any = None,
) -> JointLoads:
    """Force and moment every joint transmits (SpaceDyn ``inner_force``; eqs 3.32-3.35), for
    the motion ``(base_acceleration, qdd)`` under the end-point loads, as
    :func:`inverse_dynamics` takes them. For the loads of a simulated motion pass the
    accelerations :func:`forward_dynamics` returns for the applied torques and loads.

    Arguments:
        model, state, base_acceleration, qdd, end_point_force, end_point_torque: as
            :func:`inverse_dynamics` (planar and fixed bases included).

    Returns:
        :class:`JointLoads`.
    """
    motion, accelerations, external = _checked_motion(
        "joint_reaction_loads", model, state, base_acceleration, qdd, end_point_force, end_point_torque
    )
    subtree = _subtree_wrenches(model, motion, accelerations, external)[1:]
    force = subtree[:, 3:]
    moment = subtree[:, :3] - cross3(motion.frames.joint_position, force)  # from about r0 to about the joint
    to_link = jnp.swapaxes(motion.frames.rotation[1:], -1, -2)
    return JointLoads(force, moment, matvec3(to_link, force), matvec3(to_link, moment))


@eqx.filter_jit
def floating_inverse_dynamics(
    model: Model,
    state: State,
    qdd: Any = None,
    *,
    base_force: Any = None,
    base_torque: Any = None,
    end_point_force: Any = None,
    end_point_torque: Any = None,
) -> tuple[Array, Array]:
    """Joint torques and base acceleration for given joint accelerations and a given base
    wrench (SPART's ``Floating_ID``): the base moves as the loads make it, the joints as asked.

    Inverse dynamics is affine in the base acceleration ``a``: its base rows are
    ``H_b a + w(0)`` with ``w(0)`` those rows at ``a = 0``, so ``a = H_b^-1 ([F0; N0] - w(0))``
    (free base coordinates; zero along those a planar or fixed base holds), and the joint
    torques follow from one more product with ``H_bm^T``. Inverse of :func:`forward_dynamics`:
    ``forward_dynamics(model, state, tau, base_force=F0, base_torque=N0)`` returns
    ``(a, qdd)``.

    Arguments:
        model, state: the system and its state.
        qdd: ``(n,)`` joint accelerations (default zero).
        base_force, base_torque: ``(3,)`` force on and torque about the base centroid,
            inertial frame (default zero: free floating). On a planar or fixed base only the
            components along the free directions act; the mount takes the rest.
        end_point_force, end_point_torque: as :func:`inverse_dynamics`.

    Returns:
        ``(base_acceleration (6,), tau (n,))``: inertial frame; the actuator torques/forces
        (passive torques excluded, as :func:`inverse_dynamics`).
    """
    check_state(model, state, "floating_inverse_dynamics")
    dtype = state.q.dtype
    applied = jnp.concatenate(
        [check_vector("base_force", base_force, (3,), dtype), check_vector("base_torque", base_torque, (3,), dtype)]
    )
    wrench, tau = inverse_dynamics(
        model, state, None, qdd, end_point_force=end_point_force, end_point_torque=end_point_torque
    )
    nb = model.num_base_velocities
    if nb == 0:
        return jnp.zeros((6,), dtype), tau
    h = inertia_matrix(model, state)
    index = jnp.asarray(model.base_coordinates)
    free = small_cholesky_solve(h[:nb, :nb], applied[index] - wrench[index])  # (no LAPACK call: see it)
    coupled = on_independent_joints(model, matmul(h[:nb, nb:].T, free))
    return jnp.zeros((6,), dtype).at[index].set(free), tau + coupled


@eqx.filter_jit
def bias_forces(model: Model, state: State) -> Array:
    """Velocity-dependent and gravity forces ``c`` (``num_velocities``,: ``6 + n`` for a
    floating base): inverse dynamics at zero acceleration with no applied loads (SpaceDyn's
    ``Force0``; Pinocchio's ``nle``), in the base mode's coordinates.

    Passive joint torques are not included (they are applied forces)."""
    check_state(model, state, "bias_forces")
    return _free_bias_forces(model, state)


def _plain_free_bias_forces(model: Model, state: State) -> Array:
    """:func:`bias_forces` of a checked state (the per-sample JAX code)."""
    zero = jnp.zeros(6 + model.num_joints, state.q.dtype)
    motion, accelerations = _motion(model, state, zero[:6], zero[6:])
    bias = _newton_euler(model, motion, accelerations, jnp.zeros((model.num_bodies, 6), zero.dtype))
    return free_coordinates(model, bias)


def _batched_bias_forces(
    axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Callable[[list[Any]], Any]
) -> Any:
    """Batched evaluation of :func:`_plain_free_bias_forces` (primal values only): the
    kernel's inverse dynamics at zero accelerations, no loads and no passive joints where it
    serves (:func:`kernel_serves`), otherwise one vectorised program."""
    model, state = args
    if not kernel_serves(model, mapped, axis_size):
        return jax.vmap(lambda leaves: _plain_free_bias_forces(*rebuild(leaves)), axis_size=axis_size)(mapped)
    model_batched, state_batched = in_batched
    dtype = state.q.dtype
    n, ne = model.num_joints, model.num_end_points
    unsprung = eqx.tree_at(
        lambda m: (m.joint_stiffness, m.joint_damping), model, (jnp.zeros(n, dtype), jnp.zeros(n, dtype))
    )
    unsprung_batched = eqx.tree_at(lambda m: (m.joint_stiffness, m.joint_damping), model_batched, (False, False))
    wrench, tau = batch_kernel.inverse_dynamics(
        axis_size,
        unsprung,
        state,
        jnp.zeros(6, dtype),
        jnp.zeros(n, dtype),
        jnp.zeros((ne, 3), dtype),
        jnp.zeros((ne, 3), dtype),
        (unsprung_batched, state_batched, False, False, False, False),
    )
    return free_coordinates(model, jnp.concatenate([wrench, tau], axis=-1), -1)


_free_bias_forces = batched_route(_plain_free_bias_forces, _batched_bias_forces)


# ------------------------------------------------------------------------------------------
# Inertia matrix by composite rigid bodies (eqs 3.18-3.28).


def inertia_matrix_from_frames(model: Model, frames: Frames, axes: Array) -> Array:
    """``(6 + n, 6 + n)`` inertia matrix from subtree (composite) mass moments.

    For joint ``i`` moving alone at unit rate, the subtree it carries has linear momentum
    ``h_i = M_i v_o + w x s_i`` and angular momentum about r0 ``L_i = J_i w + s_i x v_o``
    (``M_i``, ``s_i``, ``J_i``: subtree mass, first moment and inertia about r0; ``(w, v_o)`` its
    motion axis). Then ``H_m[j, i] = s_j . (L_i, h_i)`` for ``j`` on the path to ``i``,
    ``H_bm[:, i] = [h_i; L_i]``, and ``H_b = [[w E, -skew(s_0)], [skew(s_0), J_0]]`` for the whole
    system (eqs 3.19-3.21; ``s_0 = w r_0g``). O(n^2) work instead of the O(n^3) Jacobian
    products of eqs 3.22-3.23. Internal building block shared with :mod:`sdjax.control`
    (callers that already hold the frames and axes); the public entry is :func:`inertia_matrix`.
    """
    mass, first_moment, inertia = subtree_mass_moments(model, frames)
    w, v = axes[:, :3], axes[:, 3:]
    links_mass, links_first, links_inertia = mass[1:], first_moment[1:], inertia[1:]
    linear = links_mass[:, None] * v + cross3(w, links_first)
    angular = matvec3(links_inertia, w) + cross3(links_first, v)
    # coupling[j, i] = s_j . momentum_i, kept where joint j supports link i.
    # Written as six products (not a dot or a reduction: faster for tiny sizes on CPU).
    coupling = sum(w[:, None, a] * angular[None, :, a] + v[:, None, a] * linear[None, :, a] for a in range(3))
    upper = coupling * jnp.asarray(model.tree.support.T, coupling.dtype)
    h_m = upper + upper.T - jnp.diag(jnp.diagonal(coupling))
    h_bm = jnp.concatenate([linear, angular], axis=-1).T
    s0 = skew(first_moment[0])
    eye = jnp.eye(3, dtype=s0.dtype)
    h_b = jnp.block([[mass[0] * eye, -s0], [s0, inertia[0]]])
    return jnp.block([[h_b, h_bm], [h_bm.T, h_m]])


def floating_inertia_matrix(model: Model, state: State) -> Array:
    """``(6 + n, 6 + n)`` inertia matrix of the floating-base layout ``[v0, w0, qd]`` whatever the
    base mode (its first six rows give the system momentum about the base centroid for any
    base motion). Internal building block; the public entry is :func:`inertia_matrix`."""
    motion = kinematic_pass(model, state)
    return inertia_matrix_from_frames(model, motion.frames, motion.axes)


@eqx.filter_jit
def inertia_matrix(model: Model, state: State) -> Array:
    """System inertia matrix ``H`` (SpaceDyn ``calc_hh``, eqs 3.18-3.28), by composite bodies.

    Arguments:
        model: the system.
        state: its state (only positions are used).

    Returns:
        ``(nv, nv)`` symmetric positive-definite matrix for the generalized velocity (``nv =
        model.num_velocities``): ``[v0, w0, qd]`` for a floating base, with blocks
        ``H_b = H[:6, :6]``, ``H_bm = H[:6, 6:]``, ``H_m = H[6:, 6:]``; ``[v0_x, v0_y, w0_z, qd]``
        for a planar base (``H_b`` 3 x 3); ``qd`` for a fixed base (``H = H_m``).
    """
    check_state(model, state, "inertia_matrix")
    return _free_inertia_matrix(model, state)


def _plain_free_inertia_matrix(model: Model, state: State) -> Array:
    """:func:`inertia_matrix` of a checked state (the per-sample JAX code)."""
    h = floating_inertia_matrix(model, state)
    return free_coordinates(model, free_coordinates(model, h, 0), 1)


def _batched_inertia_matrix(
    axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Callable[[list[Any]], Any]
) -> Any:
    """Batched evaluation of :func:`_plain_free_inertia_matrix` (primal values only): the
    compiled kernel where it serves (:func:`kernel_serves`), otherwise one vectorised program
    (chunks of 128 to 2048 samples timed the same as the whole batch within this machine's
    noise: :data:`INVERSE_DYNAMICS_CHUNK_BUDGET`)."""
    model, state = args
    if kernel_serves(model, mapped, axis_size):
        return batch_kernel.inertia_matrix(axis_size, model, state, in_batched)
    return jax.vmap(lambda leaves: _plain_free_inertia_matrix(*rebuild(leaves)), axis_size=axis_size)(mapped)


_free_inertia_matrix = batched_route(_plain_free_inertia_matrix, _batched_inertia_matrix)


def inertia_matrix_blocks(model: Model, state: State) -> tuple[Array, Array, Array]:
    """Blocks ``(H_b (nb, nb), H_bm (nb, n), H_m (n, n))`` of :func:`inertia_matrix` (eq 3.18),
    ``nb = model.num_base_velocities`` (6 floating, 3 planar, 0 fixed)."""
    h = inertia_matrix(model, state)
    nb = model.num_base_velocities
    return h[:nb, :nb], h[:nb, nb:], h[nb:, nb:]


# ------------------------------------------------------------------------------------------
# Forward dynamics (eq 3.29).


@eqx.filter_jit
def forward_dynamics(
    model: Model,
    state: State,
    tau: Any = None,
    *,
    base_force: Any = None,
    base_torque: Any = None,
    end_point_force: Any = None,
    end_point_torque: Any = None,
    check: bool = False,
) -> tuple[Array, Array]:
    """Accelerations of the base and joints (SpaceDyn ``f_dyn``, eq 3.29).

    Solves ``H a = [F0; N0; tau + tau_passive] + J_e^T [F_e; T_e] - c`` with a Cholesky
    factorisation of ``H`` (never an explicit inverse). The right-hand side comes from one
    Newton-Euler pass at zero acceleration with the end-point loads applied. For a planar or
    fixed base the equations are those of the free coordinates (module docstring): the base
    acceleration is zero along the constrained components and base loads along them are
    carried by the bearing or mount.

    Arguments:
        model: the system.
        state: positions and velocities.
        tau: ``(n,)`` joint torques/forces (default zero), added to the passive ones.
        base_force: ``(3,)`` force on the base centroid, inertial frame, N.
        base_torque: ``(3,)`` torque on the base, inertial frame, N m.
        end_point_force: ``(ne, 3)`` forces on the robot at its end points, inertial frame, N.
        end_point_torque: ``(ne, 3)`` torques on the robot at its end points, N m.
        check: if True, fail (``equinox.error_if``, also under ``jit``) when the result is not
            finite, e.g. for a non-finite state or a singular inertia matrix.

    Returns:
        ``(base_acceleration, qdd)``: ``(6,)`` ``[dv0/dt, dw0/dt]`` (inertial frame) and ``(n,)``.
    """
    check_state(model, state, "forward_dynamics")
    controls = _checked_controls(
        model, (tau, base_force, base_torque, end_point_force, end_point_torque), state.q.dtype, "forward_dynamics: "
    )
    acceleration = floating_acceleration(model, state, controls)
    if check:
        acceleration = eqx.error_if(
            acceleration,
            ~jnp.all(jnp.isfinite(acceleration)),
            "forward_dynamics: non-finite acceleration (non-finite state or inputs, or a singular inertia matrix)",
        )
    return acceleration[:6], acceleration[6:]


@eqx.filter_jit
def generalized_acceleration(model: Model, state: State, controls: Controls) -> Array:
    """Forward dynamics for a :class:`Controls` (see :func:`forward_dynamics`), in the base
    mode's generalized coordinates.

    Arguments:
        model, state: the system and its state.
        controls: the applied loads (:func:`make_controls`).

    Returns:
        ``(num_velocities,)`` accelerations: ``[dv0/dt, dw0/dt, qdd]`` for a floating base
        (``[dv0_x/dt, dv0_y/dt, dw0_z/dt, qdd]`` planar, ``qdd`` fixed; the independent joints'
        with mimic joints).
    """
    check_state(model, state, "generalized_acceleration")
    controls = check_controls(model, controls, state.q.dtype, "generalized_acceleration")
    return free_motion(model, _forward_dynamics(model, state, controls))


def floating_acceleration(model: Model, state: State, controls: Controls) -> Array:
    """Forward dynamics for a :class:`Controls` as the ``(6 + n,)`` floating-base vector
    ``[dv0/dt, dw0/dt, qdd]`` whatever the base mode (the components it fixes are zero): what
    the state's time derivative needs.

    Derivatives (forward and reverse mode) use the implicit-function rule of
    :func:`_dynamics_residual` instead of differentiating the composite-body and Cholesky
    steps themselves: the tangent of ``a`` is ``-H^-1 (d residual)`` at fixed ``a``, one
    Newton-Euler pass and one solve with the factor already computed. Exact, and it keeps
    the residuals stored for reverse mode (e.g. through a long rollout) several times smaller.
    Reverse mode of a batch on the CPU runs that rule's transpose in the compiled kernel
    (:mod:`sdjax.batch_kernel`).
    """
    check_state(model, state, "floating_acceleration")
    controls = check_controls(model, controls, state.q.dtype, "floating_acceleration")
    return _forward_dynamics(model, state, controls)


def _dynamics_residual(model: Model, state: State, controls: Controls, acceleration: Array) -> Array:
    """``H a + c - [F0; N0; tau + tau_passive] - J_e^T [F_e; T_e]`` in the free coordinates
    (``num_velocities``,), by one Newton-Euler pass; zero at the forward-dynamics solution
    ``acceleration`` (6 + n,).

    Without mimic joints, by the inverse dynamics itself (whose reverse mode takes the compiled
    kernel's route under ``vmap``: :func:`_batched_inverse_dynamics_vjp`)."""
    if not model.has_mimic:
        base_wrench, tau = _inverse_dynamics(
            model, state, acceleration[:6], acceleration[6:], controls.end_point_force, controls.end_point_torque
        )
        applied = jnp.concatenate([controls.base_force, controls.base_torque, controls.tau])
        return free_coordinates(model, jnp.concatenate([base_wrench, tau]) - applied)
    motion, accelerations = _motion(model, state, acceleration[:6], acceleration[6:])
    external = _end_point_wrenches(model, motion.frames, controls.end_point_force, controls.end_point_torque)
    force = _newton_euler(model, motion, accelerations, external)
    return free_coordinates(model, force - _applied_loads(model, state, controls))


def _solve_forward_dynamics(model: Model, state: State, controls: Controls) -> tuple[Array, Array]:
    """Accelerations ``(6 + n,)`` and the lower Cholesky factor of the free coordinates' ``H``
    (eq 3.29), the factorisation and solve by a library call (LAPACK, cuSOLVER)."""
    return _solve_with_factorisation(model, state, controls, unrolled=False)


def _solve_with_factorisation(model: Model, state: State, controls: Controls, unrolled: bool) -> tuple[Array, Array]:
    """:func:`_solve_forward_dynamics`, the factorisation and solve by a library call or, with
    ``unrolled``, in array arithmetic (:func:`_unrolled_cholesky`)."""
    n = model.num_joints
    zero = jnp.zeros(6 + n, state.q.dtype)
    motion, accelerations = _motion(model, state, zero[:6], zero[6:])
    h = inertia_matrix_from_frames(model, motion.frames, motion.axes)
    external = _end_point_wrenches(model, motion.frames, controls.end_point_force, controls.end_point_torque)
    bias = _newton_euler(model, motion, accelerations, external)
    applied = _applied_loads(model, state, controls)
    h = free_coordinates(model, free_coordinates(model, h, 0), 1)
    rhs = free_coordinates(model, applied - bias)
    if unrolled:
        factor = small_cholesky_factor(h)
        return floating_coordinates(model, small_cho_solve(factor, rhs)), factor
    factor, _ = jsl.cho_factor(h, lower=True)
    return floating_coordinates(model, jsl.cho_solve((factor, True), rhs)), factor


#: Largest number of free coordinates whose inertia matrix a batch on an accelerator factorises
#: with the Cholesky factorisation written out as array arithmetic over the batch
#: (:func:`sdjax.algebra.small_cholesky_factor`) instead of a library call (cuSOLVER's batched
#: factorisation and triangular solves), from :data:`UNROLLED_CHOLESKY_MIN_BATCH` samples.
#: Measured on an H200 for the 13-DOF arm (benchmarks/README.md, "the GPU forward dynamics by
#: parts"): at 131,072 samples and more the forward dynamics ran 1.3-1.4x faster in float64 and
#: 1.5-1.6x in float32 (the factorisation and solves alone 4x), at 16,384 only 1.1-1.2x; but
#: the program grows as the cube of the size and its compile time with it (the unrolled
#: factorisation and solve compiled in 3-6 s at 13, 87 s at 36; about 6-11 s expected at 16).
UNROLLED_CHOLESKY_MAX_SIZE = 16
#: Smallest batch for which an accelerator unrolls the factorisation (see
#: :data:`UNROLLED_CHOLESKY_MAX_SIZE`): below it the gain measured does not pay the compile time.
UNROLLED_CHOLESKY_MIN_BATCH = 1 << 17


def _unrolled_cholesky(size: int, batch: int) -> bool:
    """Whether a batch of ``batch`` inertia matrices ``(size, size)`` is factorised by
    unrolled array arithmetic: on an accelerator (on the CPU the compiled kernel or LAPACK
    serves), small matrices, large batches. Decided when the program is traced."""
    return (
        jax.default_backend() != "cpu" and size <= UNROLLED_CHOLESKY_MAX_SIZE and batch >= UNROLLED_CHOLESKY_MIN_BATCH
    )


#: Working-set budget of one chunk of a batched forward dynamics, in units of ``(6 + n)^2``
#: per sample (the inertia matrix and its factor dominate): ``2^18`` gives chunks of 1024
#: samples for 13 DOF and 128 for 36 DOF, the sizes measured fastest on a 2-core AMD EPYC
#: with 512 KiB of L2 per core and 8 MiB of L3 (benchmarks/README.md, "Batches in chunks").
CHUNK_BUDGET = 1 << 18


def batch_chunk_size(num_velocities: int) -> int:
    """Samples per chunk when a forward dynamics is evaluated under ``vmap`` (a power of two,
    at least 32): the batch is cut so that each chunk's working set stays in the cache."""
    return _power_of_two_chunk(CHUNK_BUDGET, num_velocities**2)


def _map_in_chunks(one: Any, mapped: list[Any], axis_size: int, chunk: int) -> Any:
    """``jax.vmap(one, axis_size=axis_size)(mapped)``, as a loop over chunks of ``chunk``
    samples (``lax.map``, each chunk vectorised) on the CPU when the batch is larger: per
    sample, a large batch then costs what one chunk does instead of leaving the cache. On an
    accelerator, and where nothing is batched (``mapped`` empty: e.g. the tangent basis of
    ``jax.hessian``, broadcast), one vectorised program."""
    if mapped and axis_size > chunk and jax.default_backend() == "cpu":
        return lax.map(one, mapped, batch_size=chunk)
    return jax.vmap(one, axis_size=axis_size)(mapped)


def kernel_serves(model: Model, mapped: list[Any], axis_size: int) -> bool:
    """Whether a batch goes to the compiled kernel (:mod:`sdjax.batch_kernel`): something is
    batched, the batch is at least :data:`sdjax.batch_kernel.MIN_BATCH` samples, the kernel is
    available (Numba, the CPU), and the model has no mimic joints (which the kernel does not
    know)."""
    return bool(mapped) and axis_size >= batch_kernel.MIN_BATCH and batch_kernel.available() and not model.has_mimic


#: Working-set budget of one chunk of a batched inverse dynamics on the XLA path (without the
#: compiled kernel), in units of bodies (``n + 1``) per sample (its frames, twists,
#: accelerations and wrenches grow as the number of bodies): ``2^13`` gives 1024 samples for
#: the 7-joint arm, 256 for a 30-link tree (measured at batch 8192, float64, 2-core AMD EPYC:
#: 1.8x and 3.3x the unchunked program, within 0.86x and 0.98x of batch 1024 per sample).
#: :func:`inertia_matrix` on the XLA path is not chunked: chunks of 128 to 2048 samples timed
#: the same as the whole batch within this machine's noise.
INVERSE_DYNAMICS_CHUNK_BUDGET = 1 << 13


def _power_of_two_chunk(budget: int, per_sample: int) -> int:
    """The largest power of two at most ``budget / per_sample``, and at least 32."""
    size = max(budget // per_sample, 32)
    return 1 << (size.bit_length() - 1)


def _batched_inverse_dynamics(
    axis_size: int, args: tuple[Any, ...], in_batched: Any, mapped: list[Any], rebuild: Callable[[list[Any]], Any]
) -> Any:
    """Batched evaluation of :func:`_newton_euler_inverse` (primal values only: reverse mode
    goes through :func:`_batched_inverse_dynamics_vjp`, other derivatives are the plain
    function's): the compiled kernel where it serves (:func:`kernel_serves`),
    otherwise, on the CPU, chunks of :data:`INVERSE_DYNAMICS_CHUNK_BUDGET` bodies' worth of
    samples (``lax.map``), each vectorised, and one vectorised program on an accelerator."""
    model, state, base_acceleration, qdd, end_point_force, end_point_torque = args
    if kernel_serves(model, mapped, axis_size):
        return batch_kernel.inverse_dynamics(
            axis_size, model, state, base_acceleration, qdd, end_point_force, end_point_torque, in_batched
        )
    chunk = _power_of_two_chunk(INVERSE_DYNAMICS_CHUNK_BUDGET, model.num_bodies)
    return _map_in_chunks(lambda leaves: _newton_euler_inverse(*rebuild(leaves)), mapped, axis_size, chunk)


def _batched_inverse_dynamics_vjp(
    axis_size: int, args: tuple[Any, ...], in_batched: Any, cotangent: tuple[Array, Array]
) -> Any:
    """Reverse mode of a batched :func:`_newton_euler_inverse`: the compiled kernel's
    vector-Jacobian product where it serves (:func:`kernel_serves`; the batch size alone
    decides, the reverse pass being several times the forward one's work), otherwise None (the
    plain VJP, vectorised)."""
    mapped = [x for x, b in zip(jax.tree.leaves(args), jax.tree.leaves(in_batched)) if b]
    if not kernel_serves(args[0], mapped, axis_size):
        return None
    model, state, base_acceleration, qdd, end_point_force, end_point_torque = args
    return batch_kernel.inverse_dynamics_vjp(
        axis_size, model, state, base_acceleration, qdd, end_point_force, end_point_torque, cotangent, in_batched
    )


_inverse_dynamics = batched_route(_newton_euler_inverse, _batched_inverse_dynamics, _batched_inverse_dynamics_vjp)


def _batched_solve(
    axis_size: int,
    args: tuple[Model, State, Controls],
    in_batched: Any,
    mapped: list[Any],
    rebuild: Callable[[list[Any]], Any],
    with_factor: bool,
    factor_from_kernel: bool = True,
) -> Any:
    """Batched evaluation of the forward-dynamics solve (only primal values pass through here:
    derivatives come from :func:`_forward_dynamics`'s own rule, whose reverse mode goes through
    :func:`_batched_forward_dynamics_vjp`, or the plain solve's).

    On the CPU with Numba installed, the compiled kernel of :mod:`sdjax.batch_kernel` solves
    batches of :data:`sdjax.batch_kernel.MIN_BATCH` samples and more (measured 2.6x faster than
    the vectorised XLA code for a 7-joint arm at batch 1024, 4.7x for a 30-link tree). Otherwise,
    on the CPU, a large batch runs as a loop over chunks of :func:`batch_chunk_size` samples
    (``lax.map``), each chunk vectorised: per sample, a batch of 8192 then costs what a batch of
    one chunk does instead of leaving the cache (measured 1.4-2.6x faster at 8192). On an
    accelerator the whole batch is one vectorised program: chunks there run one after another,
    each a few dozen kernel launches (measured on an H200 with chunks: a flat 10 M evaluations/s
    from batch 1024 to 10^6 for the 7-joint arm, against 180 M/s for the inverse dynamics), and
    large batches of small inertia matrices are factorised by unrolled array arithmetic
    (:data:`UNROLLED_CHOLESKY_MAX_SIZE`).

    ``with_factor``: also return the factor; without ``factor_from_kernel``, a batch the kernel
    solves returns zeros in its place (the derivative rule's solve: the kernel refactorises
    where the factor is used, :func:`rule_factor`)."""
    model, state, controls = args
    if kernel_serves(model, mapped, axis_size):
        acceleration, factor = batch_kernel.solve_forward_dynamics(
            axis_size, model, state, controls, in_batched, with_factor=with_factor and factor_from_kernel
        )
        if with_factor and not factor_from_kernel:
            nv = model.num_velocities
            factor = jnp.zeros((axis_size, nv, nv), acceleration.dtype)
        return (acceleration, factor) if with_factor else acceleration

    unrolled = _unrolled_cholesky(model.num_velocities, axis_size)

    def one(batched_leaves):
        solved = _solve_with_factorisation(*rebuild(batched_leaves), unrolled=unrolled)
        return solved if with_factor else solved[0]

    return _map_in_chunks(one, mapped, axis_size, batch_chunk_size(model.num_velocities))


def _solve_acceleration(model: Model, state: State, controls: Controls) -> Array:
    return _solve_forward_dynamics(model, state, controls)[0]


#: :func:`_solve_forward_dynamics` (acceleration and factor), evaluated by :func:`_batched_solve`
#: under ``vmap``; its derivatives (order two and up, where the solve itself is differentiated)
#: are those of the plain solve.
_batchable_solve = batched_route(_solve_forward_dynamics, functools.partial(_batched_solve, with_factor=True))
#: The acceleration alone (the batched solve then returns no factor): the primal of
#: :func:`_forward_dynamics`, whose own rule gives every derivative (so no rule of its own).
_batchable_acceleration = batched_evaluation(_solve_acceleration, functools.partial(_batched_solve, with_factor=False))
#: The solve of :func:`_forward_dynamics`'s derivative rule: a batch the compiled kernel solves
#: comes with zeros for its factor, which the rule reads through :func:`rule_factor` only. The
#: factor (1.4 kB per sample for 13 free coordinates) is then neither copied out of the kernel
#: nor kept by reverse mode (a rollout stored it for every RK4 stage: 80 % of its residuals);
#: the reverse kernel refactorises (benchmarks/README.md, *Gradient of a rollout*).
_rule_solve = batched_route(
    _solve_forward_dynamics, functools.partial(_batched_solve, with_factor=True, factor_from_kernel=False)
)


def _given_factor(model: Model, state: State, factor: Array) -> Array:
    return factor


def _batched_rule_factor(
    axis_size: int, args: tuple[Model, State, Array], in_batched: Any, mapped: list[Any], rebuild: Any
) -> Array:
    model, state, factor = args
    if kernel_serves(model, mapped, axis_size):  # (as the solve decided: the same model and batch)
        return batch_kernel.inertia_matrix(axis_size, model, state, in_batched[:2], factorise=True)
    return factor if in_batched[2] else jnp.broadcast_to(factor, (axis_size, *factor.shape))


#: The primal of :func:`rule_factor`.
_rule_factor_value = batched_evaluation(_given_factor, _batched_rule_factor)


@jax.custom_jvp
def rule_factor(model: Model, state: State, factor: Array) -> Array:
    """``(nv, nv)`` the factor from :func:`_rule_solve`, the compiled kernel's refactorisation
    where that solve left zeros (the same batches: both decide by :func:`kernel_serves` on the
    same model and batch size, and the solve's outputs are always batched).

    Differentiated only where a derivative rule is differentiated again (second derivatives):
    then the factor the solve left may be those zeros, and its value is this function's (the
    kernel's refactorisation where the kernel solved, the factor itself elsewhere), while its
    tangent, the plain solve's derivative of the factor, is the true one either way. (The
    identity's rule, the factor as its own value, read those zeros: NaN.)"""
    return _rule_factor_value(model, state, factor)


def _rule_factor_jvp(primals: tuple, tangents: tuple) -> tuple[Array, Array]:
    model, state, factor = primals
    if not isinstance(tangents[2], SymbolicZero):
        return _rule_factor_value(model, state, factor), tangents[2]
    # (a factor without a tangent of its own, e.g. computed outside the differentiated function:
    # refactorised, at the cost of H and its factor's derivative; measured on the XLA path, a
    # Hessian-vector product of a 50-step closed-loop rollout of the 7-joint arm, 1.7x the time)
    return jvp_along_nonzero(_inertia_factor, (model, state), tangents[:2])


rule_factor.defjvp(_rule_factor_jvp, symbolic_zeros=True)


def _inertia_factor(model: Model, state: State) -> Array:
    """``(nv, nv)`` the lower Cholesky factor of the free coordinates' ``H`` (eq 3.29), as
    :func:`_solve_forward_dynamics` returns it."""
    return jsl.cho_factor(_free_inertia_matrix(model, state), lower=True)[0]


def forward_dynamics_and_factor(model: Model, state: State, controls: Controls) -> tuple[Array, Array]:
    """Forward dynamics ``(6 + n,)`` (floating order) and the lower Cholesky factor of the free
    coordinates' ``H``, for algorithms that solve with ``H`` again (constraints). Internal
    building block; batched and differentiable as :func:`floating_acceleration`."""
    return _batchable_solve(model, state, controls)


@jax.custom_jvp
def _forward_dynamics(model: Model, state: State, controls: Controls) -> Array:
    # Never differentiated itself (the rule below replaces it), so the batched solve may run
    # without its factor.
    return _batchable_acceleration(model, state, controls)


def _forward_dynamics_jvp(primals, tangents):
    # (Tangents are JAX's symbolic zeros where an argument is not differentiated: the residual's
    # JVP then follows the others only, e.g. not the model's masses when only torques vary.)
    model, state, controls = primals
    if not model.has_mimic:
        acceleration, factor = _rule_solve(model, state, controls)
        # The solution and the factor are the rule's constants (no tangent of their own).
        tangent = linearized_tangent(
            forward_dynamics_tangent,
            _batched_forward_dynamics_vjp,
            primals,
            tangents,
            acceleration,
            constants=(acceleration, factor),
        )
        return acceleration, tangent
    acceleration, factor = _batchable_solve(model, state, controls)
    # Mimic joints: the residual vanishes at fixed *coordinate* accelerations ``a_c``; the joint
    # accelerations ``G a_c`` move with the mimic multipliers too (d(G a_c) = G da_c + dG a_c).
    coordinates = free_motion(model, acceleration)
    _, residual_tangent = jvp_along_nonzero(
        lambda m, s, c: _dynamics_residual(m, s, c, floating_coordinates(m, coordinates)), primals, tangents
    )
    _, map_tangent = jvp_along_nonzero(lambda m: floating_coordinates(m, coordinates), (model,), (tangents[0],))
    return acceleration, floating_coordinates(model, -jsl.cho_solve((factor, True), residual_tangent)) + map_tangent


_forward_dynamics.defjvp(_forward_dynamics_jvp, symbolic_zeros=True)


def forward_dynamics_tangent(primals: tuple, tangents: tuple, *, factor_read: bool = False) -> Array:
    """The implicit-function rule of the forward dynamics (no mimic joints): ``da = -H^-1
    (d residual)`` at the solution ``a``, ``primals = (model, state, controls, a, factor)``
    (``factor``: the lower Cholesky factor of the free coordinates' ``H`` from
    :func:`_rule_solve`, zeros where the compiled kernel solved the batch, read through
    :func:`rule_factor`, or with ``factor_read`` already read so; ``a`` and ``factor`` carry no
    tangent)."""
    model, state, controls, acceleration, factor = primals
    _, residual_tangent = jvp_along_nonzero(
        lambda m, s, c: _dynamics_residual(m, s, c, acceleration), primals[:3], tangents[:3]
    )
    if not factor_read:
        factor = rule_factor(model, state, factor)
    return floating_coordinates(model, -jsl.cho_solve((factor, True), residual_tangent))


def _batched_forward_dynamics_vjp(axis_size: int, args: tuple[Any, ...], in_batched: Any, cotangent: Array) -> Any:
    """Reverse mode of a batch of :func:`forward_dynamics_tangent`: the compiled kernel (the
    multiplier ``H^-1 a_bar`` and the inverse dynamics' vector-Jacobian product in one pass per
    sample) where it serves (:func:`kernel_serves`), otherwise None (the plain map's
    transpose, vectorised)."""
    mapped = [x for x, b in zip(jax.tree.leaves(args), jax.tree.leaves(in_batched)) if b]
    if not kernel_serves(args[0], mapped, axis_size):
        return None
    model, state, controls, acceleration, _ = args  # (the factor, zeros here, unread)
    return batch_kernel.forward_dynamics_vjp(axis_size, model, state, controls, acceleration, cotangent, in_batched[:4])


__all__ = [
    "Controls",
    "JointLoads",
    "bias_forces",
    "floating_acceleration",
    "floating_inverse_dynamics",
    "forward_dynamics",
    "generalized_acceleration",
    "generalized_loads",
    "generalized_velocity",
    "inertia_matrix",
    "inertia_matrix_blocks",
    "inverse_dynamics",
    "joint_reaction_loads",
    "make_controls",
    "passive_joint_torques",
    "point_loads",
]
