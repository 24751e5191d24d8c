"""Independent-joint PD control and PD gains sized from motor torque limits (seed 003 eqs
113-114).

:class:`JointPD` is ``tau = Kp (q_d - q) + Kd (qd_d - qd)`` on each joint, without a model;
:func:`torque_limited_gains` sizes ``Kp`` and ``Kd`` from the motor torque limits.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax.control.references import Reference, _as_reference, _evaluate_reference
from sdjax._checks import float_array
from sdjax.state import State


def torque_limited_gains(
    tau_max: Any, max_error: Any, *, inertia: Any = None, damping_ratio: Any = 1.0
) -> tuple[Array, Array]:
    """PD gains sized from motor torque limits (seed 003 eqs 113-114).

    Eq 113 sets the stiffness so that the largest expected position error saturates the
    motor, ``Kp = tau_max / (q_D - q)_max``. Eq 114 is printed (in the extracted text of the
    seed) as ``K_D = 2 K_P``; the harmonic-oscillator argument it invokes gives critical
    damping of ``I e'' + Kd e' + Kp e = 0`` at ``Kd = 2 sqrt(Kp I)``, which is what is
    implemented here, generalised to a damping ratio ``zeta``:

        Kp = tau_max / max_error,    Kd = 2 zeta sqrt(Kp I)

    (with ``I = 1`` when ``inertia`` is omitted, i.e. ``Kd = 2 zeta sqrt(Kp)``).

    Use the result directly as the torque-level gains of :class:`JointPD` (``inertia`` = the
    joint's effective inertia, e.g. ``diag(generalized_inertia_matrix(...))``). For
    :class:`ComputedTorque`, whose ``u`` is an acceleration, divide both gains by the
    inertia (``Kp / I``, ``Kd / I``), giving the natural frequency ``sqrt(Kp / I)``.

    Arguments:
        tau_max: scalar or ``(n,)`` maximum motor torque/force, N m or N (positive).
        max_error: scalar or ``(n,)`` largest expected position error, rad or m (positive).
        inertia: scalar or ``(n,)`` effective joint inertia, kg m^2 or kg (default 1).
        damping_ratio: ``zeta`` (default 1, critical damping).

    Returns:
        ``(kp, kd)``, broadcast shape of the inputs.
    """
    for name, value in (
        ("tau_max", tau_max),
        ("max_error", max_error),
        ("inertia", inertia),
        ("damping_ratio", damping_ratio),
    ):
        if value is not None:
            float_array(f"torque_limited_gains: {name}", value, sign="positive")
    kp = jnp.asarray(tau_max) / jnp.asarray(max_error)
    stiffness = kp if inertia is None else kp * jnp.asarray(inertia)
    return kp, 2.0 * jnp.asarray(damping_ratio) * jnp.sqrt(stiffness)


class JointPD(eqx.Module):
    """Independent-joint PD law ``tau = Kp (q_d - q) + Kd (qd_d - qd)``; ``(t, state) -> (n,)``.

    The base is not measured or compensated; on a free-floating system the joint loop still
    converges (the reduced inertia ``H*`` is positive definite) while the base reacts.

    Attributes:
        kp: scalar or ``(n,)`` stiffness, N m/rad (N/m for prismatic joints).
        kd: scalar or ``(n,)`` damping, N m s/rad (N s/m).
        reference: a callable ``t -> (q_d, qd_d[, qdd_d])`` (or ``-> q_d``), e.g.
            :class:`QuinticJointReference`; pass constant arrays as ``q_d`` or as a tuple
            ``(q_d, qd_d)`` (wrapped in :class:`JointReference`).
    """

    kp: Array
    kd: Array
    reference: Reference

    def __init__(self, kp: Any, kd: Any, reference: Any):
        self.kp = float_array(
            "JointPD: kp", kp, shape=(None,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.kd = float_array(
            "JointPD: kd", kd, shape=(None,), scalar="keep", sign="non-negative", hint="one per joint"
        )
        self.reference = _as_reference(reference, "JointPD")

    def __call__(self, t: Array, state: State) -> Array:
        dtype = state.q.dtype
        n = state.q.shape[0]
        _check_gain_size("JointPD", self.kp, self.kd, n)
        q_d, qd_d, _ = _evaluate_reference(self.reference, jnp.asarray(t, dtype), n, dtype, "JointPD")
        return self.kp.astype(dtype) * (q_d - state.q) + self.kd.astype(dtype) * (qd_d - state.qd)


def _check_gain_size(name: str, kp: Array, kd: Array, n: int) -> None:
    for label, gain in (("kp", kp), ("kd", kd)):
        if gain.ndim == 1 and gain.shape != (n,):
            raise ValueError(f"{name}: {label} has shape {gain.shape}; expected a scalar or ({n},) for n={n} joints")


__all__ = ["JointPD", "torque_limited_gains"]
