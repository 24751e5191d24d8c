"""Explicit Lagrangian dynamics (seed 002, SPACEMAPLE): ``H`` and ``C`` from the kinetic energy.

SPACEMAPLE writes the kinetic energy of a base carrying several manipulators (eqs 2-6), applies
Lagrange's equation (eq 1) and collects the mass matrix ``H`` (eq 15) and the non-linear
velocity terms ``C`` (eqs 17a-c, 18). Here the calculus is done by automatic differentiation of
energies written with sdjax's own *position-level* kinematics
(:func:`sdjax.kinematics.relative_frames`) and body masses and inertias; nothing of the
recursive inertia matrix or Newton-Euler code is used (except by
:func:`mass_parameter_dependence` for the free-floating ``H*``, which :mod:`sdjax.gjm` owns), so
:func:`lagrangian_terms` and :func:`coriolis_matrix` are an independent route to the same
equation of motion, for any tree.

Coordinates. Seed 002 uses Euler angles of the base (eq 7a); to avoid their singularities and
to land directly on sdjax's generalized velocity ``nu = [v0, w0, qd]`` the base attitude is
given a *local* rotation vector: ``x = (r0, phi, q)`` with ``A0(phi) = exp(skew(phi)) A0``
(``A0`` the state's attitude), evaluated at ``phi = 0``. There

* ``xd = nu`` exactly: ``dA0/dt = skew(J(phi) phi_dot) A0`` with the left Jacobian
  ``J(phi) = E + skew(phi)/2 + O(phi^2)``, so ``w0 = phi_dot`` at ``phi = 0``;
* ``dw0/dt = phi_ddot + (1/2) phi_dot x phi_dot = phi_ddot``, and a base torque does the work
  ``N0 . phi_dot``;

hence the Lagrange equations in ``x``, ``M(x) xdd + C(x, xd) = Q``, are exactly sdjax's
``H [dv0/dt; dw0/dt; qdd] + c = [F0; N0; tau]`` (seed 000 eq 3.18): ``M(x) = H``,
``C = sdjax.bias_forces``. (``M(x) = T(x)^T H T(x)`` with ``T = diag(E, J(phi), E)`` for
``phi != 0``; Rodrigues' formula is exact through fourth order at ``phi = 0``, more than the
two derivatives the equations need.)

With ``base="fixed"`` the base pose is held at the state's pose (a fixed-base manipulator,
or the limit of an infinitely heavy base, seed 002 section 6) and ``x = q``: ``H`` is the joint
block ``H_m`` and ``C`` the fixed-base bias with gravity.

Base modes (:data:`sdjax.BASE_MODES`). ``x`` holds the base coordinates the model's base mode
leaves free, the others kept at the state's values: ``(r0_x, r0_y, phi_z, q)`` for a planar
base (``w0_z = phi_z'`` exactly: one fixed axis), ``q`` for a fixed base (as ``base="fixed"``).
``base=`` overrides the model's base mode with another of :data:`sdjax.BASE_MODES`.
The terms then have the size of :attr:`sdjax.Model.num_velocities` and equal
:func:`sdjax.inertia_matrix` and :func:`sdjax.bias_forces`.

Units SI; vectors in the inertial frame.
"""

from __future__ import annotations

import warnings
from typing import Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from sdjax.algebra import PRECISION, einsum, matmul
from sdjax.gjm import generalized_inertia_matrix
from sdjax.kinematics import Frames, body_inertias, body_masses, relative_frames, world_inertias
from sdjax._checks import check_choice
from sdjax.model import BASE_MODES, Model, check_no_mimic, edit_model, free_motion
from sdjax.rotation import rotation_vector_to_matrix, skew, unskew
from sdjax.state import BASE_TWIST_NAMES, State, check_state, with_base_motion_checked

# ------------------------------------------------------------------------------------------
# Energies as functions of the local coordinates.


def _held(model: Model, held: bool) -> bool:
    """Whether the base pose is held (``base="fixed"`` asked for, or a fixed base mode)."""
    return held or model.base == "fixed"


def _base_mode(what: str, model: Model, base: str | None, fixed_base: bool | None) -> tuple[Model, bool]:
    """The model in the base mode asked for, and whether the base pose is held at the
    state's pose (``base="fixed"``: the base twist of ``state`` is ignored). ``fixed_base``
    is the earlier spelling of ``base="fixed"`` (deprecated)."""
    if fixed_base is not None:
        warnings.warn(
            f'{what}: fixed_base= is now spelled base="fixed" (base=None keeps the model\'s mode)',
            DeprecationWarning,
            stacklevel=3,
        )
        if base is not None:
            raise ValueError(f"{what}: give base= or the deprecated fixed_base=, not both")
        base = "fixed" if fixed_base else None
    if base is None or base == model.base:
        return model, False
    check_choice(f"{what}: base", base, BASE_MODES, "base mode")
    if base == "fixed":
        return model, True
    return edit_model(model, base=base), False


def _all_coordinates(state: State) -> Array:
    """``(r0, phi = 0, q)``, ``(6 + n,)``."""
    return jnp.concatenate([state.base_position, jnp.zeros(3, state.q.dtype), state.q])


def _coordinates(model: Model, state: State, held: bool) -> tuple[Array, Array]:
    """``(x, xd)``: the free entries of ``(r0, phi = 0, q)`` and ``nu``, or ``(q, qd)`` for a
    held base."""
    if _held(model, held):
        return state.q, state.qd
    return free_motion(model, _all_coordinates(state)), free_motion(model, state.generalized_velocity)


def _body_frames(model: Model, state: State, held: bool, x: Array) -> tuple[Array, Frames]:
    """Base centroid ``r0`` (3,) and the body frames (positions relative to ``r0``) at ``x``."""
    if _held(model, held):
        return state.base_position, relative_frames(model, state.base_rotation, x)
    if model.base != "floating":  # the base coordinates the mode fixes keep the state's values
        x = _all_coordinates(state).at[jnp.asarray(model.velocity_indices)].set(x)
    r0, phi, q = x[:3], x[3:6], x[6:]
    base_rotation = matmul(rotation_vector_to_matrix(phi), state.base_rotation)
    return r0, relative_frames(model, base_rotation, q)


class _Jacobians(eqx.Module):
    """Velocity Jacobians of every body at ``x`` (``N`` coordinates), with the pose itself."""

    linear: Array  # (n + 1, 3, N) d(r0 + r_b)/dx: centroid velocity v_b = linear[b] @ xd
    angular: Array  # (n + 1, 3, N) angular velocity w_b = angular[b] @ xd
    base_position: Array  # (3,) r0
    frames: Frames  # body frames, positions relative to r0


def _velocity_jacobians(model: Model, state: State, held: bool, x: Array) -> _Jacobians:
    """Centroid and angular velocity Jacobians of every body, by forward-mode differentiation
    of the poses: ``skew(angular[b, :, k]) = (dA_b/dx_k) A_b^T`` (seed 002 eqs 3-4: body
    velocities are linear in the rates)."""

    def pose(y):
        out = _body_frames(model, state, held, y)
        return out, out

    (d_r0, d_frames), (r0, frames) = jax.jacfwd(pose, has_aux=True)(x)
    # (dA/dx_k) A^T for every body b and coordinate k, then its axial vector: (n + 1, N, 3).
    spin = einsum("bijk,blj->bkil", d_frames.rotation, frames.rotation)
    return _Jacobians(d_r0[None] + d_frames.centroid, jnp.swapaxes(unskew(spin), -1, -2), r0, frames)


def _kinetic(model: Model, jacobians: _Jacobians, xd: Array) -> Array:
    """``T = sum_b 1/2 m_b |v_b|^2 + 1/2 w_b . (A_b I_b A_b^T) w_b``, J (seed 002 eqs 2, 6a-e,
    in the centroidal form), over the base and the links."""
    velocity, angular_velocity = matmul(jacobians.linear, xd), matmul(jacobians.angular, xd)
    inertia = world_inertias(model, jacobians.frames)
    spin = einsum("bi,bij,bj->", angular_velocity, inertia, angular_velocity)
    return 0.5 * (matmul(body_masses(model), jnp.sum(velocity * velocity, axis=-1)) + spin)


def _kinetic_energy(model: Model, state: State, held: bool, x: Array, xd: Array) -> Array:
    """Kinetic energy ``T(x, xd)``, J."""
    return _kinetic(model, _velocity_jacobians(model, state, held, x), xd)


def _mass_matrix(model: Model, jacobians: _Jacobians) -> Array:
    """``M = d2T/dxd2`` (seed 002 eq 15), symmetrised (``T`` is quadratic in ``xd``: the Hessian
    at ``xd = 0`` is exact)."""
    zero = jnp.zeros(jacobians.linear.shape[-1], jacobians.linear.dtype)
    mass_matrix = jax.hessian(lambda xd: _kinetic(model, jacobians, xd))(zero)
    return 0.5 * (mass_matrix + mass_matrix.T)


def _potential(model: Model, jacobians: _Jacobians) -> tuple[Array, Array]:
    """``V = -sum_b m_b g . r_b``, J, and its gradient ``dV/dx = -sum_b m_b (dr_b/dx)^T g``
    (zero in orbit, seed 002 section 2; sdjax keeps gravity)."""
    masses = body_masses(model)
    centroids = jacobians.frames.centroid
    potential = -jnp.dot(
        model.gravity, matmul(masses, centroids) + jnp.sum(masses) * jacobians.base_position, precision=PRECISION
    )
    return potential, -einsum("b,bik,i->k", masses, jacobians.linear, model.gravity)


# ------------------------------------------------------------------------------------------
# H, C and the energies.


class LagrangianTerms(eqx.Module):
    """Terms of Lagrange's equation ``H nu_dot + C = Q`` (seed 002 eq 8).

    ``nu = [v0, w0, qd]`` (inertial frame) for a moving base, ``qd`` for a fixed base; ``Q`` is
    ``[F0; N0; tau]`` (force at and torque about the base centroid, joint torques), as for
    :func:`sdjax.inverse_dynamics`.

    Attributes:
        inertia: ``(nv, nv)`` mass matrix ``H`` (seed 002 eq 15; ``nv`` the model's
            ``num_velocities``, ``n`` with ``base="fixed"``); equals
            :func:`sdjax.inertia_matrix` (its ``H_m`` block with ``base="fixed"``).
        bias: ``(nv,)`` non-linear velocity terms with gravity,
            ``C = (d2L/dxd dx) xd - dL/dx`` (eqs 17a-c, plus ``dV/dx``); equals
            :func:`sdjax.bias_forces` (with ``base="fixed"``: its joint rows at zero base twist).
        gravity: ``(nv,)`` gravity forces ``dV/dx`` (the bias at zero velocity).
        kinetic_energy: ``()`` ``T``, J.
        potential_energy: ``()`` ``V = -sum m_i g . r_i``, J (zero at the inertial origin).
    """

    inertia: Array
    bias: Array
    gravity: Array
    kinetic_energy: Array
    potential_energy: Array


@eqx.filter_jit
def lagrangian_terms(
    model: Model, state: State, *, base: str | None = None, fixed_base: bool | None = None
) -> LagrangianTerms:
    """Mass matrix, non-linear terms and energies by automatic differentiation of ``L = T - V``.

    In the local coordinates of the module docstring (``xd = nu`` there), ``H = d2T/dxd2``
    (eq 15) and Lagrange's equation (eq 1) with ``xdd = 0`` gives (eqs 17a-c, plus gravity)
    ``C = (d2T/dxd dx) xd - dT/dx + dV/dx``. With the generalized momentum ``p = dT/dxd = H xd``
    and ``P = dp/dx``, ``(d2T/dxd dx) xd = P xd`` and ``dT/dx = P^T xd / 2`` (``T`` is quadratic
    in ``xd``), so one forward-mode Jacobian gives both.

    Arguments:
        model: the system (any tree: several manipulators on one base).
        state: its state.
        base: ``None`` (the model's base mode) or a mode of :data:`sdjax.BASE_MODES`;
            ``"fixed"`` holds the base pose at the state's (the base twist of ``state`` is
            ignored): the terms of the fixed-base manipulator in ``q`` alone.
        fixed_base: deprecated spelling of ``base="fixed"`` (``DeprecationWarning``).
            terms of the fixed-base manipulator in ``q`` alone. Otherwise the base moves as
            the model's base mode lets it (module docstring).

    Returns:
        :class:`LagrangianTerms` (sizes ``num_velocities``, or ``n`` with a held base).
    """
    check_state(model, state)
    check_no_mimic(model, "lagrangian_terms")
    model, held = _base_mode("lagrangian_terms", model, base, fixed_base)
    state = with_base_motion_checked(model, state, "lagrangian_terms")
    x, xd = _coordinates(model, state, held)
    jacobians = _velocity_jacobians(model, state, held, x)
    momentum = jax.grad(_kinetic_energy, argnums=4)
    coupling = jax.jacfwd(momentum, argnums=3)(model, state, held, x, xd)  # P[i, j] = dp_i/dx_j
    potential, gravity = _potential(model, jacobians)
    return LagrangianTerms(
        inertia=_mass_matrix(model, jacobians),
        bias=matmul(coupling, xd) - 0.5 * matmul(xd, coupling) + gravity,
        gravity=gravity,
        kinetic_energy=_kinetic(model, jacobians, xd),
        potential_energy=potential,
    )


@eqx.filter_jit
def coriolis_matrix(model: Model, state: State, *, base: str | None = None, fixed_base: bool | None = None) -> Array:
    """Factored velocity terms ``C~(x, nu)`` with ``C~ nu + g = C`` (seed 002 eq 18).

    From the Christoffel symbols of the first kind of ``M(x)`` in the local coordinates,
    ``C~_M[i, j] = sum_k Gamma_ijk xd_k``, ``Gamma_ijk = 1/2 (dM_ij/dx_k + dM_ik/dx_j - dM_jk/dx_i)``,
    so that ``dM/dt - 2 C~_M`` is skew-symmetric (``dM/dt`` along ``xd`` in those coordinates).
    For a fixed base this is the result.

    For a moving base one more term makes the matrix fit sdjax's ``H`` and ``nu`` (rather than
    ``M`` and ``xd``): ``nu = T(x) xd`` with ``T = diag(E, J(phi), E)``, so along a motion
    ``dH/dt = dM/dt - T'^T H - H T'`` at ``phi = 0``, with ``T' = diag(0, skew(w0)/2, 0)``.
    Returning ``C~ = C~_M - H T'`` keeps ``C~ nu = C~_M nu`` (``T' nu = (0, w0 x w0 / 2, 0) = 0``)
    and gives the property adaptive controllers rely on: ``dH/dt - 2 C~`` is skew-symmetric
    for the true time derivative of ``H(state(t))`` (``C~_M`` alone gives it only for
    ``dM/dt`` in the local coordinates).

    Arguments:
        model: the system.
        state: its state.
        base: ``None`` (the model's base mode) or a mode of :data:`sdjax.BASE_MODES`;
            ``"fixed"`` holds the base (``C~`` of the manipulator in ``q`` alone).
        fixed_base: deprecated spelling of ``base="fixed"`` (``DeprecationWarning``).

    Returns:
        ``(nv, nv)`` (``(n, n)`` with a held base) matrix, linear in ``nu``; the gravity vector is
        :attr:`LagrangianTerms.gravity`.
    """
    check_state(model, state)
    check_no_mimic(model, "coriolis_matrix")
    model, held = _base_mode("coriolis_matrix", model, base, fixed_base)
    state = with_base_motion_checked(model, state, "coriolis_matrix")
    x, xd = _coordinates(model, state, held)
    mass_matrix = lambda y: _mass_matrix(model, _velocity_jacobians(model, state, held, y))  # noqa: E731
    inertia, d_inertia = mass_matrix(x), jax.jacfwd(mass_matrix)(x)  # d_inertia[i, j, k] = dM_ij/dx_k
    christoffel = 0.5 * (
        einsum("ijk,k->ij", d_inertia, xd) + einsum("ikj,k->ij", d_inertia, xd) - einsum("jki,k->ij", d_inertia, xd)
    )
    if _held(model, held) or model.base == "planar":  # T' = 0: a planar base turns about one fixed axis
        return christoffel
    half_spin = 0.5 * skew(state.base_angular_velocity)  # T' restricted to the w0 block
    return christoffel.at[:, 3:6].add(matmul(-inertia[:, 3:6], half_spin))


# ------------------------------------------------------------------------------------------
# Seed 002 section 5: which mass properties reach which element of H.

#: Matrices whose mass dependence :func:`mass_parameter_dependence` measures.
InertiaKind = Literal["fixed_base", "floating_base", "generalized"]
_KINDS = ("fixed_base", "floating_base", "generalized")


class MassDependence(eqx.Module):
    """Derivatives of an inertia matrix with respect to every body's mass and inertia tensor.

    Attributes:
        kind: static, which matrix (see :func:`mass_parameter_dependence`).
        matrix: ``(N, N)`` the matrix ``H`` itself.
        mass_derivative: ``(N, N, n + 1)`` ``dH_jk / dm_b`` (body 0 is the base), m^2 or
            m (rows of a prismatic joint) or 1.
        inertia_derivative: ``(N, N, n + 1, 3, 3)`` ``dH_jk / dI_b`` (``I_b`` about the centroid,
            body frame, each of its 9 entries taken as independent).
        sensitivity: ``(N, N, n + 1)`` relative size of the first-order change of ``H_jk`` when
            body ``b``'s mass properties change by 100 %:
            ``(m_b |dH_jk/dm_b| + |I_b|_F |dH_jk/dI_b|_F) / max|H|``. Exactly zero (up to
            round-off) where the mass properties of ``b`` do not enter ``H_jk``.
    """

    kind: str = eqx.field(static=True)
    matrix: Array
    mass_derivative: Array
    inertia_derivative: Array
    sensitivity: Array


def _with_mass_properties(model: Model, masses: Array, inertias: Array) -> Model:
    """``model`` with body masses ``(n + 1,)`` and inertias ``(n + 1, 3, 3)`` (base first)."""
    return eqx.tree_at(
        lambda m: (m.base_mass, m.link_mass, m.base_inertia, m.link_inertia),
        model,
        (masses[0], masses[1:], inertias[0], inertias[1:]),
    )


@eqx.filter_jit
def mass_parameter_dependence(model: Model, state: State, *, kind: InertiaKind = "fixed_base") -> MassDependence:
    """How every element of an inertia matrix depends on every body's mass properties (seed 002
    section 5, eqs 24a-b), by ``jax.jacfwd`` with respect to the masses and inertia tensors.

    Seed 002 states that for a fixed-base serial arm ``H_jk`` depends only on the mass
    properties of links ``max(j, k) .. N`` (eq 24a), while for a space robot in free-floating
    mode every element depends on every link. In a tree the fixed-base rule reads: link ``b``
    reaches ``H_jk`` only if it is carried by both joints ``j`` and ``k``. The kinds:

    * ``"fixed_base"``: ``H_m`` of the fixed-base system (:func:`lagrangian_terms` with
      ``base="fixed"``), ``(n, n)``: eq 24a's backward propagation.
    * ``"floating_base"``: the full ``H`` of the moving base, ``(nv, nv)`` (``nv = 6 + n`` for a
      floating base; the free coordinates of a planar one). Its joint block
      *is* the fixed-base ``H_m`` (same pattern), the base columns of joint ``k`` depend on the
      links joint ``k`` carries, and only the base block ``H_b`` involves every body (with
      structural zeros: ``H_b[:3, :3] = (total mass) E``).
    * ``"generalized"``: ``H* = H_m - H_bm^T H_b^-1 H_bm`` (seed 003 eq 45,
      :func:`sdjax.generalized_inertia_matrix`), the inertia seen by the joints in free-floating
      mode (zero momentum), ``(n, n)``: every element depends on every body, the base included,
      which is the coupling seed 002 section 5 describes.

    Arguments:
        model: the system.
        state: its state (positions are used; choose a generic configuration).
        kind: ``"fixed_base"``, ``"floating_base"`` or ``"generalized"``.

    Returns:
        :class:`MassDependence`; print it with :func:`mass_dependence_table`.
    """
    check_state(model, state)
    check_no_mimic(model, "mass_parameter_dependence")
    check_choice("mass_parameter_dependence: kind", kind, _KINDS, "kind")

    def matrix(masses: Array, inertias: Array) -> Array:
        varied = _with_mass_properties(model, masses, inertias)
        if kind == "generalized":
            return generalized_inertia_matrix(varied, state)
        held = kind == "fixed_base"
        x, _ = _coordinates(varied, state, held)
        return _mass_matrix(varied, _velocity_jacobians(varied, state, held, x))

    masses, inertias = body_masses(model), body_inertias(model)
    value = matrix(masses, inertias)
    mass_derivative, inertia_derivative = jax.jacfwd(matrix, argnums=(0, 1))(masses, inertias)
    inertia_size = jnp.sqrt(jnp.sum(inertias**2, axis=(-2, -1)))
    change = masses * jnp.abs(mass_derivative) + inertia_size * jnp.sqrt(jnp.sum(inertia_derivative**2, axis=(-2, -1)))
    return MassDependence(kind, value, mass_derivative, inertia_derivative, change / jnp.max(jnp.abs(value)))


def _body_ranges(bodies: list[int]) -> str:
    """``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    parts, start = [], None
    for k, b in enumerate(bodies):
        if start is None:
            start = b
        if k + 1 == len(bodies) or bodies[k + 1] != b + 1:
            parts.append(str(b) if b == start else f"{start}-{b}")
            start = None
    return ", ".join(parts)


def mass_dependence_table(model: Model, dependence: MassDependence, *, rtol: float = 1e-10) -> str:
    """A markdown table: for each element ``H_jk`` (upper triangle), the bodies whose mass
    properties reach it.

    Bodies are numbered as in sdjax (0 = base, ``i`` = link ``i``); ``all`` means every body
    (every link for ``"fixed_base"``, where the base cannot enter), ``-`` none.

    Arguments:
        model: the system the dependence was computed for (for labels).
        dependence: from :func:`mass_parameter_dependence` (one state, not a batch).
        rtol: a body counts where :attr:`MassDependence.sensitivity` exceeds ``rtol`` (exact
            structural zeros come out at round-off, ~1e-16).

    Returns:
        The table as a string (rows ``j``, columns ``k``).
    """
    sensitivity = np.asarray(dependence.sensitivity)
    n = model.num_joints
    size = n if dependence.kind != "floating_base" else model.num_velocities
    if sensitivity.shape != (size, size, n + 1):
        raise ValueError(
            f"mass_dependence_table: expected sensitivity of shape {(size, size, n + 1)} for a "
            f"{dependence.kind!r} matrix of model {model.name!r}, got {sensitivity.shape} (one state, not a batch)"
        )
    joints = [f"q{i}" for i in range(1, n + 1)]
    base_labels = [BASE_TWIST_NAMES[k] for k in model.base_coordinates] if dependence.kind == "floating_base" else []
    labels = base_labels + joints
    candidates = list(range(1, n + 1)) if dependence.kind == "fixed_base" else list(range(n + 1))
    lines = [
        f"Bodies whose mass properties reach each element of the {dependence.kind.replace('_', ' ')} inertia matrix "
        "(0 = base, i = link i):",
        "",
        "| | " + " | ".join(labels) + " |",
        "|---" * (size + 1) + "|",
    ]
    for j in range(size):
        cells = []
        for k in range(size):
            if k < j:
                cells.append("")
                continue
            bodies = [int(b) for b in np.flatnonzero(sensitivity[j, k] > rtol)]
            cells.append("all" if bodies == candidates else _body_ranges(bodies) or "-")
        lines.append(f"| {labels[j]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = [
    "LagrangianTerms",
    "MassDependence",
    "coriolis_matrix",
    "lagrangian_terms",
    "mass_dependence_table",
    "mass_parameter_dependence",
]
