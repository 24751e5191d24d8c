"""Momentum-reduced dynamics of free-floating systems (seed 003): the generalized inertia
matrix, the base motion implied by joint motion, the generalized equation of motion with any
initial momentum, the generalized Jacobian and manipulability measures.

Without external forces the system momentum is conserved. About the base centroid it reads
(seed 003 eq 42)

    M_r0 = [P; L_r0] = H_b [v0; w0] + H_bm qd,

so the base twist follows the joints (eq 109, with any momentum)

    [v0; w0] = H_b^-1 (M_r0 - H_bm qd),

and any point moves as ``J_b [v0; w0] + J_m qd = J* qd + J_b H_b^-1 M_r0`` with the
generalized Jacobian ``J* = J_m - J_b H_b^-1 H_bm`` (eq 110) and a momentum offset that
vanishes for zero momentum.

Base modes. A planar base conserves only ``P_x``, ``P_y`` and ``L_z`` (the bearing carries the
rest), and a fixed base nothing: everything here is written with the base block of the model's
free coordinates (``H_b`` 6 x 6, 3 x 3 or empty), so a planar base gets the planar generalized
Jacobian and a fixed base ``J* = J_m``, ``H* = H_m``, with no base motion.

Momentum argument. Functions that take ``momentum`` want the *conserved* quantity: a ``(6,)``
vector ``[P; L_O]`` of the total linear momentum and the angular momentum about the inertial
origin (both inertial frame; what :func:`sdjax.linear_momentum` and
:func:`sdjax.angular_momentum` return). It is converted to the base centroid as
``L_r0 = L_O - r0 x P`` at the state's base position. ``None`` means zero momentum.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import Array

from sdjax.algebra import cross3, matmul
from sdjax.dynamics import bias_forces, floating_inertia_matrix, inertia_matrix, passive_joint_torques
from sdjax.jacobians import _check_body, _point_jacobian, end_point_jacobians
from sdjax.model import Model, check_no_mimic, floating_coordinates, joint_coordinates
from sdjax._checks import check_vector
from sdjax.state import State, check_state


def solve_base_block(model: Model, h: Array, rhs: Array) -> Array:
    """``H_b^-1 rhs`` by Cholesky (``H_b`` the SPD base block of ``h``, ``nb x nb`` with ``nb``
    the number of free base coordinates; empty for a fixed base)."""
    nb = model.num_base_velocities
    if nb == 0:
        return rhs
    return jsl.cho_solve(jsl.cho_factor(h[:nb, :nb], lower=True), rhs)


def free_base_components(model: Model, value: Array) -> Array:
    """The components of a ``(6,)`` base vector (twist or momentum) the base mode leaves free."""
    return value[jnp.asarray(model.base_coordinates, dtype=jnp.int32)]


def base_twist_from_free(model: Model, free: Array) -> Array:
    """``(6,)`` base twist ``[v0; w0]`` from its free components (zero elsewhere)."""
    return floating_coordinates(model, jnp.concatenate([free, jnp.zeros(model.num_joint_coordinates, free.dtype)]))[:6]


# Building blocks shared with :mod:`sdjax.control` (public names, not in ``__all__``).


def momentum_about_base(model: Model, state: State, momentum: Any) -> Array:
    """``[P; L_r0]`` (6,) from the conserved ``[P; L_O]`` (see the module docstring)."""
    value = check_vector("momentum", momentum, (6,), state.q.dtype)
    linear, angular = value[:3], value[3:]
    return jnp.concatenate([linear, angular - cross3(state.base_position, linear)])


def reduce_inertia(model: Model, h: Array) -> Array:
    """``H* = H_m - H_bm^T H_b^-1 H_bm`` from the inertia matrix of the free coordinates."""
    nb = model.num_base_velocities
    h_bm = h[:nb, nb:]
    return h[nb:, nb:] - matmul(h_bm.T, solve_base_block(model, h, h_bm))


def reduced_equation(model: Model, h: Array, bias: Array) -> tuple[Array, Array]:
    """``(H*, C*)`` of ``H* qdd + C* = tau`` from the inertia matrix ``h`` and bias ``bias``
    of the free coordinates (at a state whose base twist is the one wanted): eliminating the
    base acceleration from ``H_b a_b + H_bm qdd + c_b = 0`` (seed 003 eqs 43-45) gives
    ``H* = H_m - H_bm^T H_b^-1 H_bm`` (symmetrised) and ``C* = c_m - H_bm^T H_b^-1 c_b``."""
    nb = model.num_base_velocities
    h_bm = h[:nb, nb:]
    solved = solve_base_block(model, h, jnp.concatenate([h_bm, bias[:nb, None]], axis=1))
    h_star = h[nb:, nb:] - matmul(h_bm.T, solved[:, :-1])
    return 0.5 * (h_star + h_star.T), bias[nb:] - matmul(h_bm.T, solved[:, -1])


# ------------------------------------------------------------------------------------------
# Momentum and base motion (eqs 42, 109).


@eqx.filter_jit
def system_momentum(model: Model, state: State) -> Array:
    """Conserved momentum ``[P; L_O]`` of a state, ``(6,)``, inertial frame (kg m/s, kg m^2/s).

    From the inertia matrix (eq 42: ``[P; L_r0] = H_b [v0; w0] + H_bm qd``) and
    ``L_O = L_r0 + r0 x P``; the argument ``momentum`` of the other functions here. The
    whole momentum whatever the base mode (a planar base conserves only ``P_x, P_y, L_z``).
    """
    check_state(model, state)
    h = floating_inertia_matrix(model, state)
    nu = state.generalized_velocity
    about_base = matmul(h[:6], nu)
    return jnp.concatenate([about_base[:3], about_base[3:] + cross3(state.base_position, about_base[:3])])


@eqx.filter_jit
def base_twist_from_joint_rates(model: Model, state: State, qd: Any = None, momentum: Any = None) -> Array:
    """Base twist implied by joint rates under conserved momentum (seed 003 eq 109).

    Arguments:
        model: the system.
        state: positions (base pose and ``q``); its velocities are not used.
        qd: ``(n,)`` joint rates (default ``state.qd``).
        momentum: ``(6,)`` conserved ``[P; L_O]`` (default zero; see the module docstring).

    Returns:
        ``(6,)`` ``[v0; w0]``, inertial frame (m/s, rad/s): ``H_b^-1 (M_r0 - H_bm qd)``; for a
        planar base the three free components from the conserved ``P_x, P_y, L_z`` (the others
        zero), for a fixed base zero.
    """
    check_state(model, state)
    qd = state.qd if qd is None else check_vector("qd", qd, (model.num_joints,), state.q.dtype)
    h = inertia_matrix(model, state)
    nb = model.num_base_velocities
    free = solve_base_block(
        model,
        h,
        free_base_components(model, momentum_about_base(model, state, momentum))
        - matmul(h[:nb, nb:], joint_coordinates(model, qd)),
    )
    return base_twist_from_free(model, free)


@eqx.filter_jit
def with_momentum(model: Model, state: State, momentum: Any = None) -> State:
    """``state`` with its base twist replaced so that the system carries ``momentum``
    (default zero) for its joint rates: a consistent initial state for a floating manoeuvre."""
    twist = base_twist_from_joint_rates(model, state, state.qd, momentum)
    return eqx.tree_at(lambda s: (s.base_linear_velocity, s.base_angular_velocity), state, (twist[:3], twist[3:]))


# ------------------------------------------------------------------------------------------
# Generalized inertia matrix and the generalized equation of motion (eqs 44-50, 62-102).


@eqx.filter_jit
def generalized_inertia_matrix(model: Model, state: State) -> Array:
    """``H* = H_m - H_bm^T H_b^-1 H_bm`` (seed 003 eq 45); ``(n, n)`` symmetric positive definite.

    ``1/2 qd^T H* qd`` is the kinetic energy of a zero-momentum motion, so ``H*`` depends on
    ``q`` only (not on the base pose)."""
    check_state(model, state)
    return reduce_inertia(model, inertia_matrix(model, state))


@eqx.filter_jit
def generalized_inertia_derivatives(model: Model, state: State) -> tuple[Array, Array]:
    """Joint-angle and time derivatives of ``H*`` by forward-mode autodiff.

    ``dH*/dq_k`` is seed 003 eqs 81-102 and ``dH*/dt = sum_k dH*/dq_k qd_k`` eqs 62-79
    (``H*`` does not depend on the base pose, so the base motion adds nothing).

    Returns:
        ``(dH*/dq, dH*/dt)``: ``(n, n, n)`` with ``[i, j, k] = dH*_ij / dq_k``, and ``(n, n)``.
    """
    check_no_mimic(model, "generalized_inertia_derivatives")
    check_state(model, state)

    def reduced(q):
        return generalized_inertia_matrix(model, eqx.tree_at(lambda s: s.q, state, q))

    gradient = jax.jacfwd(reduced)(state.q)
    return gradient, matmul(gradient, state.qd)


@eqx.filter_jit
def generalized_bias(model: Model, state: State, momentum: Any = None) -> Array:
    """Non-linear term ``C*`` of the generalized equation of motion ``H* qdd + C* = tau``.

    Seed 003 eq 44 (any momentum) and eqs 47-50 (zero momentum). Exact for any momentum and
    base attitude: with the base twist of eq 109 and the bias ``[c_b; c_m]`` of the full
    equation (``bias_forces``), eliminating the base acceleration from
    ``H_b a_b + H_bm qdd + c_b = 0`` gives ``C* = c_m - H_bm^T H_b^-1 c_b``.
    For zero momentum ``C* = dH*/dt qd - 1/2 d(qd^T H* qd)/dq`` (eqs 47-48). For non-zero
    momentum the reduced equation depends on the base attitude as well as on ``(q, qd)``,
    because the momentum is fixed in the inertial frame while ``H_b``, ``H_bm`` turn with
    the base. Uniform gravity accelerates the whole system alike and cancels here; passive
    joint torques are not included (they are applied forces).

    Arguments:
        model: the system.
        state: base pose, ``q`` and ``qd`` (its base twist is replaced by eq 109's).
        momentum: ``(6,)`` conserved ``[P; L_O]`` (default zero).

    Returns:
        ``(n,)`` generalized forces, N m or N.
    """
    check_no_mimic(model, "generalized_bias")
    consistent = with_momentum(model, state, momentum)
    return reduced_equation(model, inertia_matrix(model, consistent), bias_forces(model, consistent))[1]


@eqx.filter_jit
def reduced_forward_dynamics(model: Model, state: State, tau: Any = None, momentum: Any = None) -> tuple[Array, Array]:
    """Joint accelerations of a floating system from the generalized equation of motion.

    ``qdd = H*^-1 (tau + tau_passive - C*)`` (eqs 44, 50) and the base acceleration
    ``a_b = -H_b^-1 (H_bm qdd + c_b)`` (eq 43), with the base twist of eq 109. Equal to
    :func:`sdjax.forward_dynamics` with no base wrench for a state that carries ``momentum``.

    Arguments:
        model: the system.
        state: base pose, ``q`` and ``qd`` (its base twist is replaced by eq 109's).
        tau: ``(n,)`` joint torques/forces (default zero), added to the passive ones.
        momentum: ``(6,)`` conserved ``[P; L_O]`` (default zero).

    Returns:
        ``(base_acceleration (6,), qdd (n,))`` as :func:`sdjax.forward_dynamics`.
    """
    check_no_mimic(model, "reduced_forward_dynamics")
    consistent = with_momentum(model, state, momentum)
    tau = check_vector("tau", tau, (model.num_joints,), state.q.dtype)
    h = inertia_matrix(model, consistent)
    bias = bias_forces(model, consistent)
    nb = model.num_base_velocities
    reduced, c_star = reduced_equation(model, h, bias)
    qdd = jsl.cho_solve(jsl.cho_factor(reduced, lower=True), tau + passive_joint_torques(model, consistent) - c_star)
    return base_twist_from_free(model, -solve_base_block(model, h, bias[:nb] + matmul(h[:nb, nb:], qdd))), qdd


# ------------------------------------------------------------------------------------------
# Generalized Jacobian (eqs 103-111) and manipulability.


def generalized_columns(model: Model, h: Array, jacobian: Array) -> Array:
    """``J_m - J_b H_b^-1 H_bm`` for Jacobians ``(..., 6, nv)`` of the free coordinates."""
    nb = model.num_base_velocities
    return jacobian[..., nb:] - matmul(jacobian[..., :nb], solve_base_block(model, h, h[:nb, nb:]))


def momentum_offset(model: Model, state: State, h: Array, jacobian: Array, momentum: Any) -> Array:
    """``J_b H_b^-1 M_r0`` for Jacobians ``(..., 6, nv)``: the velocity due to momentum."""
    nb = model.num_base_velocities
    return matmul(
        jacobian[..., :nb],
        solve_base_block(model, h, free_base_components(model, momentum_about_base(model, state, momentum))),
    )


def generalized_jacobian(model: Model, state: State, link: int, point: Any = None) -> Array:
    """Generalized Jacobian of a point fixed on a link (seed 003 eq 110).

    Arguments:
        model: the system.
        state: its state (positions).
        link: body index (static), 1..n (0, the base, is allowed too).
        point: ``(3,)`` position relative to the link centroid, link frame, m (default centroid).

    Returns:
        ``(6, n)`` matrix ``J*`` mapping ``qd`` to the point's ``[linear; angular]`` velocity
        (inertial frame) when the momentum is zero; see :func:`generalized_velocity_offset`.
    """
    # The index is checked and made a Python int before jit (a NumPy integer would be traced).
    return _generalized_jacobian(model, state, _check_body(model, link, "generalized_jacobian"), point)


@eqx.filter_jit
def _generalized_jacobian(model: Model, state: State, link: int, point: Any) -> Array:
    check_state(model, state)
    columns = _point_jacobian(model, state, link, point, "generalized_jacobian")
    return generalized_columns(model, inertia_matrix(model, state), columns)


def generalized_velocity_offset(
    model: Model, state: State, link: int, point: Any = None, momentum: Any = None
) -> Array:
    """Velocity of a point on a link due to the system momentum (the non-zero-momentum term of
    eq 110): the point moves as ``J* qd + offset`` with ``offset = J_b H_b^-1 M_r0``.

    Arguments as :func:`generalized_jacobian`, plus ``momentum``: ``(6,)`` conserved
    ``[P; L_O]`` (default zero, giving a zero offset).

    Returns:
        ``(6,)`` ``[linear (m/s); angular (rad/s)]`` velocity, inertial frame.
    """
    link = _check_body(model, link, "generalized_velocity_offset")
    return _generalized_velocity_offset(model, state, link, point, momentum)


@eqx.filter_jit
def _generalized_velocity_offset(model: Model, state: State, link: int, point: Any, momentum: Any) -> Array:
    check_state(model, state)
    h = inertia_matrix(model, state)
    columns = _point_jacobian(model, state, link, point, "generalized_velocity_offset")
    return momentum_offset(model, state, h, columns, momentum)


@eqx.filter_jit
def end_point_generalized_jacobians(model: Model, state: State) -> Array:
    """Generalized Jacobians (eq 110) of every end point; ``(ne, 6, n)``."""
    check_state(model, state)
    return generalized_columns(model, inertia_matrix(model, state), end_point_jacobians(model, state))


@eqx.filter_jit
def end_point_velocity_offsets(model: Model, state: State, momentum: Any = None) -> Array:
    """Momentum offsets (see :func:`generalized_velocity_offset`) of every end point; ``(ne, 6)``."""
    check_state(model, state)
    return momentum_offset(model, state, inertia_matrix(model, state), end_point_jacobians(model, state), momentum)


class Manipulability(eqx.Module):
    """Manipulability measures of a ``(m, n)`` Jacobian (generalized or fixed-base).

    Attributes:
        singular_values: ``(min(m, n),)`` in decreasing order.
        measure: Yoshikawa's ``sqrt(det(J J^T))`` = product of the singular values (for
            ``m <= n``; zero at a singularity).
        condition_number: ``sigma_max / sigma_min`` (``inf`` at a singularity).
        min_singular_value: ``sigma_min``, the distance to the nearest singularity.
    """

    singular_values: Array
    measure: Array
    condition_number: Array
    min_singular_value: Array


@eqx.filter_jit
def manipulability(jacobian: Any) -> Manipulability:
    """Manipulability measures of a Jacobian ``(m, n)`` (e.g. ``generalized_jacobian(...)`` or a
    block of it such as its translational rows ``[:3]``).

    Mix linear (m/s) and angular (rad/s) rows only if their scale makes sense for the task.
    Gradients of the singular values are defined where they are distinct and non-zero.
    """
    jacobian = jnp.asarray(jacobian)
    if jacobian.ndim != 2:
        raise ValueError(f"manipulability: jacobian must be a (m, n) matrix, got shape {jacobian.shape}")
    sigma = jnp.linalg.svd(jacobian, compute_uv=False)
    smallest = sigma[-1]
    return Manipulability(
        singular_values=sigma,
        measure=jnp.prod(sigma),
        condition_number=sigma[0] / smallest,
        min_singular_value=smallest,
    )


__all__ = [
    "Manipulability",
    "base_twist_from_joint_rates",
    "end_point_generalized_jacobians",
    "end_point_velocity_offsets",
    "generalized_bias",
    "generalized_inertia_derivatives",
    "generalized_inertia_matrix",
    "generalized_jacobian",
    "generalized_velocity_offset",
    "manipulability",
    "reduced_forward_dynamics",
    "system_momentum",
    "with_momentum",
]
