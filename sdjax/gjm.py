"""Momentum-reduced quantities for free-floating systems (seed 003): the generalized inertia
matrix and the generalized Jacobian.

With no external forces the system's momentum ``[P; L_r0] = H_b [v0; w0] + H_bm qd`` is
conserved; for zero momentum the base twist follows the joints,
``[v0; w0] = -H_b^-1 H_bm qd``, and any point moves as ``J_b [v0; w0] + J_m qd = J* qd`` with
the generalized Jacobian ``J* = J_m - J_b H_b^-1 H_bm`` (seed 003 eq 110).
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.scipy.linalg as jsl
from jax import Array

from sdjax.dynamics import inertia_matrix
from sdjax.jacobians import end_point_jacobians, point_jacobian
from sdjax.model import Model
from sdjax.state import State


def _base_solve(h: Array, rhs: Array) -> Array:
    """``H_b^-1 rhs`` by Cholesky (``H_b`` is the SPD 6x6 base block of ``h``)."""
    return jsl.cho_solve(jsl.cho_factor(h[:6, :6], lower=True), rhs)


@eqx.filter_jit
def generalized_inertia_matrix(model: Model, state: State) -> Array:
    """``H* = H_m - H_bm^T H_b^-1 H_bm`` (seed 003 eq 45); ``(n, n)`` symmetric positive definite."""
    h = inertia_matrix(model, state)
    h_bm = h[:6, 6:]
    return h[6:, 6:] - h_bm.T @ _base_solve(h, h_bm)


def _generalized(h: Array, jacobian: Array) -> Array:
    """``J_m - J_b H_b^-1 H_bm`` for Jacobians ``(..., 6, 6 + n)``."""
    return jacobian[..., 6:] - jacobian[..., :6] @ _base_solve(h, h[:6, 6:])


@eqx.filter_jit
def generalized_jacobian(model: Model, state: State, link: int, point: Any = None) -> Array:
    """Generalized Jacobian (zero momentum) of a point fixed on a link (seed 003 eq 110).

    Arguments:
        model: the system.
        state: its state (positions).
        link: body index (static), 1..n.
        point: ``(3,)`` position relative to the link centroid, link frame, m (default centroid).

    Returns:
        ``(6, n)`` matrix mapping ``qd`` to the point's ``[linear; angular]`` velocity.
    """
    return _generalized(inertia_matrix(model, state), point_jacobian(model, state, link, point))


@eqx.filter_jit
def end_point_generalized_jacobians(model: Model, state: State) -> Array:
    """Generalized Jacobians (zero momentum) of every end point; ``(ne, 6, n)``."""
    return _generalized(inertia_matrix(model, state), end_point_jacobians(model, state))
