"""Joint references of the joint-space laws (:class:`~sdjax.control.JointPD`,
:class:`~sdjax.control.ComputedTorque`).

A reference is a callable ``t -> (q_d, qd_d, qdd_d)`` (each ``(n,)``; rad or m, per s, per s^2);
constant arrays are wrapped in :class:`JointReference`, and :class:`QuinticJointReference`
moves rest to rest with a quintic time law.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jax import Array

from sdjax._checks import check_vector, float_array

#: A joint reference: ``t -> (q_d, qd_d[, qdd_d])`` (or ``t -> q_d``).
Reference = Callable[[Array], Any]


class JointReference(eqx.Module):
    """A constant joint reference: a set point ``q_d`` with optional constant desired rates
    ``qd_d`` and accelerations ``qdd_d`` (feed-forward terms); called with the time, it
    returns the tuple ``(q_d, qd_d, qdd_d)``.

    Attributes:
        q: ``(n,)`` desired joint positions, rad or m.
        qd: ``(n,)`` desired joint rates (default zero).
        qdd: ``(n,)`` desired joint accelerations (default zero).
    """

    q: Array
    qd: Array
    qdd: Array

    def __init__(self, q: Any, qd: Any = None, qdd: Any = None):
        self.q = jnp.asarray(q)
        if self.q.ndim != 1:
            raise ValueError(f"JointReference: q expected shape (n,), got {self.q.shape}")
        n = self.q.shape[0]
        dtype = self.q.dtype if jnp.issubdtype(self.q.dtype, jnp.floating) else jnp.result_type(float)
        self.q = self.q.astype(dtype)
        self.qd = check_vector("JointReference: qd", qd, (n,), dtype)
        self.qdd = check_vector("JointReference: qdd", qdd, (n,), dtype)

    def __call__(self, t: Array) -> tuple[Array, Array, Array]:
        return self.q, self.qd, self.qdd


def _quintic(t: Array, start_time: Array, duration: Array) -> tuple[Array, Array, Array]:
    """Rest-to-rest quintic time scaling ``s = 10 x^3 - 15 x^4 + 6 x^5``, ``x = (t - t0)/T``
    clipped to [0, 1]; returns ``(s, ds/dt, d2s/dt2)``."""
    x = jnp.clip((t - start_time) / duration, 0.0, 1.0)
    s = x**3 * (10.0 + x * (-15.0 + 6.0 * x))
    ds = 30.0 * x**2 * (1.0 - x) ** 2 / duration
    dds = 60.0 * x * (1.0 - x) * (1.0 - 2.0 * x) / duration**2
    return s, ds, dds


class QuinticJointReference(eqx.Module):
    """Rest-to-rest joint motion from ``start`` to ``goal`` with a quintic time law
    (zero rate and acceleration at both ends); constant before ``start_time`` and after
    ``start_time + duration``.

    Attributes:
        start, goal: ``(n,)`` joint positions, rad or m.
        duration: ``()`` s, positive.
        start_time: ``()`` s.
    """

    start: Array
    goal: Array
    duration: Array
    start_time: Array

    def __init__(self, start: Any, goal: Any, duration: Any, start_time: Any = 0.0):
        # (floating and finite when concrete: a NaN goal would give a NaN torque without a word)
        self.start = float_array("QuinticJointReference: start", start, shape=(None,))
        self.goal = float_array("QuinticJointReference: goal", goal, shape=(None,))
        if self.start.shape != self.goal.shape:
            raise ValueError(
                f"QuinticJointReference: start and goal expected two (n,) vectors, got {self.start.shape} and {self.goal.shape}"
            )
        self.duration = float_array("QuinticJointReference: duration", duration, shape=(), sign="positive")
        self.start_time = float_array("QuinticJointReference: start_time", start_time, shape=())

    def __call__(self, t: Array) -> tuple[Array, Array, Array]:
        # Always in floating point: an integer time (``r(1)``) would truncate the duration.
        t = jnp.asarray(t)
        if not jnp.issubdtype(t.dtype, jnp.floating):
            t = t.astype(jnp.result_type(self.goal.dtype, self.duration.dtype))
        dtype = t.dtype
        s, ds, dds = _quintic(t, self.start_time.astype(dtype), self.duration.astype(dtype))
        delta = (self.goal - self.start).astype(dtype)
        return self.start.astype(dtype) + s * delta, ds * delta, dds * delta


def _as_reference(reference: Any, name: str) -> Reference:
    if callable(reference):
        return reference
    if isinstance(reference, tuple):
        if not 1 <= len(reference) <= 3:
            raise ValueError(f"{name}: a reference tuple is (q_d, qd_d[, qdd_d]), got {len(reference)} entries")
        return JointReference(*reference)
    return JointReference(reference)


def _evaluate_reference(reference: Reference, t: Array, n: int, dtype: Any, name: str) -> tuple[Array, Array, Array]:
    """``(q_d, qd_d, qdd_d)`` at ``t``, each ``(n,)`` of ``dtype`` (missing entries zero)."""
    value = reference(t)
    if not isinstance(value, (tuple, list)):
        value = (value,)
    if not 1 <= len(value) <= 3:
        raise ValueError(f"{name}: the reference must return (q_d, qd_d[, qdd_d]), got {len(value)} entries")
    value = tuple(value) + (None,) * (3 - len(value))
    q_d, qd_d, qdd_d = (
        check_vector(f"{name}: reference {label}", v, (n,), dtype) for label, v in zip(("q_d", "qd_d", "qdd_d"), value)
    )
    return q_d, qd_d, qdd_d


__all__ = ["JointReference", "QuinticJointReference"]
