"""Reaction null space (Nenchev, Yoshida and Umetani): joint motions that leave the base
angular velocity unchanged under conserved momentum.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import Array

from sdjax.algebra import matmul
from sdjax.dynamics import inertia_matrix
from sdjax.gjm import base_twist_from_free, solve_base_block
from sdjax.model import Model, check_no_mimic
from sdjax._checks import check_vector
from sdjax.state import State, check_state


def _base_angular_coupling(model: Model, state: State) -> Array:
    """``(3, n)`` map ``qd -> w0`` under zero momentum: the angular rows of ``-H_b^-1 H_bm``
    (eq 109), zero in the components the base mode fixes (all of them for a fixed base)."""
    h = inertia_matrix(model, state)
    nb = model.num_base_velocities
    coupling = -solve_base_block(model, h, h[:nb, nb:])  # (nb, n)
    return jax.vmap(lambda column: base_twist_from_free(model, column)[3:], in_axes=1, out_axes=1)(coupling)


@eqx.filter_jit
def reaction_null_space_projector(model: Model, state: State) -> Array:
    """Projector onto the reaction null space (Nenchev, Yoshida and Umetani): joint rates that
    leave the base angular velocity unchanged.

    Under conserved momentum the base angular velocity is ``w0 = G qd + w_M`` with
    ``G = (-H_b^-1 H_bm)[3:6]`` (rows 3:6 of eq 109's map) and ``w_M`` the part due to the
    momentum (zero for zero momentum). Joint rates in ``null(G)`` add no base rotation;
    ``P = E - G^+ G`` is the orthogonal projector onto it (rank ``n - rank G``, generically
    ``n - 3``; ``G`` is equivalent to the angular-momentum coupling about the system centre
    of mass, so the base may still translate). A planar base has one angular row (yaw; rank
    ``n - 1``), a fixed base none (``P = E``).

    Arguments:
        model, state: the system and its configuration (base attitude and ``q``).

    Returns:
        ``(n, n)`` symmetric idempotent projector.
    """
    check_no_mimic(model, "reaction_null_space_projector")
    check_state(model, state)
    coupling = _base_angular_coupling(model, state)
    projector = jnp.eye(model.num_joints, dtype=coupling.dtype) - matmul(jnp.linalg.pinv(coupling), coupling)
    return 0.5 * (projector + projector.T)


@eqx.filter_jit
def reaction_null_space_rates(model: Model, state: State, qd_desired: Any) -> Array:
    """Joint rates closest to ``qd_desired`` (Euclidean norm) that leave the base angular
    velocity undisturbed: ``P qd_desired`` (see :func:`reaction_null_space_projector`).

    Arguments:
        model, state: the system and its configuration.
        qd_desired: ``(n,)`` desired joint rates, rad/s or m/s.

    Returns:
        ``(n,)`` joint rates in the reaction null space.
    """
    check_state(model, state)
    qd = check_vector("reaction_null_space_rates: qd_desired", qd_desired, (model.num_joints,), state.q.dtype)
    return matmul(reaction_null_space_projector(model, state), qd)


__all__ = ["reaction_null_space_projector", "reaction_null_space_rates"]
